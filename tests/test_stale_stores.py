"""A stale read-out store of a local checkpoint folder is refused, planned and re-read through Snakemake
(issue 14; its own module so that a pytest-xdist worker takes it beside tests/test_workflow.py: issue 22 item 4).

Snakemake runs on the offline demo (one COCO item, one tiny checkpoint in a local folder: a pipeline check)
the way users run it; the helpers are tests/test_workflow.py's.
"""

from __future__ import annotations

import shutil

import pytest
import xarray as xr

from murk import paths, workflow
from test_workflow import _cube, _papermill_readout, _plan_lists_the_rerun, _snakemake, _tree, needs_sample


@needs_sample
@pytest.mark.slow
def test_stale_store_of_a_local_checkpoint_folder_is_re_read_and_the_paper_re_made(tmp_path):
    """A local checkpoint folder as the model (one slug for the Snakefile's marker and the notebook's
    store): a store read out by hand with other settings is refused, naming the setting, and left as it
    was; on the finished root, a chunk emptied after the run (a power loss) is planned as a re-read, and then
    the README's repair step (``rm -r`` the store and its ``.done``) makes the default target re-read the store
    and re-make the cube and the paper, with the cube of the uninterrupted run; the dry run before each
    leaves the root byte-identical."""
    from murk.checkpoints import build_tiny_checkpoint

    folder = build_tiny_checkpoint("smolvlm", tmp_path / "ckpt" / "run1" / "final", seed=0)
    model = str(folder)
    out = tmp_path / "out"
    marker = out / "readout" / f"{paths.model_slug(model)}.done"
    store = workflow.store_of(marker)
    assert store == paths.readout_store(model, out)  # the Snakefile's name is the notebook's
    r = _snakemake(out, f"{out}/depth/current.json", model=model)
    assert r.returncode == 0, r.stderr[-3000:]

    # by hand with another n_verbal_items (0) than the workflow's (2; the notebook's default is the workflow's),
    # then Snakemake
    r = _papermill_readout(out, "-p max_items 1", "-p n_verbal_items 0", model=model)
    assert r.returncode == 0, r.stderr[-3000:]
    digest = workflow.store_digest(store)
    r = _snakemake(out, model=model)
    assert r.returncode != 0
    assert "n_verbal_items: store 0, this run 1" in r.stdout + r.stderr
    assert workflow.store_digest(store) == digest and not marker.exists()  # the refusal wrote nothing

    shutil.rmtree(store)
    r = _snakemake(out, model=model)  # the default target: read-outs, monitor, cube, paper
    assert r.returncode == 0, r.stderr[-3000:]
    assert workflow.read_marker(marker)["digest"] == workflow.store_digest(store) != "absent"
    first = _cube(out)
    assert bool(xr.open_zarr(store, consolidated=False)["done"].all())
    assert "Nothing to be done" in (r := _snakemake(out, "-n", model=model)).stdout + r.stderr

    chunk = store / "value" / "c" / "0" / "0" / "0" / "0" / "0"  # the shard file, damaged after the run (a power loss): zero bytes
    chunk.write_bytes(b"")
    before = _tree(out)
    _plan_lists_the_rerun(out, _snakemake(out, "-n", model=model), "changed after its marker was written")
    assert _tree(out) == before  # make plan changes nothing on disk
    # (that the damaged store's re-read re-makes the cube and the paper as they were: the demo-copy test below;
    # here the README's repair step on it, so that one re-run serves: issue 22 item 4)

    shutil.rmtree(store)  # the README's repair step
    marker.unlink()
    before = _tree(out)
    _plan_lists_the_rerun(out, _snakemake(out, "-n", model=model), "is missing too")
    assert _tree(out) == before
    paper_time = (out / "paper" / "index.html").stat().st_mtime
    r = _snakemake(out, model=model)
    assert r.returncode == 0, r.stderr[-3000:]
    xr.testing.assert_identical(_cube(out), first)
    assert (out / "paper" / "index.html").stat().st_mtime > paper_time
    assert "Nothing to be done" in (r := _snakemake(out, "-n", model=model)).stdout + r.stderr
