"""The spec's map: each figure and table of the paper named as its counterpart in the spec.
"""

from __future__ import annotations

import re
from typing import Mapping

__all__ = ["SPEC_SECTIONS", "SPEC_COUNTERPARTS", "ANALYSIS_TABLES", "spec_mentions"]


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

