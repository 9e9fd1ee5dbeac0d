"""The monitor's evaluation against the VLMs (beyond the spec): the awareness crossing of a monitor signal, the
image split and the threshold picked on one half, and the comparison at equal coverage with bootstrap intervals.
"""

from __future__ import annotations

import warnings

import numpy as np

from murk.monitor._gate import (
    DEFAULT_THRESHOLD_M,
    _censored_codes,
    certified_visibility,
    gate_decisions,
    visibility_confidence,
)

__all__ = ["SIGNAL_FLOOR", "signal_range", "awareness_crossing", "split_images", "pick_threshold",
           "threshold_at_coverage", "compare_at_equal_coverage"]


#: Floor of each monitor signal for its crossing (spec Sec. III, "Crossing points"):
#: the confidence spans [0, 1] and falls towards 0; the abstain rate rises to 1.
SIGNAL_FLOOR: dict[str, float] = {"c_int": 0.0, "abstain": 1.0}


def signal_range(v_hat_m, censored, signal: str = "c_int",
                 threshold_m: float = DEFAULT_THRESHOLD_M) -> tuple[np.ndarray, np.ndarray]:
    """Range of a monitor read-out consistent with a (possibly censored) estimate.

    ``c_int``: a point estimate gives ``c(V_hat)`` (:func:`visibility_confidence`);
    an upper bound (V <= V_hat) ``[0, c(V_hat)]``; a lower bound ``[c(V_hat), 1]``.
    ``abstain``: a point estimate gives the gate's decision at V_hat; an upper
    bound ``[gate(V_hat), 1]``; a lower bound ``[0, gate(V_hat)]``. The cube's
    read-outs (:func:`monitor_readouts`) are the *conservative* end: the lowest
    confidence and the highest abstention.

    Parameters
    ----------
    v_hat_m, censored : array_like, broadcastable
        As :func:`certified_visibility`.
    signal : {"c_int", "abstain"}
    threshold_m : float, default DEFAULT_THRESHOLD_M

    Returns
    -------
    lo, hi : numpy.ndarray of float64
        The range per element; where V_hat is NaN (no usable pixel) both ends
        are the read-outs' values, ``c_int`` 0 and ``abstain`` 1.
    """
    v = np.asarray(v_hat_m, dtype=np.float64)
    code = _censored_codes(censored, v.shape)
    if signal == "c_int":
        c = visibility_confidence(v)
        lo = np.where(code < 0, 0.0, c)
        hi = np.where(code > 0, 1.0, c)
    elif signal == "abstain":
        g = gate_decisions(v, threshold_m).astype(np.float64)
        lo = np.where(code > 0, 0.0, g)
        hi = np.where(code < 0, 1.0, g)
    else:
        raise ValueError(f"signal_range: signal must be 'c_int' or 'abstain', got {signal!r}")
    return lo, hi


def awareness_crossing(visibility_m, v_hat_m, censored, signal: str = "c_int", *,
                       threshold_m: float = DEFAULT_THRESHOLD_M, present=None, counts=None,
                       ci: float = 0.95) -> dict:
    """Crossing visibility of a monitor signal, with censored estimates treated as bounds.

    The image-level signal of each (level, image) is known only within
    :func:`signal_range`. The mean curve over images is therefore bracketed by
    a *conservative* curve (the cube's read-outs: lowest confidence, highest
    abstention) and an *optimistic* one, and the crossing
    (:func:`murk.results.crossing_visibility`, floor :data:`SIGNAL_FLOOR`) by
    theirs: the conservative curve reaches its mid-way value first, so the true
    V_aware lies in ``[V_optimistic, V_conservative]``. Where the two agree the
    crossing is exact; otherwise the conservative value is reported as a bound
    from above (side ``"below"``: V_aware at most it), and W = log10(V_acc /
    V_aware) against it is a lower bound (:func:`murk.results.blind_spot_width_side`).

    Parameters
    ----------
    visibility_m : array_like of float, shape (L,)
        Sweep levels, clear to murky (level 0, the clean image, excluded).
    v_hat_m, censored : array_like, shape (1 + L, n)
        V_hat and its censoring (:data:`CENSORED_CODE`) for the clean image and
        each level, per image (NaN rows are missing images).
    signal : {"c_int", "abstain"}
    threshold_m : float, default DEFAULT_THRESHOLD_M
    present : array_like of bool, shape (1 + L, n), optional
        Cells that hold a read-out; default: V_hat not NaN. Pass the cube's
        ``c_int`` not NaN to count images without a usable pixel (V_hat NaN,
        c_int 0, abstain 1) as the cube's means do.
    counts : numpy.ndarray, shape (B, n), optional
        Bootstrap draw counts (:func:`murk.results.bootstrap_counts`); gives a
        percentile interval of the conservative crossing.
    ci : float, default 0.95

    Returns
    -------
    dict
        ``v_cross_m`` (conservative), ``v_optimistic_m``, ``censored_side``
        (``""``, ``"below"``, ``"above"`` or ``"undefined"``: the conservative
        crossing is at the first level but the optimistic one is lower),
        ``v_lo_m``, ``v_hi_m`` (NaN without *counts*), ``n_censored_below``
        (int, (level, image) cells whose V_hat is an upper bound).
    """
    from murk import results

    vis = np.asarray(visibility_m, dtype=np.float64)
    v = np.asarray(v_hat_m, dtype=np.float64)
    code = _censored_codes(censored, v.shape)
    if v.ndim != 2 or v.shape[0] != vis.size + 1:
        raise ValueError(f"awareness_crossing: v_hat_m must be (1 + {vis.size}, n), got {v.shape}")
    lo, hi = signal_range(v, code, signal, threshold_m)
    present = ~np.isnan(v) if present is None else np.broadcast_to(np.asarray(present, dtype=bool), v.shape)
    cons, opt = (hi, lo) if signal == "abstain" else (lo, hi)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mc = np.nanmean(np.where(present, cons, np.nan), axis=-1)
        mo = np.nanmean(np.where(present, opt, np.nan), axis=-1)
    fl = SIGNAL_FLOOR[signal]
    vc, _, side_c = results.crossing_visibility(vis, mc[1:], mc[0], fl, return_side=True)
    vo, _, side_o = results.crossing_visibility(vis, mo[1:], mo[0], fl, return_side=True)
    vc, vo, side = float(vc), float(vo), str(side_c)
    if np.isfinite(vc) and not (np.isfinite(vo) and np.isclose(vo, vc, rtol=1e-9) and str(side_o) == side):
        side = "below" if side in ("", "below") else "undefined"
    out = {"v_cross_m": vc, "v_optimistic_m": vo, "censored_side": side, "v_lo_m": float("nan"),
           "v_hi_m": float("nan"), "n_censored_below": int(((code < 0) & present).sum())}
    if counts is not None:
        rs = results.resampled_means(np.where(present, cons, np.nan), counts)        # (1 + L, B)
        vb, _ = results.crossing_visibility(vis, rs[1:].T, rs[0], fl)
        out["v_lo_m"], out["v_hi_m"] = (float(x) for x in results.percentile_interval(vb, ci))
    return out


def split_images(image_ids, seed: int = 0) -> np.ndarray:
    """Selection half of a set of images, reproducible per image.

    Each image goes to the selection half with probability 1/2 from a generator
    seeded by ``(seed, image id)`` (STYLE: per-item randomness, so subsets
    reproduce). Rows of the same image always fall in the same half.

    Parameters
    ----------
    image_ids : array_like of int, any shape
        COCO image ids (repeated ids allowed).
    seed : int, default 0

    Returns
    -------
    numpy.ndarray of bool, same shape
        True = selection half (thresholds are picked here), False = report half.
    """
    ids = np.asarray(image_ids, dtype=np.int64)
    uniq, inv = np.unique(ids, return_inverse=True)
    half = np.array([np.random.default_rng([int(seed), int(i)]).random() < 0.5 for i in uniq], dtype=bool)
    return half[inv].reshape(ids.shape)


def threshold_at_coverage(score, target_coverage: float) -> float:
    """Threshold reaching a target coverage: answer iff ``score >= thr``.

    Parameters
    ----------
    score : array_like of float, shape (n,)
        Higher = more willing to answer (V_hat in m, or c_int). NaN never answers.
    target_coverage : float in [0, 1]

    Returns
    -------
    float
        The ``ceil(target * n)``-th largest score (``inf`` for coverage 0), so that
        the coverage is at least the target (more with ties).
    """
    s = np.asarray(score, dtype=np.float64).ravel()
    if not 0 <= target_coverage <= 1:
        raise ValueError(f"threshold_at_coverage: target_coverage must be in [0, 1], got {target_coverage}")
    k = int(np.ceil(target_coverage * s.size - 1e-9))
    if k == 0:
        return float("inf")
    ordered = np.sort(np.where(np.isnan(s), -np.inf, s))[::-1]
    return float(ordered[k - 1])


def pick_threshold(score, correct, target_coverage: float | None = None, select=None) -> float:
    """Pick a gate threshold (answer iff ``score >= thr``) on the selection rows.

    Parameters
    ----------
    score : array_like of float, shape (n,)
        V_hat in metres for the monitor (or c_int for the VLM baseline). NaN
        never answers.
    correct : array_like of float, shape (n,)
        1/0 correctness of the VLM's answer; NaN rows are dropped.
    target_coverage : float, optional
        If given, the threshold of :func:`threshold_at_coverage`. If None, the
        threshold that maximises ``#correct - #wrong`` over the answered rows
        (answer where the VLM is right more often than wrong; +1 for a correct
        answer, -1 for a wrong one, 0 for abstaining), ties to the lower threshold.
    select : array_like of bool, shape (n,), optional
        Rows to pick on (e.g. :func:`split_images` of the image ids); default all.

    Returns
    -------
    float
        Threshold in the unit of *score*.
    """
    s = np.asarray(score, dtype=np.float64).ravel()
    c = np.asarray(correct, dtype=np.float64).ravel()
    if s.shape != c.shape:
        raise ValueError(f"pick_threshold: score {s.shape} and correct {c.shape} differ in shape")
    keep = ~np.isnan(c)
    if select is not None:
        keep &= np.asarray(select, dtype=bool).ravel()
    s, c = s[keep], c[keep]
    if s.size == 0:
        raise ValueError("pick_threshold: no rows to pick on (all correct NaN or select empty)")
    if target_coverage is not None:
        return threshold_at_coverage(s, target_coverage)
    s = np.where(np.isnan(s), -np.inf, s)
    order = np.argsort(-s, kind="stable")
    gain = np.cumsum(2.0 * c[order] - 1.0)  # answering the top-k rows
    ss = s[order]
    # only cut between distinct scores: candidate k are the last index of each tie run
    last = np.r_[ss[1:] != ss[:-1], True]
    gains = np.where(last, gain, -np.inf)
    k = int(np.argmax(gains))
    if gains[k] <= 0:
        return float("inf")
    return float(ss[k])


def _bootstrap_rows(rows: dict, image_ids, n_resamples: int, seed: int, ci: float) -> dict:
    """Percentile intervals of coverage and risk, resampling report-half images."""
    from murk.results import bootstrap_indices, coverage_risk_of_sums, percentile_interval

    uniq, inv = np.unique(np.asarray(image_ids), return_inverse=True)
    idx = bootstrap_indices(uniq.size, n_resamples, seed)
    counts = np.zeros((n_resamples, uniq.size))
    np.add.at(counts, (np.repeat(np.arange(n_resamples), uniq.size), idx.ravel()), 1.0)
    out = {}
    for name, (answered, correct) in rows.items():
        n_i = np.bincount(inv, minlength=uniq.size).astype(float)
        a_i = np.bincount(inv, weights=answered.astype(float), minlength=uniq.size)
        e_i = np.bincount(inv, weights=(answered & (correct == 0)).astype(float), minlength=uniq.size)
        cov, risk = coverage_risk_of_sums(counts @ a_i, counts @ e_i, counts @ n_i)
        # murk.results.percentile_interval: NaN, without an All-NaN warning, where no resample defines the value
        # (a risk where nothing was answered in any resample)
        out[name] = {"coverage_ci": tuple(float(v) for v in percentile_interval(cov, ci)),
                     "risk_ci": tuple(float(v) for v in percentile_interval(risk, ci))}
    return out


def compare_at_equal_coverage(score_monitor, score_cint, abstain_vlm, correct, split, *, image_ids=None,
                              n_resamples: int = 0, seed: int = 0, ci: float = 0.95,
                              censored_monitor=None) -> dict:
    """Coverage-risk table of three gates, thresholds picked on one half, reported on the other.

    All inputs are flat over question-conditions (e.g. one VLM, one task, every
    level of one arm, every image); ``split`` marks the selection half by image.

    Rows (keys of the result), each evaluated on the report half (``~split``):

    ``answer_all``
        No gate (coverage 1).
    ``vlm_abstain``
        The VLM's own abstain option (``abstain_vlm`` True = abstained).
    ``monitor@vlm_abstain``, ``c_int@vlm_abstain``
        Monitor (answer iff ``V_hat >= thr``) and c_int thresholds chosen on the
        selection half to match the VLM abstain option's coverage there.
    ``monitor``
        Monitor at the threshold of :func:`pick_threshold` (max #correct - #wrong)
        on the selection half.
    ``c_int@monitor``
        c_int thresholded to the monitor's selection-half coverage.

    Parameters
    ----------
    score_monitor : array_like of float, shape (n,)
        V_hat in metres per row (NaN abstains).
    censored_monitor : array_like, shape (n,), optional
        The censoring of each V_hat (the cube's ``visibility_hat_censored``,
        :data:`CENSORED_CODE`): the monitor is scored by
        :func:`certified_visibility`, so an upper bound (opaque) never answers.
        Default: every V_hat a point estimate.
    score_cint : array_like of float, shape (n,)
        The VLM's internal confidence per row.
    abstain_vlm : array_like of float or bool, shape (n,)
        1/True where the VLM chose its abstain option (NaN rows dropped).
    correct : array_like of float, shape (n,)
        1/0 correctness of the VLM's answer on the main prompt (NaN dropped). The
        risk of ``vlm_abstain`` uses these answers on the rows it did not abstain
        on -- an approximation, as the abstain prompt is a separate prompt.
    split : array_like of bool, shape (n,)
        True = selection half (:func:`split_images`).
    image_ids : array_like of int, shape (n,), optional
        Needed for bootstrap intervals (resampling report-half images, paired
        across rows).
    n_resamples : int, default 0
        Bootstrap resamples; 0 = no intervals.
    seed : int, default 0
    ci : float, default 0.95

    Returns
    -------
    dict
        ``{row: {"coverage": float, "risk": float, "threshold": float,
        "threshold_unit": str, "n": int, "n_monitor_bound_below": int,
        ["coverage_ci", "risk_ci"]: (lo, hi)}}``; ``n_monitor_bound_below``
        counts the report-half rows whose V_hat is an upper bound (they never
        pass the monitor's gate).

    Raises
    ------
    ValueError
        If shapes differ or a half is empty.
    """
    from murk.results import selective_risk_coverage

    arrays = [np.asarray(x, dtype=np.float64).ravel() for x in (score_monitor, score_cint, abstain_vlm, correct)]
    sm, sc, av, cor = arrays
    below = np.zeros(sm.shape, dtype=bool)
    if censored_monitor is not None:
        code = _censored_codes(np.asarray(censored_monitor).ravel(), sm.shape)
        below = code < 0
        sm = certified_visibility(sm, code)
    sp = np.asarray(split, dtype=bool).ravel()
    if len({a.size for a in arrays} | {sp.size}) != 1:
        raise ValueError("compare_at_equal_coverage: all inputs must have the same length")
    keep = ~np.isnan(cor) & ~np.isnan(av)
    if image_ids is not None:
        ids = np.asarray(image_ids).ravel()
    sel, rep = keep & sp, keep & ~sp
    if not sel.any() or not rep.any():
        raise ValueError("compare_at_equal_coverage: the selection or the report half is empty")
    vlm_cov_sel = float(1.0 - av[sel].mean())
    thr = {
        "monitor@vlm_abstain": ("m", threshold_at_coverage(sm[sel], vlm_cov_sel)),
        "c_int@vlm_abstain": ("1", threshold_at_coverage(sc[sel], vlm_cov_sel)),
        "monitor": ("m", pick_threshold(sm[sel], cor[sel])),
    }
    mon_cov_sel = float((~gate_decisions(sm[sel], thr["monitor"][1])).mean())
    thr["c_int@monitor"] = ("1", threshold_at_coverage(sc[sel], mon_cov_sel))
    answered = {
        "answer_all": np.ones(rep.sum(), dtype=bool),
        "vlm_abstain": av[rep] == 0,
        "monitor@vlm_abstain": sm[rep] >= thr["monitor@vlm_abstain"][1],
        "c_int@vlm_abstain": sc[rep] >= thr["c_int@vlm_abstain"][1],
        "monitor": sm[rep] >= thr["monitor"][1],
        "c_int@monitor": sc[rep] >= thr["c_int@monitor"][1],
    }
    table = {}
    for name, ans in answered.items():
        cov, risk = (float(x) for x in selective_risk_coverage((~ans).astype(np.float64), cor[rep]))
        unit, t = thr.get(name, ("", float("nan")))
        table[name] = {"coverage": cov, "risk": risk, "threshold": float(t), "threshold_unit": unit,
                       "n": int(rep.sum()), "n_monitor_bound_below": int(below[rep].sum())}
    if n_resamples:
        if image_ids is None:
            raise ValueError("compare_at_equal_coverage: bootstrap intervals need image_ids")
        cis = _bootstrap_rows({k: (v, cor[rep]) for k, v in answered.items()}, ids[rep], n_resamples, seed, ci)
        for k in table:
            table[k].update(cis[k])
    return table

