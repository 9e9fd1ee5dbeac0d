"""Phrases of the analysis notebooks' findings: a crossing and a W as the paper writes them, an option mass, the span
of a statistic over the models, a count of models, the verdicts recorded in a numbers file grouped for a sentence
(the abstract, the discussion, the contributions), and what was run in the paper's words."""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from murk.report._claims import UNDEFINED, they
from murk.report._markdown import verbatim
from murk.report._format import (fmt, fmt_crossing, fmt_estimate, fmt_level, fmt_list, fmt_range,
                                 fmt_visibility_estimate)


def crossing_text(v: float, lo: float, hi: float, side) -> str:
    """A crossing visibility (m) with its interval, as the paper writes it; a bound is printed without interval.

    Parameters
    ----------
    v, lo, hi : float
        The crossing visibility in metres and its interval (NaN: none).
    side : str or bool
        The crossing's ``censored_side``: ``""`` exact, ``"below"`` never reached (``≤`` the end of the sweep),
        ``"above"`` reached at the first level (``≥`` its start); a bool: True = ``"below"``.

    Returns
    -------
    str
        E.g. ``"7.8 [5.3, 11]"``, ``"≤ 1.95"``, ``"n/a"``.

    Examples
    --------
    >>> crossing_text(7.8125, 5.2, 11.4, ""), crossing_text(1.953125, float("nan"), float("nan"), "below")
    ('7.8 [5.2, 11.4]', '≤ 1.95')
    >>> crossing_text(float("nan"), 1.0, 2.0, "")
    'n/a'
    """
    s = fmt_crossing(v, side, 1)
    if s == "n/a" or s[0] in "≤≥":
        return s
    return fmt_visibility_estimate(v, lo, hi)   # the interval at the point's precision


def w_text(w: float, lo: float, hi: float, lower: bool, upper: bool) -> str:
    """The blind-spot width W as the paper writes it.

    Parameters
    ----------
    w, lo, hi : float
        W in decades (log10 V_acc / V_aware) and its interval.
    lower, upper : bool
        W is a lower (``≥``) or upper (``≤``) bound (a censored crossing).

    Returns
    -------
    str
        ``"W = 0.07 [0.03, 0.10]"``, ``"W ≥ 0.80"`` (a bound) or ``"W undefined"``.

    Examples
    --------
    >>> w_text(0.0749, 0.03, 0.1, False, False)
    'W = 0.07 [0.03, 0.10]'
    >>> w_text(0.8, float("nan"), float("nan"), True, False), w_text(float("nan"), 0, 1, False, False)
    ('W ≥ 0.80', 'W undefined')
    """
    s = fmt_estimate(w, lo, hi, lower=lower, upper=upper)
    return "W undefined" if s == "n/a" else f"W {s}" if (lower or upper) else f"W = {s}"


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def fmt_mass(x: float) -> str:
    """An option mass (a probability): two decimals, or below 0.01 two significant digits times a power of ten.

    Parameters
    ----------
    x : float
        The median first-token probability on the option letters, in [0, 1].

    Returns
    -------
    str
        ``"0.93"``, ``"7.1×10⁻³"``, ``"0.00"`` for 0, ``"n/a"`` for NaN.

    Examples
    --------
    >>> fmt_mass(0.934), fmt_mass(0.00712), fmt_mass(0.0), fmt_mass(float("nan"))
    ('0.93', '7.1×10⁻³', '0.00', 'n/a')
    """
    if not np.isfinite(x):
        return "n/a"
    if x >= 0.01 or x == 0:
        return f"{x:.2f}"
    mant, exp = f"{x:.1e}".split("e")
    return f"{mant}×10" + str(int(exp)).translate(_SUPERSCRIPT)


def span_phrase(what: str, values: Iterable[float], digits: int = 2) -> str:
    """``<what> spans a–b`` over the models, ``<what> is a`` where they agree (or one model), ``<what> is undefined``.

    Parameters
    ----------
    what : str
        The statistic, e.g. ``"t2 accuracy"``.
    values : iterable of float
        Its value per model (NaN: undefined; left out of the span).
    digits : int
        Decimals (:func:`murk.report.fmt_range`).

    Examples
    --------
    >>> span_phrase("t2 accuracy", [0.25, 0.5]), span_phrase("ECE", [0.1]), span_phrase("W", [float("nan")])
    ('t2 accuracy spans 0.25–0.50', 'ECE is 0.10', 'W is undefined')
    """
    r = fmt_range(values, digits=digits)
    return f"{what} is undefined" if r == "n/a" else f"{what} is {r}" if "–" not in r else f"{what} spans {r}"


def count_phrase(group: Sequence[str], total: int, unit: str) -> str:
    """How many of ``total`` (models, pairs) a verdict holds for, naming them.

    Parameters
    ----------
    group : sequence of str
        The display names the verdict holds for (at least one).
    total : int
        How many there are in all.
    unit : str
        The singular noun (``"model"``).

    Returns
    -------
    str
        ``"2 of 5 models (a and b)"``, ``"all 3 models (a, b and c)"``, ``"both models (a and b)"``, and
        ``"the model a"`` for one of one.

    Examples
    --------
    >>> count_phrase(["a", "b"], 5, "model"), count_phrase(["a", "b"], 2, "model"), count_phrase(["a"], 1, "model")
    ('2 of 5 models (a and b)', 'both models (a and b)', 'the model a')
    """
    if total == 1:
        return f"the {unit} {group[0]}"
    what = (("both" if total == 2 else f"all {total}") + f" {unit}s" if len(group) == total
            else f"{len(group)} of {total} {unit}s")
    return f"{what} ({fmt_list(group)})"


def verdict_groups(numbers: Mapping[str, str], prefix: str, models: Sequence[str], name: Callable[[str], str],
                   key: Callable[[str], str], arms: Sequence[str] | None = None,
                   arm_words: Mapping[str, str] | None = None) -> dict[str, list[str]]:
    """The verdicts recorded under ``verdict.<prefix>.<model key>`` grouped by verdict: {verdict: [who]}.

    Parameters
    ----------
    numbers : mapping of str to str
        A numbers file (or the notebook's :class:`murk.report.Numbers`).
    prefix : str
        The key between ``verdict.`` and the model's key, with ``{arm}`` where the arm goes
        (``"rq2.c_int.{arm}.t2"``; without ``arms``: ``"rq4.t2"``).
    models : sequence of str
        The models, in the order the groups list them.
    name, key : callable
        A model's display name, and its part of a numbers key (:func:`murk.core.model_slug`).
    arms : sequence of str, optional
        The arms to fill ``{arm}`` with; ``who`` is then the name followed by the arm's words.
    arm_words : mapping, optional
        Arm -> its words (default ``{"fog": "in fog", "underwater": "under water"}``).

    Returns
    -------
    dict of str to list of str
        Verdicts in the order first met; ``undefined: …`` verdicts pooled as :data:`murk.report.UNDEFINED`; keys
        not recorded are skipped.

    Examples
    --------
    >>> n = {"verdict.rq2.c_int.fog.t2.a": "lags", "verdict.rq2.c_int.fog.t2.b": "undefined: no values"}
    >>> verdict_groups(n, "rq2.c_int.{arm}.t2", ["a", "b", "c"], str.upper, str, ["fog"])
    {'lags': ['A in fog'], 'undefined': ['B in fog']}
    """
    words = arm_words or {"fog": "in fog", "underwater": "under water"}
    out: dict[str, list[str]] = {}
    for m in models:
        for arm in (arms or [None]):
            k = f"verdict.{prefix.format(arm=arm)}.{key(m)}"
            if k not in numbers:
                continue
            v = numbers[k]
            v = UNDEFINED if v.startswith("undefined") else v
            out.setdefault(v, []).append(name(m) + (f" {words[arm]}" if arm else ""))
    return out


def option_mass_footnote(low_mass: Sequence[str], low_pipeline_check: Sequence[str], threshold: float) -> str:
    """The models table's footnote on the option mass: which models put little of their first-token probability on
    the option letters (their results are not interpreted), or that every model's first token is the answer.

    Parameters
    ----------
    low_mass : sequence of str
        Display names of the models below ``threshold`` (:func:`murk.results.low_option_mass`).
    low_pipeline_check : sequence of str
        Those of them that are random-weight checkpoints (where a low mass is expected).
    threshold : float
        :data:`murk.readout.OPTION_MASS_MIN`.

    Examples
    --------
    >>> option_mass_footnote([], [], 0.5)
    'Every model puts a median of at least 0.5 of its first-token probability on the option letters on clean images (t2 and t3): its first token is the answer.'
    """
    from murk.report._figures import LOW_MASS_MARK   # the mark of every table and legend (imports matplotlib)

    if not low_mass:
        return (f"Every model puts a median of at least {threshold:g} of its first-token probability on the "
                "option letters on clean images (t2 and t3): its first token is the answer.")
    return (f"{LOW_MASS_MARK} Median first-token probability on the option letters on clean images below "
            f"{threshold:g} (t2 or t3) for {fmt_list(low_mass)}: the answer "
            f"and internal confidence of {they(len(low_mass), 'this model', 'these models')} rest on a small part of "
            f"the first-token distribution; {they(len(low_mass), 'its', 'their')} results are not interpreted"
            + (" (expected of random-weight checkpoints: " + fmt_list(low_pipeline_check) + ")"
               if low_pipeline_check else "") + ".")


def items_per_model_words(n_items_of: Mapping[str, int], n_images: int) -> str:
    """Methods' sentence on the items each model was read out on (the first n of the selection).

    Parameters
    ----------
    n_items_of : mapping
        Model display name -> its number of items.
    n_images : int
        The items of the selection.

    Examples
    --------
    >>> items_per_model_words({"A": 4, "B": 2}, 4)
    "Each model is read out on the first n items of the selection: all 4 for A and 2 for B; each model's statistics are over its own items, and where models are compared, over the items they share"
    >>> items_per_model_words({"A": 4}, 4)
    'The model is read out on all 4 items'
    """
    if any(n < n_images for n in n_items_of.values()):
        by_n = sorted(n_items_of, key=lambda who: -n_items_of[who])
        return ("Each model is read out on the first n items of the selection: "
                + fmt_list(f"{'all ' if n_items_of[who] == n_images else ''}{n_items_of[who]} for {who}"
                           for who in by_n)
                + "; each model's statistics are over its own items, and where models are compared, over the items "
                  "they share")
    return f"{'Every model is' if len(n_items_of) > 1 else 'The model is'} read out on all {n_images} items"


def run_words(depth_backend: str, approximate: bool, depth_model: str, constant_depth_m: float,
              pipeline_check: Sequence[str]) -> dict[str, str]:
    """What was run, in the paper's words: the depth for Methods and the colophon's note, and the pipeline check.

    Parameters
    ----------
    depth_backend : str
        The depth backend the run used (the cube's ``depth_backend``).
    approximate : bool
        It is the offline constant depth (the cube's ``depth_approximate``).
    depth_model : str
        The depth checkpoint (``""``: none recorded); shown as written in a code span (a line break as ⏎).
    constant_depth_m : float
        The constant depth's value (:data:`murk.scene.CONSTANT_DEPTH_M`).
    pipeline_check : sequence of str
        The models (as printed: Markdown, e.g. :func:`murk.report.verbatim` of each id) read out from random-weight
        checkpoints.

    Returns
    -------
    dict
        ``methods.depth``, ``depth_note`` and ``pipeline_check_note`` -> the text.
    """
    return {
        "methods.depth": (
            f"Metric depth comes from the {verbatim(depth_backend)} backend, an explicit approximation used because "
            f"no depth weights were available: every pixel is placed at {constant_depth_m:g} m, the spec's median "
            "scene depth, so the fog is uniform over each image and the crossing visibilities in metres rest on that "
            "assumption (W does not)" if approximate else
            f"Metric depth comes from {verbatim(depth_backend)}"
            + (f" (checkpoint {verbatim(' ⏎ '.join(str(depth_model).splitlines()))})" if depth_model else "")
            + (" [@depthanythingv2]" if "depth-anything" in depth_backend else "")
            + ", estimated on the clean image"),
        "depth_note": (
            "an approximate constant depth (no depth weights were available), so absolute visibilities are only as "
            "good as this assumption; W is unaffected by a global depth scale" if approximate else
            "the backend named in Methods, estimated on the clean image"),
        "pipeline_check_note": (
            f"**Pipeline check.** The models {fmt_list(pipeline_check)} are tiny randomly initialised checkpoints "
            "of the real architectures, built offline by murk. Their numbers test the pipeline end to end and say "
            "nothing about any real VLM; every figure carries a pipeline-check mark." if pipeline_check else
            "All models are real pretrained checkpoints."),
    }


def end_of_sweep_finding(v_end: float, where: str, names: Sequence[str], chance: float, accuracy, c_int, verbal,
                         ece) -> str:
    """The sentence on the end of the sweep in one arm (t2): the span over the models of accuracy, both confidences
    and the calibration error of the internal confidence.

    Parameters
    ----------
    v_end : float
        The murkiest level's visibility, metres.
    where : str
        The arm in words (``"in fog"``).
    names : sequence of str
        The models' display names (one model is named; several are "the models").
    chance : float
        t2's chance level.
    accuracy, c_int, verbal, ece : array-like
        Per model: the mean accuracy, internal and verbalized confidence and the ECE of the internal confidence
        at the end of the sweep (NaN: undefined).

    Examples
    --------
    >>> end_of_sweep_finding(1.953125, "in fog", ["A", "B"], 0.25, [0.25, 0.3], [0.9, 0.8], [float("nan")] * 2,
    ...                      [0.6, 0.5])
    'At V = 1.95 m in fog, over the models t2 accuracy spans 0.25–0.30 (chance 0.25), the mean internal confidence spans 0.80–0.90, the mean verbalized confidence is undefined and the ECE of the internal confidence spans 0.50–0.60.'
    """
    return (f"At V = {fmt_level(v_end)} m {where}, "
            + ("over the models " if len(names) > 1 else f"for {fmt_list(names)}, ")
            + span_phrase("t2 accuracy", accuracy)
            + f" (chance {fmt(chance)}), " + span_phrase("the mean internal confidence", c_int)
            + ", " + span_phrase("the mean verbalized confidence", verbal)
            + " and " + span_phrase("the ECE of the internal confidence", ece)
            + ".")


def confident_finding(confident: Mapping[str, tuple[tuple[float, float, float], int]], threshold: float,
                      max_visibility_m: float) -> str:
    """The sentence on the accuracy of the answers given with high internal confidence, pooled over the murky levels.

    Parameters
    ----------
    confident : mapping
        Model display name -> (its accuracy on those answers (mean, lo, hi), their number n).
    threshold : float
        The internal confidence from which an answer counts (the scores' ``confident_threshold``).
    max_visibility_m : float
        The levels pooled: V at most this (the scores' ``confident_max_visibility_m``).

    Examples
    --------
    >>> confident_finding({"A": ((0.5, 0.25, 0.75), 8), "B": ((float("nan"),) * 3, 0)}, 0.9, 7.8125)
    'Pooled over the levels with V ≤ 7.8 m in both arms, the t2 answers given with an internal confidence of at least 0.9 are correct 0.50 [0.25, 0.75] of the time for A (n = 8); B gave no answer with an internal confidence of at least 0.9.'
    """
    t = f"{threshold:g}"
    answered = [who for who, (_, n) in confident.items() if n]
    parts = []
    if answered:
        parts.append(f"the t2 answers given with an internal confidence of at least {t} are correct "
                     + fmt_list(f"{fmt_estimate(*confident[who][0])} of the time for {who} (n = {confident[who][1]})"
                                for who in answered))
    if len(answered) < len(confident):
        parts.append(f"{fmt_list(who for who in confident if who not in answered)} gave no answer with an internal "
                     f"confidence of at least {t}")
    return f"Pooled over the levels with V ≤ {fmt_level(max_visibility_m)} m in both arms, " + "; ".join(parts) + "."
