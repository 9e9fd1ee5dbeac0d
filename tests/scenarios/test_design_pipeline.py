"""End to end: the spec's pilot design (data/pilot.yaml) through the real pipeline, beside the study's (issue 26).

Runs ``snakemake --configfile data/workflow.yaml data/pilot.yaml`` offline on the shared sample with a tiny
checkpoint, on the images of the session's demo (the study's design), with ``compare_with`` set to the demo's
root, and reads the pilot's paper: its design, its marker diagnostic and the two designs' floors side by side,
each number recomputed here from the two cubes.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr

from murk import report
from murk.core import _config as config
from murk.core import _paths as paths

import stages  # tests/stages.py: Snakemake and the stage notebooks
from test_pipeline import _plain, _text

ROOT = paths.project_root()
MODEL = "murk-tiny/smolvlm"
pytestmark = [pytest.mark.slow, stages.needs_sample]


@pytest.fixture(scope="module")
def pilot(demo, tmp_path_factory):
    out = tmp_path_factory.mktemp("pilot") / "out"
    r = stages.snakemake(out, f"compare_with={demo}", f"offline_models=[{MODEL}]",
                         "--configfile", "data/workflow.yaml", "data/pilot.yaml",
                         n_items=stages.DEMO_N_ITEMS, run_name="pilot-e2e")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    return out


def test_the_pilot_is_its_own_run_with_the_pilots_design(pilot, demo):
    meta = json.loads(paths.items_file(pilot).with_name("items_meta.json").read_text())
    demo_meta = json.loads(paths.items_file(demo).with_name("items_meta.json").read_text())
    assert meta["design"] == {"binary_task": "existence", "distractors": "uniform", "box_width_px": 3,
                              "sweep_end_m": 3.90625, "abstain_wordings": 1}
    assert meta["config_hash"] != demo_meta["config_hash"]
    assert meta["study_config_hash"] == demo_meta["config_hash"] == config.config_hash(config.load_config())
    a, b = (json.loads(paths.items_file(r).read_text()) for r in (pilot, demo))
    assert [x["image_id"] for x in a] == [x["image_id"] for x in b]     # the same images and targets
    assert [x["category"] for x in a] == [x["category"] for x in b]
    prompts_md = (paths.analysis_dir(pilot) / "tbl-prompts.md").read_text()
    assert "anywhere in the image" in prompts_md and "inside the red box an" not in prompts_md.split("t3 stem")[1][:200]


def test_the_pilots_paper_states_its_design_marker_and_both_designs_floors(pilot, demo):
    n = report.load_numbers(paths.numbers_file(pilot))
    text = _text((pilot / "paper" / "index.html").read_text(encoding="utf-8"))
    assert n["cfg.sweep_min_m"] == "3.9" and n["cfg.box_width_px"] == "3" and n["diagnostic.marker.width_px"] == "3"
    for k in ("finding.design", "finding.diagnostic_marker", "finding.design_comparison", "finding.diagnostic"):
        assert _plain(n[k]) in text, k
    assert "existence task" in n["finding.design"] and "3 px" in n["finding.design"]
    assert str(demo) in n["finding.design_comparison"]

    # both designs' floors, recomputed from the two cubes on the images both read out
    cubes = {r: xr.open_zarr(paths.cube_store(r), consolidated=False).sel(model=MODEL) for r in (pilot, demo)}
    k = paths.model_slug(MODEL)
    assert n[f"diagnostic.compare.n_images.{k}"] == str(stages.DEMO_N_ITEMS)
    for where, r in (("here", pilot), ("there", demo)):
        c = cubes[r]["value"].sel(arm="blank", level=0, task="t2", readout="correct").values
        assert float(n[f"diagnostic.compare.{where}.floor.blank.t2.{k}"]) == pytest.approx(float(np.nanmean(c)), abs=5e-3)
        assert report.fmt(float(np.nanmean(c))) in n["finding.design_comparison"]
    # the pilot's crossings are censored at its own last level, the study's at 1.95 m
    for where, end in (("here", "3.9"), ("there", "1.95")):
        if float(n[f"diagnostic.compare.{where}.v_acc_censored.fog.t2.{k}"]):
            assert report.fmt_level(float(n[f"diagnostic.compare.{where}.v_acc.fog.t2.{k}"])) == end
    # the pilot's analysis has no second abstain wording and no level beyond 3.9 m
    scores = xr.open_dataset(paths.analysis_dir(pilot) / "scores.nc")
    assert float(scores["visibility_m"].min()) == 3.90625
