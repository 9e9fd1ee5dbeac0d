"""Scaling out: shards, the SLURM profile, kill-and-resume, reproducibility (issue 8).

These run the real stage notebooks (jupytext → papermill, tests/stages.py) offline on
the shared COCO sample with a tiny checkpoint (pipeline checks) into temporary output
roots.
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

from murk import cube, items, paths

import stages  # tests/stages.py: the stage notebooks through papermill

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
    stages.run("01_select", out, n_items=N_ITEMS, seed=1, run_name="scale-test")
    stages.run("02_depth", out, backend="constant")
    mp.undo()
    return out


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def _values(root: Path, shard_size=None) -> xr.Dataset:
    table, _ = items.read_items(root)
    k = paths.n_shards(len(table), shard_size)
    stores = ([paths.readout_store(MODEL, root)] if shard_size is None else
              [paths.readout_store(MODEL, root, s, shard_size) for s in range(k)])
    return cube._open_shards(stores if len(stores) > 1 else stores[0])


@pytest.fixture(scope="module")
def reference(prepared, tmp_path_factory):
    """An uninterrupted read-out, run as a subprocess; also how long such a run takes here (observed)."""
    root = _copy(prepared, tmp_path_factory.mktemp("ref") / "out")
    t0 = time.monotonic()
    subprocess.run(stages.command("03_readout", root, model=MODEL), env=_env(), cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return _values(root), time.monotonic() - t0


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
        stages.run("03_readout", root, model=MODEL)
    xr.testing.assert_identical(_values(root), reference[0])


def test_shard_sizes_give_the_same_cube(prepared, reference, tmp_path):
    root = _copy(prepared, tmp_path / "out")
    with pytest.MonkeyPatch.context() as mp:
        for k, v in _env().items():
            mp.setenv(k, v)
        for s in range(paths.n_shards(N_ITEMS, 3)):
            stages.run("03_readout", root, suffix=f"-s{s}", model=MODEL, shard=s, shard_size=3)
        stages.run("03_readout", root, suffix="-s5", model=MODEL, shard=5, shard_size=3)  # beyond the items
        assert not paths.readout_store(MODEL, root, 5, 3).exists()  # nothing to do, nothing written
    merged = _values(root, shard_size=3)
    xr.testing.assert_identical(merged["value"], reference[0]["value"])
    for name in cube.TEXT_READOUTS:
        assert [str(x) for x in merged[name].values.ravel()] == [str(x) for x in reference[0][name].values.ravel()]


def test_kill_and_resume(prepared, reference, tmp_path):
    """SIGKILL the read-out notebook (papermill and its kernel, as a scheduler kills a job) at random
    moments, at least five times; the resumed run ends with a store equal to an uninterrupted run's.

    The kill moments are drawn over the observed duration of the uninterrupted run (start-up, model
    loading and read-out alike). A run that finishes before its kill is checked and then started
    afresh, so that kills keep landing until five have hit; a last run then completes the store.
    """
    import shutil

    ref, duration = reference
    root = _copy(prepared, tmp_path / "out")
    store = paths.readout_store(MODEL, root)
    cmd = stages.command("03_readout", root, model=MODEL)
    rng = random.Random(8)
    kills = 0

    def start():
        return subprocess.Popen(cmd, env=_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)

    for _ in range(40):
        p = start()
        deadline = time.monotonic() + rng.uniform(0.05, 1.0) * duration
        while p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            kills += 1
            if kills >= 5:
                break
            continue
        assert p.returncode == 0
        xr.testing.assert_identical(_values(root)["value"], ref["value"])
        shutil.rmtree(store)  # finished before its kill: a fresh run to kill again
    assert kills >= 5
    p = start()
    assert p.wait() == 0  # resumes from whatever the kills left
    ds = _values(root)
    assert bool(ds["done"].all())
    xr.testing.assert_identical(ds["value"], ref["value"])
