"""What a read-out unit asks and records (spec Sec. III, "Four read-outs").

A **unit** is one image under one condition with every prompt asked of it
(:func:`item_prompts`): each question (t2, t3_true, t3_false) in the variants
``main``, ``abstain`` and ``abstain2``, then the ``main`` prompt in each further
verbal wording of spec Table VI. From the prompts' first-token probabilities and
greedy continuations, :func:`item_readouts` records per question:

1. **Answer**: the option with the largest first-token probability after the
   assistant turn is prefilled with ``readout.assistant_prefill`` ("Answer:").
2. **Internal confidence** ``c_int = max_k p_k / sum_k p_k``, with ``p_k`` the
   first-token probability of option letter k (summed over the letter's token
   variants, :func:`murk.readout.letter_probs`; the softmax over the vocabulary taken
   in float32, :func:`murk.readout.softmax32`).
3. **Verbalized confidence**: the integer after "Confidence:" in the greedy
   continuation, divided by 100 (:func:`murk.readout.parse_verbal_confidence`), and
   how the continuation ended (``verbal_stop``, :func:`murk.readout.continuation_stop`).
4. **Abstain** (two wordings): the extra option's letter has the largest
   first-token probability.

Answers are never parsed from generated text. ``option_mass`` (the first-token
probability on the option letters) is the check that the first token is the
answer: :func:`check_option_mass` warns when its median on clean images
(:func:`median_option_mass`) is below :data:`OPTION_MASS_MIN`.

This is the one implementation of a unit's read-out semantics: every engine
(:mod:`murk.readout`, :mod:`murk.readout`, the baseline :mod:`benchmarks.baseline`) asks
:func:`item_prompts`, batches them by :func:`verbal_groups` and records with
:func:`item_readouts`; none of them knows what a read-out means.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr

from murk.core import READOUTS, TEXT_READOUTS, load_config
from murk.protocol import Question, render_prompt
from murk.readout._verbal import VERBAL_STOP_LIMIT, parse_verbal_confidence

__all__ = [
    "VERBAL_EXTRA",
    "OPTION_MASS_MIN",
    "LowOptionMassWarning",
    "PromptSlot",
    "item_prompts",
    "verbal_groups",
    "item_readouts",
    "median_option_mass",
    "check_option_mass", "N_OPTION_READOUTS"]

#: the numeric read-outs of one question (``verbal_stop``, ``verbal_stop_v2`` and ``verbal_stop_v3``: how the
#: continuation of wording v1/v2/v3 ended, 0 = end-of-sequence, 1 = token limit, NaN = not asked) and its text
#: read-outs are the cube schema's :data:`murk.core.READOUTS` and :data:`murk.core.TEXT_READOUTS`, defined once there

#: ``p_option_k`` read-outs: the main prompt's option probabilities renormalised over the options
#: (``p_k / sum_j p_j``, the distribution whose maximum is ``c_int``), for k < 4 (t2 has four options,
#: t3 two; NaN beyond an item's options); with ``target`` (index of the correct option) they are what
#: temperature scaling fits (:mod:`murk.monitor`)
N_OPTION_READOUTS = 4

#: verbal wordings asked besides the main run's ``v1`` (spec Table VI)
VERBAL_EXTRA = ("v2", "v3")

#: median first-token option mass on clean images below which the read-outs are suspect
#: (:func:`check_option_mass`): a healthy instruction-tuned model puts most of its first-token
#: probability on the option letters after "Answer:"; random weights put about 1e-4 there
#: (shared/real-model-files/README.md)
OPTION_MASS_MIN = 0.5


class LowOptionMassWarning(UserWarning):
    """The first generated token is mostly not an option letter: answer and c_int are unreliable."""


@dataclass(frozen=True)
class PromptSlot:
    """One prompt of an item: which question, variant and verbal wording it asks.

    Attributes
    ----------
    question : int
        Index into the item's questions.
    variant : {"main", "abstain", "abstain2"}
    wording : {"v1", "v2", "v3"}
        Verbal wording (``v1`` for the abstain variants).
    user : str
        The rendered user turn (:func:`murk.protocol.render_prompt`).
    letters : tuple of str
        Option letters shown, the abstain option's last.
    generate : bool
        Whether the prompt gets a greedy continuation (the ``main`` prompts).
    """

    question: int
    variant: str
    wording: str
    user: str
    letters: tuple[str, ...]
    generate: bool


def item_prompts(questions: Sequence[Question], config: Mapping[str, Any] | None = None,
                 verbal_variants: Sequence[str] = ("v1",)) -> list[PromptSlot]:
    """Every prompt asked of one item on one condition's image, in scoring order.

    Each question in the three variants ``main``, ``abstain``, ``abstain2``, then
    its ``main`` prompt in each further verbal wording of spec Table VI.

    Parameters
    ----------
    questions : sequence of Question
        Usually t2, t3_true and t3_false of the item (:func:`murk.protocol.questions_for_item`).
    config : dict, optional
        Study configuration (the prompt templates); default the project's.
    verbal_variants : sequence of {"v1", "v2", "v3"}
        Verbal wordings to ask; must contain ``"v1"`` (the main run's, which also
        gives the answer and c_int).

    Returns
    -------
    list of PromptSlot
        ``3 * len(questions)`` slots, plus one per question and further wording.

    Raises
    ------
    ValueError
        If ``verbal_variants`` lacks ``"v1"`` or names an unknown wording.
    """
    cfg = load_config() if config is None else config
    variants = list(dict.fromkeys(verbal_variants))
    if "v1" not in variants:
        raise ValueError("verbal_variants must contain 'v1' (the main prompt)")
    unknown = [v for v in variants if v not in VERBAL_EXTRA and v != "v1"]
    if unknown:
        raise ValueError(f"unknown verbal wordings {unknown}; choose from v1, {', '.join(VERBAL_EXTRA)}")
    slots: list[PromptSlot] = []
    for qi, q in enumerate(questions):
        for variant in ("main", "abstain", "abstain2"):
            text, lt = render_prompt(q, variant, cfg)
            slots.append(PromptSlot(qi, variant, "v1", text, tuple(lt), variant == "main"))
        for v in variants:
            if v != "v1":
                text, lt = render_prompt(q, "main", cfg, verbal=v)
                slots.append(PromptSlot(qi, "main", v, text, tuple(lt), True))
    return slots


def verbal_groups(slots: Sequence[PromptSlot]) -> list[list[int]]:
    """Batches of an item's prompts: the main-run prompts (wording v1), then the further wordings.

    Every engine scores them as separate batches (rows of their own in
    :mod:`murk.readout`; ``groups`` of :func:`benchmarks.baseline.score_prompts`), so an
    item's main read-outs never depend on whether v2/v3 were asked (in bfloat16 a
    batch's numbers depend on its composition).

    Parameters
    ----------
    slots : sequence of PromptSlot
        From :func:`item_prompts`.

    Returns
    -------
    list of list of int
        Slot indices: ``[main]`` or ``[main, further wordings]``, each in slot order.
    """
    main = [j for j, s in enumerate(slots) if s.wording == "v1"]
    extra = [j for j, s in enumerate(slots) if s.wording != "v1"]
    return [main] + ([extra] if extra else [])


def item_readouts(questions: Sequence[Question], slots: Sequence[PromptSlot], letter_probs: Sequence[np.ndarray],
                  top_tokens: Sequence[str], continuations: Sequence[str | None],
                  stops: Sequence[float] | None = None) -> dict[str, dict[str, Any]]:
    """The read-outs of one item on one condition from its prompts' scores (spec Sec. III).

    Every engine calls it with what it computed for the slots of :func:`item_prompts`
    (in any order: each slot says which question and variant it asks).

    Parameters
    ----------
    questions : sequence of Question
    slots : sequence of PromptSlot
        From :func:`item_prompts`.
    letter_probs : sequence of numpy.ndarray, float64
        Per slot, ``p_k`` for each of its letters (first-token probability summed over
        the letter's token variants; the softmax taken in float32).
    top_tokens : sequence of str
        Per slot, the decoded most probable first token.
    continuations : sequence of str or None
        Per slot, the greedy continuation (None where not generated).
    stops : sequence of float, optional
        Per slot, how the continuation ended (:func:`murk.readout.continuation_stop`: 0.0
        end-of-sequence, 1.0 token limit; NaN where not generated). Required for the
        ``verbal_stop`` read-outs: without it they are NaN and every continuation is
        parsed as ended by the model (a cut number then reads as a low value).

    Returns
    -------
    dict of str -> dict
        ``{question.task: readouts}`` with every key of :data:`READOUTS` and
        :data:`TEXT_READOUTS` (float64 numbers, NaN when not asked / unparsed):
        ``answer`` (index of the most probable option of the main prompt), ``correct``
        (1.0 / 0.0), ``c_int`` (max_k p_k / sum_k p_k), ``verbal_conf`` (in [0, 1]),
        ``verbal_stop`` (0 end-of-sequence, 1 token limit), ``abstain``, ``abstain2``
        (1.0 if the extra option's letter is the most probable), ``option_mass``
        (sum_k p_k), ``verbal_conf_v2``, ``verbal_conf_v3``, ``verbal_stop_v2``,
        ``verbal_stop_v3``, ``p_option_0`` ... ``p_option_3`` (the main prompt's ``p_k /
        sum_j p_j``, NaN beyond the item's options or when the option mass is 0),
        ``target`` (index of the correct option), ``p_abstain``, ``p_abstain2`` (the
        abstain prompt's extra option, ``p_extra / sum_j p_j``: the abstention as a
        ranked score), ``verbal_text``, ``top_token``, ``verbal_text_v2``,
        ``verbal_text_v3``.
    """
    out: dict[str, dict[str, Any]] = {}
    for qi, q in enumerate(questions):
        r: dict[str, Any] = {k: math.nan for k in READOUTS}
        r.update({k: "" for k in TEXT_READOUTS})
        for j, s in enumerate(slots):
            if s.question != qi:
                continue
            p = np.asarray(letter_probs[j], dtype=np.float64)
            if s.variant == "main":
                suffix = "" if s.wording == "v1" else f"_{s.wording}"
                text = continuations[j] or ""
                stop = math.nan if stops is None else float(stops[j])
                r[f"verbal_text{suffix}"] = text
                r[f"verbal_stop{suffix}"] = stop
                r[f"verbal_conf{suffix}"] = parse_verbal_confidence(text, truncated=stop == VERBAL_STOP_LIMIT)
                if s.wording == "v1":
                    mass = float(p.sum())
                    k = int(np.argmax(p))
                    r["answer"] = float(k)
                    r["correct"] = float(k == q.correct_index)
                    r["c_int"] = float(p[k] / mass) if mass > 0 else math.nan
                    r["option_mass"] = mass
                    r["top_token"] = top_tokens[j]
                    r["target"] = float(q.correct_index)
                    if mass > 0:
                        for i, pi in enumerate(p[:N_OPTION_READOUTS] / mass):
                            r[f"p_option_{i}"] = float(pi)
            else:
                r[s.variant] = float(int(np.argmax(p)) == len(s.letters) - 1)
                mass = float(p.sum())
                r[f"p_{s.variant}"] = float(p[-1] / mass) if mass > 0 else math.nan
        out[q.task] = r
    return out


# --------------------------------------------------------------------------- option-mass guard


def median_option_mass(ds: xr.Dataset | xr.DataArray) -> xr.DataArray:
    """Median first-token probability on the option letters, clean images, per model and task.

    The check that the first generated token is the answer (issue 12): a healthy
    model puts most of its first-token mass on the option letters after the
    prefill; a wrong template or prefill, a first token such as ``(`` or ``The``,
    or random weights put little there (:data:`OPTION_MASS_MIN`).

    Parameters
    ----------
    ds : xarray.Dataset or xarray.DataArray
        The cube (with ``model``), one model's read-out store (without), or an
        ``option_mass`` DataArray of clean images with ``task`` and ``image`` dims.

    Returns
    -------
    xarray.DataArray
        float64 (model, task) or (task,) with ``task`` in (t2, t3) (t3 pools the
        t3_true and t3_false questions), the median over images of
        ``option_mass`` at ``arm="fog", level=0`` (the clean image); NaN where
        nothing was read out (e.g. the visibility monitor).
    """
    if isinstance(ds, xr.Dataset):
        v = ds["value"].sel(arm="fog", level=0, readout="option_mass", drop=True)
    else:
        v = ds
        if "readout" in v.dims:
            v = v.sel(readout="option_mass", drop=True)
        for dim, lab in (("arm", "fog"), ("level", 0)):
            if dim in v.dims:
                v = v.sel({dim: lab}, drop=True)
    v = v.astype(np.float64)
    parts = []
    for task, qs in (("t2", ["t2"]), ("t3", ["t3_true", "t3_false"])):
        sub = v.sel(task=[q for q in qs if q in v["task"].values])
        stacked = sub.stack(_q=("task", "image"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=RuntimeWarning)  # all-NaN slices
            parts.append(stacked.median("_q", skipna=True).expand_dims(task=[task]))
    out = xr.concat(parts, dim="task")
    out.attrs = {"long_name": "median first-token option mass on clean images", "units": "1"}
    return out.transpose(*[d for d in ("model", "task") if d in out.dims])


# --------------------------------------------------------------------------- option-mass guard


def check_option_mass(values: Any, model_id: str, threshold: float = OPTION_MASS_MIN,
                      top_tokens: Any = None) -> dict[str, float]:
    """Warn when the first token is mostly not an option letter (the option-mass guard).

    Call it from the read-out stage once a model's clean images are read out. The
    median first-token probability mass on the option letters (``option_mass``) on
    clean images is computed per task (:func:`median_option_mass`);
    below ``threshold`` the answer and c_int rest on a sliver of the distribution.

    Parameters
    ----------
    values : xarray.Dataset or xarray.DataArray
        A read-out store or the cube (``value`` with the ``readout`` dim), or the
        ``option_mass`` values of clean images with a ``task`` dim.
    model_id : str
        Named in the warning; selects the model when ``values`` has a ``model`` dim.
    threshold : float
        Default :data:`OPTION_MASS_MIN` (0.5).
    top_tokens : array-like of str, optional
        Most probable first tokens on clean images (``top_token``); the most common
        ones are quoted in the warning. Taken from ``values`` when it is a store.

    Returns
    -------
    dict of str -> float
        Median option mass per task (``t2``, ``t3``); NaN when nothing was read out.

    Warns
    -----
    LowOptionMassWarning
        Naming the model, the medians and the likely causes (wrong chat template or
        prefill, a first token such as ``(``, ``**``, a newline or ``The``, random
        weights), when a task's median is below ``threshold``.
    """
    ds = values
    if isinstance(ds, xr.Dataset) and "model" in ds.dims:
        ds = ds.sel(model=model_id)
    medians = median_option_mass(ds)
    med = {str(t): float(medians.sel(task=t)) for t in medians["task"].values}
    if top_tokens is None and isinstance(ds, xr.Dataset) and "top_token" in ds:
        top_tokens = ds["top_token"].sel(arm="fog", level=0).values.ravel()
    low = {t: m for t, m in med.items() if np.isfinite(m) and m < threshold}
    if low:
        common = ""
        if top_tokens is not None:
            # zarr 3 reads strings as numpy's variable-width StringDType: go through Python str
            toks, counts = np.unique(np.array([str(t) for t in np.asarray(top_tokens, dtype=object).ravel()]),
                                     return_counts=True)
            order = np.argsort(-counts)[:3]
            common = "; most common first tokens " + ", ".join(
                f"{str(toks[i])!r} ({int(counts[i])})" for i in order)
        warnings.warn(
            f"{model_id}: median first-token probability on the option letters on clean images is "
            + ", ".join(f"{m:.3g} ({t})" for t, m in low.items())
            + f", below {threshold}: answer and c_int are computed from a sliver of the distribution{common}. "
            "Likely causes: a wrong chat template or assistant prefill, a model whose first token is '(', '**', "
            "a newline or 'The' instead of the letter, or random weights (a pipeline check).",
            LowOptionMassWarning, stacklevel=2)
    return med
