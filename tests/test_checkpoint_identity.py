"""A local checkpoint re-saved with other weights: the next run re-reads it, never into a mixed store (issue 37
item 2). Snakemake runs the offline pipeline on one COCO item with one tiny checkpoint in a local folder, the way
users run it; the helpers are tests/test_workflow.py's.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
import xarray as xr

from murk import identity, paths
from test_workflow import _cube, _snakemake, _tree, needs_sample


def _resave_plus_half(folder) -> None:
    """Every floating-point weight + 0.5, saved back over the checkpoint's weights file (safetensors)."""
    import torch
    from safetensors.torch import load_file, save_file

    f = folder / "model.safetensors"
    tensors = {k: (v + 0.5 if torch.is_floating_point(v) else v) for k, v in load_file(f).items()}
    save_file(tensors, f, metadata={"format": "pt"})


@needs_sample
@pytest.mark.slow
def test_a_re_saved_local_checkpoint_re_reads_its_model_and_remakes_cube_and_paper(tmp_path, monkeypatch,
                                                                                   tiny_checkpoint_dirs):
    """The default target on a local folder; its weights + 0.5, saved back: the plan lists the read-out (and
    writes nothing), the run re-reads it into a fresh store (the old one kept aside, said on the terminal), the
    cube records the new revision and equals a fresh root's on the new weights, the paper is made again, and
    the same command then has nothing to do."""
    monkeypatch.setenv(identity.CACHE_ENV, str(tmp_path / "digests.json"))  # the digest cache of this test
    folder = shutil.copytree(tiny_checkpoint_dirs["smolvlm"], tmp_path / "ckpt" / "smolvlm")
    model = str(folder)
    out = tmp_path / "out"
    store = paths.readout_store(model, out)
    r = _snakemake(out, model=model)
    assert r.returncode == 0, r.stderr[-3000:]
    first = _cube(out)
    old_rev = str(first["model_revision"].sel(model=model).item())
    assert old_rev == identity.checkpoint_revision(folder, None)
    paper_time = (out / "paper" / "index.html").stat().st_mtime_ns

    _resave_plus_half(folder)
    new_rev = identity.checkpoint_revision(folder, None)
    assert new_rev != old_rev and new_rev.startswith("sha256:")
    before, cache = _tree(out), (tmp_path / "digests.json").read_bytes()
    r = _snakemake(out, "-n", model=model)  # make plan: the read-out and everything after it, nothing written
    text = r.stdout + r.stderr
    assert r.returncode == 0, text[-3000:]
    for rule in ("readout", "analyse", "paper"):
        assert re.search(rf"^(local)?rule {rule}:", text, re.M), (rule, text[-3000:])
    assert "Params have changed" in text or "params" in text.lower()
    assert _tree(out) == before and (tmp_path / "digests.json").read_bytes() == cache  # nor the digest cache

    r = _snakemake(out, model=model)
    text = r.stdout + r.stderr
    assert r.returncode == 0, text[-3000:]
    aside = store.with_name(f"{store.name}.superseded-{old_rev.replace(':', '-')}")
    assert f"its weights changed (revision {old_rev} -> {new_rev})" in text and str(aside) in text, text[-3000:]
    assert aside.is_dir() and xr.open_zarr(aside, consolidated=False).attrs["model_revision"] == old_rev
    assert xr.open_zarr(store, consolidated=False).attrs["model_revision"] == new_rev  # a fresh store
    second = _cube(out)
    assert str(second["model_revision"].sel(model=model).item()) == new_rev
    assert not second["value"].equals(first["value"])  # the weights changed the read-outs
    assert (out / "paper" / "index.html").stat().st_mtime_ns > paper_time
    # the colophon names the weights read out: the new digest, not the old one
    colophon = json.loads((out / "paper_numbers.json").read_text())["colophon.model_revisions"]
    assert f"`{model}`: `{new_rev}`" in colophon and old_rev not in colophon
    html = (out / "paper" / "index.html").read_text(encoding="utf-8")
    assert new_rev in html and old_rev not in html

    fresh = tmp_path / "fresh"  # a fresh run on the new weights: the same cube
    r = _snakemake(fresh, f"{fresh}/paper_numbers.json", model=model)
    assert r.returncode == 0, r.stderr[-3000:]
    xr.testing.assert_identical(_cube(fresh), second)

    r = _snakemake(out, model=model)
    assert r.returncode == 0 and "Nothing to be done" in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]
