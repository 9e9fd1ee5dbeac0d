"""murk.pipeline._analysis_cube: the analyse stage refuses missing stores and other runs' stores, writing nothing."""

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
