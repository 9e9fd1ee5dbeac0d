"""Stores that prove their content (issue 49 item 1): every byte of a read-out store's shard files flipped in turn,
and every shard file deleted, is found and re-read, so the store is bit-identical to the undamaged one after the
same images are written again; a store of an earlier murk (no checksums, all-fill chunks not stored) is still read
and resumed, and its marker's per-file digests find what its codecs cannot; the marker step refuses a damaged store.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from murk import scene
from murk import pipeline
from murk.pipeline import markers
from murk.results import _cube as cube
from murk.core import _store_check as check

ATTRS = {"config_hash": "c" * 64, "items_hash": "i" * 64, "model_id": "m", "depth_backend": "constant-13.8m"}
IDS, CATS = [11, 12, 13], ["car", "bus", "dog"]
DIGESTS = ["a" * 64, "b" * 64, "c" * 64]
#: how many byte positions of each shard file are flipped (evenly spread, first and last bytes included)
N_POSITIONS = 24


def _results(i: int) -> dict:
    """Image ``i``'s read-outs: values and texts that differ by image and condition (incompressible enough that
    each chunk has bytes of its own)."""
    rng = np.random.default_rng(i)
    out = {}
    for arm, lvl in scene.CONDITIONS:
        for task in cube.TASKS:
            r = {k: float(rng.random()) for k in cube.READOUTS}
            r.update({k: f"{k} {arm}{lvl}{task} {rng.integers(1000)}" for k in cube.TEXT_READOUTS})
            out[(arm, lvl, task)] = r
    return out


def _write(store: Path, i: int) -> None:
    """What the read-out writes for image ``i``: read-outs for 11 and 13, a missing record for 12."""
    if i == 1:
        cube.write_missing(store, i, "image missing", DIGESTS[i])
    else:
        cube.write_image(store, i, _results(i), DIGESTS[i])


def _new_store(path: Path) -> Path:
    cube.open_readout_store(path, IDS, CATS, ATTRS, DIGESTS)
    for i in range(3):
        _write(path, i)
    return path


def _old_store(path: Path) -> Path:
    """A store as murk wrote it before issue 49: sharded zarr 3 without checksums, all-fill chunks not stored
    (write_missing wrote no values), no layout attribute."""
    ds = cube.empty_model_dataset(IDS, CATS)
    ds.attrs.update({**ATTRS, "schema_version": cube.SCHEMA_VERSION})
    enc = {n: {"chunks": tuple(1 if d == "image" else ds[n].sizes[d] for d in ds[n].dims),
               "shards": tuple(3 if d == "image" else ds[n].sizes[d] for d in ds[n].dims)}
           for n in check.PER_IMAGE_VARIABLES}
    with warnings.catch_warnings():  # the fixed-width str coordinates, as open_readout_store writes them
        warnings.simplefilter("ignore")
        ds.to_zarr(path, mode="w", encoding=enc, consolidated=False, zarr_format=3)
    for i in (0, 2):  # the earlier write_image: values and texts, input digest, then done
        one = cube.empty_model_dataset([IDS[i]], [CATS[i]])
        for (arm, lvl, task), r in _results(i).items():
            for a in (["fog", "underwater", "imagenet_c"] if arm == "clean" else [arm]):
                sel = dict(arm=a, level=lvl, task=task, image=IDS[i])
                one["value"].loc[sel] = [r[k] for k in cube.READOUTS]
                for n in cube.TEXT_READOUTS:
                    one[n].loc[sel] = r[n]
        rows = one[["value", *cube.TEXT_READOUTS]].drop_vars(list(one.coords))
        rows["input_sha256"] = ("image", np.array([DIGESTS[i]], dtype=object))
        rows.to_zarr(path, region={"image": slice(i, i + 1)}, consolidated=False)
    xr.Dataset({"missing_reason": ("image", np.array(["image missing"], dtype=object)),
                "input_sha256": ("image", np.array([DIGESTS[1]], dtype=object))}).to_zarr(
        path, region={"image": slice(1, 2)}, consolidated=False)
    for i in range(3):
        xr.Dataset({"done": ("image", np.ones(1, bool))}).to_zarr(path, region={"image": slice(i, i + 1)},
                                                                 consolidated=False)
    return path


def _load(store: Path) -> xr.Dataset:
    return xr.open_zarr(store, consolidated=False).load()


def _same(a: xr.Dataset, b: xr.Dataset) -> bool:
    """Bit for bit: every variable's values (NaN where NaN, the same float bits) and coordinates."""
    try:
        xr.testing.assert_identical(a.drop_attrs(), b.drop_attrs())
    except AssertionError:
        return False
    return a["value"].values.tobytes() == b["value"].values.tobytes()


def _positions(size: int) -> list[int]:
    return sorted({int(p) for p in np.linspace(0, size - 1, min(size, N_POSITIONS))})


def _resume(store: Path) -> list[int]:
    """The read-out resumed: open (repairs), write again the images not done; returns them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = cube.open_readout_store(store, IDS, CATS, ATTRS, DIGESTS)
    todo = [i for i in range(3) if not bool(ds["done"].values[i])]
    for i in todo:
        _write(store, i)
    return todo


def _shard(store: Path, name: str) -> Path:
    files = [f for f in (store / name).rglob("*") if f.is_file() and f.name != "zarr.json"]
    assert len(files) == 1, files  # the three images in one shard file
    return files[0]


def test_a_new_store_checksums_every_chunk_and_stores_every_chunk_of_a_done_image(tmp_path):
    store = _new_store(tmp_path / "m.zarr")
    for name in check.PER_IMAGE_VARIABLES:
        codecs = json.loads((store / name / "zarr.json").read_text())["codecs"][0]["configuration"]
        assert [c["name"] for c in codecs["codecs"]][-2:] == ["zstd", "crc32c"], name
        assert [c["name"] for c in codecs["index_codecs"]] == ["bytes", "crc32c"], name
        lay = check._Layout(store / name)
        (f, images), = lay.files()
        assert list(lay.stored(f, images)) == [True, True, True], name  # 12's NaN values and "" texts too
    assert xr.open_zarr(store, consolidated=False).attrs[check.STORE_LAYOUT_ATTR] == check.STORE_LAYOUT
    assert check.damaged_chunks(store) == {} and check.unfinished_images(store) == {}


def _flip(f: Path, pos: int) -> bytes:
    """Flip byte ``pos`` of file ``f`` (XOR 0x5A); returns the bytes before."""
    data = f.read_bytes()
    f.write_bytes(data[:pos] + bytes([data[pos] ^ 0x5A]) + data[pos + 1:])
    return data


@pytest.mark.parametrize("name", ["value", "verbal_text", "done"])
def test_every_flipped_byte_of_a_new_store_is_found_and_re_read_bit_for_bit(tmp_path, name):
    """Single-byte flips at N_POSITIONS positions across a shard file and at the ends of its index: each is
    found, a flip in a chunk or its checksum lists that image alone, a flip in the shard's index every image of
    the shard, none is harmless (every byte of a shard file is covered by a CRC-32C). At four of them the
    read-out is resumed: exactly the listed images are marked not done, and once they are written again the
    store equals the undamaged one bit for bit."""
    ref = _new_store(tmp_path / "ref.zarr")
    want = _load(ref)
    f = _shard(ref, name)
    size = f.stat().st_size
    index_at = size - (16 * len(IDS) + 4)  # zarr's shard index (offset, length per chunk) and its CRC-32C: last
    positions = sorted(set(_positions(size)) | {index_at, index_at + 17, size - 4, size - 1})
    for pos in positions:
        data = _flip(f, pos)
        found = check.damaged_chunks(ref)
        f.write_bytes(data)
        assert found and all(fs == [f] for fs in found.values()), (name, pos)  # no flip goes unnoticed
        assert len(found) == (len(IDS) if pos >= index_at else 1), (name, pos, found)
    for pos in (0, size // 2, index_at, size - 1):
        store = Path(shutil.copytree(ref, tmp_path / f"flip{pos}.zarr"))
        _flip(_shard(store, name), pos)
        found = check.damaged_chunks(store)
        assert _resume(store) == sorted(found), (name, pos)  # exactly the images it holds are read again
        assert _same(_load(store), want), (name, pos)
        assert check.damaged_chunks(store) == {} and check.unfinished_images(store) == {}


@pytest.mark.parametrize("name", ["value", "verbal_text", "missing_reason", "done"])
def test_a_deleted_shard_of_a_new_store_is_found_and_re_read_bit_for_bit(tmp_path, name):
    ref = _new_store(tmp_path / "ref.zarr")
    want = _load(ref)
    _shard(ref, name).unlink()
    if name == "done":  # read as not done: the resumed read-out reads the three again
        assert check.damaged_chunks(ref) == {} and set(check.unfinished_images(ref)) == {0, 1, 2}
    else:
        assert set(check.damaged_chunks(ref)) == {0, 1, 2}
        with pytest.raises(ValueError, match="damaged or missing chunk files.*run the readout stage"):
            cube.merge_models({"m": ref}, tmp_path / "cube.zarr")  # not NaN values in the cube
    assert _resume(ref) == [0, 1, 2]
    assert _same(_load(ref), want)


def test_a_chunk_missing_from_a_shard_index_of_a_done_image_is_found(tmp_path):
    """A shard file of an earlier moment (image 13 not yet written) restored beside a `done` that says 13 is
    done: its index lacks 13's chunk, which reads as NaN without an error; it is damage in a store of this murk."""
    store = tmp_path / "m.zarr"
    cube.open_readout_store(store, IDS, CATS, ATTRS, DIGESTS)
    _write(store, 0)
    _write(store, 1)
    old = _shard(store, "value").read_bytes()
    _write(store, 2)
    want = _load(store)
    _shard(store, "value").write_bytes(old)
    assert check.damaged_chunks(store) == {2: [_shard(store, "value")]}
    assert _resume(store) == [2] and _same(_load(store), want)


def test_a_store_of_an_earlier_murk_is_read_resumed_and_its_deleted_value_shard_found(tmp_path):
    """No checksums, no layout attribute, image 12's all-NaN values not stored: read and merged as it is; its
    `value` shard deleted lists the images that held read-outs (11, 13), not 12 (recorded missing), and the
    resumed read-out writes them again into the earlier layout."""
    store = _old_store(tmp_path / "old.zarr")
    want = _load(store)
    assert check.STORE_LAYOUT_ATTR not in want.attrs
    assert check.damaged_chunks(store) == {} and check.unfinished_images(store) == {}
    cube.merge_models({"m": store}, tmp_path / "cube.zarr")
    assert _resume(store) == []
    f = _shard(store, "value")
    f.unlink()
    assert check.damaged_chunks(store) == {0: [f], 2: [f]}
    assert _resume(store) == [0, 2]
    assert _same(_load(store), want)
    codecs = json.loads((store / "value" / "zarr.json").read_text())["codecs"][0]["configuration"]["codecs"]
    assert [c["name"] for c in codecs] == ["bytes", "zstd"]  # its layout kept: no checksums added


def test_flips_in_a_store_of_an_earlier_murk_are_found_by_the_codecs_or_by_its_marker(tmp_path):
    """A store without checksums: most flips in its `value` shard decode to other values without an error (issue
    49: 50 of 61). At N_POSITIONS positions: the marker's per-file digests name the file, and forget_changed
    (what the Snakefile calls for a stale marker) marks every image it holds not done, so the mark step refuses
    the store until they are read again; at three of them the read-out is resumed and the store equals the
    undamaged one bit for bit."""
    ref = _old_store(tmp_path / "ref.zarr")
    want = _load(ref)
    marker = tmp_path / "ref.done"
    markers.write_marker(marker, ref)
    f = _shard(ref, "value")
    size, silent = f.stat().st_size, 0
    for pos in _positions(size):
        data = _flip(f, pos)
        assert pipeline.changed_files(marker, ref) == ["value/c/0/0/0/0/0"], pos
        found = check.damaged_chunks(ref)
        silent += not found and not _same(_load(ref), want)  # decodes, to other values
        f.write_bytes(data)
    assert silent > N_POSITIONS // 2  # the codecs alone would let most flips through
    for pos in (0, size // 2, size - 1):
        store = Path(shutil.copytree(ref, tmp_path / f"flip{pos}.zarr"))
        copy = Path(shutil.copy(marker, tmp_path / f"flip{pos}.done"))
        _flip(_shard(store, "value"), pos)
        note = pipeline.forget_changed(copy, store)
        assert "value/c/0/0/0/0/0" in note and "positions 0, 1, 2" in note
        assert markers.main(["mark", str(copy), str(store)]) == 1  # refused until they are read again
        assert _resume(store) == [0, 1, 2]  # the file held all three
        assert _same(_load(store), want), pos
        assert markers.main(["mark", str(copy), str(store)]) == 0 and pipeline.changed_files(copy, store) == []


def test_forget_changed_dry_run_changes_nothing_and_old_markers_re_read_everything(tmp_path):
    store = _new_store(tmp_path / "m.zarr")
    marker = tmp_path / "m.done"
    markers.write_marker(marker, store)
    rec = json.loads(marker.read_text())
    assert rec["marker_version"] == 2 and set(rec["files"]) >= {"zarr.json", "value/zarr.json"}
    assert pipeline.forget_changed(marker, store) is None  # unchanged: nothing to do
    f = _shard(store, "verbal_text")
    data = bytearray(f.read_bytes())
    data[5] ^= 1
    f.write_bytes(bytes(data))
    before = {p: p.read_bytes() for p in store.rglob("*") if p.is_file()}
    note = pipeline.forget_changed(marker, store, dry_run=True)
    assert "would be marked not done" in note
    assert {p: p.read_bytes() for p in store.rglob("*") if p.is_file()} == before  # a plan writes nothing
    assert marker.exists()
    # a marker of an earlier murk (no per-file digests): the store changed, which file is not known: every image
    rec = {k: v for k, v in rec.items() if k != "files"} | {"marker_version": 1}
    marker.write_text(json.dumps(rec))
    assert pipeline.changed_files(marker, store) is None
    assert "every image" in pipeline.forget_changed(marker, store)
    assert check.unfinished_images(store) == {0: "not done", 1: "not done", 2: "not done"}
    assert not marker.exists()  # applied: a run stopped before the read-out resumes the store, no more


def test_a_changed_metadata_file_is_refused_with_the_fix_and_nothing_changes(tmp_path):
    store = _new_store(tmp_path / "m.zarr")
    marker = tmp_path / "m.done"
    markers.write_marker(marker, store)
    meta = store / "category" / "zarr.json"
    meta.write_text(meta.read_text().replace('"dimension_names"', '"dimension_names" '))
    before = {p: p.read_bytes() for p in store.rglob("*") if p.is_file()}
    with pytest.raises(ValueError, match=r"category/zarr\.json changed after its marker.*rm -r"):
        pipeline.forget_changed(marker, store)
    assert {p: p.read_bytes() for p in store.rglob("*") if p.is_file()} == before
    (store / "value" / "zarr.json").write_text('{"shape": [3,')  # unreadable: named all the same, no traceback
    with pytest.raises(ValueError, match=r"value/zarr\.json.*changed after its marker.*rm -r"):
        pipeline.forget_changed(marker, store)


def test_the_mark_step_refuses_a_damaged_or_unfinished_store_in_one_line(tmp_path, capsys):
    store = _new_store(tmp_path / "m.zarr")
    marker = tmp_path / "m.done"
    _shard(store, "value").unlink()
    assert markers.main(["mark", str(marker), str(store)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no marker written" in err and "position 0: damaged or missing" in err
    assert not marker.exists()
    _resume(store)
    xr.Dataset({"done": ("image", np.zeros(1, bool))}).to_zarr(store, region={"image": slice(1, 2)},
                                                               consolidated=False)
    assert markers.main(["mark", str(marker), str(store)]) == 1 and "position 1: not done" in capsys.readouterr().err
    _write(store, 1)
    assert markers.main(["mark", str(marker), str(store)]) == 0 and markers.stale_reason(marker) is None
