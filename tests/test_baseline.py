"""Tests of the shared-prefix engine (benchmarks.baseline.score_prompts / read_item) on all tiny architectures.

The engine must give the read-outs of scoring each full prompt on its own
(largest |dp| <= 1e-6 in float32), whatever else shares the batch (in bfloat16:
an item's main read-outs are bit-identical whether or not the verbal wordings
v2/v3 are asked), and all five tiny checkpoints must run through the read-out
stage, with ``verbal_stop`` reaching the store and the merged cube.
"""

import math

import numpy as np
import pytest

from benchmarks.baseline import read_item, score_prompts
from murk.core import load_config
from murk.offline import TINY_MODELS
from murk.protocol import questions_for_item, render_prompt
from murk.readout import READOUTS, TEXT_READOUTS, read_question

ARCHS = sorted(set(TINY_MODELS.values()))
ROW = {"category": "umbrella", "t2_options": ["car", "umbrella", "bench", "kite"], "t2_answer_index": 1,
       "t3_distractor": "truck"}
TOL = 1e-6


def _close(a, b):
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= TOL


@pytest.mark.parametrize("arch", ARCHS)
def test_read_item_equals_each_prompt_scored_alone(arch, tiny_vlms, coco_image):
    """Shared prefix = whole prompts through this engine = whole prompts through ``generate``."""
    vlm = tiny_vlms[arch]
    cfg = load_config()
    qs = questions_for_item(ROW, cfg)
    shared = read_item(vlm, coco_image, qs, cfg)
    for q in qs:
        ref = read_question(vlm, coco_image, q, cfg)  # transformers' generate, one prompt at a time
        assert set(shared[q.task]) == set(READOUTS) | set(TEXT_READOUTS)
        for got in (shared[q.task],):
            for key in READOUTS:
                assert _close(got[key], ref[key]), (arch, q.task, key, got[key], ref[key])
            for key in ("verbal_text", "top_token"):
                assert got[key] == ref[key], (arch, q.task, key)
        assert math.isnan(shared[q.task]["verbal_conf_v2"]) and shared[q.task]["verbal_text_v2"] == ""


@pytest.mark.parametrize("arch", ARCHS)
def test_prompt_alone_vs_inside_a_mixed_batch_of_8(arch, tiny_vlms, coco_image):
    """One prompt scored alone, and inside a batch of 8 prompts of mixed length: same probabilities
    (|dp| <= 1e-4) and the same greedy continuation; and the same as the whole prompt without a cache."""
    vlm = tiny_vlms[arch]
    cfg = load_config()
    qs = questions_for_item(ROW, cfg)
    users = [render_prompt(q, v, cfg)[0] for q in qs for v in ("main", "abstain")]
    users += [render_prompt(qs[0], "main", cfg, verbal="v2")[0], render_prompt(qs[2], "abstain2", cfg)[0]]
    assert len(users) == 8 and len({len(u) for u in users}) > 4
    gen = [True, False] * 4
    batch = score_prompts(vlm, coco_image, users, gen, cfg)
    for row in (5, 6):  # a scored-only row (t3_false, abstain) and a generating row (t2, main, wording v2)
        alone = score_prompts(vlm, coco_image, [users[row]], [gen[row]], cfg)
        whole = score_prompts(vlm, coco_image, [users[row]], [gen[row]], cfg, shared_prefix=False)
        assert batch.shared and batch.vision_passes == 1 and not whole.shared
        assert np.abs(batch.probs[row] - alone.probs[0]).max() <= TOL
        assert np.abs(batch.probs[row] - whole.probs[0]).max() <= TOL
        assert batch.continuations[row] == alone.continuations[0] == whole.continuations[0]
    # the batch shares one prefix that holds the whole image (else shared is False)
    assert batch.n_prefix_tokens > 0 and min(batch.n_tail_tokens) > 0


def test_verbal_variants_are_extra_readouts(tiny_vlms, coco_image):
    vlm = tiny_vlms["qwen3vl"]
    cfg = load_config()
    qs = questions_for_item(ROW, cfg)
    base = read_item(vlm, coco_image, qs, cfg)
    more = read_item(vlm, coco_image, qs, cfg, verbal_variants=("v1", "v2", "v3"))
    for q in qs:
        for key in ("answer", "c_int", "option_mass", "abstain", "abstain2"):
            assert _close(base[q.task][key], more[q.task][key])
        assert base[q.task]["verbal_text"] == more[q.task]["verbal_text"]
        assert more[q.task]["verbal_text_v2"] and more[q.task]["verbal_text_v3"]
    with pytest.raises(ValueError, match="v1"):
        read_item(vlm, coco_image, qs, cfg, verbal_variants=("v2",))
    with pytest.raises(ValueError, match="unknown"):
        read_item(vlm, coco_image, qs, cfg, verbal_variants=("v1", "v9"))


@pytest.mark.slow  # the real stages for every architecture: minutes (out of `make test-fast`)
def test_all_tiny_architectures_through_the_readout_stage(demo, tmp_path, monkeypatch):
    """Every tiny id of TINY_MODELS through the real stages (select -> depth -> readout): the session demo's
    three (Snakemake; the verbal wordings v2, v3 asked on each model's first ``n_verbal_items`` images, those of
    data/workflow.yaml) and, by hand (papermill) on a copy of the demo's root, the other two on one item
    without the verbal wordings; ``verbal_stop`` reaches each store and the merged cube."""
    import xarray as xr
    import yaml

    import stages  # tests/stages.py: the stage notebooks through papermill
    from murk import scene
    from murk.core import _paths as paths
    from murk.results import _cube as cube

    monkeypatch.setenv("MURK_OFFLINE", "1")
    monkeypatch.setenv("MURK_COCO_DIR", str(stages.SAMPLE))
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    root = stages.copy_root(demo, tmp_path / "out")
    workflow_n_verbal = int(yaml.safe_load((stages.ROOT / "data" / "workflow.yaml").read_text())["n_verbal_items"])
    n_verbal = dict.fromkeys(stages.DEMO_N, workflow_n_verbal)
    for model in sorted(set(TINY_MODELS) - set(stages.DEMO_N)):
        stages.run("03_readout", root, suffix=f"-{paths.model_slug(model)}", model=model, device="cpu",
                   max_items=1, n_verbal_items=0)
        n_verbal[model] = 0
    assert set(n_verbal) == set(TINY_MODELS)
    stores = {}
    for model in sorted(TINY_MODELS):
        store = paths.readout_store(model, root)
        ds = xr.open_zarr(store, consolidated=False).load()
        assert bool(ds["done"].all()), model
        assert ds.attrs["pipeline_check"] == 1 and ds.attrs["n_visual_tokens"] > 0
        v = ds["value"]
        for arm, lvl in scene.CONDITIONS:
            arm = "fog" if arm == "clean" else arm
            cell = v.sel(arm=arm, level=lvl, readout=["answer", "c_int", "abstain", "abstain2", "option_mass"])
            assert cell.notnull().all(), (model, arm, lvl)
        assert (ds["top_token"].sel(arm="fog", level=0) != "").all()
        stop = v.sel(readout="verbal_stop")
        assert stop.isin([0.0, 1.0]).sel(arm="fog").all(), model  # 0 = EOS, 1 = token limit: always recorded
        asked = np.arange(ds.sizes["image"]) < n_verbal[model]  # the images asked v2 and v3
        fog = dict(arm="fog")
        for name in ("verbal_stop_v2", "verbal_stop_v3"):
            assert v.sel(readout=name, **fog).isel(image=asked).isin([0.0, 1.0]).all(), (model, name)
            assert v.sel(readout=name).isel(image=~asked).isnull().all(), (model, name)  # not asked
        texts_v2 = ds["verbal_text_v2"].sel(arm="fog", level=0)
        assert (texts_v2.isel(image=~asked) == "").all() and v.sel(readout="verbal_conf_v2").isel(
            image=~asked).isnull().all(), model
        if model == "murk-tiny/qwen3vl":
            assert asked.any() and (texts_v2.isel(image=asked) != "").all()
        stores[model] = store
    # the merged cube keeps them
    merged = cube.merge_models(stores, tmp_path / "cube.zarr")
    assert {"verbal_stop", "verbal_stop_v2", "verbal_stop_v3"} <= set(merged["readout"].values)
    reopened = cube.open_cube(tmp_path / "cube.zarr")
    got = reopened["value"].sel(model="murk-tiny/qwen3vl", arm="fog", level=0, readout="verbal_stop").values
    # (task, image): recorded on its own images, NaN on the images only the other models were read out on
    assert (np.isfinite(got).sum(axis=-1) == stages.DEMO_N["murk-tiny/qwen3vl"]).all()
    assert np.isin(got[np.isfinite(got)], [0.0, 1.0]).all()
    from murk.results import _analysis as analysis

    rates = analysis.verbal_rates(reopened)
    for model in TINY_MODELS:  # three tasks (t2, t3_true, t3_false) a continuation each, per asked image
        n_images = min(n_verbal[model], stages.DEMO_N.get(model, 1))
        assert float(rates["n_asked"].sel(model=model, arm="fog", level=0, wording="v2")) == 3 * n_images, model


def test_continuation_that_ends_at_eos(tiny_vlms, coco_image, monkeypatch):
    """A continuation that says EOS early: verbal_stop 0, the text up to it; the engine and generate agree."""
    vlm = tiny_vlms["qwen3vl"]
    cfg = load_config()
    q = questions_for_item(ROW, cfg)[0]
    free = read_item(vlm, coco_image, [q], cfg)["t2"]
    assert free["verbal_stop"] == 1.0  # random weights: no EOS in 12 tokens
    user, _ = render_prompt(q, "main", cfg)
    seq = score_prompts(vlm, coco_image, [user], [True], cfg)
    third = vlm.tokenizer(seq.continuations[0], add_special_tokens=False)["input_ids"][2]
    eos = (*vlm.eos_token_ids, int(third))
    monkeypatch.setattr(vlm, "eos_token_ids", eos)
    monkeypatch.setattr(vlm.model.generation_config, "eos_token_id", list(eos))
    stopped = read_item(vlm, coco_image, [q], cfg)["t2"]
    ref = read_question(vlm, coco_image, q, cfg)
    assert stopped["verbal_stop"] == ref["verbal_stop"] == 0.0
    assert stopped["verbal_text"] == ref["verbal_text"]
    assert free["verbal_text"].startswith(stopped["verbal_text"])
    assert len(stopped["verbal_text"]) < len(free["verbal_text"])
    for key in ("answer", "c_int", "option_mass"):
        assert stopped[key] == free[key]


def test_bf16_main_readouts_do_not_depend_on_the_verbal_wordings(tiny_checkpoint_dirs, coco_image):
    """bfloat16: the nine main prompts form their own batch, so asking v2/v3 changes nothing in them."""
    import torch

    from murk.readout import load_vlm

    cfg = load_config()
    qs = questions_for_item(ROW, cfg)
    for arch in ("qwen3vl", "smolvlm"):
        vlm = load_vlm(str(tiny_checkpoint_dirs[arch]), device="cpu", dtype=torch.bfloat16)
        assert next(vlm.model.parameters()).dtype == torch.bfloat16
        alone = read_item(vlm, coco_image, qs, cfg)
        more = read_item(vlm, coco_image, qs, cfg, verbal_variants=("v1", "v2", "v3"))
        for q in qs:
            for key in ("answer", "c_int", "option_mass", "abstain", "abstain2", "verbal_conf", "verbal_stop"):
                a, b = alone[q.task][key], more[q.task][key]
                assert (math.isnan(a) and math.isnan(b)) or a == b, (arch, q.task, key)  # bit-identical
            assert alone[q.task]["verbal_text"] == more[q.task]["verbal_text"]
            assert more[q.task]["verbal_stop_v2"] in (0.0, 1.0)


def test_softmax_is_float32_in_bf16():
    """The vocabulary softmax of bf16 logits is taken in float32 (a bf16 softmax sums to 1 only within ~1e-2)."""
    import torch

    from murk.readout import softmax32

    logits = (torch.randn(4, 50_000) * 8).to(torch.bfloat16)
    p = softmax32(logits)
    assert p.dtype == np.float64 and np.abs(p.sum(-1) - 1).max() < 1e-5
    ref = torch.softmax(logits.float(), -1).double().numpy()
    assert np.array_equal(p, ref)


def test_groups_validate(tiny_vlms, coco_image):
    vlm = tiny_vlms["qwen3vl"]
    cfg = load_config()
    users = [render_prompt(q, "main", cfg)[0] for q in questions_for_item(ROW, cfg)]
    with pytest.raises(ValueError, match="partition"):
        score_prompts(vlm, coco_image, users, None, cfg, groups=[[0, 1]])
    one = score_prompts(vlm, coco_image, users, None, cfg)
    two = score_prompts(vlm, coco_image, users, None, cfg, groups=[[0, 1], [2]])
    assert two.vision_passes == 1 and two.shared  # the second group reuses the first group's prefix
    assert np.abs(one.probs - two.probs).max() <= TOL


def test_bf16_output_head_runs_in_float32(tiny_checkpoint_dirs, coco_image):
    """In bfloat16 the logits are not rounded to 8 bits: the head runs on a float32 copy of its weight."""
    import torch

    from murk.readout import build_prompt_text, encode, load_vlm, present_image

    vlm = load_vlm(str(tiny_checkpoint_dirs["qwen3vl"]), device="cpu", dtype="bfloat16")
    head = vlm.model.get_output_embeddings()
    assert head.weight.dtype == torch.bfloat16  # the model itself stays bf16
    inputs = encode(vlm, [build_prompt_text(vlm, "Hi", "Answer:")], present_image(coco_image))
    with torch.inference_mode():
        logits = vlm.model(**inputs, logits_to_keep=1).logits
    assert logits.dtype == torch.float32
    rounded = logits.to(torch.bfloat16).float()
    assert not torch.equal(rounded, logits)  # bf16 logits would have lost these digits
