"""Metrics of the analysis (spec Section III): NumPy kernels + xarray wrappers.

Kernels work on the **last axis** of NumPy arrays and are vectorised over the
leading axes; the wrappers take an :class:`xarray.DataArray` and a ``dim=``.
Missing values are NaN and are skipped (image-level means over the images
present).

Contents
--------
bootstrap_indices          paired percentile bootstrap: one (B, n) index draw
bootstrap_counts           the same draw as a (B, n) matrix of draw counts
resampled_means            kernel: NaN-aware means of every resample, (..., B)
bootstrap_resample_means   resampled means, a named ``bootstrap`` dimension
percentile_interval        (lo, hi) percentiles over a bootstrap axis
bootstrap_p_value          two-sided p-value of a null value from bootstrap replicates
equivalence_p_value        p-value that |statistic| < a margin (two one-sided tests) from replicates
holm                       Holm's step-down adjustment of a family of p-values (family-wise error)
level_step_decades         spacing of a sweep's levels in decades of visibility
crossing_visibility        V where a signal first reaches its mid-way value (+ side of a bound)
blind_spot_width           W = log10(V_acc / V_aware), spec Eq. (2)
blind_spot_width_side      side of the bound on W from the sides of its crossings
accuracy                   fraction of correct answers
expected_calibration_error ten equal-width bins ((m-1)/M, m/M] (Guo et al. 2017)
reliability_bins           the per-bin data behind ECE and a reliability diagram
auroc                      confidence as a detector of correct answers
resampled_ece              ECE of every bootstrap resample, (..., B)
resampled_auroc            AUROC of every bootstrap resample, (..., B)
expected_risk_coverage     the risk-coverage curve: (coverage, risk) at every answer, ties in random order
aurc                       area under the risk-coverage curve (Geifman et al. 2019), ties in random order
excess_aurc                AURC minus that of the optimal ranking (E-AURC)
coverage_at_risk           largest coverage with risk <= a bound (Whitehead et al. 2022)
resampled_aurc             AURC of every bootstrap resample, (B,)
resampled_coverage_at_risk coverage at risk of every bootstrap resample, (B,)
selective_risk_coverage    selective answering by an abstain option
coverage_risk_of_sums      its two ratios from sums (questions, image shares, resamples)
monotonicity               wrong-way moves of a signal series, raw and > 2 SE

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

Precision: kernels compute in float64 and never round their input; the cube
stores float64, so a confidence 0.8999996 stays below the bin edge 0.9 and
0.9999999 stays above 0.9999996.
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
    "bootstrap_counts",
    "counts_from_indices",
    "resampled_means",
    "resampled_sums",
    "bootstrap_resample_means",
    "percentile_interval",
    "bootstrap_p_value",
    "equivalence_p_value",
    "holm",
    "level_step_decades",
    "crossing_visibility",
    "blind_spot_width",
    "blind_spot_width_side",
    "accuracy",
    "expected_calibration_error",
    "reliability_bins",
    "auroc",
    "resampled_ece",
    "resampled_auroc",
    "expected_risk_coverage",
    "aurc",
    "excess_aurc",
    "coverage_at_risk",
    "resampled_aurc",
    "resampled_coverage_at_risk",
    "selective_risk_coverage",
    "coverage_risk_of_sums",
    "monotonicity",
    "monotonicity_da",
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


def _finite_replicates(resamples: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    r = np.moveaxis(np.asarray(resamples, dtype=np.float64), axis, -1)
    ok = np.isfinite(r)
    return r, ok


def bootstrap_p_value(resamples: np.ndarray, null: float = 0.0, axis: int = -1,
                      side: str = "two-sided") -> np.ndarray:
    """Bootstrap p-value of a null value: the smallest ``alpha`` whose percentile interval excludes it.

    The percentile interval at level ``1 - alpha`` (:func:`percentile_interval`)
    excludes ``null`` when fewer than ``alpha / 2`` of the replicates lie on its
    far side; the two-sided p-value is therefore ``2 min(P*(b <= null),
    P*(b >= null))`` (capped at 1), with P* the share of finite replicates
    (Efron & Tibshirani 1993, ch. 15-16; a replicate equal to ``null`` counts on
    both sides, so ties never make a test significant). ``side="greater"``
    (the statistic exceeds ``null``) gives ``2 P*(b <= null)``, ``"less"``
    ``2 P*(b >= null)``: one side of the same two-sided interval, so that
    ``p <= alpha`` is the interval's own verdict.

    Parameters
    ----------
    resamples : numpy.ndarray
        Bootstrap replicates along ``axis``; NaN replicates are skipped.
    null : float or array broadcasting against the other axes
        The null value (0 for a difference or W; chance for an accuracy).
    axis : int, default -1
    side : {"two-sided", "greater", "less"}

    Returns
    -------
    numpy.ndarray
        float64 in [0, 1], the shape of ``resamples`` without ``axis``; NaN where no replicate is finite.

    Raises
    ------
    ValueError
        An unknown ``side``.

    >>> float(bootstrap_p_value(np.array([0.1, 0.2, 0.3, -0.1])))
    0.5
    """
    if side not in ("two-sided", "greater", "less"):
        raise ValueError(f"side must be 'two-sided', 'greater' or 'less', got {side!r}")
    r, ok = _finite_replicates(resamples, axis)
    n = ok.sum(-1)
    nul = np.asarray(null, dtype=np.float64)[..., None]
    with np.errstate(invalid="ignore", divide="ignore"):
        below = ((r <= nul) & ok).sum(-1) / n
        above = ((r >= nul) & ok).sum(-1) / n
    p = {"two-sided": 2 * np.minimum(below, above), "greater": 2 * below, "less": 2 * above}[side]
    return np.where(n > 0, np.minimum(p, 1.0), np.nan)


def equivalence_p_value(resamples: np.ndarray, margin: float, axis: int = -1) -> np.ndarray:
    """Bootstrap p-value that a statistic lies within ``(-margin, margin)``: two one-sided tests (Schuirmann 1987).

    ``2 max(P*(b >= margin), P*(b <= -margin))`` (capped at 1): ``p <= alpha``
    exactly where the two-sided percentile interval at level ``1 - alpha``
    lies inside ``(-margin, margin)``, i.e. where the interval excludes an
    effect as large as the margin on either side.

    Parameters
    ----------
    resamples : numpy.ndarray
        Bootstrap replicates along ``axis`` (NaN skipped).
    margin : float
        The smallest effect that matters, > 0 (for W: one sweep level, :func:`level_step_decades`).
    axis : int, default -1

    Returns
    -------
    numpy.ndarray
        float64 in [0, 1]; NaN where no replicate is finite.

    Raises
    ------
    ValueError
        ``margin`` not positive and finite.

    >>> float(equivalence_p_value(np.zeros(100), 0.3)), float(equivalence_p_value(np.array([-1.0, 1.0]), 0.3))
    (0.0, 1.0)
    """
    if not (np.isfinite(margin) and margin > 0):
        raise ValueError(f"margin must be positive and finite, got {margin}")
    r, ok = _finite_replicates(resamples, axis)
    n = ok.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        hi = ((r >= margin) & ok).sum(-1) / n
        lo = ((r <= -margin) & ok).sum(-1) / n
    return np.where(n > 0, np.minimum(2 * np.maximum(hi, lo), 1.0), np.nan)


def holm(p_values) -> np.ndarray:
    """Holm's step-down adjusted p-values of a family of tests (Holm 1979): family-wise error control.

    With the m finite p-values sorted, ``p_(1) <= ... <= p_(m)``, the adjusted value of the i-th is
    ``max_{j <= i} min(1, (m - j + 1) p_(j))``; rejecting where it is ``<= alpha`` keeps the
    probability of any false rejection in the family at most ``alpha`` under any dependence between
    the tests. (Benjamini-Hochberg, which controls the false discovery rate instead, is
    :func:`scipy.stats.false_discovery_control`; murk states verdicts, so it controls the family-wise
    error.)

    Parameters
    ----------
    p_values : array_like of float
        One p-value per test of the family, any shape; NaN marks a test that was not made: it is left
        out of the family (m counts the finite values only) and stays NaN.

    Returns
    -------
    numpy.ndarray
        float64, the shape of ``p_values``: the adjusted p-values.

    Raises
    ------
    ValueError
        A finite p-value outside [0, 1].

    >>> holm([0.01, 0.04, 0.03, np.nan]).tolist()
    [0.03, 0.06, 0.06, nan]
    """
    p = np.asarray(p_values, dtype=np.float64)
    flat = p.ravel()
    ok = np.flatnonzero(np.isfinite(flat))
    if np.any((flat[ok] < 0) | (flat[ok] > 1)):
        raise ValueError(f"p-values must lie in [0, 1], got {flat[ok][(flat[ok] < 0) | (flat[ok] > 1)][:4]}")
    out = np.full(flat.shape, np.nan)
    m = ok.size
    if m:
        order = ok[np.argsort(flat[ok], kind="stable")]
        adj = np.minimum(1.0, (m - np.arange(m)) * flat[order])
        out[order] = np.maximum.accumulate(adj)
    return out.reshape(p.shape)


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


def _bin_index(conf: np.ndarray, n_bins: int) -> np.ndarray:
    """Bin m - 1 of ``((m - 1)/M, m/M]`` (Guo et al. 2017); confidence 0 in the first bin.

    The edges are ``m / M`` computed as a float64 division, so a confidence
    ``k / 100`` on an edge (a verbal 70 -> 0.7 = 7/10) compares *equal* to it
    and falls into the lower bin, without rounding (``np.searchsorted`` with
    ``side="left"``; NaN counts as 0, callers mask it).
    """
    upper = np.arange(1, n_bins + 1, dtype=np.float64) / n_bins
    upper[-1] = np.inf  # 1.0 and anything above rounding go to the last bin
    return np.searchsorted(upper, np.nan_to_num(conf), side="left").astype(np.int64)


def _bin_stats(confidence, correct, n_bins: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-bin count, sum of confidence and sum of correctness, each (..., n_bins)."""
    conf, corr, valid = _pairs(confidence, correct)
    lead = conf.shape[:-1]
    rows = int(np.prod(lead, dtype=np.int64))
    conf2 = conf.reshape(rows, -1)
    corr2 = corr.reshape(rows, -1)
    valid2 = valid.reshape(rows, -1)
    b = _bin_index(np.where(valid2, conf2, 0.0), n_bins)
    flat = (np.arange(rows)[:, None] * n_bins + b)[valid2]
    size = rows * n_bins
    count = np.bincount(flat, minlength=size).reshape(*lead, n_bins).astype(np.float64)
    sum_conf = np.bincount(flat, weights=conf2[valid2], minlength=size).reshape(*lead, n_bins)
    sum_corr = np.bincount(flat, weights=corr2[valid2], minlength=size).reshape(*lead, n_bins)
    return count, sum_conf, sum_corr


def _ece_kernel(confidence, correct, n_bins: int = 10) -> np.ndarray:
    count, sum_conf, sum_corr = _bin_stats(confidence, correct, n_bins)
    total = count.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        ece = np.abs(sum_corr - sum_conf).sum(axis=-1) / total  # sum_b n_b/N |acc_b - conf_b|
    return np.where(total > 0, ece, np.nan)


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
    """Expected calibration error with equal-width bins (spec Section III; Guo et al. 2017).

    ``ECE = sum_m (|B_m| / N) * |acc(B_m) - conf(B_m)|`` over ``M = n_bins``
    bins ``B_m = ((m - 1)/M, m/M]``, m = 1 .. M, as defined by Guo, Pleiss,
    Sun & Weinberger (2017), "On calibration of modern neural networks", ICML,
    Sec. 2 (spec ref. [30]; ten bins also in Naeini et al. 2015, ref. [31]):
    each bin is open below and closed above, and a confidence of exactly 0
    goes into the first bin. ``acc(B_m)`` and ``conf(B_m)`` are the mean
    correctness and mean confidence in the bin, N the number of valid pairs.
    A verbalized 0.70 therefore lies in (0.6, 0.7], with 0.65, not in
    [0.7, 0.8) (the convention murk used before; on multiples of 0.05 the two
    differ by up to 0.044, issue 13). This is also the bin assignment of
    scikit-learn's ``calibration_curve`` (uniform strategy). Edges are exact
    float64 divisions ``m / M``; the input is never rounded.

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


def _mean_confidence(confidence: xr.DataArray | np.ndarray, dim: Hashable | None = "image") -> xr.DataArray | np.ndarray:
    """Mean of a confidence (c_int or the verbalized one, in [0, 1]), NaN skipped.

    Parameters
    ----------
    confidence : xarray.DataArray or numpy.ndarray
        Confidence in [0, 1]; NaN = missing (e.g. an unparsed verbal answer).
    dim : hashable or sequence, default "image"
        Dimension(s) reduced for a DataArray; NumPy input: the last axis.

    Returns
    -------
    xarray.DataArray or numpy.ndarray
        float64 in [0, 1]; NaN where nothing is present.
    """
    return accuracy(confidence, dim)


def _abstain_rate(abstain: xr.DataArray | np.ndarray, dim: Hashable | None = "image") -> xr.DataArray | np.ndarray:
    """Fraction of questions on which the abstain option wins (spec Sec. III, read-out 4).

    Parameters
    ----------
    abstain : xarray.DataArray or numpy.ndarray
        1 where the abstain option has the largest first-token probability,
        else 0 (for t3 the image-level mean of its two questions); NaN missing.
    dim : hashable or sequence, default "image"
        Dimension(s) reduced for a DataArray; NumPy input: the last axis.

    Returns
    -------
    xarray.DataArray or numpy.ndarray
        float64 in [0, 1]; NaN where nothing is present.
    """
    return accuracy(abstain, dim)


def reliability_bins(
    confidence: xr.DataArray | np.ndarray,
    correct: xr.DataArray | np.ndarray,
    n_bins: int = 10,
    dim: Hashable | list = "image",
) -> xr.Dataset | tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Data of a reliability diagram: per confidence bin, count, mean confidence, accuracy.

    The bins are those of :func:`expected_calibration_error` (equal width,
    ``((m - 1)/M, m/M]``, 0 in the first; Guo et al. 2017), so that
    ``ECE = sum_b count_b |accuracy_b - confidence_b| / sum_b count_b``
    (Guo et al. 2017, spec ref [30]; spec Fig. 5, a post-hoc addition).

    Parameters
    ----------
    confidence, correct : numpy.ndarray or xarray.DataArray
        As :func:`expected_calibration_error`.
    n_bins : int, default 10
    dim : hashable or list, default "image"
        For DataArrays, the dimension(s) pooled.

    Returns
    -------
    tuple of numpy.ndarray, or xarray.Dataset
        NumPy input: ``(count, mean_confidence, accuracy)``, each
        (..., n_bins) float64 (NaN in empty bins). DataArray input: a Dataset
        with ``count``, ``mean_confidence`` and ``accuracy`` over the remaining dims
        and a ``bin`` dim carrying ``bin_lo`` / ``bin_hi`` edges.

    Raises
    ------
    ValueError
        If a confidence lies outside [0, 1] or ``correct`` is not 0/1.
    """
    n_bins = int(n_bins)
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")

    def kernel(c, k):
        count, sc, sk = _bin_stats(c, k, n_bins)
        with np.errstate(invalid="ignore", divide="ignore"):
            return count, np.where(count > 0, sc / count, np.nan), np.where(count > 0, sk / count, np.nan)

    if not (isinstance(confidence, xr.DataArray) or isinstance(correct, xr.DataArray)):
        return kernel(confidence, correct)
    dims = [dim] if isinstance(dim, str) or not isinstance(dim, (list, tuple)) else list(dim)
    conf = confidence if isinstance(confidence, xr.DataArray) else xr.DataArray(confidence)
    corr = correct if isinstance(correct, xr.DataArray) else xr.DataArray(correct)
    conf, corr = xr.broadcast(conf.astype(np.float64), corr.astype(np.float64))
    if len(dims) > 1:
        conf, corr = conf.stack(_pooled=dims), corr.stack(_pooled=dims)
        dims = ["_pooled"]
    out = xr.apply_ufunc(kernel, conf, corr, input_core_dims=[dims, dims],
                         output_core_dims=[["bin"], ["bin"], ["bin"]])
    edges = np.arange(n_bins + 1, dtype=np.float64) / n_bins  # exact m / M, as the bins
    ds = xr.Dataset({"count": out[0], "mean_confidence": out[1], "accuracy": out[2]})
    ds = ds.assign_coords(bin=np.arange(n_bins), bin_lo=("bin", edges[:-1]), bin_hi=("bin", edges[1:]))
    ds["count"].attrs.update(long_name="answers in the bin", units="1")
    ds["mean_confidence"].attrs.update(long_name="mean confidence in the bin", units="1")
    ds["accuracy"].attrs.update(long_name="accuracy in the bin", units="1")
    return ds


# ----------------------------------------------------------------------------- resampled ECE, AUROC


def _rows(confidence, correct, unit_interval: bool):
    conf, corr, valid = _pairs(confidence, correct, unit_interval=unit_interval)
    n = conf.shape[-1]
    return conf.shape[:-1], conf.reshape(-1, n), corr.reshape(-1, n), valid.reshape(-1, n)


def resampled_ece(confidence, correct, counts: np.ndarray, n_bins: int = 10) -> np.ndarray:
    """ECE (:func:`expected_calibration_error`) of every bootstrap resample.

    With weights ``w_i`` = how often unit i is drawn in resample b,
    ``ECE_b = sum_k |sum_{i in k} w_i (correct_i - c_i)| / sum_i w_i``, which is
    the ECE of the resampled data exactly; ten matrix products with the count
    matrix, no loop over resamples.

    Parameters
    ----------
    confidence, correct : numpy.ndarray
        Shape (..., n) (broadcastable), as :func:`expected_calibration_error`.
    counts : numpy.ndarray
        Shape (B, n) float from :func:`bootstrap_counts` (for questions pooled
        within an image, repeat the image's column for each question).
    n_bins : int, default 10

    Returns
    -------
    numpy.ndarray
        Shape (..., B), float64; NaN where a resample holds no valid pair.

    Raises
    ------
    ValueError
        If ``counts`` is not (B, n), a confidence lies outside [0, 1] or
        ``correct`` is not 0/1.
    """
    lead, conf, corr, valid = _rows(confidence, correct, True)
    counts = _check_counts(counts, conf.shape[-1])
    from scipy import sparse

    n_bins = int(n_bins)
    R, n = conf.shape
    wt = np.ascontiguousarray(counts.T)                                    # (n, B)
    b = _bin_index(np.where(valid, conf, 0.0), n_bins)
    r_idx, cols = np.nonzero(valid)
    # one sparse (R * n_bins, n) matrix of (correct - confidence) per bin, times the counts
    d = sparse.csr_matrix(((corr - conf)[r_idx, cols], (r_idx * n_bins + b[r_idx, cols], cols)),
                          shape=(R * n_bins, n))
    gap = np.abs(d @ wt).reshape(R, n_bins, -1).sum(axis=1)
    total = valid.astype(np.float64) @ wt
    with np.errstate(invalid="ignore", divide="ignore"):
        ece = np.where(total > 0, gap / total, np.nan)
    return ece.reshape(*lead, counts.shape[0])


def resampled_auroc(confidence, correct, counts: np.ndarray, max_elements: int = 2**23) -> np.ndarray:
    """AUROC (:func:`auroc`) of every bootstrap resample, ties counted 1/2.

    For weights ``w_i`` (draw counts) the Mann-Whitney statistic of the
    resampled data is::

        AUC_b = sum_g P_g (N_<g + N_g / 2) / (sum_g P_g  sum_g N_g)

    over the groups g of equal confidence of a series, with ``P_g`` and
    ``N_g`` the summed weights of its correct and wrong answers and ``N_<g``
    those of the wrong answers with a lower confidence. The group sums of all
    resamples are one sparse-times-dense product with the count matrix; no
    loop over resamples. Series are processed in chunks of at most
    ``max_elements`` (groups x B) values.

    Parameters
    ----------
    confidence, correct : numpy.ndarray
        Shape (..., n) (broadcastable); NaN = missing (dropped).
    counts : numpy.ndarray
        Shape (B, n) float from :func:`bootstrap_counts`.
    max_elements : int, default 2**23
        Chunk size; the peak memory is about 6 x 8 bytes x max_elements.

    Returns
    -------
    numpy.ndarray
        Shape (..., B), float64; NaN where a resample lacks correct or wrong
        answers.

    Raises
    ------
    ValueError
        If ``counts`` is not (B, n) or ``correct`` is not 0/1.
    """
    from scipy import sparse

    lead, conf, corr, valid = _rows(confidence, correct, False)
    R, n = conf.shape
    counts = _check_counts(counts, n)
    B = counts.shape[0]
    wt = np.ascontiguousarray(counts.T)                                    # (n, B)
    out = np.full((R, B), np.nan)
    pos_any = (valid & (corr == 1)).any(axis=-1)
    neg_any = (valid & (corr == 0)).any(axis=-1)
    live = np.flatnonzero(pos_any & neg_any)
    per_row = valid[live].sum(axis=-1)
    budget = max(int(max_elements) // B, int(per_row.max(initial=1)))
    chunk_id = np.cumsum(per_row) // budget if live.size else np.empty(0, np.int64)
    for c in np.unique(chunk_id):  # chunks of series, not resamples
        rows = live[chunk_id == c]
        r_idx, cols = np.nonzero(valid[rows])
        sc = conf[rows][r_idx, cols]
        order = np.lexsort((sc, r_idx))
        r_idx, cols, sc = r_idx[order], cols[order], sc[order]
        is_pos = corr[rows][r_idx, cols] == 1
        new_row = np.r_[True, r_idx[1:] != r_idx[:-1]]
        new_group = new_row | np.r_[True, sc[1:] != sc[:-1]]
        gid = np.cumsum(new_group) - 1
        G = int(gid[-1]) + 1
        P = sparse.csr_matrix((is_pos.astype(np.float64), (gid, cols)), shape=(G, n)) @ wt   # (G, B)
        N = sparse.csr_matrix(((~is_pos).astype(np.float64), (gid, cols)), shape=(G, n)) @ wt
        starts = np.flatnonzero(new_row[new_group])                         # first group of each series
        seg = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, G]))  # series of each group
        below = np.cumsum(N, axis=0) - N                                    # exact: integer weights
        below -= below[starts][seg]
        num = np.add.reduceat(P * (below + 0.5 * N), starts, axis=0)
        den = np.add.reduceat(P, starts, axis=0) * np.add.reduceat(N, starts, axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[rows] = np.where(den > 0, num / den, np.nan)
    return out.reshape(*lead, B)


# ----------------------------------------------------------------------------- selective answering


def _cum_at_groups(x: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Cumulative sums of ``x`` (..., m) at the end of each group of ``starts``: (..., G)."""
    return np.cumsum(np.add.reduceat(x, starts, axis=-1), axis=-1)


def _rc_order(confidence, correct, func: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Valid answers sorted by decreasing confidence, and the groups of tied confidences.

    Returns ``order`` (positions of the valid pairs in the input, stable sort
    by decreasing confidence, (m,) int), the sorted confidences (m,), their
    ``wrong`` indicator ``1 - correct`` (m,) float64 and the first position
    of each group of equal confidence, ``starts`` (G,) int, and the input
    length n (valid or not). Raises
    ValueError if the input is not 1-D or ``correct`` is not 0/1.
    """
    conf, corr, valid = _pairs(confidence, correct, unit_interval=False)
    if conf.ndim != 1:
        raise ValueError(f"{func} takes 1-D input, got shape {conf.shape}")
    keep = np.flatnonzero(valid)
    order = keep[np.argsort(-conf[keep], kind="stable")]
    c = conf[order]
    starts = np.flatnonzero(np.r_[True, c[1:] != c[:-1]]) if c.size else np.empty(0, np.int64)
    return order, c, 1.0 - corr[order], starts, conf.size


def _rc_points(confidence, correct, func: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One point per distinct confidence: ``order``, threshold, answered, errors (see :func:`_rc_order`).

    ``answered[g]`` and ``errors[g]`` (float64, exact integers) count the
    answers and the wrong answers with a confidence >= ``threshold[g]``.
    """
    order, c, wrong, starts, _ = _rc_order(confidence, correct, func)
    if order.size == 0:
        return order, np.empty(0), np.empty(0), np.empty(0)
    return order, c[starts], _cum_at_groups(np.ones(order.size), starts), _cum_at_groups(wrong, starts)


def _nonempty_points(confidence, correct, func: str) -> tuple[np.ndarray, np.ndarray]:
    _, _, answered, errors = _rc_points(confidence, correct, func)
    if answered.size == 0:
        raise ValueError(f"{func}: no valid (confidence, correct) pair (empty input or all NaN)")
    return answered, errors


def _entering(answered: np.ndarray, errors: np.ndarray, where: np.ndarray):
    """For the groups at the flat positions ``where`` of (..., G) cumulative counts: the answers ``k`` and wrong
    answers ``a`` before the group, and its own answers ``m`` and wrong answers ``e`` (1-D, float64)."""
    G = answered.shape[-1]
    A, E = answered.reshape(-1), errors.reshape(-1)
    first = where % G == 0
    prev = np.where(first, 0, where - 1)
    k = np.where(first, 0.0, A[prev])
    a = np.where(first, 0.0, E[prev])
    return k, a, A[where] - k, E[where] - a


def _harmonic_gap(k: np.ndarray, A: np.ndarray) -> np.ndarray:
    """``sum_{i=k+1..A} 1/i`` (1-D): a table of harmonic numbers for integer counts, else digamma differences."""
    if k.size and A.max() <= 2**22 and np.all(A == np.round(A)) and np.all(k == np.round(k)):   # table <= 32 MiB
        H = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1.0, A.max() + 1.0))])
        return H[A.astype(np.int64)] - H[k.astype(np.int64)]
    from scipy.special import digamma

    return digamma(A + 1.0) - digamma(k + 1.0)


def _aurc_of_points(answered: np.ndarray, errors: np.ndarray) -> np.ndarray:
    """Tie-aware AURC over the last axis: the mean over answers of the expected risk as each enters.

    A group of ``m`` tied answers with ``e`` wrong ones, entered with ``k`` answers and ``a`` wrong ones before it,
    contributes ``sum_{j=1..m} (a + j e/m) / (k + j)`` (the expected risk after j of its answers, in a uniformly
    random order of the group). With ``c = a - k e/m`` each summand is ``e/m + c/(k + j)``, so the sum is
    ``m E/A + c (H_A - H_k - m/A)`` (A = k + m, E = a + e, H the harmonic numbers): the risk at the group's end
    for each of its answers plus a correction that is 0 for a group of one answer or where ``c = 0`` (left out
    there, so untied answers give the group-end value bit for bit). Groups with no new answer add 0.
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        m = np.diff(answered, axis=-1, prepend=0.0)
        terms = np.where(m > 0, m * (errors / answered), 0.0)
        at = np.flatnonzero(m > 1)
        if at.size:
            k, a, mt, e = _entering(answered, errors, at)
            c = a - k * (e / mt)
            fix = c != 0                              # c = 0: the group's risk equals the risk before it
            at, k, mt, c = at[fix], k[fix], mt[fix], c[fix]
            At = k + mt
            terms.reshape(-1)[at] += c * (_harmonic_gap(k, At) - mt / At)   # the bracket is >= 0
        total = answered[..., -1]
        return np.where(total > 0, terms.sum(axis=-1) / total, np.nan)


def _coverage_at_risk_of_points(answered: np.ndarray, errors: np.ndarray, max_risk: float) -> np.ndarray:
    """Largest coverage ``i / A_G`` whose expected risk (tie-aware, see :func:`coverage_at_risk`) is ``<= max_risk``.

    Over the last axis; 0 if none, NaN if ``A_G = 0``. Inside a group (k answers and a wrong ones before it, m
    answers and e wrong ones in it) the expected risk after j of its answers, ``rho(j) = (a m + j e) / ((k + j) m)``,
    is monotone in j; at its end it is ``E_g / A_g``. Where the end is above the bound and rho rises (``a m < k e``),
    the largest j with rho(j) <= max_risk is ``floor(c / (max_risk - e/m)) - k`` (``c = a - k e/m``), checked with
    its two neighbours in exact integer arithmetic of the numerator and the denominator (integer weights), so a
    risk equal to the bound counts.
    """
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        ok = (answered > 0) & (errors / answered <= max_risk)
        best = np.where(ok, answered, 0.0)
        m = np.diff(answered, axis=-1, prepend=0.0)
        at = np.flatnonzero((m > 1) & ~ok)
        if at.size:
            k, a, mt, e = _entering(answered, errors, at)
            rising = a * mt < k * e
            at, k, a, mt, e = at[rising], k[rising], a[rising], mt[rising], e[rising]
            guess = np.floor((a - k * (e / mt)) / (max_risk - e / mt))   # max_risk < e/m where rho rises past it
            flat = best.reshape(-1)
            for shift in (-1.0, 0.0, 1.0):
                i = np.clip(guess + shift, k + 1.0, k + mt - 1.0)
                hit = (i > k) & (i < k + mt) & ((a * mt + (i - k) * e) / (i * mt) <= max_risk)
                flat[at[hit]] = np.maximum(flat[at[hit]], i[hit])
        total = answered[..., -1]
        return np.where(total > 0, best.max(axis=-1) / total, np.nan)


def _check_max_risk(max_risk) -> float:
    max_risk = float(max_risk)
    if not 0.0 <= max_risk <= 1.0:
        raise ValueError(f"max_risk is a risk (error fraction) in [0, 1], got {max_risk}")
    return max_risk


def _risk_coverage(confidence, correct) -> tuple[np.ndarray, np.ndarray]:
    """The ends of the tie groups of the risk-coverage curve, one point per distinct confidence.

    The answers are accepted from the highest confidence down; answers of
    equal confidence are accepted together, so the curve does not depend on
    the order of the input. At the point of confidence tau, coverage = the
    share of the n valid answers with ``c >= tau`` and risk = the error
    fraction among them (Geifman & El-Yaniv 2017, spec ref
    ``geifman2017selective``); empty input raises. These are the ends of the
    tie groups of :func:`expected_risk_coverage` (the one public risk-coverage
    curve; these points are its reference in the tests), where the expected risk of :func:`aurc` (random order inside
    a group) equals the group-end risk; between two points the expected risk
    after j of a group's answers is ``(a + j e/m) / (k + j)`` (see :func:`aurc`).

    Parameters
    ----------
    confidence : array_like
        Shape (n,), float (any scale: only the order matters); NaN = missing.
    correct : array_like
        Shape (n,), bool or 0/1; NaN = missing. Pairs with a NaN are dropped.

    Returns
    -------
    coverage, risk : numpy.ndarray
        Shape (k,), float64, k = number of distinct valid confidences, in
        order of decreasing confidence: coverage increasing to 1.0, risk in
        [0, 1] (the last risk is the error rate of all answers).

    Raises
    ------
    ValueError
        If the input is not 1-D, ``correct`` is not 0/1, or no valid pair is
        left after dropping NaNs.

    Examples
    --------
    >>> cov, risk = _risk_coverage([0.9, 0.8, 0.8, 0.3], [1, 0, 1, 0])
    >>> cov.tolist(), risk.tolist()
    ([0.25, 0.75, 1.0], [0.0, 0.3333333333333333, 0.5])
    """
    answered, errors = _nonempty_points(confidence, correct, "_risk_coverage")
    return answered / answered[-1], errors / answered


def expected_risk_coverage(confidence, correct) -> tuple[np.ndarray, np.ndarray]:
    """Risk-coverage curve at every answer, the expectation over random orders within tie groups.

    Answers are accepted from the highest confidence down, one at a time; at
    i accepted answers, coverage = i / n and risk = ``E[E_i] / i``, the
    expected error fraction when each tie group is taken in a uniformly random
    order: inside a group of m answers with e wrong ones, entered with k
    answers and a wrong ones accepted, ``E[E_{k+j}] = a + j e/m``. The curve
    whose mean risk is :func:`aurc` and on which :func:`coverage_at_risk`
    reads its coverage; at the end of each group it passes through the point
    of :func:`_risk_coverage`. Without ties it is the empirical curve.

    Parameters
    ----------
    confidence : array_like
        Shape (n,), float (any scale: only the order matters); NaN = missing.
    correct : array_like
        Shape (n,), bool or 0/1; NaN = missing. Pairs with a NaN are dropped.

    Returns
    -------
    coverage, risk : numpy.ndarray
        Shape (m,), float64, m = number of valid pairs: coverage ``i / m``
        (i = 1..m), the expected risk in [0, 1].

    Raises
    ------
    ValueError
        If the input is not 1-D, ``correct`` is not 0/1, or no valid pair is
        left after dropping NaNs.

    Examples
    --------
    >>> cov, risk = expected_risk_coverage([0.9, 0.5, 0.5], [1, 1, 0])
    >>> cov.tolist(), risk.tolist()
    ([0.3333333333333333, 0.6666666666666666, 1.0], [0.0, 0.25, 0.3333333333333333])
    """
    answered, errors = _nonempty_points(confidence, correct, "expected_risk_coverage")
    n = answered[-1]
    i = np.arange(1.0, n + 1.0)
    g = np.searchsorted(answered, i)                         # the group of the i-th answer
    k = np.where(g > 0, answered[g - 1], 0.0)
    a = np.where(g > 0, errors[g - 1], 0.0)
    m, e = answered[g] - k, errors[g] - a
    return i / n, (a * m + (i - k) * e) / (i * m)


def aurc(confidence, correct) -> float:
    """Area under the risk-coverage curve (AURC), lower is better, tie-aware.

    The mean over the n valid answers of the selective risk at the moment
    each answer enters the accepted set, answers taken from the highest
    confidence down: ``AURC = (1/n) sum_{i=1..n} E_i / i`` with ``E_i`` the
    wrong answers among the first i. For distinct confidences this is the
    AURC of Geifman, Uziel & El-Yaniv (ICLR 2019, "Bias-reduced uncertainty
    estimation for deep neural classifiers"; risk-coverage curve: Geifman &
    El-Yaniv 2017). Where confidences tie, the order inside a tie group is
    not given by the signal, so the AURC is the expectation over uniformly
    random orders within each tie group (the rule by which the Mann-Whitney
    AUROC counts a tie 1/2), in closed form, no sampling: a group of m answers
    with e wrong ones, entered with k answers and a wrong ones accepted
    before it, has after j of its answers ``E[E_{k+j}] = a + j e/m`` wrong
    answers on average (hypergeometric mean: the expected errors rise
    linearly across the group), so its answers add
    ``sum_{j=1..m} (a + j e/m) / (k + j)``, which is
    ``m (a + e)/(k + m) + (a - k e/m) (H_{k+m} - H_k - m/(k + m))`` with
    ``H`` the harmonic numbers. This does not favour a finer signal over a
    coarser one carrying the same information (a confidence in whole
    percent, a V̂ at its cap, c_int saturated at 1), as giving each tied
    answer the risk at the group's end did.

    Parameters
    ----------
    confidence, correct : array_like
        Shape (n,), as :func:`expected_risk_coverage`; NaN pairs dropped.

    Returns
    -------
    float
        AURC in [0, 1].

    Raises
    ------
    ValueError
        As :func:`expected_risk_coverage` (not 1-D, ``correct`` not 0/1, no valid pair).

    Examples
    --------
    >>> aurc([0.9, 0.8, 0.7, 0.6, 0.5], [1, 1, 0, 1, 0])  # (0 + 0 + 1/3 + 1/4 + 2/5) / 5
    0.19666666666666666
    >>> aurc([0.9, 0.5, 0.5], [1, 1, 0])  # (0 + (1/2)/2 + 1/3) / 3: the tie's two orders averaged
    0.19444444444444442
    """
    answered, errors = _nonempty_points(confidence, correct, "aurc")
    return float(_aurc_of_points(answered, errors))


def excess_aurc(confidence, correct) -> float:
    """Excess AURC (E-AURC): :func:`aurc` minus the AURC of the optimal ranking.

    The optimal ranking puts the ``n - e`` correct answers first (e = number
    of wrong answers, error rate r = e / n); the answer entering at position
    i then sees the risk ``max(0, i - n(1 - r)) / i``, so::

        AURC* = (1/n) sum_{i=1..n} max(0, i - (n - e)) / i

    (Geifman, Uziel & El-Yaniv, ICLR 2019, whose continuous approximation is
    ``r + (1 - r) ln(1 - r)``; here the exact finite sum). The AURC is the
    tie-aware one of :func:`aurc` (the expectation over orders within tie
    groups), so E-AURC is >= 0 also with ties (every order's AURC is at least
    the optimal one), and 0 for a perfect ranking.

    Parameters
    ----------
    confidence, correct : array_like
        Shape (n,), as :func:`expected_risk_coverage`; NaN pairs dropped.

    Returns
    -------
    float
        E-AURC in [0, 1).

    Raises
    ------
    ValueError
        As :func:`expected_risk_coverage`.
    """
    answered, errors = _nonempty_points(confidence, correct, "excess_aurc")
    n, e = answered[-1], errors[-1]
    i = np.arange(1.0, n + 1.0)
    optimal = np.where(i > n - e, (i - (n - e)) / i, 0.0).sum() / n
    return float(_aurc_of_points(answered, errors)) - float(optimal)


def coverage_at_risk(confidence, correct, max_risk: float) -> float:
    """Coverage at a risk bound (C@R, Whitehead et al. 2022), tie-aware.

    The largest coverage ``i / n`` (i = 1..n answers accepted from the
    highest confidence down) whose expected risk ``E[E_i] / i`` is
    ``<= max_risk``, the expectation being over uniformly random orders
    within tie groups, as :func:`aurc`: at the end of a tie group the
    expected risk is the risk of :func:`_risk_coverage`; after j of the m
    answers of a group (e wrong; k answers, a wrong, before it) it is
    ``(a + j e/m) / (k + j)``, so a threshold may fall inside a group (the
    group's answers then accepted in a random order: a randomized selective
    answerer whose expected error fraction meets the bound). For distinct
    confidences this is the largest coverage among the points of
    :func:`_risk_coverage` with risk ``<= max_risk``: the share of the
    questions the model can answer, by thresholding its confidence, while
    keeping its error fraction within the bound.

    Parameters
    ----------
    confidence, correct : array_like
        Shape (n,), as :func:`expected_risk_coverage`; NaN pairs dropped.
    max_risk : float
        The risk bound, an error fraction in [0, 1] (e.g. 0.01, 0.05, 0.1,
        0.2 in Whitehead et al. 2022).

    Returns
    -------
    float
        Coverage in [0, 1]; 0.0 if no point reaches the bound.

    Raises
    ------
    ValueError
        As :func:`expected_risk_coverage`, or if ``max_risk`` is not in [0, 1].

    Examples
    --------
    >>> coverage_at_risk([0.9, 0.8, 0.7, 0.6], [1, 0, 1, 1], 0.3)  # risks 0, 1/2, 1/3, 1/4
    1.0
    >>> coverage_at_risk([0.9, 0.5, 0.5, 0.5], [1, 1, 0, 0], 0.35)  # expected risks 0, 1/3, 4/9, 1/2
    0.5
    """
    max_risk = _check_max_risk(max_risk)
    answered, errors = _nonempty_points(confidence, correct, "coverage_at_risk")
    return float(_coverage_at_risk_of_points(answered, errors, max_risk))


def _resampled_rc(confidence, correct, counts, image_index, max_elements: int, func: str, stat) -> np.ndarray:
    """``stat(answered, errors)`` (k, G) -> (k,) for every resample, in chunks of resamples."""
    order, _, wrong, starts, n = _rc_order(confidence, correct, func)
    if image_index is None:
        counts = _check_counts(counts, n)
        cols = order
    else:
        image_index = np.asarray(image_index)
        counts = np.asarray(counts, dtype=np.float64)
        if counts.ndim != 2:
            raise ValueError(f"counts must be 2-D (B, n_images), got shape {counts.shape}")
        if image_index.shape != (n,) or not np.issubdtype(image_index.dtype, np.integer):
            raise ValueError(f"image_index must be an int array of shape ({n},), got {image_index.dtype} "
                             f"{image_index.shape}")
        if n and (image_index.min() < 0 or image_index.max() >= counts.shape[1]):
            raise ValueError(f"image_index must lie in [0, {counts.shape[1]}) (the columns of counts)")
        cols = image_index[order]
    B = counts.shape[0]
    out = np.full(B, np.nan)
    if order.size == 0:
        return out
    step = max(1, int(max_elements) // order.size)
    for b0 in range(0, B, step):  # chunks of resamples; one chunk when the memory allows
        w = counts[b0:b0 + step][:, cols]                                  # (k, m) weights in sorted order
        out[b0:b0 + step] = stat(_cum_at_groups(w, starts), _cum_at_groups(w * wrong, starts))
    return out


def resampled_aurc(confidence, correct, counts: np.ndarray, image_index: np.ndarray | None = None,
                   max_elements: int = 2**23) -> np.ndarray:
    """AURC (:func:`aurc`) of every bootstrap resample.

    Each answer is weighted by its draw count ``w_i`` in resample b (count 0:
    left out): with ``A_g``, ``E_g`` the summed weights of the answers and
    of the wrong answers with a confidence >= that of group g,
    ``AURC_b`` is the tie-aware sum of :func:`aurc` over those groups (the
    copies of an answer drawn twice are tied too), which equals :func:`aurc`
    of the resampled data (each answer repeated ``w_i`` times) exactly up to
    rounding. Cumulative sums over the (resamples x answers)
    weights, no Python loop over resamples unless ``B x n`` exceeds
    ``max_elements``.

    Parameters
    ----------
    confidence, correct : array_like
        Shape (n,), as :func:`aurc`; NaN pairs dropped.
    counts : numpy.ndarray
        Draw counts from :func:`bootstrap_counts`: shape (B, n), one column
        per answer (as :func:`resampled_auroc`), or (B, n_images) with
        ``image_index``.
    image_index : numpy.ndarray, optional
        Shape (n,), int in ``[0, n_images)``: the image of each answer; the
        answers of one image share its column of ``counts`` (equivalent to
        passing ``counts[:, image_index]``, as :mod:`murk.results` does for
        the AUROC, without building that matrix).
    max_elements : int, default 2**23
        Resamples are processed in chunks of ``max_elements // n``; the peak
        memory is about 5 x 8 bytes x max_elements.

    Returns
    -------
    numpy.ndarray
        Shape (B,), float64; NaN where a resample holds no valid answer (all
        when no valid pair exists).

    Raises
    ------
    ValueError
        If the input is not 1-D, ``correct`` is not 0/1, ``counts`` is not
        (B, n) (without ``image_index``) or ``image_index`` is not (n,) int
        within the columns of ``counts``.
    """
    return _resampled_rc(confidence, correct, counts, image_index, max_elements, "resampled_aurc", _aurc_of_points)


def resampled_coverage_at_risk(confidence, correct, max_risk: float, counts: np.ndarray,
                               image_index: np.ndarray | None = None, max_elements: int = 2**23) -> np.ndarray:
    """Coverage at a risk bound (:func:`coverage_at_risk`) of every bootstrap resample.

    Weights as :func:`resampled_aurc`; the group ends of a resample are its
    cumulative weighted counts ``A_g / A_G`` (coverage) and ``E_g / A_g``
    (risk), the expected risk inside a group as :func:`coverage_at_risk`,
    exact for integer counts, so the result equals :func:`coverage_at_risk`
    of the resampled data.

    Parameters
    ----------
    confidence, correct : array_like
        Shape (n,), as :func:`coverage_at_risk`; NaN pairs dropped.
    max_risk : float
        The risk bound in [0, 1].
    counts, image_index, max_elements
        As :func:`resampled_aurc`.

    Returns
    -------
    numpy.ndarray
        Shape (B,), float64 coverage in [0, 1] (0.0 where no point reaches
        the bound); NaN where a resample holds no valid answer.

    Raises
    ------
    ValueError
        As :func:`resampled_aurc`, or if ``max_risk`` is not in [0, 1].
    """
    max_risk = _check_max_risk(max_risk)
    return _resampled_rc(confidence, correct, counts, image_index, max_elements, "resampled_coverage_at_risk",
                         lambda a, e: _coverage_at_risk_of_points(a, e, max_risk))


def coverage_risk_of_sums(answered, wrong, n) -> tuple[np.ndarray, np.ndarray]:
    """Coverage and risk of an abstainer from its sums: the one place the two ratios are taken.

    coverage = ``answered / n`` (the share of the questions answered) and
    risk = ``wrong / answered`` (the error rate among the answered ones;
    selective classification, Geifman & El-Yaniv 2017), for sums over the
    questions, over images of image-level shares (t3's two questions), or
    over a bootstrap resample (weighted sums, :func:`resampled_sums`). Used by
    :func:`selective_risk_coverage`, :func:`murk.results.selective_abstain`
    and :func:`murk.monitor.compare_at_equal_coverage`.

    Parameters
    ----------
    answered : array_like
        Sum of the answered shares ``1 - abstain``, any shape, float64.
    wrong : array_like
        Sum of the answered and wrong shares ``(1 - abstain)(1 - correct)``,
        same shape.
    n : array_like
        Number (or weight) of the questions or images summed, same shape.

    Returns
    -------
    coverage, risk : numpy.ndarray
        float64, the broadcast shape; coverage NaN where ``n = 0``, risk NaN
        where nothing is answered.

    Examples
    --------
    >>> cov, risk = coverage_risk_of_sums([2.0, 0.0], [1.0, 0.0], [4, 3])
    >>> cov.tolist(), risk.tolist()
    ([0.5, 0.0], [0.5, nan])
    """
    answered, wrong, n = np.asarray(answered, np.float64), np.asarray(wrong, np.float64), np.asarray(n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (np.where(n > 0, answered / n, np.nan),
                np.where(answered > 0, wrong / answered, np.nan))


def selective_risk_coverage(
    abstain: xr.DataArray | np.ndarray,
    correct: xr.DataArray | np.ndarray,
    dim: Hashable | list = "image",
) -> tuple:
    """Coverage and risk of selective answering through the abstain option.

    coverage = share of questions on which the model does not abstain;
    risk = error rate among those answered. In murk's read-out the answer is
    scored on the main prompt and the abstain decision on the abstain prompt
    of the same question (spec Sec. III, read-outs 1 and 4), so "risk" is the
    main-prompt error rate on the questions the model would have answered.
    Fractional values (t3's image-level mean of two questions) are weights:
    ``risk = sum (1 - a)(1 - c) / sum (1 - a)``; the ratio is :func:`coverage_risk_of_sums`.

    Parameters
    ----------
    abstain : numpy.ndarray or xarray.DataArray
        1 = abstains, 0 = answers (or a mean of such); NaN = missing.
    correct : numpy.ndarray or xarray.DataArray
        1 = correct, 0 = wrong; broadcastable; NaN = missing.
    dim : hashable or list, default "image"
        For DataArrays, the dimension(s) pooled; NumPy input: last axis.

    Returns
    -------
    coverage, risk : numpy.ndarray or xarray.DataArray
        float64 in [0, 1]; risk NaN where nothing is answered.

    Examples
    --------
    >>> selective_risk_coverage([0.0, 0.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0])
    (array(0.5), array(0.5))
    """
    def kernel(a, c):
        a = np.asarray(a, dtype=np.float64)
        c = np.asarray(c, dtype=np.float64)
        a, c = np.broadcast_arrays(a, c)
        ok = ~(np.isnan(a) | np.isnan(c))
        ans = np.where(ok, 1.0 - a, 0.0)
        return coverage_risk_of_sums(ans.sum(axis=-1), (ans * np.where(ok, 1.0 - c, 0.0)).sum(axis=-1),
                                     ok.sum(axis=-1))

    if isinstance(abstain, xr.DataArray) or isinstance(correct, xr.DataArray):
        dims = [dim] if isinstance(dim, str) or not isinstance(dim, (list, tuple)) else list(dim)
        a = abstain if isinstance(abstain, xr.DataArray) else xr.DataArray(abstain)
        c = correct if isinstance(correct, xr.DataArray) else xr.DataArray(correct)
        a, c = xr.broadcast(a.astype(np.float64), c.astype(np.float64))
        if len(dims) > 1:
            a, c = a.stack(_pooled=dims), c.stack(_pooled=dims)
            dims = ["_pooled"]
        return xr.apply_ufunc(kernel, a, c, input_core_dims=[dims, dims], output_core_dims=[[], []])
    return kernel(abstain, correct)


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
