"""Scaling out: shards, the SLURM profile, kill-and-resume, reproducibility (issue 8).

These run the real stage notebooks (jupytext → papermill, tests/stages.py) offline on
the shared COCO sample with a tiny checkpoint (pipeline checks) into temporary output
roots.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import xarray as xr

from _killing import KillableRun, done_flags
from murk.core import _paths as paths
from murk.protocol import _item_files
from murk.protocol import _items as items
from murk.results import _cube as cube

import stages  # tests/stages.py: the stage notebooks through papermill

ROOT = paths.project_root()
SAMPLE = stages.SAMPLE
MODEL = "murk-tiny/smolvlm"
N_ITEMS = 4
pytestmark = [pytest.mark.slow, stages.needs_sample]


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
    table, _ = _item_files.read_items(root)
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


def test_slurm_gpu_profile_plans_one_gpu_job_per_model_and_shard():
    r = subprocess.run([sys.executable, "-m", "snakemake", "--profile", "profiles/slurm-gpu", "-n", "--forceall",
                        "--config", "n_items=6", "shard_size=2", "output_dir=/tmp/murk-slurm-plan"],
                       cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout + r.stderr
    jobs = [b for b in out.split("\nrule ")[1:] if b.startswith("readout_shard:")]
    assert len(jobs) == 2 * 3  # two offline models x three shards
    assert all("gpu=1" in b for b in jobs)  # profiles/slurm (CPU only): gpu=0, tests/test_slurm_profiles.py


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


# --- kill and resume, at moments chosen from observed progress (never from wall-clock guesses) ---

def _readout_run(root: Path, faults: Path, pause_at: int | None = None, done_before: int = 0) -> KillableRun:
    """The read-out as Snakemake's rule runs it (papermill through murk.pipeline.execute on notebooks/03_readout.py),
    killable; ``pause_at``: pause inside the write of the image at this position (after its values), when
    ``done_before`` images before it are done already (this run writes the others, in order)."""
    executed = faults / "03_readout.ipynb"
    cmd = [sys.executable, "-m", "murk.pipeline.execute", "notebooks/03_readout.py", str(executed), "--cwd", str(ROOT),
           "-p", "output_dir", str(root), "-p", "model", MODEL]
    # the value variable's shard file (all images of the store), written once per image this run writes
    shard = paths.readout_store(MODEL, root) / "value" / "c" / "0" / "0" / "0" / "0" / "0"
    return KillableRun(cmd, ROOT, _env(), faults, pause_at=None if pause_at is None else shard,
                       pause_after=1 + (pause_at or 0) - done_before)


def test_kill_and_resume(prepared, reference, tmp_path):
    """SIGKILL the read-out (notebook, papermill kernel and all) three times, each at a moment chosen
    from observed progress: in the middle of writing the first image (its values written, its
    ``done`` flag not), right after the first image is marked done, and in the middle of writing the
    last image. The next run ends with a store equal to an uninterrupted run's, re-reading only the
    image that was not finished: the two runs are bit-identical, values, texts, flags and attributes (this
    is also the check that two runs of the read-out agree, issue 8).
    """
    import zarr

    root = _copy(prepared, tmp_path / "out")
    store = paths.readout_store(MODEL, root)
    last = N_ITEMS - 1

    run = _readout_run(root, tmp_path / "f1", pause_at=0)  # kill 1: inside the first image's write
    run.wait_for(lambda: run.paused, "pause inside image 0's write")
    run.kill()
    assert done_flags(store) == [False] * N_ITEMS
    assert (store / "value" / "c" / "0" / "0" / "0" / "0" / "0").is_file()  # its values written, its done flag not

    run = _readout_run(root, tmp_path / "f2")  # kill 2: as soon as the first image is marked done
    run.wait_for(lambda: any(done_flags(store)), "image marked done")
    run.kill()
    assert done_flags(store)[0]

    run = _readout_run(root, tmp_path / "f3", pause_at=last, done_before=sum(done_flags(store)))  # kill 3: inside
    # the last image's write
    run.wait_for(lambda: run.paused, f"pause inside image {last}'s write")
    run.kill()
    assert done_flags(store) == [True] * last + [False]

    run = _readout_run(root, tmp_path / "f4")  # resume to the end
    assert run.finish() == 0, run.text()[-3000:]
    # only the unfinished image was read out again: its 24 units (the bar counts (image, condition) units)
    assert "24/24 [" in (run.faults / "03_readout.ipynb").read_text()
    ds = _values(root)
    assert bool(ds["done"].all())
    xr.testing.assert_identical(ds, reference[0])  # the whole store: values, texts, flags, attributes
    for name in cube.TEXT_READOUTS:
        assert [str(x) for x in ds[name].values.ravel()] == [str(x) for x in reference[0][name].values.ravel()]
    assert not list(store.rglob("*.partial"))  # half-written chunk files of the kills were cleaned
    zarr.open_group(store, mode="r", zarr_format=3)  # a sound store (zarr 3, sharded)
