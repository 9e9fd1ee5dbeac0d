"""The monitor's estimate on the sweep as the analysis reads it: its spread per level and whether it is within a
factor of two of the true visibility; and whether a fitted temperature sits at a bound of its search."""

from __future__ import annotations

import warnings
from typing import Iterable, Sequence

import numpy as np
import xarray as xr

from murk.monitor._recalibration import T_BOUNDS


def vhat_band(vhat: xr.DataArray, visibility_m: np.ndarray, arms: Sequence[str]) -> dict:
    """One monitor mode's V̂ on the sweep, per arm: its P10, P50 and P90 over images and whether each estimate is
    within a factor of two of V.

    Parameters
    ----------
    vhat : xarray.DataArray
        V̂ in metres of one mode and task, dims including ``arm``, ``level`` (0: clean, then the sweep) and
        ``image`` (the cube's ``value`` at ``readout="visibility_hat_m"``).
    visibility_m : numpy.ndarray
        The visibility of each sweep level (the cube's ``visibility_m`` without level 0), metres.
    arms : sequence of str
        The arms read (the physical arms).

    Returns
    -------
    dict
        arm -> (percentiles, shape (3, level): P10, P50, P90 over images, NaN-skipping; within, bool
        (level, image): ``|log2(V̂ / V)| ≤ 1``, a missing V̂ counting as not within).

    Examples
    --------
    >>> v = xr.DataArray([[[np.inf, np.inf], [9.0, 30.0], [2.0, np.nan]]], dims=("arm", "level", "image"),
    ...                  coords={"arm": ["fog"]})
    >>> q, within = vhat_band(v, np.array([10.0, 2.0]), ["fog"])["fog"]
    >>> q[1].tolist(), within.tolist()
    ([19.5, 2.0], [[True, False], [True, False]])
    """
    out = {}
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        for arm in arms:
            sweep = vhat.sel(arm=arm).isel(level=slice(1, None)).transpose("level", "image").values
            out[arm] = (np.nanpercentile(sweep, [10, 50, 90], axis=-1),
                        np.abs(np.log2(sweep / np.asarray(visibility_m)[:, None])) <= 1)
    return out


def at_temperature_bound(temps: Iterable[float]) -> bool:
    """Whether a fitted temperature lies at a bound of its search (:data:`murk.monitor.T_BOUNDS`, to 0.1 %).

    There the likelihood is flat (every answer right, or the confidences at their floor), so the temperature is
    not an estimate.

    Examples
    --------
    >>> at_temperature_bound([1.3]), at_temperature_bound([1.3, T_BOUNDS[1]])
    (False, True)
    """
    return any(min(abs(t / b - 1) for b in T_BOUNDS) < 1e-3 for t in temps)
