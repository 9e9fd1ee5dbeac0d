"""The generated sentences of RQ1 (where accuracy collapses) and of RQ2 and RQ3 (whether a signal lags it), with the
verdict of every model they rest on, recorded where they are decided."""

from __future__ import annotations

from typing import Callable, Mapping, MutableMapping, Sequence

import numpy as np
import xarray as xr

from murk.report import _claims as claims
from murk.report._abstract import ARM_PHRASE, SIGNAL_WORDS
from murk.report._findings import crossing_text, w_text
from murk.report.paper import Numbers, fmt, fmt_estimate, fmt_level, fmt_list, fmt_visibility
from murk.results import STATS, holm


def accuracy_finding(numbers: Numbers, sc: xr.Dataset, means: xr.Dataset, cross: xr.Dataset, models: Sequence[str],
                     name: Callable[[str], str], key: Callable[[str], str], arm: str, task: str, chance: float,
                     vis: np.ndarray, end_level: int,
                     fall_band: MutableMapping[tuple[str, str, str], tuple[float, float]]) -> str:
    """The RQ1 sentence(s) for one arm and task, recording the verdict of every model.

    A collapse is stated only where the cube shows one (:func:`murk.report.accuracy_fall`: the clean accuracy
    above chance, V_acc not censored, the accuracy at the end of the sweep back at chance); where it falls, the band
    of the fall (:func:`murk.report.fall_band`, ten to ninety percent of the clean-to-chance range).

    Parameters
    ----------
    numbers : murk.report.Numbers
        Receives ``verdict.rq1.<arm>.<task>.<model>`` and ``band.<arm>.<task>.<model>``.
    sc, means, cross : xarray.Dataset
        The scores, condition means and crossings of :func:`murk.results.analyse`.
    models : sequence of str
        The VLMs, in the order the sentence names them.
    name, key : callable
        A model's display name and its part of a numbers key.
    arm, task : str
        E.g. ``"fog"``, ``"t2"``.
    chance : float
        The task's chance level (the floor of accuracy).
    vis : numpy.ndarray
        The visibility of each level in metres (level 0: the clean image, inf).
    end_level : int
        The index of the murkiest level.
    fall_band : dict
        Receives (model, arm, task) -> (V at 10 %, V at 90 % of the fall), metres, for a collapse or partial fall.

    Returns
    -------
    str
        The sentences, grouped by verdict ("collapses to chance", "falls below its mid-way value", "does not
        fall", "not above chance", "no accuracy could be estimated").
    """
    record = numbers.record

    def est(var: str, **sel) -> tuple[float, float, float]:
        x = sc[var].sel(**sel)
        return tuple(float(x.sel(stat=s)) for s in STATS)

    floor = chance
    groups: dict[str, list[str]] = {}
    bands = []
    for m in models:
        c = dict(model=m, arm=arm, task=task, readout="correct")
        clean, end = est("mean", **c, level=0), est("mean", **c, level=end_level)
        cr = cross.sel(model=m, arm=arm, task=task, readout="correct")
        verdict = claims.accuracy_fall(clean, end, bool(cr["censored"]), floor)
        record(f"verdict.rq1.{arm}.{task}.{key(m)}", verdict)
        v_acc = crossing_text(float(cr["v_cross_m"]), float(cr["v_lo_m"]), float(cr["v_hi_m"]), str(cr["censored_side"].values))
        if verdict in (claims.COLLAPSE, claims.PARTIAL):
            series = means["mean"].sel(model=m, arm=arm, task=task, readout="correct").values
            hi_v, lo_v = claims.fall_band(vis[1:], series[1:], series[0], floor)
            fall_band[(m, arm, task)] = (hi_v, lo_v)
            record(f"band.{arm}.{task}.{key(m)}", f"{fmt_visibility(hi_v)}–{fmt_visibility(lo_v)}")
            if np.isfinite(hi_v) and np.isfinite(lo_v) and verdict == claims.COLLAPSE:
                bands.append((name(m), hi_v, lo_v))   # a band names its model
            text = (f"{name(m)} (clean {fmt(clean[0])}, V_acc = {v_acc} m, at {fmt_level(vis[end_level])} m "
                    f"{fmt_estimate(*end)})")
        elif verdict == claims.NO_FALL:   # V_acc censored: a bound, stated as one
            text = f"{name(m)} (clean {fmt(clean[0])}, at {fmt_level(vis[end_level])} m {fmt_estimate(*end)}, V_acc {v_acc} m)"
        else:
            text = f"{name(m)} ({fmt_estimate(*clean)})"
        groups.setdefault(verdict, []).append(text)
    where = {"fog": "In fog", "underwater": "Under water"}[arm]
    out = []
    if claims.COLLAPSE in groups:
        band = ""
        if bands:
            band = ("; the fall from ten to ninety percent of the clean-to-chance range lies "
                    + fmt_list(f"between V = {fmt_visibility(hi_v)} and {fmt_visibility(lo_v)} m for {who} (a factor of "
                               f"{fmt(hi_v / lo_v, 1)} in visibility)" for who, hi_v, lo_v in bands))
        out.append(f"{where}, {task} accuracy collapses to chance for {fmt_list(groups[claims.COLLAPSE])}{band}.")
    if claims.PARTIAL in groups:
        out.append(f"{where}, {task} accuracy falls below its mid-way value but stays above chance at the end of the "
                   f"sweep for {fmt_list(groups[claims.PARTIAL])}.")
    if claims.NO_FALL in groups:
        out.append(f"{where}, {task} accuracy does not fall to its mid-way value within the sweep for "
                   f"{fmt_list(groups[claims.NO_FALL])}: no collapse is observed.")
    if claims.NO_SKILL in groups:
        out.append(f"{where}, {task} accuracy is not above chance ({fmt(floor)}) even on the clean image for "
                   f"{fmt_list(groups[claims.NO_SKILL])}, so there is no collapse to place on the axis "
                   f"(not observed).")
    if claims.UNDEFINED in groups:
        out.append(f"{where}, no {task} accuracy could be estimated for {fmt_list(groups[claims.UNDEFINED])}.")
    return " ".join(out)


def lag_finding(numbers: Numbers, means: xr.Dataset, cross: xr.Dataset, models: Sequence[str],
                name: Callable[[str], str], key: Callable[[str], str], physical: Sequence[str], signal: str, rq: str,
                task: str, w_margin: float, ci_level: float) -> str:
    """The sentence on W of one awareness signal over the physical arms, recording each verdict and how it is said.

    W is read only where accuracy collapses (the RQ1 verdicts recorded in ``numbers``); elsewhere, and where the
    signal has no values, the sentence says that no lag can be stated. The sentence follows the signal's direction
    (:func:`murk.report.direction`: a confidence falls, an abstain rate rises) and says a censored crossing as one
    (:func:`murk.report.lag_case`, :func:`murk.report.lag_phrase`). A lag is stated where W's bootstrap p-value,
    Holm-adjusted over the model–arm pairs of the signal (:func:`murk.results.holm`), excludes 0; "together with
    accuracy" only where it also excludes a lag of one sweep level (``w_margin``), else no lag can be established.

    Parameters
    ----------
    numbers : murk.report.Numbers
        Holds ``verdict.rq1.*``; receives ``lag.family.<rq>.<signal>.<task>``, ``verdict.<rq>.<signal>.…`` and
        ``lag_case.<rq>.<signal>.…``.
    means, cross : xarray.Dataset
        The condition means and crossings (with ``w_p``, ``w_p_margin``).
    models, name, key, physical
        The VLMs, their display names and keys, the physical arms.
    signal, rq, task : str
        E.g. ``"c_int"``, ``"rq2"``, ``"t2"``.
    w_margin : float
        One sweep level in decades (:func:`murk.results.level_step_decades`).
    ci_level : float
        The interval level; the tests' alpha is ``1 - ci_level``.

    Returns
    -------
    str
    """
    record = numbers.record

    def collapses(m: str, arm: str, task: str) -> bool:
        return numbers[f"verdict.rq1.{arm}.{task}.{key(m)}"] in (claims.COLLAPSE, claims.PARTIAL)

    groups: dict[str, dict[str, list[str]]] = {}
    pairs = [(m, arm) for m in models for arm in physical]
    read = [np.isfinite(means["mean"].sel(model=m, arm=arm, task=task, readout=signal).values).any()
            and collapses(m, arm, task) for m, arm in pairs]
    # the family of this signal's lags: every model-arm pair whose W is read, Holm-adjusted (murk.results.holm)
    c_ = [cross.sel(model=m, arm=arm, task=task, readout=signal) for m, arm in pairs]
    p_adj = holm([float(c["w_p"]) if r else np.nan for c, r in zip(c_, read)])
    pm_adj = holm([float(c["w_p_margin"]) if r else np.nan for c, r in zip(c_, read)])
    record(f"lag.family.{rq}.{signal}.{task}", int(np.isfinite(p_adj).sum()))
    for (m, arm), cr, pa, pma in zip(pairs, c_, p_adj, pm_adj):
        w, lo, hi = float(cr["w"]), float(cr["w_lo"]), float(cr["w_hi"])
        lower, upper = bool(cr["w_lower_bound"]), bool(cr["w_upper_bound"])
        if not np.isfinite(means["mean"].sel(model=m, arm=arm, task=task, readout=signal).values).any():
            verdict = "undefined: it has no parseable value"
        elif not collapses(m, arm, task):
            verdict = "undefined: accuracy does not collapse there (RQ1)"
        else:
            verdict = claims.awareness_lag(w, lo, hi, lower, upper, margin=w_margin, p=pa, p_margin=pma,
                                           alpha=1 - ci_level)
            if verdict == claims.UNDEFINED:
                verdict = "undefined: neither crossing is defined"
        record(f"verdict.{rq}.{signal}.{arm}.{task}.{key(m)}", verdict)
        case = claims.lag_case(verdict, str(cr["censored_side"].values), lower, upper)
        record(f"lag_case.{rq}.{signal}.{arm}.{task}.{key(m)}", case)   # how the sentence says it
        detail = ARM_PHRASE[arm] if verdict.startswith("undefined") else f"{ARM_PHRASE[arm]}: {w_text(w, lo, hi, lower, upper)}"
        groups.setdefault(case, {}).setdefault(name(m), []).append(detail)
    what = SIGNAL_WORDS[signal]
    who = lambda v: fmt_list(f"{m} ({'; '.join(d)})" for m, d in groups[v].items())  # noqa: E731
    out = []
    for case in (claims.LAGS, claims.NOT_REACHED, claims.WITH, claims.LEADS, claims.AT_FIRST_LEVEL, claims.NO_LAG,
                 claims.BOUNDED):
        if case in groups:
            out.append(f"The {what} ({task}) {claims.lag_phrase(case, signal)}, for {who(case)}.")
    for verdict in groups:
        if verdict.startswith("undefined"):
            out.append(f"No lag of the {what} ({task}) can be stated for {who(verdict)}: {verdict.split(': ', 1)[1]}.")
    return " ".join(out)


def wording_finding(numbers: Numbers, sc: xr.Dataset, diffs: Mapping[tuple[str, str], tuple[float, float, float]],
                    models: Sequence[str], name: Callable[[str], str], key: Callable[[str], str],
                    physical: Sequence[str], task: str, mid_level: int, v_mid: float) -> str:
    """The RQ3 sentence on the two abstain wordings at the middle of the murky band, recording each verdict.

    Parameters
    ----------
    numbers : murk.report.Numbers
        Receives ``verdict.rq3.wording.<arm>.<task>.<model>`` (:func:`murk.report.versus_value` of the difference
        against 0) and ``diff.abstain_abstain2.<arm>.<task>.<model>`` (with its interval).
    sc : xarray.Dataset
        The scores (the two abstain rates' means at ``mid_level``).
    diffs : mapping
        (model, arm) -> the paired difference of the abstain rates, main wording minus "I don't know", and its
        interval (:func:`murk.results.paired_difference`).
    models, name, key, physical
        The VLMs, their display names and keys, the physical arms.
    task : str
        ``"t2"``.
    mid_level, v_mid : int, float
        The level read and its visibility in metres.

    Returns
    -------
    str
    """
    record = numbers.record

    def est(var: str, **sel) -> tuple[float, float, float]:
        x = sc[var].sel(**sel)
        return tuple(float(x.sel(stat=s)) for s in STATS)

    groups: dict[str, dict[str, list[str]]] = {}
    for m in models:
        for arm in physical:
            sel = dict(model=m, arm=arm, level=mid_level, task=task)
            d = diffs[(m, arm)]
            where = claims.versus_value(*d, 0.0)
            record(f"verdict.rq3.wording.{arm}.{task}.{key(m)}", where)
            record(f"diff.abstain_abstain2.{arm}.{task}.{key(m)}", d[0], ci=d[1:])
            groups.setdefault(where, {}).setdefault(name(m), []).append(
                f"{ARM_PHRASE[arm]}: {fmt(est('mean', **sel, readout='abstain')[0])} against "
                f"{fmt(est('mean', **sel, readout='abstain2')[0])}, difference {fmt_estimate(*d)}")
    who = lambda v: fmt_list(f"{m} ({'; '.join(d)})" for m, d in groups[v].items())  # noqa: E731
    at = f"At V = {fmt_level(v_mid)} m ({task}, main wording against “I don't know”)"
    out = []
    if claims.ABOVE in groups:
        out.append(f"{at} the main wording is chosen more often by {who(claims.ABOVE)}: there the abstention "
                   "depends on the wording.")
    if claims.BELOW in groups:
        out.append(f"{at} “I don't know” is chosen more often by {who(claims.BELOW)}: there the abstention "
                   "depends on the wording.")
    if claims.AT in groups:
        out.append(f"{at} no wording effect is observed for {who(claims.AT)}.")
    if claims.UNDEFINED in groups:
        out.append(f"{at} the abstain rates are undefined for {fmt_list(groups[claims.UNDEFINED])}.")
    return " ".join(out)
