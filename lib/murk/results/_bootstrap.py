"""The bootstrap of the analysis (spec Section III, "Uncertainty"): resampling images with replacement, as
indices or as counts drawn once and reused, resampled sums and means, and percentile intervals.

The paired bootstrap
--------------------
All resampling goes through one (B, n) matrix of draw counts
(:func:`bootstrap_counts`): resampled statistics are matrix products of data
with that matrix (or weighted sums), so there is no Python loop over
resamples and the memory is O(data + B n). Reusing one matrix for every
model, arm, level, task and read-out makes the bootstrap *paired*. Because
NumPy's generator fills the (B, n) draw row by row, the first 1000 rows of a
2000-resample draw equal the 1000-resample draw with the same seed: the
per-condition intervals and the crossing intervals share their resamples.

Constants (spec Section III, Table III; ``analysis:`` of ``data/config.yaml``):
1000 resamples for per-condition values, 2000 for crossing points, seed 0,
95 % intervals; crossings censored at the last sweep level, 1.953125 m.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable

import numpy as np
import xarray as xr

__all__ = ["bootstrap_indices", "bootstrap_counts", "counts_from_indices", "resampled_means", "resampled_sums",
           "bootstrap_resample_means", "percentile_interval"]


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


def bootstrap_counts(n: int, n_resamples: int, seed: int | None) -> np.ndarray:
    """How often each image is drawn in each resample of :func:`bootstrap_indices`.

    Parameters
    ----------
    n : int
        Number of images (>= 1).
    n_resamples : int
        Number of resamples B.
    seed : int
        Seed of ``numpy.random.default_rng``.

    Returns
    -------
    numpy.ndarray
        Shape (B, n), float64 (small integers, exact); row b counts the draws
        of each position in resample b and sums to n. The same draw as
        ``bootstrap_indices(n, n_resamples, seed)``; the first B' rows equal
        the B'-resample matrix of the same seed.

    Raises
    ------
    ValueError
        As :func:`bootstrap_indices`.

    Examples
    --------
    >>> bootstrap_counts(4, 2, 0).sum(axis=1)
    array([4., 4.])
    """
    return counts_from_indices(bootstrap_indices(n, n_resamples, seed), n)


def counts_from_indices(indices: np.ndarray, n: int | None = None) -> np.ndarray:
    """The (B, n) float64 matrix of draw counts of a (B, n) index draw.

    Raises
    ------
    ValueError
        If ``indices`` is not 2-D or holds positions outside ``[0, n)``.
    """
    idx = np.asarray(indices)
    if idx.ndim != 2:
        raise ValueError(f"indices must be 2-D (B, n), got shape {idx.shape}")
    B, m = idx.shape
    n = m if n is None else int(n)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"indices must lie in [0, {n})")
    flat = (np.arange(B, dtype=np.int64)[:, None] * n + idx).ravel()
    return np.bincount(flat, minlength=B * n).reshape(B, n).astype(np.float64)


def _check_counts(counts: np.ndarray, n: int) -> np.ndarray:
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim != 2 or counts.shape[1] != n:
        raise ValueError(f"counts must have shape (B, {n}), got {counts.shape}")
    return counts


def resampled_sums(x: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted sums and numbers of valid values of every resample.

    Parameters
    ----------
    x : numpy.ndarray
        Shape (..., n), float; NaN = missing (weight 0).
    counts : numpy.ndarray
        Shape (B, n) from :func:`bootstrap_counts`.

    Returns
    -------
    sums, numbers : numpy.ndarray
        Shape (..., B), float64: ``sum_i counts[b, i] x_i`` and
        ``sum_i counts[b, i]`` over the valid ``x_i``.

    Raises
    ------
    ValueError
        If ``counts`` is not (B, n).
    """
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[-1]
    counts = _check_counts(counts, n)
    lead = x.shape[:-1]
    x2 = x.reshape(-1, n)
    valid = ~np.isnan(x2)
    wt = counts.T
    sums = np.where(valid, x2, 0.0) @ wt
    numbers = valid.astype(np.float64) @ wt
    B = counts.shape[0]
    return sums.reshape(*lead, B), numbers.reshape(*lead, B)


def resampled_means(x: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """NaN-aware means of ``x`` over the last axis for every bootstrap resample.

    Equals ``np.nanmean(x[..., indices], axis=-1)`` for the draw behind
    ``counts``, computed as a product with the (B, n) count matrix, so memory
    stays O(size(x) + B n) instead of O(size(x) B).

    Parameters
    ----------
    x : numpy.ndarray
        Shape (..., n); NaN = missing.
    counts : numpy.ndarray
        Shape (B, n) from :func:`bootstrap_counts`.

    Returns
    -------
    numpy.ndarray
        Shape (..., B), float64; NaN where a resample holds no valid value.
    """
    sums, numbers = resampled_sums(x, counts)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(numbers > 0, sums / numbers, np.nan)


def percentile_interval(resamples: np.ndarray, ci: float = 0.95, axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval (Efron & Tibshirani 1993; spec ref [61]).

    Parameters
    ----------
    resamples : numpy.ndarray
        Bootstrap replicates of a statistic along ``axis``; NaN replicates
        (e.g. a resample without any valid value) are skipped.
    ci : float, default 0.95
        Interval level in (0, 1).
    axis : int, default -1
        The bootstrap axis.

    Returns
    -------
    lo, hi : numpy.ndarray
        float64, the ``(1 - ci)/2`` and ``(1 + ci)/2`` percentiles (NumPy's
        linear interpolation); NaN where every replicate is NaN (no warning).

    Raises
    ------
    ValueError
        If ``ci`` is not in (0, 1).
    """
    if not 0.0 < ci < 1.0:
        raise ValueError(f"ci must lie in (0, 1), got {ci}")
    r = np.asarray(resamples, dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        q = np.nanpercentile(r, [50 * (1 - ci), 50 * (1 + ci)], axis=axis)
    return q[0], q[1]


def bootstrap_resample_means(
    da: xr.DataArray, dim: Hashable = "image", indices: np.ndarray | None = None,
    counts: np.ndarray | None = None,
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
    counts : numpy.ndarray, optional
        Shape (B, n) float from :func:`bootstrap_counts`; used instead of
        ``indices`` (the cheaper form when one draw serves many calls).

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
    if counts is None:
        if indices is None:
            indices = bootstrap_indices(n, 1000, 0)
        indices = np.asarray(indices)
        if indices.ndim != 2 or indices.shape[1] != n:
            raise ValueError(f"indices must have shape (B, {n}) for {dim!r} of length {n}, got {indices.shape}")
        counts = counts_from_indices(indices, n)
    counts = _check_counts(counts, n)
    out = xr.apply_ufunc(
        resampled_means,
        da.astype(np.float64),
        kwargs={"counts": counts},
        input_core_dims=[[dim]],
        output_core_dims=[["bootstrap"]],
        dask="forbidden",
        keep_attrs=True,
    )
    return out.assign_coords(bootstrap=np.arange(counts.shape[0]))


def _bootstrap_mean(
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
    q = percentile_interval(res.values, ci, axis=-1)
    dims = res.dims[:-1]
    coords = {k: v for k, v in mean.coords.items()}
    ds = xr.Dataset(
        {"mean": mean, "lo": (dims, q[0]), "hi": (dims, q[1])},
        coords=coords,
        attrs={"n_resamples": int(indices.shape[0]), "seed": -1 if seed is None else int(seed), "ci": float(ci)},
    )
    return ds

