"""Bad input gets a clear error or a recorded missing value, and loses nothing computed (issue 8)."""

import errno
import json
import os
import shutil

import numpy as np
import pytest
import xarray as xr
from PIL import Image

from murk import cube, items, paths, render

import stages  # tests/stages.py: the stage notebooks through papermill

SAMPLE = paths.project_root().parent / "shared" / "coco-val2017-sample"
needs_sample = pytest.mark.skipif(not SAMPLE.is_dir(), reason="../shared/coco-val2017-sample not present")


@needs_sample
@pytest.mark.slow
def test_truncated_and_missing_images_are_recorded_not_fatal(tmp_path, monkeypatch):
    monkeypatch.setenv("MURK_OFFLINE", "1")
    monkeypatch.setenv("MURK_COCO_DIR", str(SAMPLE))
    out = tmp_path / "out"
    stages.run("01_select", out, n_items=3, seed=1, run_name="bad-input")
    table, _ = items.read_items(out)
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


def test_grey_cmyk_alpha_images_become_rgb(tmp_path):
    for mode, fill in (("L", 90), ("CMYK", (10, 20, 30, 40)), ("RGBA", (10, 20, 30, 128)), ("P", 3)):
        p = tmp_path / f"x-{mode}.{'jpg' if mode in ('L', 'CMYK') else 'png'}"
        Image.new(mode, (21, 13), fill).save(p)
        im = render.load_image(p)
        assert im.shape == (13, 21, 3) and im.dtype == np.uint8, mode


def test_exif_rotation_is_not_applied(tmp_path):
    """COCO's boxes refer to the stored pixels, so an EXIF orientation tag is ignored."""
    p = tmp_path / "rot.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 CW" on display
    Image.new("RGB", (40, 10), (200, 0, 0)).save(p, exif=exif)
    assert render.load_image(p).shape == (10, 40, 3)


def test_image_smaller_than_the_box_marker():
    img = np.zeros((5, 6, 3), np.uint8)
    out = render.draw_box(img, (1, 1, 3, 2), width_px=8)
    assert out.shape == img.shape and (out == [255, 0, 0]).all(-1).any()


def test_disk_full_while_writing_the_cube_keeps_the_previous_cube(tmp_path, monkeypatch):
    store = tmp_path / "m.zarr"
    attrs = {"config_hash": "c", "items_hash": "i", "model_id": "m", "depth_backend": "constant-13.8m"}
    cube.open_readout_store(store, [1], ["car"], attrs)
    r = {k: 0.5 for k in cube.READOUTS}
    r.update({k: "" for k in cube.TEXT_READOUTS})
    cube.write_image(store, 0, {(a, lvl, t): r for a, lvl in cube.CONDITIONS for t in cube.TASKS})
    out = tmp_path / "cube.zarr"
    cube.merge_models({"m": store}, out)
    before = xr.open_zarr(out).load()

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(xr.Dataset, "to_zarr", full)
    with pytest.raises(OSError, match="No space left"):
        cube.merge_models({"m": store}, out)
    monkeypatch.undo()
    xr.testing.assert_identical(xr.open_zarr(out).load(), before)


def test_out_of_memory_halves_the_batch_and_goes_on(tiny_vlms, coco_image, monkeypatch, caplog):
    """A (simulated) CUDA out-of-memory error on a batch of prompt tails: halve it, same read-outs."""
    import torch

    from murk import prompts, readout

    vlm = tiny_vlms["qwen3vl"]
    row = {"category": "car", "t2_options": ["dog", "car", "bus", "cat"], "t2_answer_index": 1,
           "t3_distractor": "bus"}
    questions = prompts.questions_for_item(row)
    ref = readout.read_item(vlm, coco_image, questions)
    real = readout._run_tails
    calls = []

    def small_gpu(vlm_, cache, next_pos, n_prefix, tails, gen_rows, max_new):
        calls.append(len(tails))
        if len(tails) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(vlm_, cache, next_pos, n_prefix, tails, gen_rows, max_new)

    monkeypatch.setattr(readout, "_run_tails", small_gpu)
    with caplog.at_level("WARNING", logger="murk"):
        got = readout.read_item(vlm, coco_image, questions)
    assert max(calls) > 2 and "halving" in caplog.text
    for task in ref:
        for k in ("c_int", "answer", "abstain", "abstain2", "option_mass"):
            assert abs(got[task][k] - ref[task][k]) <= 1e-4 or (np.isnan(got[task][k]) and np.isnan(ref[task][k]))
        assert got[task]["verbal_text"] == ref[task]["verbal_text"]


# --- errors a user can cause name the file and the fix (issue 14) ---

def test_annotation_file_that_is_not_json_names_the_file_and_the_fix(tmp_path):
    from murk import items

    ann = tmp_path / "annotations" / "instances_val2017.json"
    ann.parent.mkdir()
    ann.write_text('{"images": [{"id": 1, "file_name": "a.jpg"')  # truncated
    with pytest.raises(ValueError) as e:
        items.select_items(ann, n_items=1, seed=1)
    msg = str(e.value)
    assert str(ann) in msg and "not valid JSON" in msg and "line 1" in msg
    assert "annotations_trainval2017.zip" in msg and "delete it and run again" in msg


ATTRS14 = {"config_hash": "c", "items_hash": "i", "model_id": "m", "depth_backend": "constant-13.8m"}


def _full_results(v=0.5):
    r = {k: v for k in cube.READOUTS}
    r.update({k: "x" for k in cube.TEXT_READOUTS})
    return {(a, lvl, t): r for a, lvl in cube.CONDITIONS for t in cube.TASKS}


def _two_image_store(path):
    cube.open_readout_store(path, [11, 12], ["car", "bus"], ATTRS14)
    for i in range(2):
        cube.write_image(path, i, _full_results(0.25 * (i + 1)))
    return xr.open_zarr(path, consolidated=False).load()


@pytest.mark.parametrize("damage", ["zero-byte", "truncated"])
@pytest.mark.parametrize("variable,chunk", [("value", "0.0.0.1.0"), ("verbal_text", "0.0.0.1"), ("done", "1")])
def test_damaged_chunk_is_named_then_re_read_on_resume(tmp_path, damage, variable, chunk):
    """A chunk file emptied or cut (a power loss after the rename): the merge names the store, the image
    and the fix; the next read-out marks exactly that image not done (warning with the file) and keeps
    the other image."""
    store = tmp_path / "m.zarr"
    before = _two_image_store(store)
    f = store / variable / chunk
    data = f.read_bytes()
    f.write_bytes(b"" if damage == "zero-byte" else data[: len(data) // 2])
    assert cube.damaged_chunks(store) == {1: [f]}

    with pytest.raises(ValueError) as e:
        cube.merge_models({"m": store}, tmp_path / "cube.zarr")
    msg = str(e.value)
    assert str(store) in msg and "position 1" in msg and f.name in msg and "run the readout stage" in msg
    assert not (tmp_path / "cube.zarr").exists()  # a refusal writes nothing

    with pytest.warns(UserWarning, match=r"image 12 \(position 1\)"):
        ds = cube.open_readout_store(store, [11, 12], ["car", "bus"], ATTRS14)
    assert list(ds["done"].values) == [True, False]
    assert cube.damaged_chunks(store) == {}
    xr.testing.assert_identical(ds["value"].isel(image=0).load(), before["value"].isel(image=0))
    cube.write_image(store, 1, _full_results(0.5))  # the resumed read-out re-reads it
    after = xr.open_zarr(store, consolidated=False).load()
    xr.testing.assert_identical(after["value"], before["value"])


def test_store_folder_without_metadata_is_refused_with_the_fix(tmp_path):
    store = tmp_path / "m.zarr"
    _two_image_store(store)
    (store / ".zgroup").unlink()
    with pytest.raises(ValueError, match=r"\.zgroup is missing.*rm -r") as e:
        cube.open_readout_store(store, [11, 12], ["car", "bus"], ATTRS14)
    assert str(store) in str(e.value)
    with pytest.raises(ValueError, match="rm -r"):
        cube.merge_models({"m": store}, tmp_path / "cube.zarr")


def test_unreadable_store_metadata_is_refused_with_the_fix(tmp_path):
    store = tmp_path / "m.zarr"
    _two_image_store(store)
    (store / "value" / ".zarray").write_text('{"shape": [5,')
    with pytest.raises(ValueError, match="metadata is damaged.*rm -r"):
        cube.open_readout_store(store, [11, 12], ["car", "bus"], ATTRS14)


def test_leftover_tmp_store_and_empty_folder_are_replaced(tmp_path):
    store = tmp_path / "m.zarr"
    (tmp_path / "m.zarr.tmp" / "value").mkdir(parents=True)  # a creation killed half-way
    (tmp_path / "m.zarr.tmp" / "value" / "junk").write_text("x")
    store.mkdir()  # and an empty store folder
    ds = cube.open_readout_store(store, [11, 12], ["car", "bus"], ATTRS14)
    assert list(ds["done"].values) == [False, False]
    assert not (tmp_path / "m.zarr.tmp").exists()


@pytest.mark.parametrize("setting,stored,asked", [
    ("n_verbal_items", 0, 2), ("dtype", "float32", "bfloat16"), ("model_revision", "abc", "def"),
    ("depth_backend", "constant-13.8m", "depth-anything-v2"), ("items_hash", "i", "j")])
def test_store_identity_mismatch_names_the_setting(tmp_path, setting, stored, asked):
    store = tmp_path / "m.zarr"
    kw = dict(config_hash="c", items_hash="i", model_id="m", depth_backend="constant-13.8m",
              model_revision="abc", dtype="float32", n_verbal_items=0)
    cube.open_readout_store(store, [11, 12], ["car", "bus"], cube.store_identity(**{**kw, setting: stored}))
    with pytest.raises(ValueError) as e:
        cube.open_readout_store(store, [11, 12], ["car", "bus"], cube.store_identity(**{**kw, setting: asked}))
    msg = str(e.value)
    assert f"{setting}: store {stored!r}, this run {asked!r}" in msg and f"rm -r {store}" in msg
    assert msg.count("\n  ") == 1  # only the differing setting is named
    # the same settings resume
    cube.open_readout_store(store, [11, 12], ["car", "bus"], cube.store_identity(**{**kw, setting: stored}))


def test_store_identity_normalises_dtype_and_verbal_count():
    import torch

    a = cube.store_identity(config_hash="c", items_hash="i", model_id="m", depth_backend="d",
                            dtype=torch.bfloat16, n_verbal_items=300, n_items=8)
    assert a["dtype"] == "bfloat16" and a["n_verbal_items"] == 8
    # stage-specific identity attributes are passed by the stage (monitor; read-out engine and its schedule)
    assert set(cube.IDENTITY_ATTRS) - {"monitor_threshold_m", "readout_engine", "images_per_batch"} <= set(a)
