"""Bad images through the stages, as users run them (papermill; issue 14): truncated and missing images are
recorded, not fatal; an image too small for a condition is recorded and the stage goes on. The checks one by one:
tests/test_bad_input.py, tests/test_render.py."""

import json
import shutil

import pytest
import xarray as xr
from PIL import Image

from murk.core import _paths as paths
from murk.protocol import _item_files

import stages  # tests/stages.py: the stage notebooks through papermill

SAMPLE = stages.SAMPLE
needs_sample = stages.needs_sample


@needs_sample
@pytest.mark.slow
def test_truncated_and_missing_images_are_recorded_not_fatal(tmp_path, monkeypatch):
    monkeypatch.setenv("MURK_OFFLINE", "1")
    monkeypatch.setenv("MURK_COCO_DIR", str(SAMPLE))
    out = tmp_path / "out"
    stages.run("01_select", out, n_items=3, seed=1, run_name="bad-input")
    table, _ = _item_files.read_items(out)
    # a private copy of the three images: one truncated, one deleted
    img_dir = tmp_path / "val2017"
    img_dir.mkdir()
    for f in table["file_name"]:
        shutil.copy(SAMPLE / "val2017" / f, img_dir / f)
    truncated, deleted = table["file_name"].iloc[0], table["file_name"].iloc[2]
    data = (img_dir / truncated).read_bytes()
    (img_dir / truncated).write_bytes(data[: len(data) // 3])
    (img_dir / deleted).unlink()
    meta = json.loads((out / "items_meta.json").read_text())
    meta["image_dir"] = str(img_dir)
    (out / "items_meta.json").write_text(json.dumps(meta))

    stages.run("02_depth", out, backend="constant")
    stages.run("03_readout", out, model="murk-tiny/smolvlm")
    store = paths.readout_store("murk-tiny/smolvlm", out)
    ds = xr.open_zarr(store, consolidated=False).load()
    assert bool(ds["done"].all())
    reasons = [str(r) for r in ds["missing_reason"].values]
    assert "cannot be decoded" in reasons[0] or "truncated" in reasons[0].lower() or "not found" in reasons[0]
    assert "not found" in reasons[2] and str(img_dir / deleted) in reasons[2]  # names the file
    assert reasons[1] == ""
    v = ds["value"].sel(readout="c_int", arm="fog")
    assert v.isel(image=0).isnull().all() and v.isel(image=2).isnull().all()
    assert v.isel(image=1).notnull().all()  # the good image was read out


@pytest.mark.slow  # three stage notebooks through papermill (end to end: out of `make test-fast`)
def test_stage_records_a_too_small_image_and_goes_on(tmp_path, monkeypatch, coco_sample):
    """Through a stage's per-item loop (the monitor's: no VLM needed): the thin item is recorded, the other kept."""
    import json
    import shutil

    import xarray as xr

    import stages  # tests/stages.py: the stage notebooks through papermill

    sample = coco_sample
    monkeypatch.setenv("MURK_OFFLINE", "1")
    monkeypatch.setenv("MURK_COCO_DIR", str(sample))
    out = tmp_path / "out"
    stages.run("01_select", out, n_items=2, seed=1, run_name="too-small-image")
    table, _ = _item_files.read_items(out)
    img_dir = tmp_path / "val2017"
    img_dir.mkdir()
    for f in table["file_name"]:
        shutil.copy(sample / "val2017" / f, img_dir / f)
    thin = table["file_name"].iloc[0]
    Image.new("RGB", (640, 20), (90, 120, 150)).save(img_dir / thin, format="JPEG")
    meta = json.loads((out / "items_meta.json").read_text())
    meta["image_dir"] = str(img_dir)
    (out / "items_meta.json").write_text(json.dumps(meta))
    # its annotation says so too (a genuinely thin image; a size disagreeing with the annotation is another case)
    table.loc[0, ["width", "height"]] = [640, 20]
    _item_files.save_items(table, out / "items.json")
    stages.run("02_depth", out, backend="constant")
    stages.run("03b_monitor", out)
    store = paths.readout_store("murk/visibility-monitor", out)
    ds = xr.open_zarr(store, consolidated=False).load()
    assert bool(ds["done"].all())
    reasons = [str(r) for r in ds["missing_reason"].values]
    assert "32 px" in reasons[0] and "448 x 14 px" in reasons[0] and reasons[1] == ""
    v = ds["value"].sel(readout="visibility_hat_m", task="t2")
    assert v.isel(image=0).isnull().all() and v.sel(arm="fog", level=slice(1, None)).isel(image=1).notnull().all()
