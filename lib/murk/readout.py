"""The read-out's front door: the four read-outs of spec Sec. III, by the names the notebooks and tests use.

Per question and condition (spec Sec. III, "Four read-outs"): the **answer** (the
option with the largest first-token probability after the prefill "Answer:"), the
**internal confidence** ``c_int = max_k p_k / sum_k p_k``, the **verbalized
confidence** (the integer after "Confidence:" in the greedy 12-token continuation,
divided by 100) and **abstain** (two wordings: the extra option's letter is the most
probable). Answers are never parsed from generated text.

The read-out lives in rooms by concept; this module holds none of it and re-exports
their public names, so that ``murk.readout.<name>`` keeps working:

==================  ===========================================================================
:mod:`murk.vlm`     the model and its inputs: :func:`load_vlm` and its refusals, image
                    presentation, option tokens, the chat-templated prompt, the kernels
:mod:`murk.verbal`  the verbal-confidence grammar (:func:`parse_verbal_confidence`) and
                    ``verbal_stop`` (:func:`continuation_stop`)
:mod:`murk.unit`    what a unit asks and records: :func:`item_prompts`, :func:`item_readouts`,
                    :data:`READOUTS`, the option-mass guard (:func:`check_option_mass`)
:mod:`murk.engine`  the production engine: many units per forward pass
:mod:`murk.whole`   every prompt run whole (the reference, :func:`read_question`, and the
                    engine's fallback)
:mod:`murk.baseline`  the per-unit shared-prefix engine (:func:`read_item`,
                    :func:`score_prompts`): the benchmarks' baseline, not on the production path
==================  ===========================================================================
"""

from __future__ import annotations

from murk.baseline import PromptScores, read_item, score_prompts
from murk.cube import READOUTS, TEXT_READOUTS
from murk.unit import (OPTION_MASS_MIN, LowOptionMassWarning, PromptSlot,
                       check_option_mass, item_prompts, item_readouts, median_option_mass, verbal_groups)
from murk.verbal import VERBAL_STOP_EOS, VERBAL_STOP_LIMIT, continuation_stop, parse_verbal_confidence
from murk.vlm import (LOAD_COMMANDS, VLM, build_prompt_text, custom_code_note, hub_revision, load_vlm,
                      option_token_ids, present_image, setting_words, vlm_from_parts)
from murk.whole import read_question

__all__ = [
    "READOUTS",
    "TEXT_READOUTS",
    "VERBAL_STOP_EOS",
    "VERBAL_STOP_LIMIT",
    "OPTION_MASS_MIN",
    "LowOptionMassWarning",
    "VLM",
    "load_vlm",
    "LOAD_COMMANDS",
    "setting_words",
    "custom_code_note",
    "hub_revision",
    "vlm_from_parts",
    "present_image",
    "option_token_ids",
    "parse_verbal_confidence",
    "continuation_stop",
    "build_prompt_text",
    "read_question",
    "PromptScores",
    "score_prompts",
    "read_item",
    "PromptSlot",
    "item_prompts",
    "verbal_groups",
    "item_readouts",
    "median_option_mass",
    "check_option_mass",
]
