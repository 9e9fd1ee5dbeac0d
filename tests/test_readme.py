"""The README's by-hand examples run as printed after the offline demo (issue 20).

The bash block of "One stage by hand" is run unchanged, in a folder laid out like the
project (``notebooks/`` and ``.venv`` linked from it, ``outputs/`` a copy of the demo's
output root, so the session's shared demo root is left as it was); the executed notebooks
land where the block says and the analyse notebook rebuilt the cube of the models it was
given.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import xarray as xr

from murk import monitor, paths

import stages

ROOT = paths.project_root()
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not stages.SAMPLE.is_dir(), reason="../shared/coco-val2017-sample not present")]


def readme_block(heading: str) -> str:
    """The first ```bash block under ``heading`` of README.md."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index(heading):]
    m = re.search(r"```bash\n(.*?)```", section, re.S)
    assert m, f"README: no bash block under {heading!r}"
    return m.group(1)


def test_by_hand_examples_run_as_printed(demo, tmp_path):
    block = readme_block("## One stage by hand")
    assert "papermill" in block and "-y 'models:" in block
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
    for nb in ("03_readout-mine.ipynb", "04_analyse.ipynb"):  # the analyse notebook where the paper embeds from
        assert (work / "outputs" / "notebooks" / nb).is_file(), nb
    models = re.search(r"-y 'models: \[(.*?)\]'", block).group(1).split(", ")
    cube_ = xr.open_zarr(work / "outputs" / "cube.zarr")
    assert [m for m in cube_["model"].values if m != monitor.MONITOR_ID] == models
    # the paper rendered afterwards (make paper's converter) takes its text and its embedded tables from this run
    r = subprocess.run([sys.executable, "-m", "murk.paper", "--output-dir", str(work / "outputs")], cwd=work, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    html = (work / "outputs" / "paper" / "index.html").read_text(encoding="utf-8")
    models_table = html[html.index('id="tbl-models"'):][:20000]
    models_table = models_table[:models_table.index("</table>")]
    for m in ("murk-tiny/gemma",):  # the demo's third model is in the demo's table, not in this run's
        assert m not in models_table
    for m in models:
        assert m in models_table
