"""The sharded offline demo on a real SLURM cluster, through the command of docs/cluster.md (issue 22).

Needs a slurmctld that answers ``sinfo`` (on one machine: ``sudo .ci/slurm-localhost start``; CI does this);
skipped otherwise. The demo runs with the smallest settings that shard (one offline model, two items, one item
per shard), one read-out shard is cancelled (``scancel``) while it writes its store, and the run must retry it
and finish; its cube must equal a local unsharded run's bit for bit (data variables, coordinates, attributes).
Issue 37: two drivers of one checkout side by side (two output roots) both finish with no job that fails to
launch; a driver killed (SIGKILL) while its jobs run and wait is run again, and no rule instance ever has two
live jobs.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import xarray as xr

from murk.core import _paths as paths
from murk.pipeline import _locks as runlock

import stages  # tests/stages.py: the shared COCO sample

ROOT = paths.project_root()
SAMPLE = stages.SAMPLE
MODEL = "murk-tiny/smolvlm"
#: docs/cluster.md's command for a CPU-only cluster (Scaling out: shards, GPUs, SLURM); the test adds only --config
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
              stages.needs_sample]


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


#: shell code in a setting (issue 37, item 1): text that runs ``touch pwned-<k>`` wherever a shell parses it
PAYLOAD = "x; touch pwned-1 #$(touch pwned-2)`touch pwned-3`'\"; touch pwned-4"


def _pwned(*folders: Path) -> list[Path]:
    return [p for f in folders for p in f.glob("pwned-*")]


def test_sharded_demo_on_slurm_retries_a_cancelled_shard_and_equals_the_local_cube(tmp_path, tiny_checkpoint_dirs):
    assert README_COMMAND in (ROOT / "docs" / "cluster.md").read_text(encoding="utf-8")
    slurm_out, local_out = tmp_path / "slurm", tmp_path / "local"
    # settings are data on the cluster too: the model is a folder whose path holds a blank and shell code, the
    # depth model is shell code, both given in a configfile (which the jobs read as a file); nothing but murk runs
    folder = tmp_path / "my models" / "smol vlm;$(touch pwned-5)"
    shutil.copytree(tiny_checkpoint_dirs["smolvlm"], folder)
    cfg = tmp_path / "run.yaml"
    cfg.write_text(json.dumps({"offline_models": [str(folder)], "depth_model": PAYLOAD}))   # JSON is YAML
    settings = [s for s in SETTINGS if not s.startswith("offline_models=")]
    words = README_COMMAND.split()
    driver_cmd = [sys.executable, "-m", *words[:3], "--configfile", str(cfg), words[3], "shard_size=1",
                  f"output_dir={slurm_out}", *settings]
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
        local = subprocess.run([sys.executable, "-m", "snakemake", "--profile", "profiles/local", "--configfile",
                                str(cfg), "--config", f"output_dir={local_out}", *settings], cwd=ROOT, env=_env(),
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
    assert str(folder) in [str(m) for m in a["model"].values]   # the folder, as it was given
    assert not _pwned(ROOT, tmp_path, folder.parent, slurm_out, local_out)
    print(f"SLURM run {time.monotonic() - t0:.0f} s, shard job {cancelled} cancelled at {t_cancel:.0f} s and "
          f"retried as job {retry}; cube identical to the local run's")


def _driver(tmp_path: Path, out: Path, n_items: int, log_name: str) -> tuple[subprocess.Popen, Path]:
    """docs/cluster.md's command (shard_size=1, one tiny model) on ``out``, its output in ``tmp_path/log_name``
    (a run name per item count: a run name is frozen with its items)."""
    cmd = [sys.executable, "-m", *README_COMMAND.split()[:4], "shard_size=1", f"output_dir={out}",
           f"n_items={n_items}", f"offline_models=[{MODEL}]", f"run_name=slurm-test-{n_items}"]
    log_path = tmp_path / log_name
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    return proc, log_path


ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "SUSPENDED"}
LAUNCH_FAILURES = ("JobLaunchFailure", "Could not open stdout", "launch failed", "SLURM status is: 'FAILED'")


def test_a_config_value_the_slurm_executor_would_pass_through_a_shell_is_refused_before_submission(tmp_path):
    """The executor plugin re-creates each job's command line from --config inside sbatch --wrap="…": a value
    with shell code there is refused before anything is submitted, naming the setting and the fix."""
    out = tmp_path / "out"
    before = {job[0] for job in _squeue()}
    r = subprocess.run([sys.executable, "-m", "snakemake", "--profile", "profiles/slurm", "--config",
                        f"output_dir={out}", *SETTINGS, f"depth_model={PAYLOAD}"], cwd=ROOT, env=_env(),
                       capture_output=True, text=True, timeout=600)
    text = r.stdout + r.stderr
    assert r.returncode != 0, text[-3000:]
    assert f"--config depth_model={PAYLOAD}: the value of depth_model holds '\"', '$', \"'\", '`'" in text, text[-3000:]
    assert "give depth_model in a --configfile instead" in text and "nothing was written" in text
    assert {job[0] for job in _squeue()} == before   # nothing submitted
    assert not (out / "items.json").exists() and not _pwned(ROOT, tmp_path)


def test_two_drivers_of_one_checkout_side_by_side_both_finish_without_launch_failures(tmp_path):
    """Issue 37: when one driver ends, executor 2.8 deletes the empty log folders under .snakemake/slurm_logs,
    also those of the other driver's pending jobs, which then fail to start. To make that moment certain, the
    second driver's jobs are held (``scontrol hold``) whenever they wait while the first driver is alive, and
    released when it has ended; both drivers must finish, and no job may fail."""
    roots = [tmp_path / "one", tmp_path / "two"]
    drivers = [_driver(tmp_path, roots[0], 1, "one.log"), _driver(tmp_path, roots[1], 1, "two.log")]
    names: set[str] = set()
    held: set[str] = set()
    released = False
    t0 = time.monotonic()
    try:
        while any(p.poll() is None for p, _ in drivers):
            assert time.monotonic() - t0 < 2 * DRIVER_TIMEOUT_S, "the two SLURM drivers still run"
            jobs = [j for j in _squeue() if j[3].startswith("rule_")]
            names |= {j[2] for j in jobs}
            second = re.search(r"SLURM run ID: (\S+)", drivers[1][1].read_text())
            if drivers[0][0].poll() is None and second:
                for jid, state, name, _ in jobs:
                    if name == second.group(1) and state == "PENDING" and jid not in held:
                        subprocess.run(["scontrol", "hold", jid], capture_output=True, timeout=30)
                        held.add(jid)
            elif held and not released:   # the first driver has ended (and cleaned up): let them start
                subprocess.run(["scontrol", "release", ",".join(sorted(held))], capture_output=True, timeout=30)
                released = True
            time.sleep(0.5)
    finally:
        for p, _ in drivers:
            _stop(p, names)
    assert held, "no job of the second driver waited while the first one ran: the case was not made"
    for (p, log_path), root in zip(drivers, roots):
        log = log_path.read_text()
        assert p.returncode == 0, log[-4000:]
        assert (root / "paper" / "index.html").is_file()
        hit = [w for w in LAUNCH_FAILURES if w in log]
        assert not hit, f"{hit} in {log_path.name}:\n{log[-4000:]}"
    print(f"two SLURM drivers side by side: {time.monotonic() - t0:.0f} s, jobs {sorted(held)} of the second held "
          f"until the first had ended; no job failed")


def test_a_killed_drivers_rerun_submits_no_duplicate_of_a_live_job(tmp_path):
    """Issue 37: a driver is SIGKILLed while its jobs run and wait; the same command, run again, finds them (by
    their job name, recorded per output root), cancels the waiting ones and waits for the running ones, one line
    each, so that no rule instance has two live jobs at any time; the rerun finishes the run."""
    out = tmp_path / "out"
    first, first_log = _driver(tmp_path, out, 1, "first.log")
    t0 = time.monotonic()
    names: set[str] = set()
    rerun = None
    try:
        live: list[tuple[str, str, str, str]] = []
        while True:   # a moment with a job running and another waiting
            assert first.poll() is None, f"the driver ended first:\n{first_log.read_text()[-4000:]}"
            assert time.monotonic() - t0 < DRIVER_TIMEOUT_S, "no moment with a running and a waiting job"
            live = [j for j in _squeue() if j[3].startswith("rule_") and j[1] in ACTIVE]
            names |= {j[2] for j in live}
            if {"RUNNING", "PENDING"} <= {j[1] for j in live}:
                break
            time.sleep(1)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        old = {j[2] for j in live}
        assert len(old) == 1
        rerun, rerun_log = _driver(tmp_path, out, 1, "rerun.log")
        both_live = []   # (comment, job ids) whenever one rule instance has two live jobs
        while rerun.poll() is None:
            assert time.monotonic() - t0 < 2 * DRIVER_TIMEOUT_S, "the rerun still runs"
            jobs = [j for j in _squeue() if j[3].startswith("rule_")]
            names |= {j[2] for j in jobs}
            by_comment: dict[str, list[str]] = {}
            for jid, state, _, comment in jobs:
                if state in ACTIVE:
                    by_comment.setdefault(comment, []).append(jid)
            both_live += [(c, ids) for c, ids in by_comment.items() if len(ids) > 1]
            time.sleep(1)
    finally:
        _stop(first, names)
        if rerun is not None:
            _stop(rerun, names)
    log = rerun_log.read_text()
    assert rerun.returncode == 0, log[-4000:]
    assert not both_live, f"duplicate live jobs {both_live[:3]}:\n{log[-4000:]}"
    # one line per live job of the killed driver that the rerun found: cancelled (still waiting) or waited for
    # (running by then: a waiting job may have started in the seconds before the rerun looked)
    decided = re.findall(r"murk: (cancelled|waiting for) SLURM job (\d+) \(", log)
    assert decided and {jid for _, jid in decided} <= {j[0] for j in live}, log[-4000:]
    assert (out / "paper" / "index.html").is_file()
    print(f"killed driver with jobs {[(j[0], j[1]) for j in live]}; rerun finished at "
          f"{time.monotonic() - t0:.0f} s with no duplicate live job")
