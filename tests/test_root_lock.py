"""The writer lock in the output root (murk.core._root_lock; issue 49 item 4): whichever checkout or module writes a
root, a second writer is refused while the first lives, and a job of the holding run is not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from murk import core
from murk.core import _paths as paths

LIB = str(paths.project_root() / "lib")

#: a Snakemake main process of another git clone (its own .snakemake/, argv[1]) holding the root argv[2]
OTHER_CLONE_RUN = textwrap.dedent("""
    import json, os, sys
    from murk.pipeline import _locks as runlock
    runlock.snakefile_run_lock(sys.argv[2], sys.argv[1], dry_run=False, argv=["snakemake", "-c1", "paper"])
    print(json.dumps({"env": os.environ[runlock.RUN_ENV]}), flush=True)
    sys.stdin.readline()   # hold until the test says so
""")


def _tree(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def live_root(tmp_path, monkeypatch):
    """An output root held by a live run of another clone (a process of its own); yields (root, holder, env)."""
    monkeypatch.delenv(core.RUN_ENV, raising=False)
    clone = tmp_path / "clone"
    (clone / ".snakemake").mkdir(parents=True)
    root = tmp_path / "outputs"
    (root / "analysis").mkdir(parents=True)
    (root / "analysis" / "numbers-study.json").write_text("{}\n")
    env = {**os.environ, "PYTHONPATH": LIB + os.pathsep + os.environ.get("PYTHONPATH", "")}
    holder = subprocess.Popen([sys.executable, "-c", OTHER_CLONE_RUN, str(clone / ".snakemake"), str(root)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=clone)
    try:
        yield root, holder, json.loads(holder.stdout.readline())["env"]
    finally:
        holder.kill()
        holder.wait()


def test_paper_and_export_by_hand_into_a_root_another_clone_runs_on_are_refused(live_root, capsys):
    from murk.report import export, paper

    root, holder, _ = live_root
    before = _tree(root)
    assert paper.main(["--output-dir", str(root), "--fallback", "--no-pdf"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"murk: the output root {root} is in use by a live run of this "
                                              f"workflow (pid {holder.pid}")
    assert f"from the checkout {root.parent / 'clone'}: snakemake -c1 paper" in err
    assert "python -m murk.report.paper was refused and wrote nothing" in err and "Wait until that run ends" in err
    assert export.main(["--output-dir", str(root)]) == 2
    err = capsys.readouterr().err
    assert "python -m murk.report.export was refused" in err and f"pid {holder.pid}" in err
    from murk.pipeline import _locks as runlock   # a stage by hand from a third checkout: refused the same way
    with pytest.raises(runlock.RootInUse, match=f"from the checkout {root.parent / 'clone'}: snakemake -c1 paper"):
        runlock.hold_for_stage(root, stage="04_analyse", snakemake_dir=root.parent / "third" / ".snakemake")
    assert runlock.root_holder(root, root.parent / "third" / ".snakemake")["pid"] == holder.pid
    with pytest.raises(runlock.RootInUse, match="the stage 04_analyse was refused"):   # an executed notebook in it
        runlock.refuse_writes([root / "notebooks" / "04_analyse.ipynb"], stage="04_analyse",
                              snakemake_dir=root.parent / "third" / ".snakemake", own_root=root.parent / "elsewhere")
    # a Snakemake run from this checkout (for the holder, a second clone) on the same root: refused at parse, in
    # one line naming the holder's checkout, before any job (issue 49: it had ended in "filesystem latency")
    env = {**os.environ, "MURK_OFFLINE": "1", "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
    r = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "--config", f"output_dir={root}",
                        "n_items=2", 'offline_models=["murk-tiny/smolvlm"]'], cwd=paths.project_root(), env=env,
                       capture_output=True, text=True, timeout=300)
    refusal = [ln for ln in (r.stdout + r.stderr).splitlines() if "is in use by" in ln]
    assert r.returncode != 0 and len(refusal) == 1, (r.stdout + r.stderr)[-3000:]
    assert f"murk: the output root {root} is in use by a live run of this workflow (pid {holder.pid}" in refusal[0]
    assert f"from the checkout {root.parent / 'clone'}" in refusal[0] and "output_dir=outputs-NEW" in refusal[0]
    assert _tree(root) == before and not (root / "paper").exists()
    with pytest.raises(core.RootLocked):   # a second writer of any kind: not even for a moment
        core.hold_root_writer(root, kind="murk.report.paper", command="x", words="x")
    holder.kill()
    holder.wait()
    assert core.root_writer(root) is None   # the kernel released the dead run's lock: no unlock needed
    assert core.hold_root_writer(root, kind="murk.report.paper", command="x", words="x") == "taken"
    core.release_root_writer(root)
    assert core.root_writer(root) is None


def test_a_job_of_the_holding_run_writes_and_a_forged_token_does_not(live_root, monkeypatch):
    root, _, env = live_root
    monkeypatch.setenv(core.RUN_ENV, env)   # what the run's jobs inherit (the paper and export rules' jobs)
    assert core.job_of_root(root) and core.hold_root_writer(root, kind="murk.report.paper", command="x",
                                                            words="x") == "run"
    core.refuse_root_writer(root, words="x")   # no refusal for a job of the run
    monkeypatch.setenv(core.RUN_ENV, env.rpartition("::")[0] + "::" + "0" * 32)   # a token no run listed
    assert not core.job_of_root(root)
    with pytest.raises(core.RootLocked):
        core.refuse_root_writer(root, words="x")
    copy = root.parent / "copy"   # the token of the root, but another root
    copy.mkdir()
    monkeypatch.setenv(core.RUN_ENV, f"{copy}::{env.rpartition('::')[2]}")
    assert not core.job_of_root(root) and not core.job_of_root(copy)


def test_a_read_only_or_missing_root_is_left_to_the_callers_words(tmp_path):
    assert core.hold_root_writer(tmp_path / "none", kind="murk.report.paper", command="x", words="x") == "unlocked"
    assert not (tmp_path / "none").exists()   # nothing made
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        if not os.access(ro, os.W_OK):   # (root writes read-only folders: no read-only root for it)
            assert core.hold_root_writer(ro, kind="murk.report.paper", command="x", words="x") == "unlocked"
    finally:
        ro.chmod(0o755)
