"""Interrupted, deleted and damaged read-out stores of the study-shaped demo are re-read by the default
target (issue 14; its own module so that a pytest-xdist worker takes it beside
tests/scenarios/test_workflow_runs.py: issue 22 item 4). The helpers are tests/scenarios/test_workflow_runs.py's.
"""

from __future__ import annotations

import re
import shutil

import pytest
import xarray as xr

from murk.core import _paths as paths
from test_workflow_runs import _cube, _plan_lists_the_rerun, _tree, needs_sample


@needs_sample
@pytest.mark.slow
def test_interrupted_deleted_and_damaged_stores_of_the_demo_are_re_read_by_make_demo(demo, tmp_path):
    """On a copy of the finished study-shaped demo, three faults at once, each in another model's store: a
    read-out killed while it wrote (one image not done, no ``.done`` marker), a store deleted, and a chunk cut
    short after the run (a power loss). ``make plan`` names each and leaves the root byte-identical; the default
    target (what ``make demo`` runs) re-reads those three stores, no other, the killed one only on its unfinished
    image, and re-makes the cube and the paper, with the cube of the uninterrupted run. (One re-run for the
    three: issue 22 item 4.)"""
    import numpy as np

    import stages

    out = stages.copy_root(demo, tmp_path / "out")
    assert "Nothing to be done" in (r := stages.snakemake_demo(out, "-n")).stdout + r.stderr
    first = _cube(out)
    killed = paths.readout_store("murk-tiny/smolvlm", out)
    deleted = paths.readout_store("murk-tiny/qwen3vl", out)
    damaged = paths.readout_store("murk-tiny/gemma", out)
    killed_before = xr.open_zarr(killed, consolidated=False).load()
    # the state a job killed during the read-out leaves: image 1 not done, no .done marker
    xr.Dataset({"done": ("image", np.zeros(1, bool))}).to_zarr(killed, region={"image": slice(1, 2)},
                                                                consolidated=False)
    (out / "readout" / f"{paths.model_slug('murk-tiny/smolvlm')}.done").unlink()
    shutil.rmtree(deleted)
    chunk = damaged / "value" / "c" / "0" / "0" / "0" / "0" / "0"  # the shard file of all its images
    chunk.write_bytes(chunk.read_bytes()[: len(chunk.read_bytes()) // 2])
    before = _tree(out)
    r = stages.snakemake_demo(out, "-n")
    _plan_lists_the_rerun(out, r, f"the store {deleted} is missing")
    assert f"the store {damaged} changed after its marker" in r.stderr
    assert _tree(out) == before
    paper_time = (out / "paper" / "index.html").stat().st_mtime
    r = stages.snakemake_demo(out)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert len(re.findall(r"^(local)?rule readout:", r.stdout + r.stderr, re.M)) == 3  # those three, no other
    assert "runs again, and the cube and paper after it" in r.stderr
    # the killed read-out: the bar counts units (image x condition, 24 per image): only its unfinished image
    # was read out again, and greedy decoding of a deterministic model gives it the same numbers
    nb = (out / "notebooks" / f"03_readout-{paths.model_slug('murk-tiny/smolvlm')}.ipynb").read_text()
    assert "24/24 [" in nb and f"{24 * stages.DEMO_N_ITEMS}/{24 * stages.DEMO_N_ITEMS} [" not in nb
    killed_after = xr.open_zarr(killed, consolidated=False).load()
    assert bool(killed_after["done"].all())
    xr.testing.assert_identical(killed_before["value"], killed_after["value"])
    xr.testing.assert_identical(_cube(out), first)
    assert (out / "paper" / "index.html").stat().st_mtime > paper_time
    assert "Nothing to be done" in (r := stages.snakemake_demo(out, "-n")).stdout + r.stderr
