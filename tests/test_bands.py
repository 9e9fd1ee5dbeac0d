"""murk.monitor._bands: the monitor's V̂ on the sweep, and a temperature at the bound of its search."""

import numpy as np
import xarray as xr

from murk.monitor import _bands as bands
from murk.monitor import _recalibration as recalibration


def test_vhat_band_per_arm():
    vis = np.array([16.0, 4.0])
    v = xr.DataArray(np.array([[[np.inf] * 3, [16.0, 33.0, 8.0], [4.0, np.nan, 1.0]],
                               [[np.inf] * 3, [np.nan] * 3, [2.0, 2.0, 2.0]]]),
                     dims=("arm", "level", "image"), coords={"arm": ["fog", "underwater"]})
    out = bands.vhat_band(v, vis, ["fog", "underwater"])
    q, within = out["fog"]
    assert q.shape == (3, 2) and q[1].tolist() == [16.0, 2.5]          # the median over images, NaN skipped
    # within a factor of two (inclusive); 33 m against 16 m is not, a missing V̂ is not
    assert within.tolist() == [[True, False, True], [True, False, False]]
    q_u, within_u = out["underwater"]
    assert np.isnan(q_u[:, 0]).all() and within_u.tolist() == [[False] * 3, [True] * 3]
    assert list(bands.vhat_band(v, vis, ["underwater"])) == ["underwater"]


def test_at_temperature_bound():
    lo, hi = recalibration.T_BOUNDS
    assert not bands.at_temperature_bound([1.0, 2.5])
    assert bands.at_temperature_bound([1.0, hi]) and bands.at_temperature_bound([lo * 1.0005])
    assert not bands.at_temperature_bound([lo * 1.01]) and not bands.at_temperature_bound([])


def test_paired_w_against_a_vlm():
    margin = np.log10(2)
    # the VLM's accuracy crosses at 8 m, the monitor at 2 m: W = log10(4), positive in every resample
    acc_b, aware_b = np.array([8.0, 16.0, 4.0, 8.0]), np.array([2.0, 2.0, 2.0, 1.0])
    w, lo, hi, lower, upper, p, p_margin = bands.paired_w(8.0, "", acc_b, 2.0, "", aware_b, 0.95, margin)
    assert np.isclose(w, np.log10(4)) and lo <= w <= hi and not lower and not upper
    assert p < 0.5 and np.isfinite(p_margin)
    # the paired resamples, not the points, give the interval: the same points with equal resamples, no spread
    w2, lo2, hi2, *_ = bands.paired_w(8.0, "", np.full(4, 8.0), 2.0, "", np.full(4, 2.0), 0.95, margin)
    assert np.isclose(lo2, hi2) and np.isclose(lo2, w2)
    # a monitor that never crosses ("below": not within the sweep) makes W a lower bound, not a point
    w3, _, _, lower3, upper3, *_ = bands.paired_w(8.0, "", acc_b, 1.953125, "below", aware_b, 0.95, margin)
    assert (lower3, upper3) == (True, False) and np.isclose(w3, np.log10(8.0 / 1.953125))
    # no V_acc: no W, no interval, no p-values
    out = bands.paired_w(np.nan, "", acc_b, 2.0, "", aware_b, 0.95, margin)
    assert all(np.isnan(x) for x in (out[0], out[1], out[2], out[5], out[6]))
    # no margin: W and its interval, but no p-values for the family
    assert np.isnan(bands.paired_w(8.0, "", acc_b, 2.0, "", aware_b, 0.95, np.nan)[5])


def test_held_out_units_of_the_test_half():
    # three own images, t3: two questions each (unit q * 3 + i); image 0 calibrates, images 1 and 2 are the test half
    keep, pos = bands.held_out_units(np.array([True, False, False]), np.array([0, 1, 2, 0, 1, 2]), np.array([1, 2]))
    assert keep.tolist() == [1, 2, 4, 5] and pos.tolist() == [0, 1, 0, 1]
    keep, pos = bands.held_out_units(np.array([True, True]), np.array([0, 1]), np.array([], int))
    assert keep.size == 0 and pos.size == 0
