"""Read-out health checks (issue 12): the option-mass guard and the verbal parse / limit-hit rates,
on small synthetic cubes with hand-checked values."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import xarray as xr

from murk import readout
from murk.readout import OPTION_MASS_MIN, LowOptionMassWarning, check_option_mass
from murk.results import _analysis as analysis
from murk.results import _cube as cube

N = 6


def _cube() -> xr.Dataset:
    """Two models: org/good puts 0.9 of its first-token mass on the options, org/bad 1e-4 (t2) / 0.6 (t3)."""
    one = cube.empty_model_dataset(np.arange(100, 100 + N), ["car"] * N)
    ds = xr.concat([one, one], dim="model").assign_coords(model=["org/good", "org/bad"])
    val = ds["value"].values.copy()
    ro = list(ds["readout"].values)
    arms = list(ds["arm"].values)
    fog = arms.index("fog")
    tasks = list(ds["task"].values)
    val[0, :, :, :, :, ro.index("option_mass")] = 0.9
    val[1, :, :, :, :, ro.index("option_mass")] = 0.6
    val[1, :, :, tasks.index("t2"), :, ro.index("option_mass")] = 1e-4
    val[0, fog, 0, tasks.index("t2"), 0, ro.index("option_mass")] = 0.1  # one outlier: the median holds
    val[1, fog, 0, tasks.index("t3_true"), :3, ro.index("option_mass")] = 0.2  # t3 pools its two questions
    # verbal: v1 asked everywhere on fog level 0 and 1; v2 on the first 3 images only; v3 never
    for lvl in (0, 1):
        stop = np.array([0, 0, 1, 1, 1, 0], dtype=float)
        conf = np.array([0.8, np.nan, np.nan, 0.5, np.nan, 0.9])
        val[:, fog, lvl, :, :, ro.index("verbal_stop")] = stop
        val[:, fog, lvl, :, :, ro.index("verbal_conf")] = conf
        val[:, fog, lvl, :, :3, ro.index("verbal_stop_v2")] = 1.0
        val[:, fog, lvl, :, :3, ro.index("verbal_conf_v2")] = [0.7, np.nan, np.nan]
    ds = ds.assign(value=(ds["value"].dims, val))
    ds["top_token"] = ds["top_token"].copy(data=np.where(True, "The", ds["top_token"].values))
    return ds


def test_median_option_mass_per_model_and_task():
    ds = _cube()
    med = readout.median_option_mass(ds)
    assert med.dims == ("model", "task") and list(med["task"].values) == ["t2", "t3"]
    assert float(med.sel(model="org/good", task="t2")) == pytest.approx(0.9)
    assert float(med.sel(model="org/bad", task="t2")) == pytest.approx(1e-4)
    # t3 pools t3_true (3 x 0.2, 3 x 0.6) and t3_false (6 x 0.6): median 0.6
    assert float(med.sel(model="org/bad", task="t3")) == pytest.approx(0.6)
    # one model's store (no model dim) gives the same
    one = ds.sel(model="org/bad", drop=True)
    np.testing.assert_allclose(readout.median_option_mass(one).values, med.sel(model="org/bad").values)
    assert analysis.low_option_mass(ds) == ["org/bad"]
    assert analysis.low_option_mass(ds, threshold=1e-5) == []


def test_guard_warns_naming_model_and_causes():
    ds = _cube()
    with pytest.warns(LowOptionMassWarning) as rec:
        med = check_option_mass(ds, "org/bad")
    msg = str(rec[0].message)
    assert "org/bad" in msg and "t2" in msg and str(OPTION_MASS_MIN) in msg
    for cause in ("chat template", "prefill", "'('", "'**'", "newline", "'The'", "random weights"):
        assert cause in msg
    assert "'The' (" in msg  # the most common first tokens on clean images are quoted
    assert med["t2"] == pytest.approx(1e-4) and med["t3"] == pytest.approx(0.6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_option_mass(ds, "org/good")["t2"] == pytest.approx(0.9)  # no warning at 0.9


def test_guard_on_a_store_read_back_from_zarr(tmp_path):
    """A store's text read-outs come back from zarr as numpy StringDType: the guard still quotes the tokens."""
    _cube().sel(model="org/bad", drop=True).to_zarr(tmp_path / "s.zarr", zarr_format=2, consolidated=False)
    ds = xr.open_zarr(tmp_path / "s.zarr", consolidated=False)
    with pytest.warns(LowOptionMassWarning, match="'The' \\(") as rec:
        med = check_option_mass(ds, "org/bad")
    assert med["t2"] == pytest.approx(1e-4) and "org/bad" in str(rec[0].message)


def test_guard_on_a_real_readout_of_random_weights(tiny_vlms, coco_image):
    """Random weights: the first token is rarely a letter, and the guard says so."""
    from benchmarks.baseline import read_item
    from murk.core import load_config
    from murk.protocol import questions_for_item

    vlm = tiny_vlms["qwen3vl"]
    cfg = load_config()
    row = {"category": "car", "t2_options": ["car", "bus", "kite", "dog"], "t2_answer_index": 0,
           "t3_distractor": "bus"}
    r = read_item(vlm, coco_image, questions_for_item(row, cfg), cfg)
    mass = xr.DataArray([[r[t]["option_mass"]] for t in cube.TASKS], dims=("task", "image"),
                        coords={"task": list(cube.TASKS)})
    assert float(mass.max()) < OPTION_MASS_MIN
    with pytest.warns(LowOptionMassWarning, match=vlm.model_id.replace("/", ".")):
        check_option_mass(mass, vlm.model_id)


def test_verbal_rates():
    ds = _cube()
    rates = analysis.verbal_rates(ds)
    assert rates["parse_rate"].dims == ("model", "arm", "level", "wording")
    cell = rates.sel(model="org/good", arm="fog", level=0)
    # v1: 6 images x 3 tasks asked; parsed 3 of 6 per task; limit hits 3 of 6
    assert int(cell["n_asked"].sel(wording="v1")) == 18
    assert float(cell["parse_rate"].sel(wording="v1")) == pytest.approx(0.5)
    assert float(cell["limit_hit_rate"].sel(wording="v1")) == pytest.approx(0.5)
    # v2: 3 images asked, all at the limit, 1 of 3 parsed
    assert int(cell["n_asked"].sel(wording="v2")) == 9
    assert float(cell["parse_rate"].sel(wording="v2")) == pytest.approx(1 / 3)
    assert float(cell["limit_hit_rate"].sel(wording="v2")) == pytest.approx(1.0)
    # v3 never asked; level 2 never asked: n 0 and NaN rates, not 0
    assert int(cell["n_asked"].sel(wording="v3")) == 0 and np.isnan(float(cell["parse_rate"].sel(wording="v3")))
    assert np.isnan(float(rates["limit_hit_rate"].sel(model="org/good", arm="fog", level=2, wording="v1")))
    by_task = analysis.verbal_rates(ds, by_task=True)
    assert by_task["parse_rate"].dims == ("model", "arm", "level", "task", "wording")
    assert int(by_task["n_asked"].sel(model="org/bad", arm="fog", level=1, task="t2", wording="v1")) == 6
