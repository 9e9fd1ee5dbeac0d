"""Number formatting: the one way a number reaches the paper (the report's ``fmt*`` functions).

Every number reaches the paper through the ``fmt*`` functions below: one way to
write a value (:func:`fmt`), an interval (``[lo, hi]``, :func:`fmt_interval`),
an estimate with its interval (:func:`fmt_estimate`; an undefined point has
no interval), a bound (:func:`fmt_bound`, :func:`fmt_crossing`), a range over
models (:func:`fmt_range`) and a sweep level (:func:`fmt_level`: 250, 125, 62.5,
31.3, 15.6, 7.8, 3.9, 1.95 m as in the spec; numbers keys keep the exact
:func:`level_label`).
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal
from typing import Iterable

__all__ = ["fmt", "fmt_interval", "fmt_estimate", "fmt_bound", "fmt_crossing", "fmt_range", "fmt_level",
           "fmt_visibility", "fmt_visibility_interval", "fmt_visibility_estimate", "visibility_digits", "BOUND_SIGNS",
           "fmt_list", "level_label", "NOT_COMPUTED"]


#: what the paper says for a number, table or figure that this run did not compute
NOT_COMPUTED = "not computed in this run"


def _finite(x) -> bool:
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def fmt(x: float, digits: int = 2) -> str:
    """A number as the paper prints it: ``digits`` decimals; NaN (or None) as "n/a".

    A value that rounds to zero prints without a sign (``-0.001`` -> ``0.00``, never ``-0.00``).

    >>> fmt(0.8049), fmt(-0.001), fmt(-0.2, 1)
    ('0.80', '0.00', '-0.2')
    """
    if not _finite(x):
        return "n/a"
    s = f"{float(x):.{digits}f}"
    return s[1:] if s.startswith("-") and not any(c in "123456789" for c in s) else s


def fmt_interval(lo: float, hi: float, digits: int = 2) -> str:
    """A bootstrap interval, the one way the paper writes it: ``[lo, hi]``; ``""`` when undefined."""
    if not (_finite(lo) and _finite(hi)):
        return ""
    return f"[{fmt(lo, digits)}, {fmt(hi, digits)}]"


def fmt_bound(x: float, lower: bool = False, upper: bool = False, digits: int = 2) -> str:
    """A value that may be a bound: ``≥ x`` (lower bound), ``≤ x`` (upper bound), ``x``, or "n/a"."""
    s = fmt(x, digits)
    if s == "n/a":
        return s
    return f"≥ {s}" if lower else f"≤ {s}" if upper else s


#: Sign printed before a value censored on each side: "below" = the true value is
#: at most the printed one (a crossing below the last sweep level; W bounded from
#: above), "above" = at least (a crossing at or before the first level; W
#: bounded from below).
BOUND_SIGNS: dict[str, str] = {"below": "≤", "above": "≥"}


def _side(censored, lower_bound_sign: str | None = None) -> str:
    """Normalise a ``censored`` argument to "", "below", "above" or "undefined".

    ``True`` (the legacy boolean) means "not reached within the sweep", i.e.
    ``"below"``, unless ``lower_bound_sign`` asks for the old "≥" explicitly.
    """
    if censored is None or censored is False or (isinstance(censored, float) and math.isnan(censored)):
        return ""
    if isinstance(censored, (bool, int)) and not isinstance(censored, str):
        if not censored:
            return ""
        return "above" if lower_bound_sign == "≥" else "below" if lower_bound_sign in (None, "≤") else "sign"
    side = str(censored)
    if side not in ("", "below", "above", "undefined"):
        raise ValueError(f"censored must be '', 'below', 'above', 'undefined' or a bool, got {censored!r}")
    return side


def _is_sweep_level(v: float) -> bool:
    from murk import scene

    return any(math.isclose(v, float(x), rel_tol=1e-9) for x in scene.SWEEP_M)


def fmt_crossing(value: float, censored=None, digits: int = 2, lower_bound_sign: str | None = None) -> str:
    """A crossing visibility or a W, printed as a bound on the side it is censored.

    Parameters
    ----------
    value : float
        Crossing visibility in metres, or W in decades; NaN prints "n/a".
    censored : {"", "below", "above", "undefined"} or bool, optional
        Side of the bound (``censored_side`` / ``w_censored_side`` of
        :func:`murk.results.crossing_table`): ``"below"`` = the true value is
        at most *value* (a crossing below the last level, ``≤ 1.95``; a W
        bounded from above), ``"above"`` = at least (a crossing at or before
        the first level, ``≥ 250``; a W bounded from below), ``"undefined"``
        prints "n/a". A boolean is the legacy form, "not reached within the
        sweep": True is ``"below"`` (``≤``); with ``lower_bound_sign="≥"`` it is
        ``"above"``, the old default for a W.
    digits : int, default 2
        Decimals of an unbounded value and of a bounded W. A bound that is a
        sweep level (1.953125 m, 250 m) prints as the level's name
        (:func:`fmt_level`: ``1.95``, ``250``), not as ``2.0``.
    lower_bound_sign : str, optional
        Legacy: the sign printed for ``censored=True``.

    Returns
    -------
    str
        ``"12.4"``, ``"≤ 1.95"``, ``"≥ 250"``, ``"≥ 0.80"`` or ``"n/a"``.

    Examples
    --------
    >>> fmt_crossing(1.953125, "below", 1), fmt_crossing(250.0, "above", 1), fmt_crossing(0.8, "above")
    ('≤ 1.95', '≥ 250', '≥ 0.80')
    """
    side = _side(censored, lower_bound_sign)
    if side == "undefined" or value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if not side:
        return fmt(value, digits)
    s = fmt_level(value) if _is_sweep_level(float(value)) else fmt(value, digits)
    sign = lower_bound_sign if side == "sign" else BOUND_SIGNS[side]
    return f"{sign} {s}"


def fmt_estimate(point: float, lo: float = float("nan"), hi: float = float("nan"), censored=None,
                 digits: int = 2, *, lower: bool = False, upper: bool = False) -> str:
    """A point with its bootstrap interval, ``"0.75 [0.38, 1.05]"``; bounds as :func:`fmt_crossing`, alone.

    An undefined point (NaN, or ``censored="undefined"``) prints ``"n/a"`` alone,
    never an interval of something that is not defined; an undefined interval is
    left out. ``lower`` / ``upper`` are the keyword forms of ``censored="above"``
    (``≥``) / ``"below"`` (``≤``). A censored point is a bound and prints as the bound
    alone (issue 39): its resamples are bounds too, and their interval would cross it
    (never ``"≤ -2.11 [-2.11, 0.26]"``); a verdict on a bound uses the resamples'
    side (:func:`murk.report.awareness_lag`).

    >>> fmt_estimate(0.8, 0.7, 0.9, "above"), fmt_estimate(float("nan"), 0.1, 0.9), fmt_estimate(0.2, 0.1, 0.3)
    ('≥ 0.80', 'n/a', '0.20 [0.10, 0.30]')
    """
    if censored is None and (lower or upper):
        censored = "above" if lower else "below"
    p = fmt_crossing(point, censored, digits)
    if p == "n/a" or p[0] in "≤≥":
        return p
    ci = fmt_interval(lo, hi, digits)
    return f"{p} {ci}" if ci else p


def fmt_range(values, censored=None, digits: int = 2) -> str:
    """The range of a quantity over models, each end keeping its own bound.

    Parameters
    ----------
    values : array_like of float
        One value per model (NaN left out).
    censored : array_like of str or bool, optional
        The side of each value (as :func:`fmt_crossing`); default none.
    digits : int, default 2

    Returns
    -------
    str
        ``"0.05–0.39"`` without bounds; ``"0.05 – ≥ 0.39"`` when an end is a
        bound (the end's sign is kept); one value (all equal) prints once;
        ``"n/a"`` when nothing is defined. Values whose W is undefined are left
        out.

    Examples
    --------
    >>> fmt_range([0.05, 0.39, 0.2], ["", "above", ""])
    '0.05 – ≥ 0.39'
    """
    import numpy as np

    v = np.asarray(values, dtype=np.float64).ravel()
    if censored is None:
        sides = [""] * v.size
    else:
        c = np.broadcast_to(np.asarray(censored, dtype=object), v.shape)
        sides = [_side(x if not isinstance(x, np.bool_) else bool(x)) for x in c]
    keep = [i for i in range(v.size) if np.isfinite(v[i]) and sides[i] != "undefined"]
    if not keep:
        return "n/a"

    def end(pick):
        vals = np.array([v[i] for i in keep])
        target = pick(vals)
        at = [i for i in keep if math.isclose(v[i], target, rel_tol=1e-12, abs_tol=1e-12)]
        bounded = [i for i in at if sides[i]]  # a tie keeps the bound (the weaker statement)
        i = (bounded or at)[0]
        return fmt_crossing(float(v[i]), sides[i], digits)

    lo, hi = end(np.min), end(np.max)
    if lo == hi:
        return lo
    return f"{lo} – {hi}" if (lo[0] in "≤≥" or hi[0] in "≤≥") else f"{lo}–{hi}"


def fmt_level(visibility_m: float) -> str:
    """A sweep level as the spec writes it: ``clean`` (V = inf), else one decimal
    (two below 2 m), rounded half up, without a trailing ``.0``:
    250, 125, 62.5, 31.3, 15.6, 7.8, 3.9, 1.95.

    >>> [fmt_level(250 / 2 ** k) for k in range(8)]
    ['250', '125', '62.5', '31.3', '15.6', '7.8', '3.9', '1.95']
    """
    if not _finite(visibility_m) and not (visibility_m is not None and float(visibility_m) == math.inf):
        return "n/a"
    v = float(visibility_m)
    if not math.isfinite(v):
        return "clean"
    q = Decimal("0.01") if visibility_digits(v) == 2 else Decimal("0.1")
    s = str(Decimal(repr(v)).quantize(q, rounding=ROUND_HALF_UP))
    return s[:-2] if s.endswith(".0") else s


def fmt_visibility(v_m: float) -> str:
    """A visibility in metres (a crossing, a bound of its interval) by the rule of :func:`fmt_level`, so that a
    value at a sweep level reads as the level does (250, 1.95); NaN as "n/a"."""
    return fmt_level(v_m) if _finite(v_m) else "n/a"


def fmt_visibility_interval(lo: float, hi: float, digits: int | None = None) -> str:
    """An interval of visibilities, ``[lo, hi]`` by :func:`fmt_visibility`; ``""`` when undefined.

    With ``digits`` both ends are printed with that many decimals (:func:`fmt`), as
    :func:`fmt_visibility_estimate` does to give an interval the precision of its point.
    """
    if not (_finite(lo) and _finite(hi)):
        return ""
    if digits is None:
        return f"[{fmt_visibility(lo)}, {fmt_visibility(hi)}]"
    return f"[{fmt(lo, digits)}, {fmt(hi, digits)}]"


def visibility_digits(v_m: float) -> int:
    """Decimals of a visibility as the paper prints it (:func:`fmt_level`'s rule): two below 2 m, else one."""
    return 2 if _finite(v_m) and abs(float(v_m)) < 2 else 1


def fmt_visibility_estimate(v_m: float, lo: float = float("nan"), hi: float = float("nan")) -> str:
    """A visibility (m) with its bootstrap interval, all three at the point's precision.

    Parameters
    ----------
    v_m, lo, hi : float
        The point (a crossing visibility, m) and its interval; NaN where undefined.

    Returns
    -------
    str
        ``"16.2 [15.0, 17.3]"`` (one decimal, :func:`visibility_digits`; two below 2 m:
        ``"1.97 [1.95, 2.30]"``), the point alone where the interval is undefined, ``"n/a"``
        where the point is.

    >>> fmt_visibility_estimate(16.2, 15.0, 17.31), fmt_visibility_estimate(1.97, 1.953125, 2.3)
    ('16.2 [15.0, 17.3]', '1.97 [1.95, 2.30]')
    """
    if not _finite(v_m):
        return "n/a"
    d = visibility_digits(v_m)
    ci = fmt_visibility_interval(lo, hi, d)
    return f"{fmt(v_m, d)} {ci}".strip()


def level_label(visibility_m: float) -> str:
    """Name of a sweep level in numbers keys: ``clean`` or the visibility in metres
    written out exactly (``250``, ``62.5``, ``1.953125``)."""
    import numpy as np

    v = float(visibility_m)
    return "clean" if not math.isfinite(v) else np.format_float_positional(v, trim="-")


def fmt_list(items: Iterable[str], conjunction: str = "and") -> str:
    """English enumeration: ``a``, ``a and b``, ``a, b and c``; "none" for no items."""
    items = [str(x) for x in items]
    if not items:
        return "none"
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" {conjunction} " + items[-1]

