"""Metrics of the analysis over the sweep (spec Section III): accuracy, crossing visibility, the blind-spot width W
and monotonicity; NumPy kernels + xarray wrappers.

Kernels work on the **last axis** of NumPy arrays and are vectorised over the
leading axes; the wrappers take an :class:`xarray.DataArray` and a ``dim=``.
Missing values are NaN and are skipped (image-level means over the images
present). The other metrics of the analysis, by concept: the bootstrap
(:mod:`murk.results._bootstrap`), p-values and Holm (:mod:`murk.results._multiplicity`), calibration
(:mod:`murk.results._calibration`: ECE, reliability) and selective prediction
(:mod:`murk.results._selective`: AUROC, risk-coverage, AURC).

Contents
--------
level_step_decades         spacing of a sweep's levels in decades of visibility
crossing_visibility        V where a signal first reaches its mid-way value (+ side of a bound)
blind_spot_width           W = log10(V_acc / V_aware), spec Eq. (2)
blind_spot_width_side      side of the bound on W from the sides of its crossings
accuracy                   fraction of correct answers
monotonicity               wrong-way moves of a signal series, raw and > 2 SE

Precision: kernels compute in float64 and never round their input; the cube
stores float64, so a confidence 0.8999996 stays below the bin edge 0.9 and
0.9999999 stays above 0.9999996.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable

import numpy as np
import xarray as xr

__all__ = ["CENSOR_M", "level_step_decades", "crossing_visibility", "blind_spot_width", "blind_spot_width_side",
           "accuracy", "monotonicity", "monotonicity_da"]

#: Visibility (m) at which a crossing that never happens is censored: the last
#: level of the sweep, 250 m / 2**7 (spec Section III, Table III: "1.95 m").
CENSOR_M = 1.953125


def level_step_decades(visibility_m) -> float:
    """The spacing of a sweep's levels in decades of visibility: the median of ``|diff(log10 V)|``.

    The study's sweep halves the visibility from level to level (spec Sec. III), a step of
    ``log10(2)`` = 0.301 decades: a W smaller than it is a lag of less than one level.

    Parameters
    ----------
    visibility_m : array_like of float, shape (L,)
        The sweep's visibilities (m), L >= 2 (the design's ``visibility_m`` without the clean level).

    Returns
    -------
    float
        Decades, > 0.

    Raises
    ------
    ValueError
        Fewer than two finite positive visibilities, or all equal.

    >>> round(level_step_decades([250.0, 125.0, 62.5]), 3)
    0.301
    """
    v = np.asarray(visibility_m, dtype=np.float64).ravel()
    v = v[np.isfinite(v) & (v > 0)]
    step = float(np.median(np.abs(np.diff(np.log10(v))))) if v.size >= 2 else float("nan")
    if not (np.isfinite(step) and step > 0):
        raise ValueError(f"a sweep needs at least two distinct positive visibilities, got {visibility_m!r}")
    return step


# ----------------------------------------------------------------------------- crossing, W


def crossing_visibility(
    visibility_m: np.ndarray,
    values: np.ndarray,
    clean_value: np.ndarray | float,
    floor: np.ndarray | float,
    censor_m: float | None = None,
    *,
    return_side: bool = False,
) -> tuple[np.ndarray, np.ndarray] | tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Visibility at which a signal first reaches its mid-way value (spec Section III).

    With ``a0`` the clean value and ``a_floor`` the floor (chance for accuracy
    and confidence, 1 for the abstain rate) the mid-way value is
    ``m = (a0 + a_floor) / 2``. Scanning the levels from clear to murky, the
    first level k at which the signal has *reached* m (``value <= m`` when
    ``a0 > a_floor``, a falling signal; ``value >= m`` when ``a0 < a_floor``, a
    rising one) is found, and V is interpolated linearly in ``log V`` between
    the previous level and level k::

        log V = log V[k-1] + (m - y[k-1]) / (y[k] - y[k-1]) * (log V[k] - log V[k-1])

    Conventions:

    * If level 0 already reached m, the result is ``V[0]`` (the clean image has
      no visibility, so there is nothing to interpolate from): the crossing lies
      between the clean image and the first level, so ``V[0]`` is a bound *from
      below* (the true crossing is at or above it; side ``"above"``, printed
      ``≥ 250``). ``censored`` stays False for it (it keeps its historical
      meaning, "not reached within the sweep"); the side tells.
    * NaN values count as not reached; if the previous level is NaN, the last
      non-NaN level before k is used, and if there is none, ``V[k]`` (side
      ``"above"`` as well when no level before k has a value).
    * If m is never reached, V = ``censor_m``, ``censored`` is True and the side
      is ``"below"``: ``censor_m`` is a bound *from above* (the true crossing is
      below the last level; printed ``≤ 1.95``). A W computed from it is a bound
      (:func:`blind_spot_width_side`).
    * If ``a0 == a_floor`` (no signal) or ``a0`` / ``a_floor`` is NaN, V is
      NaN, ``censored`` False and the side ``""``.

    Parameters
    ----------
    visibility_m : array_like
        Shape (L,), the visibility V of each level in metres, strictly
        decreasing (clear to murky; spec Table III: 250 m ... 1.953125 m).
    values : array_like
        Shape (..., L), the signal at each level (e.g. accuracy in [0, 1]).
    clean_value : array_like or float
        ``a0``, broadcastable to ``values.shape[:-1]``.
    floor : array_like or float
        ``a_floor``, broadcastable to ``values.shape[:-1]`` (config
        ``analysis.chance``: 0.25 for t2, 0.5 for t3; 1 for abstain rates).
    censor_m : float, optional
        V (m) reported when the mid-way value is never reached; default the
        last level given, ``visibility_m[-1]`` (spec: "censored at 1.95 m", the
        last sweep level, :data:`CENSOR_M`; a design whose sweep ends earlier,
        :mod:`murk.protocol`, is censored at its own last level).
    return_side : bool, default False
        Also return the side of each bound.

    Returns
    -------
    v_cross_m : numpy.ndarray
        Shape ``values.shape[:-1]``, float64, metres.
    censored : numpy.ndarray
        Shape ``values.shape[:-1]``, bool: not reached within the sweep (side
        ``"below"``).
    side : numpy.ndarray, only with ``return_side``
        Shape ``values.shape[:-1]``, str (``<U5``): ``""`` (an interpolated
        crossing, or NaN), ``"below"`` (never reached: the true crossing is at
        most ``censor_m``) or ``"above"`` (reached at the first level with no
        clearer level to interpolate from: at least ``V[0]``).

    Raises
    ------
    ValueError
        If ``visibility_m`` is not 1-D, positive and strictly decreasing, or
        its length differs from the last axis of ``values``.

    Examples
    --------
    >>> v, c = crossing_visibility([100.0, 10.0], [0.9, 0.5], 1.0, 0.25)
    >>> round(float(v), 4), bool(c)   # m = 0.625: 11/16 of the way in log V
    (20.5353, False)
    """
    vis = np.asarray(visibility_m, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    if vis.ndim != 1 or vis.size == 0:
        raise ValueError(f"visibility_m must be 1-D and non-empty, got shape {vis.shape}")
    if not (np.all(vis > 0) and np.all(np.diff(vis) < 0)):
        raise ValueError("visibility_m must be positive and strictly decreasing (clear to murky)")
    if y.ndim == 0 or y.shape[-1] != vis.size:
        raise ValueError(f"the last axis of values must have length {vis.size} (levels), got shape {y.shape}")
    lead = y.shape[:-1]
    a0 = np.broadcast_to(np.asarray(clean_value, dtype=np.float64), lead)
    fl = np.broadcast_to(np.asarray(floor, dtype=np.float64), lead)
    mid = (a0 + fl) / 2
    falling = (a0 > fl)[..., None]
    rising = (a0 < fl)[..., None]
    with np.errstate(invalid="ignore"):
        reached = (falling & (y <= mid[..., None])) | (rising & (y >= mid[..., None]))
    # NaN values compare False: not reached
    any_reached = reached.any(axis=-1)
    k = np.argmax(reached, axis=-1)

    L = vis.size
    logv = np.log(vis)
    pos = np.arange(L)
    # last non-NaN level strictly before k
    before = (~np.isnan(y)) & (pos < k[..., None])
    prev = np.where(before.any(axis=-1), L - 1 - np.argmax(before[..., ::-1], axis=-1), -1)

    yk = np.take_along_axis(y, k[..., None], axis=-1)[..., 0]
    has_prev = prev >= 0
    prev_c = np.where(has_prev, prev, 0)
    yp = np.take_along_axis(y, prev_c[..., None], axis=-1)[..., 0]
    with np.errstate(invalid="ignore", divide="ignore"):
        t = (mid - yp) / (yk - yp)
        logv_cross = logv[prev_c] + t * (logv[k] - logv[prev_c])
    v = np.where(has_prev, np.exp(logv_cross), vis[k])

    no_signal = ~(falling[..., 0] | rising[..., 0])  # a0 == floor, or NaN
    censored = ~any_reached & ~no_signal
    v = np.where(censored, float(vis[-1] if censor_m is None else censor_m), v)
    v = np.where(no_signal, np.nan, v)
    if not return_side:
        return v, censored
    at_first = any_reached & ~has_prev & ~no_signal
    side = np.where(censored, "below", np.where(at_first, "above", "")).astype("<U5")
    return v, censored, side


def blind_spot_width_side(acc_side, aware_side) -> np.ndarray:
    """Side of the bound on ``W = log10(V_acc / V_aware)`` from the sides of its crossings.

    A crossing censored ``"below"`` (true V at most the printed value) or
    ``"above"`` (at least) moves W as follows: an awareness crossing below makes
    W a lower bound (``"above"``: W at least the printed value, ``≥``); an
    awareness crossing above makes it an upper bound (``"below"``, ``≤``); an
    accuracy crossing below gives ``≤`` and above gives ``≥``. Two bounds in the
    same direction give that bound (e.g. accuracy already crossed before 250 m
    and awareness never crossing: ``W ≥ log10(250 / 1.95)``); two opposite ones
    leave W undefined, ``"undefined"`` (e.g. both crossings censored at the end
    of the sweep, the spec's "both censored" case).

    Parameters
    ----------
    acc_side, aware_side : array_like of str
        ``""``, ``"below"`` or ``"above"`` (:func:`crossing_visibility` with
        ``return_side=True``); broadcastable.

    Returns
    -------
    numpy.ndarray of str (``<U9``)
        ``""`` (W exact), ``"above"`` (W is a lower bound, ``≥``), ``"below"``
        (an upper bound, ``≤``) or ``"undefined"``.

    Examples
    --------
    >>> blind_spot_width_side(["", "", "below", "below", "above"], ["below", "", "", "below", "below"]).tolist()
    ['above', '', 'below', 'undefined', 'above']
    """
    a, w = np.broadcast_arrays(np.asarray(acc_side, dtype=str), np.asarray(aware_side, dtype=str))
    d_acc = np.where(a == "below", -1, np.where(a == "above", 1, 0))
    d_aw = np.where(w == "below", 1, np.where(w == "above", -1, 0))
    conflict = (d_acc * d_aw) < 0
    d = np.sign(d_acc + d_aw)
    out = np.where(d > 0, "above", np.where(d < 0, "below", ""))
    return np.where(conflict, "undefined", out).astype("<U9")


def _crossing_visibility_da(
    da: xr.DataArray,
    clean_value: xr.DataArray | float,
    floor: xr.DataArray | float,
    dim: Hashable = "visibility_m",
    censor_m: float = CENSOR_M,
) -> xr.Dataset:
    """xarray wrapper of :func:`crossing_visibility`.

    Parameters
    ----------
    da : xarray.DataArray
        Signal with dimension ``dim``, whose coordinate is the visibility in
        metres (any order; it is sorted from clear to murky here).
    clean_value, floor : xarray.DataArray or float
        ``a0`` and ``a_floor``, broadcastable against ``da`` without ``dim``.
    dim : hashable, default "visibility_m"
        The visibility dimension.
    censor_m : float, default 1.953125
        See :func:`crossing_visibility`.

    Returns
    -------
    xarray.Dataset
        ``v_cross_m`` (float64, units m), ``censored`` (bool) and
        ``censored_side`` (str: ``""``, ``"below"``, ``"above"``; see
        :func:`crossing_visibility`), with the dims of ``da`` without ``dim``
        (broadcast with ``clean_value``/``floor``).

    Raises
    ------
    ValueError
        As :func:`crossing_visibility`.
    """
    da = da.sortby(dim, ascending=False)
    vis = da[dim].values
    v, c, side = xr.apply_ufunc(
        lambda y, a0, fl: crossing_visibility(vis, y, a0, fl, censor_m, return_side=True),
        da,
        xr.DataArray(clean_value) if not isinstance(clean_value, xr.DataArray) else clean_value,
        xr.DataArray(floor) if not isinstance(floor, xr.DataArray) else floor,
        input_core_dims=[[dim], [], []],
        output_core_dims=[[], [], []],
    )
    v.attrs = {"units": "m", "long_name": "crossing visibility"}
    c.attrs = {"long_name": "crossing censored at the last sweep level"}
    side.attrs = {"long_name": "side of the bound: '' exact, 'below' true crossing at most v_cross_m "
                               "(never reached), 'above' at least v_cross_m (reached at the first level)"}
    return xr.Dataset({"v_cross_m": v, "censored": c, "censored_side": side})


def blind_spot_width(v_acc_m: np.ndarray | float, v_aware_m: np.ndarray | float) -> np.ndarray:
    """Blind-spot width ``W = log10(V_acc / V_aware)`` in decades (spec Eq. (2)).

    W > 0: the awareness signal falls later (in murkier conditions) than
    accuracy; W = 0: together. Invariant to the global depth scale. If
    ``V_aware`` is censored (at the last level), W is a lower bound.

    Parameters
    ----------
    v_acc_m : array_like
        Crossing visibility of accuracy, metres.
    v_aware_m : array_like
        Crossing visibility of an awareness signal, metres; broadcastable
        against ``v_acc_m``.

    Returns
    -------
    numpy.ndarray
        float64, the broadcast shape; NaN where an input is NaN.
        (xarray inputs give a DataArray by NumPy's ufunc dispatch.)

    Raises
    ------
    ValueError
        If a (non-NaN) visibility is not positive.
    """
    a = np.asarray(v_acc_m, dtype=np.float64) if not isinstance(v_acc_m, xr.DataArray) else v_acc_m
    b = np.asarray(v_aware_m, dtype=np.float64) if not isinstance(v_aware_m, xr.DataArray) else v_aware_m
    if np.any(np.asarray(a) <= 0) or np.any(np.asarray(b) <= 0):
        raise ValueError("visibilities must be positive (metres)")
    return np.log10(a / b)


# ----------------------------------------------------------------------------- accuracy, ECE, AUROC


def _nanmean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(x, axis=axis)


def accuracy(correct: xr.DataArray | np.ndarray, dim: Hashable | None = "image") -> xr.DataArray | np.ndarray:
    """Fraction of correct answers (spec Section III), NaN = missing, skipped.

    Parameters
    ----------
    correct : xarray.DataArray or numpy.ndarray
        Bool or 0/1 float; NaN marks a missing answer.
    dim : hashable or sequence, default "image"
        Dimension(s) reduced for a DataArray (None: all). NumPy input is
        reduced over its last axis (the kernel convention).

    Returns
    -------
    xarray.DataArray or numpy.ndarray
        float64 in [0, 1]; NaN where nothing is present.
    """
    if isinstance(correct, xr.DataArray):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return correct.astype(np.float64).mean(dim, skipna=True)
    return _nanmean(np.asarray(correct, dtype=np.float64), axis=-1)


# ----------------------------------------------------------------------------- monotonicity


def monotonicity(x: np.ndarray, direction: int = -1, n_se: float = 2.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Wrong-way moves of a signal series along the sweep (spec Sec. III, "Monotonicity").

    For each pair of adjacent levels (k, k+1), going murkier, the paired
    image-level differences ``d_i = x[k+1, i] - x[k, i]`` (images present at
    both levels) have mean ``dbar`` and standard error
    ``se = std(d, ddof=1) / sqrt(m)``. The move is *wrong* when it goes
    against the expected direction (``direction * dbar < 0``: accuracy or
    confidence rising, abstention falling), and *wrong beyond noise* when in
    addition ``|dbar| > n_se * se`` (the noise-aware count, a post-hoc
    addition of the spec). Fractions are over the pairs with a defined mean
    difference.

    Parameters
    ----------
    x : numpy.ndarray
        Shape (..., L, n): L levels ordered clear to murky (e.g. clean, then
        250 ... 1.953125 m), n images; NaN = missing.
    direction : {-1, +1}, default -1
        Expected sign of the change going murkier: -1 for accuracy and
        confidence (falling), +1 for abstain rates (rising).
    n_se : float, default 2.0
        Threshold in standard errors of the paired difference.

    Returns
    -------
    raw, beyond_noise : numpy.ndarray
        Shape (...), float64 in [0, 1]: fraction of pairs moving the wrong
        way, and of pairs moving the wrong way by more than ``n_se`` SE. NaN
        if no pair is defined.
    n_pairs : numpy.ndarray
        Shape (...), int64: pairs with a defined mean difference (L - 1 when
        nothing is missing).

    Raises
    ------
    ValueError
        If ``direction`` is not -1 or +1, or ``x`` has fewer than 2 axes.

    Examples
    --------
    >>> x = np.array([[1.0, 1.0], [0.5, 0.5], [0.6, 0.6]])  # 3 levels, 2 images
    >>> raw, sig, k = monotonicity(x)
    >>> float(raw), float(sig), int(k)   # 0.5 -> 0.6 rises; se = 0, so beyond noise
    (0.5, 0.5, 2)
    """
    if direction not in (-1, 1):
        raise ValueError(f"direction must be -1 or +1, got {direction}")
    x = np.asarray(x, dtype=np.float64)
    if x.ndim < 2:
        raise ValueError(f"x must have shape (..., L, n), got {x.shape}")
    d = x[..., 1:, :] - x[..., :-1, :]                       # (..., L-1, n), NaN where either is missing
    ok = ~np.isnan(d)
    m = ok.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        dbar = np.where(m > 0, np.where(ok, d, 0.0).sum(axis=-1) / m, np.nan)
        var = np.where(ok, (d - dbar[..., None]) ** 2, 0.0).sum(axis=-1) / (m - 1)
        se = np.where(m > 1, np.sqrt(var / m), np.nan)
    defined = m > 0
    wrong = defined & (direction * np.nan_to_num(dbar) < 0)
    # with one image the SE is undefined: not counted beyond noise
    beyond = wrong & (m > 1) & (np.abs(np.nan_to_num(dbar)) > n_se * np.nan_to_num(se, nan=np.inf))
    n_pairs = defined.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        raw = np.where(n_pairs > 0, wrong.sum(axis=-1) / n_pairs, np.nan)
        sig = np.where(n_pairs > 0, beyond.sum(axis=-1) / n_pairs, np.nan)
    return raw, sig, n_pairs.astype(np.int64)


def monotonicity_da(
    da: xr.DataArray, direction: int | xr.DataArray = -1, level_dim: Hashable = "level",
    dim: Hashable = "image", n_se: float = 2.0,
) -> xr.Dataset:
    """xarray wrapper of :func:`monotonicity`.

    Parameters
    ----------
    da : xarray.DataArray
        Image-level values with ``level_dim`` (ordered clear to murky) and
        ``dim``.
    direction : int or xarray.DataArray
        -1 (falling expected) or +1 (rising), or a DataArray of them over
        one of the other dims (e.g. per ``readout``).
    level_dim, dim : hashable
    n_se : float, default 2.0

    Returns
    -------
    xarray.Dataset
        ``raw`` and ``beyond_noise`` (float64 fractions) and ``n_pairs``
        (int64), with the dims of ``da`` without ``level_dim`` and ``dim``.
    """
    def kernel(x, sign):
        sign = np.asarray(sign)
        out = [np.empty(x.shape[:-2]), np.empty(x.shape[:-2]), np.empty(x.shape[:-2], dtype=np.int64)]
        for s_ in (-1, 1):
            sel = np.broadcast_to(sign == s_, x.shape[:-2])
            if sel.any():
                r = monotonicity(x[sel], s_, n_se)
                for o, v in zip(out, r):
                    o[sel] = v
        return tuple(out)

    sign = direction if isinstance(direction, xr.DataArray) else xr.DataArray(int(direction))
    if not np.isin(np.asarray(sign), (-1, 1)).all():
        raise ValueError("direction must be -1 or +1")
    raw, sig, k = xr.apply_ufunc(kernel, da.astype(np.float64), sign,
                                 input_core_dims=[[level_dim, dim], []], output_core_dims=[[], [], []])
    return xr.Dataset({"raw": raw, "beyond_noise": sig, "n_pairs": k})
