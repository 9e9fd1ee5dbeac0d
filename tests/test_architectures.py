"""The five study models at their published configurations, on the meta device (issue 38, item 1).

Each model of :data:`murk.readout.PUBLISHED` is built with
``AutoModelForImageTextToText.from_config`` under ``torch.device("meta")`` (shapes, no
memory) under the installed transformers, with the real processor and tokenizer of
its family where ``shared/real-model-files`` has them (the real-format checkpoints'
processors: Qwen3-VL's real files; SmolVLM2's sizes on SmolVLM-256M's files;
InternVL3.5 as transformers' converter writes it; Gemma 4's real processor config
with a stand-in tokenizer), and checked for:

* the parameter total against the published one (tolerances and sources in
  ``PUBLISHED``: Qwen3-VL-2B 2.128 B within 0.5 %, Qwen3-VL-4B 4.44 B within 1 %,
  InternVL3.5-2B 2.3 B within 2.2 % (the model card rounds to 0.1 B), SmolVLM2 2.25 B
  within 1 %, Gemma-4-E2B 5.1 B with its audio encoder within 1 %);
* batch sizing (:func:`murk.readout.auto_images_per_batch`) for a 16-GiB and a
  141-GiB CUDA device, the memory estimate term by term, the FLOP count of
  ``benchmarks/flops.py``, the attention masks, and the visual tokens of a COCO
  image at <= 448 px, one tile;
* the configuration accessor on Gemma 4's per-layer head sizes (256 / 512), which
  ``getattr`` cannot read under transformers >= 5.20.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from murk.core import load_config
from murk.protocol import EXAMPLE_ITEM, questions_for_item
from murk.readout import _device
from murk.readout import _memory
from murk.readout import _rows
from murk.readout import _schedule
from murk.readout import item_prompts, present_image, vlm_from_parts
from murk.readout import _architectures as A

ROOT = Path(__file__).resolve().parents[1]
MODELS = list(A.PUBLISHED)
#: the real-format checkpoint (murk.offline.REALFORMAT_MODELS) whose processor each model reads with
PROCESSOR_OF = {"Qwen/Qwen3-VL-2B-Instruct": "qwen3vl", "Qwen/Qwen3-VL-4B-Instruct": "qwen3vl",
                "OpenGVLab/InternVL3_5-2B-HF": "internvl", "HuggingFaceTB/SmolVLM2-2.2B-Instruct": "smolvlm2",
                "google/gemma-4-E2B-it": "gemma4"}
GIB = 1 << 30


def _meta_model(config):
    import torch
    from transformers import AutoModelForImageTextToText

    with torch.device("meta"):
        return AutoModelForImageTextToText.from_config(config)


@pytest.fixture(scope="module")
def vlms(realformat_checkpoint_dirs):
    """{model id: VLM}: the published architecture on the meta device, the family's real processor, treated as a
    bfloat16 model on CUDA (as the study runs)."""
    import torch
    from transformers import AutoProcessor

    cfg = load_config()
    procs = {fam: AutoProcessor.from_pretrained(realformat_checkpoint_dirs[fam]) for fam in set(PROCESSOR_OF.values())}
    out = {}
    for name in MODELS:
        net = _meta_model(A.published_config(name))
        vlm = vlm_from_parts(net, procs[PROCESSOR_OF[name]], name, "published-config", True, "cpu", torch.bfloat16,
                             cfg)
        out[name] = dataclasses.replace(vlm, device="cuda")  # sized as on CUDA; nothing is moved (host inputs)
    return out


@pytest.mark.parametrize("name", MODELS)
def test_parameter_count_is_the_published_one(name, vlms):
    spec = A.PUBLISHED[name]
    net = vlms[name].model
    if spec.get("parameters_count_with"):  # towers the published total counts but murk does not build (audio)
        net = _meta_model(A.published_config(name, **spec["parameters_count_with"]))
    n = sum(p.numel() for p in net.parameters())
    assert abs(n / spec["parameters"] - 1) <= spec["parameters_rtol"], (name, n, spec["parameters_source"])


@pytest.mark.parametrize("name", MODELS)
def test_token_ids_are_the_processors(name, vlms):
    """The published token ids in the model config are the ones the real processor's tokenizer writes."""
    vlm = vlms[name]
    top = A.PUBLISHED[name]["top"]
    assert vlm.tokenizer.convert_tokens_to_ids(vlm.processor.image_token) == top["image_token_id"]


@pytest.mark.parametrize("name", MODELS)
def test_batches_sized_for_16_and_141_gib(name, vlms):
    vlm = vlms[name]
    small = _memory.auto_images_per_batch(vlm, free_bytes=16 * GIB)
    big = _memory.auto_images_per_batch(vlm, free_bytes=141 * GIB)
    assert 1 <= small <= big <= 8  # 8: the CUDA cap
    assert big == 8, (name, big)  # an H200 holds the cap for every study model


def _probe(vlm):
    cfg = load_config()
    slots = item_prompts(questions_for_item(EXAMPLE_ITEM, cfg), cfg, ("v1",))
    grey = np.full((vlm.max_side_px, vlm.max_side_px, 3), 128, dtype=np.uint8)
    row = _rows._prepare_row(vlm, present_image(grey, vlm.max_side_px), slots, cfg)
    assert not isinstance(row, str), row
    return row


@pytest.mark.parametrize("name", MODELS)
def test_memory_estimate_counts_each_layer_padding_and_copies(name, vlms):
    vlm = vlms[name]
    row = _probe(vlm)
    tc = A.PUBLISHED[name]["text"]
    n, e, g, v, max_new = row.n, row.n_end, len(row.gen_ends), row.n_vision, 12
    L = math.ceil(n / 32) * 32
    terms = _memory._row_bytes_terms(vlm, n, e, g, max_new, v, length=L)
    T = L + g * max_new
    # the KV cache from the published values, layer by layer (bf16: 2 bytes)
    if name == "google/gemma-4-E2B-it":  # 15 layers store a cache: 12 sliding (head 256), 3 full (head 512)
        per_slot = 2 * 1 * (12 * 256 + 3 * 512) * 2
    else:
        per_slot = tc["num_hidden_layers"] * 2 * tc["num_key_value_heads"] * tc["head_dim"] * 2
    assert terms["kv_cache"] == T * per_slot
    # K/V copied to every query head under a custom mask where there are fewer KV heads (not SmolVLM2: 32 = 32)
    heads, kv = tc["num_attention_heads"], tc["num_key_value_heads"]
    widest = max(tc["head_dim"], tc.get("global_head_dim", 0))
    assert terms["repeat_kv"] == (2 * heads * widest * T * 2 if kv < heads else 0)
    assert all(t >= 0 for t in terms.values()) and terms["masks"] >= 2 * L * L
    # padding counts: the same row padded by one more bucket costs more
    assert _memory._row_bytes(vlm, n, e, g, max_new, v, length=L + 32) > sum(terms.values())


@pytest.mark.parametrize("name", MODELS)
def test_flop_count(name, vlms):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from flops import model_flops
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    tc = A.PUBLISHED[name]["text"]
    vlm = vlms[name]
    # one (query, key) pair in every layer that computes full queries: 4 x heads x head size per layer
    got = model_flops(vlm, _schedule.EngineStats(attn_pairs=1))
    if name == "google/gemma-4-E2B-it":
        want = 4 * 8 * (12 * 256 + 3 * 512)
    else:
        want = 4 * tc["num_attention_heads"] * tc["head_dim"] * tc["num_hidden_layers"]
    assert got == want
    st = _schedule.EngineStats(prefill_tokens=700, end_tokens=9, decode_tokens=30, attn_pairs=20_000,
                               end_attn_pairs=900, decode_attn_pairs=2_000, vision_tokens=784, image_tokens=196,
                               vision_attn_pairs=784**2)
    assert 1e12 < model_flops(vlm, st) < 1e14


@pytest.mark.parametrize("name", MODELS)
def test_attention_masks(name, vlms):
    import torch

    vlm = vlms[name]
    mapping, window, bidir, impl = _device._mask_spec(vlm)
    assert impl in ("sdpa", "eager") and _memory.batching_support(vlm) is None and not bidir
    n = 600  # longer than Gemma 4's window of 512
    depth = torch.arange(n)[None]
    tree = torch.ones(1, n, n, dtype=torch.bool).tril()
    masks = _device._masks(vlm, tree, depth, depth)
    if name == "google/gemma-4-E2B-it":
        assert (mapping, window) == (["full_attention", "sliding_attention"], 512)
        sliding, full = masks["sliding_attention"][0, 0], masks["full_attention"][0, 0]
        assert bool(full[599, 50]) and not bool(sliding[599, 50]) and bool(sliding[599, 599 - 511])
        assert torch.equal(full, tree[0])
    else:
        assert mapping is None and window is None
        assert torch.equal(masks[0, 0], tree[0])


def test_visual_tokens_one_tile_at_448(vlms, coco_image):
    """A COCO image (640 x 426 px) presented at <= 448 px, one tile: Qwen3-VL 126 or 140 (COCO's 640 x 427 and
    640 x 480 images), SmolVLM2 81, InternVL3.5 256, Gemma 4 at most 70 (its single-tile budget)."""
    cfg = load_config()
    slots = item_prompts(questions_for_item(EXAMPLE_ITEM, cfg), cfg, ("v1",))
    got = {}
    for name, vlm in vlms.items():
        pil = present_image(coco_image, vlm.max_side_px)
        assert max(pil.size) <= 448
        got[name] = _rows._prepare_row(vlm, pil, slots, cfg).n_image_tokens
    assert got["Qwen/Qwen3-VL-2B-Instruct"] in (126, 140) and got["Qwen/Qwen3-VL-4B-Instruct"] in (126, 140)
    assert got["HuggingFaceTB/SmolVLM2-2.2B-Instruct"] == 81
    assert got["OpenGVLab/InternVL3_5-2B-HF"] == 256
    assert 0 < got["google/gemma-4-E2B-it"] <= 70


def test_accessor_reads_gemma4_per_layer_head_sizes(vlms):
    cfg = vlms["google/gemma-4-E2B-it"].model.config
    tc = cfg.get_text_config()
    with pytest.raises(RuntimeError):  # transformers' AmbiguousGlobalPerLayerAttributeError: getattr cannot read it
        getattr(tc, "head_dim", None)
    dims = A.head_dims(cfg)
    assert dims == [512 if (i + 1) % 5 == 0 else 256 for i in range(35)]
    assert A.text_attr(cfg, "head_dim", layer=4) == 512 and A.text_attr(cfg, "head_dim", layer=3) == 256
    with pytest.raises(ValueError, match="head_dim.*per layer"):
        A.text_attr(cfg, "head_dim")
    assert A.kv_heads(cfg) == [1] * 35 and A.kv_shared_layers(cfg) == 20
    assert A.intermediate_sizes(cfg) == [6144] * 15 + [12288] * 20
    assert A.text_attr(cfg, "hidden_size") == 1536 and A.text_attr(cfg, "no_such", default=7) == 7
    with pytest.raises(AttributeError, match="no_such"):
        A.text_attr(cfg, "no_such")
    qwen = vlms["Qwen/Qwen3-VL-2B-Instruct"].model.config
    assert A.text_attr(qwen, "head_dim") == 128 and A.head_dims(qwen) == [128] * 28
    assert A.vision_attr(qwen, "depth", "num_hidden_layers") == 24


def test_accessor_reads_a_plain_global_head_dim():
    """A config that keeps ``global_head_dim`` as a plain attribute (no per-layer config) gets it in its
    full-attention layers."""
    tc = SimpleNamespace(hidden_size=64, num_attention_heads=4, num_hidden_layers=4, head_dim=16, global_head_dim=32,
                         layer_types=["sliding_attention", "full_attention"] * 2)
    assert A.head_dims(tc) == [16, 32, 16, 32]
    assert A.head_dims(SimpleNamespace(hidden_size=64, num_attention_heads=4, num_hidden_layers=2)) == [16, 16]


def test_installed_transformers_lies_in_the_tested_range():
    """pyproject's transformers range is the one tested (its low end in .ci/run), and the installed one is in it."""
    import transformers
    from packaging.requirements import Requirement

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    req = next(Requirement(d) for d in deps if Requirement(d).name == "transformers")
    assert transformers.__version__ in req.specifier, (transformers.__version__, str(req.specifier))
    ci = (ROOT / ".ci" / "run").read_text()
    low = min((s for s in req.specifier if s.operator == ">="), key=lambda s: s.version).version
    assert f"transformers=={low}" in ci, "the range's low end is not the one .ci/run tests"
