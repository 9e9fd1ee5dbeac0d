"""The workflow's bookkeeping through Snakemake, as users run it (issue 14; the markers and locks themselves:
tests/test_workflow.py): a failed select keeps the previous items; a killed run re-runs while another root runs,
and a live root is refused; the real Snakefile refuses a run on a live root and plans alongside it. On the offline
demo (one COCO item, one tiny checkpoint: a pipeline check). The helpers that run Snakemake and read a root back
serve the other scenarios on stale and damaged stores (test_stale_stores.py, test_damaged_demo.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import xarray as xr

from murk import core
from murk.core import _paths as paths
from murk.pipeline import markers as workflow
from murk.results import _cube as cube

import stages  # tests/stages.py: the shared COCO sample
from test_workflow import _Run  # tests/test_workflow.py: a process holding a root's lock as Snakemake does

ROOT = paths.project_root()
SAMPLE = stages.SAMPLE
MODEL = "murk-tiny/smolvlm"
needs_sample = stages.needs_sample


# --- through Snakemake, as users run it ---

def _snakemake(out: Path, *args: str, config: tuple[str, ...] = (), timeout: int = 1500,
               model: str = MODEL) -> subprocess.CompletedProcess:
    """``snakemake --cores 1 ARGS --config …`` (targets and flags go before --config, which takes the rest)."""
    env = {**os.environ, "MURK_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "MURK_COCO_DIR": str(SAMPLE),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "MPLBACKEND": "Agg"}
    cmd = [sys.executable, "-m", "snakemake", "--cores", "1", *args, "--config", f"output_dir={out}", "n_items=1",
           f'offline_models=["{model}"]', "run_name=workflow-test", "figure_pdf=false", *config]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def _papermill_readout(out: Path, *params: str, model: str = MODEL) -> subprocess.CompletedProcess:
    env = {**os.environ, "MURK_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "MURK_COCO_DIR": str(SAMPLE),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "MPLBACKEND": "Agg"}
    cmd = (f"jupytext --to ipynb notebooks/03_readout.py -o - | papermill - {out}/by-hand.ipynb --cwd {ROOT} "
           f"-p output_dir {out} -p model {model} " + " ".join(params))
    return subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)


@needs_sample
@pytest.mark.slow
def test_failed_select_keeps_the_previous_items(tmp_path):
    out = tmp_path / "out"
    r = _snakemake(out, f"{out}/items.json")
    assert r.returncode == 0, r.stderr[-3000:]
    before = (out / "items.json").read_bytes(), (out / "items_meta.json").read_bytes()
    r = _snakemake(out, f"{out}/items.json", config=("n_items=2",))  # other items under the same frozen run
    assert r.returncode != 0
    assert "workflow-test" in r.stdout + r.stderr  # the refusal names the frozen record
    assert ((out / "items.json").read_bytes(), (out / "items_meta.json").read_bytes()) == before


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _cube(root: Path) -> xr.Dataset:
    """The cube of ``root``, without its ``git_commit`` stamp: that names the checkout's state when the analysis
    ran (``-dirty`` once a tracked file is edited, e.g. during a long test run), not what was computed."""
    ds = xr.open_zarr(root / "cube.zarr", consolidated=False).load()
    ds.attrs.pop("git_commit", None)
    return ds


def _fresh_readouts(fresh: Path, model: str) -> list[str]:
    """The Snakemake targets of a fresh root up to its read-outs (``model``'s and the visibility monitor's):
    what the cube is merged from, without the analysis and the paper (:func:`_cube_of_stores`)."""
    return [f"{fresh}/readout/{paths.model_slug(model)}.done", f"{fresh}/readout/murk--visibility-monitor.done"]


def _cube_of_stores(root: Path, models: list[str]) -> xr.Dataset:
    """The cube of ``root``'s read-out stores (the VLMs ``models`` and the visibility monitor's two), merged as the
    analyse notebook's cell ``num-cube`` merges it (murk.results.merge_models with the run identity and the images
    digest of items_meta.json, on the selection's images), read as :func:`_cube` reads it.

    The reference cube of a fresh root run up to its read-outs (:func:`_fresh_readouts`): the analysis and the paper
    after it are the updated root's, run through Snakemake; the merge is the one the notebook calls (the demo's and
    the synthetic root's notebooks run it end to end, and a change there makes the comparison fail)."""
    from murk.monitor import _monitor as monitor
    from murk.protocol import _item_files

    table, meta = _item_files.read_items(root)
    stores = {m: paths.readout_store(m, root) for m in (*models, *monitor.MONITOR_IDS)}
    cube.merge_models(stores, paths.cube_store(root),
                      attrs={"run_id": workflow.run_id(meta["config_hash"], meta["items_hash"]),
                             "images_sha256": meta.get("images_sha256", "")},
                      images=(table["image_id"], table["category"]))
    return _cube(root)


def _plan_lists_the_rerun(out: Path, r: subprocess.CompletedProcess, why: str) -> None:
    """A dry run (make plan) names the stale store, lists the read-out and everything after it."""
    text = r.stdout + r.stderr
    assert r.returncode == 0, text[-3000:]
    # "would run again" for a store that is kept or damaged; "would run (no store of it ...)" after docs/recovery.md's
    # repair step removed store and marker (murk.pipeline.rerun_words)
    again = "is missing too" not in why
    said = ("would run again" if again else "would run (no store of it in this output root")
    assert why in r.stderr and said in r.stderr and "and the cube and paper after it" in r.stderr, r.stderr[-3000:]
    for rule in ("readout", "analyse", "paper"):
        assert re.search(rf"^(local)?rule {rule}:", text, re.M), (rule, text[-3000:])
    assert "Forced execution" in text


# --- locks per output root, through Snakemake ---

def _lock_block() -> str:
    """The lock block of the real Snakefile, as it stands there."""
    m = re.search(r"\nif workflow\.is_main_process:\n    try:\n.*?raise WorkflowError\(str\(_e\)\) from None\n",
                  (ROOT / "Snakefile").read_text(), re.S)
    assert m and "snakefile_run_lock" in m.group(0), "Snakefile: the run lock block moved"
    return m.group(0)


# A tiny workflow around the Snakefile's lock block: one job that runs until its root holds `release`.
TINY = '''import os, sys
from snakemake.exceptions import WorkflowError
from murk import pipeline as murk_pipeline
OUT = config["output_dir"]
{block}
rule all:
    input: f"{{OUT}}/done.txt"
rule slow:
    output: f"{{OUT}}/done.txt"
    params: root=OUT
    shell: "echo $$ > {{params.root}}/job.pid; while [ ! -e {{params.root}}/release ]; do sleep 0.1; done; echo ok > {{output}}"
'''


def _tiny(work: Path, root: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "lib"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "snakemake", "--cores", "1", *args, "--config", f"output_dir={root}"],
                            cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.1)


def _finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


@pytest.mark.slow
def test_killed_run_reruns_while_another_root_runs_and_a_live_root_is_refused(tmp_path):
    """Two output roots of one checkout through Snakemake: a live run on b (its job held until b/release),
    a run on a killed with SIGKILL mid-job. The rerun on a succeeds while b runs; a second run on b is refused
    (before and after Snakemake's end of the a-run removed the locks folder), a dry run and the plan are
    allowed, --unlock is refused; b's run then finishes. Two runs started at once on c: one is refused."""
    import signal

    work = tmp_path / "work"
    work.mkdir()
    (work / "Snakefile").write_text(TINY.format(block=_lock_block()))
    live = _tiny(work, "b")
    try:
        _wait_for(work / "b" / "job.pid", live)
        killed = _tiny(work, "a")
        _wait_for(work / "a" / "job.pid", killed)
        job = int((work / "a" / "job.pid").read_text())
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait()
        try:
            os.kill(job, signal.SIGKILL)
        except ProcessLookupError:
            pass
        locks = work / ".snakemake" / "locks"
        stale = {f.name for f in locks.glob("*.lock") if "a/done.txt" in f.read_text()}
        assert stale, "the killed run left no Snakemake lock: the test tests nothing"
        b_locks = {f.name: f.read_text() for f in locks.glob("*.lock") if "b/done.txt" in f.read_text()}
        assert b_locks

        rc, out = _finish(_tiny(work, "b"))  # a second run on the live root, its Snakemake locks in place
        assert rc != 0 and "is in use by a live run" in out and f"pid {live.pid}" in out and str(work / "b") in out
        assert "--unlock" not in out and not (work / "b" / "done.txt").exists()
        rc, out = _finish(_tiny(work, "a", "-n"))  # make plan on the killed root: allowed, removes nothing
        assert rc == 0 and "belong to killed runs" in out
        rc, out = _finish(_tiny(work, "b", "-n"))  # a dry run on the live root: allowed, its locks stay
        assert rc == 0 and f"alive on the output root {work / 'b'}" in out
        rc, out = _finish(_tiny(work, "a", "--unlock"))  # would remove the live run's locks: refused
        assert rc != 0 and "--unlock refused" in out and f"pid {live.pid}" in out
        assert {f.name: f.read_text() for f in locks.glob("*.lock") if f.name in b_locks} == b_locks
        assert stale <= {f.name for f in locks.glob("*.lock")}

        (work / "a" / "release").touch()
        rc, out = _finish(_tiny(work, "a"))  # the killed run's rerun, while b runs
        assert rc == 0, out[-3000:]
        removed = set(re.findall(r"removed the stale Snakemake lock \S*/(\d+\.\w+\.lock)", out))
        assert removed == stale, out[-3000:]
        assert "LockException" not in out and "--unlock" not in out
        assert (work / "a" / "done.txt").read_text().strip() == "ok" and live.poll() is None
        rc, out = _finish(_tiny(work, "b"))  # Snakemake removed the locks folder at the end of the a-run
        assert rc != 0 and "is in use by a live run" in out and not (work / "b" / "done.txt").exists()
    finally:
        (work / "b").mkdir(exist_ok=True)
        (work / "b" / "release").touch()
    rc, out = _finish(live)
    assert rc == 0, out[-3000:]
    assert (work / "b" / "done.txt").read_text().strip() == "ok"

    both = [_tiny(work, "c"), _tiny(work, "c")]  # started at once on one root
    try:
        deadline = time.monotonic() + 120
        while all(p.poll() is None for p in both):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        refused = [p for p in both if p.poll() is not None]
        assert len(refused) == 1
        rc, out = _finish(refused[0])
        assert rc != 0 and "is in use by a live run" in out
    finally:
        (work / "c").mkdir(exist_ok=True)
        (work / "c" / "release").touch()
    winner = [p for p in both if p is not refused[0]][0]
    assert _finish(winner)[0] == 0 and (work / "c" / "done.txt").exists()


@needs_sample
@pytest.mark.slow  # the real Snakefile run through Snakemake (end to end: out of `make test-fast`)
def test_the_snakefile_refuses_a_run_on_a_live_root_and_plans_alongside(tmp_path):
    """The real Snakefile: a run on an output root held by a live run is refused before anything runs;
    a dry run on it (make plan) shows its plan and names the live run."""
    out = tmp_path / "out"
    holder = _Run(ROOT / ".snakemake", out, "stay")
    try:
        r = _snakemake(out, f"{out}/items.json")
        text = r.stdout + r.stderr
        assert r.returncode != 0 and "is in use by a live run" in text and f"pid {holder.p.pid}" in text, text[-3000:]
        # nothing written: the root holds only the live run's lock (<root>/.murk/, murk.core.root_lock_paths)
        assert "--unlock" not in text and [p.name for p in out.iterdir()] == [core.ROOT_LOCK_DIR]
        r = _snakemake(out, "-n", f"{out}/items.json")
        text = r.stdout + r.stderr
        assert r.returncode == 0, text[-3000:]
        assert f"alive on the output root {out}" in text and "rule select" in text
    finally:
        holder.kill()
