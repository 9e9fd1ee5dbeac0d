"""The numbers file the paper reads (``paper_numbers.json``) and its provenance (the cell of each key).

The analyse notebook records each number, and each sentence that states a finding
(:meth:`Numbers.record`), in the notebook cell that computes it; the label of that cell
(``#| label: …``, :func:`current_cell_label`) is written with it
(``paper_numbers.provenance.json``, :func:`load_provenance`), so a key's origin is its cell,
also for a key built with an f-string.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

from murk import core
from murk.report._cells import INLINE_RE, cell_options
from murk.report._format import NOT_COMPUTED, fmt_bound, fmt_interval

__all__ = ["Numbers", "write_numbers", "load_numbers", "cited_keys", "load_provenance", "provenance_file",
           "current_cell_label"]


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

