"""murk.readout.read_images: preparation in worker processes (issue 38 item 4).

The preparing workers are processes when ``workers >= 2`` and what they need can be sent to them,
threads otherwise; the read-outs are the same bit for bit either way, and bad input, a failed rendering
and any other error behave as in the threads path (tests/test_engine_batched.py).
"""

from __future__ import annotations

import logging
import multiprocessing
import pickle
from dataclasses import dataclass

import numpy as np
import pytest

from murk.core import load_config
from murk.protocol import questions_for_item
from murk.readout import _engine as engine
from murk.readout import _memory
from murk.readout import _schedule

ROWS = ({"category": "umbrella", "t2_options": ["car", "umbrella", "bench", "kite"], "t2_answer_index": 1,
         "t3_distractor": "truck"},
        {"category": "dog", "t2_options": ["dog", "horse", "sheep", "cow"], "t2_answer_index": 0,
         "t3_distractor": "cat"})


def _failing_rendering(image):
    yield "clean", 0, image
    raise ValueError("operands could not be broadcast together with shapes (224,224) (100,100)")


@dataclass(frozen=True)
class _Load:
    """A picklable load(item): two conditions of small images; item 1 is missing, item 2's rendering fails,
    item 5 raises an error that is not bad input. ``in_worker``: refuse to run outside a worker process."""

    images: tuple
    config: dict
    in_worker: bool = False

    def __call__(self, i: int) -> _schedule.ImageJob:
        if self.in_worker and multiprocessing.parent_process() is None:
            raise AssertionError("load ran in the main process: the workers were not processes")
        if i == 1:
            raise FileNotFoundError(f"image of item {i} is missing (test)")
        if i == 5:
            raise RuntimeError("a bug in load (test)")
        img = self.images[i % len(self.images)]
        qs = questions_for_item(ROWS[i % 2], self.config)
        if i == 2:
            return _schedule.ImageJob(qs, _failing_rendering(img))
        verbal = ("v1", "v2", "v3") if i == 0 else ("v1",)
        return _schedule.ImageJob(qs, [("clean", 0, img), ("fog", 4, img)], verbal)


@pytest.fixture(scope="module")
def images(coco_image):
    crop = np.ascontiguousarray(coco_image[: coco_image.shape[0] // 2, : coco_image.shape[1] * 2 // 3])
    return (coco_image, crop)


def _read(vlm, load, workers):
    out, err = {}, None
    try:
        for r in engine.read_images(vlm, [[0, 1], [2, 3], [4, 5]], load, config=load.config, workers=workers,
                                    progress=False):
            out[r.item] = r
    except RuntimeError as e:
        err = e
    return out, err


@pytest.mark.parametrize("arch", ["qwen3vl", "gemma"])
def test_a_workers_preparation_equals_the_model_threads(arch, tiny_vlms, images, monkeypatch):
    """What a worker process computes, in this process: the preparation view (no weights; Qwen3-VL's
    get_rope_index borrowed) and the trip through pickle give the rows of the threads path, bit for bit."""
    import torch

    vlm = tiny_vlms[arch]
    cfg = load_config()
    load = _Load(images, cfg)
    support = _memory.batching_support(vlm)
    monkeypatch.setattr(engine, "_WORKER", {})
    threads = torch.get_num_threads()
    try:
        engine._worker_start(pickle.loads(pickle.dumps(engine._prep_view(vlm))), load, cfg, support)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)  # this process is not a worker
    for i in (0, 1, 3):
        got = engine._received(engine._worker_prepare(i))
        want = engine._prepare_image(vlm, i, load, cfg, support)
        assert (got.item, got.missing) == (want.item, want.missing) and len(got.units) == len(want.units)
        for g, w in zip(got.units, want.units):
            assert g.fallback == w.fallback is None and g.slots == w.slots
            assert np.array_equal(g.unit.image, w.unit.image)
            for rg, rw in zip(g.rows, w.rows):
                assert (rg is None) == (rw is None)
                if rg is None:
                    continue
                for f in ("ids", "depth", "pos", "anc", "vblock"):
                    assert np.array_equal(getattr(rg, f), getattr(rw, f)), f
                assert (rg.n_end, rg.end_of_prompt, rg.gen_ends, rg.n_vision, rg.mrope, rg.n_image_tokens,
                        rg.vision_pairs) == (rw.n_end, rw.end_of_prompt, rw.gen_ends, rw.n_vision, rw.mrope,
                                             rw.n_image_tokens, rw.vision_pairs)
                assert rg.vision.keys() == rw.vision.keys()
                for k in rg.vision:
                    assert rg.vision[k].dtype == rw.vision[k].dtype and torch.equal(rg.vision[k], rw.vision[k])


@pytest.mark.realsize  # a process pool's start imports torch and transformers again: 5-15 s on 2 cores
def test_processes_read_out_bit_for_bit_as_threads(tiny_vlms, images):
    """Qwen3-VL (its M-RoPE positions come from the model's get_rope_index, borrowed by the workers without
    the weights): 2 worker processes give the same read-outs bit for bit as one thread; bad input and a failed
    rendering are recorded per image; an error that is not bad input stops the read-out as in threads."""
    vlm = tiny_vlms["qwen3vl"]
    cfg = load_config()
    threads, t_err = _read(vlm, _Load(images, cfg), workers=1)
    procs, p_err = _read(vlm, _Load(images, cfg, in_worker=True), workers=2)
    assert sorted(procs) == sorted(threads) == [0, 1, 2, 3]  # batch [4, 5] raised before yielding
    assert isinstance(p_err, RuntimeError) and str(p_err) == str(t_err) == "a bug in load (test)"
    assert procs[1].results is None and procs[1].missing_reason == "image of item 1 is missing (test)"
    assert procs[2].results is None and procs[2].missing_reason == (
        "rendering failed: ValueError: operands could not be broadcast together with shapes (224,224) (100,100)")
    for i in (0, 3):
        assert procs[i].missing_reason is None and len(procs[i].results) == 2 * 3
    for i in threads:  # every value, bit for bit
        assert pickle.dumps((procs[i].results, procs[i].missing_reason, procs[i].fallbacks)) == \
            pickle.dumps((threads[i].results, threads[i].missing_reason, threads[i].fallbacks))


def test_a_load_that_cannot_be_sent_prepares_in_threads(tiny_vlms, images, caplog):
    """A closure cannot be pickled for a process: the read-out prepares in threads, says why, and reads out."""
    vlm = tiny_vlms["smolvlm"]
    cfg = load_config()
    inner = _Load(images, cfg)

    def load(i):  # a closure
        return inner(i)

    with caplog.at_level(logging.INFO, logger="murk"):
        got = list(engine.read_images(vlm, [[0]], load, config=cfg, workers=2, progress=False))
    assert "preparing in 2 threads, not processes" in caplog.text and "load" in caplog.text
    assert got[0].missing_reason is None and len(got[0].results) == 6


def test_what_a_worker_gets_has_no_weights(tiny_vlms):
    """The preparation view pickles without the model's weights; a function of a __main__ that a process cannot
    import (a notebook) is refused before any process starts."""
    vlm = tiny_vlms["qwen3vl"]
    view = engine._prep_view(vlm)
    blob = pickle.dumps(view)
    weights = sum(p.numel() * p.element_size() for p in vlm.model.parameters())
    assert b"torch._utils" not in blob and not hasattr(view.model, "parameters")
    assert weights > 0 and engine._unshippable(view) is None and view.device == "cpu"
    assert view.model.model.get_rope_index.__func__ is type(vlm.model.model).get_rope_index

    import sys
    import types

    notebook = types.ModuleType("__main__")  # a kernel's __main__: no file
    exec("def load(i):\n    return i\n", notebook.__dict__)
    saved = sys.modules["__main__"]
    sys.modules["__main__"] = notebook
    try:
        why = engine._unshippable(notebook.load)
    finally:
        sys.modules["__main__"] = saved
    assert why is not None and "defined in __main__" in why


def test_workers_from_the_cpus_the_job_was_given(monkeypatch):
    """Affinity, and SLURM_CPUS_PER_TASK when set (the smaller); a malformed value is ignored."""
    monkeypatch.setattr(engine.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5, 6, 7})
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    assert engine.job_cpus() == 8
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "4")
    assert engine.job_cpus() == 4
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "64")
    assert engine.job_cpus() == 8
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "4; rm -rf /")
    assert engine.job_cpus() == 8


def test_the_stages_load_pickles_and_reports_bad_input(tmp_path):
    """murk.readout.ItemJobs (the read-out stage's load) travels to a process by pickle, and a missing image is
    bad input (FileNotFoundError, recorded by read_images as the image's missing reason)."""
    import pandas as pd

    cfg = load_config()
    table = pd.DataFrame([{"image_id": 7, "file_name": "000000000007.jpg", "width": 640, "height": 480,
                           "bbox": [10.0, 10.0, 50.0, 50.0], **ROWS[0]}])
    jobs = _schedule.ItemJobs(table, np.array([0]), str(tmp_path), str(tmp_path), cfg, seed=1, n_verbal_items=1)
    assert engine._unshippable(jobs) is None
    back = pickle.loads(pickle.dumps(jobs))
    assert back.table.equals(table) and back.n_verbal_items == 1
    with pytest.raises(FileNotFoundError, match="000000000007.jpg"):
        back(0)
