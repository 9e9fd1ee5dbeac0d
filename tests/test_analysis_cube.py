"""murk.pipeline._analysis_cube: the analyse stage refuses missing stores and other runs' stores, writing nothing."""

import hashlib

import pandas as pd
import pytest
import xarray as xr

from murk import core
from murk.pipeline import _analysis_cube as analysis_cube

META = {"config_hash": "c" * 64, "items_hash": "i" * 64}


def test_a_missing_store_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(FileNotFoundError, match="read-out stores missing: .*run the readout stage"):
        analysis_cube.analysis_cube(["org/m"], None, tmp_path, pd.DataFrame(), META, {})
    assert not core.cube_store(tmp_path).exists()


def test_a_store_of_another_run_is_refused_before_anything_is_written(tmp_path):
    store = core.readout_store("org/m", tmp_path)
    xr.Dataset(attrs={"config_hash": "x" * 64, "items_hash": "i" * 64}).to_zarr(store, consolidated=False)
    with pytest.raises(ValueError, match=str(store)):
        analysis_cube.analysis_cube(["org/m"], None, tmp_path, pd.DataFrame(), META, {})
    assert not core.cube_store(tmp_path).exists()


def test_analysis_inputs_digest_each_store_and_the_nominal_equivalence(tmp_path):
    store = core.readout_store("org/m", tmp_path)
    xr.Dataset({"x": ("i", [1.0])}, attrs=META).to_zarr(store, consolidated=False)
    got = analysis_cube.analysis_inputs([store], tmp_path)
    assert list(got) == [str(store.relative_to(tmp_path))]
    nominal = core.analysis_dir(tmp_path) / "nominal_equivalence.nc"
    nominal.parent.mkdir(parents=True, exist_ok=True)
    nominal.write_bytes(b"a")
    got2 = analysis_cube.analysis_inputs([store], tmp_path)
    assert got2["analysis/nominal_equivalence.nc"] == "sha256:" + hashlib.sha256(b"a").hexdigest()
    nominal.write_bytes(b"b")                                     # another content: another digest
    assert analysis_cube.analysis_inputs([store], tmp_path)["analysis/nominal_equivalence.nc"] != got2[
        "analysis/nominal_equivalence.nc"] and got2[str(store.relative_to(tmp_path))] == got[str(store.relative_to(tmp_path))]
