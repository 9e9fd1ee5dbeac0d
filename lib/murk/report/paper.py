"""The numbers file the paper reads, the one formatting layer, and the paper's conversion without Quarto.

Every number in ``paper/index.qmd`` is an inline expression
```{python} N["key"]``` reading ``outputs/paper_numbers.json`` (key -> formatted
string). The analyse notebook writes it: each number, and each sentence that
states a finding, is recorded (:meth:`Numbers.record`) in the notebook cell
that computes it, and the label of that cell (``#| label: …``) is written with
it (``outputs/paper_numbers.provenance.json``, :func:`load_provenance`), so a
key's origin is its cell, also for a key built with an f-string. The converted
HTML paper links each number, figure and table to its cell in a rendered view of
the executed notebook (``outputs/paper/04_analyse.html#<label>``,
:func:`notebook_view`); the PDF names the cell.
Figures and tables are embedded from the executed notebooks under
``outputs/notebooks/`` by cell label, with Quarto's
``{{< embed ../outputs/notebooks/04_analyse.ipynb#fig-… >}}`` shortcode. Where
Quarto is installed it renders the paper; where it is not,
:func:`render_paper` resolves the same inline expressions, embeds (from the
notebooks' cell outputs) and includes, then converts with pandoc
(``pypandoc-binary``) to HTML and, through Typst (PyPI ``typst``), to PDF.

Formatting
----------
Every number reaches the paper through the ``fmt*`` functions below: one way to
write a value (:func:`fmt`), an interval (``[lo, hi]``, :func:`fmt_interval`),
an estimate with its interval (:func:`fmt_estimate`; an undefined point has
no interval), a bound (:func:`fmt_bound`, :func:`fmt_crossing`), a range over
models (:func:`fmt_range`) and a sweep level (:func:`fmt_level`: 250, 125, 62.5,
31.3, 15.6, 7.8, 3.9, 1.95 m as in the spec; numbers keys keep the exact
:func:`level_label`).
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import shlex
import shutil
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any, Iterable, Mapping

from murk import core

__all__ = ["fmt", "fmt_interval", "fmt_estimate", "fmt_bound", "fmt_crossing", "fmt_range", "fmt_level",
           "fmt_visibility", "fmt_visibility_interval", "fmt_visibility_estimate", "visibility_digits", "BOUND_SIGNS",
           "fmt_list", "level_label", "NOT_COMPUTED", "Numbers", "write_numbers", "load_numbers", "cited_keys",
           "load_provenance", "provenance_file", "current_cell_label", "notebook_view", "view_name",
           "INLINE_RE", "INCLUDE_RE", "EMBED_RE", "cell_options", "notebook_cells", "resolve_embeds", "EmbedError",
           "remake_words",
           "resolve_qmd", "crossref", "label_numbers", "render_paper", "typst_options", "TYPST_HEADER", "markdown_table", "write_text_atomic",
           "write_netcdf_atomic",
           "verbatim", "estimate_cell", "CELL_BREAK", "LUA_FILTER", "SECTION_FILTER", "LUA_FILTERS",
           "settings_rows", "SPEC_SECTIONS", "SPEC_COUNTERPARTS", "ANALYSIS_TABLES", "spec_mentions",
           "notebook_identity", "MixedPaperError",
           "refuse_mixed_paper", "stamp_html"]

INLINE_RE = re.compile(r"`\{python\}\s*N\[\s*[\"']([^\"']+)[\"']\s*\]\s*`")
ANY_INLINE_RE = re.compile(r"`\{python\}[^`]*`")
INCLUDE_RE = re.compile(r"\{\{<\s*include\s+(\S+)\s*>\}\}")
#: Quarto's embed shortcode: ``{{< embed path.ipynb#label >}}`` (one label; options after it are ignored)
EMBED_RE = re.compile(r"\{\{<\s*embed\s+([^\s#>]+)#([A-Za-z0-9_-]+)[^>]*>\}\}")
CELL_RE = re.compile(r"^```\{python\}.*?^```\s*$", re.S | re.M)
FRONT_RE = re.compile(r"\A---\n(.*?)\n---\n", re.S)

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


#: the label of the IPython cell being run (set before each cell by :func:`_on_pre_run_cell`)
_CELL: dict[str, Any] = {"label": None, "shells": set()}


def _label_of(source: str) -> str | None:
    try:
        label = cell_options(source or "").get("label")
    except Exception:  # a cell whose leading "#|" lines are not YAML has no label
        return None
    return str(label) if label else None


def _on_pre_run_cell(info=None) -> None:
    """IPython ``pre_run_cell`` callback: remember the label of the cell about to run."""
    _CELL["label"] = _label_of(getattr(info, "raw_cell", "") or "")


def current_cell_label() -> str | None:
    """The label (``#| label: …``) of the notebook cell being executed, or None.

    Inside IPython (a kernel run by papermill, nbclient or JupyterLab) the first call
    registers a ``pre_run_cell`` callback that reads the label from the raw source of
    each cell before it runs (IPython's documented event, ``ExecutionInfo.raw_cell``);
    the cell running at that first call is read from the kernel's input history.
    Outside IPython, and in a cell without a label, it is None.

    Returns
    -------
    str or None
    """
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency of ipykernel
        return None
    shell = get_ipython()
    if shell is None:
        return None
    if id(shell) not in _CELL["shells"]:
        _CELL["shells"].add(id(shell))
        shell.events.register("pre_run_cell", _on_pre_run_cell)
        raw = getattr(getattr(shell, "history_manager", None), "input_hist_raw", None) or [""]
        _CELL["label"] = _label_of(raw[-1])
    return _CELL["label"]


class Numbers(dict):
    """The numbers file being written by a notebook: key -> formatted string.

    ``record`` formats a value where it is computed, keeps it, and returns the
    string (for use in a generated sentence); :meth:`save` writes the file
    (:func:`write_numbers`). Recording a key again replaces it (re-running a
    cell in JupyterLab).

    Every key set (by :meth:`record`, :meth:`fill_missing` or ``numbers[key] = …``)
    also keeps, in :attr:`provenance`, the label of the notebook cell executing at
    that moment (:func:`current_cell_label`), or :attr:`cell` where it is set
    (a script outside IPython); :meth:`save` writes it beside the numbers
    (:func:`provenance_file`). A key set in an unlabelled cell gets no entry.

    Examples
    --------
    >>> n = Numbers("/tmp/murk-doctest-numbers.json")
    >>> n.record("w.c_int.fog.t2.m", 0.0749, ci=(0.03, 0.1))
    '0.07'
    >>> n["w.c_int.fog.t2.m.ci"]
    '[0.03, 0.10]'
    >>> n.record("w.c_int.underwater.t2.m", 1.05, ci=(0.9, 1.2), lower=True), n["w.c_int.underwater.t2.m.ci"]
    ('≥ 1.05', '')
    """

    def __init__(self, path: str | os.PathLike | None = None, cell: str | None = None):
        super().__init__()
        self.path = Path(path) if path else core.numbers_file()
        #: key -> label of the cell that set it
        self.provenance: dict[str, str] = {}
        #: the cell label given to keys set outside IPython (None: :func:`current_cell_label`)
        self.cell = cell
        current_cell_label()  # inside IPython: start following the cells now

    def __setitem__(self, key: str, value: str) -> None:
        super().__setitem__(key, value)
        label = self.cell if self.cell is not None else current_cell_label()
        if label:
            self.provenance[key] = label
        else:
            self.provenance.pop(key, None)

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self.provenance.pop(key, None)

    def record(self, key: str, value: Any, digits: int = 2, *, ci: tuple[float, float] | None = None,
               lower: bool = False, upper: bool = False) -> str:
        """Record ``key``.

        Parameters
        ----------
        key : str
            Dotted key, e.g. ``v.correct.fog.t2.<model slug>``.
        value : str, int or float
            A string is kept as is (a sentence, a name); an int is written
            without decimals; a float with ``digits`` decimals (NaN: "n/a").
        ci : (lo, hi), optional
            Also record ``<key>.ci`` (:func:`fmt_interval`; ``""`` when the point or
            the interval is undefined, or the point is a bound: a bound prints alone, as in
            :func:`fmt_estimate`).
        lower, upper : bool
            The value is a lower (``≥``) or upper (``≤``) bound.

        Returns
        -------
        str
            The recorded string.
        """
        if isinstance(value, str):
            s = value
        elif isinstance(value, (bool,)) or (hasattr(value, "dtype") and str(getattr(value, "dtype")) == "bool"):
            s = "yes" if bool(value) else "no"
        elif isinstance(value, int) or (hasattr(value, "dtype") and "int" in str(getattr(value, "dtype"))):
            s = str(int(value))
        else:
            s = fmt_bound(value, lower, upper, digits)
        self[key] = s
        if ci is not None:  # no interval for an undefined point, nor one that would cross a bound
            self[key + ".ci"] = fmt_interval(*ci, digits) if s != "n/a" and not (lower or upper) else ""
        return s

    def fill_missing(self, keys: Iterable[str]) -> list[str]:
        """Record ``n/a (not computed in this run)`` for each key not recorded; returns those keys."""
        filled = sorted(k for k in set(keys) if k not in self)
        for k in filled:
            self[k] = f"n/a ({NOT_COMPUTED})"
        return filled

    def save(self) -> Path:
        """Write the numbers file and its provenance atomically (:func:`write_numbers`)."""
        return write_numbers(self, self.path, self.provenance)


def cited_keys(qmd_text: str) -> set[str]:
    """The numbers keys a paper source cites (``N["key"]``)."""
    return set(INLINE_RE.findall(qmd_text))


def provenance_file(path: str | os.PathLike | None = None) -> Path:
    """The provenance file beside a numbers file: ``paper_numbers.json`` -> ``paper_numbers.provenance.json``.

    Parameters
    ----------
    path : path, optional
        The numbers file (default :func:`murk.core.numbers_file`, ``outputs/paper_numbers.json``).

    Returns
    -------
    Path
    """
    path = Path(path) if path else core.numbers_file()
    return path.with_name(f"{path.stem}.provenance{path.suffix or '.json'}")


def write_numbers(numbers: Mapping[str, str], path: str | os.PathLike | None = None,
                  provenance: Mapping[str, str] | None = None) -> Path:
    """Write the numbers file atomically (JSON object, sorted keys, str values), and its provenance.

    Parameters
    ----------
    numbers : mapping of str to str
        Key -> formatted value.
    path : path, optional
        Default :func:`murk.core.numbers_file`.
    provenance : mapping of str to str, optional
        Key -> label of the notebook cell that recorded it (default ``numbers.provenance`` where
        ``numbers`` is a :class:`Numbers`). Written, for the keys of ``numbers`` only, to
        :func:`provenance_file` (JSON object, sorted keys) before the numbers file, so that a
        numbers file is never newer than its provenance. ``{}`` is written when none is given,
        so that an old provenance file never describes new numbers.

    Returns
    -------
    Path
        The numbers file.

    Raises
    ------
    TypeError
        If a value or a cell label is not a string (numbers are formatted where they are computed).
    """
    bad = [k for k, v in numbers.items() if not isinstance(v, str)]
    if bad:
        raise TypeError(f"numbers must be formatted strings; not: {bad[:5]}")
    if provenance is None:
        provenance = getattr(numbers, "provenance", None) or {}
    prov = {k: v for k, v in provenance.items() if k in numbers}
    bad = [k for k, v in prov.items() if not isinstance(v, str)]
    if bad:
        raise TypeError(f"cell labels must be strings; not for: {bad[:5]}")
    path = Path(path) if path else core.numbers_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    for target, content in ((provenance_file(path), prov), (path, dict(numbers))):
        tmp = target.with_name(target.name + ".tmp")
        with core.guard(target, cleanup=[tmp]):
            tmp.write_text(json.dumps(content, indent=1, sort_keys=True, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, target)
    return path


def load_numbers(path: str | os.PathLike | None = None) -> dict[str, str]:
    """Read the numbers file (default ``outputs/paper_numbers.json``).

    Raises
    ------
    FileNotFoundError
        If the analyse stage has not written it.
    """
    path = Path(path) if path else core.numbers_file()
    if not path.is_file():
        raise FileNotFoundError(f"{path} missing: run the analyse stage (notebooks/04_analyse.py) first")
    return json.loads(path.read_text(encoding="utf-8"))


def load_provenance(path: str | os.PathLike | None = None) -> dict[str, str]:
    """Where each number comes from: key -> label of the analyse notebook's cell that recorded it.

    The label is the cell's ``#| label: …`` option in ``notebooks/04_analyse.py``
    (and in the executed ``outputs/notebooks/04_analyse.ipynb``), e.g.
    ``{"finding.rq1.fog.t2": "num-rq1", "cfg.seed": "num-scores"}``; find the cell by
    searching the notebook for ``label: num-rq1``, or open the rendered view beside the
    paper at ``outputs/paper/04_analyse.html#num-rq1``.

    Parameters
    ----------
    path : path, optional
        The numbers file (default :func:`murk.core.numbers_file`,
        ``outputs/paper_numbers.json``, as :func:`load_numbers`); the provenance is read
        from the file beside it (:func:`provenance_file`,
        ``paper_numbers.provenance.json``), written with it by :meth:`Numbers.save`.

    Returns
    -------
    dict of str to str
        Key -> cell label, for every key recorded in a labelled cell.

    Raises
    ------
    FileNotFoundError
        If the analyse stage has not written the numbers file, or wrote it without
        provenance (an older murk): re-run the analyse stage.
    """
    path = Path(path) if path else core.numbers_file()
    prov = provenance_file(path)
    if not prov.is_file():
        what = "the numbers file was written by an older murk" if path.is_file() else f"{path} missing too"
        raise FileNotFoundError(f"{prov} missing ({what}): run the analyse stage (notebooks/04_analyse.py)")
    return json.loads(prov.read_text(encoding="utf-8"))


def cell_options(source: str) -> dict[str, Any]:
    """Quarto cell options of a code cell: the leading ``#| key: value`` lines, parsed as YAML.

    >>> cell_options("#| label: fig-a\\n#| fig-cap: 'A, t2'\\nplot()")
    {'label': 'fig-a', 'fig-cap': 'A, t2'}
    """
    import yaml

    lines = []
    for line in source.splitlines():
        if not line.startswith("#|"):
            break
        lines.append(line[2:].removeprefix(" "))
    return (yaml.safe_load("\n".join(lines)) or {}) if lines else {}


def notebook_cells(path: str | os.PathLike) -> dict[str, Any]:
    """The labelled code cells of a notebook (``#| label: …``): label -> cell (nbformat).

    Raises
    ------
    FileNotFoundError
        If the notebook does not exist (the message names the stage that writes it).
    ValueError
        If two cells carry the same label.
    """
    import nbformat

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"notebook {path} missing: run the pipeline (snakemake) so that the stage "
                                f"notebook notebooks/{path.stem}.py is executed into {path.parent}")
    nb = nbformat.read(path, as_version=4)
    cells: dict[str, Any] = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        label = cell_options(cell.source).get("label")
        if label:
            if label in cells:
                raise ValueError(f"{path}: two cells are labelled {label!r}")
            cells[str(label)] = cell
    return cells


def notebook_identity(path: str | os.PathLike) -> dict[str, Any] | None:
    """The identities an executed stage notebook records (its cell labelled ``murk-identity``).

    Parameters
    ----------
    path : path
        An executed notebook (``outputs/notebooks/04_analyse.ipynb``, ``02_depth.ipynb``, ...).

    Returns
    -------
    dict or None
        The JSON output of that cell (:func:`murk.pipeline.identity_bundle`): ``run_id``
        and, for the analyse notebook, ``analysis_id`` and ``models``; None when the
        notebook has no such cell or output (written by an older murk, or the cell failed).

    Raises
    ------
    FileNotFoundError
        If the notebook does not exist.
    """
    from murk import core

    cell = notebook_cells(path).get(core.IDENTITY_LABEL)
    if cell is None:
        return None
    found = _outputs(cell, core.IDENTITY_MIME)
    return dict(found[0]) if found and isinstance(found[0], dict) else None


class MixedPaperError(ValueError):
    """The numbers file and the executed notebooks the paper embeds from are of different identities."""


class EmbedError(KeyError, ValueError):
    """A cell the paper embeds is absent from its executed notebook, failed there or has no output of its kind.

    A :class:`KeyError` (a label absent) and a :class:`ValueError` (a failed or
    empty cell); its ``str`` is its one-line message (no quotes), which names the
    notebook, the cell and the command that makes the notebook again
    (:func:`remake_words`). ``python -m murk.report.paper`` prints it and exits with 2.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def remake_words(nb_path: str | os.PathLike) -> str:
    """The command that makes the executed stage notebook ``nb_path`` again, for its output root.

    Parameters
    ----------
    nb_path : path
        ``<output root>/notebooks/<stage>.ipynb`` (``02_depth``, ``04_analyse``).

    Returns
    -------
    str
        The user's command again with ``--forcerun <stage>``, e.g. ``"make demo
        ARGS='--forcerun analyse'"`` (with ``--config output_dir=<root>`` for
        another root than ``outputs/``; Snakemake runs the
        stage again, which writes the notebook when it runs to its end, and what
        follows it), and for the analyse notebook also docs/stages.md's by-hand
        papermill command.
    """
    nb = Path(nb_path)
    root = nb.parent.parent if nb.parent.name == "notebooks" else core.output_dir()
    stage = {"02_depth": "depth", "04_analyse": "analyse", "05_beyond": "beyond"}.get(nb.stem)
    if stage is None:
        return f"run the stage notebooks/{nb.stem}.py again into {root} (make demo)"
    od = "" if root.absolute() == core.output_dir().absolute() else f"--config output_dir={root} "
    words = (f"run the command that made this output root again with --forcerun {stage} added, e.g. "
             f"make demo ARGS='{od}--forcerun {stage}' with your other --config settings (Snakemake runs the "
             f"{stage} stage again, which rewrites {nb}, and what follows it)")
    if stage in ("analyse", "beyond"):
        words += f", or by hand: {_analyse_command(root, nb, None)}"
    return words


def _analyse_command(root: Path, nb: Path, models: str | None) -> str:
    """The by-hand analyse (or beyond) command of docs/stages.md that writes ``nb`` for the output root ``root``."""
    def shown(p: Path) -> str:
        try:
            return p.relative_to(Path.cwd()).as_posix()
        except ValueError:
            return p.as_posix()

    y = f" -y {shlex.quote(f'models: {models}')}" if models else ""
    od = "" if root == core.output_dir() else f" -p output_dir {shlex.quote(shown(root))}"
    stage = "05_beyond" if nb.stem.startswith("05_beyond") else "04_analyse"
    y = "" if stage == "05_beyond" else y   # the beyond notebook takes the study's models
    return f"python -m murk.pipeline.execute notebooks/{stage}.py {shlex.quote(shown(nb))}{y}{od}"


def refuse_mixed_paper(output_dir: str | os.PathLike | None = None) -> dict[str, str]:
    """Refuse, before anything is written, a paper whose text and embeds would come from two analyses.

    The paper takes its numbers and sentences from ``paper_numbers.json`` and its
    tables and figures from the executed ``notebooks/04_analyse.ipynb`` (and the scene
    figure from ``notebooks/02_depth.ipynb``). The analyse notebook writes its analysis
    identity (:func:`murk.pipeline.analysis_id`) into both; the depth notebook records
    the run identity (:func:`murk.pipeline.run_id`) that the numbers file records too.

    Parameters
    ----------
    output_dir : path, optional
        The output root (default :func:`murk.core.output_dir`).

    Returns
    -------
    dict
        ``run_id`` and ``analysis_id`` of the paper (empty strings where the numbers
        file records none and no executed notebook contradicts it; ``{}`` without a
        numbers file, which :func:`load_numbers` then reports).

    Raises
    ------
    MixedPaperError
        (a ValueError) If ``04_analyse.ipynb`` exists and its analysis identity is not
        the numbers file's (or either records none), the same for ``05_beyond.ipynb``, or
        ``02_depth.ipynb`` exists and records another run identity than the numbers file.
        The one message names both files, both identities and the fix: re-run that stage so
        that it writes both (docs/stages.md's by-hand command, python -m murk.pipeline.execute,
        which writes ``outputs/notebooks/04_analyse.ipynb``), or remove the two numbers
        fragments (``analysis/numbers-study.json``, ``numbers-beyond.json``) and run ``make
        paper`` (Snakemake then re-runs the analysis stages).
    """
    root = core.output_dir(output_dir)
    numbers_path = core.numbers_file(root)
    if not numbers_path.is_file():
        return {}
    numbers = load_numbers(numbers_path)
    got = {"run_id": str(numbers.get("run_id", "")), "analysis_id": str(numbers.get("analysis_id", ""))}
    nb_dir = core.notebooks_out_dir(root)

    def said(x: str) -> str:
        return x or "none recorded (written by an older murk)"

    for nb in (nb_dir / f"{stage}.ipynb" for stage in core.NUMBERS_FRAGMENTS):   # the study's, then beyond the spec
        if not nb.is_file():
            continue
        which = "analyse" if nb.stem == "04_analyse" else "beyond"
        ident = notebook_identity(nb) or {}
        have = str(ident.get("analysis_id") or "")
        if not (have and got["analysis_id"] and have == got["analysis_id"]):
            models = numbers.get("analysis.models")
            try:
                import yaml

                models_yaml = (yaml.safe_dump(json.loads(models), default_flow_style=True, width=10 ** 6).strip()
                               if models else None)
            except (ValueError, TypeError):
                models_yaml = None
            nb_models = ident.get("models")
            nb_note = f", models {json.dumps(nb_models)}" if nb_models else ""
            num_note = f", models {models}" if models else ""
            make_paper = "make paper" if root == core.output_dir() else f"make paper ARGS='--config output_dir={root}'"
            raise MixedPaperError(
                f"make paper (python -m murk.report.paper) refuses to render the paper of {root}: its numbers file and the "
                f"executed {which} notebook it embeds tables and figures from come from different analyses (the "
                f"text would say one thing and the tables and figures another):\n"
                f"  {numbers_path}: analysis identity {said(got['analysis_id'])}{num_note}\n"
                f"  {nb}: analysis identity {said(have)}{nb_note}\n"
                f"Nothing was written. Fix: re-run the {which} stage so that it writes both, one of:\n"
                f"  (1) by hand, as docs/stages.md shows, writing the executed notebook to {nb}:\n"
                f"      {_analyse_command(root, nb, models_yaml)}\n"
                f"  (2) rm {' '.join(str(core.numbers_fragment(s_, root)) for s_ in core.NUMBERS_FRAGMENTS)}, then {make_paper} "
                f"(Snakemake re-runs the analyse and beyond stages with the run settings' models).")
    depth_nb = nb_dir / "02_depth.ipynb"
    if depth_nb.is_file() and got["run_id"]:
        have = str((notebook_identity(depth_nb) or {}).get("run_id") or "")
        if have != got["run_id"]:
            raise MixedPaperError(
                f"make paper (python -m murk.report.paper) refuses to render the paper of {root}: the executed depth "
                f"notebook it embeds the scene figure from is of another run than its numbers file:\n"
                f"  {numbers_path}: run identity {got['run_id']}\n"
                f"  {depth_nb}: run identity {said(have)}\n"
                f"Nothing was written. Fix: run the depth and analyse stages of this output root again (make demo; "
                f"by hand notebooks/02_depth.py, then {_analyse_command(root, nb, None)}).")
    return got


def stamp_html(path: str | os.PathLike, ids: Mapping[str, str]) -> Path:
    """Write the identities into a rendered HTML page's head: ``<meta name="murk-run-id" content="r-…">``.

    Parameters
    ----------
    path : path
        The HTML file (rewritten atomically).
    ids : mapping
        ``run_id``, ``analysis_id`` (:func:`refuse_mixed_paper`); empty values are left out.

    Returns
    -------
    Path
        ``path``.
    """
    import html as _html

    path = Path(path)
    tags = "".join(f'<meta name="murk-{k.replace("_", "-")}" content="{_html.escape(str(v), quote=True)}">\n'
                   for k, v in ids.items() if v)
    if not tags:
        return path
    text = path.read_text(encoding="utf-8")
    text = text.replace("</head>", tags + "</head>", 1) if "</head>" in text else tags + text
    return write_text_atomic(path, text)


def _outputs(cell, mime: str) -> list[Any]:
    return [o["data"][mime] for o in cell.get("outputs", [])
            if o.get("output_type") in ("display_data", "execute_result") and mime in o.get("data", {})]


def _embed(nb_path: Path, label: str, cell, fig_dir: Path, link: str) -> str:
    """Markdown for one embedded cell: its figure or table, caption and label, and a link to the notebook."""
    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    if errors:
        raise EmbedError(f"cell {label!r} of {nb_path} (embedded by the paper) failed "
                         f"({errors[0].get('ename')}); fix: {remake_words(nb_path)}")
    opts = cell_options(cell.source)
    if label.startswith("fig-"):
        pngs = _outputs(cell, "image/png")
        if not pngs:
            raise EmbedError(f"cell {label!r} of {nb_path} (embedded by the paper) has no image output; "
                             f"fix: {remake_words(nb_path)}")
        fig_dir.mkdir(parents=True, exist_ok=True)
        f = fig_dir / f"{nb_path.stem}-{label}.png"
        data = pngs[0] if isinstance(pngs[0], str) else "".join(pngs[0])
        f.write_bytes(base64.b64decode(data))
        body = f"![{opts.get('fig-cap', '')}]({f.as_posix()}){{#{label}}}"
    else:
        mds = ["".join(m) if isinstance(m, list) else str(m) for m in _outputs(cell, "text/markdown")]
        if not mds:
            raise EmbedError(f"cell {label!r} of {nb_path} (embedded by the paper) has no Markdown output; "
                             f"fix: {remake_words(nb_path)}")
        body = "\n\n".join(m.strip() for m in mds)
        if label.startswith("tbl-"):
            body = f": {opts.get('tbl-cap', '')} {{#{label}}}\n\n{body}"
    return (f"{body}\n\n::: {{.embed-source}}\nSource: [{nb_path.name}, cell `{label}`]({link})\n:::\n")


def _placeholder(label: str, fig_dir: Path, why: str) -> str:
    """A labelled stand-in for an embed whose notebook is missing: the paper says so instead of failing."""
    text = f"{NOT_COMPUTED}: {why}"
    # the placeholder's caption names its spec counterpart too (SPEC_COUNTERPARTS)
    cap = text + (f" ({SPEC_COUNTERPARTS[label]})" if label in SPEC_COUNTERPARTS else "")
    if label.startswith("fig-"):
        fig_dir.mkdir(parents=True, exist_ok=True)
        f = fig_dir / f"missing-{label}.svg"
        esc = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        f.write_text(f'<svg xmlns="http://www.w3.org/2000/svg" width="640" height="60" viewBox="0 0 640 60">'
                     f'<rect width="640" height="60" fill="#f4f4f4" stroke="#999"/>'
                     f'<text x="320" y="35" font-family="sans-serif" font-size="14" text-anchor="middle">{esc}</text>'
                     f'</svg>', encoding="utf-8")
        return f"![{cap}]({f.as_posix()}){{#{label}}}\n"
    body = markdown_table([{"note": text}])
    return f": {cap} {{#{label}}}\n\n{body}" if label.startswith("tbl-") else f"*{text}*\n"


def resolve_embeds(text: str, redirect, fig_dir: str | os.PathLike, link_from: str | os.PathLike,
                   missing: list[str] | None = None) -> str:
    """Replace Quarto's ``{{< embed nb.ipynb#label >}}`` by the cell's output, from the executed notebook.

    An ``image/png`` output of a ``fig-`` cell becomes a figure file in
    ``fig_dir`` with the cell's ``fig-cap`` and label; the Markdown output of a
    ``tbl-`` cell becomes a table with its ``tbl-cap`` and label; each is
    followed by a line "Source: 04_analyse.ipynb, cell `label`" linking to the
    cell in the notebook's rendered view (``04_analyse.html#label``, beside the
    HTML in ``link_from``: :func:`notebook_view`, written by :func:`render_paper`),
    as Quarto links embedded output to its source notebook.

    A notebook that does not exist (its stage did not run for this output root)
    gives a labelled placeholder saying "not computed in this run"; its
    shortcode is appended to ``missing`` when a list is given.

    Parameters
    ----------
    redirect : callable
        Path of the shortcode (as written in the .qmd) -> path on disk.

    Raises
    ------
    EmbedError
        (a KeyError) A label is not in its (existing) notebook; (a ValueError) the
        cell failed or has no output of its kind. One line naming the notebook, the
        cell and the command that makes the notebook again (:func:`remake_words`).
    """
    books: dict[Path, dict] = {}

    def one(m):
        nb_path = Path(redirect(m.group(1)))
        label = m.group(2)
        if not nb_path.is_file():
            if missing is not None:
                missing.append(f"{m.group(1)}#{label}")
            return _placeholder(label, Path(fig_dir), f"{nb_path.name} (its stage did not run)")
        if nb_path not in books:
            books[nb_path] = notebook_cells(nb_path)
        cells = books[nb_path]
        if label not in cells:
            raise EmbedError(f"{nb_path} has no cell labelled {label!r} (embedded by the paper): it is not the "
                             f"executed notebook of this murk's stage (written by another version or by hand), or "
                             f"the label is wrong; fix: {remake_words(nb_path)}; or fix the label in "
                             f"notebooks/{nb_path.stem}.py")
        return _embed(nb_path, label, cells[label], Path(fig_dir), f"{view_name(nb_path)}#{label}")

    return EMBED_RE.sub(one, text)


def resolve_qmd(text: str, numbers: Mapping[str, str], base_dir: str | os.PathLike,
                output_dir: str | os.PathLike | None = None, fig_dir: str | os.PathLike | None = None,
                missing: list[str] | None = None, cite=None) -> str:
    """Turn the paper's Quarto source into plain Markdown.

    Embed shortcodes are replaced by the cells' outputs (:func:`resolve_embeds`;
    figures written to ``fig_dir``, default ``<output root>/paper/embed``), include
    shortcodes by the included file, inline ``N["key"]`` expressions by their
    values, and Python cells (the setup cell, which only loads ``N``) are
    dropped. Paths starting with ``../outputs/`` are redirected to
    ``output_dir`` when given. Embeds from a notebook that does not exist
    become "not computed in this run" placeholders, listed in ``missing``.
    ``cite``, a callable ``(key, value) -> markdown``, writes each inline value
    (:func:`render_paper` links it to its cell); default the value itself.

    Raises
    ------
    KeyError
        An inline expression names a key missing from the numbers file, or an
        embed a label missing from its notebook.
    ValueError
        An inline expression other than ``N["key"]`` (the fallback evaluates
        no code), a missing include file, or an embedded cell that failed.
    """
    base = Path(base_dir)
    out_root = Path(output_dir) if output_dir else None

    def redirect(p: str) -> Path:
        if out_root is not None and p.startswith("../outputs/"):
            return out_root / p[len("../outputs/"):]
        return (base / p).resolve()

    def include(m):
        f = redirect(m.group(1))
        if not f.is_file():
            raise ValueError(f"paper include {m.group(1)} -> {f} missing: run the analyse stage")
        return f.read_text(encoding="utf-8")

    paper_dir = core.paper_out_dir(out_root) if out_root is not None else base
    text = CELL_RE.sub("", text)
    if EMBED_RE.search(text):
        text = resolve_embeds(text, redirect, Path(fig_dir) if fig_dir else paper_dir / "embed", paper_dir, missing)
    text = INCLUDE_RE.sub(include, text)
    absent = [k for k in INLINE_RE.findall(text) if k not in numbers]
    if absent:
        raise KeyError(f"paper numbers missing from the numbers file: {sorted(set(absent))}")
    text = INLINE_RE.sub(lambda m: cite(m.group(1), numbers[m.group(1)]) if cite else numbers[m.group(1)], text)
    other = ANY_INLINE_RE.findall(text)
    if other:
        raise ValueError(f"inline expressions other than N[\"key\"] cannot be resolved without Quarto: {other[:3]}")
    if out_root is not None:
        text = re.sub(r"\]\(\.\./outputs/", "](" + out_root.as_posix().rstrip("/") + "/", text)
    return text


# --- the settings table (spec Table III): each value from where it lives ---

def _setting_value(v: Any) -> str:
    """A setting as the settings table prints it: lists joined by ", ", numbers as Python writes them."""
    if isinstance(v, (list, tuple)) or (hasattr(v, "ndim") and getattr(v, "ndim", 0) > 0):
        return ", ".join(_setting_value(x) for x in v)
    if hasattr(v, "item"):            # a NumPy scalar
        v = v.item()
    return str(v)


def settings_rows(cfg: Mapping[str, Any], meta: Mapping[str, Any] | None = None,
                  attrs: Mapping[str, Any] | None = None) -> list[dict[str, str]]:
    """The rows of the paper's settings table (spec Table III), each value taken from where the run took it.

    The frozen configuration's settings (:func:`murk.config.settings_table`; every one has a reader), and
    beside them what the configuration does not hold: the constants in code, with their source (the
    physics of :mod:`murk.physics`, the ImageNet-C severities of :mod:`murk.nominal`, the depth clip range
    of :mod:`murk.depth`, the decoding of :mod:`murk.verbal`), and the choices recorded with the run (the
    COCO split, number of items and seed of the selection, the depth model of the cube). A row of this table is the value the run
    used, not a copy of it (tests/test_config.py ties each row to its reader).

    Parameters
    ----------
    cfg : mapping
        The frozen configuration (:func:`murk.config.load_config`).
    meta : mapping, optional
        The selection's ``items_meta.json`` (``annotation_file``, whose name gives the COCO split, ``n_items``,
        ``seed``); None: those are printed as not recorded.
    attrs : mapping, optional
        The cube's attributes (``depth_model``, ``depth_backend``: the depth the run used); None: not recorded.

    Returns
    -------
    list of dict
        ``setting`` (a dotted key of the configuration, or the code's name of a constant, or the run
        setting), ``value`` (str; lists joined by ", ") and ``source`` (str), in the order of the spec's
        table: items, physics, depth, render, read-out, analysis.
    """
    from murk import core, readout, scene

    frozen = "data/config.yaml"
    rows = [{**r, "source": frozen} for r in core.settings_table(dict(cfg))]
    meta, attrs = dict(meta or {}), dict(attrs or {})
    ann = str(meta.get("annotation_file") or "")
    split = Path(ann).stem.removeprefix("instances_") if ann else ""
    depth_ran = str(attrs.get("depth_model") or attrs.get("depth_backend") or "")

    def code(name: str, value: Any, source: str) -> dict[str, str]:
        return {"setting": name, "value": _setting_value(value), "source": source}

    selection = "the selection (items_meta.json; run setting {})"
    dataset = [code("split", f"COCO {split}" if split else "not recorded", selection.format("split")),
               code("n_items", meta.get("n_items", "not recorded"), selection.format("n_items")),
               code("seed", meta.get("seed", "not recorded"), selection.format("seed"))]
    physics = [
        code("murk.scene.KOSCHMIEDER_CONSTANT", scene.KOSCHMIEDER_CONSTANT,
             "-ln 0.02, the 2 % contrast threshold (Koschmieder 1924; spec Sec. III)"),
        code("murk.scene.FOG_AIRLIGHT", scene.FOG_AIRLIGHT, "fog airlight A, linear RGB (spec Sec. III)"),
        code("murk.scene.SWEEP_M", scene.SWEEP_M, "eight levels, factor 2 from 250 m (spec Sec. III)"),
        code("murk.scene.UNDERWATER_WAVELENGTHS_NM", scene.UNDERWATER_WAVELENGTHS_NM,
             "R, G, B (spec Sec. III)"),
        code("murk.scene.POPE_FRY_ABSORPTION_PER_M", scene.POPE_FRY_ABSORPTION_PER_M,
             "pure water at those wavelengths (Pope & Fry 1997; spec Sec. III)"),
        code("murk.scene.IMAGENET_C_SEVERITIES", scene.IMAGENET_C_SEVERITIES,
             "ImageNet-C fog (Hendrycks & Dietterich 2019; spec Sec. III)"),
    ]
    depth = [
        code("depth_model", depth_ran or "not recorded", "the cube (what the depth stage ran; run setting depth_model)"),
        code("murk.scene.DEPTH_MIN_M", scene.DEPTH_MIN_M, "depth clipped to [0.5, 80] m (spec Sec. III)"),
        code("murk.scene.DEPTH_MAX_M", scene.DEPTH_MAX_M, "depth clipped to [0.5, 80] m (spec Sec. III)"),
    ]
    decoding = [code("murk.readout.DECODING", readout.DECODING, "the only decoding murk implements")]

    def after(prefix: str) -> int:
        at = [i for i, r in enumerate(rows) if r["setting"].startswith(prefix)]
        return at[-1] + 1 if at else len(rows)

    rows[after("readout.dtype_cpu"):after("readout.dtype_cpu")] = decoding
    rows[after("items."):after("items.")] = physics + depth
    first_item = next((i for i, r in enumerate(rows) if r["setting"].startswith("items.")), 0)
    rows[first_item:first_item] = dataset    # the items the run selected, then the selection's rules
    return rows


# --- the spec's map: each figure and table of the paper named as its counterpart in the spec ---

#: The spec's sections (its numbering, I–VI) and the paper's top-level sections that carry them, in order;
#: ``paper/sections.lua`` numbers the paper's sections so (the beyond-the-spec parts are subsections of IV).
SPEC_SECTIONS = {"I": "Introduction", "II": "Related work", "III": "Methods", "IV": "Results", "V": "Discussion",
                 "VI": "Limitations"}

_BEYOND = "beyond the spec"
_IN_TEXT = "beyond the spec as a table; in the text of spec Section {}"

#: The spec's map, as data: every figure and table the paper embeds (its cell label) -> the counterpart its
#: caption names: ``spec Fig. N`` / ``spec Table N`` (the spec's own numbering: Figs. 2–9, Tables II–X, as its
#: text cites them), or "beyond the spec" for what the spec has no figure or table of. The captions
#: (``#| fig-cap:`` / ``#| tbl-cap:`` of the labelled cells of notebooks/04_analyse.py and 02_depth.py) carry
#: the phrase verbatim; :func:`_spec_map_problems` checks the captions, the paper's embeds and the spec's
#: mentions against it (tests/test_paper.py). The spec's text names no Fig. 1, Table I or Table VIII.
SPEC_COUNTERPARTS: dict[str, str] = {
    "fig-scene": "spec Fig. 2",                # one scene at the levels of the sweep
    "tbl-prompts": "spec Table II",            # the prompt templates
    "tbl-config": "spec Table III",            # the fixed settings of the run
    "tbl-models": _IN_TEXT.format("III"),      # the models (the spec lists them in Methods)
    "fig-signals-t2": "spec Fig. 3",           # accuracy, confidence and abstention against V, t2
    "tbl-crossings": "spec Table V",           # crossing visibilities and blind-spot widths
    "fig-blind-spot": "spec Fig. 4",           # blind-spot widths, t2 upper and t3 lower, as the spec
    "fig-reliability-t2": "spec Fig. 5",       # reliability of the internal confidence
    "tbl-end-of-sweep": "spec Table IV",       # the end of the sweep (1.95 m)
    "tbl-confident": _IN_TEXT.format("IV"),    # accuracy of the confident answers
    "tbl-auroc": _IN_TEXT.format("IV"),        # AUROC per level
    "fig-abstain2-t2": "spec Fig. 6",          # the generic abstain wording
    "tbl-verbal-wordings": "spec Table VI",    # the verbalized-confidence wordings
    "fig-nominal": "spec Fig. 7",              # the nominal severities on the fog curves
    "tbl-nominal": "spec Table VII",           # ImageNet-C severities as visibilities
    "tbl-diagnostics": _IN_TEXT.format("IV"),  # the controls, (a)–(c) of the spec's results
    "tbl-marker": _BEYOND,
    "tbl-design-comparison": _BEYOND,
    "tbl-monotonicity": _BEYOND,
    "fig-signals-t3": "spec Fig. 8",           # the verification task t3
    "fig-examples": "spec Fig. 9",             # example images with one model's read-outs
    "fig-monitor": _BEYOND,
    "tbl-monitor-accuracy": _BEYOND,
    "tbl-monitor-w": _BEYOND,
    "tbl-monitor-gate": _BEYOND,
    "tbl-monitor-depth": _BEYOND,
    "tbl-monitor-modes": _BEYOND,
    "tbl-recalibration": _BEYOND,
    "fig-reliability-recal": _BEYOND,
    "tbl-risk-coverage": _BEYOND,
    "fig-risk-coverage": _BEYOND,
    "tbl-sweep-t2": "spec Table IX",           # every level, t2
    "tbl-sweep-t3": "spec Table X",            # every level, t3
    "tbl-missing": _BEYOND,
}

#: The tables the analysis notebook writes (``analysis/<label>.md``, one per labelled table cell), in the
#: order of :data:`SPEC_COUNTERPARTS`: the one list the notebook's ``show_table`` checks its names against and
#: the Snakefile's analyse rule declares as outputs.
ANALYSIS_TABLES: tuple[str, ...] = tuple(k for k in SPEC_COUNTERPARTS if k.startswith("tbl-"))

#: a figure or table a text names: "Figure 2", "Fig. 4", "Figs. 3 and 8", "Table V", "Tables IX and X"
_SPEC_REF_RE = re.compile(r"\b(Fig(?:ure)?s?\.?|Tables?)\s+([0-9]+|[IVXL]+)(?:\s*(?:,|and|–|-)\s*([0-9]+|[IVXL]+))?\b")


def spec_mentions(text: str) -> set[str]:
    """The figures and tables a text names, in the form ``"Fig. 4"`` / ``"Table V"``.

    Parameters
    ----------
    text : str
        The spec's text (or a caption); "Figure 2", "Fig. 4", "Figs. 3 and 8", "Tables IX and X" (also with
        non-breaking spaces) are read.

    Returns
    -------
    set of str

    >>> sorted(spec_mentions("Figure 2 shows; (Fig. 4, Table V); Figs. 3 and 8; Tables IX and X"))
    ['Fig. 2', 'Fig. 3', 'Fig. 4', 'Fig. 8', 'Table IX', 'Table V', 'Table X']
    """
    out = set()
    for m in _SPEC_REF_RE.finditer(text.replace("\xa0", " ")):
        kind = "Fig." if m.group(1).startswith("Fig") else "Table"
        out.update(f"{kind} {n}" for n in m.group(2, 3) if n)
    return out


def _spec_counterpart(label: str) -> str:
    """The phrase the caption of the paper's figure or table ``label`` carries: ``"spec Fig. 3"``,
    ``"spec Table V"`` or a "beyond the spec" phrase (:data:`SPEC_COUNTERPARTS`).

    Raises
    ------
    KeyError
        ``label`` has no entry: add it to ``murk.report.SPEC_COUNTERPARTS`` with its spec counterpart, or
        "beyond the spec".
    """
    try:
        return SPEC_COUNTERPARTS[label]
    except KeyError:
        raise KeyError(f"the paper's {label!r} has no spec counterpart: add it to murk.report.SPEC_COUNTERPARTS "
                       f"(\"spec Fig. N\", \"spec Table N\" or \"beyond the spec\")") from None


def _spec_map_problems(spec_text: str, captions: Mapping[str, str],
                      counterparts: Mapping[str, str] | None = None) -> list[str]:
    """What keeps the paper from carrying the spec's map; empty when it does.

    Parameters
    ----------
    spec_text : str
        The spec's text: every figure and table it names (:func:`spec_mentions`) needs a counterpart.
    captions : mapping
        The paper's embedded figures and tables: cell label -> its caption (``fig-cap`` / ``tbl-cap``).
    counterparts : mapping, optional
        label -> caption phrase; default :data:`SPEC_COUNTERPARTS`.

    Returns
    -------
    list of str
        One line per problem: an embedded figure or table without an entry, a caption that does not carry
        its entry's phrase or names another spec figure or table, a spec figure or table that no embedded one
        names, an entry naming what the spec does not have.
    """
    counterparts = SPEC_COUNTERPARTS if counterparts is None else counterparts
    named = spec_mentions(spec_text)
    problems, covered = [], set()
    for label, caption in captions.items():
        if label not in counterparts:
            problems.append(f"{label}: no spec counterpart (murk.report.SPEC_COUNTERPARTS)")
            continue
        phrase = counterparts[label]
        mine = spec_mentions(phrase) if phrase.startswith("spec ") else set()
        covered |= mine
        if phrase not in caption:
            problems.append(f"{label}: its caption does not say {phrase!r}: {caption!r}")
        others = {m for m in spec_mentions(caption.replace(phrase, "")) if f"spec {m}" in caption} - mine
        if others:
            problems.append(f"{label}: its caption names {sorted(others)}, its counterpart is {phrase!r}")
        if mine - named:
            problems.append(f"{label}: {phrase!r} is not a figure or table the spec names")
    problems += [f"spec {m}: no figure or table of the paper names it" for m in sorted(named - covered)]
    return problems


LABEL_RE = re.compile(r"\{#((fig|tbl)-[A-Za-z0-9_-]+)\}")
XREF_RE = re.compile(r"@((fig|tbl)-[A-Za-z0-9_-]+)")


def label_numbers(md: str) -> dict[str, str]:
    """``{label: "Table 3"}`` for every ``{#fig-…}`` / ``{#tbl-…}`` label of ``md``: numbered per kind in the
    order of first citation (``@label``), then the uncited ones in order of appearance (see :func:`crossref`).

    >>> label_numbers("@tbl-b, @tbl-a\\n\\n: A {#tbl-a}\\n\\n: B {#tbl-b}\\n\\n: C {#tbl-c}")
    {'tbl-b': 'Table 1', 'tbl-a': 'Table 2', 'tbl-c': 'Table 3'}
    """
    placed = [label for label, _ in LABEL_RE.findall(md)]
    cited = [label for label, _ in XREF_RE.findall(md) if label in placed]
    order = list(dict.fromkeys(cited + placed))
    count = {"fig": 0, "tbl": 0}
    numbers: dict[str, str] = {}
    for label in order:
        kind = label.split("-", 1)[0]
        count[kind] += 1
        numbers[label] = f"{'Figure' if kind == 'fig' else 'Table'} {count[kind]}"
    return numbers


def crossref(md: str, prefix_captions: bool = True) -> str:
    """Number figures and tables for the pandoc fallback, in the order the text first cites them.

    Each ``{#fig-…}`` / ``{#tbl-…}`` label gets its number in the order of its
    first reference (``@tbl-…``), as a paper numbers its tables; labels never
    cited follow in order of appearance. Quarto numbers by placement, so
    ``paper/index.qmd`` places each embed after its first citation and in that
    order (``tests/test_paper.py`` checks it): the two renderers then agree.
    Captions are prefixed ("Figure 1: …") unless ``prefix_captions`` is False,
    and ``@fig-…`` references become links ("Figure 1"). The fallback's PDF
    uses the prefixed captions too, with Typst's own (placement) numbering
    turned off (:data:`TYPST_HEADER`).

    Raises
    ------
    KeyError
        A reference to a label that does not exist.
    """
    numbers = label_numbers(md)
    missing = sorted({lab for lab, _ in XREF_RE.findall(md) if lab not in numbers})
    if missing:
        raise KeyError(f"cross-references to missing labels: {missing}")
    if not prefix_captions:
        return XREF_RE.sub(lambda m: f"[{numbers[m.group(1)]}](#{m.group(1)})", md)
    md = re.sub(r"!\[([^\]]*)\]\(([^)]+)\)\{#(fig-[A-Za-z0-9_-]+)\}",
                lambda m: f"![{numbers[m.group(3)]}: {m.group(1)}]({m.group(2)}){{#{m.group(3)}}}", md)
    md = re.sub(r"^: (.*)\{#(tbl-[A-Za-z0-9_-]+)\}\s*$",
                lambda m: f": {numbers[m.group(2)]}: {m.group(1).strip()} {{#{m.group(2)}}}", md, flags=re.M)
    return XREF_RE.sub(lambda m: f"[{numbers[m.group(1)]}](#{m.group(1)})", md)


#: Typst set/show rules added to pandoc's Typst output (the fallback PDF; Quarto's own Typst
#: format does the same by default): figure and table numbers come from the captions (citation order,
#: :func:`crossref`), a table too long for the rest of its page breaks across
#: pages and repeats its header row (``table.header`` repeats) without splitting a row, its caption
#: stays with its first rows, table text is set smaller, ragged and left-aligned (a table of nine or more columns
#: a point smaller again), a heading never ends a page alone, and no figure or table is separated from the
#: "Source:" line after it.
TYPST_HEADER = """\
// murk (pandoc + Typst fallback of the paper): captions carry their numbers in citation order
// (murk.report.crossref), so Typst's own numbering by placement is off
#set figure(numbering: none)
// long tables break across pages
#show figure.where(kind: table): set block(breakable: true)
#show figure.where(kind: table): set text(size: 8pt)
#show figure.where(kind: table): set par(justify: false)
// cells left-aligned (pandoc centres the table, and cells of alignment auto would inherit the centring)
#show table.cell: set align(left)
#show figure.caption: it => block(sticky: true, it)
// a figure sticks to the block after it, its "Source:" line (murk.report.resolve_embeds): never separated by a
// page break (a table, which may break across pages, carries its source in its caption instead)
#show figure.where(kind: image): set block(sticky: true)
// a table of nine or more columns (the crossings, spec Table V) is set a point smaller
#show table: it => if type(it.columns) == array and it.columns.len() >= 9 { set text(size: 7pt); it } else { it }
#set table(inset: (x: 4pt, y: 3pt))
#set table.cell(breakable: false)
#show heading: set block(sticky: true)
"""


#: the Lua filter that both Quarto (``filters:`` in ``_quarto.yml``) and :func:`render_paper` run: a raw
#: ``<br>`` (:data:`CELL_BREAK`) becomes a line break of every output format
LUA_FILTER = "linebreak.lua"
#: the Lua filter that numbers the sections as the spec does (I–VI, subsections A, B, …, appendices A, B, …;
#: Quarto's number-sections would be Arabic): run by Quarto (``_quarto.yml``) and by :func:`render_paper`
SECTION_FILTER = "sections.lua"
#: the Lua filters of both renderers, in the order they run (``_quarto.yml``'s ``filters:``)
LUA_FILTERS = (LUA_FILTER, SECTION_FILTER)


def typst_options(quarto_yml: str | os.PathLike | None = None) -> dict:
    """The Typst page settings that ``_quarto.yml`` gives (``format: typst:``), for the fallback.

    Parameters
    ----------
    quarto_yml : path, optional
        Default the project's ``_quarto.yml``.

    Returns
    -------
    dict
        ``papersize`` (a Typst paper name; default ``"a4"``) and, where given,
        ``margin`` (e.g. ``{"x": "2cm", "y": "2.5cm"}``): pandoc variables of its
        Typst template.
    """
    import yaml

    f = Path(quarto_yml) if quarto_yml else core.project_root() / "_quarto.yml"
    typ = {}
    if f.is_file():
        typ = ((yaml.safe_load(f.read_text(encoding="utf-8")) or {}).get("format") or {}).get("typst") or {}
    out: dict = {"papersize": str(typ.get("papersize", "a4")).lower()}
    if isinstance(typ.get("margin"), dict):
        out["margin"] = {str(k): str(v) for k, v in typ["margin"].items()}
    return out


#: paper sizes (cm) of :func:`typst_options`' ``papersize`` values the fallback knows
PAPER_CM = {"a4": (21.0, 29.7), "us-letter": (21.59, 27.94), "a5": (14.8, 21.0)}
#: height (cm) kept free on a page for a figure's caption (up to three lines), its "Source:" line and the gaps
FIGURE_TEXT_CM = 4.0


def _length_cm(value: str) -> float | None:
    m = re.fullmatch(r"\s*([\d.]+)\s*(cm|mm|in|pt)\s*", str(value))
    return float(m.group(1)) * {"cm": 1.0, "mm": 0.1, "in": 2.54, "pt": 2.54 / 72}[m.group(2)] if m else None


def fit_figures_to_page(md: str, base: str | os.PathLike, options: Mapping | None = None) -> str:
    """Give each figure of ``md`` too tall for a page (at the text width) an explicit height, so that it fits
    one page together with its caption and "Source:" line (Typst would otherwise fill the page with the
    image and push them onto the next).

    Parameters
    ----------
    md : str
        Markdown with figures ``![caption](path){#fig-… …}``, paths relative to ``base``.
    base : path
        Folder the figure paths are relative to.
    options : mapping, optional
        :func:`typst_options` (default: this project's): ``papersize`` and ``margin`` (``x``, ``y``).

    Returns
    -------
    str
        ``md`` with `` height=…cm`` added to the attributes of each figure (PNG, JPEG) whose height at the
        text width exceeds the page's text height less :data:`FIGURE_TEXT_CM`; unchanged where the paper size or
        margins are not known.
    """
    from PIL import Image

    opts = typst_options() if options is None else options
    paper_cm = PAPER_CM.get(str(opts.get("papersize", "a4")))
    margin = opts.get("margin") or {}
    mx = _length_cm(margin.get("x", margin.get("rest", "2.5cm")))
    my = _length_cm(margin.get("y", margin.get("rest", "2.5cm")))
    if paper_cm is None or mx is None or my is None:
        return md
    text_w, max_h = paper_cm[0] - 2 * mx, paper_cm[1] - 2 * my - FIGURE_TEXT_CM

    def one(m):
        try:
            with Image.open(Path(base) / m.group(2)) as im:
                w, h = im.size
        except (OSError, ValueError):
            return m.group(0)
        if "height=" in m.group(3) or text_w * h / w <= max_h:
            return m.group(0)
        return f"{m.group(1)}{{{m.group(3)} height={max_h:.1f}cm}}"

    return re.sub(r"(!\[[^\]]*\]\(([^)\s]+\.(?:png|jpe?g))\))\{([^}]*)\}", one, md)


def _figure_paths(md: str) -> list[str]:
    return re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", md)


def view_name(nb_path: str | os.PathLike) -> str:
    """File name of an executed notebook's rendered view beside the paper: ``04_analyse.ipynb`` -> ``04_analyse.html``."""
    return f"{Path(nb_path).stem}.html"


#: the rendered notebook view's styles (:func:`notebook_view`): the paper's type, code cells boxed, the cell
#: a link points at (``#label``) highlighted
VIEW_CSS = """\
body { max-width: 72em; margin: 2em auto; padding: 0 1em; font-family: Georgia, serif; line-height: 1.45; color: #222; }
img { max-width: 100%; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; display: block; overflow-x: auto; }
th, td { border-bottom: 1px solid #ccc; padding: 0.2em 0.5em; text-align: left; }
pre { font-size: 0.8em; overflow-x: auto; white-space: pre-wrap; margin: 0.3em 0; }
.view-note { font-size: 0.9em; color: #555; border-bottom: 1px solid #ccc; padding-bottom: 0.8em; }
.nb-cell { border: 1px solid #ddd; border-radius: 4px; margin: 1em 0; padding: 0.3em 0.8em; }
.nb-cell .cell-head { font-family: sans-serif; font-size: 0.8em; color: #666; margin: 0.2em 0; }
.nb-cell .cell-head code { color: #2b5d8a; font-weight: bold; }
.nb-cell div.sourceCode, .nb-cell > pre.source { background: #f6f8fa; }
.nb-output { border-left: 3px solid #9bc; padding-left: 0.8em; margin: 0.5em 0; }
.nb-output pre { background: none; }
pre > code.sourceCode { white-space: pre-wrap; }
pre > code.sourceCode > span { text-indent: 0; }
.nb-error pre { color: #a00; }
.nb-cell:target { border: 2px solid #EE6677; box-shadow: 0 0 0.6em #f3b6bf; }
"""

_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _fenced(text: str, attrs: str) -> str:
    """A fenced code block holding ``text`` exactly (its fence longer than any backtick run in it)."""
    fence = "`" * max(3, max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence} {{{attrs}}}\n{text.rstrip()}\n{fence}\n"


def _raw_html(html: str) -> str:
    fence = "`" * max(3, max((len(r) for r in re.findall(r"`+", html)), default=0) + 1)
    return f"{fence}{{=html}}\n{html}\n{fence}\n"


def _view_output(o) -> str:
    """Markdown of one cell output for :func:`notebook_view`."""
    import html as _html

    kind = o.get("output_type")
    if kind == "stream":
        text = o.get("text", "")
        text = "".join(text) if isinstance(text, list) else str(text)
        return _fenced(_ANSI_RE.sub("", text), ".stream")
    if kind == "error":
        tb = "\n".join(o.get("traceback") or [f"{o.get('ename')}: {o.get('evalue')}"])
        return f"::: {{.nb-error}}\n{_fenced(_ANSI_RE.sub('', tb), '.error')}:::\n"
    data = o.get("data", {})
    join = lambda v: "".join(v) if isinstance(v, list) else str(v)  # noqa: E731
    for mime in ("image/png", "image/jpeg"):
        if mime in data:
            b64 = join(data[mime]).replace("\n", "")
            return _raw_html(f'<img src="data:{mime};base64,{b64}" alt="figure output">')
    if "image/svg+xml" in data:
        return _raw_html(join(data["image/svg+xml"]))
    if "text/markdown" in data:
        return join(data["text/markdown"]).strip() + "\n"
    if "text/html" in data:
        return _raw_html(join(data["text/html"]))
    if "text/plain" in data:
        return _fenced(join(data["text/plain"]), ".text")
    other = [m for m in data if m.endswith("json")]
    if other:
        return _fenced(json.dumps(data[other[0]], indent=1, ensure_ascii=False), ".json")
    return ""


def notebook_view(nb_path: str | os.PathLike, html_path: str | os.PathLike | None = None,
                  source: str | None = None) -> Path:
    """A readable HTML view of an executed notebook, each labelled cell anchored at its label.

    Every cell in order: Markdown cells as text, code cells as their (highlighted) source
    with their outputs (text, Markdown tables, figures as embedded PNG, errors). A code cell
    whose options carry ``#| label: L`` is a ``<div class="nb-cell" id="L">`` headed
    "cell `L`", so that ``04_analyse.html#num-rq1`` opens at the cell that recorded a number
    and ``04_analyse.html#tbl-crossings`` at the cell of a table (the cell a link points at
    is highlighted). Converted by pandoc (``pypandoc-binary``), one self-contained file
    (no nbconvert, no network).

    Parameters
    ----------
    nb_path : path
        The executed notebook (``outputs/notebooks/04_analyse.ipynb``).
    html_path : path, optional
        Where to write it (rewritten atomically); default ``<output root>/paper/<stem>.html``
        (:func:`view_name`, beside the paper).
    source : str, optional
        The notebook's source named in the view's header; default ``notebooks/<stem>.py``.

    Returns
    -------
    Path
        ``html_path``.

    Raises
    ------
    FileNotFoundError
        The notebook does not exist.
    ValueError
        Two cells carry the same label (:func:`notebook_cells`).
    """
    import nbformat
    import pypandoc

    nb_path = Path(nb_path)
    notebook_cells(nb_path)  # missing notebook, duplicate labels: the errors of the embeds
    nb = nbformat.read(nb_path, as_version=4)
    if html_path is None:
        html_path = nb_path.parent.parent / "paper" / view_name(nb_path)
    html_path = Path(html_path)
    source = source or f"notebooks/{nb_path.stem}.py"
    parts = [_raw_html(f"<style>\n{VIEW_CSS}</style>"),
             f"::: {{.view-note}}\nThe executed notebook `{nb_path.name}` (from `{source}`), rendered for reading. "
             f"Each labelled cell is anchored at its label: `{html_path.name}#<label>`.\n:::\n"]
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            parts.append(cell.source.strip() + "\n")
            continue
        if cell.cell_type != "code":
            continue
        label = _label_of(cell.source)
        count = cell.get("execution_count")
        head = (f"cell `{label}`" if label else "cell") + (f" · In [{count}]" if count else "")
        body = [f"[{head}]{{.cell-head}}\n", _fenced(cell.source, ".python .source")]
        for o in cell.get("outputs", []):
            out = _view_output(o)
            if out:
                body.append(f"::::::: {{.nb-output}}\n{out}\n:::::::\n")
        attrs = (f"#{label} " if label else "") + ".nb-cell"
        parts.append(f"::::::::::: {{{attrs}}}\n" + "\n".join(body) + "\n:::::::::::\n")
    md = "\n".join(parts)
    html_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = html_path.with_name(html_path.name + ".tmp")
    with core.guard(html_path, cleanup=[tmp]):
        pypandoc.convert_text(md, "html5", format="markdown", outputfile=str(tmp),
                              extra_args=["--standalone", "--mathml", "--metadata=lang:en",
                                          f"--metadata=pagetitle:{nb_path.name}",
                                          f"--metadata=title:{nb_path.name} (executed)"])
    os.replace(tmp, html_path)
    return html_path


#: an inline value at most this long, or without words (a list of numbers), on one line and without a link of
#: its own, is itself the link to its cell in the HTML; a longer one (a sentence, a paragraph) is followed by a
#: small link mark instead
CITE_LINK_MAX = 40
#: the markers around a cited value between resolving and the per-format writing (never reach pandoc)
_CITE_RE = re.compile("\x02(\\d+)\x1f(.*?)\x03", re.S)


def _cite_html(value: str, key: str, label: str, href: str) -> str:
    title = f"computed in cell {label} of notebooks/{Path(href.split('#')[0]).stem}.py"
    attrs = f'key="{key}" cell="{label}"'
    short = len(value) <= CITE_LINK_MAX or not re.search(r"[^\W\d_]{2}", value)  # a list of numbers is short
    if short and "\n" not in value and "](" not in value and "[^" not in value:
        return f'[{value}]({href} "{title}"){{.murk-number {attrs}}}'
    return f'{value}[↗]({href} "{title}"){{.murk-source {attrs}}}'


#: a table embed as :func:`_embed` writes it: caption line, body, then its "Source:" block naming the same cell
_TABLE_SOURCE_RE = re.compile(r"^(: [^\n]*?)(\s*\{#(tbl-[A-Za-z0-9_-]+)\})[ \t]*\n(.*?)\n+::: \{\.embed-source\}\n"
                              r"(Source: \[[^\n]*?, cell `\3`\]\([^)\n]*\))\n:::\n", re.M | re.S)


def sources_into_table_captions(md: str) -> str:
    """Move each embedded table's "Source:" line into its caption (the PDF: a table may break across
    pages, so a line after it could start a page alone; its caption stays with its first rows).

    >>> sources_into_table_captions(": A table. {#tbl-a}\\n\\n| x |\\n|---|\\n| 1 |\\n\\n"
    ...                             "::: {.embed-source}\\nSource: [nb.ipynb, cell `tbl-a`](nb.html#tbl-a)\\n:::\\n")
    ': A table. Source: [nb.ipynb, cell `tbl-a`](nb.html#tbl-a) {#tbl-a}\\n\\n| x |\\n|---|\\n| 1 |\\n'
    """
    return _TABLE_SOURCE_RE.sub(lambda m: f"{m.group(1)} {m.group(5)}{m.group(2)}\n{m.group(4)}\n", md)


def _cite_typst(md: str, cites: list[tuple[str, str]], source) -> str:
    """The PDF's form of the cited numbers: the values as they are, and in each block of text (a paragraph)
    that cites numbers one footnote naming their cells and keys (at the end of the sentence of its last one).
    ``source`` is the notebook the cells are in: one path, or a callable giving a cell label's notebook."""
    source_of = source if callable(source) else (lambda label: source)
    blocks = re.split(r"(\n[ \t]*\n)", md)
    out = []
    for block in blocks:
        found = list(_CITE_RE.finditer(block))
        if not found:
            out.append(block)
            continue
        by_cell: dict[tuple[str, str], list[str]] = {}   # (notebook, label) -> keys
        for m in found:
            key, label = cites[int(m.group(1))]
            by_cell.setdefault((source_of(label), label), [])
            if key not in by_cell[(source_of(label), label)]:
                by_cell[(source_of(label), label)].append(key)
        by_source: dict[str, list[str]] = {}
        for (src, label), keys in by_cell.items():
            by_source.setdefault(src, []).append(f"cell `{label}` (" + ", ".join(f"`{k}`" for k in keys) + ")")
        note = "; ".join(f"{'from' if i else 'From'} `{src}`, " + "; ".join(cells)
                         for i, (src, cells) in enumerate(by_source.items()))
        # the footnote mark goes at the end of the sentence of the last number (else right after it)
        end = found[-1].end()
        stop = re.compile(r"[.!?][)\]]?(?=\s|$)").search(block, end)
        at = stop.end() if stop and "\n\n" not in block[end:stop.end()] and ":::" not in block[end:stop.end()] else end
        block = block[:at] + f"^[{note}.]" + block[at:]
        out.append(_CITE_RE.sub(lambda m: m.group(2), block))
    return "".join(out)


def render_paper(qmd: str | os.PathLike | None = None, output_dir: str | os.PathLike | None = None,
                 pdf: bool = True) -> dict[str, Path]:
    """Convert the paper without Quarto: resolve, then pandoc → HTML and Typst → PDF.

    Parameters
    ----------
    qmd : path, optional
        Default ``paper/index.qmd``.
    output_dir : path, optional
        Output root (default :func:`murk.core.output_dir`); the paper goes
        to ``<root>/paper/``.
    pdf : bool
        Also compile a PDF through Typst: paper size (and margins, if given) from
        ``_quarto.yml`` (:func:`typst_options`), long tables breaking across pages
        with their header repeated, headings kept with what follows
        (:data:`TYPST_HEADER`).

    The executed notebooks the paper draws on (``04_analyse.ipynb``, and each embedded one
    that exists) get a rendered view beside the paper (:func:`notebook_view`:
    ``<root>/paper/04_analyse.html``, a ``<div id="label">`` per labelled cell). In the HTML,
    each cited number links to the cell that recorded it (:func:`load_provenance`;
    ``04_analyse.html#num-rq1``, the link carrying ``data-key`` and ``data-cell``): a short value
    is itself the link, a sentence is followed by a small "↗" link (:data:`CITE_LINK_MAX`);
    each embedded figure and table links to its cell ("Source: 04_analyse.ipynb, cell
    `tbl-…`"). In the PDF, each paragraph that cites numbers names their cells and keys in a
    footnote. A numbers file without provenance (an older murk) gives unlinked numbers.

    Returns
    -------
    dict with ``md``, ``html`` and (if ``pdf``) ``pdf`` paths, ``views`` (notebook file name
    -> its rendered view) and ``missing`` (the embeds whose notebook did not exist: "not
    computed in this run").

    Raises
    ------
    FileNotFoundError
        A figure the paper cites does not exist.
    MixedPaperError
        The numbers file and the executed notebooks are of different identities
        (:func:`refuse_mixed_paper`; nothing is written).
    """
    import pypandoc

    qmd = Path(qmd) if qmd else core.project_root() / "paper" / "index.qmd"
    root = core.output_dir(output_dir)
    ids = refuse_mixed_paper(root)   # before anything is written
    numbers = load_numbers(core.numbers_file(root))
    try:
        prov = load_provenance(core.numbers_file(root))
    except FileNotFoundError:  # a numbers file of an older murk: its numbers are not linked
        prov = {}
    out = core.paper_out_dir(root)
    out.mkdir(parents=True, exist_ok=True)
    text = qmd.read_text(encoding="utf-8")
    # the rendered views of the executed notebooks the paper cites: numbers, figures and tables link to their cells
    views = {}
    analyse_nb = core.notebooks_out_dir(root) / "04_analyse.ipynb"
    embedded = {Path(nb).name for nb, _ in EMBED_RE.findall(text)}
    for nb in sorted({analyse_nb.name} | embedded):
        f = core.notebooks_out_dir(root) / nb
        if f.is_file():
            views[nb] = notebook_view(f, out / view_name(f))
    cites: list[tuple[str, str]] = []

    # a number links to the view of the analysis notebook whose cell recorded it (04_analyse or 05_beyond)
    home: dict[str, str] = {}   # label -> the analysis notebook that holds it
    for nb in (f"{stage}.ipynb" for stage in core.NUMBERS_FRAGMENTS if f"{stage}.ipynb" in views):
        for label in notebook_cells(core.notebooks_out_dir(root) / nb):
            home.setdefault(label, nb)

    def cite(key: str, value: str) -> str:
        if key not in prov or home.get(prov[key], analyse_nb.name) not in views:
            return value
        cites.append((key, prov[key]))
        return f"\x02{len(cites) - 1}\x1f{value}\x03"

    missing: list[str] = []
    resolved = resolve_qmd(text, numbers, qmd.parent, root, missing=missing, cite=cite)
    if missing:
        print(f"paper: {NOT_COMPUTED} (notebook missing): {missing}")
    md_marked = crossref(resolved)
    def href(label: str) -> str:
        return f"{view_name(home.get(label, analyse_nb.name))}#{label}"

    md = _CITE_RE.sub(lambda m: _cite_html(m.group(2), *cites[int(m.group(1))], href(cites[int(m.group(1))][1])),
                      md_marked)
    figs = _figure_paths(md)
    absent = [f for f in figs if not Path(f).is_file()]
    if absent:
        raise FileNotFoundError(f"figures cited by the paper are missing: {absent}; run the analyse stage")
    md_path = out / "index.md"
    md_path.write_text(md, encoding="utf-8")
    bib = qmd.parent / "references.bib"
    common = ["--standalone", "--citeproc", f"--bibliography={bib}", f"--resource-path={qmd.parent}:{root}"]
    for name in reversed(LUA_FILTERS):  # before --citeproc, as Quarto runs its filters, in _quarto.yml's order
        lua = qmd.parent / name
        if not lua.is_file():
            lua = core.project_root() / "paper" / name
        common.insert(0, f"--lua-filter={lua}")
    html = out / "index.html"
    pypandoc.convert_file(str(md_path), "html5", format="markdown", outputfile=str(html),
                          extra_args=[*common, "--embed-resources", "--mathml", "--toc",
                                      "--metadata=lang:en", f"--css={qmd.parent / 'paper.css'}"])
    stamp_html(html, ids)
    result = {"md": md_path, "html": html, "missing": missing, "views": views}
    if pdf:
        import typst

        typ = out / "index.typ"
        # Typst resolves image paths relative to the .typ file and forbids leaving
        # its root: copy the cited figures (PDF versions) next to it.
        fig_dir = out / "figures"
        fig_dir.mkdir(exist_ok=True)
        # captions numbered in citation order (crossref); Typst's own numbering is off; each paragraph that
        # cites numbers names their cells in a footnote
        # a figure keeps its "Source:" line after it (TYPST_HEADER: sticky), a table carries it in its caption
        md_typ = sources_into_table_captions(_cite_typst(
            md_marked, cites, lambda label: f"notebooks/{Path(home.get(label, analyse_nb.name)).stem}.py"))
        for f in figs:
            src = Path(f)
            shutil.copy2(src, fig_dir / src.name)
            md_typ = md_typ.replace(f"]({f})", f"](figures/{src.name})")
        md_typ = fit_figures_to_page(md_typ, out)   # a study-sized figure fits one page with its caption and source
        header = out / "typst-header.typ"
        header.write_text(TYPST_HEADER, encoding="utf-8")
        page = out / "typst-page.json"  # JSON is YAML: pandoc reads it as a metadata file
        page.write_text(json.dumps(typst_options()), encoding="utf-8")
        # --columns: no source line counts as "too long", so pandoc gives tables auto column
        # widths (sized by content) instead of equal shares of the text width
        pypandoc.convert_text(md_typ, "typst", format="markdown", outputfile=str(typ),
                              extra_args=[*common, "--resource-path=" + str(out), f"--metadata-file={page}",
                                          f"--include-in-header={header}", "--columns=100000"])
        tmp_pdf = out / "index.pdf.tmp"
        typst.compile(str(typ), output=str(tmp_pdf), root=str(out), format="pdf")
        os.replace(tmp_pdf, out / "index.pdf")  # a reader never sees a half-written PDF
        result["pdf"] = out / "index.pdf"
    return result


def markdown_table(rows: list[Mapping[str, str]], columns: list[str] | None = None) -> str:
    """A pipe table (pandoc/Quarto Markdown) from a list of row dicts of strings.

    The separator's dashes are proportional to each column's widest cell (at
    least its header's longest word), which pandoc turns into relative column
    widths for wide tables (PDF), so that short columns do not wrap.
    """
    if not rows:
        return "*(no rows)*\n"
    columns = columns or list(rows[0])
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    width = {c: max([max((len(w) for w in str(c).split()), default=1)]
                    + [len(esc(r.get(c, ""))) for r in rows]) for c in columns}
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("-" * max(3, width[c]) for c in columns) + "|"]
    lines += ["| " + " | ".join(esc(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


#: the line break inside a table cell: raw HTML, which Jupyter and the HTML show as a break and which the Lua
#: filter ``paper/linebreak.lua`` (run by Quarto, ``_quarto.yml``, and by :func:`render_paper`) turns into a
#: line break of every output format (Typst ``\\``)
CELL_BREAK = "<br>"


def estimate_cell(text: str) -> str:
    """A table cell holding an estimate with its interval, the interval on a second line:
    ``"0.99 [0.97, 1.00]"`` -> ``"0.99<br>[0.97, 1.00]"`` (:data:`CELL_BREAK`).

    A column of such cells is as wide as its interval, so that a table of many estimates (the sweep tables,
    the crossings) fits the page width without its rows wrapping at random places; a cell without an
    interval (``"n/a"``, ``"≤ 1.95"``) is returned unchanged.

    >>> estimate_cell("≥ 0.80 [0.70, 0.90]"), estimate_cell("n/a")
    ('≥ 0.80<br>[0.70, 0.90]', 'n/a')
    """
    return re.sub(r" \[(?=[^\[\]]*\]\s*$)", CELL_BREAK + "[", str(text), count=1)


def verbatim(text: str) -> str:
    """A text shown exactly as written (a prompt, a template with ``<number>`` or ``{category}`` placeholders):
    a Markdown code span, so that neither pandoc (raw HTML such as ``<number>``, smart quotes, emphasis)
    nor Typst (smart quotes, markup) changes a character.

    The span's fence is one backtick longer than the longest run of backticks in ``text`` (CommonMark and
    pandoc), padded with a space where ``text`` starts or ends with a backtick; ``|`` is left to
    :func:`markdown_table` to escape. A newline has no place in a table cell: replace it first.

    Raises
    ------
    ValueError
        ``text`` holds a newline.

    Examples
    --------
    >>> verbatim('as "Confidence: <number>".'), verbatim("a `b`")
    ('`as "Confidence: <number>".`', '`` a `b` ``')
    """
    text = str(text)
    if "\n" in text:
        raise ValueError(f"verbatim text for a table cell holds a newline: {text[:60]!r}")
    if not text:
        return ""
    runs = [len(r) for r in re.findall(r"`+", text)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def write_netcdf_atomic(ds, path: str | os.PathLike) -> Path:
    """Write an xarray Dataset as netCDF atomically (temporary sibling + rename).

    Raises
    ------
    murk.core.DiskFullError
        The disk is full: the temporary file is removed, the previous file kept.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with core.guard(path, cleanup=[tmp]):
        ds.to_netcdf(tmp)
    os.replace(tmp, path)
    return path


def write_text_atomic(path: Path, text: str) -> Path:
    """Write a text file atomically (temporary sibling + rename); a full disk raises
    :class:`murk.core.DiskFullError` and keeps the previous file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with core.guard(path, cleanup=[tmp]):
        tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m murk.report.paper``: render with Quarto where installed, else convert.

    Quarto renders ``paper/index.qmd`` per ``_quarto.yml`` (HTML and Typst PDF)
    and the result is copied to ``<output root>/paper/``; without Quarto,
    :func:`render_paper` converts the same source with pandoc and Typst. First, a
    numbers file and executed notebooks of different identities are refused
    (:func:`refuse_mixed_paper`): the message goes to stderr, nothing is written and
    the exit status is 2; so is a paper folder that cannot be written
    (:func:`murk.core.unwritable`: read-only) and a cell the paper embeds that is
    absent or failed (:class:`EmbedError`). The rendered HTML carries the run and analysis identities
    in ``<meta name="murk-run-id">`` and ``<meta name="murk-analysis-id">``.
    """
    import argparse
    import subprocess
    import sys

    ap = argparse.ArgumentParser(prog="python -m murk.report.paper", description=main.__doc__)
    ap.add_argument("--output-dir", default=None, help="output root (default: outputs/ or $MURK_OUTPUT_DIR)")
    ap.add_argument("--no-pdf", action="store_true", help="HTML only")
    ap.add_argument("--fallback", action="store_true", help="use pandoc + Typst even where Quarto is installed")
    args = ap.parse_args(argv)
    root = core.output_dir(args.output_dir)
    try:
        ids = refuse_mixed_paper(root)   # the numbers and the embeds of one analysis, or nothing is written
    except MixedPaperError as e:
        print(f"murk: {e}", file=sys.stderr)
        return 2
    blocked = core.unwritable(core.paper_out_dir(root))  # before pandoc, whose own error is a Haskell backtrace
    if blocked is not None:
        print(f"murk: make paper (python -m murk.report.paper) cannot write the paper of {root}: {blocked[0]} is "
              f"{blocked[1]}; nothing was written (the numbers, tables, figures and cube are kept); fix: make "
              f"{blocked[0]} writable, then run the same command again", file=sys.stderr)
        return 2
    quarto = shutil.which("quarto")
    if quarto and not args.fallback:
        env = {**os.environ, "MURK_OUTPUT_DIR": str(root)}
        subprocess.run([quarto, "render", "paper/index.qmd"], cwd=core.project_root(), env=env, check=True)
        src = core.project_root() / "outputs" / "paper" / "quarto"
        out = core.paper_out_dir(root)
        out.mkdir(parents=True, exist_ok=True)
        for f in src.rglob("index.*"):
            shutil.copy2(f, out / f.name)
        if (out / "index.html").is_file():
            stamp_html(out / "index.html", ids)
        print(f"rendered with Quarto: {out}")
        return 0
    try:
        with core.guard(core.paper_out_dir(root), "the numbers, tables, figures and the cube are kept; the "
                                                       "paper's files are each written whole or not at all",
                            root=root):
            res = render_paper(output_dir=root, pdf=not args.no_pdf)
    except core.DiskFullError as e:  # one line instead of pandoc's or Typst's traceback
        print(e, file=sys.stderr)
        return 1
    except EmbedError as e:  # a cell the paper embeds is absent or failed: the command that makes it again
        print(f"murk: make paper (python -m murk.report.paper) cannot render the paper of {root}: {e}", file=sys.stderr)
        return 2
    print("converted without Quarto (pandoc + Typst): "
          + ", ".join(str(p) for k, p in res.items() if k not in ("missing", "views"))
          + "".join(f", {p}" for p in res["views"].values()))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
