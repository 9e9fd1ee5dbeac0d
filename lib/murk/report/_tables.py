"""The study's tables and the sentences of its controls: the crossings, the AUROC per level, every level of the sweep,
the design diagnostics, the box marker and the design comparison."""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np
import xarray as xr

from murk.report._claims import they
from murk.report._findings import crossing_text
from murk.report._format import fmt, fmt_crossing, fmt_estimate, fmt_level, fmt_list
from murk.report._markdown import estimate_cell, markdown_table
from murk.results import (ABOVE_GUESSER, AWARENESS_SIGNALS, BELOW_CHANCE, DOMINANT_SHARE, HARD_TO_SEE_CONTRAST, PATCH_PX,
                          SIGNALS, STATS, VERDICT_TEXT)

#: a signal as the sweep and monotonicity tables head its column
SIGNAL_COLUMNS = {"correct": "accuracy", "c_int": "c_int", "verbal_conf": "verbal", "abstain": "abstain",
                  "abstain2": "abstain₂"}


def sweep_table(sc: xr.Dataset, models: Sequence[str], name: Callable[[str], str], physical: Sequence[str],
                vis: np.ndarray, task: str) -> str:
    """The means with their intervals at every level of the sweep (spec Tables IX and X), as a Markdown table.

    Parameters
    ----------
    sc : xarray.Dataset
        The scores (``mean`` with a ``stat`` dim: point, lo, hi).
    models, name, physical
        The VLMs, their display names, the physical arms (one row per model, arm and level).
    vis : numpy.ndarray
        The visibility of each level in metres (level 0: clean, inf).
    task : str
        ``"t2"`` or ``"t3"``.

    Returns
    -------
    str
        A pipe table: model, arm, V (m), then one column per signal (:data:`SIGNAL_COLUMNS`).
    """
    def est(**sel) -> tuple[float, float, float]:
        x = sc["mean"].sel(**sel)
        return tuple(float(x.sel(stat=s)) for s in STATS)

    rows = []
    for m in models:
        for arm in physical:
            for lvl in sc["level"].values:
                row = {"model": name(m), "arm": arm, "V (m)": fmt_level(vis[lvl])}
                for ro in SIGNALS:
                    row[SIGNAL_COLUMNS[ro]] = estimate_cell(fmt_estimate(*est(model=m, arm=arm, level=lvl, task=task,
                                                                              readout=ro)))
                rows.append(row)
    return markdown_table(rows)


def diagnostic_finding(floors: Mapping[tuple[str, str, str], Sequence[str]], dominated: Mapping[str, Sequence[str]],
                       clear: Sequence[str]) -> str:
    """The sentence on the design diagnostics: the confounded floors, the dominant t3 answers, the clear models.

    Parameters
    ----------
    floors : mapping
        (control, task, verdict) -> the models whose floor has that verdict (:data:`murk.results.BELOW_CHANCE` or
        :data:`murk.results.ABOVE_GUESSER`), each as "name (estimate)".
    dominated : mapping
        t3 answer -> the models that give it to at least :data:`murk.results.DOMINANT_SHARE` of the blank image's
        t3 questions, each as "name (share)".
    clear : sequence of str
        The models with no confound (display names).

    Returns
    -------
    str

    Examples
    --------
    >>> diagnostic_finding({}, {}, ["A"])
    'For A the controls show no design confound: its floors are at chance or between chance and the prior guesser, and no answer dominates t3 on the blank image.'
    """
    out = []
    for (ctrl, task, v), who in floors.items():
        against = "chance" if v == BELOW_CHANCE else "the prior guesser"
        out.append(f"On the {ctrl} image the {task} floor lies {'below' if v == BELOW_CHANCE else 'above'} "
                   f"{against} for {fmt_list(who)}: {VERDICT_TEXT[v]}.")
    for answer, who in dominated.items():
        verb = "answers" if len(who) == 1 else "answer"
        out.append(f"On the blank image {fmt_list(who)} {verb} “{answer}” to at least "
                   f"{fmt(DOMINANT_SHARE)} of the t3 questions: the answer bias dominates the task, which "
                   "then measures whether the boxed object is judged visible rather than how well the answer is "
                   "calibrated.")
    if clear:
        out.append(f"For {fmt_list(clear)} the controls show no design confound: {they(len(clear), 'its', 'their')} "
                   f"floors are at chance or between chance and the prior guesser, and no answer dominates t3 on the "
                   "blank image.")
    return " ".join(out)


def marker_finding(hard: Mapping[str, float], width_px: int, v_end: float) -> str:
    """The sentence on the box marker: the share of items whose marker is hard to see, clean and at the murkiest
    level of each physical arm.

    Parameters
    ----------
    hard : mapping
        ``clean``, ``fog``, ``underwater`` -> the share of items whose marker contrast is below
        :data:`murk.results.HARD_TO_SEE_CONTRAST` (NaN: no item rendered).
    width_px : int
        The box's line width.
    v_end : float
        The murkiest level's visibility, metres.

    Examples
    --------
    >>> marker_finding({"clean": float("nan")}, 3, 1.953125)
    "No item could be rendered, so the marker's contrast is not known."
    >>> marker_finding({"clean": 0.0, "fog": 0.5, "underwater": 0.0}, 3, 1.953125).split(" on ", 1)[1]
    'a share of 0.50 of the items in fog and none under water, and on none of the clean images: at the murkiest level a share of the questions concerns a marker the model may not see.'
    """
    if not np.isfinite(hard["clean"]):
        return "No item could be rendered, so the marker's contrast is not known."

    def share_text(x: float) -> str:
        return "none" if x == 0 else "all" if x == 1 else f"a share of {fmt(x)}"

    hard_any = any(hard[a] > 0 for a in ("fog", "underwater"))
    return (f"As a vision encoder's {PATCH_PX}-px patches see it, the {width_px}-px box is hard to see "
            f"(contrast below {fmt(HARD_TO_SEE_CONTRAST)}) at {fmt_level(v_end)} m on "
            f"{share_text(hard['fog'])} of the items in fog and {share_text(hard['underwater'])} under water, and on "
            f"{share_text(hard['clean'])} of the clean images"
            + (": at the murkiest level a share of the questions concerns a marker the model may not see." if hard_any
               else ": the marker stays visible at the murkiest level."))


def design_v_acc(d: Mapping[str, float], arm: str, unit: str = " m") -> str:
    """V_acc (t2) of a design summary (:func:`murk.results.design_summary`) as the paper writes it: ``≤ 3.9`` when
    censored at the design's last level.

    >>> design_v_acc({"v_acc.fog.t2": 3.90625, "v_acc_censored.fog.t2": True}, "fog")
    '≤ 3.9 m'
    """
    t = fmt_crossing(d[f"v_acc.{arm}.t2"], "below" if d[f"v_acc_censored.{arm}.t2"] else "", 1)
    return t if t == "n/a" else t + unit


def design_row(who: str, label: str, d: Mapping[str, float], n_images: int) -> dict[str, str]:
    """One row of the design comparison table: a model's floors, t3's blank-image top share and V_acc in one design.

    Parameters
    ----------
    who : str
        The model's display name.
    label : str
        ``"this design"`` or ``"compared design"``.
    d : mapping
        The design summary (:func:`murk.results.design_summary`) over ``n_images`` images.
    n_images : int
    """
    return {"VLM": who, "design": label, "images": str(n_images),
            "blank t2": fmt(d["floor.blank.t2"]), "shuffled t2": fmt(d["floor.shuffled.t2"]),
            "t3 blank top share": fmt(d["t3_blank_top_share"]),
            "V_acc fog (m)": design_v_acc(d, "fog", ""), "V_acc underwater (m)": design_v_acc(d, "underwater", "")}


#: an awareness signal's W as the crossings table heads its column
W_COLUMNS = {"c_int": "W c_int", "verbal_conf": "W verbal", "abstain": "W abstain", "abstain2": "W abstain₂"}


def crossings_table(cross: xr.Dataset, models: Sequence[str], name: Callable[[str], str],
                    physical: Sequence[str]) -> str:
    """The crossings table (spec Table V): per model, physical arm and task, V_acc (chance floor and, post hoc, the
    blank-image floor) and W of every awareness signal, each with its interval or as the bound it is.

    Parameters
    ----------
    cross : xarray.Dataset
        The crossings (:func:`murk.results.analyse` ``["crossings"]``).
    models, name, physical
        The VLMs, their display names, the physical arms.

    Returns
    -------
    str
        A pipe table.
    """
    rows = []
    for m in models:
        for arm in physical:
            for task in ("t2", "t3"):
                c = cross.sel(model=m, arm=arm, task=task)
                acc = c.sel(readout="correct")
                row = {"model": name(m), "arm": arm, "task": task,
                       "V_acc (m)": estimate_cell(crossing_text(
                           float(acc["v_cross_m"]), float(acc["v_lo_m"]), float(acc["v_hi_m"]),
                           str(acc["censored_side"].values))),
                       "V_acc, blank (m)": estimate_cell(crossing_text(
                           float(c["v_acc_blank_m"]), float(c["v_acc_blank_lo_m"]), float(c["v_acc_blank_hi_m"]),
                           str(c["censored_blank_side"].values)))}
                for ro in AWARENESS_SIGNALS:
                    cr = c.sel(readout=ro)
                    row[W_COLUMNS[ro]] = estimate_cell(fmt_estimate(
                        float(cr["w"]), float(cr["w_lo"]), float(cr["w_hi"]), lower=bool(cr["w_lower_bound"]),
                        upper=bool(cr["w_upper_bound"])))
                rows.append(row)
    return markdown_table(rows)


def auroc_table(sc: xr.Dataset, models: Sequence[str], name: Callable[[str], str], physical: Sequence[str],
                vis: np.ndarray) -> str:
    """AUROC of the internal confidence (t2) per physical arm and level (rows) and model (columns), with intervals.

    Parameters
    ----------
    sc : xarray.Dataset
        The scores (``auroc`` with a ``stat`` dim).
    models, name, physical
        The VLMs, their display names, the physical arms.
    vis : numpy.ndarray
        The visibility of each level, metres.
    """
    rows = []
    for arm in physical:
        for lvl in sc["level"].values:
            row = {"arm": arm, "V (m)": fmt_level(vis[lvl])}
            for m in models:
                x = sc["auroc"].sel(model=m, arm=arm, level=lvl, task="t2", confidence="c_int")
                row[name(m)] = estimate_cell(fmt_estimate(*(float(x.sel(stat=s)) for s in STATS)))
            rows.append(row)
    return markdown_table(rows)


def end_of_sweep_table(sc: xr.Dataset, rates: xr.Dataset, models: Sequence[str], name: Callable[[str], str],
                       physical: Sequence[str], vis: np.ndarray, end_level: int) -> str:
    """The end of the sweep (spec Table IV), t2: accuracy, both confidences, the ECE of the internal confidence, and
    how often the verbal confidence was parsed or cut by the token limit, per model and physical arm.

    Parameters
    ----------
    sc : xarray.Dataset
        The scores (``mean`` and ``ece`` with a ``stat`` dim).
    rates : xarray.Dataset
        The verbal rates per task (:func:`murk.results.verbal_rates` with ``by_task=True``).
    models, name, physical
        The VLMs, their display names, the physical arms.
    vis : numpy.ndarray
        The visibility of each level, metres.
    end_level : int
        The murkiest level.

    Returns
    -------
    str
        A pipe table; a model with no parseable verbal confidence there has "no parseable confidence" as its mean.
    """
    def est(var: str, **sel) -> tuple[float, float, float]:
        x = sc[var].sel(**sel)
        return tuple(float(x.sel(stat=s)) for s in STATS)

    def verbal_mean(r, *mean) -> str:
        return "no parseable confidence" if float(r["n_asked"]) and float(r["parse_rate"]) == 0 else fmt_estimate(*mean)

    rows = []
    for m in models:
        for arm in physical:
            cell = dict(model=m, arm=arm, level=end_level, task="t2")
            r_ = rates.sel(model=m, arm=arm, level=end_level, task="t2", wording="v1")
            rows.append({"model": name(m), "arm": arm, "V (m)": fmt_level(vis[end_level]),
                         "accuracy": fmt_estimate(*est("mean", **cell, readout="correct")),
                         "mean c_int": fmt_estimate(*est("mean", **cell, readout="c_int")),
                         "mean verbal": verbal_mean(r_, *est("mean", **cell, readout="verbal_conf")),
                         "verbal parsed / cut": f"{fmt(float(r_['parse_rate']))} / {fmt(float(r_['limit_hit_rate']))}",
                         "ECE c_int": fmt_estimate(*est("ece", **cell, confidence="c_int"))})
    return markdown_table(rows)


def design_comparison_words(who: str, n_images: int, here: Mapping[str, float], there: Mapping[str, float],
                            chance: float) -> str:
    """The sentence comparing one model's design summaries in two designs' runs, on the images both read out.

    Parameters
    ----------
    who : str
        The model's display name.
    n_images : int
        The images both runs read out.
    here, there : mapping
        The design summaries (:func:`murk.results.design_summary`) of this run and of the compared one.
    chance : float
        t2's chance level.

    Examples
    --------
    >>> d = {"floor.blank.t2": 0.25, "floor.shuffled.t2": 0.3, "t3_blank_top_share": 0.6, "v_acc.fog.t2": 7.8125,
    ...      "v_acc_censored.fog.t2": False}
    >>> design_comparison_words("A", 4, d, d, 0.25)[:70]
    'For A, on the 4 images both runs read out, the blank-image t2 accuracy'
    """
    a, b = here, there
    return (f"For {who}, on the {n_images} images both runs read out, the blank-image t2 accuracy is "
            f"{fmt(a['floor.blank.t2'])} in this design and {fmt(b['floor.blank.t2'])} in the compared one "
            f"(chance {fmt(chance)}), the shuffled-image one {fmt(a['floor.shuffled.t2'])} and "
            f"{fmt(b['floor.shuffled.t2'])}; t3's most frequent blank-image answer takes "
            f"{fmt(a['t3_blank_top_share'])} and {fmt(b['t3_blank_top_share'])} of the questions; V_acc (t2) in fog "
            f"is {design_v_acc(a, 'fog')} and {design_v_acc(b, 'fog')}.")


#: a reason an image–severity pair has no equivalent visibility, as the nominal table heads its column
REMOVED_COLUMNS = {"several_roots": "several roots", "outside_0_1": "gain ∉ (0, 1)", "no_root": "no root",
                   "saturated": "saturated", "undefined": "undefined", "missing_input": "no input"}


def nominal_table(tab, depth_backend: str, approximate: bool) -> str:
    """The ImageNet-C severities on the visibility axis (spec Table VII) as a Markdown table, with the monotone share
    and the depth below it.

    Parameters
    ----------
    tab : pandas.DataFrame
        :func:`murk.scene.table_vii` of the nominal equivalence: per severity ``median_v_eq_gain_m``,
        ``spread_p90_p10``, ``median_v_eq_std_ratio_m``, ``n_images`` and ``n_<reason>`` of the pairs removed;
        ``attrs`` ``monotone_share`` and ``monotone_n``.
    depth_backend : str
        The depth backend the equivalence was computed with.
    approximate : bool
        It is an approximate (constant) depth: the metres rest on the assumed depth scale.

    Returns
    -------
    str
        The table (a "removed" column for each reason that removed a pair), then one line.
    """
    shown_reasons = [r_ for r_ in REMOVED_COLUMNS if f"n_{r_}" in tab and int(tab[f"n_{r_}"].sum())]
    md = markdown_table([
        {"ImageNet-C severity": str(s), "median V_eq (gain), m": fmt(r.median_v_eq_gain_m, 0),
         "P90/P10 across images": (fmt(r.spread_p90_p10, 1) + "×") if np.isfinite(r.spread_p90_p10) else "n/a",
         "median V_eq (std ratio), m": fmt(r.median_v_eq_std_ratio_m, 0), "images": str(int(r.n_images))}
        | {f"removed: {REMOVED_COLUMNS[r_]}": str(int(r[f"n_{r_}"])) for r_ in shown_reasons}
        for s, r in tab.iterrows()])
    return md + (f"\nShare of images whose gain-matched V_eq decreases monotonically over severities "
                 f"{tab.index.min()}–{tab.index.max()}: {fmt(100 * tab.attrs['monotone_share'], 0)} % (of "
                 f"{tab.attrs['monotone_n']} images with a V_eq at every severity). Depth: {depth_backend}"
                 + (" (approximate: metres rest on the assumed depth scale)." if approximate else "."))
