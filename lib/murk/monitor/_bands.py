"""The monitor as the analysis reads it: its estimate's spread per level and whether it is within a factor of two of
the true visibility, its blind-spot width W against a VLM with the paired bootstrap interval and p-values, and
whether a fitted temperature sits at a bound of its search."""

from __future__ import annotations

import warnings
from typing import Iterable, Sequence

import numpy as np
import xarray as xr

from murk.monitor._recalibration import T_BOUNDS
from murk.results import (blind_spot_width, blind_spot_width_side, bootstrap_p_value, equivalence_p_value)


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


def paired_w(v_acc: float, side_acc: str, v_acc_boot: np.ndarray, v_aware: float, side_aware: str,
             v_aware_boot: np.ndarray, ci_level: float, w_margin: float) -> tuple:
    """W = log10(V_acc / V_aware) of the monitor against a VLM, with its paired bootstrap interval and p-values.

    Parameters
    ----------
    v_acc, side_acc : float, str
        The VLM's V_acc in metres and its ``censored_side`` (``""``, ``"below"``, ``"above"``).
    v_acc_boot : numpy.ndarray
        V_acc of each resample (resamples,), metres; NaN where a resample does not cross.
    v_aware, side_aware : float, str
        The monitor's crossing (:func:`murk.monitor.awareness_crossing`) and its side.
    v_aware_boot : numpy.ndarray
        The monitor's crossing in the same resamples (the same draw: paired).
    ci_level : float
        The interval's level (0.95: the 2.5th and 97.5th percentiles of the resampled W).
    w_margin : float
        One sweep level in decades, for the equivalence p-value (NaN: no p-values).

    Returns
    -------
    tuple
        (w, lo, hi, lower, upper, p, p_margin): W (NaN where a crossing is missing or the sides leave it undefined,
        :func:`murk.results.blind_spot_width_side`), its interval (NaN without a defined W), whether it is a lower
        or upper bound, and W's bootstrap p-values against 0 and against a lag of ``w_margin``
        (:func:`murk.results.bootstrap_p_value`, :func:`murk.results.equivalence_p_value`; NaN without a W).

    Examples
    --------
    >>> w = paired_w(8.0, "", np.array([8.0, 16.0, 4.0]), 2.0, "", np.array([2.0, 2.0, 2.0]), 0.95, np.log10(2))
    >>> round(w[0], 3), w[3:5]
    (0.602, (False, False))
    """
    lo_q, hi_q = (1 - ci_level) / 2, 1 - (1 - ci_level) / 2
    wside = str(blind_spot_width_side(side_acc, side_aware))
    w = (float(blind_spot_width(v_acc, v_aware)) if np.isfinite(v_acc) and np.isfinite(v_aware)
         and wside != "undefined" else np.nan)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        wb = np.log10(np.asarray(v_acc_boot, float) / np.asarray(v_aware_boot, float))
        lo, hi = (np.nanquantile(wb, [lo_q, hi_q]) if np.isfinite(w) and np.isfinite(wb).any()
                  else (np.nan, np.nan))
    p, p_margin = ((float(bootstrap_p_value(wb, 0.0)), float(equivalence_p_value(wb, w_margin)))
                   if np.isfinite(w) and np.isfinite(w_margin) else (np.nan, np.nan))
    return w, lo, hi, wside == "above", wside == "below", p, p_margin


def held_out_units(calibration: np.ndarray, unit_image: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The question units of a model's test half, and the test image each belongs to.

    Parameters
    ----------
    calibration : numpy.ndarray
        bool (own images,): True for an image of the calibration half (:func:`murk.monitor.model_halves`).
    unit_image : numpy.ndarray
        int (units,): each question unit's image, as a position among the model's own images
        (:func:`murk.results.question_scores`).
    test : numpy.ndarray
        int, sorted: the positions of the test half's images among the model's own images.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        The units of test images (positions among the units) and, for each, its image's position in ``test`` (the
        index into a draw over the test images).

    Examples
    --------
    >>> held_out_units(np.array([True, False, False]), np.array([0, 1, 2, 0, 1, 2]), np.array([1, 2]))
    (array([1, 2, 4, 5]), array([0, 1, 0, 1]))
    """
    keep = ~np.asarray(calibration)[unit_image]
    return np.flatnonzero(keep), np.searchsorted(test, np.asarray(unit_image)[keep])
