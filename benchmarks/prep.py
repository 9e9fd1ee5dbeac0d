"""Benchmark: does the preparation keep an accelerator busy? (issue 38 item 4)

:func:`murk.readout.read_images` prepares each image (rendering its 24 conditions, the box, the
processor, chat templates, tokenizer and token trees of every unit) in worker processes while one
model thread runs the collated batches. This script puts an **emulated model** in that thread: it
waits a fixed time per batch and uses no CPU, as an accelerator's forward passes nearly do, so the
CPUs are the workers'. With the real Qwen3-VL processor, chat template and tokenizer (the
real-format checkpoint ``murk-realformat/qwen3vl``, :func:`murk.offline.build_realformat_checkpoint`)
and COCO images at 448 px:

1. ``prep``: the model takes no time; the steady-state interval between batches is the preparation
   time per batch of the workers (``prep_s_per_batch=``: the span between the arrivals of batch
   ``workers`` and of the last over the batches between; the first ones, which include the workers'
   start and arrive together, are left out);
2. ``x1.5`` and ``x0.5``: the model takes 1.5 and 0.5 times that per batch; ``wait_share=`` is the
   share of the model thread's time spent waiting for input, in the steady state (the first
   ``workers`` batches, filling the pipeline, are left out; ``wait_share_with_fill=`` keeps them). A run whose model
   waits more than 10 % of its time is preparation-bound, and the script says how many workers would
   keep the model busy: ``ceil(workers * prep_s_per_batch / model_s_per_batch)``, at one CPU each.

Lines: one per run (``prep: run= mode= workers= images_per_batch= batches= model_x= model_s_per_batch=
prep_s_per_batch= wait_share= wait_share_with_fill= load=1min,5min,15min cpus=``), ``--rounds`` rounds of
(measure, each multiple), each with its own measured preparation time (the load of a shared machine drifts);
then per multiple the verdict on the median ``wait_share`` of the rounds, with the load.

Run: ``python benchmarks/prep.py`` (about 4 minutes on 2 cores; ``--workers`` defaults to the CPUs
the job was given, :func:`murk.readout.job_cpus`: the emulated model needs none).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

import numpy as np  # noqa: E402

from murk.protocol import questions_for_item  # noqa: E402
from murk.protocol import VERBAL_WORDINGS  # noqa: E402
from murk.readout import _engine as engine  # noqa: E402
from murk.readout import _schedule
from murk.scene import _render as render  # noqa: E402

ROW = {"category": "umbrella", "t2_options": ["car", "umbrella", "bench", "kite"], "t2_answer_index": 1,
       "t3_distractor": "truck"}


@dataclass(frozen=True)
class BenchLoad:
    """A picklable ``load(item)``: a COCO image with a synthetic depth ramp and a central box, its 24 conditions
    rendered by :func:`murk.scene.render_conditions` in the worker (as the read-out stage's
    :class:`murk.readout.ItemJobs` does with the real depth)."""

    images: tuple
    config: dict
    verbal: bool = False

    def __call__(self, i: int) -> _schedule.ImageJob:
        img = self.images[i % len(self.images)]
        h, w = img.shape[:2]
        depth = np.broadcast_to(np.linspace(2.0, 60.0, h, dtype=np.float32)[:, None], (h, w)).copy()
        box = (w * 0.3, h * 0.3, w * 0.4, h * 0.4)
        partner = self.images[(i + 1) % len(self.images)]
        conds = render.render_conditions(img, depth, box, partner, seed=1, image_id=i, config=self.config)
        return _schedule.ImageJob(questions_for_item(ROW, self.config), conds,
                               VERBAL_WORDINGS if self.verbal else ("v1",))


class EmulatedModel:
    """Stands in for :func:`murk.readout._engine._run_prepared`: sleeps ``seconds`` per batch, records when it was called."""

    def __init__(self, seconds: float):
        self.seconds = float(seconds)
        self.calls: list[tuple[float, float]] = []  # (called, returned)

    def __call__(self, vlm, prepared, cfg, stats, bucket, keep_probs=False, collated=None):
        t0 = time.perf_counter()
        if self.seconds > 0:
            time.sleep(self.seconds)
        stats.units += len(prepared)
        stats.batches += 1
        self.calls.append((t0, time.perf_counter()))
        return [{} for _ in prepared]  # read-outs of nothing: the images' results stay empty


def _images(n: int) -> tuple:
    from PIL import Image

    folder = Path(os.environ.get("MURK_COCO_DIR", Path(__file__).resolve().parents[2] / "shared"
                                 / "coco-val2017-sample"))
    files = sorted(folder.glob("val2017/*.jpg")) or sorted(folder.glob("*.jpg"))
    out = []
    for f in files[:n]:
        with Image.open(f) as im:  # at the presented size: the longest side 448 px
            im = im.convert("RGB")
            im.thumbnail((448, 448), Image.Resampling.LANCZOS)
            out.append(np.asarray(im))
    if not out:
        raise SystemExit(f"no COCO images under {folder}: set MURK_COCO_DIR")
    return tuple(out)


def run(vlm, load, n_batches: int, per_batch: int, workers: int, model_s: float) -> dict:
    """One read-out of ``n_batches`` scheduled batches with the emulated model; timings of the steady state."""
    model = EmulatedModel(model_s)
    real = engine._run_prepared
    engine._run_prepared = model
    stats = _schedule.EngineStats()
    t0 = time.perf_counter()
    try:
        batches = _schedule.schedule(0, n_batches * per_batch, per_batch)
        for _ in engine.read_images(vlm, batches, load, config=load.config, workers=workers, progress=False,
                                    stats=stats):
            pass
    finally:
        engine._run_prepared = real
    calls = model.calls
    waits = [calls[0][0] - t0] + [calls[b][0] - calls[b - 1][1] for b in range(1, len(calls))]
    busy = [r - c for c, r in calls]
    # the first w batches fill the pipeline (w workers start and finish them about together): the steady state
    # is what follows
    first = min(max(workers, 1), len(calls) - 1)
    steady = sum(waits[first:]) / max(sum(waits[first:]) + sum(busy[first:]), 1e-12)
    fill = sum(waits) / max(sum(waits) + sum(busy), 1e-12)
    interval = (calls[-1][0] - calls[first - 1][0]) / max(len(calls) - first, 1)
    return {"steady": steady, "fill": fill, "interval": interval,
            "batches": len(calls), "mode": "processes" if workers >= 2 else "thread"}


def line(name: str, r: dict, workers: int, per_batch: int, x: float, model_s: float, prep_s: float) -> str:
    one, five, fifteen = os.getloadavg()
    return (f"prep: run={name} mode={r['mode']} workers={workers} images_per_batch={per_batch} "
            f"batches={r['batches']} model_x={x:g} model_s_per_batch={model_s:.3f} prep_s_per_batch={prep_s:.3f} "
            f"wait_share={r['steady']:.3f} wait_share_with_fill={r['fill']:.3f} "
            f"load={one:.2f},{five:.2f},{fifteen:.2f} cpus={engine.job_cpus()}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=engine.job_cpus(),
                    help="preparing workers (processes when >= 2); default: the CPUs the job was given")
    ap.add_argument("--images-per-batch", type=int, default=1)
    ap.add_argument("--batches", type=int, default=12, help="scheduled batches per run")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of (measure, each multiple); medians reported")
    ap.add_argument("--verbal", action="store_true", help="ask the verbal wordings v2, v3 of every item too")
    ap.add_argument("--multiples", type=float, nargs="+", default=[1.5, 0.5],
                    help="model time per batch, in multiples of the measured preparation time per batch")
    a = ap.parse_args(argv)

    import torch

    from murk.core import load_config
    from murk.offline import build_realformat_checkpoint
    from murk.readout import load_vlm

    torch.set_num_threads(1)  # the model thread's torch: the emulated model computes nothing
    cfg = load_config()
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_realformat_checkpoint("qwen3vl", Path(tmp) / "qwen3vl", seed=0)
        vlm = load_vlm(str(folder), device="cpu")
    load = BenchLoad(_images(4), cfg, a.verbal)
    k, w = a.images_per_batch, a.workers
    print(f"prep: the real Qwen3-VL processor ({type(vlm.processor).__name__}), {vlm.n_visual_tokens} visual "
          f"tokens at 448 px, {_schedule.N_CONDITIONS} units per image, verbal wordings "
          f"{'v1-v3' if a.verbal else 'v1'}", flush=True)
    verdicts = {x: [] for x in a.multiples}
    for rnd in range(a.rounds):  # each round measures the preparation again: the load of a shared machine drifts
        r = run(vlm, load, a.batches, k, w, 0.0)
        prep_s = r["interval"]
        print(line(f"prep/{rnd + 1}", r, w, k, 0.0, 0.0, prep_s), flush=True)
        for x in a.multiples:
            model_s = x * prep_s
            r = run(vlm, load, a.batches, k, w, model_s)
            print(line(f"x{x:g}/{rnd + 1}", r, w, k, x, model_s, prep_s), flush=True)
            verdicts[x].append((r["steady"], math.ceil(w * prep_s / model_s)))
    for x, got in verdicts.items():
        share = sorted(s_ for s_, _ in got)[len(got) // 2]
        need = max(n for _, n in got)
        one, five, fifteen = os.getloadavg()
        if share > 0.1 and need <= w:
            print(f"prep: x{x:g}: the model waits {share:.3f} of its time for input (median of {len(got)} rounds) "
                  f"with {w} worker(s), which would keep it busy on CPUs of their own: the waiting is the "
                  f"machine's load; load={one:.2f},{five:.2f},{fifteen:.2f}", flush=True)
        elif share > 0.1:
            print(f"prep: x{x:g}: preparation-bound: the model waits {share:.3f} of its time for input (median of "
                  f"{len(got)} rounds) with {w} worker(s); about {need} workers (one CPU each) would keep it busy; "
                  f"load={one:.2f},{five:.2f},{fifteen:.2f}", flush=True)
        else:
            print(f"prep: x{x:g}: the model is busy: it waits {share:.3f} of its time for input (median of "
                  f"{len(got)} rounds) with {w} worker(s); load={one:.2f},{five:.2f},{fifteen:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
