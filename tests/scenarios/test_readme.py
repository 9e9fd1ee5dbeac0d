"""The documentation's examples run as printed after the offline demo (issue 20; since issue 40 they live in docs/).

The bash block of "One stage by hand" (docs/stages.md) is run unchanged, in a folder laid out like the
project (``notebooks/`` and ``.venv`` linked from it, ``outputs/`` a copy of the demo's
output root, so the session's shared demo root is left as it was); the executed notebooks
land where the block says and the analyse notebook rebuilt the cube of the models it was
given; the Python block of "Reading the cube in Python" (docs/cube.md) runs on the demo's cube.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import xarray as xr

from murk import core
from murk import report
from murk.core import _paths as paths
from murk.monitor import _monitor as monitor
from murk.pipeline import markers as workflow
from murk.report import _figure_files
from murk.report import _figures as figures

import stages

ROOT = paths.project_root()
pytestmark = [pytest.mark.slow, stages.needs_sample]


def readme_block(heading: str, page: str = "docs/stages.md", lang: str = "bash") -> str:
    """The first ```lang block under ``heading`` of ``page`` (a path from the project root)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    section = text[text.index(heading):]
    m = re.search(rf"```{lang}\n(.*?)```", section, re.S)
    assert m, f"{page}: no {lang} block under {heading!r}"
    return m.group(1)


def test_by_hand_examples_run_as_printed(demo, tmp_path):
    block = readme_block("## One stage by hand")
    assert "python -m murk.pipeline.execute" in block and "-y 'models:" in block
    work = tmp_path / "project"
    work.mkdir()
    (work / "notebooks").symlink_to(ROOT / "notebooks")
    (work / ".venv").symlink_to(sys.prefix)  # the environment running the tests (make test: .venv)
    shutil.copytree(demo, work / "outputs", symlinks=True)
    env = {k: v for k, v in os.environ.items() if k not in ("MURK_OUTPUT_DIR",)}
    # the notebooks resolve outputs/ from the project; here it is the copy under the work folder
    env.update(MURK_OUTPUT_DIR=str(work / "outputs"), MURK_COCO_DIR=str(stages.SAMPLE), HF_HUB_OFFLINE="1",
               MPLBACKEND="Agg", PATH=f"{Path(sys.executable).parent}:{env['PATH']}")
    r = subprocess.run(["bash", "-e", "-c", block], cwd=work, env=env, capture_output=True, text=True, timeout=1500)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    for nb in ("03_readout-mine.ipynb", "04_analyse.ipynb", "05_beyond.ipynb"):  # where the paper embeds from
        assert (work / "outputs" / "notebooks" / nb).is_file(), nb
    models = re.search(r"-y 'models: \[(.*?)\]'", block).group(1).split(", ")
    cube_ = xr.open_zarr(work / "outputs" / "cube.zarr")
    assert [m for m in cube_["model"].values if m not in monitor.MONITOR_IDS] == models
    out = work / "outputs"
    # one run identity in every artifact of the run (issue 21), and one analysis identity in numbers and notebook
    run = json.loads((out / "items_meta.json").read_text())["run_id"]
    assert run == workflow.run_id_of(json.loads((out / "items_meta.json").read_text()))
    assert json.loads((out / "depth" / "current.json").read_text())["run_id"] == run
    for store in sorted((out / "readout").glob("*.zarr")):
        assert core.store_attrs(store)["run_id"] == run, store
    assert cube_.attrs["run_id"] == run
    numbers = report.load_numbers(paths.numbers_file(out))
    assert numbers["run_id"] == run
    for nb in ("01_select", "02_depth", "03_readout-mine", "03b_monitor", "04_analyse"):
        assert report.notebook_identity(out / "notebooks" / f"{nb}.ipynb")["run_id"] == run, nb
    for nb in ("04_analyse", "05_beyond"):
        assert report.notebook_identity(out / "notebooks" / f"{nb}.ipynb")["analysis_id"] == numbers["analysis_id"], nb
    assert _figure_files._file_identity(out / "figures" / "scene_levels.png") == {"run_id": run}
    assert _figure_files._file_identity(out / "figures" / "accuracy_t2.png") == {"run_id": run,
                                                                          "analysis_id": numbers["analysis_id"]}
    # the demo's own analyse notebook (three models) beside the by-hand numbers (two): the mixed paper of the
    # issue. make paper's converter refuses it, writing nothing, and names both identities and the docs' command
    mine = out / "notebooks" / "04_analyse.ipynb"
    kept = mine.read_bytes()
    shutil.copy2(demo / "notebooks" / "04_analyse.ipynb", mine)
    before = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    r = subprocess.run([sys.executable, "-m", "murk.report.paper", "--output-dir", str(out)], cwd=work, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 2, r.stdout[-3000:] + r.stderr[-3000:]
    assert {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == before
    demo_id = report.notebook_identity(mine)["analysis_id"]
    assert demo_id != numbers["analysis_id"] and demo_id in r.stderr and numbers["analysis_id"] in r.stderr
    analyse_cmd = next(c for c in re.sub(r"\s*\\\n\s*", " ", block).splitlines() if "04_analyse.py" in c)
    assert analyse_cmd.strip() in r.stderr, (analyse_cmd, r.stderr)      # the fix: the docs' command as printed
    frags = " ".join(str(paths.numbers_fragment(s_, out)) for s_ in ("04_analyse", "05_beyond"))
    assert "rm " + frags + ", then make paper" in r.stderr
    mine.write_bytes(kept)
    # the paper rendered afterwards (make paper's converter) takes its text and its embedded tables from this run
    r = subprocess.run([sys.executable, "-m", "murk.report.paper", "--output-dir", str(work / "outputs")], cwd=work, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    html = (work / "outputs" / "paper" / "index.html").read_text(encoding="utf-8")
    models_table = html[html.index('id="tbl-models"'):][:20000]
    models_table = models_table[:models_table.index("</table>")]
    for m in ("murk-tiny/gemma",):  # the demo's third model is in the demo's table, not in this run's
        assert m not in models_table
    for m in models:
        assert m in models_table
    assert f'<meta name="murk-analysis-id" content="{numbers["analysis_id"]}">' in html[:html.index("</head>")]


def test_cube_example_runs_as_printed(demo, tmp_path):
    """docs/cube.md's Python block, run unchanged in a folder whose ``outputs`` is the demo's root, prints the
    AURC and the coverage at risk 0.25 of the model it selects (read only: the shared root is not changed)."""
    block = readme_block("## Reading the cube in Python", page="docs/cube.md", lang="python")
    assert 'open_zarr("outputs/cube.zarr")' in block and "print(" in block
    (tmp_path / "outputs").symlink_to(demo)
    r = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    printed = r.stdout.split()
    assert len(printed) == 2, r.stdout
    aurc, coverage = (float(x) for x in printed)
    assert 0 <= aurc <= 1 and 0 <= coverage <= 1, r.stdout
