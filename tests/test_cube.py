"""The cube schema: dims, coordinates, incremental writes, resume, merge."""

import numpy as np
import pytest
import xarray as xr

from murk import scene
from murk.results import _cube as cube
from murk import core
from murk.scene import _physics as physics


def _result(value=0.5, text="x"):
    r = {k: value for k in cube.READOUTS}
    r.update({k: text for k in cube.TEXT_READOUTS})
    return r


def _all_results(value=0.5):
    return {(arm, lvl, task): _result(value, f"{arm}{lvl}{task}")
            for arm, lvl in scene.CONDITIONS for task in cube.TASKS}


ATTRS = {"config_hash": "c" * 64, "items_hash": "i" * 64, "model_id": "m", "depth_backend": "constant-13.8m"}


def test_conditions_are_the_spec_24():
    assert len(scene.CONDITIONS) == 24
    assert len(set(scene.CONDITIONS)) == 24


def test_level_coords_units_and_values():
    c = cube.level_coords()
    vis, sev = c["visibility_m"], c["severity"]
    assert vis.attrs["units"] == "m" and "standard_name" not in vis.attrs   # visibility_in_air would claim air underwater
    assert vis.dims == sev.dims == ("arm", "level") and list(vis["arm"].values) == list(cube.ARMS)
    for arm in cube.PHYSICAL_ARMS:   # V (fog) and V_best (underwater): clean, then the sweep
        assert np.isinf(vis.sel(arm=arm)[0])
        np.testing.assert_array_equal(vis.sel(arm=arm)[1:], physics.SWEEP_M)
        assert np.isnan(sev.sel(arm=arm)).all()
    # the ImageNet-C severities have no visibility (severity 5 is not 15.6 m): clean, then NaN
    assert np.isinf(vis.sel(arm="imagenet_c")[0]) and np.isnan(vis.sel(arm="imagenet_c")[1:]).all()
    np.testing.assert_array_equal(sev.sel(arm="imagenet_c")[:6], np.arange(6))
    assert np.isnan(sev.sel(arm="imagenet_c")[6:]).all()
    for arm in cube.CONTROL_ARMS:    # a control image is not a degradation
        assert np.isnan(vis.sel(arm=arm)).all() and np.isnan(sev.sel(arm=arm)).all()


def test_sweep_visibility_reads_the_physical_arms():
    ds = cube.empty_model_dataset([5], ["car"])
    np.testing.assert_array_equal(cube.sweep_visibility(ds), np.concatenate([[np.inf], physics.SWEEP_M]))
    np.testing.assert_array_equal(cube.sweep_visibility(ds.sel(arm="underwater")), cube.sweep_visibility(ds))
    np.testing.assert_array_equal(cube.sweep_visibility(ds.sel(arm=["imagenet_c", "fog"])), cube.sweep_visibility(ds))
    with pytest.raises(ValueError, match="no physical arm"):
        cube.sweep_visibility(ds.sel(arm=["imagenet_c", "blank"]))
    odd = ds.copy()
    odd["visibility_m"] = odd["visibility_m"].where(odd["arm"] != "underwater", 1.0)
    with pytest.raises(ValueError, match="differ"):
        cube.sweep_visibility(odd)


def test_empty_dataset_dims():
    ds = cube.empty_model_dataset([5, 7, 9], ["car", "bus", "dog"])
    assert ds["value"].dims == cube.DIMS[1:]
    assert ds["value"].shape == (5, 9, 3, 3, len(cube.READOUTS))
    assert list(ds["image"].values) == [5, 7, 9]
    assert ds["value"].isnull().all()
    with pytest.raises(ValueError):
        cube.empty_model_dataset([1, 2], ["car"])


def test_write_resume_and_clean_copied(tmp_path):
    store = tmp_path / "m.zarr"
    ds = cube.open_readout_store(store, [11, 12], ["car", "bus"], ATTRS)
    assert not ds["done"].any()
    cube.write_image(store, 1, _all_results(1.0))
    ds = xr.open_zarr(store, consolidated=False).load()
    assert list(ds["done"].values) == [False, True]
    v = ds["value"].sel(image=12)
    # clean is written into level 0 of every non-control arm
    for arm in ("fog", "underwater", "imagenet_c"):
        assert float(v.sel(arm=arm, level=0, task="t2", readout="c_int")) == 1.0
        assert str(ds["verbal_text"].sel(image=12, arm=arm, level=0, task="t2").values) == "clean0t2"
    # cells that do not exist stay missing
    assert v.sel(arm="blank", level=3).isnull().all()
    assert v.sel(arm="imagenet_c", level=7).isnull().all()
    assert ds["value"].sel(image=11).isnull().all()
    # reopening resumes with the same content
    ds2 = cube.open_readout_store(store, [11, 12], ["car", "bus"], ATTRS)
    assert list(ds2["done"].values) == [False, True]


def test_store_refuses_other_inputs(tmp_path):
    store = tmp_path / "m.zarr"
    cube.open_readout_store(store, [11, 12], ["car", "bus"], ATTRS)
    with pytest.raises(ValueError, match="delete it"):
        cube.open_readout_store(store, [11, 12], ["car", "bus"], {**ATTRS, "items_hash": "other"})
    with pytest.raises(ValueError, match="other images"):
        cube.open_readout_store(store, [11, 13], ["car", "bus"], ATTRS)


def _per_level_coords():
    """The level coordinates as stores held them before they were per arm (one visibility per level, air's
    standard name, severity 5 at 15.6 m)."""
    vis = np.concatenate([[np.inf], physics.SWEEP_M])
    sev = np.where(np.arange(len(vis)) <= 5, np.arange(len(vis)), np.nan)
    return {"level": xr.DataArray(np.arange(len(vis)), dims="level"),
            "visibility_m": xr.DataArray(vis, dims="level", attrs={"units": "m", "standard_name": "visibility_in_air"}),
            "severity": xr.DataArray(sev, dims="level")}


def test_merge_models(tmp_path, monkeypatch):
    stores = {}
    for k, model in enumerate(["org/a", "murk-tiny/b"]):
        p = tmp_path / f"{k}.zarr"
        with monkeypatch.context() as m:
            if k == 0:   # a store written before the level coordinates were per arm
                m.setattr(cube, "level_coords", _per_level_coords)
            cube.open_readout_store(p, [1, 2], ["car", "bus"], {
                **ATTRS, "model_id": model, "pipeline_check": int(model.startswith("murk-tiny")),
                "model_revision": "abc", "n_visual_tokens": 64})
        for i in range(2):
            cube.write_image(p, i, _all_results(0.25 * (k + 1)))
        stores[model] = p
    assert xr.open_zarr(stores["org/a"])["visibility_m"].dims == ("level",)
    out = tmp_path / "cube.zarr"
    merged = cube.merge_models(stores, out, attrs={"git_commit": "deadbeef"})
    ds = xr.open_zarr(out)
    assert ds["value"].dims == cube.DIMS
    assert list(ds["model"].values) == ["org/a", "murk-tiny/b"]
    assert ds["visibility_m"].attrs["units"] == "m"
    # the cube's level coordinates are the design's, per arm, whatever a store held
    for name in ("visibility_m", "severity"):
        want = cube.level_coords()[name]
        assert ds[name].dims == want.dims and ds[name].attrs == want.attrs
        np.testing.assert_array_equal(ds[name].values, want.values)
    assert ds.attrs["pipeline_check"] == 1 and "PIPELINE CHECK" in ds.attrs["note"]
    assert ds.attrs["git_commit"] == "deadbeef"
    assert list(ds["pipeline_check"].values) == [False, True]
    assert float(ds["value"].sel(model="murk-tiny/b", arm="fog", level=4, task="t2", image=2, readout="c_int")) == 0.5
    assert merged.sizes == ds.sizes


def test_merge_refuses_unfinished(tmp_path):
    p = tmp_path / "a.zarr"
    cube.open_readout_store(p, [1, 2], ["car", "bus"], ATTRS)
    cube.write_image(p, 0, _all_results())
    with pytest.raises(ValueError, match="not read out yet"):
        cube.merge_models({"m": p}, tmp_path / "cube.zarr")


def test_t3_image_scores():
    da = xr.DataArray(np.array([1.0, 1.0, 0.0]), dims="task", coords={"task": list(cube.TASKS)})
    s = cube.t3_image_scores(da)
    assert list(s["task"].values) == ["t2", "t3"]
    assert float(s.sel(task="t3")) == 0.5


def _sized_store(path, ids, cats, model, value, bad=None):
    """A finished store of ``model`` over ``ids``; position ``bad`` recorded as bad input."""
    cube.open_readout_store(path, ids, cats, {**ATTRS, "model_id": model})
    for i in range(len(ids)):
        if i == bad:
            cube.write_missing(path, i, "image file missing")
        else:
            cube.write_image(path, i, _all_results(value + i))
    return path


def test_merge_models_of_different_sizes(tmp_path):
    """Stores of 4, 2 and 3 items (the first N of the selection) merge: selection order, not-run fill, n_items."""
    ids, cats = [30, 10, 40, 20], ["car", "bus", "dog", "cat"]   # the selection's order is not sorted
    stores = {"org/all": _sized_store(tmp_path / "a.zarr", ids, cats, "org/all", 1.0, bad=3),
              "org/two": _sized_store(tmp_path / "b.zarr", ids[:2], cats[:2], "org/two", 10.0),
              "org/three": _sized_store(tmp_path / "c.zarr", ids[:3], cats[:3], "org/three", 20.0)}
    merged = cube.merge_models(stores, tmp_path / "cube.zarr")
    ds = xr.open_zarr(tmp_path / "cube.zarr").load()
    for d in (merged, ds):
        assert list(d["image"].values) == ids and list(d["category"].values) == cats
        assert list(d["model"].values) == ["org/all", "org/two", "org/three"]
        assert list(d["n_items"].values) == [4, 2, 3]
        two = d.sel(model="org/two")
        assert float(two["value"].sel(image=10, arm="fog", level=2, task="t2", readout="c_int")) == 11.0
        assert two["value"].sel(image=[40, 20]).isnull().all()
        assert (two["verbal_text"].sel(image=[40, 20]) == "").all()
        assert str(two["verbal_text"].sel(image=10, arm="fog", level=2, task="t2").values) == "fog2t2"
        assert [str(r) for r in two["missing_reason"].values] == ["", "", cube.NOT_RUN, cube.NOT_RUN]
        assert [str(r) for r in d["missing_reason"].sel(model="org/three").values] == ["", "", "", cube.NOT_RUN]
        # bad input stays bad input, and counts as run
        assert str(d["missing_reason"].sel(model="org/all", image=20).values) == "image file missing"
        run = cube.images_run(d).transpose("model", "image").values
        np.testing.assert_array_equal(run, [[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]])


def test_merge_models_over_the_selection(tmp_path):
    """With the selection given, the cube's images are the selection's, even where no model ran on the last ones;
    a store with an image outside the selection is refused."""
    ids, cats = [30, 10, 40], ["car", "bus", "dog"]
    stores = {"org/two": _sized_store(tmp_path / "b.zarr", ids[:2], cats[:2], "org/two", 1.0)}
    ds = cube.merge_models(stores, tmp_path / "cube.zarr", images=(ids, cats))
    assert list(ds["image"].values) == ids and list(ds["category"].values) == cats
    assert int(ds["n_items"].sel(model="org/two")) == 2
    assert [str(r) for r in ds["missing_reason"].sel(model="org/two").values] == ["", "", cube.NOT_RUN]
    with pytest.raises(ValueError, match="not in the selection"):
        cube.merge_models(stores, tmp_path / "cube2.zarr", images=([30, 40], ["car", "dog"]))


def _chunk_bytes(store, image_pos):
    """The stored data of one image position in every per-image variable, as bytes (its chunk, decoded: in a
    sharded store one shard file holds several images' chunks)."""
    import zarr

    out = {}
    for name in ("value", "missing_reason", "input_sha256", "done", *cube.TEXT_READOUTS):
        arr = zarr.open_array(store / name, mode="r")
        axis = list(arr.metadata.dimension_names).index("image")
        sel = tuple(slice(image_pos, image_pos + 1) if a == axis else slice(None) for a in range(arr.ndim))
        data = arr[sel]
        out[name] = data.tobytes() if data.dtype.kind in "fb" else repr([str(x) for x in data.ravel()]).encode()
    return out


def test_store_rereads_images_whose_input_digest_changed(tmp_path):
    """A row done from other image files is emptied and not done on reopen; the others are kept bit for bit."""
    store = tmp_path / "m.zarr"
    old = ["a" * 64, "b" * 64, "c" * 64]
    cube.open_readout_store(store, [11, 12, 13], ["car", "bus", "dog"], ATTRS, old)
    cube.write_image(store, 0, _all_results(1.0), old[0])
    cube.write_image(store, 1, _all_results(2.0), old[1])
    cube.write_missing(store, 2, "image missing", old[2])
    ds = xr.open_zarr(store, consolidated=False).load()
    assert list(ds["input_sha256"].values) == old and ds["done"].all()
    kept0, kept2 = _chunk_bytes(store, 0), _chunk_bytes(store, 2)
    # the same digests: nothing is re-read
    ds = cube.open_readout_store(store, [11, 12, 13], ["car", "bus", "dog"], ATTRS, old)
    assert ds["done"].values.all()
    # image 12's files changed: its row alone is emptied and marked not done, with a warning naming it
    new = [old[0], "d" * 64, old[2]]
    with pytest.warns(UserWarning, match="image 12"):
        ds = cube.open_readout_store(store, [11, 12, 13], ["car", "bus", "dog"], ATTRS, new).load()
    assert list(ds["done"].values) == [True, False, True]
    assert ds["value"].sel(image=12).isnull().all()
    assert str(ds["verbal_text"].sel(image=12, arm="fog", level=0, task="t2").values) == ""
    assert _chunk_bytes(store, 0) == kept0 and _chunk_bytes(store, 2) == kept2
    # read again: the new digest is recorded, and the merged cube does not carry the per-row digest
    cube.write_image(store, 1, _all_results(3.0), new[1])
    ds = xr.open_zarr(store, consolidated=False).load()
    assert list(ds["input_sha256"].values) == new
    assert float(ds["value"].sel(image=12, arm="fog", level=0, task="t2", readout="c_int")) == 3.0
    merged = cube.merge_models({"m": store}, tmp_path / "cube.zarr")
    assert "input_sha256" not in merged


def test_store_of_an_earlier_murk_gets_input_digests(tmp_path):
    """A store without input_sha256 (written before it existed) keeps its rows and gets the variable, unrecorded."""
    store = tmp_path / "m.zarr"
    cube.open_readout_store(store, [11, 12], ["car", "bus"], ATTRS)
    cube.write_image(store, 0, _all_results(1.0))
    import shutil
    shutil.rmtree(store / "input_sha256")
    ds = cube.open_readout_store(store, [11, 12], ["car", "bus"], ATTRS, ["a" * 64, "b" * 64]).load()
    assert list(ds["done"].values) == [True, False] and list(ds["input_sha256"].values) == ["", ""]
    cube.write_image(store, 1, _all_results(2.0), "b" * 64)
    assert list(xr.open_zarr(store, consolidated=False)["input_sha256"].values) == ["", "b" * 64]


def _zarr2_store(path, n):
    """A read-out store as murk wrote it before sharding (zarr 2, one chunk file per image and variable)."""
    ds = cube.empty_model_dataset(range(11, 11 + n), ["car"] * n)
    ds.attrs.update({**ATTRS, "schema_version": cube.SCHEMA_VERSION})
    enc = {name: {"chunks": tuple(1 if d == "image" else ds[name].sizes[d] for d in ds[name].dims)}
           for name in ["value", "done", "missing_reason", "input_sha256", *cube.TEXT_READOUTS]}
    ds.to_zarr(path, mode="w", encoding=enc, consolidated=False, zarr_format=2)


def test_new_store_is_sharded_and_its_files_do_not_grow_with_images(tmp_path):
    """A new store is zarr 3 with one shard file per variable up to IMAGES_PER_SHARD images, then one per that
    many; a store of one image per shard has one file per image and variable (the layout before sharding)."""
    def files(store):
        return sorted(f.relative_to(store).as_posix() for f in store.rglob("*") if f.is_file())

    for n in (2, 5):
        store = tmp_path / f"n{n}.zarr"
        cube.open_readout_store(store, range(11, 11 + n), ["car"] * n, ATTRS)
        for i in range(n):
            cube.write_image(store, i, _all_results(0.1 * i))
        assert [f for f in files(store) if f.startswith("value/")] == ["value/c/0/0/0/0/0", "value/zarr.json"]
    assert len(files(tmp_path / "n2.zarr")) == len(files(tmp_path / "n5.zarr"))
    small = tmp_path / "small.zarr"
    cube.open_readout_store(small, range(11, 16), ["car"] * 5, ATTRS, images_per_shard=2)
    for i in range(5):
        cube.write_image(small, i, _all_results(0.1 * i))
    assert [f for f in files(small) if f.startswith("value/c")] == [f"value/c/0/0/0/{j}/0" for j in range(3)]
    xr.testing.assert_identical(xr.open_zarr(small, consolidated=False).load(),
                                xr.open_zarr(tmp_path / "n5.zarr", consolidated=False).load())
    with pytest.raises(ValueError, match="images_per_shard=0"):
        cube.open_readout_store(tmp_path / "zero.zarr", [11], ["car"], ATTRS, images_per_shard=0)
    assert not (tmp_path / "zero.zarr").exists()


def test_zarr2_store_of_an_earlier_murk_is_resumed_as_it_is(tmp_path):
    """A store written before sharding is resumed (not refused, not rewritten): its damaged chunk file is found
    and that image alone is read again; new images go into its one-file-per-image layout."""
    store = tmp_path / "old.zarr"
    _zarr2_store(store, 3)
    cube.write_image(store, 0, _all_results(1.0))
    cube.write_image(store, 1, _all_results(2.0))
    chunk = store / "value" / "0.0.0.1.0"
    chunk.write_bytes(b"")
    assert core.damaged_chunks(store) == {1: [chunk]}
    with pytest.warns(UserWarning, match=r"image 12 \(position 1\)"):
        ds = cube.open_readout_store(store, [11, 12, 13], ["car"] * 3, ATTRS)
    assert list(ds["done"].values) == [True, False, False]
    cube.write_image(store, 1, _all_results(2.0))
    cube.write_image(store, 2, _all_results(3.0))
    assert (store / ".zgroup").is_file() and not (store / "zarr.json").exists()
    assert (store / "value" / "0.0.0.2.0").is_file()
    merged = cube.merge_models({"m": store}, tmp_path / "cube.zarr")
    assert [float(merged["value"].sel(model="m", image=i, arm="fog", level=0, task="t2", readout="c_int"))
            for i in (11, 12, 13)] == [1.0, 2.0, 3.0]
