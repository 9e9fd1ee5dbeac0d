"""A selected image is identified by its content (issue 37, item 2): a replaced image file re-runs its stages.

Snakemake runs the offline pipeline (two COCO items, one tiny checkpoint: a pipeline check) on a copy of the
COCO sample, the way users run it; then one selected image file is replaced with other pixels of the same size.
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

from murk import identity, paths
from test_workflow import SAMPLE, _cube, _tree, needs_sample

ROOT = paths.project_root()


def _snakemake(out: Path, coco: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "MURK_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "MURK_COCO_DIR": str(coco),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "MPLBACKEND": "Agg"}
    cmd = [sys.executable, "-m", "snakemake", "--cores", "1", *args, "--config", f"output_dir={out}", "n_items=2",
           'offline_models=["murk-tiny/smolvlm"]', "run_name=image-identity-test", f"coco_dir={coco}"]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)


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
def test_a_replaced_image_is_read_again_and_the_cube_is_a_fresh_runs(tmp_path):
    """After a finished run, one selected image file is replaced: the plan names it and changes nothing; the same
    command recomputes its depth map and read-outs and re-makes cube and paper, with the cube of a fresh run on
    the changed folder and the new images digest; the next plan says "Nothing to be done"."""
    coco = Path(shutil.copytree(SAMPLE, tmp_path / "coco"))   # never the shared sample itself
    out = tmp_path / "out"
    r = _snakemake(out, coco)
    assert r.returncode == 0, r.stderr[-3000:]
    meta = json.loads((out / "items_meta.json").read_text())
    assert _colophon_digest(out) == meta["images_sha256"][:12]
    first = json.loads((out / "items.json").read_text())[0]
    image = coco / "val2017" / first["file_name"]
    assert meta["image_sha256"][str(first["image_id"])] == identity.file_digest(image)
    old = _cube(out)
    assert old.attrs["images_sha256"] == meta["images_sha256"]
    depth_maps = {p.name: p.stat().st_mtime_ns for p in (out / "depth").rglob("*.npy")}

    _replace_pixels(image)
    before = _tree(out)
    r = _snakemake(out, coco, "-n")
    text = r.stdout + r.stderr
    assert r.returncode == 0, text[-3000:]
    assert (f"murk: {image} changed since select recorded it: its depth map and read-outs would run again, and "
            f"the cube and paper after them") in r.stderr, r.stderr[-3000:]
    for rule in ("select", "depth", "readout", "monitor", "analyse", "paper"):
        assert re.search(rf"^(local)?rule {rule}:", text, re.M), (rule, text[-3000:])
    assert _tree(out) == before   # make plan changes nothing on disk

    paper_time = (out / "paper" / "index.html").stat().st_mtime_ns
    r = _snakemake(out, coco)
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

    fresh = tmp_path / "fresh"
    r = _snakemake(fresh, coco, f"{fresh}/cube.zarr")
    assert r.returncode == 0, r.stderr[-3000:]
    xr.testing.assert_identical(new, _cube(fresh))
    assert "Nothing to be done" in (r := _snakemake(out, coco, "-n")).stdout + r.stderr
