"""A local checkpoint folder's read-out store and the selected images, through Snakemake on one output root
(Snakemake runs the offline pipeline on two COCO items of a private copy of the sample with one tiny checkpoint
in a local folder, a pipeline check, the way users run it; its own module so that a pytest-xdist worker takes it
beside tests/scenarios/test_workflow_runs.py: issue 22 item 4):

1. a stale read-out store is refused, planned and re-read (issue 14);
2. the checkpoint folder re-saved with other weights is re-read, never into a mixed store (issue 37 item 2; was
   tests/test_checkpoint_identity.py);
3. a selected image file replaced with other pixels re-runs its stages (issue 37 item 2; was
   tests/test_image_identity.py).

One finished root serves the three, in that order: two pipeline runs fewer than a root each (issue 39). The
helpers are tests/scenarios/test_workflow_runs.py's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from murk.core import _identity as identity
from murk.core import _paths as paths
from murk.pipeline import markers as workflow
from test_workflow_runs import (SAMPLE, _cube, _cube_of_stores, _fresh_readouts, _papermill_readout,
                                _plan_lists_the_rerun, _tree, needs_sample)

ROOT = paths.project_root()
#: two items: a replaced image's depth map is recomputed alone, the other's kept
N_ITEMS = 2


def _snakemake(out: Path, coco: Path, model: str, *args: str) -> subprocess.CompletedProcess:
    """``snakemake --cores 1 ARGS --config …`` offline on the COCO folder ``coco`` with the one model ``model``."""
    env = {**os.environ, "MURK_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "MURK_COCO_DIR": str(coco),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "MPLBACKEND": "Agg"}
    cmd = [sys.executable, "-m", "snakemake", "--cores", "1", *args, "--config", f"output_dir={out}",
           f"n_items={N_ITEMS}", f'offline_models=["{model}"]', "run_name=store-identity-test", f"coco_dir={coco}",
           "figure_pdf=false"]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)


def _resave_plus_half(folder) -> None:
    """Every floating-point weight + 0.5, saved back over the checkpoint's weights file (safetensors)."""
    import torch
    from safetensors.torch import load_file, save_file

    f = folder / "model.safetensors"
    tensors = {k: (v + 0.5 if torch.is_floating_point(v) else v) for k, v in load_file(f).items()}
    save_file(tensors, f, metadata={"format": "pt"})


def _replace_pixels(path: Path) -> None:
    """Write other pixels of the same size into ``path`` (a new file moved over it, as an editor saves)."""
    from PIL import Image

    with Image.open(path) as im:
        pixels = 255 - np.asarray(im.convert("RGB"))   # the negative: same size, other content
    tmp = path.with_name("new-" + path.name)
    Image.fromarray(pixels).save(tmp, format="JPEG", quality=90)
    os.replace(tmp, path)


def _colophon_digest(out: Path) -> str | None:
    """The images digest the paper's colophon prints."""
    text = re.sub(r"<[^>]+>", "", (out / "paper" / "index.html").read_text(encoding="utf-8"))
    m = re.search(r"images\s+digest\s+([0-9a-f]{12})\b", text)
    return m and m.group(1)


@needs_sample
@pytest.mark.slow
def test_stale_store_re_saved_weights_and_a_replaced_image_are_re_read_and_the_paper_re_made(tmp_path, monkeypatch):
    """The three, in order, on one root: :func:`_stale_store_is_refused_planned_and_re_read`, then
    :func:`_re_saved_weights_re_read_the_model_and_re_make_cube_and_paper`, then
    :func:`_a_replaced_image_is_read_again_and_the_cube_is_a_fresh_runs`."""
    from murk.offline import build_tiny_checkpoint

    monkeypatch.setenv(identity.CACHE_ENV, str(tmp_path / "digests.json"))  # the digest cache of this test
    coco = Path(shutil.copytree(SAMPLE, tmp_path / "coco"))   # never the shared sample itself
    folder = build_tiny_checkpoint("smolvlm", tmp_path / "ckpt" / "run1" / "final", seed=0)
    out = tmp_path / "out"
    first = _stale_store_is_refused_planned_and_re_read(out, coco, folder)
    second = _re_saved_weights_re_read_the_model_and_re_make_cube_and_paper(out, coco, folder, tmp_path, first)
    _a_replaced_image_is_read_again_and_the_cube_is_a_fresh_runs(out, coco, folder, tmp_path, second)


def _stale_store_is_refused_planned_and_re_read(out: Path, coco: Path, folder: Path) -> xr.Dataset:
    """A local checkpoint folder as the model (one slug for the Snakefile's marker and the notebook's
    store): a store read out by hand with other settings is refused, naming the setting, and left as it
    was; on the finished root, a chunk emptied after the run (a power loss) is planned as a re-read, and then
    docs/recovery.md's repair step (``rm -r`` the store and its ``.done``) makes the default target re-read the store
    and re-make the cube and the paper, with the cube of the uninterrupted run; the dry run before each
    leaves the root byte-identical. Returns that cube."""
    model = str(folder)
    marker = out / "readout" / f"{paths.model_slug(model)}.done"
    store = workflow.store_of(marker)
    assert store == paths.readout_store(model, out)  # the Snakefile's name is the notebook's
    r = _snakemake(out, coco, model, f"{out}/depth/current.json")
    assert r.returncode == 0, r.stderr[-3000:]

    # by hand with another n_verbal_items (0) than the workflow's (2; the notebook's default is the workflow's),
    # then Snakemake
    r = _papermill_readout(out, f"-p max_items {N_ITEMS}", "-p n_verbal_items 0", model=model)
    assert r.returncode == 0, r.stderr[-3000:]
    digest = workflow.store_digest(store)
    r = _snakemake(out, coco, model)
    assert r.returncode != 0
    assert f"n_verbal_items: store 0, this run {N_ITEMS}" in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]
    assert workflow.store_digest(store) == digest and not marker.exists()  # the refusal wrote nothing

    shutil.rmtree(store)
    r = _snakemake(out, coco, model)  # the default target: read-outs, monitor, cube, paper
    assert r.returncode == 0, r.stderr[-3000:]
    assert workflow.read_marker(marker)["digest"] == workflow.store_digest(store) != "absent"
    first = _cube(out)
    assert bool(xr.open_zarr(store, consolidated=False)["done"].all())
    assert "Nothing to be done" in (r := _snakemake(out, coco, model, "-n")).stdout + r.stderr

    chunk = store / "value" / "c" / "0" / "0" / "0" / "0" / "0"  # the shard file, damaged after the run (a power loss): zero bytes
    chunk.write_bytes(b"")
    before = _tree(out)
    _plan_lists_the_rerun(out, _snakemake(out, coco, model, "-n"), "changed after its marker was written")
    assert _tree(out) == before  # make plan changes nothing on disk
    # (that the damaged store's re-read re-makes the cube and the paper as they were:
    # tests/scenarios/test_damaged_demo.py; here docs/recovery.md's repair step on it, so that one re-run serves:
    # issue 22 item 4)

    shutil.rmtree(store)  # docs/recovery.md's repair step
    marker.unlink()
    before = _tree(out)
    _plan_lists_the_rerun(out, _snakemake(out, coco, model, "-n"), "is missing too")
    assert _tree(out) == before
    # the re-read alone (its marker as the target): its store merges into the uninterrupted run's cube. That the
    # default target re-makes the cube and the paper after a re-read: the next step (re-saved weights) and
    # tests/scenarios/test_damaged_demo.py; one pipeline tail fewer here (issue 40: make test's budget)
    r = _snakemake(out, coco, model, str(marker))
    assert r.returncode == 0, r.stderr[-3000:]
    assert workflow.read_marker(marker)["digest"] == workflow.store_digest(store) != "absent"
    # the store re-read as it was (its marker vouches for the same content): Snakemake has nothing to re-make
    assert "Nothing to be done" in (r := _snakemake(out, coco, model, "-n")).stdout + r.stderr
    xr.testing.assert_identical(_cube_of_stores(out, [model]), first)  # (merged over the root's cube)
    return first


def _re_saved_weights_re_read_the_model_and_re_make_cube_and_paper(out: Path, coco: Path, folder: Path,
                                                                   tmp_path: Path, first: xr.Dataset) -> xr.Dataset:
    """On the finished root of the default target on a local folder: its weights + 0.5, saved back: the plan
    lists the read-out (and writes nothing, nor the digest cache), the run re-reads it into a fresh store (the old
    one kept aside, said on the terminal), the cube records the new revision and equals the cube of a fresh root's
    read-outs on the new weights, the paper is made again, and the same command then has nothing to do. Returns
    the new cube."""
    model = str(folder)
    store = paths.readout_store(model, out)
    old_rev = str(first["model_revision"].sel(model=model).item())
    assert old_rev == identity.checkpoint_revision(folder, None)
    paper_time = (out / "paper" / "index.html").stat().st_mtime_ns

    _resave_plus_half(folder)
    new_rev = identity.checkpoint_revision(folder, None)
    assert new_rev != old_rev and new_rev.startswith("sha256:")
    # a copy of the root (issue 49 item 5: no record of it in this checkout's .snakemake/, so Snakemake's params
    # trigger is silent there) notices the re-saved weights from its store's recorded revision: its plan lists the
    # read-out with murk's line, and writes nothing (a dry run only: the re-read itself is the original root's, below)
    copy = tmp_path / "copied-root"
    shutil.copytree(out, copy, symlinks=True)
    before = _tree(copy)
    r = _snakemake(copy, coco, model, "-n")
    text = r.stdout + r.stderr
    assert r.returncode == 0, text[-3000:]
    assert (f"murk: the store {paths.readout_store(model, copy)} was read out from the weights {old_rev} of {model}, "
            f"which are {new_rev} now") in text and "its read-out would run again" in text, text[-3000:]
    assert re.search(r"^(local)?rule readout:", text, re.M) and "Nothing to be done" not in text, text[-3000:]
    assert _tree(copy) == before
    shutil.rmtree(copy)
    before, cache = _tree(out), (tmp_path / "digests.json").read_bytes()
    r = _snakemake(out, coco, model, "-n")  # make plan: the read-out and everything after it, nothing written
    text = r.stdout + r.stderr
    assert r.returncode == 0, text[-3000:]
    for rule in ("readout", "analyse", "paper"):
        assert re.search(rf"^(local)?rule {rule}:", text, re.M), (rule, text[-3000:])
    # the store's recorded revision forces it (murk's line; Snakemake's params trigger agrees in this checkout)
    assert f"was read out from the weights {old_rev} of {model}, which are {new_rev} now" in text, text[-3000:]
    assert _tree(out) == before and (tmp_path / "digests.json").read_bytes() == cache  # nor the digest cache

    r = _snakemake(out, coco, model)
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

    fresh = tmp_path / "fresh-weights"  # a fresh run on the new weights, up to its read-outs: the same cube
    r = _snakemake(fresh, coco, model, *_fresh_readouts(fresh, model))
    assert r.returncode == 0, r.stderr[-3000:]
    xr.testing.assert_identical(_cube_of_stores(fresh, [model]), second)

    r = _snakemake(out, coco, model)
    assert r.returncode == 0 and "Nothing to be done" in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]
    return second


def _a_replaced_image_is_read_again_and_the_cube_is_a_fresh_runs(out: Path, coco: Path, folder: Path,
                                                                 tmp_path: Path, old: xr.Dataset) -> None:
    """After a finished run, one selected image file is replaced with other pixels of the same size: the plan
    names it and changes nothing; the same command recomputes its depth map and read-outs and re-makes cube and
    paper, with the cube of a fresh run's read-outs on the changed folder and the new images digest; the next
    plan says "Nothing to be done"."""
    model = str(folder)
    meta = json.loads((out / "items_meta.json").read_text())
    assert _colophon_digest(out) == meta["images_sha256"][:12]
    first = json.loads((out / "items.json").read_text())[0]
    image = coco / "val2017" / first["file_name"]
    assert meta["image_sha256"][str(first["image_id"])] == identity.file_digest(image)
    assert old.attrs["images_sha256"] == meta["images_sha256"]
    depth_maps = {p.name: p.stat().st_mtime_ns for p in (out / "depth").rglob("*.npy")}
    assert len(depth_maps) == N_ITEMS

    _replace_pixels(image)
    before = _tree(out)
    r = _snakemake(out, coco, model, "-n")
    text = r.stdout + r.stderr
    assert r.returncode == 0, text[-3000:]
    assert (f"murk: {image} changed since select recorded it: its depth map and read-outs would run again, and "
            f"the cube and paper after them") in r.stderr, r.stderr[-3000:]
    for rule in ("select", "depth", "readout", "monitor", "analyse", "paper"):
        assert re.search(rf"^(local)?rule {rule}:", text, re.M), (rule, text[-3000:])
    assert _tree(out) == before   # make plan changes nothing on disk

    paper_time = (out / "paper" / "index.html").stat().st_mtime_ns
    r = _snakemake(out, coco, model)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"murk: {image} changed since select recorded it" in r.stderr
    assert (out / "paper" / "index.html").stat().st_mtime_ns > paper_time   # the paper is made again
    meta = json.loads((out / "items_meta.json").read_text())
    assert meta["image_sha256"][str(first["image_id"])] == identity.file_digest(image)
    assert _colophon_digest(out) == meta["images_sha256"][:12]
    # the changed image's depth map alone was recomputed
    now = {p.name: p.stat().st_mtime_ns for p in (out / "depth").rglob("*.npy")}
    assert {n for n in now if now[n] != depth_maps.get(n)} == {f"{first['image_id']}.npy"}
    new = _cube(out)
    assert new.attrs["images_sha256"] == meta["images_sha256"] != old.attrs["images_sha256"]
    assert not new["value"].sel(image=first["image_id"]).equals(old["value"].sel(image=first["image_id"]))

    fresh = tmp_path / "fresh-images"  # a fresh run on the changed folder up to its read-outs, merged as analyse does
    r = _snakemake(fresh, coco, model, *_fresh_readouts(fresh, model))
    assert r.returncode == 0, r.stderr[-3000:]
    xr.testing.assert_identical(new, _cube_of_stores(fresh, [model]))
    assert "Nothing to be done" in (r := _snakemake(out, coco, model, "-n")).stdout + r.stderr
