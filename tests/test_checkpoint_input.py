"""Checkpoints that cannot be read out: one line naming the file and the fix, in the user's words (issue 21).

Each case is a tiny checkpoint built in tmp (``tests/conftest.py``'s ``tiny_checkpoint_dirs``, or a
tiny random text-only / vision-only model saved with ``save_pretrained``) and loaded with
``murk.readout.load_vlm`` as the read-out notebook does. The Snakemake words are checked through
Snakemake in ``tests/scenarios/test_faults_snakemake.py``.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from murk import readout
from murk.offline import _checkpoints as checkpoints
from murk.offline import _models
from murk.readout import CheckpointFileError, check_weight_files, load_vlm, safetensors_tensor_names, setting_words


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _one_line_error(folder, **kw) -> str:
    with pytest.raises(OSError) as err:
        load_vlm(str(folder), device="cpu", **kw)
    msg = str(err.value)
    assert "\n" not in msg and "fix:" in msg, msg
    return msg


# ----------------------------------------------------------------- damaged weights files
def _truncate(frac):
    def f(p: Path):
        b = p.read_bytes()
        p.write_bytes(b[: int(len(b) * frac)])
    return f


def _header_json(p: Path):
    b = bytearray(p.read_bytes())
    b[9:19] = b"\x00" * 10  # inside the JSON header
    p.write_bytes(bytes(b))


def _extra_bytes(p: Path):
    p.write_bytes(p.read_bytes() + b"\x00" * 16)


DAMAGES = {  # damage -> (what it does to the file, words the message uses)
    "truncated to half": (_truncate(0.5), "is truncated"),
    "cut inside the header": (_truncate(0.004), "is truncated"),
    "4 bytes left": (_truncate(4 / 935312), "too short"),
    "empty": (lambda p: p.write_bytes(b""), "too short"),
    "random bytes": (lambda p: p.write_bytes(b"\xff" * 1000), "not a safetensors file"),
    "a Git LFS pointer": (lambda p: p.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:"
                                                 f"{'0' * 64}\nsize 935312\n"), "Git LFS pointer"),
    "a damaged header": (_header_json, "damaged header"),
    "bytes appended": (_extra_bytes, "is damaged"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_the_header_check_agrees_with_safetensors(damage, tiny_checkpoint_dirs, tmp_path):
    """Every damage safetensors itself refuses (a SafetensorError naming no file) is found by the header
    check, which names the file; an intact file gives safetensors' own tensor names."""
    from safetensors import SafetensorError, safe_open

    src = tiny_checkpoint_dirs["qwen3vl"] / "model.safetensors"
    with safe_open(str(src), "pt") as f:
        assert safetensors_tensor_names(src) == set(f.keys())
    p = tmp_path / "model.safetensors"
    shutil.copy(src, p)
    mutate, words = DAMAGES[damage]
    mutate(p)
    if damage != "bytes appended":  # safetensors reads a file with trailing bytes without a word
        with pytest.raises(SafetensorError):
            with safe_open(str(p), "pt"):
                pass
    with pytest.raises(CheckpointFileError) as err:
        safetensors_tensor_names(p)
    assert err.value.path == p and words in err.value.problem and str(p) in str(err.value)


@pytest.mark.parametrize("damage", ["truncated to half", "random bytes", "a Git LFS pointer"])
def test_a_damaged_model_safetensors_is_named_with_the_right_fix(damage, tiny_checkpoint_dirs, tmp_path):
    folder = _copy(tiny_checkpoint_dirs["smolvlm"], tmp_path / "ckpt")
    mutate, words = DAMAGES[damage]
    mutate(folder / "model.safetensors")
    msg = _one_line_error(folder)
    assert f"{folder / 'model.safetensors'} " in msg and words in msg
    assert "transformers version" not in msg and "tokenizer and processor files" not in msg  # the old, wrong fix
    fix = msg.split("fix:", 1)[1]
    assert ("git lfs pull" in fix) if damage == "a Git LFS pointer" else ("model.safetensors" in fix and
                                                                           str(folder) in fix)


def test_a_damaged_offline_checkpoint_says_delete_and_rerun_and_that_works(tmp_path):
    """A checkpoint murk builds on first use (murk-tiny/...) with a truncated weights file: the fix is to
    delete its folder and rerun; doing so loads the rebuilt checkpoint."""
    model = "murk-tiny/smolvlm"
    folder = _models.ensure_offline_checkpoint(model, tmp_path)
    _truncate(0.5)(folder / "model.safetensors")
    with pytest.raises(OSError) as err:
        load_vlm(model, device="cpu", root=tmp_path)
    msg = str(err.value)
    assert "\n" not in msg and str(folder / "model.safetensors") in msg and f"rm -r {folder}" in msg
    shutil.rmtree(folder)  # the fix as given
    assert load_vlm(model, device="cpu", root=tmp_path).model_id == model


@pytest.fixture(scope="module")
def sharded(tiny_checkpoint_dirs, tmp_path_factory):
    """The tiny Qwen3-VL checkpoint saved in four shards with model.safetensors.index.json."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    src = tiny_checkpoint_dirs["qwen3vl"]
    out = tmp_path_factory.mktemp("sharded") / "qwen3vl-sharded"
    AutoModelForImageTextToText.from_pretrained(src).save_pretrained(out, max_shard_size="300KB")
    AutoProcessor.from_pretrained(src).save_pretrained(out)
    shards = sorted(p.name for p in out.glob("model-*-of-*.safetensors"))
    assert len(shards) >= 3 and not (out / "model.safetensors").exists()
    assert [p.name for p in check_weight_files(out)] == shards
    return out, shards


def test_a_sharded_checkpoint_loads(sharded):
    out, _ = sharded
    assert type(load_vlm(str(out), device="cpu").model).__name__ == "Qwen3VLForConditionalGeneration"


@pytest.mark.parametrize("fault", ["shard truncated", "shard deleted", "shard of another place", "index deleted"])
def test_a_damaged_or_missing_shard_is_named(fault, sharded, tmp_path):
    out, shards = sharded
    folder = _copy(out, tmp_path / "ckpt")
    bad = folder / shards[1]
    if fault == "shard truncated":
        _truncate(0.3)(bad)
        words = "is truncated"
    elif fault == "shard deleted":
        bad.unlink()
        words = "is missing: model.safetensors.index.json assigns"
    elif fault == "shard of another place":
        shutil.copy(folder / shards[0], bad)  # a whole file, but not the tensors the index puts there
        words = "lacks"
    else:
        bad = folder / "model.safetensors.index.json"
        bad.unlink()
        words = "is missing: the folder holds the shards"
    msg = _one_line_error(folder)
    assert f"{bad} " in msg and words in msg, msg
    assert bad.name in msg.split("fix:", 1)[1] and "allow_pickle" not in msg  # pickles are not the fix


def test_a_folder_without_weights_is_named_and_pickles_are_not_the_fix(tiny_checkpoint_dirs, tmp_path):
    folder = _copy(tiny_checkpoint_dirs["qwen3vl"], tmp_path / "no-weights")
    (folder / "model.safetensors").unlink()
    msg = _one_line_error(folder)
    assert f"{folder} holds no weights" in msg and "allow_pickle" not in msg


def test_weights_the_model_needs_but_no_file_holds_are_refused(tiny_checkpoint_dirs, tmp_path):
    """A whole file that lacks a tensor: transformers would fill it with random numbers; murk refuses."""
    from safetensors.torch import load_file, save_file

    folder = _copy(tiny_checkpoint_dirs["qwen3vl"], tmp_path / "incomplete")
    weights = load_file(folder / "model.safetensors")
    dropped = sorted(k for k in weights if k.endswith("mlp.down_proj.weight"))[0]
    del weights[dropped]
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    msg = _one_line_error(folder)
    assert str(folder / "model.safetensors") in msg and "lack 1 of the model's weights" in msg
    assert dropped.split(".")[-3] in msg  # the missing weight's name (transformers' naming) is given


# ----------------------------------------------------------------- not an image-text model
def _byte_tokenizer():
    return checkpoints._byte_level_tokenizer({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, [], {})


def _text_only(kind: str, folder: Path) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    tok = _byte_tokenizer()
    sizes = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                 num_key_value_heads=1, vocab_size=len(tok))
    torch.manual_seed(0)
    net = LlamaForCausalLM(LlamaConfig(**sizes)) if kind == "llama" else Qwen2ForCausalLM(Qwen2Config(**sizes))
    net.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _vision_only(folder: Path) -> Path:
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    ViTForImageClassification(ViTConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, image_size=32, patch_size=16)).save_pretrained(folder)
    ViTImageProcessor().save_pretrained(folder)
    return folder


@pytest.mark.parametrize("kind,arch,what", [("llama", "LlamaForCausalLM", "a text-only language model"),
                                            ("qwen2", "Qwen2ForCausalLM", "a text-only language model"),
                                            ("vit", "ViTForImageClassification", "a vision-only model")])
def test_a_checkpoint_that_is_not_an_image_text_model_says_what_it_is(kind, arch, what, tmp_path, monkeypatch):
    folder = _vision_only(tmp_path / kind) if kind == "vit" else _text_only(kind, tmp_path / kind)
    msg = _one_line_error(folder)
    assert f"{folder / 'config.json'} describes {what} (model_type '{kind}', architectures {arch})" in msg
    assert "image-text-to-text" in msg and "Unrecognized configuration class" not in msg
    assert "load_vlm an image-text-to-text model" in msg.split("fix:", 1)[1]
    monkeypatch.setenv("MURK_OFFLINE", "1")
    assert "-p model <an image-text-to-text model" in _one_line_error(folder, command="papermill")
    assert "--config offline_models=" in _one_line_error(folder, command="snakemake")


def test_the_study_architectures_are_image_text_models(tiny_checkpoint_dirs):
    from transformers import AutoConfig

    for arch, folder in tiny_checkpoint_dirs.items():
        assert readout.model_kind(AutoConfig.from_pretrained(folder)) is None, arch


# ----------------------------------------------------------------- the words of the command that ran
def test_setting_words_per_command():
    assert setting_words("allow_pickle", True) == "pass allow_pickle=True to murk.readout.load_vlm"
    assert "-p allow_pickle True" in setting_words("allow_pickle", True, "papermill")
    sm = setting_words("trust_remote_code", True, "snakemake")
    assert "--config trust_remote_code=true" in sm and "make demo ARGS='--config trust_remote_code=true'" in sm
    assert "load_vlm" not in sm and "=True" not in sm
    with pytest.raises(ValueError, match="command='bash'"):
        setting_words("allow_pickle", True, "bash")


@pytest.mark.parametrize("command,words", [("python", "allow_pickle=True to murk.readout.load_vlm"),
                                           ("papermill", "-p allow_pickle True"),
                                           ("snakemake", "--config allow_pickle=true")])
def test_the_pickle_refusal_speaks_the_users_command(command, words, tiny_checkpoint_dirs, tmp_path):
    import torch
    from safetensors.torch import load_file

    folder = _copy(tiny_checkpoint_dirs["smolvlm"], tmp_path / "pickled")
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    msg = _one_line_error(folder, command=command)
    assert "pytorch_model.bin" in msg and words in msg
    assert (command == "python") == ("murk.readout.load_vlm" in msg)


def _remote_code_folder(folder: Path, ran: Path) -> Path:
    folder.mkdir()
    (folder / "configuration_murk_remote.py").write_text(
        f"open({str(ran)!r}, 'w').write('x')\nfrom transformers import PretrainedConfig\n"
        "class MurkRemoteConfig(PretrainedConfig):\n    model_type = 'murk_remote'\n")
    (folder / "config.json").write_text(json.dumps({
        "model_type": "murk_remote", "architectures": ["MurkRemoteModel"],
        "auto_map": {"AutoConfig": "configuration_murk_remote.MurkRemoteConfig"}}))
    (folder / "model.safetensors").write_bytes(b"")  # the config is refused first: the weights are not reached
    return folder


@pytest.mark.parametrize("command,words", [("papermill", "-p trust_remote_code True"),
                                           ("snakemake", "--config trust_remote_code=true")])
def test_the_remote_code_refusal_speaks_the_users_command(command, words, tmp_path):
    ran = tmp_path / "code-ran"
    folder = _remote_code_folder(tmp_path / "remote", ran)
    msg = _one_line_error(folder, command=command)
    assert words in msg and "load_vlm" not in msg and str(folder) in msg and not ran.exists()


def test_load_vlm_refuses_an_unknown_command(tiny_checkpoint_dirs):
    with pytest.raises(ValueError, match="command='make'"):
        load_vlm(str(tiny_checkpoint_dirs["smolvlm"]), device="cpu", command="make")


# ----------------------------------------------------------------- custom code never bypassed silently
def test_custom_code_of_a_known_model_type_is_not_run_and_says_which_class_was_used(
        tiny_checkpoint_dirs, tmp_path, caplog):
    """auto_map in config.json and tokenizer_config.json of a qwen3_vl checkpoint, trust_remote_code false:
    transformers loads its built-in classes without a word; murk warns, naming both classes."""
    folder = _copy(tiny_checkpoint_dirs["qwen3vl"], tmp_path / "declares-code")
    ran = tmp_path / "code-ran"
    (folder / "modeling_murk_x.py").write_text(f"open({str(ran)!r}, 'w').write('x')\n")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["auto_map"] = {"AutoConfig": "modeling_murk_x.XConfig",
                       "AutoModelForImageTextToText": "modeling_murk_x.XForConditionalGeneration"}
    (folder / "config.json").write_text(json.dumps(cfg))
    tok = json.loads((folder / "tokenizer_config.json").read_text())
    tok["auto_map"] = {"AutoTokenizer": [None, "modeling_murk_x.XTokenizerFast"]}
    (folder / "tokenizer_config.json").write_text(json.dumps(tok))
    with caplog.at_level(logging.WARNING, logger="murk"):
        vlm = load_vlm(str(folder), device="cpu")
    assert not ran.exists()
    assert vlm.custom_code_not_run == {
        "config.json AutoConfig": "modeling_murk_x.XConfig -> Qwen3VLConfig",
        "config.json AutoModelForImageTextToText":
            "modeling_murk_x.XForConditionalGeneration -> Qwen3VLForConditionalGeneration",
        "tokenizer_config.json AutoTokenizer": f"modeling_murk_x.XTokenizerFast -> {type(vlm.tokenizer).__name__}"}
    note = readout.custom_code_note(vlm.custom_code_not_run)
    assert "\n" not in note and "trust_remote_code is false" in note
    assert ("config.json AutoModelForImageTextToText names modeling_murk_x.XForConditionalGeneration: the built-in "
            "transformers class Qwen3VLForConditionalGeneration was used instead") in note
    assert any(note in r.getMessage() and str(folder) in r.getMessage() for r in caplog.records)
    # the checkpoints without auto_map say nothing
    assert load_vlm(str(tiny_checkpoint_dirs["qwen3vl"]), device="cpu").custom_code_not_run == {}
    assert readout.custom_code_note({}) == ""


# ----------------------------------------------------------------- the same for a hub id (a Hugging Face cache)
HUB_ID = "murk-test/tiny-vlm"


def _hub_snapshot(src: Path, cache: Path, monkeypatch) -> Path:
    """``src`` as the cached snapshot of :data:`HUB_ID` (the hub cache layout: blobs linked from a snapshot)."""
    import huggingface_hub.constants as hf_constants

    repo = cache / f"models--{HUB_ID.replace('/', '--')}"
    commit = "0123456789abcdef" * 2 + "01234567"
    snap = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    for i, f in enumerate(sorted(p for p in src.iterdir() if p.is_file())):
        blob = repo / "blobs" / f"{i:064x}"
        shutil.copy(f, blob)
        (snap / f.name).symlink_to(blob)
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("MURK_OFFLINE", "1")
    return snap


def test_a_truncated_weights_file_of_a_hub_snapshot_is_named(tiny_checkpoint_dirs, tmp_path, monkeypatch):
    src = _copy(tiny_checkpoint_dirs["qwen3vl"], tmp_path / "src")
    (src / checkpoints.MARKER_FILE).unlink()  # a hub checkpoint, not one of murk's
    snap = _hub_snapshot(src, tmp_path / "hub", monkeypatch)
    vlm = load_vlm(HUB_ID, device="cpu")
    assert vlm.model_id == HUB_ID  # the snapshot loads as a hub id
    assert vlm.revision == snap.name  # its commit (transformers 5 sets no config._commit_hash): the store identity
    blob = (snap / "model.safetensors").resolve()
    data = blob.read_bytes()
    blob.write_bytes(data[: len(data) // 2])
    with pytest.raises(OSError) as err:
        load_vlm(HUB_ID, device="cpu", command="snakemake")
    msg = str(err.value)
    assert "\n" not in msg and f"{snap / 'model.safetensors'} is truncated" in msg
    assert f"hf download {HUB_ID} model.safetensors --force-download" in msg and "transformers version" not in msg


def test_custom_code_of_a_hub_snapshot_is_reported(tiny_checkpoint_dirs, tmp_path, monkeypatch):
    src = _copy(tiny_checkpoint_dirs["smolvlm"], tmp_path / "src")
    (src / checkpoints.MARKER_FILE).unlink()
    tok = json.loads((src / "tokenizer_config.json").read_text())
    tok["auto_map"] = {"AutoTokenizer": ["tok_x.XTokenizer", None]}
    (src / "tokenizer_config.json").write_text(json.dumps(tok))
    _hub_snapshot(src, tmp_path / "hub", monkeypatch)
    vlm = load_vlm(HUB_ID, device="cpu")
    assert vlm.custom_code_not_run == {"tokenizer_config.json AutoTokenizer":
                                       f"tok_x.XTokenizer -> {type(vlm.tokenizer).__name__}"}
