"""Tests of murk.offline: tiny offline checkpoints of the real architectures."""

import json

import numpy as np
import pytest
import torch

from murk.core import checkpoint_digest
from murk.core import _paths as paths
from murk.offline import MARKER_FILE, MAX_PIXELS, TINY_MODELS, build_tiny_checkpoint, ensure_tiny_checkpoint
from murk.offline._checkpoints import _BUILDERS

ARCHS = sorted(set(TINY_MODELS.values()))
CLASSES = {
    "smolvlm": ("SmolVLMForConditionalGeneration", "SmolVLMProcessor", "SmolVLMImageProcessor"),
    "qwen3vl": ("Qwen3VLForConditionalGeneration", "Qwen3VLProcessor", "Qwen2VLImageProcessor"),
    "internvl": ("InternVLForConditionalGeneration", "InternVLProcessor", "GotOcr2ImageProcessor"),
    "gemma": ("Gemma4ForConditionalGeneration", "Gemma4Processor", "Gemma4ImageProcessor"),
}


def test_all_five_families_have_a_tiny_id():
    assert set(TINY_MODELS) == {"murk-tiny/smolvlm", "murk-tiny/smolvlm2", "murk-tiny/qwen3vl",
                                "murk-tiny/internvl", "murk-tiny/gemma"}
    assert TINY_MODELS["murk-tiny/smolvlm2"] == "smolvlm"  # same classes as SmolVLM (see TINY_MODELS)
    assert set(ARCHS) == set(CLASSES)


def _inputs(processor, image, **kwargs):
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return processor(text=[text], images=[[image]], return_tensors="pt", **kwargs)


@pytest.mark.parametrize("arch", ARCHS)
def test_folder_loads_like_a_hub_checkpoint(arch, tiny_checkpoint_dirs):
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    folder = tiny_checkpoint_dirs[arch]
    marker = json.loads((folder / MARKER_FILE).read_text())
    assert marker == {"arch": arch, "seed": 0, "pipeline_check": True, "digest": checkpoint_digest(folder, None)}
    assert (folder / "chat_template.jinja").is_file()
    processor = AutoProcessor.from_pretrained(folder, local_files_only=True)
    model = AutoModelForImageTextToText.from_pretrained(folder, local_files_only=True).eval()
    assert (type(model).__name__, type(processor).__name__, type(processor.image_processor).__name__) == CLASSES[arch]
    assert model.config.text_config.vocab_size == len(processor.tokenizer)

    # save_pretrained -> from_pretrained reproduces the logits of the freshly built model exactly
    with torch.random.fork_rng(devices=[]):
        fresh, _ = _BUILDERS[arch](0)
    fresh.eval()
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (200, 300, 3), dtype=np.uint8))
    inputs = _inputs(processor, image)
    with torch.inference_mode():
        a = fresh(**inputs).logits
        b = model(**inputs).logits
    assert a.shape[-1] == len(processor.tokenizer)
    assert torch.equal(a, b)


@pytest.mark.parametrize("arch", ARCHS)
def test_same_seed_same_weights(arch, tmp_path):
    from safetensors.torch import load_file

    w0 = load_file(build_tiny_checkpoint(arch, tmp_path / "a", seed=3) / "model.safetensors")
    w1 = load_file(build_tiny_checkpoint(arch, tmp_path / "b", seed=3) / "model.safetensors")
    w2 = load_file(build_tiny_checkpoint(arch, tmp_path / "c", seed=4) / "model.safetensors")
    assert w0.keys() == w1.keys() == w2.keys()
    assert all(torch.equal(w0[k], w1[k]) for k in w0)
    assert not all(torch.equal(w0[k], w2[k]) for k in w0)
    # rebuilding over an existing folder replaces it atomically; no temp folders left behind
    build_tiny_checkpoint(arch, tmp_path / "a", seed=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "c"]


def test_single_tile_and_pixel_budget(tiny_vlms):
    """One tile, at most 448^2 pixels, also for an image larger than 448 px."""
    from PIL import Image

    big = Image.fromarray(np.full((900, 1300, 3), 100, dtype=np.uint8))
    smol = tiny_vlms["smolvlm"]
    inputs = _inputs(smol.processor, big, **smol.image_kwargs)
    assert tuple(inputs["pixel_values"].shape) == (1, 1, 3, 384, 384)  # (batch, tiles, C, H, W)
    qwen = tiny_vlms["qwen3vl"]
    inputs = _inputs(qwen.processor, big, **qwen.image_kwargs)
    (t, h, w), = inputs["image_grid_thw"].tolist()
    patch = qwen.processor.image_processor.patch_size
    assert t == 1 and h * w * patch * patch <= MAX_PIXELS
    # the saved processor itself already enforces the budget (no call-time arguments)
    (t, h, w), = _inputs(qwen.processor, big)["image_grid_thw"].tolist()
    assert h * w * patch * patch <= MAX_PIXELS


@pytest.mark.parametrize("arch", ARCHS)
def test_coco_sized_image_is_one_tile_of_at_most_448sq(arch, tiny_vlms):
    """A 640 x 480 image reaches each model as one tile of at most 448^2 pixels."""
    from murk.readout import present_image

    vlm = tiny_vlms[arch]
    shown = present_image(np.full((480, 640, 3), 90, dtype=np.uint8))
    assert shown.size == (448, 336)
    inputs = _inputs(vlm.processor, shown, **vlm.image_kwargs)
    pv = inputs["pixel_values"]
    if arch == "smolvlm":
        assert tuple(pv.shape) == (1, 1, 3, 384, 384)  # (batch, tiles, C, H, W)
        pixels = 384 * 384
    elif arch == "qwen3vl":
        (t, h, w), = inputs["image_grid_thw"].tolist()
        assert t == 1
        pixels = h * w * 16 * 16
    elif arch == "internvl":
        assert tuple(pv.shape) == (1, 3, 448, 448)  # (tiles, C, H, W): crop_to_patches=False
        pixels = 448 * 448
    else:  # gemma: one padded patch list; real patches are those with a position
        assert pv.shape[0] == 1
        pixels = int((inputs["image_position_ids"][0] != -1).all(-1).sum()) * 16 * 16
    assert 0 < pixels <= MAX_PIXELS
    n_image_tokens = int((inputs["input_ids"][0] == vlm.model.config.image_token_id).sum())
    assert 0 < n_image_tokens <= vlm.n_visual_tokens


def test_internvl_tiles_without_the_call_time_argument(tiny_checkpoint_dirs):
    """The pitfall of shared/notes: the InternVL processor's own default tiles."""
    from PIL import Image
    from transformers import AutoProcessor

    proc = AutoProcessor.from_pretrained(tiny_checkpoint_dirs["internvl"])
    big = Image.fromarray(np.full((480, 1300, 3), 100, dtype=np.uint8))
    assert _inputs(proc, big)["pixel_values"].shape[0] > 1
    assert _inputs(proc, big, crop_to_patches=False)["pixel_values"].shape[0] == 1


def test_gemma4_budget():
    from murk.offline._checkpoints import gemma4_max_soft_tokens

    assert gemma4_max_soft_tokens() == 70  # 70 * 9 * 256 = 161,280 px <= 448^2 < 140 * 9 * 256
    with pytest.raises(ValueError):
        gemma4_max_soft_tokens(1000)


def test_call_time_arguments_override_processor_defaults(tiny_checkpoint_dirs):
    """A hub processor that tiles (SmolVLM) or allows more pixels (Qwen) is held to one tile."""
    from PIL import Image
    from transformers import AutoProcessor

    from murk.readout import single_tile_kwargs

    big = Image.fromarray(np.full((900, 1300, 3), 100, dtype=np.uint8))
    smol = AutoProcessor.from_pretrained(tiny_checkpoint_dirs["smolvlm"])
    smol.image_processor.do_image_splitting = True
    smol.image_processor.size = {"longest_edge": 4 * 384}
    assert _inputs(smol, big)["pixel_values"].shape[1] > 1  # tiles without the arguments
    assert _inputs(smol, big, **single_tile_kwargs(smol, 448))["pixel_values"].shape[1] == 1
    qwen = AutoProcessor.from_pretrained(tiny_checkpoint_dirs["qwen3vl"])
    qwen.image_processor.size = {"shortest_edge": 1024, "longest_edge": 4 * MAX_PIXELS}
    (_, h, w), = _inputs(qwen, big)["image_grid_thw"].tolist()
    assert h * w * 256 > MAX_PIXELS
    (_, h, w), = _inputs(qwen, big, **single_tile_kwargs(qwen, 448))["image_grid_thw"].tolist()
    assert h * w * 256 <= MAX_PIXELS


def test_ensure_tiny_checkpoint(tmp_path):
    folder = ensure_tiny_checkpoint("murk-tiny/qwen3vl", root=tmp_path)
    assert folder == paths.checkpoints_dir(tmp_path) / "murk-tiny--qwen3vl"
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert ensure_tiny_checkpoint("murk-tiny/qwen3vl", root=tmp_path) == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp  # not rebuilt
    with pytest.raises(KeyError, match="tiny model"):
        ensure_tiny_checkpoint("murk-tiny/nope", root=tmp_path)
    with pytest.raises(ValueError, match="architecture"):
        build_tiny_checkpoint("nope", tmp_path / "x")


# ----------------------------------------------------------------- real-format checkpoints (issue 12)
def test_realformat_ids_build_into_the_output_root_and_load_by_id(tmp_path):
    from murk.offline import REALFORMAT_MODELS, ensure_offline_checkpoint, real_model_files_dir
    from murk.readout import load_vlm

    try:
        real_model_files_dir()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    assert all(m.startswith("murk-realformat/") for m in REALFORMAT_MODELS)
    vlm = load_vlm("murk-realformat/smolvlm", device="cpu", root=tmp_path)
    folder = paths.checkpoints_dir(tmp_path) / "murk-realformat--smolvlm"
    assert vlm.model_id == "murk-realformat/smolvlm" and vlm.is_pipeline_check
    assert json.loads((folder / MARKER_FILE).read_text())["format"] == "real"
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert ensure_offline_checkpoint("murk-realformat/smolvlm", tmp_path) == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp  # built once
    # the real files are read from shared/, never copied into the project's sources
    for sub in ("lib", "tests", "data", "notebooks", "benchmarks"):
        for name in ("merges.txt", "vocab.json", "chat_template.jinja", "tokenizer.json"):
            assert not any((paths.project_root() / sub).rglob(name)), (sub, name)


def test_realformat_same_seed_same_weights(tmp_path):
    from safetensors.torch import load_file

    from murk.offline import build_realformat_checkpoint, real_model_files_dir

    try:
        real_model_files_dir()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    a = load_file(build_realformat_checkpoint("smolvlm2", tmp_path / "a", seed=1) / "model.safetensors")
    b = load_file(build_realformat_checkpoint("smolvlm2", tmp_path / "b", seed=1) / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    build_realformat_checkpoint("smolvlm2", tmp_path / "a", seed=2)  # rebuilt in place, atomically
    c = load_file(tmp_path / "a" / "model.safetensors")
    assert not all(torch.equal(a[k], c[k]) for k in a)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]


def test_realformat_needs_the_real_files(tmp_path, monkeypatch):
    from murk.offline import REAL_FILES_ENV, build_realformat_checkpoint, real_model_files_dir

    monkeypatch.setenv(REAL_FILES_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match=REAL_FILES_ENV):
        real_model_files_dir()
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="vocab.json"):
        build_realformat_checkpoint("qwen3vl", tmp_path / "out", files_dir=tmp_path / "empty")
    assert not (tmp_path / "out").exists() and [p.name for p in tmp_path.iterdir()] == ["empty"]
    with pytest.raises(ValueError, match="family"):
        build_realformat_checkpoint("llava", tmp_path / "out")


def test_gemma4_standin_has_the_real_special_ids(realformat_checkpoint_dirs):
    from transformers import AutoTokenizer

    from murk.offline._realformat import GEMMA4_SPECIAL_IDS, GEMMA4_VOCAB_ROWS

    tok = AutoTokenizer.from_pretrained(realformat_checkpoint_dirs["gemma4"])
    assert len(tok) == GEMMA4_VOCAB_ROWS
    for text, i in GEMMA4_SPECIAL_IDS.items():
        assert tok.convert_tokens_to_ids(text) == i, text
        assert tok(text, add_special_tokens=False)["input_ids"] == [i], text
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (2, 1, 0)
    assert tok.image_token == "<|image|>" and tok.image_token_id == 258_880  # named in the real tokenizer_config


def test_internvl_tokenizer_config_follows_the_converter():
    from murk.offline import internvl_tokenizer_config, real_model_files_dir
    from murk.offline._realformat import INTERNVL_NAMED_TOKENS

    try:
        src = real_model_files_dir() / "qwen3-vl-instruct" / "tokenizer_config.json"
    except FileNotFoundError as err:
        pytest.skip(str(err))
    cfg = internvl_tokenizer_config(json.loads(src.read_text()))
    ids = {v["content"]: int(k) for k, v in cfg["added_tokens_decoder"].items()}
    assert ids["<|endoftext|>"] == 151_643 and ids["<|im_end|>"] == 151_645 and ids["<|file_sep|>"] == 151_664
    assert (ids["<img>"], ids["</img>"], ids["<IMG_CONTEXT>"]) == (151_665, 151_666, 151_667)  # converter's id
    assert "<think>" not in ids  # Qwen2.5-VL's added tokens, not Qwen3's
    assert cfg["extra_special_tokens"] == INTERNVL_NAMED_TOKENS and cfg["model_max_length"] == 8192
    assert "extra_special_tokens" not in internvl_tokenizer_config(json.loads(src.read_text()), named=False)
