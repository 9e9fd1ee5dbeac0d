"""``make export`` on the study-shaped demo (issue 41, item 4): the per-sample files read back into the demo's cube
value for value, and one model card per VLM whose numbers are the run's crossings. On a copy of the session's demo
root: no pipeline runs again, only the export job."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
import yaml

import stages
from murk import core, report, results
from test_samples import _differences


@stages.needs_sample
@pytest.mark.slow
def test_make_export_on_the_demo(demo, tmp_path):
    pytest.importorskip("pyarrow", reason="pyarrow (murk's dependency for samples.parquet) is missing")
    from huggingface_hub.repocard_data import model_index_to_eval_results

    out = stages.copy_root(demo, tmp_path / "out")
    r = stages.snakemake_demo(out, targets=("export",))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "1 of 1 steps (100%) done" in r.stdout + r.stderr   # the export job alone
    cube = results.open_cube(core.cube_store(out)).load()
    for rows in (report.read_jsonl(out / "export" / "samples.jsonl"),
                 report.read_parquet(out / "export" / "samples.parquet")):
        assert _differences(cube, results.samples_to_cube(rows, levels=cube["level"].values)) == []
        # the models run on fewer items (tests/stages.py DEMO_MODELS) have rows for their own images only
        for model, n in stages.DEMO_N.items():
            assert len({r["image"] for r in rows if r["model"] == model}) == n
    with xr.open_dataset(core.analysis_dir(out) / "crossings.nc") as cr:
        cr = cr.load()
    for model in stages.DEMO_N:
        card = (out / "export" / "model-cards" / f"{core.model_slug(model)}.md").read_text(encoding="utf-8")
        front = yaml.safe_load(card[4:].split("\n---\n", 1)[0])
        assert "pipeline-check" in front["tags"] and "Pipeline check, not a result" in card
        name, evals = model_index_to_eval_results(front["model-index"])
        assert name == model
        crossings = [e for e in evals if e.metric_type == "crossing_visibility"]
        for e in crossings:   # each the crossings.nc value of its arm, task and signal
            arm, task = e.dataset_config.split("-")
            who = e.metric_name.split(" ")[0][2:]
            x = cr["v_cross_m"].sel(model=model, arm=arm, task=task, readout="correct" if who == "acc" else who)
            assert e.metric_value == float(x)
        v = cr["v_cross_m"].sel(model=model).values
        assert len(crossings) == int(np.isfinite(v).sum()) > 0   # every defined crossing, no other
