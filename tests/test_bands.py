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
