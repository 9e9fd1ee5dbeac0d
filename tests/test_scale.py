"""Scaling out: shards, the SLURM profile, kill-and-resume, reproducibility (issue 8).

These run the real stages offline on the shared COCO sample with a tiny checkpoint
(pipeline checks) into temporary output roots.
"""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import xarray as xr

from murk import cube, paths, pipeline

ROOT = paths.project_root()
SAMPLE = ROOT.parent / "shared" / "coco-val2017-sample"
MODEL = "murk-tiny/smolvlm"
N_ITEMS = 4
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not SAMPLE.is_dir(), reason="../shared/coco-val2017-sample not present")]


def _env(**extra):
    return {**os.environ, "MURK_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "MURK_COCO_DIR": str(SAMPLE),
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", **extra}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """select + depth once; each test copies this root."""
    out = tmp_path_factory.mktemp("scale")
    mp = pytest.MonkeyPatch()
    for k, v in _env().items():
        mp.setenv(k, v)
    pipeline.stage_select(n_items=N_ITEMS, seed=1, output_dir=out, run_name="scale-test")
    pipeline.stage_depth(backend="constant", output_dir=out)
    mp.undo()
    return out


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def _values(root: Path, shard_size=None) -> xr.Dataset:
    table, _ = pipeline.read_items(root)
    k = paths.n_shards(len(table), shard_size)
    stores = ([paths.readout_store(MODEL, root)] if shard_size is None else
              [paths.readout_store(MODEL, root, s, shard_size) for s in range(k)])
    return cube._open_shards(stores if len(stores) > 1 else stores[0])


@pytest.fixture(scope="module")
def reference(prepared, tmp_path_factory):
    root = _copy(prepared, tmp_path_factory.mktemp("ref") / "out")
    with pytest.MonkeyPatch.context() as mp:
        for k, v in _env().items():
            mp.setenv(k, v)
        pipeline.stage_readout(MODEL, output_dir=root)
    return _values(root)


def test_slurm_profile_plans_one_gpu_job_per_model_and_shard():
    r = subprocess.run([sys.executable, "-m", "snakemake", "--profile", "profiles/slurm", "-n", "--forceall",
                        "--config", "n_items=6", "shard_size=2", "output_dir=/tmp/murk-slurm-plan"],
                       cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout + r.stderr
    jobs = [b for b in out.split("\nrule ")[1:] if b.startswith("readout_shard:")]
    assert len(jobs) == 2 * 3  # two offline models x three shards
    assert all("gpu=1" in b and "gres=gpu:1" in b for b in jobs)


def test_two_runs_are_bit_identical(prepared, reference, tmp_path):
    root = _copy(prepared, tmp_path / "out")
    with pytest.MonkeyPatch.context() as mp:
        for k, v in _env().items():
            mp.setenv(k, v)
        pipeline.stage_readout(MODEL, output_dir=root)
    xr.testing.assert_identical(_values(root), reference)


def test_shard_sizes_give_the_same_cube(prepared, reference, tmp_path):
    root = _copy(prepared, tmp_path / "out")
    with pytest.MonkeyPatch.context() as mp:
        for k, v in _env().items():
            mp.setenv(k, v)
        for s in range(paths.n_shards(N_ITEMS, 3)):
            pipeline.stage_readout(MODEL, output_dir=root, shard=s, shard_size=3)
        assert pipeline.stage_readout(MODEL, output_dir=root, shard=5, shard_size=3) is None  # beyond the items
    merged = _values(root, shard_size=3)
    xr.testing.assert_identical(merged["value"], reference["value"])
    for name in cube.TEXT_READOUTS:
        assert [str(x) for x in merged[name].values.ravel()] == [str(x) for x in reference[name].values.ravel()]


def test_kill_and_resume(prepared, reference, tmp_path):
    """SIGKILL the read-out at random moments (at least five kills); every resumed run ends with a
    store equal to an uninterrupted run's.

    A run that finishes before it is killed is checked and then started afresh, so that kills keep
    landing at random moments of start-up, model loading and read-out until five have hit.
    """
    import shutil

    root = _copy(prepared, tmp_path / "out")
    store = paths.readout_store(MODEL, root)
    code = (f"from murk import pipeline; pipeline.stage_readout({MODEL!r}, output_dir={str(root)!r})")
    rng = random.Random(8)
    kills = completed = 0
    for _ in range(60):
        p = subprocess.Popen([sys.executable, "-c", code], env=_env(), cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + rng.uniform(1.0, 12.0)
        while p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait()
            kills += 1
            continue
        assert p.returncode == 0
        completed += 1
        ds = _values(root)
        assert bool(ds["done"].all())
        xr.testing.assert_identical(ds["value"], reference["value"])
        if kills >= 5:
            break
        shutil.rmtree(store)  # not enough kills yet: a fresh run to kill again
    assert kills >= 5 and completed >= 1
