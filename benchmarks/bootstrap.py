"""Benchmark: the whole paired bootstrap of the analysis on a synthetic cube.

5 models × 2 arms (fog, underwater) × 9 levels (clean + 8) × 2 tasks (t2; t3 as
two questions) × 1000 images, with the blank-image control for the blank-floor
variant; 1000 resamples per condition value (means, ECE, AUROC, coverage/risk,
confident errors) and 2000 for crossing points (spec Sec. III), all from one
draw via :func:`murk.results.analyse`. Target: <= 60 s on 2 cores, < 4 GiB.

Run: ``.venv/bin/python benchmarks/bootstrap.py [--images 1000] [--models 5]``.
Load lines at the start and end (``benchmarks/protocol.py``). The last line printed is
``seconds=<x> peak_gib=<y> load_max= cpus=`` (peak resident memory of
the process, from ``resource.getrusage``; the tracemalloc peak of the analysis
alone is printed on the line before).
"""

from __future__ import annotations

import argparse
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "2")  # two cores (before NumPy loads its BLAS)

import resource  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' shared modules
from protocol import LoadLog  # noqa: E402

import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

from murk.results import _analysis as analysis  # noqa: E402
from murk.results import _cube as cube  # noqa: E402


def synthetic_cube(n_models: int = 5, n_images: int = 1000, seed: int = 0,
                   arms=("fog", "underwater", "blank")) -> xr.Dataset:
    """A cube with accuracy falling at ~12 m, a flat confidence and a rising abstain rate."""
    rng = np.random.default_rng(seed)
    one = cube.empty_model_dataset(np.arange(n_images), ["car"] * n_images).sel(arm=list(arms))
    ds = xr.concat([one] * n_models, dim="model").assign_coords(model=[f"synthetic/m{k}" for k in range(n_models)])
    shape = ds["value"].shape[:-1]
    vis = ds["visibility_m"].values
    p = np.where(np.isinf(vis), 0.95, 0.25 + 0.7 / (1 + (12.0 / vis) ** 3))
    p = np.broadcast_to(p[None, None, :, None, None], shape)
    val = np.full(ds["value"].shape, np.nan, dtype=cube.VALUE_DTYPE)  # float64, as the cube stores it
    ro = list(ds["readout"].values)
    val[..., ro.index("correct")] = rng.random(shape) < p
    val[..., ro.index("c_int")] = np.clip(rng.normal(0.8, 0.15, shape), 0.25, 1.0)
    val[..., ro.index("verbal_conf")] = np.round(np.clip(rng.normal(0.9, 0.1, shape), 0, 1), 2)
    val[..., ro.index("abstain")] = rng.random(shape) < 1 - p
    val[..., ro.index("abstain2")] = rng.random(shape) < 0.3
    val[..., ro.index("answer")] = 0
    val[..., ro.index("option_mass")] = 1
    if "blank" in arms:
        val[:, list(arms).index("blank"), 1:] = np.nan
    return ds.assign(value=(ds["value"].dims, val))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=5)
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--resamples-crossing", type=int, default=2000)
    args = ap.parse_args(argv)
    log = LoadLog("bootstrap")
    ds = synthetic_cube(args.models, args.images)
    tracemalloc.start()
    t0 = time.perf_counter()
    res = analysis.analyse(ds, args.resamples, args.resamples_crossing, seed=0)
    seconds = time.perf_counter() - t0
    _, traced = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    s = res["scores"]
    print(f"cube {dict(ds['value'].sizes)}; scores {dict(s.sizes)}", file=sys.stderr)
    print(f"tracemalloc_peak_gib={traced / 2**30:.3f}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux
    log.end()
    print(f"seconds={seconds:.1f} peak_gib={rss / 2**30:.2f} {log.tail()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
