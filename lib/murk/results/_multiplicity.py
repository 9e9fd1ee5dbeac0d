"""Multiplicity of the analysis' tests: one-sided bootstrap p-values (a difference, an equivalence margin) and
Holm's step-down adjustment of a family of them.
"""

from __future__ import annotations

import numpy as np

__all__ = ["bootstrap_p_value", "equivalence_p_value", "holm"]


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

