"""Bad input gets a clear error or a recorded missing value, and loses nothing computed (issue 8)."""

import errno
import json
import os

import numpy as np
import pytest
import xarray as xr
from PIL import Image

from murk import scene
from murk.core import _diskfull as diskfull
from murk.protocol import _item_files
from murk.protocol import _items as items
from murk.results import _cube as cube
from murk import core
from murk.scene import _render as render

import stages  # tests/stages.py: the stage notebooks through papermill

SAMPLE = stages.SAMPLE
needs_sample = stages.needs_sample


def test_grey_cmyk_alpha_images_become_rgb(tmp_path):
    for mode, fill in (("L", 90), ("CMYK", (10, 20, 30, 40)), ("RGBA", (10, 20, 30, 128)), ("P", 3)):
        p = tmp_path / f"x-{mode}.{'jpg' if mode in ('L', 'CMYK') else 'png'}"
        Image.new(mode, (21, 13), fill).save(p)
        im = scene.load_image(p)
        assert im.shape == (13, 21, 3) and im.dtype == np.uint8, mode


def _exif(orientation):
    exif = Image.Exif()
    exif[scene.EXIF_ORIENTATION_TAG] = orientation
    return exif


def test_exif_orientation_is_ignored_where_the_stored_size_agrees_with_the_annotation(tmp_path):
    """COCO's boxes refer to the stored pixels: where the stored size is the annotation's, an EXIF orientation
    tag (here 6, "rotate 90 CW on display", and 3, "rotate 180") changes nothing (issue 8's rule, kept)."""
    a = np.random.default_rng(0).integers(0, 255, (10, 40, 3), dtype=np.uint8)
    for orientation in (6, 3):
        p = tmp_path / f"rot{orientation}.png"
        Image.fromarray(a).save(p, exif=_exif(orientation))
        for expected in (None, (40, 10)):
            got = scene.load_image(p, expected)
            assert got.shape == (10, 40, 3) and (got == a).all(), (orientation, expected)
        assert scene.inspect_image(p, (40, 10)) == ""


def test_an_image_stored_rotated_is_used_transposed_where_that_makes_it_agree(tmp_path):
    """The file holds the annotated image rotated by 90 degrees with EXIF orientation 6 (as phones write
    them): its stored size is the annotation's transposed, so the orientation is applied (the box then lies on
    the target) and a warning (and inspect_image, for the select stage's record) says so with both sizes."""
    a = np.random.default_rng(1).integers(0, 255, (40, 80, 3), dtype=np.uint8)  # annotation: 80 x 40 px
    p = tmp_path / "phone.png"
    Image.fromarray(a).transpose(Image.Transpose.ROTATE_90).save(p, exif=_exif(6))  # stored 40 x 80, shown upright
    with pytest.warns(scene.TransposedImageWarning) as w:
        got = scene.load_image(p, (80, 40))
    assert got.shape == (40, 80, 3) and (got == a).all()  # exactly the annotated pixels
    note = scene.inspect_image(p, (80, 40))
    for part in (str(p), "stored 40 x 80 px", "EXIF orientation 6", "80 x 40 px", "used transposed"):
        assert part in note and part in str(w[0].message), part
    with pytest.warns(scene.TransposedImageWarning):
        img, size = render.load_presented(p, 448, expected_size=(80, 40))
    assert size == (80, 40) and (img == a).all()


@pytest.mark.parametrize("orientation,stored,annotated", [
    (6, (30, 50), (50, 31)),   # rotated, but the transpose does not agree either
    (1, (30, 50), (50, 30)),   # transposed without an EXIF tag that says which way: no guess
    (3, (40, 40), (20, 20)),   # another size
])
def test_an_image_whose_size_disagrees_with_its_annotation_is_refused_with_both_sizes(tmp_path, orientation,
                                                                                      stored, annotated):
    p = tmp_path / "x.png"
    Image.new("RGB", stored, (9, 9, 9)).save(p, exif=_exif(orientation))
    for f in (lambda: scene.load_image(p, annotated), lambda: scene.inspect_image(p, annotated),
              lambda: render.load_presented(p, 448, expected_size=annotated)):
        with pytest.raises(ValueError) as e:
            f()
        msg = str(e.value)
        assert str(p) in msg and f"stored {stored[0]} x {stored[1]} px" in msg
        assert f"EXIF orientation {orientation}" in msg and f"{annotated[0]} x {annotated[1]} px" in msg
        assert "recorded as missing" in msg and "original COCO file" in msg


def test_an_image_over_pillows_pixel_limit_is_a_value_error_naming_file_and_size(tmp_path, monkeypatch):
    """PIL's DecompressionBombError is no OSError/ValueError: uncaught it stopped every stage (issue 21). It is
    now a ValueError (each stage records it per image) naming the file and its pixel size; the header check
    (the select stage's inspect_image) says the same without decoding."""
    p = tmp_path / "big.png"
    Image.new("RGB", (300, 200), (1, 2, 3)).save(p)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 20_000)  # 60,000 pixels > 2 x 20,000: Pillow refuses
    with pytest.raises(Image.DecompressionBombError):
        Image.open(p)
    for f in (lambda: scene.load_image(p), lambda: scene.load_image(p, (300, 200)),
              lambda: scene.inspect_image(p, (300, 200)), lambda: render.load_presented(p, 448)):
        with pytest.raises(ValueError) as e:
            f()
        msg = str(e.value)
        assert str(p) in msg and "300 x 200 px (60,000 pixels)" in msg and "decompression-bomb limit of 40,000" in msg
        assert "recorded as missing" in msg
    monkeypatch.undo()
    assert scene.load_image(p, (300, 200)).shape == (200, 300, 3)


def test_item_inputs_record_an_over_limit_image_and_fall_back_for_its_partner(tmp_path, monkeypatch):
    """The read-out and monitor stages' loader: the item's own over-limit image raises (recorded by the stage),
    an over-limit partner gives the grey shuffled control, as any other bad partner does."""
    import pandas as pd

    Image.new("RGB", (300, 200), (1, 2, 3)).save(tmp_path / "big.png")
    Image.new("RGB", (64, 48), (100, 150, 200)).save(tmp_path / "ok.png")
    depth_dir = tmp_path / "depth"
    depth_dir.mkdir()
    for iid in (1, 2):
        np.save(depth_dir / f"{iid}.npy", np.full((48, 64) if iid == 2 else (200, 300), 10.0, np.float32))
    table = pd.DataFrame([{"image_id": 1, "file_name": "big.png", "width": 300, "height": 200, "bbox": [1, 1, 50, 50]},
                          {"image_id": 2, "file_name": "ok.png", "width": 64, "height": 48, "bbox": [1, 1, 20, 20]}])
    cfg = {"render": {"max_side_px": 448, "blank_grey": 128}}
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 20_000)
    with pytest.raises(ValueError, match="decompression-bomb"):
        render.item_inputs(table, 0, 1, tmp_path, depth_dir, cfg)
    x = render.item_inputs(table, 1, 0, tmp_path, depth_dir, cfg)
    assert (x["partner_image"] == 128).all() and x["image"].shape == (48, 64, 3)


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
    cube.write_image(store, 0, {(a, lvl, t): r for a, lvl in scene.CONDITIONS for t in cube.TASKS})
    out = tmp_path / "cube.zarr"
    cube.merge_models({"m": store}, out)
    before = xr.open_zarr(out).load()

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(xr.Dataset, "to_zarr", full)
    with pytest.raises(OSError, match="No space left") as e:  # still an OSError (errno 28), now with the story
        cube.merge_models({"m": store}, out)
    monkeypatch.undo()
    xr.testing.assert_identical(xr.open_zarr(out).load(), before)
    assert isinstance(e.value, diskfull.DiskFullError) and e.value.errno == errno.ENOSPC
    _check_full_disk_message(str(e.value), tmp_path, out)
    assert f"the previous cube {out}" in str(e.value) and not (tmp_path / "cube.zarr.tmp").exists()


def _check_full_disk_message(msg, root, written):
    """One line naming the output root and the file, what is safe, and the command that resumes."""
    assert "\n" not in msg and "[Errno 28]" not in msg and "Traceback" not in msg
    assert f"output root {root} " in msg and f"while writing {written}" in msg and "No space left on device" in msg
    assert "Safe: " in msg and "free space on that disk" in msg and "`make demo`" in msg
    assert "run the same command again" in msg and "redoes nothing finished" in msg


def test_out_of_memory_halves_the_batch_and_goes_on(tiny_vlms, coco_image, monkeypatch, caplog):
    """A (simulated) CUDA out-of-memory error on a batch of prompt tails: halve it, same read-outs."""
    import torch

    from benchmarks import baseline
    from murk.protocol import _prompts as prompts

    vlm = tiny_vlms["qwen3vl"]
    row = {"category": "car", "t2_options": ["dog", "car", "bus", "cat"], "t2_answer_index": 1,
           "t3_distractor": "bus"}
    questions = prompts.questions_for_item(row)
    ref = baseline.read_item(vlm, coco_image, questions)
    real = baseline._run_tails
    calls = []

    def small_gpu(vlm_, cache, next_pos, n_prefix, tails, gen_rows, max_new):
        calls.append(len(tails))
        if len(tails) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(vlm_, cache, next_pos, n_prefix, tails, gen_rows, max_new)

    monkeypatch.setattr(baseline, "_run_tails", small_gpu)
    with caplog.at_level("WARNING", logger="murk"):
        got = baseline.read_item(vlm, coco_image, questions)
    assert max(calls) > 2 and "halving" in caplog.text
    for task in ref:
        for k in ("c_int", "answer", "abstain", "abstain2", "option_mass"):
            assert abs(got[task][k] - ref[task][k]) <= 1e-4 or (np.isnan(got[task][k]) and np.isnan(ref[task][k]))
        assert got[task]["verbal_text"] == ref[task]["verbal_text"]


# --- errors a user can cause name the file and the fix (issue 14) ---

def test_annotation_file_that_is_not_json_names_the_file_and_the_fix(tmp_path):
    from murk.protocol import _items as items

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
    return {(a, lvl, t): r for a, lvl in scene.CONDITIONS for t in cube.TASKS}


def _two_image_store(path, images_per_shard=1):
    cube.open_readout_store(path, [11, 12], ["car", "bus"], ATTRS14, images_per_shard=images_per_shard)
    for i in range(2):
        cube.write_image(path, i, _full_results(0.25 * (i + 1)))
    return xr.open_zarr(path, consolidated=False).load()


@pytest.mark.parametrize("damage", ["zero-byte", "truncated"])
@pytest.mark.parametrize("variable,chunk", [("value", "c/0/0/0/1/0"), ("verbal_text", "c/0/0/0/1"),
                                            ("done", "c/1")])
def test_damaged_chunk_is_named_then_re_read_on_resume(tmp_path, damage, variable, chunk):
    """A shard file emptied or cut (a power loss after the rename), here of one image each: the merge names the
    store, the image and the fix; the next read-out marks exactly that image not done (warning with the file)
    and keeps the other image."""
    store = tmp_path / "m.zarr"
    before = _two_image_store(store)
    f = store / variable / chunk
    data = f.read_bytes()
    f.write_bytes(b"" if damage == "zero-byte" else data[: len(data) // 2])
    assert core.damaged_chunks(store) == {1: [f]}

    with pytest.raises(ValueError) as e:
        cube.merge_models({"m": store}, tmp_path / "cube.zarr")
    msg = str(e.value)
    assert str(store) in msg and "position 1" in msg and f.name in msg and "run the readout stage" in msg
    assert not (tmp_path / "cube.zarr").exists()  # a refusal writes nothing

    with pytest.warns(UserWarning, match=r"image 12 \(position 1\)"):
        ds = cube.open_readout_store(store, [11, 12], ["car", "bus"], ATTRS14)
    assert list(ds["done"].values) == [True, False]
    assert core.damaged_chunks(store) == {}
    xr.testing.assert_identical(ds["value"].isel(image=0).load(), before["value"].isel(image=0))
    cube.write_image(store, 1, _full_results(0.5))  # the resumed read-out re-reads it
    after = xr.open_zarr(store, consolidated=False).load()
    xr.testing.assert_identical(after["value"], before["value"])


@pytest.mark.parametrize("damage", ["zero-byte", "truncated"])
def test_damaged_shard_of_several_images_is_re_read_whole(tmp_path, damage):
    """A store as the read-out writes it (both images in one shard file per variable): a damaged shard file is
    named for each image it holds, and on resume each of them is read out again; an empty shard file, which zarr
    reads as missing values without an error, is found by its size."""
    store = tmp_path / "m.zarr"
    before = _two_image_store(store, images_per_shard=cube.IMAGES_PER_SHARD)
    assert sorted(f.relative_to(store / "value").as_posix() for f in (store / "value").rglob("*")
                  if f.is_file()) == ["c/0/0/0/0/0", "zarr.json"]
    f = store / "value" / "c" / "0" / "0" / "0" / "0" / "0"
    data = f.read_bytes()
    f.write_bytes(b"" if damage == "zero-byte" else data[: len(data) // 2])
    assert core.damaged_chunks(store) == {0: [f], 1: [f]}
    with pytest.raises(ValueError, match=r"position 0: .*position 1: .*run the readout stage"):
        cube.merge_models({"m": store}, tmp_path / "cube.zarr")
    with pytest.warns(UserWarning, match=r"image 11 \(position 0\).*\n.*image 12 \(position 1\)"):
        ds = cube.open_readout_store(store, [11, 12], ["car", "bus"], ATTRS14)
    assert list(ds["done"].values) == [False, False] and core.damaged_chunks(store) == {}
    for i in range(2):
        cube.write_image(store, i, _full_results(0.25 * (i + 1)))
    xr.testing.assert_identical(xr.open_zarr(store, consolidated=False).load()["value"], before["value"])


def test_store_folder_without_metadata_is_refused_with_the_fix(tmp_path):
    store = tmp_path / "m.zarr"
    _two_image_store(store)
    (store / "zarr.json").unlink()
    with pytest.raises(ValueError, match=r"zarr\.json is missing.*rm -r") as e:
        cube.open_readout_store(store, [11, 12], ["car", "bus"], ATTRS14)
    assert str(store) in str(e.value)
    with pytest.raises(ValueError, match="rm -r"):
        cube.merge_models({"m": store}, tmp_path / "cube.zarr")


def test_unreadable_store_metadata_is_refused_with_the_fix(tmp_path):
    store = tmp_path / "m.zarr"
    _two_image_store(store)
    (store / "value" / "zarr.json").write_text('{"shape": [5,')
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
    # stage-specific identity attributes are passed by the stage (monitor; read-out engine and its schedule; the
    # server a served read-out asks)
    assert set(cube.IDENTITY_ATTRS) - {"monitor_threshold_m", "readout_engine", "images_per_batch",
                                       "served_root"} <= set(a)


# --- annotations the select stage cannot use (issue 21) ---

def _coco_copy(tmp_path, edit):
    """The sample's annotation file, edited by ``edit(coco)``, written under tmp_path."""
    coco = json.loads((SAMPLE / "annotations" / "instances_val2017.json").read_text())
    edit(coco)
    ann = tmp_path / "annotations" / "instances_val2017.json"
    ann.parent.mkdir(parents=True, exist_ok=True)
    ann.write_text(json.dumps(coco))
    return ann


def _first_candidate():
    return items._candidate_ids(SAMPLE / "annotations" / "instances_val2017.json")[0]


@needs_sample
def test_an_unknown_category_id_is_refused_in_one_line_naming_file_annotation_and_fix(tmp_path):
    """Was a bare ``KeyError: 9999`` (when the annotation became a target); now refused whatever the draw."""
    def edit(coco):
        iid = int(_first_candidate())
        coco["annotations"].append({"id": 900000001, "image_id": iid, "category_id": 9999,
                                    "bbox": [10.0, 10.0, 100.0, 100.0], "iscrowd": 0, "area": 1e4})

    ann = _coco_copy(tmp_path, edit)
    for f in (lambda: items.select_items(ann, n_items=3, seed=1), lambda: items._candidate_ids(ann)):
        with pytest.raises(ValueError) as e:
            f()
        msg = str(e.value)
        assert "\n" not in msg and str(ann) in msg and "annotation 900000001" in msg and "category_id 9999" in msg
        assert "add each such category to 'categories'" in msg and "remove" in msg and "run select again" in msg


@needs_sample
@pytest.mark.parametrize("bbox", [None, "12 13 40 50", [1.0, 2.0, 3.0], [1.0, "2", 30.0, 40.0], [1.0, 2.0, float("nan"), 4.0],
                                  [True, 2.0, 3.0, 4.0]])
def test_a_box_that_is_not_four_numbers_is_refused_naming_the_annotation(tmp_path, bbox):
    def edit(coco):
        coco["annotations"][5]["bbox"] = bbox

    ann = _coco_copy(tmp_path, edit)
    aid = json.loads(ann.read_text())["annotations"][5]["id"]
    with pytest.raises(ValueError) as e:
        items.select_items(ann, n_items=3, seed=1)
    msg = str(e.value)
    assert "\n" not in msg and str(ann) in msg and f"annotation {aid} has bbox" in msg
    assert "[x, y, width, height]" in msg and "run select again" in msg


@needs_sample
def test_boxes_of_zero_size_or_outside_the_image_are_never_a_target_and_named(tmp_path):
    """Kept as annotations (their category stays present in the image), never a target, one warning naming
    them; the rest of the selection is unchanged where the edited image is not drawn."""
    sample = SAMPLE / "annotations" / "instances_val2017.json"
    with _no_bad_box_warning():  # the official boxes: none is refused or dropped
        base = items.select_items(sample, n_items=37, seed=1)
    target = int(base["annotation_id"].iloc[0])

    def edit(coco):
        im = {i["id"]: i for i in coco["images"]}
        for a in coco["annotations"]:
            if a["id"] == target:  # the first item's target, moved half out of its image
                x, y, w, h = a["bbox"]
                a["bbox"] = [im[a["image_id"]]["width"] - w / 2, y, w, h]
        coco["annotations"][0]["bbox"][2] = 0.0       # a box of zero width
        coco["annotations"][1]["bbox"][3] = -5.0      # and one of negative height

    ann = _coco_copy(tmp_path, edit)
    coco = json.loads(ann.read_text())
    zero, negative = coco["annotations"][0]["id"], coco["annotations"][1]["id"]
    with pytest.warns(items.BadBoxWarning) as w:
        got = items.select_items(ann, n_items=1000, seed=1)
    msg = str(w[0].message)
    assert str(ann) in msg and "never a target" in msg and "correct their bbox" in msg
    assert f"{zero}, {negative}" in msg and "2 with a box of zero or negative width or height" in msg
    assert f"1 with a box reaching outside its image (annotation ids {target})" in msg
    assert target not in set(got["annotation_id"].tolist())


class _no_bad_box_warning:
    def __enter__(self):
        import warnings

        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("error", items.BadBoxWarning)

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)


def test_image_checks_records_transposed_and_unreadable_images_from_their_headers(tmp_path, monkeypatch):
    """The select stage's record (items_report.json): which images every stage uses transposed and which it
    records as missing, each with its reason; an image used as stored is not listed."""
    import pandas as pd

    a = np.zeros((40, 80, 3), np.uint8)
    Image.fromarray(a).save(tmp_path / "ok.png")
    Image.fromarray(a).transpose(Image.Transpose.ROTATE_90).save(tmp_path / "phone.png", exif=_exif(6))
    Image.fromarray(a).save(tmp_path / "small.png")
    Image.new("RGB", (300, 200)).save(tmp_path / "big.png")
    rows = [(1, "ok.png", 80, 40), (2, "phone.png", 80, 40), (3, "small.png", 160, 80), (4, "big.png", 300, 200),
            (5, "gone.png", 80, 40)]
    table = pd.DataFrame(rows, columns=["image_id", "file_name", "width", "height"])
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 20_000)
    got = _item_files.image_checks(table, tmp_path)
    assert list(got["transposed"]) == ["2"] and "used transposed" in got["transposed"]["2"]
    assert list(got["unreadable"]) == ["3", "4", "5"]
    assert "stored 80 x 40 px" in got["unreadable"]["3"] and "160 x 80 px" in got["unreadable"]["3"]
    assert "300 x 200 px (60,000 pixels)" in got["unreadable"]["4"] and "not found" in got["unreadable"]["5"]



# --- a full disk while any stage writes (issue 21) ---

def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _root(tmp_path):
    """An output root (it holds items.json, as after stage select)."""
    root = tmp_path / "out"
    root.mkdir()
    (root / "items.json").write_text("[]")
    return root


def test_disk_full_while_writing_a_store_image_keeps_the_images_written_before(tmp_path, monkeypatch):
    root = _root(tmp_path)
    store = root / "readout" / "m.zarr"
    _two_image_store(store)
    before = xr.open_zarr(store, consolidated=False).load()
    monkeypatch.setattr(xr.Dataset, "to_zarr", _enospc)
    for write in (lambda: cube.write_image(store, 1, _full_results(0.9)),
                  lambda: cube.write_missing(store, 1, "x")):
        with pytest.raises(diskfull.DiskFullError) as e:
            write()
        _check_full_disk_message(str(e.value), root, store)
        assert "keeps every image written before this one" in str(e.value) and "position 1" in str(e.value)
    with pytest.raises(diskfull.DiskFullError) as e:  # a new store: nothing half-made is left
        cube.open_readout_store(root / "readout" / "n.zarr", [11], ["car"], ATTRS14)
    assert "no store was created" in str(e.value)
    monkeypatch.undo()
    assert not (root / "readout" / "n.zarr").exists() and not (root / "readout" / "n.zarr.tmp").exists()
    xr.testing.assert_identical(xr.open_zarr(store, consolidated=False).load(), before)


def test_disk_full_in_the_depth_cache_figures_numbers_tables_and_selection(tmp_path, monkeypatch):
    """Each writer: one message naming the root, the file and what is kept; its temporary file is removed
    and the previous file is kept as it was."""
    import matplotlib.pyplot as plt

    from murk import report
    from murk.report import _figure_files
    from murk.report import _figures as figures
    from murk.scene import _depth as depth

    root = _root(tmp_path)
    folder = root / "depth" / "constant"
    depth.save_depth(folder, 7, np.ones((4, 4), np.float32))
    old = (folder / "7.npy").read_bytes()

    def short_write(*args, **kwargs):  # numpy's own report of a full disk carries no errno
        raise OSError("64 requested and 17 written")

    monkeypatch.setattr(np, "save", short_write)
    with pytest.raises(diskfull.DiskFullError) as e:
        depth.save_depth(folder, 7, np.zeros((4, 4), np.float32))
    _check_full_disk_message(str(e.value), root, folder / "7.npy")
    assert "depth maps already written are kept" in str(e.value)
    monkeypatch.undo()
    assert (folder / "7.npy").read_bytes() == old and not list(folder.glob(".*.tmp"))

    fig = plt.figure()
    _figure_files.save(fig, root / "figures", "f")
    png = (root / "figures" / "f.png").read_bytes()
    fig = plt.figure()
    monkeypatch.setattr(fig, "savefig", _enospc)
    with pytest.raises(diskfull.DiskFullError) as e:
        _figure_files.save(fig, root / "figures", "f")
    _check_full_disk_message(str(e.value), root, root / "figures" / "f.png")
    assert (root / "figures" / "f.png").read_bytes() == png and not list((root / "figures").glob(".*"))

    report.write_numbers({"a": "1"}, root / "paper_numbers.json")
    ds = xr.Dataset({"v": ("x", np.arange(3.0))})
    report.write_netcdf_atomic(ds, root / "analysis" / "t.nc")
    monkeypatch.setattr(type(root), "write_text", _enospc)
    monkeypatch.setattr(xr.Dataset, "to_netcdf", _enospc)
    # the numbers file's provenance is written first (a numbers file is never newer than its provenance): the
    # full disk is met there
    for f, target in ((lambda: report.write_numbers({"a": "2"}, root / "paper_numbers.json"),
                       report.provenance_file(root / "paper_numbers.json")),
                      (lambda: report.write_text_atomic(root / "analysis" / "t.md", "x"), root / "analysis" / "t.md"),
                      (lambda: report.write_netcdf_atomic(ds, root / "analysis" / "t.nc"), root / "analysis" / "t.nc"),
                      (lambda: _item_files.save_selection(_tiny_items(), {}, {}, root), root / "items_meta.json")):
        with pytest.raises(diskfull.DiskFullError) as e:
            f()
        _check_full_disk_message(str(e.value), root, target)
    monkeypatch.undo()
    assert json.loads((root / "paper_numbers.json").read_text()) == {"a": "1"}
    assert json.loads(report.provenance_file(root / "paper_numbers.json").read_text()) == {}  # as it was
    assert not list(root.rglob("*.tmp"))


def _tiny_items():
    return items._table([{"image_id": 1, "file_name": "a.jpg", "width": 64, "height": 48, "annotation_id": 2,
                          "category_id": 3, "category": "car", "supercategory": "vehicle", "bbox": [1.0, 1.0, 9.0, 9.0],
                          "t2_options": ["car", "bus", "cat", "dog"], "t2_answer_index": 0, "t3_distractor": "bus"}])


def test_the_paper_command_prints_one_line_on_a_full_disk(tmp_path, monkeypatch, capsys):
    """``python -m murk.report.paper`` (make paper): pandoc's error on a full disk becomes murk's one line, exit 1."""
    from murk.report import paper

    root = _root(tmp_path)

    def pandoc_full(*args, **kwargs):
        raise RuntimeError("Pandoc died with exitcode \"1\" during conversion: index.html: withBinaryFile: "
                           "resource exhausted (No space left on device)")

    monkeypatch.setattr(paper, "render_paper", pandoc_full)
    monkeypatch.setattr(paper.shutil, "which", lambda name: None)
    assert paper.main(["--output-dir", str(root), "--fallback"]) == 1
    err = capsys.readouterr().err
    _check_full_disk_message(err.strip(), root, root / "paper")
    assert "numbers, tables, figures and the cube are kept" in err


def test_other_errors_pass_the_guard_unchanged(tmp_path):
    with pytest.raises(PermissionError):
        with diskfull.guard(tmp_path / "x"):
            raise PermissionError(errno.EACCES, "Permission denied")
    with pytest.raises(ValueError, match="plain"):
        with diskfull.guard(tmp_path / "x"):
            raise ValueError("plain")
