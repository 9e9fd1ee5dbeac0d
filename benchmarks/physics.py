"""Benchmark: render all 16 physical conditions of one 448 x 448 image on one core.

Times ``physics.fog_sweep`` + ``physics.underwater_sweep`` over ``SWEEP_M`` (the image
decoded and the depth read once per image, issue 3, item 6; target <= 50 ms) against a
naive per-level loop that calls the plain float64 formulation of Eq. (1) at every level
(sRGB decoded at every level, pow-based encoding). Both run single-threaded (the thread
variables are set before NumPy is imported, and threadpoolctl limits any pool to 1).
Times are process CPU time, which for a single-threaded process is its time on one core and
is not inflated by other processes sharing the machine (wall-clock minima are printed
too). The two arms run interleaved (``protocol.interleave``, ``--rounds`` rounds in
alternating order); each round times the sweep ``--repeats`` times and the naive loop
once, minimum of each (``timeit`` convention: the least disturbed run). The ratio is the
median of the per-round ratios, with their range; the times are the minima over all
rounds. Load lines at the start and end (``protocol.LoadLog``).

Run ``python benchmarks/physics.py`` (add ``--exhaustive`` to check the table encoder
against the float64 reference on every float32 in [0, 1]; about a minute per core).
The last line is ``sweep_ms=<x> naive_ms=<y> ratio=<z> ratio_range=<lo>-<hi> load_max= cpus=``.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' shared modules

import numpy as np  # noqa: E402
from protocol import LoadLog, fmt_ratio, interleave, ratio_summary  # noqa: E402

from murk.scene import _physics as physics  # noqa: E402


def naive(image: np.ndarray, depth_m: np.ndarray) -> np.ndarray:
    """All 16 conditions, one level at a time, with the float64 reference kernel."""
    out = []
    for v in physics.SWEEP_M:
        out.append(physics._render_reference(image, depth_m, np.array([v]), None,
                                             np.full(3, physics.FOG_AIRLIGHT))[0])
    for v in physics.SWEEP_M:
        out.append(physics._render_reference(image, depth_m, np.array([v]),
                                             physics._UNDERWATER_RELATIVE_BETA,
                                             physics.underwater_veiling_light())[0])
    return np.stack(out)


def sweep(image: np.ndarray, depth_m: np.ndarray) -> np.ndarray:
    """All 16 conditions with the vectorised sweeps (decode once per image)."""
    return np.concatenate([physics.fog_sweep(image, depth_m), physics.underwater_sweep(image, depth_m)])


def exhaustive(chunk: int = 1 << 24) -> None:
    """Table encoder == float64 reference on all float32 bit patterns in [0, 1]."""
    one = int(np.float32(1.0).view(np.uint32))
    for start in range(0, one + 1, chunk):
        bits = np.arange(start, min(start + chunk, one + 1), dtype=np.uint32)
        x = bits.view(np.float32)
        fast = physics._encode_uint8_lut(x)
        ref = physics._encode_uint8(x.astype(np.float64))
        if not np.array_equal(fast, ref):
            bad = x[fast != ref]
            raise SystemExit(f"encoder mismatch at {bad[:5]}")
    print(f"exhaustive: table encoder == float64 reference on all {one + 1} float32 in [0, 1]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=448)
    parser.add_argument("--repeats", type=int, default=3, help="sweep calls per round (their minimum)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the two arms")
    parser.add_argument("--exhaustive", action="store_true")
    args = parser.parse_args()
    log = LoadLog("physics")
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(1)
    except ImportError:  # pragma: no cover
        pass

    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (args.size, args.size, 3), dtype=np.uint8)
    depth = rng.uniform(0.5, 80.0, (args.size, args.size))

    fast, ref = sweep(image, depth), naive(image, depth)
    diff = np.abs(fast.astype(np.int16) - ref)
    print(f"16 conditions of a {args.size}x{args.size} image: max |code - float64 reference| = "
          f"{int(diff.max())}, differing values {np.count_nonzero(diff)} of {diff.size}")
    sweep(image, depth), naive(image, depth)  # warm-up
    wall = {"sweep": [], "naive": []}

    def timed(name, fn, k):
        def go():
            cpu = []
            for _ in range(k):
                c0, t0 = time.process_time(), time.perf_counter()
                fn(image, depth)
                cpu.append(time.process_time() - c0)
                wall[name].append(time.perf_counter() - t0)
            return min(cpu)
        return go

    secs = interleave({"sweep": timed("sweep", sweep, args.repeats), "naive": timed("naive", naive, 1)},
                      args.rounds, log)
    sweep_ms, naive_ms = 1000.0 * min(secs["sweep"]), 1000.0 * min(secs["naive"])
    sweep_wall, naive_wall = 1000.0 * min(wall["sweep"]), 1000.0 * min(wall["naive"])
    ratio = ratio_summary(secs["naive"], secs["sweep"])
    if args.exhaustive:
        exhaustive()
    print(f"per image, one core (CPU time, min of repeats): sweep {sweep_ms:.1f} ms, naive {naive_ms:.1f} ms; "
          f"wall: {sweep_wall:.1f} ms, {naive_wall:.1f} ms; target <= 50 ms: "
          f"{'met' if sweep_ms <= 50 else 'NOT met'}")
    log.end()
    print(f"sweep_ms={sweep_ms:.1f} naive_ms={naive_ms:.1f} {fmt_ratio('ratio', ratio, 1)} {log.tail()}")


if __name__ == "__main__":
    main()
