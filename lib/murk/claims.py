"""Findings as decisions on the scores: what the cube supports, stated with its condition.

The paper states a finding (a collapse, a lag, a wording effect, a plateau, a
control's floor) only through these verdicts, computed in the analyse notebook
from the point estimates and their bootstrap intervals (:mod:`murk.analysis`).
Each function returns a short verdict string; the notebook turns it into a
sentence, which therefore says the opposite, or "not observed", when the cube
says so.

The rule throughout: an effect is stated when its percentile bootstrap
interval (spec Sec. III) excludes the null value; otherwise the cube is said
not to show it. Intervals are those of the paired bootstrap over images.
"""

from __future__ import annotations

import math

import numpy as np

from murk import metrics

__all__ = ["ABOVE", "AT", "BELOW", "UNDEFINED", "versus_value", "accuracy_fall", "awareness_lag",
           "fall_band"]

ABOVE, AT, BELOW, UNDEFINED = "above", "at", "below", "undefined"


def _finite(*xs) -> bool:
    return all(x is not None and math.isfinite(float(x)) for x in xs)


def versus_value(point: float, lo: float, hi: float, value: float) -> str:
    """Where an estimate lies relative to a reference value (e.g. accuracy against chance).

    Parameters
    ----------
    point, lo, hi : float
        The estimate and its interval.
    value : float
        The reference (chance 0.25 for t2, 0.5 for t3; 0 for a difference).

    Returns
    -------
    str
        ``"above"`` (lo > value), ``"below"`` (hi < value), ``"at"`` (the
        interval holds the value) or ``"undefined"`` (no finite point or interval).

    >>> versus_value(0.9, 0.8, 1.0, 0.25), versus_value(0.26, 0.2, 0.3, 0.25)
    ('above', 'at')
    """
    if not _finite(point, lo, hi, value):
        return UNDEFINED
    if lo > value:
        return ABOVE
    if hi < value:
        return BELOW
    return AT


#: verdicts of :func:`accuracy_fall`
NO_SKILL, COLLAPSE, PARTIAL, NO_FALL = "no skill", "collapse", "partial", "no fall"


def accuracy_fall(clean: tuple[float, float, float], end: tuple[float, float, float], censored: bool,
                  floor: float) -> str:
    """What accuracy does along the sweep (RQ1).

    Parameters
    ----------
    clean, end : (point, lo, hi)
        Accuracy on the clean image and at the last (murkiest) level.
    censored : bool
        Whether the crossing V_acc is censored (accuracy never reaches its
        mid-way value within the sweep).
    floor : float
        Chance accuracy of the task.

    Returns
    -------
    str
        ``"no skill"``: the clean accuracy is not above chance, so there is no
        fall to place on the axis; ``"collapse"``: accuracy crosses its mid-way
        value and ends at (or below) chance; ``"partial"``: it crosses but ends
        above chance; ``"no fall"``: it never reaches the mid-way value;
        ``"undefined"``: no estimate.
    """
    where_clean = versus_value(*clean, floor)
    if where_clean == UNDEFINED:
        return UNDEFINED
    if where_clean != ABOVE:
        return NO_SKILL
    if censored:
        return NO_FALL
    where_end = versus_value(*end, floor)
    if where_end == UNDEFINED:
        return UNDEFINED
    return PARTIAL if where_end == ABOVE else COLLAPSE


#: verdicts of :func:`awareness_lag`
LAGS, WITH, LEADS = "lags", "with", "leads"


def awareness_lag(w: float, lo: float, hi: float, lower_bound: bool, upper_bound: bool) -> str:
    """Whether an awareness signal falls later than accuracy (RQ2, RQ3): the sign of W.

    Parameters
    ----------
    w, lo, hi : float
        W = log10(V_acc / V_aware) in decades and its interval
        (:func:`murk.analysis.crossing_table`); NaN where W is undefined (both
        crossings censored, or no crossing of accuracy).
    lower_bound : bool
        V_aware is censored and V_acc is not: W is a lower bound (positive).
    upper_bound : bool
        V_acc is censored and V_aware is not: W is an upper bound (negative).

    Returns
    -------
    str
        ``"lags"`` (W > 0: the signal falls in murkier conditions than
        accuracy; a positive lower bound counts), ``"leads"`` (W < 0),
        ``"with"`` (the interval holds 0: they fall together) or ``"undefined"``.

    >>> awareness_lag(0.8, 0.7, 0.9, True, False), awareness_lag(0.02, -0.05, 0.1, False, False)
    ('lags', 'with')
    """
    if not _finite(w):
        return UNDEFINED
    if lower_bound:
        return LAGS if w > 0 else WITH
    if upper_bound:
        return LEADS if w < 0 else WITH
    where = versus_value(w, lo, hi, 0.0)
    return {ABOVE: LAGS, BELOW: LEADS, AT: WITH}.get(where, UNDEFINED)


def fall_band(visibility_m, values, clean: float, floor: float, fractions=(0.1, 0.9)) -> tuple[float, float]:
    """Visibilities (m) at which a falling signal has lost given fractions of its clean-to-floor range.

    With ``fractions = (0.1, 0.9)`` this is the 10–90 % fall of accuracy, the
    band over which it collapses. Each visibility is interpolated linearly in
    log V (:func:`murk.metrics.crossing_visibility`, whose mid-way value is set
    to the target).

    Parameters
    ----------
    visibility_m : (L,) float
        Visibilities of the sweep levels, clear to murky (m).
    values : (L,) float
        The signal at those levels.
    clean, floor : float
        Its clean value and its floor.

    Returns
    -------
    (float, float)
        The visibilities (m), clear end first; NaN where the signal never
        loses that fraction within the sweep or has no range.
    """
    clean, floor = float(clean), float(floor)
    out = []
    for f in fractions:
        target = clean - f * (clean - floor)
        v, c = metrics.crossing_visibility(np.asarray(visibility_m, float), np.asarray(values, float),
                                           clean, 2 * target - clean)
        out.append(float("nan") if bool(c) or not np.isfinite(v) else float(v))
    return out[0], out[1]
