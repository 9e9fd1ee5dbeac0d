"""Phrases of the analysis notebooks' findings: a crossing and a W as the paper writes them, an option mass, the span
of a statistic over the models, a count of models, and the verdicts recorded in a numbers file grouped for a
sentence (the abstract, the discussion, the contributions)."""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from murk.report._claims import UNDEFINED
from murk.report.paper import fmt_crossing, fmt_estimate, fmt_list, fmt_range, fmt_visibility_estimate


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
