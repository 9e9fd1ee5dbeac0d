"""A whole `make demo` killed at any moment resumes with the same command (issue 14).

The README's command, `make demo`, runs in a copy of this project with its own `.venv`: a thin
virtual environment that sees the running test's packages through a `.pth` file and carries an
up-to-date install stamp, so the Makefile's recipe installs nothing (and the shared environment is
never re-pointed; a stamp the Makefile no longer accepts makes it install into the thin one, which
the test reports). The run is the study-shaped offline demo of the session (tests/conftest.py
``demo``: four COCO items, three tiny checkpoints, a pipeline check), whose uninterrupted run is the
reference: a copy of its output root, without one model's read-out and what comes after it (the
cube, the numbers, the paper), is what a run killed after select and depth leaves. `make demo` on it
is killed twice with SIGKILL to its whole process group (and its papermill kernel), at moments chosen
from observed progress (while the read-out writes its store; while the analyse notebook runs), each
time leaving Snakemake's lock and incomplete outputs behind; the same `make demo` then completes,
without `snakemake --unlock`, with a cube identical to the reference's. The paper's PDF is checked
for lost table rows.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import xarray as xr

from _killing import KillableRun
from _pdf import check_pdf_keeps_every_table_row, check_rows_on_lines
from murk.core import _paths as paths
from murk.pipeline import markers as workflow

import stages  # tests/stages.py: the session demo's settings

ROOT = paths.project_root()
SAMPLE = stages.SAMPLE
MODEL = "murk-tiny/smolvlm"  # the demo's model on all its items: its read-out is the one killed
pytestmark = [pytest.mark.slow,
              stages.needs_sample,
              pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")]

_SKIP = {".git", ".venv", ".snakemake", "__pycache__", ".pytest_cache", ".ipynb_checkpoints"}


def _ignore(folder: str, names: list[str]) -> set[str]:
    top = Path(folder).resolve() == ROOT.resolve()
    return {n for n in names if n in _SKIP or n.endswith(".egg-info") or (top and n.startswith("outputs"))}


def thin_venv(project: Path) -> Path:
    """``project/.venv``: a virtual environment without packages of its own that sees this test's
    packages, with console scripts for snakemake, jupytext and papermill, and the install stamp the
    Makefile expects for ``project`` (its recipe then installs nothing)."""
    venv = project / ".venv"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    shared = sysconfig.get_paths()["purelib"]
    (site / "murk-test-shared-env.pth").write_text(f"import site; site.addsitedir({shared!r})\n")
    for name, module in (("snakemake", "snakemake"), ("jupytext", "jupytext"), ("papermill", "papermill")):
        script = venv / "bin" / name
        script.write_text(f'#!/bin/sh\nexec "{venv / "bin" / "python"}" -m {module} "$@"\n')
        script.chmod(0o755)
    digest = hashlib.sha256((project / "pyproject.toml").read_bytes()).hexdigest()[:16]
    (venv / ".murk-installed").write_text(f"{digest} {os.path.realpath(project)}\n")
    return venv


def _env(project: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env.update({"MURK_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "MPLBACKEND": "Agg",
                "MURK_COCO_DIR": str(SAMPLE), "PYTHONPATH": str(project / "lib")})
    return env


def make_demo(project: Path, out: Path, faults: Path) -> KillableRun:
    """`make demo ARGS=...` in ``project``, as a user types it, with the session demo's settings
    (tests/stages.py ``snakemake_demo``) into the output root ``out``."""
    args = (f"--configfile {stages.demo_configfile(out)} --config output_dir={out} n_items={stages.DEMO_N_ITEMS} "
            "run_name=e2e-test figure_pdf=false")
    return KillableRun(["make", "demo", f"ARGS={args}"], project, _env(project), faults)


@pytest.fixture(scope="module")
def demo_runs(demo, tmp_path_factory):
    """(reference output root: the session's demo, resumed output root, the killed and resumed runs' outputs)."""
    base = tmp_path_factory.mktemp("demo-resume")
    project = base / "murk"
    shutil.copytree(ROOT, project, ignore=_ignore)
    thin_venv(project)

    out = stages.copy_root(demo, project / "outputs")
    store = paths.readout_store(MODEL, out)
    # what a run killed after select, depth and the other read-outs leaves: no store of this model, no marker,
    # nothing after them
    shutil.rmtree(store)
    (out / "readout" / f"{paths.model_slug(MODEL)}.done").unlink()
    shutil.rmtree(out / "cube.zarr")
    for f in ("paper_numbers.json", "paper/index.html"):
        (out / f).unlink()
    locks = project / ".snakemake" / "locks"
    texts = []

    run = make_demo(project, out, base / "k1")  # kill 1: while the read-out writes its store
    run.wait_for(lambda: (store / "zarr.json").exists(), "read-out store")
    run.kill()
    texts.append(run.text())
    assert "setting up" not in texts[0], "the Makefile installed into the test's environment"
    assert any(locks.glob("*.lock")), "the killed run left no Snakemake lock: the test tests nothing"

    run = make_demo(project, out, base / "k2")  # kill 2: while the analyse notebook runs
    nb = project / workflow.running_notebooks_dir(out) / "04_analyse.ipynb"  # where its rule executes it
    run.wait_for(nb.exists, "analyse notebook")
    run.kill()
    texts.append(run.text())
    assert any(locks.glob("*.lock"))
    assert not (out / "paper" / "index.html").exists()

    run = make_demo(project, out, base / "final")  # the same command again: it completes
    assert run.finish() == 0, run.text()[-5000:]
    texts.append(run.text())
    return demo, out, texts


def test_killed_make_demo_resumes_to_the_same_cube(demo_runs):
    ref, out, texts = demo_runs
    assert all("LockException" not in t and "--unlock" not in t for t in texts)
    assert "removed the stale Snakemake lock" in texts[1] and "removed the stale Snakemake lock" in texts[2]
    a = xr.open_zarr(ref / "cube.zarr").load()
    b = xr.open_zarr(out / "cube.zarr").load()
    # the commit stamp names the checkout the analysis ran in: the project copy is none (murk.core.git_commit);
    # everything else is the uninterrupted run's
    assert b.attrs["git_commit"] == "unknown"
    xr.testing.assert_identical(a, b.assign_attrs(git_commit=a.attrs["git_commit"]))
    for f in ("paper/index.html", "paper/index.pdf", "paper_numbers.json"):
        assert (out / f).is_file(), f


# --- the paper's PDF loses no table row (pandoc + Typst fallback) ---

@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils (pdftotext) not installed")
def test_demo_pdf_keeps_every_table_row(demo_runs):
    ref, _, _ = demo_runs
    pdf = ref / "paper" / "index.pdf"
    check_pdf_keeps_every_table_row(pdf, (ref / "paper" / "index.md").read_text())
    for t in ("t2", "t3"):  # every sweep-table row, as one line
        table = (ref / "analysis" / f"tbl-sweep-{t}.md").read_text()
        assert check_rows_on_lines(pdf, table) == len(table.splitlines()) - 2
