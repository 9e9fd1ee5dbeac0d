"""Calibration of a confidence signal (spec Section III): expected calibration error (ECE), reliability bins, the
mean confidence and abstain rate, and the resampled ECE of the bootstrap.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np
import xarray as xr

from murk.results._bootstrap import _check_counts
from murk.results._metrics import accuracy

__all__ = ["expected_calibration_error", "reliability_bins", "resampled_ece"]


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

