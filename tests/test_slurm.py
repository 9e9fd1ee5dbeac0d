"""The sharded offline demo on a real SLURM cluster, through the README's command (issue 22).

Needs a slurmctld that answers ``sinfo`` (on one machine: ``sudo .ci/slurm-localhost start``; CI does this);
skipped otherwise. The demo runs with the smallest settings that shard (one offline model, two items, one item
per shard), one read-out shard is cancelled (``scancel``) while it writes its store, and the run must retry it
and finish; its cube must equal a local unsharded run's bit for bit (data variables, coordinates, attributes).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import xarray as xr

from murk import paths, runlock

ROOT = paths.project_root()
SAMPLE = ROOT.parent / "shared" / "coco-val2017-sample"
MODEL = "murk-tiny/smolvlm"
#: the README's command for a CPU-only cluster (Scaling out: shards, GPUs, SLURM); the test adds only --config
README_COMMAND = "snakemake --profile profiles/slurm --config shard_size=100"
SETTINGS = ["n_items=2", f"offline_models=[{MODEL}]", "run_name=slurm-test"]
DRIVER_TIMEOUT_S = 1500


def _cluster_answer() -> str | None:
    """None when a slurmctld answers ``sinfo`` with a usable node, else why not."""
    if shutil.which("sinfo") is None:
        return "no SLURM client (sinfo) on PATH"
    try:
        r = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "sinfo did not answer within 20 s"
    if r.returncode != 0:
        return f"no slurmctld answers sinfo ({r.stderr.strip()[:200]})"
    if not {"idle", "mixed", "allocated"} & set(r.stdout.split()):
        return f"no SLURM node is up (sinfo: {r.stdout.split()})"
    return None


_WHY = _cluster_answer()
pytestmark = [pytest.mark.slurm, pytest.mark.slow,
              pytest.mark.skipif(_WHY is not None,
                                 reason=f"needs a SLURM cluster (sudo .ci/slurm-localhost start): {_WHY}"),
              pytest.mark.skipif(not SAMPLE.is_dir(), reason="../shared/coco-val2017-sample not present")]


def _env():
    return {**os.environ, "MURK_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "MURK_COCO_DIR": str(SAMPLE), "MPLBACKEND": "Agg",
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


def _squeue() -> list[tuple[str, str, str, str]]:
    """(job id, state, job name, comment) of every job slurmctld still knows."""
    r = subprocess.run(["squeue", "-h", "--states=all", "-o", "%i|%T|%j|%k"], capture_output=True, text=True,
                       timeout=30)
    return [tuple(line.split("|", 3)) for line in r.stdout.splitlines() if line.count("|") >= 3]


def _writers(root: Path) -> dict[str, Path]:
    """SLURM job id -> the shard store its read-out is writing (from the stores' writer records)."""
    out = {}
    for rec in (root / "readout").rglob(f"*{runlock.STORE_RECORD_SUFFIX}"):
        try:
            job = json.loads(rec.read_text()).get("slurm_job_id")
        except (OSError, ValueError):
            continue
        if job:
            out[job] = Path(str(rec)[: -len(runlock.STORE_RECORD_SUFFIX)])
    return out


def _stop(proc: subprocess.Popen, names: set[str]):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for name in names:  # the run's SLURM jobs (the executor names them all by the run's id)
        subprocess.run(["scancel", "--name", name], capture_output=True, timeout=30)


def test_sharded_demo_on_slurm_retries_a_cancelled_shard_and_equals_the_local_cube(tmp_path):
    assert README_COMMAND in (ROOT / "README.md").read_text(encoding="utf-8")
    slurm_out, local_out = tmp_path / "slurm", tmp_path / "local"
    words = README_COMMAND.split()
    driver_cmd = [sys.executable, "-m", *words[:4], "shard_size=1", f"output_dir={slurm_out}", *SETTINGS]
    assert words[:3] == ["snakemake", "--profile", "profiles/slurm"] and words[3] == "--config"
    log_path = tmp_path / "driver.log"
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        driver = subprocess.Popen(driver_cmd, cwd=ROOT, env=_env(), stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    names: set[str] = set()
    try:
        # a read-out shard job that runs and writes its store (its writer record names the job): cancel it
        cancelled = store = None
        while cancelled is None:
            assert driver.poll() is None, f"the driver ended before a shard ran:\n{log_path.read_text()[-4000:]}"
            assert time.monotonic() - t0 < DRIVER_TIMEOUT_S, "no read-out shard ran on the cluster"
            jobs = _squeue()
            names |= {name for _, _, name, comment in jobs if comment.startswith("rule_")}
            running = {jid for jid, state, _, comment in jobs
                       if state == "RUNNING" and comment.startswith("rule_readout_shard")}
            hits = sorted(set(_writers(slurm_out)) & running)
            if hits:
                cancelled, store = hits[0], _writers(slurm_out)[hits[0]]
                subprocess.run(["scancel", cancelled], check=True, timeout=30)
            else:
                time.sleep(1)
        t_cancel = time.monotonic() - t0
        # meanwhile, the local unsharded run of the same settings
        local = subprocess.run([sys.executable, "-m", "snakemake", "--profile", "profiles/local", "--config",
                                f"output_dir={local_out}", *SETTINGS], cwd=ROOT, env=_env(),
                               capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S)
        assert local.returncode == 0, local.stderr[-4000:]
        try:
            rc = driver.wait(timeout=max(60, DRIVER_TIMEOUT_S - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            pytest.fail(f"the SLURM driver still runs after {DRIVER_TIMEOUT_S} s (job {cancelled} was cancelled at "
                        f"{t_cancel:.0f} s):\n{log_path.read_text()[-4000:]}")
    finally:
        _stop(driver, names)
    log = log_path.read_text()
    assert rc == 0, log[-4000:]
    # the cancelled shard was seen as failed (not as running) and ran again in another job, which finished it
    assert f"SLURM-job '{cancelled}' failed, SLURM status is: 'CANCELLED'" in log, log[-4000:]
    retry = json.loads(Path(str(store) + runlock.STORE_RECORD_SUFFIX).read_text())["slurm_job_id"]
    assert retry and retry != cancelled
    assert store.with_suffix(".done").is_file()
    # bit for bit: every data variable and coordinate (values, dtypes, dimensions) of the two cubes, and every
    # attribute too (the cube's identity holds no shard size: the cube does not depend on it)
    a = xr.open_zarr(slurm_out / "cube.zarr", consolidated=False)
    b = xr.open_zarr(local_out / "cube.zarr", consolidated=False)
    xr.testing.assert_identical(a, b)
    for name in [*a.data_vars, *a.coords]:
        assert a[name].dtype == b[name].dtype, name
    print(f"SLURM run {time.monotonic() - t0:.0f} s, shard job {cancelled} cancelled at {t_cancel:.0f} s and "
          f"retried as job {retry}; cube identical to the local run's")
