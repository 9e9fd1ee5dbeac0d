"""The generated sentences of RQ1 (where accuracy collapses), RQ2 and RQ3 (whether a signal lags it, the abstain
wordings) and RQ4 (where the nominal severities lie), with the verdict of every model they rest on, recorded where
they are decided."""

from __future__ import annotations

from typing import Callable, Mapping, MutableMapping, Sequence

import numpy as np
import xarray as xr

from murk.report import _claims as claims
from murk.report._abstract import ARM_PHRASE, SIGNAL_WORDS
from murk.report._findings import crossing_text, w_text
from murk.report._format import fmt, fmt_estimate, fmt_level, fmt_list, fmt_range, fmt_visibility
from murk.report._numbers import Numbers
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


def nominal_finding(numbers: Numbers, models: Sequence[str], name: Callable[[str], str], key: Callable[[str], str],
                    acc: xr.DataArray, cross: xr.Dataset,
                    fall_band: Mapping[tuple[str, str, str], tuple[float, float]], veq_median: np.ndarray,
                    severity_diffs: Mapping[str, Sequence[tuple[float, float, float]]], has_nominal: bool) -> str:
    """The RQ4 sentence: where the ImageNet-C fog severities lie against each model's failure band (t2), recording
    each model's verdict and its largest change from clean.

    A severity reaches the band by position (its median equivalent visibility at or below where fog accuracy has
    lost a tenth of its clean-to-chance range) and by accuracy (its paired change from clean below 0):
    :func:`murk.report.band_verdict`.

    Parameters
    ----------
    numbers : murk.report.Numbers
        Holds ``verdict.rq1.fog.t2.*``; receives ``verdict.rq4.t2.<model>`` and ``rq4.largest_change.*``.
    models, name, key
        The VLMs, their display names and keys.
    acc : xarray.DataArray
        Mean accuracy (model, arm, level, task): the condition means' ``mean`` at ``readout="correct"``.
    cross : xarray.Dataset
        The crossings (V_acc's upper end where no band of the fall is known).
    fall_band : mapping
        (model, "fog", "t2") -> V at 10 % and 90 % of the fall (:func:`accuracy_finding`).
    veq_median : numpy.ndarray
        The five severities' median gain-matched equivalent visibility, metres (NaN where not computed).
    severity_diffs : mapping
        Model -> the paired change of t2 accuracy from clean at severities 1–5 (mean, lo, hi each).
    has_nominal : bool
        The depth stage wrote the nominal equivalence (else the verdicts are "not computed").

    Returns
    -------
    str
    """
    record = numbers.record
    groups: dict[str, list[str]] = {}
    for m in models:
        diffs = severity_diffs[m]
        largest = claims.largest_change(diffs)   # by magnitude: a severity may lie above clean accuracy too
        sev_acc = fmt_range(acc.sel(model=m, arm="imagenet_c", level=slice(1, 5), task="t2").values)
        cr = cross.sel(model=m, arm="fog", task="t2", readout="correct")
        fall = numbers[f"verdict.rq1.fog.t2.{key(m)}"]
        edge = fall_band.get((m, "fog", "t2"), (np.nan, np.nan))[0]   # where accuracy has lost a tenth of its range
        if not np.isfinite(edge):
            edge = float(cr["v_hi_m"])
        # by position (a severity's median V_eq at or below the edge) and by accuracy (its change from clean falls,
        # the interval below 0): a severity placed in the band at which accuracy holds or rises does not reach it
        verdict = "not computed" if not has_nominal else claims.band_verdict(fall, veq_median, edge, diffs)
        record(f"verdict.rq4.t2.{key(m)}", verdict)
        if largest is None:
            change = "no change from clean accuracy can be estimated"
            record(f"rq4.largest_change.verdict.t2.{key(m)}", claims.UNDEFINED)
        else:
            d = diffs[largest]
            record(f"rq4.largest_change.t2.{key(m)}", d[0], ci=d[1:])
            record(f"rq4.largest_change.severity.t2.{key(m)}", largest + 1)
            record(f"rq4.largest_change.verdict.t2.{key(m)}", claims.versus_value(*d, 0.0))   # above / below / at clean
            words = claims.change_words(*d)
            change = (f"the largest change from clean, {words}, at severity {largest + 1}" if not words.startswith("no change")
                      else f"no change from clean at any severity ({fmt_estimate(*d)} at most)")
        detail = (f"t2 accuracy {sev_acc} over severities 1–5 against {fmt(float(acc.sel(model=m, arm='fog', level=0, task='t2')))} "
                  f"clean, {change}")
        if fall in (claims.COLLAPSE, claims.PARTIAL):
            detail = f"its fog accuracy starts to fall at V = {fmt_visibility(edge)} m; " + detail
        groups.setdefault(verdict, []).append(f"{name(m)} ({detail})")
    veq_words = f"median V_eq {fmt_range(veq_median, digits=0)} m"
    out = []
    if "plateau" in groups:
        out.append(f"The ImageNet-C fog severities ({veq_words}) lie above the failure band, on the plateau of accuracy, "
                   f"for {fmt_list(groups['plateau'])}.")
    if "reaches the band" in groups:
        out.append(f"The ImageNet-C fog severities ({veq_words}) reach into the failure band for "
                   f"{fmt_list(groups['reaches the band'])}.")
    if claims.IN_BAND_NO_FALL in groups:
        out.append(f"The ImageNet-C fog severities ({veq_words}) lie at visibilities of the failure band but do not reach "
                   f"the failure for {fmt_list(groups[claims.IN_BAND_NO_FALL])}: at no severity placed there does t2 "
                   "accuracy fall below clean (its paired interval below 0).")
    if claims.UNDEFINED in groups:
        out.append(f"The ImageNet-C fog severities cannot be placed against the failure band for "
                   f"{fmt_list(groups[claims.UNDEFINED])}: no equivalent visibility, or no start of the fall, is defined.")
    if "no collapse" in groups:
        out.append(f"Whether the severities cover the failure band cannot be said for {fmt_list(groups['no collapse'])}: "
                   f"{claims.they(len(groups['no collapse']), 'its', 'their')} fog accuracy does not collapse (not observed).")
    if "not computed" in groups:
        out.append("Without the nominal equivalence, whether the severities cover the failure band is not stated.")
    return " ".join(out)


def control_finding(ctrl: str, task: str, estimates: Mapping[str, tuple[float, float, float]], chance: float) -> str:
    """The sentence on one control's accuracy against chance (:func:`murk.report.versus_value`).

    Parameters
    ----------
    ctrl : str
        ``"blank"`` or ``"shuffled"``.
    task : str
        ``"t2"`` or ``"t3"``.
    estimates : mapping
        Model display name -> its accuracy on the control (mean, lo, hi), in the order the sentence names them.
    chance : float
        The task's chance level.

    Returns
    -------
    str
        One sentence per verdict: at chance, above chance ("can be answered without the scene"), below chance, or
        not estimated.

    Examples
    --------
    >>> control_finding("blank", "t2", {"A": (0.25, 0.2, 0.3), "B": (0.6, 0.55, 0.65)}, 0.25)
    'On the blank image, t2 accuracy is at chance (0.25) for A (0.25 [0.20, 0.30]). On the blank image, t2 accuracy is above chance for B (0.60 [0.55, 0.65]): the question can be answered without the scene.'
    """
    groups: dict[str, list[str]] = {}
    for who, e in estimates.items():
        groups.setdefault(claims.versus_value(*e, chance), []).append(f"{who} ({fmt_estimate(*e)})")
    what = {"blank": "On the blank image", "shuffled": "On the shuffled image"}[ctrl]
    out = []
    if claims.AT in groups:
        out.append(f"{what}, {task} accuracy is at chance ({fmt(chance)}) for {fmt_list(groups[claims.AT])}.")
    if claims.ABOVE in groups:
        out.append(f"{what}, {task} accuracy is above chance for {fmt_list(groups[claims.ABOVE])}: the question "
                   "can be answered without the scene.")
    if claims.BELOW in groups:
        out.append(f"{what}, {task} accuracy is below chance for {fmt_list(groups[claims.BELOW])}.")
    if claims.UNDEFINED in groups:
        out.append(f"{what}, no {task} accuracy could be estimated for {fmt_list(groups[claims.UNDEFINED])}.")
    return " ".join(out)


def t3_bias_finding(diffs: Mapping[str, tuple[float, float, float]]) -> str:
    """The sentence on t3's answer bias on the blank image.

    Parameters
    ----------
    diffs : mapping
        Model display name -> accuracy on the distractor questions minus the true-category questions on the blank
        image, with its paired interval (:func:`murk.results.paired_difference`): above 0, "no" is answered more
        often than the truth warrants; below 0, "yes".

    Returns
    -------
    str

    Examples
    --------
    >>> t3_bias_finding({"A": (0.8, 0.6, 1.0), "B": (0.0, -0.1, 0.1)})[:60]
    'On the blank image t3 is answered “no” more often than the t'
    """
    groups: dict[str, list[str]] = {}
    for who, d in diffs.items():
        groups.setdefault(claims.versus_value(*d, 0.0), []).append(f"{who} ({fmt_estimate(*d)})")
    out = []
    if claims.ABOVE in groups:
        out.append(f"On the blank image t3 is answered “no” more often than the truth warrants by "
                   f"{fmt_list(groups[claims.ABOVE])} (accuracy on distractor minus true-category questions).")
    if claims.BELOW in groups:
        out.append(f"On the blank image t3 is answered “yes” more often than the truth warrants by "
                   f"{fmt_list(groups[claims.BELOW])} (accuracy on distractor minus true-category questions).")
    if claims.AT in groups:
        out.append(f"On the blank image no answer bias of t3 is observed for {fmt_list(groups[claims.AT])} "
                   "(accuracy on distractor minus true-category questions).")
    return " ".join(out)


def verbal_rates_finding(rates: Mapping[str, tuple[float, float, float]], max_new_tokens: int) -> dict[str, str]:
    """The sentences on how often a verbalized confidence could be read: per model, the share of its continuations
    with a parseable confidence and the share cut by the token limit, and which models gave none.

    Parameters
    ----------
    rates : mapping
        Model display name -> (continuations asked, parse rate, limit-hit rate) with the main wording, pooled
        (:func:`murk.results.pooled_rates`; a limit-hit rate NaN: not recorded).
    max_new_tokens : int
        The read-out's token limit for the verbal continuation.

    Returns
    -------
    dict
        ``verbal_rates`` and ``verbal_parse`` -> the sentence.

    Examples
    --------
    >>> w = verbal_rates_finding({"A": (10, 0.0, 0.5), "B": (0, float("nan"), float("nan"))}, 48)
    >>> w["verbal_parse"][:60]
    'A gave no parseable confidence: its verbalized confidence ha'
    """
    no_verbal = [who for who, (n, pr, _) in rates.items() if int(n) and pr == 0.0]
    parts = []
    for who, (n, pr, hr) in rates.items():
        n = int(n)
        if not n:
            parts.append(f"{who} was asked for none")
            continue
        cut = (f"{fmt(hr)} were cut by the {max_new_tokens}-token limit" if np.isfinite(hr)
               else "whether they were cut by the token limit was not recorded")
        parts.append(f"{who}: no parseable confidence in {n} continuations, of which {cut}" if pr == 0 else
                     f"of the {n} continuations of {who}, a share of {fmt(pr)} held a parseable confidence and {cut}")
    return {"verbal_rates": ("Verbalized confidence (main wording, both physical arms, every level and task; a number "
                             "touching the cut counts as missing): " + "; ".join(parts) + "."),
            "verbal_parse": (f"{fmt_list(no_verbal)} gave no parseable confidence: "
                             f"{'its' if len(no_verbal) == 1 else 'their'} verbalized confidence has no mean, and the "
                             "figure's panels say so." if no_verbal else
                             "Every model produced a parseable verbalized confidence.")}
