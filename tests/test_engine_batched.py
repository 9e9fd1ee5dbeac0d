"""Tests of the batched read-out engine (murk.readout) on every tiny family.

* fp32 equality with every prompt scored on its own (``score_prompts`` /
  ``read_item`` with ``shared_prefix=False``) within 1e-6 in every read-out and
  every first-token probability, texts identical;
* a unit's read-outs do not depend on its batch-mates (1e-6), and the same batch
  gives bit-identical results twice;
* Gemma 4 with a sliding window shorter than the rows and with bidirectional
  image blocks (masks built from positions);
* the fixed schedule: shards and resumed runs see the batches of an
  uninterrupted run; the pipelined iterator with bad input, finished batch-mates
  and an out-of-memory split.
"""

import dataclasses
import logging
import math

import numpy as np
import pytest

from benchmarks.baseline import read_item, score_prompts
from murk.core import load_config
from murk.offline import TINY_MODELS
from murk.protocol import questions_for_item
from murk.readout import (READOUTS, TEXT_READOUTS, build_prompt_text, count_visual_tokens, image_inputs, item_prompts,
                          item_readouts, letter_probs, present_image, read_unit, single_tile_kwargs)
from murk.readout import _device
from murk.readout import _engine as engine
from murk.readout import _memory
from murk.readout import _rows
from murk.readout import _schedule

ARCHS = sorted(set(TINY_MODELS.values()))
ROW = {"category": "umbrella", "t2_options": ["car", "umbrella", "bench", "kite"], "t2_answer_index": 1,
       "t3_distractor": "truck"}
ROW2 = {"category": "dog", "t2_options": ["dog", "horse", "sheep", "cow"], "t2_answer_index": 0,
        "t3_distractor": "cat"}
TOL = 1e-6


def _whole(vlm, u, cfg):
    """Every prompt of a unit run whole (the reference): (first-token distributions, read-outs).

    ``read_item(..., shared_prefix=False)`` is exactly this: ``score_prompts`` with
    ``shared_prefix=False``, then the read-outs from its distributions and continuations.
    """
    slots = item_prompts(u.questions, cfg, u.verbal_variants)
    whole = score_prompts(vlm, u.image, [s.user for s in slots], [s.generate for s in slots], cfg,
                          shared_prefix=False)
    p = [letter_probs(vlm, whole.probs[j], s.letters) for j, s in enumerate(slots)]
    tops = [vlm.tokenizer.decode([int(np.argmax(whole.probs[j]))]) for j in range(len(slots))]
    return whole, item_readouts(u.questions, slots, p, tops, whole.continuations, whole.stops)


def _max_diff(a: dict, b: dict) -> float:
    """Largest |difference| over every numeric read-out of two read_item results; texts must be equal."""
    assert set(a) == set(b)
    worst = 0.0
    for task in a:
        assert set(a[task]) == set(READOUTS) | set(TEXT_READOUTS)
        for key in READOUTS:
            x, y = a[task][key], b[task][key]
            assert math.isnan(x) == math.isnan(y), (task, key, x, y)
            if not math.isnan(x):
                worst = max(worst, abs(x - y))
        for key in TEXT_READOUTS:
            assert a[task][key] == b[task][key], (task, key, a[task][key], b[task][key])
    return worst


@pytest.fixture(scope="module")
def images(coco_image):
    """Three presented images of different sizes: the COCO image, a crop of it, a grey blank."""
    crop = np.ascontiguousarray(coco_image[: coco_image.shape[0] // 2, : coco_image.shape[1] * 2 // 3])
    return [coco_image, crop, np.full((300, 400, 3), 128, dtype=np.uint8)]


@pytest.mark.parametrize("arch", ARCHS)
def test_batched_equals_each_prompt_scored_alone(arch, tiny_vlms, images):
    """Two units in one batch (one with the verbal wordings v2/v3, other questions and another image size):
    every read-out and every first-token probability as when each prompt runs whole, within 1e-6."""
    vlm = tiny_vlms[arch]
    cfg = load_config()
    units = [_schedule.Unit(0, "fog", 3, images[0], tuple(questions_for_item(ROW, cfg)), ("v1", "v3")),
             _schedule.Unit(1, "clean", 0, images[1], tuple(questions_for_item(ROW2, cfg)))]
    got, stats = engine._read_units_with_probs(vlm, units, cfg)
    assert stats.fallback_units == 0 and stats.units == 2 and stats.rows == 3  # two core rows, one verbal branch
    prompt_tokens = distinct_prefixes = 0
    for u, (readouts, probs) in zip(units, got):
        slots = item_prompts(u.questions, cfg, u.verbal_variants)
        whole, ref = _whole(vlm, u, cfg)
        assert not whole.shared and probs.shape == whole.probs.shape
        prompt_tokens += sum(whole.n_tail_tokens)  # whole prompts: each prompt's full length
        texts = [build_prompt_text(vlm, s.user, cfg["readout"]["assistant_prefill"]) for s in slots]
        _, ids = image_inputs(vlm, texts, present_image(u.image, vlm.max_side_px))
        distinct_prefixes += len({tuple(i[: d + 1]) for i in ids for d in range(len(i))})
        assert np.abs(probs - whole.probs).max() <= TOL
        assert _max_diff(readouts, ref) <= TOL
        for task in readouts:  # the continuations were really generated (not empty)
            assert readouts[task]["verbal_text"] != ""
    # the token tree holds each distinct prompt prefix once, the verbal wordings' included: their branch
    # reuses the core row's image and shared prefix (issue 38 item 5), so the vision tower ran once per unit
    assert stats.prefill_tokens == distinct_prefixes < prompt_tokens
    once = [_rows._prepare_row(vlm, present_image(u.image, vlm.max_side_px),
                                item_prompts(u.questions, cfg), cfg) for u in units]
    assert stats.vision_tokens == sum(r.n_vision for r in once)


def test_verbal_wordings_branch_reuses_the_core_rows_keys_and_values(tiny_vlms, images, monkeypatch):
    """The verbal wordings are a branch of the core row: with it, the same first-token distributions as with a
    row of their own (1e-6) for fewer prefilled tokens and one vision pass; a branch that cannot see the core
    row's cached tokens (the image, the shared prefix) gives other distributions, so the comparison can fail."""
    vlm = tiny_vlms["qwen3vl"]
    cfg = load_config()
    u = _schedule.Unit(0, "fog", 3, images[1], tuple(questions_for_item(ROW, cfg))[:1], ("v1", "v3"))  # small: fast
    (_, probs), = (got := engine._read_units_with_probs(vlm, [u], cfg))[0]
    branch_stats = got[1]
    monkeypatch.setattr(_rows, "_BRANCHES", False)
    (_, probs_rows), = (got := engine._read_units_with_probs(vlm, [u], cfg))[0]
    row_stats = got[1]
    assert np.abs(probs - probs_rows).max() <= TOL
    assert branch_stats.vision_tokens * 2 == row_stats.vision_tokens  # the row of their own ran the image again
    assert branch_stats.prefill_tokens < row_stats.prefill_tokens
    flops = _bench_module("flops")  # benchmarks/flops.py: the executed work falls, the useful is what is left
    assert (flops.model_flops(vlm, branch_stats) <= flops.executed_flops(vlm, branch_stats)
            < 0.9 * flops.executed_flops(vlm, row_stats))
    monkeypatch.setattr(_rows, "_BRANCHES", True)
    build = _rows._branch_from_ids

    def blind(*a, **k):  # the branch sees none of its core row's tokens
        b = build(*a, **k)
        return dataclasses.replace(b, pre=np.zeros_like(b.pre))

    monkeypatch.setattr(_rows, "_branch_from_ids", blind)
    (_, probs_blind), = engine._read_units_with_probs(vlm, [u], cfg)[0]
    verbal = [j for j, s in enumerate(item_prompts(u.questions, cfg, u.verbal_variants)) if s.wording != "v1"]
    assert np.abs(probs_blind[verbal] - probs[verbal]).max() > 1e-4
    assert np.abs(probs_blind - probs).max() == np.abs(probs_blind[verbal] - probs[verbal]).max()  # core: same


def test_decode_uses_sdpa_grouped_query_attention(tiny_vlms, images, monkeypatch):
    """Decode steps on the CPU call SDPA with ``enable_gqa`` (no copy of K and V to every query head) and give
    the logits of transformers' repeat_kv path up to float32 rounding (1.5e-7 here: another kernel blocking;
    bit-identical on the real-format checkpoints); prefills and the vision tower are left as they were."""
    import contextlib

    import torch
    import transformers.integrations.sdpa_attention as sa

    vlm = tiny_vlms["qwen3vl"]
    tc = vlm.model.config.get_text_config()
    assert tc.num_attention_heads > tc.num_key_value_heads  # grouped-query attention: the test can fail
    cfg = load_config()
    u = _schedule.Unit(0, "fog", 3, images[1], tuple(questions_for_item(ROW, cfg))[:1])
    sdpa = torch.nn.functional.scaled_dot_product_attention
    runs = {}
    for mode in ("gqa", "repeat_kv"):
        calls, logits = [], []
        monkeypatch.setattr(sa.torch.nn.functional, "scaled_dot_product_attention",
                            lambda *a, **k: (calls.append(bool(k.get("enable_gqa"))), sdpa(*a, **k))[1])
        if mode == "repeat_kv":
            monkeypatch.setattr(_device, "_grouped_query_attention", lambda vlm: contextlib.nullcontext())
        hook = vlm.model.lm_head.register_forward_hook(lambda m, i, o: logits.append(o.detach().clone()))
        try:
            engine.read_units(vlm, [u], cfg)
        finally:
            hook.remove()
        runs[mode] = calls, logits
    (gqa_calls, a), (plain_calls, b) = runs["gqa"], runs["repeat_kv"]
    assert not any(plain_calls) and sum(gqa_calls) >= tc.num_hidden_layers  # at least one decode step
    assert len(a) == len(b) > 1 and max(float((x - y).abs().max()) for x, y in zip(a, b)) <= TOL  # rounding


@pytest.mark.parametrize("family", ["qwen3vl", "smolvlm", "smolvlm2", "internvl", "gemma4"])
def test_batched_equals_each_prompt_on_realformat_checkpoints(family, request, images):
    """Real tokenizers, chat templates and processors (issue 12's real-format checkpoints): BPE merges, digit
    splitting, real special tokens; a core and a verbal row; every read-out within 1e-6 of whole prompts."""
    try:
        vlm = request.getfixturevalue("realformat_vlms")[family]
    except pytest.FixtureLookupError:
        pytest.skip("no real-format checkpoints in this tree (murk.offline.build_realformat_checkpoint)")
    cfg = load_config()
    u = _schedule.Unit(0, "fog", 5, images[1], tuple(questions_for_item(ROW, cfg)), ("v1", "v3"))
    (readouts, probs), = engine._read_units_with_probs(vlm, [u], cfg)[0]
    whole, ref = _whole(vlm, u, cfg)
    assert np.abs(probs - whole.probs).max() <= TOL
    assert _max_diff(readouts, ref) <= TOL


@pytest.mark.parametrize("arch", ["qwen3vl", "smolvlm"])
def test_independent_of_batch_mates(arch, tiny_vlms, images):
    """A unit alone and among batch-mates of other sizes and questions: same read-outs (1e-6);
    the same batch twice: bit-identical."""
    vlm = tiny_vlms[arch]
    cfg = load_config()
    qs, qs2 = tuple(questions_for_item(ROW, cfg)), tuple(questions_for_item(ROW2, cfg))
    target = _schedule.Unit(5, "underwater", 2, images[1], qs)
    alone = engine.read_units(vlm, [target], cfg)[0]
    mates = [_schedule.Unit(4, "blank", 0, images[2], qs2), target, _schedule.Unit(6, "clean", 0, images[0], qs2)]
    among = engine.read_units(vlm, mates, cfg)
    assert _max_diff(alone, among[1]) <= TOL
    again = engine.read_units(vlm, mates, cfg)
    for a, b in zip(among, again):
        assert _max_diff(a, b) == 0.0


def test_gemma_sliding_window_and_bidirectional_image_blocks(tiny_vlms, coco_image):
    """Gemma 4 with a sliding window (48) much shorter than the rows (~300 tokens), causal and with
    bidirectional attention inside the image: masks from positions give the per-prompt read-outs (the verbal
    wording's branch included: its window reaches into its core row's cached keys by their positions)."""
    vlm = tiny_vlms["gemma"]
    cfg = load_config()
    tc = vlm.model.config.get_text_config()
    saved = (tc.sliding_window, tc.use_bidirectional_attention)
    u = _schedule.Unit(0, "fog", 1, coco_image, tuple(questions_for_item(ROW, cfg)), ("v1", "v3"))  # v3: a branch
    slots = item_prompts(u.questions, cfg, u.verbal_variants)
    refs = {}
    try:
        for mode in (None, "vision"):
            tc.sliding_window, tc.use_bidirectional_attention = 48, mode
            assert _memory.batching_support(vlm) is None
            (readouts, probs), = engine._read_units_with_probs(vlm, [u], cfg)[0]
            whole, ref = _whole(vlm, u, cfg)
            assert min(whole.n_tail_tokens) > 3 * 48  # every prompt is longer than the window
            assert np.abs(probs - whole.probs).max() <= TOL
            assert _max_diff(readouts, ref) <= TOL
            refs[mode] = whole.probs
        # the two modes really differ, and the window matters: the test can fail
        assert np.abs(refs[None] - refs["vision"]).max() > 1e-4
        tc.sliding_window, tc.use_bidirectional_attention = 4096, None
        wide = score_prompts(vlm, u.image, [slots[0].user], None, cfg, shared_prefix=False)
        assert np.abs(wide.probs[0] - refs[None][0]).max() > 1e-4
        tc.use_bidirectional_attention = "all"
        assert "bidirectional" in _memory.batching_support(vlm)
    finally:
        tc.sliding_window, tc.use_bidirectional_attention = saved


def test_schedule_shards_and_resume_points_align():
    assert _schedule.schedule(0, 10, 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    # a shard of size 8 sees the global batches, the last batch ends with the items
    assert _schedule.schedule(8, 10, 4) == [[8, 9]]
    assert _schedule.schedule(4, 12, 4) == _schedule.schedule(0, 12, 4)[1:]
    with pytest.raises(ValueError, match="batch boundary"):
        _schedule.schedule(3, 10, 4)
    with pytest.raises(ValueError, match="multiple of images_per_batch=4"):
        _schedule.check_shard_alignment(6, 4)
    _schedule.check_shard_alignment(8, 4)
    _schedule.check_shard_alignment(None, 4)
    # a resumed run recomputes whole batches: the finished batch-mates of item 5 are read again
    assert _schedule.plan({5, 9}, 0, 10, 4) == [[4, 5, 6, 7], [8, 9]]
    assert _schedule.plan([], 0, 10, 4) == []
    # every schedule of any shard size that is a multiple of k concatenates to the unsharded one
    for k in (1, 2, 3):
        for shard in (k, 2 * k, 3 * k):
            sharded = [b for s in range(0, 10, shard) for b in _schedule.schedule(s, min(s + shard, 10), k)]
            assert sharded == _schedule.schedule(0, 10, k)


def _loader(images, cfg, conditions=(("clean", 0), ("fog", 4), ("blank", 0)), bad=()):
    """A load(item) for read_images: a few conditions of small images (the real stage renders all 24)."""
    rows = [ROW, ROW2]

    def load(i):
        if i in bad:
            raise FileNotFoundError(f"image of item {i} is missing (test)")
        img = images[i % len(images)]
        conds = [(arm, lvl, img if arm != "blank" else np.full_like(img, 128)) for arm, lvl in conditions]
        return _schedule.ImageJob(questions_for_item(rows[i % 2], cfg), conds)
    return load


def test_read_images_pipeline_cut_anywhere(tiny_vlms, images):
    """read_images in two schedules (1 and 2 images per batch) and resumed from a finished batch-mate:
    the same read-outs, bad input recorded, finished images not yielded, the wait share measured."""
    vlm = tiny_vlms["internvl"]
    cfg = load_config()
    load = _loader(images, cfg, bad={2})
    stats = _schedule.EngineStats()
    run2 = {r.item: r for r in engine.read_images(vlm, _schedule.plan(range(4), 0, 4, 2), load, config=cfg,
                                                  stats=stats, progress=False)}
    assert sorted(run2) == [0, 1, 2, 3]
    assert run2[2].results is None and "missing" in run2[2].missing_reason
    assert stats.batches == 2 and stats.units == 9 and math.isfinite(stats.wait_share)
    assert 0 <= stats.wait_share <= 1 and stats.model_s > 0
    for r in (run2[0], run2[1], run2[3]):
        assert set(r.results) == {(a, lv, t) for a, lv in (("clean", 0), ("fog", 4), ("blank", 0))
                                  for t in ("t2", "t3_true", "t3_false")}
        assert r.missing_reason is None and r.fallbacks == []
    # another cut of the run (one image per batch): equal within rounding
    run1 = {r.item: r for r in engine.read_images(vlm, _schedule.plan(range(4), 0, 4, 1), load, config=cfg,
                                                  progress=False, workers=2)}
    for i in (0, 1, 3):
        for key, res in run2[i].results.items():
            assert _max_diff({key[2]: res}, {key[2]: run1[i].results[key]}) <= TOL
    # resumed after item 0 was written: its batch is recomputed, item 1 comes out bit-identical to run2
    resumed = list(engine.read_images(vlm, _schedule.plan({1, 3}, 0, 4, 2), load, config=cfg, done={0, 2},
                                      progress=False))
    assert [r.item for r in resumed] == [1, 3]
    for r in resumed:
        for key, res in r.results.items():
            assert _max_diff({key[2]: res}, {key[2]: run2[r.item].results[key]}) == 0.0


def test_bad_input_and_failed_rendering_are_recorded_per_image(tiny_vlms, images):
    """load() raising bad input (an undecodable image is an OSError) or the conditions' generator raising while
    rendering loses only that image: its reason is recorded, its batch-mates are read out."""
    from PIL import UnidentifiedImageError

    vlm = tiny_vlms["smolvlm"]
    cfg = load_config()
    good = _loader(images, cfg, conditions=(("clean", 0), ("fog", 4)))

    def rendering(img):
        yield "clean", 0, img
        raise ValueError("operands could not be broadcast together with shapes (224,224) (100,100)")

    def load(i):
        if i == 1:
            raise UnidentifiedImageError("cannot identify image file 'x.jpg'")
        if i == 2:
            return _schedule.ImageJob(good(i).questions, rendering(images[0]))
        return good(i)

    res = {r.item: r for r in engine.read_images(vlm, [[0, 1, 2, 3]], load, config=cfg, progress=False)}
    assert res[1].results is None and "cannot identify image file" in res[1].missing_reason
    assert res[2].results is None
    assert res[2].missing_reason == ("rendering failed: ValueError: operands could not be broadcast together "
                                     "with shapes (224,224) (100,100)")
    for i in (0, 3):
        assert res[i].missing_reason is None and len(res[i].results) == 2 * 3


def test_out_of_memory_frees_the_failed_batch_before_its_halves_run(tiny_vlms, images, monkeypatch, caplog):
    """An out-of-memory error after the forward has allocated (KV cache filled, logits, an activation): when the
    first half starts, the failed batch is gone (its collated tensors, handed in by read_images' worker, its masks,
    cache, logits and activation: weak references dead); the read-out completes with smaller batches, the splits
    counted, the read-outs those of an unsplit run (float32, 1e-6); a single unit that does not fit is refused in
    one line that names the settings."""
    import gc
    import weakref

    import torch

    vlm = tiny_vlms["qwen3vl"]
    cfg = load_config()
    load = _loader(images, cfg)  # one image, three conditions: one batch of 3 rows
    ref = next(engine.read_images(vlm, [[0]], load, config=cfg, progress=False)).results
    real_forward, real_collate = vlm.model.forward, _device._collate
    collated, failed, sizes, alive_at_retry, errors = [], [], [], [], []

    def collate(*a, **k):  # the batches read_images' worker collates, tracked by weak reference
        b = real_collate(*a, **k)
        collated.append([("collated batch", weakref.ref(b))] + [(f"collated {n}", weakref.ref(getattr(b, n)))
                                                                for n in ("ids", "tree", "pos", "depth")]
                        + [(f"collated {n}", weakref.ref(v)) for n, v in b.vision.items()])
        return b

    def small_device(*a, **k):
        rows = int(k["input_ids"].shape[0])
        if "pixel_values" in k and len(alive_at_retry) < len(errors):  # the prefill of a failure's first half
            alive_at_retry.append([name for name, r in failed if r() is not None])
        if "pixel_values" in k:
            sizes.append(rows)  # rows per prefill (decode steps have no pixel values)
        out = real_forward(*a, **k)  # fills the cache, returns logits
        if rows > 1 and "pixel_values" in k:
            act = torch.ones(rows, 1 << 18)  # an activation of the failed forward, in a reference cycle
            keep = [act]
            keep.append(keep)
            masks = k["attention_mask"]
            failed.extend([("activation", weakref.ref(act)), ("logits", weakref.ref(out.logits)),
                           ("cache", weakref.ref(k["cache"])), ("input_ids", weakref.ref(k["input_ids"]))]
                          + [("mask", weakref.ref(m)) for m in (masks.values() if isinstance(masks, dict)
                                                                  else [masks])]
                          + collated[-1])
            err = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB (simulated)")
            errors.append(err)  # kept by someone else (an error log): its traceback must not keep the batch
            raise err
        return out

    monkeypatch.setattr(engine, "_collate", collate)
    monkeypatch.setattr(vlm.model, "forward", small_device)
    stats = _schedule.EngineStats()
    gc.disable()  # only the engine's own gc.collect() may free the cycle before the halves run
    try:
        with caplog.at_level(logging.WARNING, logger="murk"):
            got = next(engine.read_images(vlm, [[0]], load, config=cfg, stats=stats, progress=False)).results
    finally:
        gc.enable()
    assert len(failed) > 8 and alive_at_retry == [[], []]  # each failed batch freed before its first half ran
    assert all(r() is None for _, r in failed) and len(errors) == 2
    assert stats.oom_splits == 2 and sizes == [3, 1, 2, 1, 1]  # halves left first, split again
    assert "splitting it into 1 + 2" in caplog.text
    assert set(got) == set(ref)
    for key in ref:
        assert _max_diff({key[2]: got[key]}, {key[2]: ref[key]}) <= TOL

    # a single unit that does not fit: refused in one line naming what to change
    monkeypatch.setattr(vlm.model, "forward", lambda *a, **k: (_ for _ in ()).throw(
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB (simulated)")))
    with pytest.raises(torch.OutOfMemoryError) as e:
        engine.read_units(vlm, [_schedule.Unit(0, "clean", 0, images[2], tuple(questions_for_item(ROW, cfg)))], cfg)
    msg = str(e.value)
    assert "\n" not in msg and vlm.model_id in msg and "Tried to allocate 1.00 GiB" in msg
    assert "render.max_side_px" in msg and "images_per_batch" in msg and e.value.__context__ is None


def test_unsupported_units_fall_back_to_every_prompt_run_whole(tiny_vlms, images, monkeypatch):
    vlm = tiny_vlms["smolvlm"]
    cfg = load_config()
    monkeypatch.setattr(engine, "batching_support", lambda v: "attention implementation 'flash' (test)")
    u = _schedule.Unit(0, "clean", 0, images[2], tuple(questions_for_item(ROW, cfg)))
    stats = _schedule.EngineStats()
    got = engine.read_units(vlm, [u], cfg, stats=stats)[0]
    assert stats.fallback_units == 1
    assert _max_diff(got, read_unit(vlm, u.image, u.questions, cfg)) == 0.0  # murk.readout: transformers' own path
    assert _max_diff(got, read_item(vlm, u.image, u.questions, cfg)) <= TOL  # and the per-unit baseline agrees
    res = list(engine.read_images(vlm, [[0]], _loader(images, cfg, conditions=(("clean", 0),)), config=cfg,
                                  progress=False))
    assert res[0].fallbacks == ["clean/0: attention implementation 'flash' (test)"]


def test_memory_aware_batch_size(tiny_vlms):
    vlm = tiny_vlms["qwen3vl"]
    small = _memory.auto_images_per_batch(vlm, free_bytes=1)
    big = _memory.auto_images_per_batch(vlm, free_bytes=1 << 40, max_images=64)
    mid = _memory.auto_images_per_batch(vlm, free_bytes=1 << 30, max_images=64)
    assert small == 1 and big == 64 and 1 <= mid <= big
    for k in (small, mid, big):
        assert k & (k - 1) == 0  # powers of two
    assert _memory.auto_images_per_batch(vlm) == 1  # CPU default: one image (24 units) per batch


# --------------------------------------------------------------------------- the GPU benchmark script

def _bench_module(name: str):
    import importlib.util

    from murk.core import _paths as paths

    spec = importlib.util.spec_from_file_location(name, paths.project_root() / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _gpu_bench():
    return _bench_module("readout_gpu")


def test_gpu_benchmark_builds_the_five_study_models_at_full_size():
    """benchmarks/readout_gpu.py: the five architectures at full size (on the meta device: no memory), with
    their real vocabularies and parameter counts, batched by the engine, and the real visual-token counts."""
    import types

    import torch

    from murk import readout

    gb = _gpu_bench()
    expect = {  # billions of parameters (Gemma 4 E2B: ~2.75 B of them per-layer and token embeddings)
        "Qwen/Qwen3-VL-2B-Instruct": (2.0, 2.3, 151936, 196), "Qwen/Qwen3-VL-4B-Instruct": (4.2, 4.6, 151936, 196),
        "OpenGVLab/InternVL3_5-2B-HF": (1.9, 2.4, 151936, 256),
        "HuggingFaceTB/SmolVLM2-2.2B-Instruct": (2.1, 2.4, 49280, 81),
        "google/gemma-4-E2B-it": (4.5, 5.2, 262144, 70)}
    assert set(expect) == set(gb.ARCHS) == set(gb.STUDY_IMAGES)
    assert sum(gb.STUDY_IMAGES.values()) == 1000 + 1000 + 1000 + 600 + 400
    for name, (lo, hi, vocab, n_visual) in expect.items():
        net, proc = gb.build(name, "meta", torch.bfloat16)
        n = sum(p.numel() for p in net.parameters()) / 1e9
        assert lo <= n <= hi, (name, n)
        assert net.config.get_text_config().vocab_size == vocab
        assert _memory.batching_support(types.SimpleNamespace(model=net)) is None, name
        vlm = readout.VLM(net, proc, proc.tokenizer, name, "", True, "cpu", torch.float32, {},
                          image_kwargs=single_tile_kwargs(proc, 448))
        assert count_visual_tokens(vlm) <= n_visual and count_visual_tokens(vlm) >= 0.9 * n_visual


def test_gpu_benchmark_without_cuda_exits_cleanly():
    import os
    import subprocess
    import sys

    from murk.core import _paths as paths

    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([sys.executable, str(paths.project_root() / "benchmarks" / "readout_gpu.py")], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1].startswith("readout_gpu: no CUDA device")


@pytest.mark.slow
def test_gpu_benchmark_smoke_runs_its_whole_code_path(tmp_path):
    """--smoke: the same code (build, memory-aware batch size, pipelined read-out, FLOPs, bf16 check,
    projection) with a shrunk Gemma 4 on the CPU; every field is printed."""
    import os
    import re
    import subprocess
    import sys

    from murk.core import _paths as paths

    r = subprocess.run([sys.executable, str(paths.project_root() / "benchmarks" / "readout_gpu.py"), "--smoke",
                        "--models", "gemma-e2b", "--seconds", "1", "--bf16-units", "2"],
                       env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("google/gemma-4-E2B-it:"))
    for field in ("units_per_s", "mfu", "wait_share", "images_per_batch", "tokens_per_unit", "bf16_max_abs_dp",
                  "bf16_flip_rate"):
        assert re.search(rf"\b{field}=[0-9.e+-]+", line), (field, line)
    assert "batched=yes" in line and "fallback_units=0" in line
    assert re.search(r"^study_gpu_hours=[0-9.]+ study_gpu_hours_all1000=[0-9.]+", r.stdout.splitlines()[-1])
