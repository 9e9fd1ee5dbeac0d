"""``make export`` on the study-shaped demo (issue 41, item 4): the per-sample files read back into the demo's cube
value for value, and one model card per VLM whose numbers are the run's crossings. On a copy of the session's demo
root, after docs/stages.md's fix of a mixed paper as printed (issue 49 item 6: remove the two numbers fragments, then
``make paper``), planned (.ci/run runs it for real on the demo); then only the export job."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

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
    _documented_paper_fix_as_printed(out)
    r = stages.snakemake_demo(out, targets=("export",))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "1 of 1 steps (100%) done" in r.stdout + r.stderr   # the export job alone
    _export_refusal_names_a_fix_that_works(out)
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


def _documented_paper_fix_as_printed(out):
    """docs/stages.md's fix of a mixed paper (the paper's own refusal prints it too), as printed on ``out``: ``rm`` the
    two numbers fragments, then ``make paper`` (``snakemake paper``), planned. Snakemake alone said "Nothing to be
    done" (a missing intermediate file whose dependent, the paper, is present is not made again); the Snakefile forces
    the analysis jobs whose outputs are missing (its rerun_if_missing), so the plan holds analyse, beyond and the
    paper and no read-out. A dry run: the real ``make paper`` after the ``rm``, as printed, runs in .ci/run on the
    demo (about 90 s of the two notebooks and the paper, over make test's budget here); the fragments are put back."""
    text = " ".join((stages.ROOT / "docs" / "stages.md").read_text(encoding="utf-8").split())
    rm, then = re.search(r"`(rm outputs/analysis/numbers-study\.json [^`]+)` and `(make paper)`", text).groups()
    assert then == "make paper"   # = snakemake paper (the Makefile), with the run's ARGS
    frags = [core.numbers_fragment(s_, out) for s_ in core.NUMBERS_FRAGMENTS]
    kept = {f: (f.read_bytes(), f.stat()) for f in frags}
    subprocess.run(shlex.split(rm.replace("outputs/", f"{out}/")), check=True)
    assert not any(f.exists() for f in frags)
    r = stages.snakemake_demo(out, "-n", targets=("paper",))
    text = r.stdout + r.stderr
    assert r.returncode == 0 and "Nothing to be done" not in text, text[-4000:]
    for job in ("analyse", "beyond", "paper"):
        assert re.search(rf"^{job}\s+1$", r.stdout, re.M), (job, r.stdout[-3000:])
    assert not re.search(r"^readout", r.stdout, re.M), r.stdout[-3000:]
    for f in frags:
        assert not f.exists() and f"murk: {f} is missing: the " in r.stderr, f   # named; a dry run writes nothing
    for f, (data, st) in kept.items():   # as they were, times included (Snakemake plans by them)
        f.write_bytes(data)
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))


def _export_refusal_names_a_fix_that_works(out):
    """By hand, with the numbers file gone, the export refuses naming the run's command (make demo with this root);
    that command re-makes the numbers file (a dry run: the beyond job, which merges both fragments, is forced)."""
    numbers = core.numbers_file(out)
    kept = numbers.read_bytes()
    numbers.unlink()
    r = subprocess.run([sys.executable, "-m", "murk.report.export", "--output-dir", str(out)], capture_output=True,
                       text=True, timeout=300, cwd=stages.ROOT)
    assert r.returncode != 0 and f"{numbers} is missing" in r.stderr, r.stderr[-3000:]
    assert f"make demo ARGS='--config output_dir={out}'" in r.stderr and "Traceback" not in r.stderr
    r = stages.snakemake_demo(out, "-n")   # make demo ARGS='...' planned (make plan): the fix re-makes it
    assert r.returncode == 0 and "Nothing to be done" not in r.stdout + r.stderr, r.stderr[-3000:]
    assert f"murk: {numbers} is missing: the beyond stage would run again" in r.stderr
    assert re.search(r"^beyond\s+1$", r.stdout, re.M), r.stdout[-3000:]
    numbers.write_bytes(kept)
    assert json.loads(kept)["analysis_id"]
