"""A design variant in the paper's words: the methods' sentence and clauses, the short name (spec Sec. III, "pilot").

The design itself (its settings, how it applies to the frozen configuration) is the
protocol's (:mod:`murk.protocol`); this module only words it for the paper.
"""

from __future__ import annotations

from typing import Any, Mapping

from murk.protocol import design_of, differences

__all__ = ["describe_design", "design_name", "methods_text"]


_PHRASES = {
    "binary_task": {"verification": "t3 verifies the boxed object's category (the study's t3)",
                    "existence": "the binary task asks whether the category is anywhere in the image (an "
                                 "existence task, as in the pilot; murk's own wording, since the spec does not "
                                 "quote the pilot's)"},
    "distractors": {"prior-matched": "distractors are prior-matched (the study's rule)",
                    "uniform": "distractors are drawn uniformly from the categories absent from the image (as in "
                               "the pilot)"},
}


def describe_design(cfg: Mapping[str, Any]) -> str:
    """One sentence naming a design's choices, for the paper's methods.

    Parameters
    ----------
    cfg : dict
        A configuration (:func:`design_config`).

    Returns
    -------
    str
        "This run uses the study's design." or a sentence listing each choice
        that differs from the study's, and how the analysis applies it.
    """
    diff = differences(cfg)
    if not diff:
        return "This run uses the study's design (spec Sec. III)."
    parts = []
    for k, v in diff.items():
        if k in _PHRASES:
            parts.append(_PHRASES[k][v])
        elif k == "box_width_px":
            parts.append(f"the box is {v} px wide")
        elif k == "sweep_end_m":
            from murk.report._format import fmt_level

            parts.append(f"the sweep ends at {fmt_level(v)} m (the levels beyond it are read out by murk's fixed "
                         f"schedule and left out of the analysis; crossings are censored at {fmt_level(v)} m)")
        elif k == "abstain_wordings":
            parts.append("one abstain wording is analysed (the second wording's read-outs are set to missing)")
    return "This run is a design variant: " + "; ".join(parts) + "."


_SHORT = {"binary_task": {"existence": "an existence task", "verification": "the verification task"},
          "distractors": {"uniform": "uniform distractors", "prior-matched": "prior-matched distractors"}}


def design_name(cfg: Mapping[str, Any]) -> str:
    """A short name of a configuration's design: ``"the study's design"``, or ``"a design variant (…)"``
    listing its choices (``"an existence task, uniform distractors, a 3-px box, the sweep to 3.9 m, one
    abstain wording"``)."""
    diff = differences(cfg)
    if not diff:
        return "the study's design"
    from murk.report._format import fmt_level

    short = {"box_width_px": lambda v: f"a {v}-px box", "sweep_end_m": lambda v: f"the sweep to {fmt_level(v)} m",
             "abstain_wordings": lambda v: f"{'one' if v == 1 else 'two'} abstain wording{'s' if v != 1 else ''}"}
    return "a design variant (" + ", ".join(_SHORT[k][v] if k in _SHORT else short[k](v) for k, v in diff.items()) + ")"


#: how the paper's methods describe each rule (:func:`methods_text`)
_METHODS = {
    ("distractors", "prior-matched"): (
        "drawn prior-matched: a category is drawn as a distractor with a weight equal to its expected frequency "
        "among the targets over the share of images in which it is absent, without a floor, so that a category "
        "that is never a target is never a distractor"),
    ("distractors", "uniform"): (
        "drawn uniformly from the categories absent from the image (the pilot's rule, a design variant), so that "
        "a category that is never a target is as likely a distractor as any other"),
    ("binary_task", "verification"): "asks whether the boxed object is a given category",
    ("binary_task", "existence"): (
        "asks whether a given category is anywhere in the image, whatever the box marks (the pilot's existence "
        "task, a design variant, in murk's own wording: the spec does not quote the pilot's)"),
}


def methods_text(cfg: Mapping[str, Any], key: str) -> str:
    """The paper's description of a configuration's distractor rule or binary task.

    Parameters
    ----------
    cfg : dict
        A configuration (:func:`design_config`).
    key : {"distractors", "binary_task"}

    Returns
    -------
    str
        A clause for the methods (plain text: the HTML shows it as it is).
    """
    return _METHODS[(key, design_of(cfg)[key])]
