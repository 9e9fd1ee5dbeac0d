"""The checks behind "bad input is recorded, a refusal writes nothing" (issue 14), one by one.

The end-to-end behaviour, through Snakemake, is in ``test_faults_snakemake.py``; these are the fast
unit checks of the functions it rests on.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from murk.core import _config as config
from murk.pipeline import markers as workflow
from murk.protocol import _coco as coco
from murk.results import _cube as cube
from murk.scene import _depth as depth


# --- depth maps ---

def test_load_depth_refuses_a_map_of_another_shape_naming_the_file(tmp_path):
    depth.save_depth(tmp_path, 7, np.full((4, 6), 13.8, np.float32))
    assert depth.has_depth(tmp_path, 7) and not depth.has_depth(tmp_path, 8)
    assert depth.load_depth(tmp_path, 7, shape=(4, 6)).shape == (4, 6)
    with pytest.raises(ValueError) as e:
        depth.load_depth(tmp_path, 7, shape=(5, 6))
    msg = str(e.value)
    assert str(tmp_path / "7.npy") in msg and "(4, 6)" in msg and "(5, 6)" in msg and "--forcerun depth" in msg
    np.save(tmp_path / "9.npy", np.zeros((2, 2, 2), np.float32))  # not a map at all
    with pytest.raises(ValueError, match="9.npy has shape"):
        depth.load_depth(tmp_path, 9)
    (tmp_path / "10.npy").write_bytes(b"\x93NUMPY garbage")  # damaged file
    with pytest.raises(ValueError, match="10.npy cannot be read"):
        depth.load_depth(tmp_path, 10)
    with pytest.raises(FileNotFoundError) as e:
        depth.load_depth(tmp_path, 8)
    assert str(tmp_path / "8.npy") in str(e.value) and "rm -r the store" in str(e.value)


def test_manifest_records_why_an_image_has_no_map(tmp_path):
    est = depth.get_backend("constant")
    depth.save_depth(tmp_path, 1, np.full((4, 6), 13.8, np.float32))
    depth.write_manifest(tmp_path, est, [1, 2], written=[1], skipped={2: "image x.jpg not found"})
    m = depth.read_manifest(tmp_path)
    assert m["skipped"] == {"2": "image x.jpg not found"} and m["image_ids"] == [1, 2]
    assert m["median_scene_depth_m"] == pytest.approx(13.8, rel=1e-6)  # only the maps that exist


# --- a selected image missing offline ---

def test_missing_images_offline_are_named_and_kept_when_missing_ok(tmp_path, monkeypatch):
    monkeypatch.setenv("MURK_OFFLINE", "1")
    (tmp_path / "a.jpg").write_bytes(b"x")
    with pytest.raises(FileNotFoundError, match="MURK_OFFLINE=1 forbids"):
        coco.ensure_images(["a.jpg", "b.jpg"], tmp_path)
    with pytest.warns(coco.MissingImageWarning, match=r"1 of 2 selected images .* b\.jpg"):
        got = coco.ensure_images(["a.jpg", "b.jpg"], tmp_path, missing_ok=True)
    assert got == [tmp_path / "a.jpg", tmp_path / "b.jpg"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        coco.ensure_images(["a.jpg"], tmp_path, missing_ok=True)  # nothing missing: no warning


# --- stores of another selection ---

def _store(path, config_hash="c", items_hash="i"):
    attrs = {"config_hash": config_hash, "items_hash": items_hash, "model_id": "m", "depth_backend": "d"}
    cube.open_readout_store(path, [11, 12], ["car", "bus"], attrs)
    return path


def test_foreign_stores_are_found_by_their_hashes(tmp_path):
    root = tmp_path / "out"
    assert workflow.foreign_stores(root, "c", "i") == []  # no root yet
    _store(root / "readout" / "a.zarr")
    _store(root / "readout" / "b" / "s2-0000.zarr", items_hash="j")  # a shard store
    _store(root / "cube.zarr", config_hash="d")
    (root / "readout" / "half.zarr").mkdir()  # a creation killed before its metadata: holds nothing
    assert workflow.foreign_stores(root, "c", "i") == [
        (root / "readout" / "b" / "s2-0000.zarr", "items_hash j… (this run i…)"),
        (root / "cube.zarr", "config_hash d… (this run c…)")]
    (root / "readout" / "a.zarr" / "zarr.json").write_text("{")
    assert (root / "readout" / "a.zarr", "attributes unreadable") in workflow.foreign_stores(root, "c", "i")


def test_refusal_names_the_stores_and_the_complete_fixes(tmp_path):
    root = tmp_path / "out"
    _store(root / "readout" / "a.zarr")
    workflow.refuse_foreign_stores(root, "c", "i", stage="select")  # the same selection: accepted
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    with pytest.raises(ValueError) as e:
        workflow.refuse_foreign_stores(root, "c", "j", stage="select")
    msg = str(e.value)
    assert f"select stage refuses to write into the output root {root}" in msg
    assert str(root / "readout" / "a.zarr") in msg and "items_hash" in msg and "Nothing was written" in msg
    assert "git checkout data/config.yaml" in msg and "--config run_name=NEW output_dir=outputs-NEW" in msg
    assert f"rm -r {root / 'readout' / 'a.zarr'}" in msg
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


def test_frozen_record_refusal_gives_the_complete_fixes(tmp_path):
    config.freeze_run("r", "c" * 64, "i" * 64, tmp_path)
    with pytest.raises(ValueError) as e:
        config.freeze_run("r", "d" * 64, "i" * 64, tmp_path)
    msg = str(e.value)
    assert "git checkout data/config.yaml" in msg
    assert "make demo ARGS='--config run_name=NEW output_dir=outputs-NEW'" in msg
    assert "a new run_name alone is not enough" in msg and "Nothing was written" in msg
    assert json.loads((tmp_path / "r.json").read_text())["config_hash"] == "c" * 64


def test_running_notebooks_dir_is_per_output_root(tmp_path):
    a = workflow.running_notebooks_dir(tmp_path / "out")
    assert a.parts[:2] == (".snakemake", "murk-notebooks") and a != workflow.running_notebooks_dir(tmp_path / "o2")
    assert workflow.running_notebooks_dir("outputs") == workflow.running_notebooks_dir(str(tmp_path.cwd() / "outputs"))
