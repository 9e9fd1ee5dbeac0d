"""Every prompt run whole through transformers: the reference scorer, and the batched engine's fallback.

Each prompt of a unit (:func:`murk.readout.item_prompts`) is chat-templated, encoded
with its own copy of the image and run on its own, as evaluation harnesses do: a
forward pass for the first-token distribution, ``generate`` (greedy,
:func:`murk.readout.generate_greedy`) for the prompts that ask for a continuation. No
cache is shared, no padding, no custom mask: what transformers computes for one
prompt is the definition the engines are checked against (tests/test_engine_batched.py,
tests/test_baseline.py, tests/test_realformat.py), and what :mod:`murk.readout` falls back to for a unit
it cannot batch safely.

The read-outs come from :func:`murk.readout.item_readouts`, through
:func:`readouts_from_scores`, which every engine shares: this module scores, it
does not decide what a read-out means.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from murk.core import load_config
from murk.protocol import Question
from murk.readout._item_readouts import PromptSlot, item_prompts, item_readouts
from murk.readout._verbal import continuation_stop, until_eos
from murk.readout._vlm import VLM, build_prompt_text, encode, generate_greedy, letter_probs, present_image, softmax32

__all__ = ["score_whole", "readouts_from_scores", "read_unit", "read_question"]


def score_whole(vlm: VLM, image: np.ndarray, slots: Sequence[PromptSlot], config: Mapping[str, Any] | None = None,
                batched: bool = False) -> tuple[np.ndarray, list, list]:
    """First-token distributions and greedy continuations of prompts, each run whole.

    Parameters
    ----------
    vlm : VLM
        From :func:`murk.readout.load_vlm`.
    image : numpy.ndarray, shape (H, W, 3), dtype uint8
        The condition's image (degraded and boxed); presented at most
        ``vlm.max_side_px`` per side (:func:`murk.readout.present_image`).
    slots : sequence of PromptSlot
        From :func:`murk.readout.item_prompts`; a slot with ``generate`` gets a greedy
        continuation of ``readout.verbal_max_new_tokens`` tokens.
    config : dict, optional
        Study configuration (``readout.assistant_prefill``, ``readout.verbal_max_new_tokens``).
    batched : bool
        False (default): a slot that generates runs through ``generate``, every other
        slot through one forward pass. True: all slots run as one left-padded batch
        of ``generate`` (slots that do not generate use only its first step). Same
        distributions up to floating-point rounding of the padded batch.

    Returns
    -------
    probs : numpy.ndarray, shape (len(slots), vocab), dtype float64
        Softmax (in float32) of each prompt's first-token logits: ``generate``'s raw
        first-step logits (``output_logits``, before any logits processor) or the
        forward pass's last position.
    continuations : list of str or None
        Per slot, the continuation up to and including the first end-of-sequence
        token, special tokens skipped; None where not generated.
    stops : list of float
        Per slot, :func:`murk.readout.continuation_stop` (0.0 end-of-sequence, 1.0 token
        limit); NaN where not generated.
    """
    import torch

    cfg = load_config() if config is None else config
    rcfg = cfg.get("readout", {})
    prefill = rcfg.get("assistant_prefill", "Answer:")
    max_new = int(rcfg.get("verbal_max_new_tokens", 12))
    pil = present_image(image, vlm.max_side_px)
    texts = [build_prompt_text(vlm, s.user, prefill) for s in slots]
    rows: list[np.ndarray] = []
    new_tokens: list[list[int] | None] = []
    if batched and texts:
        inputs = encode(vlm, texts, pil, padding=True, padding_side="left")
        gen = generate_greedy(vlm, inputs, max_new)
        n_in = inputs["input_ids"].shape[1]
        for b, s in enumerate(slots):
            rows.append(softmax32(gen.logits[0][b]))
            new_tokens.append(gen.sequences[b, n_in:].tolist() if s.generate else None)
    else:
        for s, text in zip(slots, texts):
            inputs = encode(vlm, [text], pil)
            if s.generate:
                gen = generate_greedy(vlm, inputs, max_new)
                rows.append(softmax32(gen.logits[0][0]))
                new_tokens.append(gen.sequences[0, inputs["input_ids"].shape[1]:].tolist())
            else:
                with torch.inference_mode():
                    logits = vlm.model(**inputs).logits[0, -1]
                rows.append(softmax32(logits))
                new_tokens.append(None)
    continuations: list = []
    stops: list = []
    for seq in new_tokens:
        if seq is None:
            continuations.append(None)
            stops.append(math.nan)
            continue
        seq = until_eos(seq, vlm.eos_token_ids)
        continuations.append(vlm.tokenizer.decode(seq, skip_special_tokens=True))
        stops.append(continuation_stop(seq, vlm.eos_token_ids, max_new))
    probs = np.stack(rows) if rows else np.zeros((0, 0), dtype=np.float64)
    return probs, continuations, stops


def readouts_from_scores(vlm: VLM, questions: Sequence[Question], slots: Sequence[PromptSlot], probs: np.ndarray,
                         continuations: Sequence[str | None], stops: Sequence[float]) -> dict[str, dict[str, Any]]:
    """The read-outs of a unit from its prompts' full first-token distributions (any engine's).

    Parameters
    ----------
    vlm : VLM
        Its option tokens (:func:`murk.readout.letter_probs`) and tokenizer (the top token).
    questions : sequence of Question
    slots : sequence of PromptSlot
    probs : numpy.ndarray, shape (len(slots), vocab), dtype float64
        First-token distributions, one row per slot.
    continuations, stops : sequence
        Per slot, as :func:`score_whole` returns them.

    Returns
    -------
    dict of str -> dict
        :func:`murk.readout.item_readouts`.
    """
    p = [letter_probs(vlm, probs[j], s.letters) for j, s in enumerate(slots)]
    tops = [vlm.tokenizer.decode([int(np.argmax(probs[j]))]) for j in range(len(slots))]
    return item_readouts(questions, slots, p, tops, continuations, stops)


def read_unit(vlm: VLM, image: np.ndarray, questions: Sequence[Question], config: Mapping[str, Any] | None = None,
              verbal_variants: Sequence[str] = ("v1",)) -> dict[str, dict[str, Any]]:
    """The read-outs of one unit (one image under one condition), every prompt run whole.

    Parameters
    ----------
    vlm : VLM
    image : numpy.ndarray, shape (H, W, 3), dtype uint8
        The condition's image (degraded and boxed).
    questions : sequence of Question
        Usually t2, t3_true and t3_false of the item.
    config : dict, optional
    verbal_variants : sequence of {"v1", "v2", "v3"}
        Verbal wordings to ask (:func:`murk.readout.item_prompts`).

    Returns
    -------
    dict of str -> dict
        ``{question.task: readouts}`` (:func:`murk.readout.item_readouts`), as
        :func:`murk.readout.read_units` returns per unit.

    Raises
    ------
    ValueError
        If ``verbal_variants`` lacks ``"v1"`` or names an unknown wording.
    """
    cfg = load_config() if config is None else config
    slots = item_prompts(questions, cfg, verbal_variants)
    probs, conts, stops = score_whole(vlm, image, slots, cfg)
    return readouts_from_scores(vlm, questions, slots, probs, conts, stops)


def read_question(vlm: VLM, image: np.ndarray, question: Question, config: Mapping[str, Any] | None = None,
                  batched: bool = False) -> dict[str, Any]:
    """The four read-outs (spec Sec. III) of one question on one image: the reference path.

    The question's three prompts (``main``, ``abstain``, ``abstain2``) are run whole
    (:func:`score_whole`), as evaluation harnesses do; every engine must give the
    same read-outs up to floating-point rounding.

    Parameters
    ----------
    vlm : VLM
        From :func:`murk.readout.load_vlm`.
    image : numpy.ndarray, shape (H, W, 3), dtype uint8
        The condition's image, already degraded and boxed; presented at most
        448 x 448 (:func:`murk.readout.present_image`).
    question : Question
    config : dict, optional
        Study configuration (prompt templates, ``readout.assistant_prefill``,
        ``readout.verbal_max_new_tokens``).
    batched : bool
        False (default): the main prompt runs through ``generate``, each abstain
        prompt through one forward pass. True: the three prompts run as one
        left-padded batch of ``generate``. Same read-outs up to floating-point
        rounding of the padded batch; faster on a GPU.

    Returns
    -------
    dict
        Every key of :data:`murk.readout.READOUTS` and :data:`murk.readout.TEXT_READOUTS`
        (:func:`murk.readout.item_readouts`); the wording variants (``*_v2``, ``*_v3``)
        and other sources' read-outs are NaN / empty.

    Notes
    -----
    Greedy whatever the checkpoint's generation config says (:func:`murk.readout.load_vlm`
    gives the model a greedy one); the first-token probabilities are the float32
    softmax of ``generate``'s raw first-step logits (``output_logits``), i.e.
    before any logits processor, as the engines read them.
    """
    cfg = load_config() if config is None else config
    slots = item_prompts([question], cfg, ("v1",))
    probs, conts, stops = score_whole(vlm, image, slots, cfg, batched=batched)
    return readouts_from_scores(vlm, [question], slots, probs, conts, stops)[question.task]
