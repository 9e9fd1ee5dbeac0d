"""Findings as decisions on the scores: what the cube supports, stated with its condition.

The paper states a finding (a collapse, a lag, a wording effect, a plateau, a
control's floor) only through these verdicts, computed in the analyse notebook
from the point estimates and their bootstrap intervals (:mod:`murk.results`).
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

from murk import results

__all__ = ["ABOVE", "AT", "BELOW", "UNDEFINED", "versus_value", "accuracy_fall", "awareness_lag",
           "fall_band", "DIRECTION", "direction", "lag_case", "lag_phrase", "largest_change", "change_words",
           "they", "NO_LAG", "PLATEAU", "REACHES_BAND", "IN_BAND_NO_FALL", "NO_COLLAPSE", "band_verdict",
           "blind_spot_change", "AT_FIRST_LEVEL", "BOUNDED", "COLLAPSE", "LAGS", "LEADS", "NOT_REACHED", "NO_FALL",
           "NO_SKILL", "PARTIAL", "WITH", "best_signal", "best_signal_words"]

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
LAGS, WITH, LEADS, NO_LAG = "lags", "with", "leads", "no lag established"


def awareness_lag(w: float, lo: float, hi: float, lower_bound: bool, upper_bound: bool, margin: float | None = None,
                  p: float | None = None, p_margin: float | None = None, alpha: float = 0.05) -> str:
    """Whether an awareness signal falls later than accuracy (RQ2, RQ3): the sign of W, or its absence.

    A lag (or lead) is stated where the evidence excludes W = 0: the interval, or, within a family of
    such tests, the p-value adjusted for multiplicity (``p``, e.g. :func:`murk.results.holm` of
    :func:`murk.results.bootstrap_p_value`). "With" (the signal moves together with accuracy) is stated
    only where the evidence also excludes a lag of ``margin`` or more, one level of the sweep
    (:func:`murk.results.level_step_decades`; ``p_margin`` from :func:`murk.results.equivalence_p_value`,
    else the interval inside ``(-margin, margin)``): an interval that holds 0 but reaches beyond a level
    (W = 0.05 [-0.67, 1.10] admits a factor of 12 in visibility) establishes neither, :data:`NO_LAG`.

    Parameters
    ----------
    w, lo, hi : float
        W = log10(V_acc / V_aware) in decades and its interval
        (:func:`murk.results.crossing_table`); NaN where W is undefined (both
        crossings censored, or no crossing of accuracy).
    lower_bound : bool
        V_aware is censored and V_acc is not: W is a lower bound (positive).
    upper_bound : bool
        V_acc is censored and V_aware is not: W is an upper bound (negative).
    margin : float, optional
        One sweep level in decades (log10 2 = 0.301 for the study's sweep). Without it (and without
        ``p_margin``) "with" keeps its weaker meaning: the interval holds 0.
    p, p_margin : float, optional
        Adjusted p-values of W = 0 and of |W| >= margin; where given they decide instead of the interval.
    alpha : float, default 0.05
        The family-wise level (1 - the interval level).

    Returns
    -------
    str
        ``"lags"`` (W > 0: the signal falls in murkier conditions than
        accuracy; a positive lower bound counts), ``"leads"`` (W < 0),
        ``"with"`` (|W| below one sweep level), ``"no lag established"`` (neither; also a bound whose
        interval reaches across 0) or ``"undefined"`` (no W, or an exact W without interval).

    >>> awareness_lag(0.8, 0.7, 0.9, True, False), awareness_lag(0.02, -0.05, 0.1, False, False, margin=0.301)
    ('lags', 'with')
    >>> awareness_lag(0.05, -0.67, 1.10, False, False, margin=0.301), awareness_lag(-2.11, -2.11, 0.26, False, True)
    ('no lag established', 'no lag established')
    """
    if not _finite(w):
        return UNDEFINED
    if p is not None:
        excludes_zero = _finite(p) and float(p) <= alpha
    else:
        where = versus_value(w, lo, hi, 0.0)
        if where == UNDEFINED:
            return NO_LAG if (lower_bound or upper_bound) else UNDEFINED
        excludes_zero = where != AT
    if lower_bound:
        return LAGS if w > 0 and excludes_zero else NO_LAG
    if upper_bound:
        return LEADS if w < 0 and excludes_zero else NO_LAG
    if excludes_zero:
        return LAGS if w > 0 else LEADS
    if p_margin is not None:
        return WITH if _finite(p_margin) and float(p_margin) <= alpha else NO_LAG
    if margin is None:
        return WITH
    return WITH if _finite(lo, hi) and -float(margin) < lo and hi < float(margin) else NO_LAG


def fall_band(visibility_m, values, clean: float, floor: float, fractions=(0.1, 0.9)) -> tuple[float, float]:
    """Visibilities (m) at which a falling signal has lost given fractions of its clean-to-floor range.

    With ``fractions = (0.1, 0.9)`` this is the 10–90 % fall of accuracy, the
    band over which it collapses. Each visibility is interpolated linearly in
    log V (:func:`murk.results.crossing_visibility`, whose mid-way value is set
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
        v, c = results.crossing_visibility(np.asarray(visibility_m, float), np.asarray(values, float),
                                           clean, 2 * target - clean)
        out.append(float("nan") if bool(c) or not np.isfinite(v) else float(v))
    return out[0], out[1]


#: Which way each signal moves as the image gets murkier: accuracy and the confidences fall
#: towards their floor (chance), an abstain rate rises towards its floor of one (spec Sec. III).
DIRECTION: dict[str, str] = {"correct": "falls", "c_int": "falls", "verbal_conf": "falls", "abstain": "rises",
                             "abstain2": "rises"}
_FORMS = {"falls": ("fall", "falling", "fallen"), "rises": ("rise", "rising", "risen")}


def direction(signal: str) -> str:
    """``"falls"`` or ``"rises"``: the way ``signal`` moves going murkier (:data:`DIRECTION`).

    Raises
    ------
    KeyError
        An unknown signal (the message lists the known ones).
    """
    if signal not in DIRECTION:
        raise KeyError(f"no direction known for signal {signal!r}; known: {sorted(DIRECTION)}")
    return DIRECTION[signal]


#: the cases of :func:`lag_case` beyond the verdicts of :func:`awareness_lag`
NOT_REACHED, AT_FIRST_LEVEL, BOUNDED = "not reached", "at the first level", "bounded"


def lag_case(verdict: str, aware_side: str = "", lower_bound: bool = False, upper_bound: bool = False) -> str:
    """How a verdict of :func:`awareness_lag` is to be said, given the side on which V_aware is censored.

    Parameters
    ----------
    verdict : str
        ``"lags"``, ``"with"``, ``"leads"`` (or anything else, returned unchanged).
    aware_side : {"", "below", "above", "undefined"}
        ``censored_side`` of the signal's crossing (:func:`murk.results.crossing_table`): ``"below"`` =
        the signal never reaches its mid-way value within the sweep, ``"above"`` = it has reached it at
        the first level.
    lower_bound, upper_bound : bool
        W is a lower (upper) bound.

    Returns
    -------
    str
        ``"not reached"`` (it lags because it never reaches its mid-way value: W ≥ x),
        ``"at the first level"`` (it leads because it has passed its mid-way value at the first level:
        W ≤ x), ``"bounded"`` (W is a bound whose evidence does not exclude zero: nothing can be stated),
        else ``verdict``.

    >>> lag_case("lags", "below", True), lag_case("lags", "", False), lag_case("with", "below", True)
    ('not reached', 'lags', 'bounded')
    """
    if verdict == LAGS and str(aware_side) == "below":
        return NOT_REACHED
    if verdict == LEADS and str(aware_side) == "above":
        return AT_FIRST_LEVEL
    if verdict in (WITH, NO_LAG) and (lower_bound or upper_bound):
        return BOUNDED
    return verdict


def lag_phrase(case: str, signal: str) -> str:
    """The predicate of a generated sentence on W, in the signal's direction (:func:`direction`).

    Parameters
    ----------
    case : str
        A case of :func:`lag_case`.
    signal : str
        The awareness signal (``c_int``, ``verbal_conf``, ``abstain``, ``abstain2``).

    Returns
    -------
    str
        E.g. for an abstain rate: ``"lags accuracy, rising only in murkier conditions than those in which
        accuracy falls"``; ``"does not rise to its mid-way value within the sweep, so it lags accuracy (W a
        lower bound)"``; ``"rises as accuracy falls, its interval of W excluding a lag of one sweep level or
        more"``; ``"cannot be placed against accuracy: no lag can be established, …"``; ``"rises before accuracy
        falls"``.

    Raises
    ------
    ValueError
        An unknown case.
    """
    verb = direction(signal)
    base, ing, past = _FORMS[verb]
    with_ = "falls together with accuracy" if verb == "falls" else "rises as accuracy falls"
    phrases = {
        LAGS: f"lags accuracy, {ing} only in murkier conditions than those in which accuracy falls",
        NOT_REACHED: f"does not {base} to its mid-way value within the sweep, so it lags accuracy (W a lower bound)",
        WITH: f"{with_}, its interval of W excluding a lag of one sweep level or more",
        NO_LAG: (f"cannot be placed against accuracy: no lag can be established, {ing} neither clearly later than "
                 "accuracy falls nor within one sweep level of it (the interval of W is too wide)"),
        LEADS: f"{verb} before accuracy falls, in clearer conditions",
        AT_FIRST_LEVEL: (f"has already {past} past its mid-way value at the first level of the sweep, before "
                         "accuracy falls (W an upper bound)"),
        BOUNDED: "is bounded against accuracy on one side only, so neither a lag nor its absence can be stated",
    }
    if case not in phrases:
        raise ValueError(f"unknown lag case {case!r}; known: {sorted(phrases)}")
    return phrases[case]


def largest_change(diffs) -> int | None:
    """Index of the largest change by magnitude (ties: the first), or None where none is defined.

    Parameters
    ----------
    diffs : sequence of (point, lo, hi)
        Paired differences, e.g. accuracy at each ImageNet-C severity minus clean accuracy.

    >>> largest_change([(-0.02, -0.05, 0.0), (0.12, 0.05, 0.2), (-0.1, -0.2, 0.0)])
    1
    """
    mags = [abs(float(d[0])) if _finite(d[0]) else -1.0 for d in diffs]
    if not mags or max(mags) < 0:
        return None
    return int(np.argmax(mags))


def change_words(point: float, lo: float, hi: float) -> str:
    """A change stated with its sign: ``"a rise of 0.17 [0.03, 0.30]"``, ``"a fall of 0.10 [0.03, 0.20]"`` (the
    interval of the magnitude), ``"no change (0.00 …)"`` / a change whose interval holds zero marked so.

    The change is "a rise" or "a fall" by the sign of its point; when the interval holds zero the words add
    that it is not distinguishable from none (:func:`versus_value` against 0).

    >>> change_words(-0.1, -0.2, -0.03), change_words(0.05, -0.01, 0.1)
    ('a fall of 0.10 [0.03, 0.20]', 'a rise of 0.05 [-0.01, 0.10], its interval holding zero')
    """
    from murk.report._format import fmt, fmt_estimate

    if not _finite(point):
        return "no change that can be estimated"
    p = float(point)
    if fmt(abs(p)) == fmt(0.0):
        core = f"no change ({fmt_estimate(p, lo, hi)})"
        return core
    if p > 0:
        core = f"a rise of {fmt_estimate(p, lo, hi)}"
    else:
        core = f"a fall of {fmt_estimate(-p, -hi, -lo)}"
    return core + (", its interval holding zero" if versus_value(p, lo, hi, 0.0) == AT else "")


def they(n: int, one: str = "it", many: str = "they") -> str:
    """``one`` for a single model, ``many`` for more: the pronoun of a sentence about ``n`` models
    (``they(1, "its", "their")`` -> ``"its"``)."""
    return one if int(n) == 1 else many


#: verdicts of :func:`band_verdict` (RQ4: the ImageNet-C fog severities against a model's failure band)
PLATEAU, REACHES_BAND, IN_BAND_NO_FALL, NO_COLLAPSE = ("plateau", "reaches the band", "in the band, no fall",
                                                       "no collapse")


def band_verdict(fall: str, veq_median_m, edge_m: float, changes) -> str:
    """Whether the ImageNet-C fog severities reach into a model's failure band (RQ4), by position and by accuracy.

    A severity lies in the band by position where its median equivalent visibility is at or below the
    visibility at which the model's fog accuracy starts to fall (``edge_m``). The severities *reach into the
    band* only where, at such a severity, the model's accuracy has also fallen below its clean accuracy (the
    paired change's interval below 0): a severity placed in the band at which accuracy holds or rises above
    clean does not reach the failure.

    Parameters
    ----------
    fall : str
        The model's fog verdict of :func:`accuracy_fall`.
    veq_median_m : sequence of float, length S
        Each severity's median equivalent visibility (m); NaN where undefined.
    edge_m : float
        Where fog accuracy has lost a tenth of its clean-to-chance range (m; :func:`fall_band`).
    changes : sequence of (point, lo, hi), length S
        Accuracy at each severity minus clean accuracy, with its paired interval.

    Returns
    -------
    str
        :data:`NO_COLLAPSE` (fog accuracy does not fall through its mid-way value), :data:`PLATEAU` (every
        defined severity lies above the edge), :data:`REACHES_BAND`, :data:`IN_BAND_NO_FALL` (placed in the
        band, but accuracy does not fall there), or :data:`UNDEFINED` (no equivalent visibility or no edge).

    >>> band_verdict(COLLAPSE, [110, 60], 80, [(0.0, -0.1, 0.1), (0.1, 0.03, 0.2)])
    'in the band, no fall'
    """
    if fall not in (COLLAPSE, PARTIAL):
        return NO_COLLAPSE
    veq = np.asarray(veq_median_m, dtype=float)
    if not np.isfinite(veq).any() or not _finite(edge_m):
        return UNDEFINED
    inside = [s for s, v in enumerate(veq) if np.isfinite(v) and v <= float(edge_m)]
    if not inside:
        return PLATEAU
    falls = [s for s in inside if s < len(changes) and versus_value(*changes[s], 0.0) == BELOW]
    return REACHES_BAND if falls else IN_BAND_NO_FALL


def blind_spot_change(before: str, after: str, method: str = "T(V̂)") -> str:
    """What a recalibration did to a blind spot, in words, from the verdicts of W before and after it.

    A blind spot *closes* only where there was one, W > 0 before (its interval
    excludes 0 above, or a positive lower bound), and W holds 0 after; where W
    held 0, or was negative, before, the words say there was no blind spot to
    close (issue 39), whatever the verdict after.

    Parameters
    ----------
    before, after : str
        Verdicts of :func:`awareness_lag` (``"lags"``, ``"with"``, ``"leads"``,
        ``"undefined"``) of W without recalibration and with ``method``.
    method : str, default "T(V̂)"
        The recalibration's name in the sentence.

    Returns
    -------
    str
        A clause, e.g. ``"with T(V̂) the blind spot closes (its interval holds 0)"`` or
        ``"there was no blind spot to close (W holds 0 without recalibration and with T(V̂))"``.

    >>> blind_spot_change("lags", "with")
    'with T(V̂) the blind spot closes (its interval holds 0)'
    >>> blind_spot_change("with", "with")
    'there was no blind spot to close (W holds 0 without recalibration and with T(V̂))'
    >>> blind_spot_change("lags", "no lag established")[:48]
    'with T(V̂), whether the blind spot closes cannot'
    """
    cannot = "both no lag and a lag of a sweep level or more"
    was = ("W holds 0 without recalibration" if before == WITH else
           "the confidence falls before accuracy without recalibration")   # read where before is WITH or LEADS
    if before == NO_LAG and after != UNDEFINED:
        return ("whether there was a blind spot to close cannot be established (W's interval without "
                f"recalibration admits {cannot})")
    if after == NO_LAG and before in (LAGS, WITH, LEADS):
        if before == LAGS:
            return (f"with {method}, whether the blind spot closes cannot be established (W's interval admits "
                    f"{cannot})")
        return f"there was no blind spot to close ({was}; with {method} no lag can be established)"
    if UNDEFINED in (before, after) or before not in (LAGS, WITH, LEADS) or after not in (LAGS, WITH, LEADS):
        return (f"what {method} does to the blind spot cannot be stated (accuracy does not collapse there, or W "
                "is undefined)")
    if before == LAGS:
        return {WITH: f"with {method} the blind spot closes (its interval holds 0)",
                LAGS: f"with {method} the blind spot stays open",
                LEADS: f"with {method} the blind spot is reversed (the confidence falls first)"}[after]
    return {WITH: f"there was no blind spot to close ({was} and with {method})" if before == WITH else
                  f"there was no blind spot to close ({was}; with {method} W holds 0)",
            LAGS: f"there was no blind spot to close ({was}), and {method} opens one",
            LEADS: f"there was no blind spot to close ({was}; with {method} too)" if before == LEADS else
                   f"there was no blind spot to close ({was}); with {method} the confidence falls first"}[after]



def best_signal(point: dict, resamples: dict, ci: float = 0.95, lower_is_better: bool = True,
                atol: float = 1e-12) -> tuple[str | None, str | None, list]:
    """Which signal, if any, is the best by a statistic and its paired resamples (e.g. AURC).

    A signal s is named best only where it beats **every** other signal t: the
    percentile interval (level ``ci``) of the paired difference ``t - s`` over
    the same resamples lies above 0 (below 0 where higher is better). For one
    signal this is an intersection-union rule (it needs every comparison, so
    its error rate is at most that of one comparison, with no correction);
    at most one signal can pass it, and a signal that is not truly better
    than some other passes only if that one comparison errs. Where none
    passes, no signal is named.

    Parameters
    ----------
    point : dict
        Signal -> the statistic on the data (e.g. :func:`murk.results.aurc`);
        it picks the signal a sentence reports where none is named.
    resamples : dict
        Signal -> shape (B,) float array, the statistic of each of the same B
        resamples (paired: entry b is the same draw for every signal, e.g.
        :func:`murk.results.resampled_aurc` with one ``counts``); NaN
        resamples are skipped (:func:`murk.results.percentile_interval`).
        Same keys as ``point``.
    ci : float, default 0.95
        Level of the intervals of the paired differences.
    lower_is_better : bool, default True
        True for a risk (AURC, E-AURC), False for a coverage.
    atol : float, default 1e-12
        A difference within it is 0 (rounding of two equal statistics, e.g.
        two rankings with the same expected risk curve, is no separation).

    Returns
    -------
    best : str or None
        The signal that beats every other, or None.
    leader : str or None
        ``best`` where one is named, else the signal with the best point
        (ties: the first; None without signals).
    rivals : list of str
        The signals that ``leader`` does not beat (empty where ``best`` is
        named), in the order of ``point``.

    Raises
    ------
    ValueError
        If the keys of ``point`` and ``resamples`` differ, the resamples do
        not share one shape (B,), or ``ci`` is not in (0, 1).

    >>> r = {"a": np.array([0.1, 0.2, 0.15]), "b": np.array([0.3, 0.4, 0.35]), "c": np.array([0.12, 0.1, 0.2])}
    >>> best_signal({"a": 0.15, "b": 0.35, "c": 0.14}, r, 0.9)
    (None, 'c', ['a'])
    >>> best_signal({"a": 0.15, "b": 0.35}, {"a": r["a"], "b": r["b"]}, 0.9)
    ('a', 'a', [])
    """
    if set(point) != set(resamples):
        raise ValueError(f"best_signal: point and resamples name different signals: {sorted(point)} against "
                         f"{sorted(resamples)}")
    arrays = {s: np.asarray(resamples[s], dtype=np.float64) for s in point}
    shapes = {v.shape for v in arrays.values()}
    if len(shapes) > 1 or any(len(sh) != 1 for sh in shapes):
        raise ValueError(f"best_signal: every signal needs resamples of one shape (B,), got {sorted(shapes)}")
    if not arrays:
        return None, None, []
    sign = 1.0 if lower_is_better else -1.0

    def beats(s: str, t: str) -> bool:
        lo, _ = results.percentile_interval(sign * (arrays[t] - arrays[s]), ci)
        return bool(lo > atol)

    best = next((s for s in arrays if all(beats(s, t) for t in arrays if t != s)), None)
    if best is not None:
        return best, best, []
    key = {s: sign * float(v) if _finite(v) else math.inf for s, v in point.items()}
    leader = min(point, key=lambda s: key[s])
    return None, leader, [t for t in point if t != leader and not beats(leader, t)]


def best_signal_words(model: str, verdict: tuple, labels: dict, estimate: str, statistic: str = "AURC") -> str:
    """The sentence (lower case, no final stop) of a :func:`best_signal` verdict for one model.

    Parameters
    ----------
    model : str
        The model's name as the paper prints it.
    verdict : tuple
        ``(best, leader, rivals)`` from :func:`best_signal`.
    labels : dict
        Signal -> its name in the paper.
    estimate : str
        The leader's statistic with its interval as printed (e.g. ``"0.12 [0.08, 0.16]"``).
    statistic : str, default "AURC"
        The statistic's name.

    Returns
    -------
    str
        Where a signal is named: that it ranks the answers best, ahead of every
        other in the paired resamples; otherwise that no signal can be named
        best, with the lowest one and the signals it is not separated from.

    >>> best_signal_words("M", (None, "v", ["c"]), {"v": "V̂", "c": "c_int"}, "0.10 [0.05, 0.15]")
    'for M, no signal can be named best: the lowest AURC, 0.10 [0.05, 0.15] of V̂, is not below that of c_int in the interval of their paired difference'
    """
    best, leader, rivals = verdict
    if leader is None:
        return f"for {model}, no signal was compared"
    if best is not None:
        return (f"for {model}, {labels[best]} ranks the answers best ({statistic} {estimate}), ahead of every other "
                "signal: the interval of each paired difference excludes 0 in its favour")
    names = [labels[t] for t in rivals]
    them = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return (f"for {model}, no signal can be named best: the lowest {statistic}, {estimate} of {labels[leader]}, "
            f"is not below that of {them} in the interval of their paired difference")
