"""Selective prediction: AUROC of a signal for correctness, and the abstainer's risk-coverage (its curve, AURC,
excess AURC, coverage at a risk), with their bootstrap intervals.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np
import xarray as xr
from scipy.stats import rankdata

from murk.results._bootstrap import _check_counts
from murk.results._calibration import _pairs, _rows, _wrap

__all__ = ["auroc", "resampled_auroc", "expected_risk_coverage", "aurc", "excess_aurc", "coverage_at_risk",
           "resampled_aurc", "resampled_coverage_at_risk", "selective_risk_coverage", "coverage_risk_of_sums"]


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

