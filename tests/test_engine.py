"""Tests of the shared-prefix engine (murk.readout.score_prompts / read_item) on all tiny architectures.

The engine must give the read-outs of scoring each full prompt on its own
(largest |dp| <= 1e-4 in float32), whatever else shares the batch, and all five
tiny checkpoints must run through the read-out stage.
"""

import math

import numpy as np
import pytest

from murk.checkpoints import TINY_MODELS
from murk.config import load_config
from murk.prompts import questions_for_item, render_prompt
from murk.readout import READOUTS, TEXT_READOUTS, read_item, read_question, score_prompts

ARCHS = sorted(set(TINY_MODELS.values()))
ROW = {"category": "umbrella", "t2_options": ["car", "umbrella", "bench", "kite"], "t2_answer_index": 1,
       "t3_distractor": "truck"}
TOL = 1e-4


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
def test_all_tiny_architectures_through_the_readout_stage(tmp_path, monkeypatch):
    """Every tiny id of TINY_MODELS through the real stages (select -> depth -> readout) on one item."""
    import xarray as xr

    from murk import cube, paths, pipeline

    sample = paths.project_root().parent / "shared" / "coco-val2017-sample"
    if not sample.is_dir():
        pytest.skip("no shared COCO sample")
    monkeypatch.setenv("MURK_OFFLINE", "1")
    monkeypatch.setenv("MURK_COCO_DIR", str(sample))
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    pipeline.stage_select(n_items=1, output_dir=tmp_path, run_name="engine-test")
    pipeline.stage_depth(backend="constant", output_dir=tmp_path)
    for model in sorted(TINY_MODELS):
        store = pipeline.stage_readout(model, output_dir=tmp_path, device="cpu",
                                       n_verbal_items=1 if model == "murk-tiny/qwen3vl" else 0)
        ds = xr.open_zarr(store, consolidated=False).load()
        assert bool(ds["done"].all()), model
        assert ds.attrs["pipeline_check"] == 1 and ds.attrs["n_visual_tokens"] > 0
        v = ds["value"]
        for arm, lvl in cube.CONDITIONS:
            arm = "fog" if arm == "clean" else arm
            cell = v.sel(arm=arm, level=lvl, readout=["answer", "c_int", "abstain", "abstain2", "option_mass"])
            assert cell.notnull().all(), (model, arm, lvl)
        assert (ds["top_token"].sel(arm="fog", level=0) != "").all()
        v2 = v.sel(readout="verbal_conf_v2")
        texts_v2 = ds["verbal_text_v2"].sel(arm="fog", level=0)
        if model == "murk-tiny/qwen3vl":
            assert (texts_v2 != "").all()
        else:
            assert v2.isnull().all() and (texts_v2 == "").all()
