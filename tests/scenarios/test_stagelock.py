"""One writer per output root, whatever writes (issue 37, item 3): murk.pipeline.hold_for_stage with real processes.

A Snakemake run holds its root's lock as the Snakefile takes it (``runlock.snakefile_run_lock``); a stage run
outside it (a papermill or JupyterLab kernel, ``python -m murk.pipeline.execute``) calls ``runlock.hold_for_stage``. Each
holder is a process of its own here, so the locks are the kernel's ``flock`` between processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from murk.core import _paths as paths
from murk.pipeline import _locks as runlock

ROOT = paths.project_root()
LIB = str(ROOT / "lib")

#: holds a root as the Snakefile's main process does, prints its record and the token its jobs inherit
SNAKEMAKE_HOLDER = textwrap.dedent("""
    import json, os, sys
    from murk.pipeline import _locks as runlock
    runlock.snakefile_run_lock(sys.argv[2], sys.argv[1], dry_run=False, argv=["snakemake", "--cores", "1"])
    print(json.dumps({"env": os.environ[runlock.RUN_ENV]}), flush=True)
    sys.stdin.readline()   # hold until the test says so
""")

#: a stage's first cell: hold_for_stage(output_dir, stage=...); "stay" keeps the process (a kernel) alive
STAGE = textwrap.dedent("""
    import json, sys
    from murk.pipeline import _locks as runlock
    try:
        lock = runlock.hold_for_stage(sys.argv[2], stage="04_analyse", snakemake_dir=sys.argv[1])
    except runlock.RootInUse as e:
        print(json.dumps({"refused": str(e)}), flush=True)
        sys.exit(3)
    print(json.dumps({"how": lock.how}), flush=True)
    if sys.argv[3] == "stay":
        sys.stdin.readline()
""")

#: Snakemake's lock step started while a stage holds the root: refused or not
SNAKEMAKE_START = textwrap.dedent("""
    import sys
    from murk.pipeline import _locks as runlock
    try:
        notes = runlock.snakefile_run_lock(sys.argv[2], sys.argv[1], dry_run=sys.argv[3] == "dry",
                                           argv=["snakemake", "-c1"])
    except runlock.RootInUse as e:
        print(e)
        sys.exit(3)
    print("\\n".join(notes))
    print("ran")
""")


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in (runlock.RUN_ENV, "JPY_SESSION_NAME")}
    return {**env, "PYTHONPATH": LIB + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra}


def _popen(script: str, *args, **env) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script, *map(str, args)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=_env(**env))


def _run(script: str, *args, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True,
                          timeout=120, env=_env(**env))


def _end(p: subprocess.Popen) -> None:
    p.kill()
    p.wait()


def _files(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def checkout(tmp_path):
    """A Snakemake folder and an output root with a file in it, as a live run leaves them."""
    snake = tmp_path / ".snakemake"
    snake.mkdir()
    root = tmp_path / "outputs"
    (root / "notebooks").mkdir(parents=True)
    (root / "notebooks" / "04_analyse.ipynb").write_text("the live run's notebook\n")
    return snake, root


def test_a_stage_is_refused_while_a_snakemake_run_holds_the_root_naming_it(checkout):
    snake, root = checkout
    live = _popen(SNAKEMAKE_HOLDER, snake, root)
    try:
        json.loads(live.stdout.readline())
        before = _files(root)
        r = _run(STAGE, snake, root, "once")
        assert r.returncode == 3, r.stdout + r.stderr
        msg = json.loads(r.stdout)["refused"]
        assert "\n" not in msg, msg   # one line
        assert str(root) in msg and f"pid {live.pid}" in msg and "snakemake --cores 1" in msg and "started " in msg
        assert "04_analyse" in msg and "wrote nothing" in msg and "wait until that run ends" in msg.lower()
        assert "output_dir" in msg
        # in the words of the command that ran it: papermill's -p, JupyterLab's parameters cell
        r = _run(STAGE, snake, root, "once", JPY_SESSION_NAME=str(ROOT / "notebooks" / "04_analyse.py"))
        assert r.returncode == 3 and "parameters cell" in json.loads(r.stdout)["refused"]
        assert _files(root) == before
    finally:
        _end(live)


def test_a_job_of_the_holding_run_writes_and_a_forged_token_does_not(checkout):
    snake, root = checkout
    live = _popen(SNAKEMAKE_HOLDER, snake, root)
    try:
        token = json.loads(live.stdout.readline())["env"]
        assert token.rpartition("::")[0] == str(root.resolve())
        r = _run(STAGE, snake, root, "once", **{runlock.RUN_ENV: token})   # a job: inherits the run's token
        assert r.returncode == 0 and json.loads(r.stdout)["how"] == "run", r.stdout + r.stderr
        forged = token.rpartition("::")[0] + "::" + "0" * 32
        r = _run(STAGE, snake, root, "once", **{runlock.RUN_ENV: forged})
        assert r.returncode == 3, r.stdout + r.stderr
        other = root.with_name("outputs-other")   # the token of one root lets nothing write another
        r = _run(STAGE, snake, other, "once", **{runlock.RUN_ENV: token})
        assert r.returncode == 0 and json.loads(r.stdout)["how"] == "taken"
    finally:
        _end(live)


def test_a_lab_kernel_holds_the_root_until_it_ends_and_snakemake_names_it(checkout):
    snake, root = checkout
    kernel = _popen(STAGE, snake, root, "stay", JPY_SESSION_NAME="/somewhere/notebooks/04_analyse.py")
    try:
        assert json.loads(kernel.stdout.readline())["how"] == "taken"
        r = _run(SNAKEMAKE_START, snake, root, "run")
        assert r.returncode == 3, r.stdout + r.stderr
        msg = r.stdout.strip()
        assert "\n" not in msg and f"a JupyterLab kernel (pid {kernel.pid}, notebook 04_analyse.py" in msg, msg
        assert "Shut Down Kernel" in msg and "output_dir=outputs-NEW" in msg
        r = _run(STAGE, snake, root, "once")   # a second stage too, naming the kernel
        assert r.returncode == 3 and f"JupyterLab kernel (pid {kernel.pid}" in json.loads(r.stdout)["refused"]
        r = _run(SNAKEMAKE_START, snake, root, "dry")   # reading (make plan) stays allowed, and says who holds it
        assert r.returncode == 0 and "ran" in r.stdout, r.stdout + r.stderr
        assert f"{root.resolve()} is held by a JupyterLab kernel (pid {kernel.pid}" in r.stdout, r.stdout
        assert runlock.root_holder(root, snake)["kind"] == "jupyterlab"
        r = _run(STAGE, snake, root.with_name("outputs-b"), "once")   # another root is free
        assert r.returncode == 0
    finally:
        _end(kernel)   # the kernel shut down (or killed): the kernel's flock ends with it
    assert runlock.root_holder(root, snake) is None
    r = _run(SNAKEMAKE_START, snake, root, "run")
    assert r.returncode == 0 and "ran" in r.stdout, r.stdout + r.stderr


def test_unlock_is_not_refused_for_a_stage_holder(checkout):
    snake, root = checkout
    kernel = _popen(STAGE, snake, root, "stay")
    try:
        json.loads(kernel.stdout.readline())
        r = _run("import sys\nfrom murk.pipeline import _locks as runlock\nrunlock.refuse_unlock(sys.argv[1])\nprint('ok')", snake)
        assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr
    finally:
        _end(kernel)


# --- by hand: python -m murk.pipeline.execute and papermill as users run them, while a run holds the root --------------

def _stage_env(tmp_path: Path) -> dict:
    return _env(MURK_OFFLINE="1", HF_HUB_OFFLINE="1", MPLBACKEND="Agg",
                PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


@pytest.fixture
def live_root(tmp_path):
    """An output root held by a process that takes the lock exactly as the Snakefile does, in the checkout's
    .snakemake/ (where the stages look): (root, holder process)."""
    root = tmp_path / "outputs"
    (root / "notebooks").mkdir(parents=True)
    (root / "notebooks" / "04_analyse.ipynb").write_text("the live run's notebook\n")
    (root / "paper_numbers.json").write_text("{}\n")
    live = _popen(SNAKEMAKE_HOLDER, ROOT / ".snakemake", root)
    json.loads(live.stdout.readline())
    try:
        yield root, live
    finally:
        _end(live)


@pytest.mark.slow
def test_murk_execute_into_a_live_root_is_refused_before_it_writes(live_root, tmp_path):
    root, live = live_root
    before = _files(root)
    # docs/stages.md's by-hand analyse: the executed notebook where the paper embeds from, in the live root
    cmd = [sys.executable, "-m", "murk.pipeline.execute", "notebooks/04_analyse.py",
           str(root / "notebooks" / "04_analyse.ipynb"),
           "-p", "output_dir", str(root), "-y", "models: [murk-tiny/smolvlm]"]
    r = subprocess.run(cmd, cwd=ROOT, env=_stage_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert r.returncode == 3, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"pid {live.pid}" in lines[0] and "-p output_dir outputs-NEW" in lines[0], r.stderr
    assert _files(root) == before   # the live run's notebook, not even a converted .input.ipynb beside it
    # an executed notebook placed in the live root, though output_dir names another root: refused as well
    other = tmp_path / "outputs-mine"
    cmd = [sys.executable, "-m", "murk.pipeline.execute", "notebooks/01_select.py", str(root / "notebooks" / "mine.ipynb"),
           "-p", "output_dir", str(other)]
    r = subprocess.run(cmd, cwd=ROOT, env=_stage_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert r.returncode == 3 and str(root) in r.stderr, r.stdout + r.stderr
    assert _files(root) == before and not other.exists()


@pytest.mark.slow
def test_plain_papermill_into_a_live_root_is_refused_in_its_first_cell(live_root, tmp_path):
    root, live = live_root
    before = _files(root)
    mine = tmp_path / "04_analyse-mine.ipynb"   # papermill's output outside the root (docs/stages.md)
    block = (f"jupytext --to ipynb notebooks/04_analyse.py -o - | papermill - {mine} -p output_dir {root} "
             f"-y 'models: [murk-tiny/smolvlm]'")
    r = subprocess.run(["bash", "-c", block], cwd=ROOT, env=_stage_env(tmp_path), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode != 0, r.stdout + r.stderr[-3000:]
    assert "RootInUse" in r.stderr and f"pid {live.pid}" in r.stderr and "-p output_dir outputs-NEW" in r.stderr
    assert _files(root) == before
    nb = json.loads(mine.read_text())
    assert any("RootInUse" in json.dumps(c.get("outputs", [])) for c in nb["cells"])


@pytest.mark.slow
def test_murk_execute_of_a_notebook_that_is_no_stage_takes_no_root(live_root, tmp_path):
    """A notebook without output_dir in its parameters writes into no root: it runs beside a live run (the
    default root is not taken), but its executed notebook placed in the live root is refused."""
    root, live = live_root
    nb = tmp_path / "toy.py"
    nb.write_text('# %% tags=["parameters"]\nx = 1\n\n# %%\nprint(x + 1)\n')
    assert execute_parameters(nb) == {"x"}
    default = tmp_path / "outputs-default"   # the default root (MURK_OUTPUT_DIR), held by a run
    busy = _popen(SNAKEMAKE_HOLDER, ROOT / ".snakemake", default)
    json.loads(busy.stdout.readline())
    try:
        r = subprocess.run([sys.executable, "-m", "murk.pipeline.execute", str(nb), str(tmp_path / "toy.ipynb"),
                            "-k", "python3"], cwd=tmp_path,
                           env={**_stage_env(tmp_path), "MURK_OUTPUT_DIR": str(default)}, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        _end(busy)
    before = _files(root)
    r = subprocess.run([sys.executable, "-m", "murk.pipeline.execute", str(nb), str(root / "notebooks" / "toy.ipynb"),
                        "-k", "python3"],
                       cwd=tmp_path, env=_stage_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert r.returncode == 3 and f"pid {live.pid}" in r.stderr, r.stdout + r.stderr
    assert _files(root) == before


def execute_parameters(nb):
    from murk.pipeline import execute

    return execute.parameters_of(nb)
