"""Metrics of the analysis (spec Section III): NumPy kernels + xarray wrappers.

Kernels work on the **last axis** of NumPy arrays and are vectorised over the
leading axes; the wrappers take an :class:`xarray.DataArray` and a ``dim=``.
Missing values are NaN and are skipped (image-level means over the images
present).

Contents
--------
bootstrap_indices          paired percentile bootstrap: one (B, n) index draw
bootstrap_resample_means   resampled means, a named ``bootstrap`` dimension
bootstrap_mean             mean with percentile interval (Efron & Tibshirani)
crossing_visibility        V where a signal first reaches its mid-way value
blind_spot_width           W = log10(V_acc / V_aware), spec Eq. (2)
accuracy                   fraction of correct answers
expected_calibration_error ten equal-width confidence bins (Guo et al. 2017)
auroc                      confidence as a detector of correct answers

Constants (spec Section III, Table III; ``analysis:`` of ``data/config.yaml``):
1000 resamples for per-condition values, 2000 for crossing points, seed 0,
95 % intervals; crossings censored at the last sweep level, 1.953125 m.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable

import numpy as np
import xarray as xr
from scipy.stats import rankdata

__all__ = [
    "CENSOR_M",
    "bootstrap_indices",
    "bootstrap_resample_means",
    "bootstrap_mean",
    "crossing_visibility",
    "crossing_visibility_da",
    "blind_spot_width",
    "accuracy",
    "expected_calibration_error",
    "auroc",
]

#: Visibility (m) at which a crossing that never happens is censored: the last
#: level of the sweep, 250 m / 2**7 (spec Section III, Table III: "1.95 m").
CENSOR_M = 1.953125


# ----------------------------------------------------------------------------- bootstrap


def bootstrap_indices(n: int, n_resamples: int, seed: int | None) -> np.ndarray:
    """Indices of a nonparametric bootstrap over ``n`` images.

    For a *paired* bootstrap the caller draws these once and reuses them for
    every model, arm, level and task, so that differences between them are
    resampled together.

    Parameters
    ----------
    n : int
        Number of images (>= 1).
    n_resamples : int
        Number of resamples B (spec Section III: 1000 for per-condition
        values, 2000 for crossing points).
    seed : int
        Seed of ``numpy.random.default_rng`` (config ``analysis.bootstrap_seed``).

    Returns
    -------
    numpy.ndarray
        Shape (B, n), int64, values in ``[0, n)``: row b lists the positions
        drawn with replacement in resample b
        (``default_rng(seed).integers(0, n, size=(B, n))``).

    Raises
    ------
    ValueError
        If ``n < 1`` or ``n_resamples < 1``.
    """
    n, n_resamples = int(n), int(n_resamples)
    if n < 1 or n_resamples < 1:
        raise ValueError(f"need n >= 1 and n_resamples >= 1, got n={n}, n_resamples={n_resamples}")
    return np.random.default_rng(seed).integers(0, n, size=(n_resamples, n), dtype=np.int64)


def _resample_means(x: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """NaN-aware means of ``x`` (..., n) over resamples ``indices`` (B, n) -> (..., B).

    Equivalent to ``np.nanmean(x[..., indices], axis=-1)`` but computed as a
    product with the (B, n) matrix of draw counts, so memory stays
    O(size(x) + B * n) instead of O(size(x) * B).
    """
    n = x.shape[-1]
    B = indices.shape[0]
    flat = (np.arange(B, dtype=np.int64)[:, None] * n + indices).ravel()
    counts = np.bincount(flat, minlength=B * n).reshape(B, n).astype(np.float64)
    valid = ~np.isnan(x)
    sums = np.where(valid, x, 0.0) @ counts.T
    numbers = valid.astype(np.float64) @ counts.T
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(numbers > 0, sums / numbers, np.nan)


def bootstrap_resample_means(
    da: xr.DataArray, dim: Hashable = "image", indices: np.ndarray | None = None
) -> xr.DataArray:
    """Means over ``dim`` of each bootstrap resample, as a ``bootstrap`` dimension.

    Parameters
    ----------
    da : xarray.DataArray
        Values with dimension ``dim`` of length n (e.g. correct 0/1, a
        confidence in [0, 1]); NaN = missing, skipped.
    dim : hashable, default "image"
        Dimension resampled and reduced.
    indices : numpy.ndarray, optional
        Shape (B, n) int from :func:`bootstrap_indices`; reuse the same array
        for paired comparisons. Default: 1000 resamples, seed 0.

    Returns
    -------
    xarray.DataArray
        float64, dims of ``da`` without ``dim`` plus a trailing ``bootstrap``
        (length B); NaN where a resample holds no valid value.

    Raises
    ------
    ValueError
        If ``indices`` is not (B, n) or holds positions outside ``[0, n)``.
    """
    n = da.sizes[dim]
    if indices is None:
        indices = bootstrap_indices(n, 1000, 0)
    indices = np.asarray(indices)
    if indices.ndim != 2 or indices.shape[1] != n:
        raise ValueError(f"indices must have shape (B, {n}) for {dim!r} of length {n}, got {indices.shape}")
    if indices.size and (indices.min() < 0 or indices.max() >= n):
        raise ValueError(f"indices must lie in [0, {n})")
    out = xr.apply_ufunc(
        _resample_means,
        da.astype(np.float64),
        kwargs={"indices": indices},
        input_core_dims=[[dim]],
        output_core_dims=[["bootstrap"]],
        dask="forbidden",
        keep_attrs=True,
    )
    return out.assign_coords(bootstrap=np.arange(indices.shape[0]))


def bootstrap_mean(
    da: xr.DataArray,
    dim: Hashable = "image",
    n_resamples: int = 1000,
    seed: int | None = 0,
    ci: float = 0.95,
    indices: np.ndarray | None = None,
) -> xr.Dataset:
    """Image-level mean with a percentile bootstrap interval (spec Section III).

    Parameters
    ----------
    da : xarray.DataArray
        Values with dimension ``dim``; NaN = missing, skipped (nanmean).
    dim : hashable, default "image"
        Dimension averaged and resampled.
    n_resamples : int, default 1000
        B (spec Section III: 1000 per-condition, 2000 for crossing points).
    seed : int, default 0
        Seed of :func:`bootstrap_indices` (config ``analysis.bootstrap_seed``).
    ci : float, default 0.95
        Interval level (config ``analysis.ci_level``), in (0, 1).
    indices : numpy.ndarray, optional
        (B, n) indices to reuse for a paired bootstrap; overrides
        ``n_resamples`` and ``seed``.

    Returns
    -------
    xarray.Dataset
        Variables ``mean`` (nanmean of ``da`` over ``dim``), ``lo`` and ``hi``
        (the ``(1 - ci)/2`` and ``(1 + ci)/2`` percentiles of the resampled
        means, NumPy's linear interpolation, NaN resamples skipped), each with
        the dims of ``da`` without ``dim``, float64. Attributes record B, the
        seed and ``ci``.

    Raises
    ------
    ValueError
        If ``ci`` is not in (0, 1) or ``indices`` has the wrong shape.
    """
    if not 0.0 < ci < 1.0:
        raise ValueError(f"ci must lie in (0, 1), got {ci}")
    if indices is None:
        indices = bootstrap_indices(da.sizes[dim], n_resamples, seed)
    res = bootstrap_resample_means(da, dim, indices)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices give NaN
        mean = da.astype(np.float64).mean(dim, skipna=True)
        q = np.nanpercentile(res.values, [50 * (1 - ci), 50 * (1 + ci)], axis=-1)
    dims = res.dims[:-1]
    coords = {k: v for k, v in mean.coords.items()}
    ds = xr.Dataset(
        {"mean": mean, "lo": (dims, q[0]), "hi": (dims, q[1])},
        coords=coords,
        attrs={"n_resamples": int(indices.shape[0]), "seed": -1 if seed is None else int(seed), "ci": float(ci)},
    )
    return ds


# ----------------------------------------------------------------------------- crossing, W


def crossing_visibility(
    visibility_m: np.ndarray,
    values: np.ndarray,
    clean_value: np.ndarray | float,
    floor: np.ndarray | float,
    censor_m: float = CENSOR_M,
) -> tuple[np.ndarray, np.ndarray]:
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
      no visibility, so there is nothing to interpolate from).
    * NaN values count as not reached; if the previous level is NaN, the last
      non-NaN level before k is used, and if there is none, ``V[k]``.
    * If m is never reached, V = ``censor_m`` and ``censored`` is True; a W
      computed from it is a bound.
    * If ``a0 == a_floor`` (no signal) or ``a0`` / ``a_floor`` is NaN, V is
      NaN and ``censored`` False.

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
    censor_m : float, default 1.953125
        V (m) reported when the mid-way value is never reached (spec: "censored
        at 1.95 m", the last sweep level).

    Returns
    -------
    v_cross_m : numpy.ndarray
        Shape ``values.shape[:-1]``, float64, metres.
    censored : numpy.ndarray
        Shape ``values.shape[:-1]``, bool.

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
    v = np.where(censored, float(censor_m), v)
    v = np.where(no_signal, np.nan, v)
    return v, censored


def crossing_visibility_da(
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
        ``v_cross_m`` (float64, units m) and ``censored`` (bool), with the dims
        of ``da`` without ``dim`` (broadcast with ``clean_value``/``floor``).

    Raises
    ------
    ValueError
        As :func:`crossing_visibility`.
    """
    da = da.sortby(dim, ascending=False)
    vis = da[dim].values
    v, c = xr.apply_ufunc(
        lambda y, a0, fl: crossing_visibility(vis, y, a0, fl, censor_m),
        da,
        xr.DataArray(clean_value) if not isinstance(clean_value, xr.DataArray) else clean_value,
        xr.DataArray(floor) if not isinstance(floor, xr.DataArray) else floor,
        input_core_dims=[[dim], [], []],
        output_core_dims=[[], []],
    )
    v.attrs = {"units": "m", "long_name": "crossing visibility"}
    c.attrs = {"long_name": "crossing censored at the last sweep level"}
    return xr.Dataset({"v_cross_m": v, "censored": c})


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


def _pairs(confidence, correct, unit_interval: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    conf = np.asarray(confidence, dtype=np.float64)
    corr = np.asarray(correct, dtype=np.float64)
    conf, corr = np.broadcast_arrays(conf, corr)
    if conf.ndim == 0:
        conf, corr = conf[None], corr[None]
    valid = ~(np.isnan(conf) | np.isnan(corr))
    if unit_interval and np.any((conf[valid] < 0) | (conf[valid] > 1)):
        raise ValueError("confidence must lie in [0, 1]")
    if np.any((corr[valid] != 0) & (corr[valid] != 1)):
        raise ValueError("correct must be bool or 0/1 (NaN for missing)")
    return conf, corr, valid


def _ece_kernel(confidence, correct, n_bins: int = 10) -> np.ndarray:
    conf, corr, valid = _pairs(confidence, correct)
    lead = conf.shape[:-1]
    rows = int(np.prod(lead, dtype=np.int64))
    conf2 = conf.reshape(rows, -1)
    corr2 = corr.reshape(rows, -1)
    valid2 = valid.reshape(rows, -1)
    b = np.clip(np.floor(np.where(valid2, conf2, 0.0) * n_bins), 0, n_bins - 1).astype(np.int64)
    flat = (np.arange(rows)[:, None] * n_bins + b)[valid2]
    size = rows * n_bins
    count = np.bincount(flat, minlength=size).reshape(rows, n_bins)
    sum_conf = np.bincount(flat, weights=conf2[valid2], minlength=size).reshape(rows, n_bins)
    sum_corr = np.bincount(flat, weights=corr2[valid2], minlength=size).reshape(rows, n_bins)
    total = count.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        ece = np.abs(sum_corr - sum_conf).sum(axis=-1) / total  # sum_b n_b/N |acc_b - conf_b|
    ece = np.where(total > 0, ece, np.nan)
    return ece.reshape(lead)


def _auroc_kernel(confidence, correct) -> np.ndarray:
    conf, corr, valid = _pairs(confidence, correct, unit_interval=False)
    conf = np.where(valid, conf, np.nan)
    ranks = rankdata(conf, axis=-1, nan_policy="omit")  # average ranks for ties, NaN kept
    pos = valid & (corr == 1)
    n_pos = pos.sum(axis=-1).astype(np.float64)
    n_neg = (valid & (corr == 0)).sum(axis=-1).astype(np.float64)
    rank_sum = np.where(pos, ranks, 0.0).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        auc = (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
    return np.where((n_pos > 0) & (n_neg > 0), auc, np.nan)


def _wrap(kernel, confidence, correct, dim, **kwargs):
    if isinstance(confidence, xr.DataArray) or isinstance(correct, xr.DataArray):
        dims = [dim] if isinstance(dim, str) or not isinstance(dim, (list, tuple)) else list(dim)
        conf = confidence if isinstance(confidence, xr.DataArray) else xr.DataArray(confidence)
        corr = correct if isinstance(correct, xr.DataArray) else xr.DataArray(correct)
        conf, corr = xr.broadcast(conf.astype(np.float64), corr.astype(np.float64))
        if len(dims) > 1:  # pool several dims (e.g. image and question)
            conf = conf.stack(_pooled=dims)
            corr = corr.stack(_pooled=dims)
            dims = ["_pooled"]
        return xr.apply_ufunc(
            lambda a, b: kernel(a, b, **kwargs), conf, corr, input_core_dims=[dims, dims]
        )
    return kernel(confidence, correct, **kwargs)


def expected_calibration_error(
    confidence: xr.DataArray | np.ndarray,
    correct: xr.DataArray | np.ndarray,
    n_bins: int = 10,
    dim: Hashable | list = "image",
) -> xr.DataArray | np.ndarray:
    """Expected calibration error with equal-width bins (spec Section III).

    ``ECE = sum_b (n_b / N) * |acc_b - conf_b|`` over ``n_bins`` bins
    ``[k/n_bins, (k+1)/n_bins)``, k = 0 .. n_bins - 1, the last one closed
    (confidence 1.0 falls in the last bin, 0.0 in the first), bin index
    ``min(floor(c * n_bins), n_bins - 1)``; ``acc_b`` and ``conf_b`` are the
    mean correctness and mean confidence in bin b, N the number of valid
    pairs. Ten bins as in Guo et al. (2017) and Naeini et al. (2015), spec
    refs [30, 31]. (scikit-learn's ``calibration_curve`` puts a confidence on
    an inner edge into the lower bin; here it goes into the upper one, so
    that e.g. a verbalized 0.30 lies in [0.3, 0.4).)

    Parameters
    ----------
    confidence : numpy.ndarray or xarray.DataArray
        Confidence in [0, 1], shape (..., n) for NumPy (last axis pooled);
        NaN = missing.
    correct : numpy.ndarray or xarray.DataArray
        Bool or 0/1, broadcastable against ``confidence``; NaN = missing.
        A pair with either value NaN is dropped.
    n_bins : int, default 10
        Number of equal-width bins (spec: ten).
    dim : hashable or list, default "image"
        For DataArrays, the dimension(s) pooled (a list pools several, e.g.
        ``["image", "question"]``).

    Returns
    -------
    numpy.ndarray or xarray.DataArray
        float64 in [0, 1], shape ``(...)``; NaN where no valid pair exists.

    Raises
    ------
    ValueError
        If a confidence lies outside [0, 1] or ``correct`` is not 0/1.
    """
    if int(n_bins) < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    return _wrap(_ece_kernel, confidence, correct, dim, n_bins=int(n_bins))


def auroc(
    confidence: xr.DataArray | np.ndarray,
    correct: xr.DataArray | np.ndarray,
    dim: Hashable | list = "image",
) -> xr.DataArray | np.ndarray:
    """Area under the ROC curve of the confidence as a detector of correct answers.

    Computed as the Mann-Whitney statistic: the probability that a correct
    answer has a higher confidence than a wrong one, ties counted 1/2, which
    equals scikit-learn's ``roc_auc_score(correct, confidence)`` (spec
    Section III, ref [62]).

    Parameters
    ----------
    confidence : numpy.ndarray or xarray.DataArray
        Confidence (any real score), shape (..., n) for NumPy; NaN = missing.
    correct : numpy.ndarray or xarray.DataArray
        Bool or 0/1, broadcastable; NaN = missing. Pairs with a NaN dropped.
    dim : hashable or list, default "image"
        For DataArrays, the dimension(s) pooled.

    Returns
    -------
    numpy.ndarray or xarray.DataArray
        float64 in [0, 1], shape ``(...)``; NaN where only one class (or
        nothing) is present.

    Raises
    ------
    ValueError
        If ``correct`` is not 0/1.
    """
    return _wrap(_auroc_kernel, confidence, correct, dim)
