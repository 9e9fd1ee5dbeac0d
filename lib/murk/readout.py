"""VLM loading and the four read-outs of spec Sec. III.

Per question and condition (spec Sec. III, "Four read-outs"):

1. **Answer**: the option with the largest first-token probability after the
   assistant turn is prefilled with ``readout.assistant_prefill`` ("Answer:").
2. **Internal confidence** ``c_int = max_k p_k / sum_k p_k``, with ``p_k`` the
   first-token probability of option letter k (summed over the letter's token
   variants, e.g. ``"A"`` and ``" A"``); the softmax over the vocabulary is taken
   in float32 whatever the model's dtype.
3. **Verbalized confidence**: the integer after "Confidence:" in the greedy
   12-token continuation, divided by 100 (:func:`parse_verbal_confidence`); NaN
   when not parsed. ``verbal_stop`` records how the continuation ended
   (:data:`VERBAL_STOP_EOS` = 0: at an end-of-sequence token; :data:`VERBAL_STOP_LIMIT`
   = 1: at the token limit; NaN: not asked); a number that touches the end of a
   continuation cut by the limit is missing (real tokenizers split digits:
   ``"Confidence: 100"`` cut after 12 tokens reads ``"Confidence: 10"``).
4. **Abstain** (two wordings): a second and third prompt add one more option;
   abstention is the event that its letter has the largest first-token
   probability.

Answers are never parsed from generated text (no yes/no substring matching):
they are the option letters' first-token probabilities. ``option_mass`` (the
first-token probability on the option letters) is the check that the first
token is the answer: :func:`check_option_mass` warns when its median on clean
images is below :data:`OPTION_MASS_MIN`.

Decoding is greedy whatever the checkpoint's ``generation_config`` says
(sampling, temperature, top-k/p, repetition penalty...): :func:`load_vlm`
replaces it by a greedy one and keeps what it ignored in
:attr:`VLM.ignored_generation_settings`.

Images are presented at most 448 x 448 pixels (aspect kept, PIL LANCZOS) as a
single tile: SmolVLM with ``do_image_splitting=False``, Qwen-VL with a pixel
budget of at most 448^2 pixels.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from murk import paths
from murk.checkpoints import (INTERNVL_NAMED_TOKENS, OFFLINE_MODELS, CheckpointFileError, check_weight_files,
                              declared_custom_code, ensure_offline_checkpoint, is_tiny_checkpoint, model_kind)
from murk.config import load_config
from murk.prompts import Question, render_prompt

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
    "check_option_mass",
]

#: numeric read-outs of one question (float64; NaN = missing). ``verbal_stop``, ``verbal_stop_v2``
#: and ``verbal_stop_v3``: how the continuation of wording v1/v2/v3 ended (0 = end-of-sequence,
#: 1 = token limit, NaN = not asked)
READOUTS = ("answer", "correct", "c_int", "verbal_conf", "abstain", "abstain2", "option_mass",
            "verbal_conf_v2", "verbal_conf_v3", "visibility_hat_m", "visibility_hat_censored", "verbal_stop",
            "verbal_stop_v2", "verbal_stop_v3")
#: text read-outs of one question (diagnostics); ``verbal_text_v2/v3`` are empty when not asked
TEXT_READOUTS = ("verbal_text", "top_token", "verbal_text_v2", "verbal_text_v3")

#: ``verbal_stop`` coding: the continuation ended with an end-of-sequence token
VERBAL_STOP_EOS = 0.0
#: ``verbal_stop`` coding: the continuation ran to ``readout.verbal_max_new_tokens`` tokens
VERBAL_STOP_LIMIT = 1.0

#: median first-token option mass on clean images below which the read-outs are suspect
#: (:func:`check_option_mass`): a healthy instruction-tuned model puts most of its first-token
#: probability on the option letters after "Answer:"; random weights put about 1e-4 there
#: (shared/real-model-files/README.md)
OPTION_MASS_MIN = 0.5

_DEFAULT_MAX_SIDE = 448


class LowOptionMassWarning(UserWarning):
    """The first generated token is mostly not an option letter: answer and c_int are unreliable."""


@dataclass
class VLM:
    """A loaded vision-language model with everything the read-outs need.

    Attributes
    ----------
    model : transformers.PreTrainedModel
        In eval mode, on ``device``; its ``generation_config`` is greedy.
    processor : transformers.ProcessorMixin
    tokenizer : transformers.PreTrainedTokenizerBase
    model_id : str
        What was asked for: hub id, local folder or ``murk-tiny/...`` / ``murk-realformat/...`` id.
    revision : str
        Commit hash of the hub snapshot (its cache folder's name, :func:`hub_revision`), else ``"local"``.
    is_pipeline_check : bool
        True for a checkpoint murk built (tiny or real-format: random weights, results are meaningless).
    device : str
        ``"cuda"``, ``"cpu"``, ...
    dtype : torch.dtype
        bfloat16 on CUDA, float32 on CPU (``readout.dtype_gpu`` / ``dtype_cpu``).
    option_tokens : dict of str -> tuple of int
        Token ids of each option letter's single-token variants
        (:func:`option_token_ids`).
    n_visual_tokens : int
        Number of image placeholder tokens for a 448 x 448 image.
    image_kwargs : dict
        Keyword arguments given to the processor with every image (single tile,
        pixel budget).
    max_side_px : int
        Longest side of the presented image, in pixels (``render.max_side_px``).
    eos_token_ids : tuple of int
        Tokens that end a continuation (the checkpoint's generation config, model
        config and tokenizer together).
    ignored_generation_settings : dict
        Non-greedy settings of the checkpoint's ``generation_config.json`` that murk
        does not apply (e.g. ``{"do_sample": True, "temperature": 0.7, ...}``).
    custom_code_not_run : dict of str -> str
        Custom code the checkpoint declares (``auto_map``) that was not run because
        ``trust_remote_code`` was false, and the built-in transformers class used instead:
        ``{"config.json AutoModelForImageTextToText": "modeling_x.XForConditionalGeneration ->
        Qwen3VLForConditionalGeneration"}``; empty when none was declared or it was run
        (:func:`custom_code_note` says it in one line).
    """

    model: Any
    processor: Any
    tokenizer: Any
    model_id: str
    revision: str
    is_pipeline_check: bool
    device: str
    dtype: Any
    option_tokens: dict[str, tuple[int, ...]]
    n_visual_tokens: int = 0
    image_kwargs: dict[str, Any] = field(default_factory=dict)
    max_side_px: int = _DEFAULT_MAX_SIDE
    eos_token_ids: tuple[int, ...] = ()
    ignored_generation_settings: dict[str, Any] = field(default_factory=dict)
    custom_code_not_run: dict[str, str] = field(default_factory=dict)


# --------------------------------------------------------------------------- images


def present_image(image: np.ndarray, max_side_px: int = _DEFAULT_MAX_SIDE):
    """Resize an image to fit in ``max_side_px`` x ``max_side_px`` (spec Sec. III).

    Parameters
    ----------
    image : numpy.ndarray, shape (H, W, 3), dtype uint8
        sRGB image (already degraded and boxed).
    max_side_px : int
        Bound on both sides in pixels (default 448). Aspect ratio is kept
        (PIL LANCZOS); smaller images are not enlarged.

    Returns
    -------
    PIL.Image.Image
        RGB image with ``max(width, height) <= max_side_px``.

    Raises
    ------
    ValueError
        If ``image`` is not H x W x 3 uint8.
    """
    from PIL import Image

    arr = np.asarray(image)
    if arr.ndim != 3 or arr.shape[2] != 3 or arr.dtype != np.uint8:
        raise ValueError(f"image must be an H x W x 3 uint8 array, got shape {arr.shape} dtype {arr.dtype}")
    pil = Image.fromarray(arr, mode="RGB")
    h, w = arr.shape[:2]
    scale = min(1.0, max_side_px / max(h, w))
    if scale < 1.0:
        size = (max(1, round(w * scale)), max(1, round(h * scale)))
        pil = pil.resize(size, Image.Resampling.LANCZOS)
    return pil


def _single_tile_kwargs(processor: Any, max_side_px: int) -> dict[str, Any]:
    """Processor call arguments that give one tile of at most ``max_side_px``^2 pixels.

    Given at call time, because a hub processor's saved defaults (tiling, larger
    pixel budgets) override constructor arguments (``shared/notes``):

    ==================  =================================  ===============================================
    family              image processor                    call-time arguments
    ==================  =================================  ===============================================
    SmolVLM / SmolVLM2  ``SmolVLMImageProcessor``          ``do_image_splitting=False`` (one global tile:
                                                           384 px for SmolVLM2-2.2B, 512 px for
                                                           SmolVLM-256M, which upsamples the <= 448 px image)
    Qwen3-VL            ``Qwen2VLImageProcessor``          ``size={"shortest_edge", "longest_edge": 448^2}``
                                                           (pixel budget; <= 196 tokens at 448^2)
    InternVL3.5 (HF)    ``GotOcr2ImageProcessor``          ``crop_to_patches=False`` (one 448 x 448 tile,
                                                           256 tokens; the processor default tiles)
    Gemma 4             ``Gemma4ImageProcessor``           ``max_soft_tokens=70`` (<= 161,280 px; 280, the
                                                           default, would upsample to 645,120 px)
    ==================  =================================  ===============================================
    """
    ip = getattr(processor, "image_processor", None)
    kwargs: dict[str, Any] = {}
    if ip is None:
        return kwargs
    if hasattr(ip, "do_image_splitting"):  # Idefics3 / SmolVLM
        kwargs["do_image_splitting"] = False
    if hasattr(ip, "crop_to_patches"):  # InternVL (GotOcr2ImageProcessor)
        kwargs["crop_to_patches"] = False
    if hasattr(ip, "max_soft_tokens") and hasattr(ip, "pooling_kernel_size"):  # Gemma 4
        from murk.checkpoints import gemma4_max_soft_tokens

        kwargs["max_soft_tokens"] = gemma4_max_soft_tokens(
            max_side_px * max_side_px, int(ip.patch_size), int(ip.pooling_kernel_size)
        )
    size = getattr(ip, "size", None)
    size = dict(size) if isinstance(size, Mapping) else dict(getattr(size, "__dict__", {}) or {})
    if hasattr(ip, "merge_size") and size.get("longest_edge"):  # Qwen-VL: pixel budget (area)
        max_pixels = max_side_px * max_side_px
        shortest = min(int(size.get("shortest_edge") or 0), max_pixels)
        kwargs["size"] = {"shortest_edge": shortest, "longest_edge": max_pixels}
    return kwargs


# --------------------------------------------------------------------------- tokens


def option_token_ids(tokenizer: Any, letters: Sequence[str]) -> dict[str, list[int]]:
    """Single-token variants of each option letter.

    A variant is a token of the vocabulary that is not a special/added token and
    whose decoded text, stripped of whitespace, is exactly the letter: ``"A"``,
    ``" A"`` (``"ĠA"`` in byte-level BPE, ``"▁A"`` in SentencePiece), ``"\\nA"``...
    The encodings of ``"A"`` and ``" A"`` are included whenever each is a single
    token.

    Parameters
    ----------
    tokenizer : transformers tokenizer
    letters : sequence of str
        Option letters, e.g. ``("A", "B", "C", "D", "E")``.

    Returns
    -------
    dict of str -> list of int
        Sorted token ids per letter (each list non-empty).

    Raises
    ------
    ValueError
        If a letter has no single-token variant or two letters share a token id.
    """
    letters = [str(L) for L in letters]
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    added = set(getattr(tokenizer, "added_tokens_decoder", {}) or {})
    out: dict[str, set[int]] = {L: set() for L in letters}
    for L in letters:
        for text in (L, " " + L):
            ids = tokenizer.encode(text, add_special_tokens=False)
            if len(ids) == 1 and tokenizer.decode(ids).strip() == L:
                out[L].add(int(ids[0]))
    # the vocabulary: prefilter on the raw token string, then decode the candidates
    letter_set = set(letters)
    candidates = [
        (tok, i)
        for tok, i in tokenizer.get_vocab().items()
        if len(tok) <= 8 and i not in special and i not in added and letter_set & set(tok)
    ]
    for tok, i in candidates:
        text = tokenizer.decode([i]).strip()
        if text in letter_set:
            out[text].add(int(i))
    seen: dict[int, str] = {}
    for L in letters:
        if not out[L]:
            raise ValueError(f"option letter {L!r} has no single-token variant in this tokenizer")
        for i in out[L]:
            if i in seen:
                raise ValueError(f"token id {i} is a variant of both {seen[i]!r} and {L!r}")
            seen[i] = L
    return {L: sorted(out[L]) for L in letters}


# the label: "Confidence", "Confidence level", "Confidence score", "Confidence rating", optionally
# with a parenthesised range ("Confidence (0-100)") and Markdown emphasis ("**Confidence:**"),
# then a colon
_LABEL_RE = re.compile(
    r"(?<![A-Za-z])confidence(?:[ \t]+(?:level|score|rating))?[ \t]*(?:\([^()\n]{0,24}\))?[ \t]*[*_]{0,3}[ \t]*[:：]"
    r"[ \t*_]*", re.IGNORECASE)
# a number as written: sign, digits, decimal part, exponent (classified below)
_NUMBER_RE = re.compile(r"(?P<sign>[-+−])?(?P<int>\d+)(?P<frac>[.,]\d+)?(?P<exp>[eE][-+]?\d+)?")
_RANGE_RE = re.compile(r"[ \t]*(?:-|–|—|to)[ \t]*\d", re.IGNORECASE)
_FRACTION_RE = re.compile(r"[ \t]*(?:/|out[ \t]+of)[ \t]*(?P<den>\d+)", re.IGNORECASE)
_PERCENT_RE = re.compile(r"[ \t]*%")
# what may follow a value cut by the token limit and still turn it into a decimal, a fraction,
# a range or another number: then the value "touches the end" and is missing
_OPEN_END_RE = re.compile(
    r"[ \t*_]*(?:[.,/\-–—][ \t]*\d*"                          # a decimal, fraction or range begun
    r"|o(?:u(?:t(?:[ \t]+(?:o(?:f(?:[ \t]*\d*)?)?)?)?)?)?"      # "out of N" begun
    r"|t(?:o(?:[ \t]*\d*)?)?)?[ \t*_]*",                       # "to N" begun
    re.IGNORECASE)


def parse_verbal_confidence(text: str, truncated: bool = False) -> float:
    """The verbalized confidence: the integer after "Confidence:" divided by 100.

    Grammar (case-insensitive; spec Sec. III: "the integer after 'Confidence:'
    ... unparsed outputs are kept as missing")::

        label  := EMPH? "confidence" [" level" | " score" | " rating"] ["(" range ")"] EMPH? ":" EMPH?
        value  := EMPH? INTEGER ["%" | "/100" | " out of 100"] EMPH?
        EMPH   := "*" | "**" | "_" | "__"        (Markdown emphasis)

    * The first label followed by a value decides. A label followed by an
      echoed range (``0 to 100``, ``0-100``, ``0–100``) or by no number at all
      (``<a number from 0 to 100>``, ``high``) is skipped and the next label is
      tried.
    * INTEGER is 0-100 written with at most three digits. A decimal (``0.85``,
      ``85.5``), an exponent (``1e2``), a sign (``-5``), a value above 100, a
      fraction other than ``/100`` (``8/10``, ``8 out of 10``) is missing: none
      of them is read as a percentage.
    * ``truncated``: the continuation stopped at the token limit. A value that
      touches its end is missing, because the cut may have removed digits
      (``"Confidence: 10"`` from ``"Confidence: 100"``) or a decimal, fraction or
      range part: the value counts only if something follows it that cannot
      continue it (a newline, a letter other than the start of "out of" / "to",
      a bracket...).

    ==================================  =========  ==========
    text                                value      truncated
    ==================================  =========  ==========
    ``Confidence: 85``                  0.85       NaN
    ``Confidence: 85\n``                0.85       0.85
    ``**Confidence:** 85%``             0.85       NaN
    ``Confidence level: 85/100``        0.85       NaN
    ``Confidence (0-100): 85.``         0.85       NaN
    ``Confidence: 0 to 100\nConfidence: 90\n``  0.90  0.90
    ``Confidence: 0.85`` / ``1e2``       NaN        NaN
    ``Confidence: 8 out of 10``         NaN        NaN
    ==================================  =========  ==========

    Parameters
    ----------
    text : str
        The generated continuation (special tokens removed).
    truncated : bool
        True if the continuation ended at the token limit (``verbal_stop`` = 1).

    Returns
    -------
    float
        In [0, 1] (multiples of 0.01); NaN when missing.

    >>> parse_verbal_confidence("B\\nConfidence: 85")
    0.85
    >>> parse_verbal_confidence(" A. fire hydrant\\nConfidence: 10", truncated=True)
    nan
    """
    text = text or ""
    for label in _LABEL_RE.finditer(text):
        m = _NUMBER_RE.match(text, label.end())
        if m is None:
            continue  # no number after this label (a placeholder, a word): try the next label
        pos = m.end()
        if _RANGE_RE.match(text, pos) and not (m.group("frac") or m.group("exp")):
            continue  # an echoed range such as "0 to 100" is not a value
        if m.group("sign") or m.group("frac") or m.group("exp") or len(m.group("int")) > 3:
            return math.nan
        value = int(m.group("int"))
        frac = _FRACTION_RE.match(text, pos)
        if frac is not None:
            if frac.group("den") != "100":
                return math.nan
            pos = frac.end()
        else:
            pct = _PERCENT_RE.match(text, pos)
            if pct is not None:
                pos = pct.end()
        if value > 100:
            return math.nan
        if truncated and _OPEN_END_RE.fullmatch(text, pos) is not None:
            return math.nan  # the number touches the end of a continuation cut by the token limit
        return value / 100.0
    return math.nan


def continuation_stop(tokens: Sequence[int], eos_token_ids, max_new_tokens: int) -> float:
    """How a greedy continuation ended (the ``verbal_stop`` read-out).

    Parameters
    ----------
    tokens : sequence of int
        The generated tokens, in order (an end-of-sequence token, if any, included).
    eos_token_ids : collection of int
        Tokens that end a continuation (:attr:`VLM.eos_token_ids`).
    max_new_tokens : int
        The token limit (``readout.verbal_max_new_tokens``, 12).

    Returns
    -------
    float
        :data:`VERBAL_STOP_EOS` (0.0) if an end-of-sequence token was generated,
        :data:`VERBAL_STOP_LIMIT` (1.0) otherwise (the limit was reached; also for a
        sequence shorter than the limit without one, which only a caller's own
        stopping rule can produce).
    """
    eos = set(int(i) for i in eos_token_ids)
    return VERBAL_STOP_EOS if any(int(t) in eos for t in tokens) else VERBAL_STOP_LIMIT


def _until_eos(tokens: Sequence[int], eos_token_ids) -> list[int]:
    """The tokens up to and including the first end-of-sequence token."""
    eos = set(int(i) for i in eos_token_ids)
    out = []
    for t in tokens:
        out.append(int(t))
        if int(t) in eos:
            break
    return out


# --------------------------------------------------------------------------- loading

#: small JSON files of a checkpoint folder, parsed before loading (a broken one is named in the error)
_JSON_FILES = ("config.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json",
               "added_tokens.json", "preprocessor_config.json", "processor_config.json",
               "video_preprocessor_config.json", "chat_template.json", "model.safetensors.index.json")
#: large JSON files, parsed only to explain a failed load
_BIG_JSON_FILES = ("tokenizer.json",)
_PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")
#: generation settings that are not greedy decoding (ignored by murk, recorded in VLM.ignored_generation_settings)
_NON_GREEDY = {"do_sample": False, "temperature": 1.0, "top_k": 50, "top_p": 1.0, "min_p": None, "typical_p": 1.0,
               "repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "num_beams": 1, "length_penalty": 1.0,
               "encoder_repetition_penalty": 1.0, "bad_words_ids": None, "suppress_tokens": None,
               "begin_suppress_tokens": None, "sequence_bias": None, "min_length": 0, "min_new_tokens": None,
               "forced_bos_token_id": None, "forced_eos_token_id": None, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0,
               "guidance_scale": None, "renormalize_logits": False}


class _LoadError(OSError):
    """A one-line loading error that names the model, what failed and the fix."""


#: the commands that run a read-out (:func:`load_vlm`'s ``command``): a fix is given in the words of the
#: command the user ran (the Snakefile passes ``-p run_by snakemake`` to the read-out notebook)
LOAD_COMMANDS = ("python", "papermill", "snakemake")


def setting_words(name: str, value: Any, command: str = "python") -> str:
    """How a user of ``command`` sets the loading option ``name`` to ``value``, in the words they type.

    Parameters
    ----------
    name : str
        A loading option of :func:`load_vlm` that is also a run setting (``data/workflow.yaml``):
        ``trust_remote_code`` or ``allow_pickle``.
    value : bool
    command : {"python", "papermill", "snakemake"}
        What runs the read-out (:data:`LOAD_COMMANDS`).

    Returns
    -------
    str
        E.g. ``"rerun with --config allow_pickle=true (make demo ARGS='--config allow_pickle=true')"``
        (Snakemake), ``"rerun the read-out notebook with -p allow_pickle True (papermill) ..."``,
        ``"pass allow_pickle=True to murk.readout.load_vlm"`` (Python).

    Raises
    ------
    ValueError
        If ``command`` is not one of :data:`LOAD_COMMANDS`.
    """
    yaml_value = json.dumps(value) if isinstance(value, bool) else str(value)
    if command == "snakemake":
        return (f"rerun with --config {name}={yaml_value} (make demo ARGS='--config {name}={yaml_value}'), or set "
                f"{name}: {yaml_value} in data/workflow.yaml")
    if command == "papermill":
        return (f"rerun the read-out notebook with -p {name} {value} (papermill), or set {name}: {yaml_value} "
                f"in data/workflow.yaml")
    if command == "python":
        return f"pass {name}={value!r} to murk.readout.load_vlm"
    raise ValueError(f"command={command!r}: use one of {', '.join(LOAD_COMMANDS)}")


def _model_words(command: str) -> str:
    """How a user of ``command`` names another model (an image-text-to-text one)."""
    if command == "snakemake":
        key = "offline_models" if paths.offline() else "models"
        return (f"list an image-text-to-text model in {key} (data/workflow.yaml, or "
                f"make demo ARGS='--config {key}=[\"org/model\"]'), e.g. one of data/study.yaml's models")
    if command == "papermill":
        return ("rerun the read-out notebook with -p model <an image-text-to-text model: hub id or folder>, "
                "e.g. one of data/study.yaml's models")
    return ("pass murk.readout.load_vlm an image-text-to-text model (hub id or folder), e.g. one of "
            "data/study.yaml's models")


def custom_code_note(not_run: Mapping[str, str]) -> str:
    """One line saying which custom code was not run and which built-in class was used instead ('' if none).

    Parameters
    ----------
    not_run : dict of str -> str
        :attr:`VLM.custom_code_not_run`.
    """
    if not not_run:
        return ""
    parts = []
    for where, what in not_run.items():
        custom, _, used = what.partition(" -> ")
        parts.append(f"{where} names {custom}: " + (f"the built-in transformers class {used} was used instead"
                                                     if used else "not used by murk"))
    return ("custom code declared by the checkpoint was not run (trust_remote_code is false): "
            + "; ".join(parts))


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


def _resolve_source(model: str, root: str | os.PathLike | None) -> tuple[str, bool, bool]:
    """Folder or hub id to load from, whether it is local, whether murk built it (a pipeline check)."""
    if model in OFFLINE_MODELS:
        return str(ensure_offline_checkpoint(model, root)), True, True
    p = Path(model).expanduser()
    if p.is_dir():
        return str(p.resolve()), True, is_tiny_checkpoint(p)
    return model, False, False


def _not_found(model: str, err: Exception) -> OSError:
    hint = (
        "MURK_OFFLINE=1 is set, so only files already on this machine are used: pass a local "
        "checkpoint folder, a pipeline-check model murk builds offline "
        f"({', '.join(OFFLINE_MODELS)}), or put the model into the Hugging Face cache "
        "and retry; unset MURK_OFFLINE to allow downloads"
        if paths.offline()
        else "pass a local checkpoint folder or a pipeline-check model murk builds offline "
        f"({', '.join(OFFLINE_MODELS)}), or check the Hugging Face id and network access"
    )
    return _LoadError(f"cannot load model {model!r}: {type(err).__name__}: {_one_line(err)}; fix: {hint}")


def _check_json(model: str, folder: Path, names: Sequence[str]) -> None:
    """Raise a one-line error naming the first of ``names`` in ``folder`` that is not valid JSON."""
    for name in names:
        f = folder / name
        if f.is_file():
            try:
                json.loads(f.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError) as err:
                raise _LoadError(f"cannot load model {model!r}: {f} is not valid JSON ({_one_line(err)}); "
                                 f"fix: repair or re-download that file") from err


def _weights_fix(model: str, err: CheckpointFileError, folder: Path, local: bool, rebuilt: bool) -> str:
    """The fix for a missing, truncated or damaged weights file ``err.path`` of ``folder``
    (``rebuilt``: a checkpoint murk builds on first use, :data:`murk.checkpoints.OFFLINE_MODELS`)."""
    if err.lfs_pointer:
        return f"fetch the weights: run git lfs pull in {folder} (it was cloned without Git LFS)"
    if rebuilt:
        return (f"delete the folder {folder} (rm -r {folder}) and rerun the same command: murk builds this "
                f"pipeline-check checkpoint again")
    if local:
        return (f"copy or download {err.path.name} into {folder} again (a hub checkpoint: hf download <org/name> "
                f"--local-dir {folder}; a model of yours: save it again with save_pretrained)")
    try:
        name = err.path.relative_to(folder).as_posix()
    except ValueError:
        name = err.path.name
    return (f"download it again: hf download {model} {name} --force-download (this needs the network: with "
            f"MURK_OFFLINE=1 only the Hugging Face cache is read)")


def _weights_error(model: str, err: CheckpointFileError, folder: Path, local: bool, rebuilt: bool) -> _LoadError:
    return _LoadError(f"cannot load model {model!r}: {err.path} {err.problem}; "
                      f"fix: {_weights_fix(model, err, folder, local, rebuilt)}")


def _check_folder(model: str, folder: Path) -> None:
    """Refuse a local checkpoint folder whose JSON files are broken or that has no ``config.json``."""
    _check_json(model, folder, _JSON_FILES)
    if not (folder / "config.json").is_file():
        raise _LoadError(f"cannot load model {model!r}: {folder / 'config.json'} is missing; fix: point to a "
                         f"checkpoint folder written by save_pretrained (or a Hugging Face snapshot)")


def _check_weights(model: str, folder: Path, allow_pickle: bool, command: str = "python",
                   rebuilt: bool = False) -> tuple[Path, ...]:
    """Refuse a local checkpoint folder whose weights are damaged, missing or pickles only; return its
    safetensors weights files (:func:`murk.checkpoints.check_weight_files`)."""
    try:
        weights = check_weight_files(folder)
    except CheckpointFileError as err:
        raise _weights_error(model, err, folder, True, rebuilt) from None
    pickles = [n for n in _PICKLE_WEIGHTS if (folder / n).is_file()]
    if not weights and pickles and not allow_pickle:
        raise _LoadError(
            f"cannot load model {model!r}: {folder} holds weights only as {pickles[0]} (a pickle, which can run "
            f"code when loaded) and murk loads safetensors only; fix: convert the weights to safetensors "
            f"(load them once and save_pretrained), or, if you trust the files, "
            f"{setting_words('allow_pickle', True, command)}")
    if not weights and not pickles:
        raise _LoadError(
            f"cannot load model {model!r}: {folder} holds no weights (no model.safetensors, "
            f"model.safetensors.index.json or pytorch_model.bin); fix: copy the weights files into that folder "
            f"(or download the checkpoint again: hf download <org/name> --local-dir {folder})")
    return weights


def _snapshot_folder(model: str, kwargs: Mapping[str, Any]) -> Path | None:
    """The local folder of a hub id's snapshot (from the Hugging Face cache), or None."""
    try:
        from transformers.utils import cached_file

        f = cached_file(model, "config.json", local_files_only=True, _raise_exceptions_for_missing_entries=False,
                        **{k: v for k, v in kwargs.items() if k == "revision"})
    except Exception:  # noqa: BLE001 - only a better message depends on it
        return None
    return Path(f).parent if f else None


def hub_revision(model: str, kwargs: Mapping[str, Any] = {}) -> str | None:
    """The commit hash of the hub snapshot a hub id loads from, or None.

    transformers 5 no longer sets ``config._commit_hash``; the Hugging Face cache
    names each snapshot folder after its commit (``models--<org>--<name>/snapshots/<40
    hex digits>/``), so the folder that holds the id's ``config.json`` tells the
    revision. It is part of a store's identity (``model_revision``): two snapshots of
    one id never share a store.

    Parameters
    ----------
    model : str
        A hub id.
    kwargs : mapping
        The loading keyword arguments (``revision`` is honoured).

    Returns
    -------
    str or None
        40 lowercase hex digits, or None when the id is not in the cache or the
        folder is not named by a commit.
    """
    import re

    folder = _snapshot_folder(model, kwargs)
    return folder.name if folder is not None and re.fullmatch(r"[0-9a-f]{40}", folder.name) else None


_ROLE_OF_AUTO = {"AutoConfig": "config", "AutoProcessor": "processor", "AutoTokenizer": "tokenizer",
                 "AutoImageProcessor": "image_processor", "AutoVideoProcessor": "video_processor",
                 "AutoFeatureExtractor": "feature_extractor"}


def _custom_code_not_run(declared: Mapping[str, Mapping[str, str]], net: Any, net_config: Any,
                         processor: Any) -> dict[str, str]:
    """``{"<file> <auto class>": "<custom class> -> <built-in class used>"}`` (see :attr:`VLM.custom_code_not_run`)."""
    out = {}
    for fname, amap in declared.items():
        for auto, custom in amap.items():
            if auto.startswith("AutoModel"):
                used = net
            elif auto == "AutoConfig":
                used = net_config
            elif auto == "AutoProcessor":
                used = processor
            else:
                role = _ROLE_OF_AUTO.get(auto)
                used = getattr(processor, role, None) if role else None
            out[f"{fname} {auto}"] = f"{custom} -> {type(used).__name__}" if used is not None else custom
    return out


def _internvl_names_missing(err: Exception) -> bool:
    return isinstance(err, AttributeError) and any(n in str(err) for n in INTERNVL_NAMED_TOKENS)


def _tokenizer_with_names(model: str, source: str, kwargs: Mapping[str, Any], names: Mapping[str, str]):
    """The tokenizer with the named special tokens InternVL's converter writes, taken from its vocabulary."""
    from transformers import AutoTokenizer

    plain = AutoTokenizer.from_pretrained(source, **kwargs)
    vocab = plain.get_vocab()
    missing = [t for t in names.values() if t not in vocab]
    where = Path(source) / "tokenizer_config.json" if Path(source).is_dir() else f"{source}: tokenizer_config.json"
    if missing:
        raise _LoadError(
            f"cannot load model {model!r}: {where} names no image tokens ({', '.join(sorted(names))}) and the "
            f"vocabulary lacks {', '.join(missing)}; fix: use a tokenizer written by transformers' InternVL converter "
            f"(its extra_special_tokens: {json.dumps(dict(names))})")
    tok = AutoTokenizer.from_pretrained(source, extra_special_tokens=dict(names), **kwargs)
    bad = [t for t in names.values() if tok.convert_tokens_to_ids(t) != vocab[t]]
    if bad:
        raise _LoadError(f"cannot load model {model!r}: naming the image tokens of {where} moved {bad}; fix: add "
                         f"extra_special_tokens {json.dumps(dict(names))} to that file")
    logging.getLogger("murk").warning("%s: %s names no image tokens; using the names of transformers' InternVL "
                                      "converter (%s)", model, where, ", ".join(f"{k}={v}" for k, v in names.items()))
    return tok


def _load_processor(model: str, source: str, kwargs: Mapping[str, Any]):
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(source, **kwargs)
    except AttributeError as err:
        if not _internvl_names_missing(err):
            raise
    tokenizer = _tokenizer_with_names(model, source, kwargs, INTERNVL_NAMED_TOKENS)
    return AutoProcessor.from_pretrained(source, tokenizer=tokenizer, **kwargs)


def _greedy_generation_config(net: Any, tokenizer: Any) -> tuple[Any, dict[str, Any], tuple[int, ...]]:
    """A greedy generation config with the checkpoint's special-token ids; what it ignores; the EOS ids.

    The end-of-sequence ids are those of the checkpoint's generation config, model config,
    text config and tokenizer together, so ``generate`` and murk's own decoding stop alike.
    """
    from transformers import GenerationConfig

    ckpt = net.generation_config
    ignored = {}
    for k, neutral in _NON_GREEDY.items():
        v = getattr(ckpt, k, None)
        if v is not None and v != neutral:
            ignored[k] = v.tolist() if hasattr(v, "tolist") else v
    eos: list[int] = []
    for obj in (ckpt, net.config, net.config.get_text_config(), tokenizer):
        e = getattr(obj, "eos_token_id", None)
        if e is not None:
            eos += [int(i) for i in (e if isinstance(e, (list, tuple)) else [e])]
    eos_ids = tuple(dict.fromkeys(eos))
    greedy = GenerationConfig(bos_token_id=getattr(ckpt, "bos_token_id", None),
                              pad_token_id=getattr(ckpt, "pad_token_id", None),
                              eos_token_id=list(eos_ids) or None, do_sample=False, num_beams=1)
    return greedy, ignored, eos_ids


def _float32_head(net: Any) -> None:
    """Compute the output head (hidden state -> logits) in float32 when the model runs in a lower precision.

    In bfloat16 the logits themselves are rounded to 8 significant bits: a logit of 20
    carries an error of up to 0.06, which moves c_int by up to ~1e-2 between two ways of
    computing the same prompt. With the head in float32 (a float32 copy of its weight:
    vocab x hidden x 4 bytes, e.g. 1.2 GB for Qwen3-VL-2B, 1.6 GB for Gemma 4 E2B) the
    logits keep the precision of the bf16 hidden state, and the first-token softmax is
    taken in float32 (:func:`_softmax32`). The model's own post-processing (Gemma's
    final-logit soft-capping) then runs in float32 too.
    """
    import torch

    head = net.get_output_embeddings() if hasattr(net, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if weight is None or weight.dtype == torch.float32 or getattr(head, "_murk_float32", False):
        return
    w32 = weight.detach().float()
    b32 = None if getattr(head, "bias", None) is None else head.bias.detach().float()

    def forward(hidden):
        return torch.nn.functional.linear(hidden.float(), w32, b32)

    head.forward = forward
    head._murk_float32 = True


def load_vlm(
    model: str,
    device: str | None = None,
    dtype: Any = None,
    root: str | os.PathLike | None = None,
    config: Mapping[str, Any] | None = None,
    *,
    trust_remote_code: bool = False,
    allow_pickle: bool = False,
    command: str = "python",
) -> VLM:
    """Load a VLM (processor + model) for the read-outs.

    Parameters
    ----------
    model : str
        A Hugging Face id (e.g. ``"Qwen/Qwen3-VL-2B-Instruct"``), a local
        checkpoint folder, or an id of a checkpoint murk builds offline
        (:data:`murk.checkpoints.OFFLINE_MODELS`: the tiny ``murk-tiny/...`` and the
        real-format ``murk-realformat/...`` pipeline checks, built on first use
        into ``root``'s ``checkpoints/`` and then loaded from that folder by the
        same code path).
    device : str, optional
        Default ``"cuda"`` when available, else ``"cpu"``.
    dtype : torch.dtype or str, optional
        Default ``readout.dtype_gpu`` (bfloat16) on CUDA and ``readout.dtype_cpu``
        (float32) otherwise (spec Table III).
    root : path, optional
        Output root holding ``checkpoints/`` (:func:`murk.paths.checkpoints_dir`).
    config : dict, optional
        Study configuration; default the project's.
    trust_remote_code : bool, keyword only
        Run code shipped with the checkpoint (``auto_map`` in its config). Default
        False: such a checkpoint is refused with an error, never a terminal prompt;
        the value is passed explicitly to every ``from_pretrained``.
    allow_pickle : bool, keyword only
        Accept weights stored as pickles (``pytorch_model.bin``), which can run
        code when loaded. Default False: safetensors only (``use_safetensors=True``).
    command : {"python", "papermill", "snakemake"}, keyword only
        What runs this load (:data:`LOAD_COMMANDS`): a refusal's fix is given in its words
        (``allow_pickle=True`` to this function; ``-p allow_pickle True`` to the read-out
        notebook; ``--config allow_pickle=true`` to Snakemake; :func:`setting_words`).

    Returns
    -------
    VLM
        With a greedy ``generation_config`` (the checkpoint's non-greedy settings are
        kept in :attr:`VLM.ignored_generation_settings`, not applied) and, in bfloat16,
        the output head computed in float32 (:func:`_float32_head`). Custom code the
        checkpoint declares (``auto_map``) for a ``model_type`` transformers knows is not
        run unless ``trust_remote_code``: the built-in classes are used, a warning is
        logged (logger ``murk``) and :attr:`VLM.custom_code_not_run` says which.

    Raises
    ------
    OSError
        One line naming the model, what failed and the fix: a file that is not valid
        JSON, a missing ``config.json``; a weights file that is missing, truncated or
        damaged, a shard named by ``model.safetensors.index.json`` that is absent or
        lacks its tensors, weights the model expects that no file holds
        (:func:`murk.checkpoints.check_weight_files`); a checkpoint that is not an
        image-text-to-text model (a text-only language model, a vision-only model:
        its ``model_type`` and ``architectures``, :func:`murk.checkpoints.model_kind`);
        pickle-only weights, custom code (fixes in the words of ``command``);
        tokenizer files without InternVL's image-token names and without those tokens.
        With ``MURK_OFFLINE=1`` nothing is downloaded (``local_files_only=True``,
        ``HF_HUB_OFFLINE=1``), so a missing id fails at once.
    ValueError
        If ``command`` is not one of :data:`LOAD_COMMANDS`.
    """
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    cfg = load_config() if config is None else config
    rcfg = cfg.get("readout", {})
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype is None:
        name = rcfg.get("dtype_gpu", "bfloat16") if str(device).startswith("cuda") else rcfg.get("dtype_cpu", "float32")
        dtype = getattr(torch, name)
    elif isinstance(dtype, str):
        dtype = getattr(torch, dtype)

    if command not in LOAD_COMMANDS:
        raise ValueError(f"command={command!r}: use one of {', '.join(LOAD_COMMANDS)}")
    kwargs: dict[str, Any] = {"trust_remote_code": bool(trust_remote_code)}
    if paths.offline():
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        kwargs["local_files_only"] = True
    source, local, built = _resolve_source(model, root)
    if not local and (model.startswith((".", "/", "~")) or model.count("/") > 1):
        raise _not_found(model, FileNotFoundError(f"no folder {model}"))
    weights: tuple[Path, ...] = ()
    if local:
        _check_folder(model, Path(source))
    try:
        # the config first: custom code named in config.json (auto_map) is refused before anything else loads
        net_config = AutoConfig.from_pretrained(source, **kwargs)
        config_map = dict(getattr(net_config, "auto_map", None) or {})
        runs_custom_model = bool(trust_remote_code) and "AutoModelForImageTextToText" in config_map
        kind = None if runs_custom_model else model_kind(net_config)
        if kind is not None:
            where = Path(source) / "config.json" if local else f"the config.json of {model}"
            custom = (" (its auto_map names no AutoModelForImageTextToText class)"
                      if trust_remote_code and config_map else "")
            raise _LoadError(
                f"cannot load model {model!r}: {where} describes {kind}{custom}; murk reads out image-text-to-text "
                f"models (one image and a question in, text out: a VLM that transformers' "
                f"AutoModelForImageTextToText loads); fix: {_model_words(command)}")
        if local:  # the weights files' headers only (kB): a missing or damaged one is named before anything loads
            weights = _check_weights(model, Path(source), allow_pickle, command, model in OFFLINE_MODELS)
        processor = _load_processor(model, source, kwargs)
        net, info = AutoModelForImageTextToText.from_pretrained(
            source, config=net_config, dtype=dtype, use_safetensors=None if allow_pickle else True,
            output_loading_info=True, **kwargs)
    except _LoadError:
        raise
    except Exception as err:  # transformers raises OSError, ValueError, KeyError, AttributeError...
        msg = str(err)
        if "trust_remote_code" in msg:
            where = (f"{source} (the .py files named by auto_map in its config files)" if local
                     else f"the repository https://huggingface.co/{model}")
            raise _LoadError(
                f"cannot load model {model!r}: it needs code shipped with the checkpoint, which murk does not run "
                f"unless asked; fix: read that code in {where}; if you trust it, "
                f"{setting_words('trust_remote_code', True, command)}") from err
        folder = Path(source) if local else _snapshot_folder(model, kwargs)
        if folder is not None and (type(err).__name__ == "SafetensorError" or isinstance(err, FileNotFoundError)):
            try:
                check_weight_files(folder)
            except CheckpointFileError as bad:
                raise _weights_error(model, bad, folder, local, model in OFFLINE_MODELS) from err
        if type(err).__name__ == "SafetensorError":
            where = folder if folder is not None else f"the hub snapshot of {model}"
            fix = (_weights_fix(model, CheckpointFileError(Path("model.safetensors"), ""), Path(source), local,
                                model in OFFLINE_MODELS)
                   if folder is None or local else f"download the weights of {model} again: hf download {model} "
                   f"--force-download (this needs the network)")
            raise _LoadError(f"cannot load model {model!r}: a weights file in {where} is damaged "
                             f"({_one_line(msg)}); fix: {fix}") from err
        if "safetensors" in msg and not allow_pickle:
            raise _LoadError(
                f"cannot load model {model!r}: no safetensors weights ({_one_line(msg)[:200]}); fix: use a "
                f"revision with safetensors weights, or, if you trust its pickle weights, "
                f"{setting_words('allow_pickle', True, command)}") from err
        if local:
            _check_json(model, Path(source), _BIG_JSON_FILES)
        if local or not isinstance(err, (OSError, ValueError)):
            where = source if local else f"the hub snapshot of {model}"
            raise _LoadError(f"cannot load model {model!r} from {where}: {type(err).__name__}: {_one_line(msg)}; "
                             f"fix: check its config.json, tokenizer and processor files (a transformers "
                             f"version that knows this architecture is needed)") from err
        raise _not_found(model, err) from err
    missing = sorted((info or {}).get("missing_keys") or ())
    if missing:
        files = ", ".join(str(w) for w in weights) if weights else (
            f"the weights of {source}" if local else f"the weights of {model}")
        raise _LoadError(
            f"cannot load model {model!r}: {files} lack {len(missing)} of the model's weights (e.g. {missing[0]}): "
            f"the checkpoint is incomplete and those weights would be random; fix: "
            + (_weights_fix(model, CheckpointFileError(weights[0] if weights else Path(source), ""),
                            Path(source), local, model in OFFLINE_MODELS) if local else
               f"download the weights of {model} again: hf download {model} --force-download"))
    not_run: dict[str, str] = {}
    if not trust_remote_code:  # the files are all local now (a hub id's: in its snapshot folder)
        folder = Path(source) if local else _snapshot_folder(model, kwargs)
        declared = declared_custom_code(folder) if folder is not None else {}
        if config_map and "config.json" not in declared:
            declared["config.json"] = {str(k): str(v[-1] if isinstance(v, (list, tuple)) else v).split("--")[-1]
                                       for k, v in sorted(config_map.items())}
        not_run = _custom_code_not_run(declared, net, net_config, processor)
    if not_run:
        logging.getLogger("murk").warning("%s: %s", model, custom_code_note(not_run))
    net.to(device)
    revision = getattr(net.config, "_commit_hash", None) or (None if local else hub_revision(model, kwargs)) or "local"
    vlm = vlm_from_parts(net, processor, model, str(revision), bool(built), str(device), dtype, cfg)
    vlm.custom_code_not_run = not_run
    return vlm


def vlm_from_parts(net: Any, processor: Any, model_id: str, revision: str, is_pipeline_check: bool,
                   device: str, dtype: Any, config: Mapping[str, Any] | None = None) -> VLM:
    """A :class:`VLM` from a model and processor already in memory (as :func:`load_vlm` assembles it).

    Used by :func:`load_vlm` and by benchmarks that build full-size random-weight
    models in memory. The model must already be on ``device`` in ``dtype``; it is put
    in eval mode, given a greedy ``generation_config`` (what the checkpoint's said
    beyond greedy decoding is kept in :attr:`VLM.ignored_generation_settings`) and,
    below float32, an output head computed in float32 (:func:`_float32_head`).

    Returns
    -------
    VLM

    Raises
    ------
    ValueError
        If an option letter has no single-token variant in the tokenizer.
    """
    cfg = load_config() if config is None else config
    rcfg = cfg.get("readout", {})
    max_side = int(cfg.get("render", {}).get("max_side_px", _DEFAULT_MAX_SIDE))
    net.eval()
    _float32_head(net)
    tokenizer = processor.tokenizer
    greedy, ignored, eos_ids = _greedy_generation_config(net, tokenizer)
    net.generation_config = greedy
    if ignored:
        logging.getLogger("murk").info("%s: generation_config settings ignored (greedy decoding): %s", model_id,
                                       ignored)
    letters = tuple(rcfg.get("option_letters", ("A", "B", "C", "D", "E")))
    option_tokens = {L: tuple(v) for L, v in option_token_ids(tokenizer, letters).items()}
    vlm = VLM(
        model=net,
        processor=processor,
        tokenizer=tokenizer,
        model_id=model_id,
        revision=str(revision),
        is_pipeline_check=bool(is_pipeline_check),
        device=str(device),
        dtype=dtype,
        option_tokens=option_tokens,
        image_kwargs=_single_tile_kwargs(processor, max_side),
        max_side_px=max_side,
        eos_token_ids=eos_ids,
        ignored_generation_settings=ignored,
    )
    vlm.n_visual_tokens = _count_visual_tokens(vlm)
    return vlm


def _image_token_id(vlm: VLM) -> int:
    for obj in (vlm.model.config, vlm.processor, vlm.tokenizer):
        i = getattr(obj, "image_token_id", None)
        if i is not None:
            return int(i)
    raise ValueError(f"cannot find the image token id of {vlm.model_id}")


def _count_visual_tokens(vlm: VLM) -> int:
    """Image placeholder tokens for a 448 x 448 image (the largest presented)."""
    grey = np.full((vlm.max_side_px, vlm.max_side_px, 3), 128, dtype=np.uint8)
    inputs = _encode(vlm, [build_prompt_text(vlm, "")], present_image(grey, vlm.max_side_px))
    return int((inputs["input_ids"][0] == _image_token_id(vlm)).sum())


# --------------------------------------------------------------------------- read-outs


def build_prompt_text(vlm: VLM, user_text: str, prefill: str = "") -> str:
    """Chat-templated prompt: one user turn (image, then text), the generation
    prompt, and the assistant prefill.

    The prefill follows the generation prompt directly when that ends in
    whitespace (``"<|im_start|>assistant\\n"``, Gemma 4's ``"<|turn>model\\n"``) or in
    a special token (Gemma 4's empty thought channel ``"...<channel|>"``, after which
    the model writes its answer at once); after a text ending such as SmolVLM's
    ``"Assistant:"`` one space is inserted, as the model itself writes
    ``"Assistant: ..."``.
    """
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": user_text}]}]
    text = vlm.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return _join_prefill(text, prefill, _special_strings(vlm.tokenizer))


def _special_strings(tokenizer: Any) -> tuple[str, ...]:
    """The text of every special / added token of a tokenizer."""
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    names = [getattr(t, "content", str(t)) for t in added.values()]
    names += list(getattr(tokenizer, "all_special_tokens", []) or [])
    return tuple(sorted({n for n in names if n}, key=len, reverse=True))


def _join_prefill(text: str, prefill: str, special: Sequence[str] = ()) -> str:
    """``text`` + ``prefill``, with one space between them only after ordinary text."""
    if not prefill:
        return text
    if text[-1:].isspace() or any(text.endswith(t) for t in special):
        return text + prefill
    return text + " " + prefill


def _encode(vlm: VLM, texts: list[str], image, **text_kwargs) -> Any:
    images = [[image] for _ in texts]
    inputs = vlm.processor(text=texts, images=images, return_tensors="pt", **vlm.image_kwargs, **text_kwargs)
    # floating-point tensors (pixel values) take the model's dtype; ids stay integer
    return inputs.to(vlm.device, dtype=vlm.dtype)


def _softmax32(logits: Any) -> Any:
    """Softmax over the vocabulary in float32 (whatever the model's dtype), as float64 numpy."""
    import torch

    return torch.softmax(logits.float(), dim=-1).double().cpu().numpy()


def _letter_probs(vlm: VLM, probs: np.ndarray, letters: Sequence[str]) -> np.ndarray:
    """p_k: first-token probability of each letter, summed over its variants (float64)."""
    return np.array([float(np.asarray(probs)[list(vlm.option_tokens[L])].sum()) for L in letters], dtype=np.float64)


def _generate(vlm: VLM, inputs: Any, max_new: int) -> Any:
    """Greedy ``generate`` with the VLM's greedy generation config (never the checkpoint's sampling settings)."""
    import copy

    import torch

    gc = copy.deepcopy(vlm.model.generation_config)
    gc.max_new_tokens = max_new
    gc.do_sample = False
    gc.num_beams = 1
    gc.output_logits = True
    gc.return_dict_in_generate = True
    if gc.pad_token_id is None:
        gc.pad_token_id = vlm.tokenizer.pad_token_id
    with torch.inference_mode():
        return vlm.model.generate(**inputs, generation_config=gc)


def read_question(
    vlm: VLM,
    image: np.ndarray,
    question: Question,
    config: Mapping[str, Any] | None = None,
    batched: bool = False,
) -> dict[str, Any]:
    """The four read-outs (spec Sec. III) of one question on one image: the reference path.

    Each prompt runs whole through transformers (``generate`` for the main prompt, a
    forward pass for each abstain prompt), as evaluation harnesses do; the
    shared-prefix engine (:func:`read_item`) must give the same read-outs.

    Parameters
    ----------
    vlm : VLM
        From :func:`load_vlm`.
    image : numpy.ndarray, shape (H, W, 3), dtype uint8
        The condition's image, already degraded and boxed; presented at most
        448 x 448 (:func:`present_image`).
    question : Question
    config : dict, optional
        Study configuration (prompt templates, ``readout.assistant_prefill``,
        ``readout.verbal_max_new_tokens``).
    batched : bool
        False (default): the main prompt runs through ``generate``, each abstain
        prompt through one forward pass. True: the three prompt variants run as
        one left-padded batch of ``generate`` (the abstain variants use only the
        first step). Same read-outs up to floating-point rounding of the padded
        batch; faster on a GPU.

    Returns
    -------
    dict
        Every key of :data:`READOUTS` and :data:`TEXT_READOUTS`: ``answer`` (float,
        index of the option with the largest first-token probability, main prompt),
        ``correct`` (1.0 / 0.0), ``c_int`` (max_k p_k / sum_k p_k, in [1/K, 1]),
        ``verbal_conf`` (in [0, 1] or NaN), ``verbal_stop`` (0.0 end-of-sequence,
        1.0 token limit), ``abstain`` and ``abstain2`` (1.0 if the extra option's
        letter is the most probable, else 0.0), ``option_mass`` (sum_k p_k over
        the main prompt's letters, in [0, 1]), ``verbal_text`` (str, the greedy
        continuation) and ``top_token`` (str, the decoded most probable first
        token); the wording variants (``*_v2``, ``*_v3``) and other sources'
        read-outs are NaN / empty.

    Notes
    -----
    Greedy whatever the checkpoint's generation config says (:func:`load_vlm`
    gives the model a greedy one); the first-token probabilities are the float32
    softmax of ``generate``'s raw first-step logits (``output_logits``), i.e.
    before any logits processor, as the engine reads them.
    """
    import torch

    cfg = load_config() if config is None else config
    rcfg = cfg.get("readout", {})
    prefill = rcfg.get("assistant_prefill", "Answer:")
    max_new = int(rcfg.get("verbal_max_new_tokens", 12))
    pil = present_image(image, vlm.max_side_px)
    rendered = {v: render_prompt(question, v, cfg) for v in ("main", "abstain", "abstain2")}
    texts = {v: build_prompt_text(vlm, user, prefill) for v, (user, _) in rendered.items()}

    first_probs: dict[str, np.ndarray] = {}
    if batched:
        order = list(texts)
        inputs = _encode(vlm, [texts[v] for v in order], pil, padding=True, padding_side="left")
        gen = _generate(vlm, inputs, max_new)
        for b, v in enumerate(order):
            first_probs[v] = _softmax32(gen.logits[0][b])
        new_tokens = gen.sequences[0, inputs["input_ids"].shape[1]:].tolist()
    else:
        inputs = _encode(vlm, [texts["main"]], pil)
        gen = _generate(vlm, inputs, max_new)
        first_probs["main"] = _softmax32(gen.logits[0][0])
        new_tokens = gen.sequences[0, inputs["input_ids"].shape[1]:].tolist()
        for v in ("abstain", "abstain2"):
            inp = _encode(vlm, [texts[v]], pil)
            with torch.inference_mode():
                logits = vlm.model(**inp).logits[0, -1]
            first_probs[v] = _softmax32(logits)

    out: dict[str, Any] = {key: math.nan for key in READOUTS}
    out.update({key: "" for key in TEXT_READOUTS})
    probs = first_probs["main"]
    p = _letter_probs(vlm, probs, rendered["main"][1])
    mass = float(p.sum())
    k = int(np.argmax(p))
    out["answer"] = float(k)
    out["correct"] = float(k == question.correct_index)
    out["c_int"] = float(p[k] / mass) if mass > 0 else math.nan
    new_tokens = _until_eos(new_tokens, vlm.eos_token_ids)
    out["verbal_stop"] = continuation_stop(new_tokens, vlm.eos_token_ids, max_new)
    out["verbal_text"] = vlm.tokenizer.decode(new_tokens, skip_special_tokens=True)
    out["verbal_conf"] = parse_verbal_confidence(out["verbal_text"], truncated=out["verbal_stop"] == VERBAL_STOP_LIMIT)
    for v in ("abstain", "abstain2"):
        letters_v = rendered[v][1]
        pv = _letter_probs(vlm, first_probs[v], letters_v)
        out[v] = float(int(np.argmax(pv)) == len(letters_v) - 1)
    out["option_mass"] = mass
    out["top_token"] = vlm.tokenizer.decode([int(np.argmax(probs))])
    return out


# --------------------------------------------------------------------------- shared-prefix engine


@dataclass
class PromptScores:
    """First-token distributions and greedy continuations of a set of prompts on one image.

    Attributes
    ----------
    probs : numpy.ndarray, shape (n_prompts, vocab), dtype float64
        Softmax of the first generated token's logits, computed in float32 whatever
        the model's dtype, one row per prompt.
    continuations : list of str or None
        Greedy continuation (``max_new_tokens`` tokens or up to EOS, special tokens
        skipped) of each prompt that asked for one, else None.
    stops : list of float
        How each continuation ended (:func:`continuation_stop`: 0.0 end-of-sequence,
        1.0 token limit); NaN for prompts without one.
    n_prefix_tokens : int
        Tokens of the shared prefix (chat head and image tokens), prefilled once.
    n_tail_tokens : list of int
        Tokens of each prompt after the prefix.
    lm_tokens : int
        Token positions run through the language model (prefix + padded tail batch +
        decode steps).
    vision_tokens : int
        Patch tokens run through the vision encoder (one pass per image).
    vision_passes : int
        Vision-encoder passes (1 with the shared prefix).
    shared : bool
        False when the prefix could not be reused and each prompt was run whole.
    """

    probs: np.ndarray
    continuations: list
    n_prefix_tokens: int
    n_tail_tokens: list
    lm_tokens: int
    vision_tokens: int
    vision_passes: int
    shared: bool
    stops: list = field(default_factory=list)


def _is_mrope(vlm: VLM) -> bool:
    """Qwen-VL models: multimodal rotary positions (3 x batch x seq), text positions offset by rope_deltas."""
    return hasattr(getattr(vlm.model, "model", None), "get_rope_index")


def _eos_ids(vlm: VLM) -> set[int]:
    """Tokens that end a continuation (:attr:`VLM.eos_token_ids`)."""
    return set(vlm.eos_token_ids)


def _sliding_window(vlm: VLM) -> int | None:
    tc = vlm.model.config.get_text_config()
    types = getattr(tc, "layer_types", None) or []
    if any("sliding" in str(t) for t in types) and getattr(tc, "sliding_window", None):
        return int(tc.sliding_window)
    return None


_MM_KEYS_PER_ROW = ("pixel_values", "pixel_attention_mask", "image_position_ids", "image_sizes")


def _image_inputs(vlm: VLM, texts: list[str], pil) -> tuple[dict[str, Any], list[list[int]]]:
    """Processor inputs of the first prompt (with its image) and the token ids of every prompt.

    The image is preprocessed once. The other prompts are tokenised without
    the image expansion; their ids after the (identical) image span are spliced
    onto the expanded head. Checked on the first prompt: the processor's ids must
    end with the text-only tokenisation's ids after the common head, else every
    prompt goes through the processor with its own copy of the image.
    """
    enc = _encode(vlm, texts[:1], pil)
    full0 = enc["input_ids"][0].tolist()
    tok = vlm.tokenizer
    plain = [tok(t)["input_ids"] for t in texts]
    k = _common_prefix_len(plain)
    k = min(k, min(len(p) for p in plain) - 1)
    tail0 = plain[0][k:]
    head = full0[: len(full0) - len(tail0)]
    if len(tail0) and full0[len(head):] == tail0 and len(head) >= 0:
        ids = [head + p[k:] for p in plain]
    else:  # tokenisation across the image span differs: encode every prompt with the image
        encs = [_encode(vlm, [t], pil) for t in texts]
        ids = [e["input_ids"][0].tolist() for e in encs]
    return enc, ids


def _common_prefix_len(seqs: Sequence[Sequence[int]]) -> int:
    n = min(len(s) for s in seqs)
    for i in range(n):
        v = seqs[0][i]
        if any(s[i] != v for s in seqs[1:]):
            return i
    return n


def _prefix_forward(vlm: VLM, enc: Any, prefix_ids: list[int]):
    """Prefill the shared prefix (image included) once. Returns (cache, next position, vision tokens)."""
    import torch

    k = len(prefix_ids)
    ids = torch.tensor([prefix_ids], dtype=torch.long, device=vlm.device)
    mask = torch.ones_like(ids)
    kwargs: dict[str, Any] = {k_: v for k_, v in enc.items() if k_ in _MM_KEYS_PER_ROW or k_ == "image_grid_thw"}
    if "mm_token_type_ids" in enc:
        mm = enc["mm_token_type_ids"][:, :k]
        if mm.shape[1] < k:  # a prompt longer than the encoded first one: its extra tokens are text (0)
            mm = torch.cat([mm, mm.new_zeros((mm.shape[0], k - mm.shape[1]))], dim=1)
        kwargs["mm_token_type_ids"] = mm
    if _is_mrope(vlm):
        pos, _ = vlm.model.model.get_rope_index(
            ids, image_grid_thw=enc.get("image_grid_thw"), video_grid_thw=None,
            attention_mask=mask, mm_token_type_ids=kwargs.get("mm_token_type_ids"),
        )
        kwargs["position_ids"] = pos
        next_pos = int(pos.max()) + 1
    else:
        next_pos = k
    with torch.inference_mode():
        out = vlm.model(input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=1, **kwargs)
    cache = getattr(out, "cache", None)
    if cache is None:
        cache = out.past_key_values
    return cache, next_pos, _vision_tokens(enc)


def _vision_tokens(enc: Any) -> int:
    """Patch tokens the vision encoder sees for the encoded image(s)."""
    pv = enc.get("pixel_values")
    if pv is None:
        return 0
    if "image_grid_thw" in enc:  # Qwen: flattened patches
        return int(enc["image_grid_thw"].prod(-1).sum())
    if "image_position_ids" in enc:  # Gemma 4: padded patch list
        return int((enc["image_position_ids"] != -1).all(-1).sum())
    return int(pv.shape[-1] * pv.shape[-2] * np.prod(pv.shape[:-3]))  # pixels (per-patch count unknown)


def _positions(vlm: VLM, pos: Any) -> Any:
    """(batch, seq) positions -> the model's layout (3 x batch x seq for M-RoPE text tokens)."""
    return pos[None].expand(3, -1, -1) if _is_mrope(vlm) else pos


def _run_tails(vlm: VLM, cache: Any, next_pos: int, n_prefix: int, tails: list[list[int]],
               gen_rows: list[int], max_new: int) -> tuple[Any, dict[int, list[int]], int]:
    """Score right-padded tails on copies of the prefix cache; greedy-decode the rows in ``gen_rows``.

    Each tail b holds ``len_b`` real tokens at positions ``next_pos + 0 .. len_b - 1``;
    pads after them are masked out (2-D attention mask over prefix + tails) and
    never attended to by real tokens (causal). Decoding appends token s of row b
    at cache slot ``n_prefix + T + s`` with position ``next_pos + len_b + s``; the
    pad slots in between stay masked.
    """
    import copy

    import torch

    B = len(tails)
    T = max(len(t) for t in tails)
    pad = vlm.tokenizer.pad_token_id if vlm.tokenizer.pad_token_id is not None else 0
    ids = torch.full((B, T), int(pad), dtype=torch.long, device=vlm.device)
    tmask = torch.zeros((B, T), dtype=torch.long, device=vlm.device)
    lens = torch.tensor([len(t) for t in tails], device=vlm.device)
    for b, t in enumerate(tails):
        ids[b, : len(t)] = torch.tensor(t, dtype=torch.long)
        tmask[b, : len(t)] = 1
    attn = torch.cat([torch.ones((B, n_prefix), dtype=torch.long, device=vlm.device), tmask], dim=1)
    pos = next_pos + torch.arange(T, device=vlm.device)[None].expand(B, -1)
    c = copy.deepcopy(cache)
    c.batch_repeat_interleave(B)
    with torch.inference_mode():
        out = vlm.model(input_ids=ids, attention_mask=attn, position_ids=_positions(vlm, pos), cache=c,
                        use_cache=True, logits_to_keep=(lens - 1)[:, None])
    first = out.logits[:, 0].float()
    lm_tokens = B * T
    generated: dict[int, list[int]] = {}
    if gen_rows and max_new > 0:
        sel = torch.tensor(gen_rows, device=vlm.device)
        c.batch_select_indices(sel)
        attn_g = attn[sel]
        cur = next_pos + lens[sel]
        tok = torch.argmax(first[sel], dim=-1)
        eos = _eos_ids(vlm)
        seqs = [[int(t)] for t in tok]
        done = [int(t) in eos for t in tok]
        for _ in range(max_new - 1):
            if all(done):
                break
            attn_g = torch.cat([attn_g, torch.ones((len(gen_rows), 1), dtype=attn_g.dtype, device=vlm.device)], 1)
            with torch.inference_mode():
                o = vlm.model(input_ids=tok[:, None], attention_mask=attn_g,
                              position_ids=_positions(vlm, cur[:, None]), cache=c, use_cache=True)
            lm_tokens += len(gen_rows)
            tok = torch.argmax(o.logits[:, -1].float(), dim=-1)
            cur = cur + 1
            for j, t in enumerate(tok.tolist()):
                if not done[j]:
                    seqs[j].append(int(t))
                    done[j] = int(t) in eos
        generated = {r: seqs[j] for j, r in enumerate(gen_rows)}
    return first, generated, lm_tokens


def _run_tails_halving(vlm: VLM, cache: Any, next_pos: int, n_prefix: int, tails: list[list[int]],
                       gen_rows: list[int], max_new: int) -> tuple[Any, dict[int, list[int]], int]:
    """:func:`_run_tails`, halving the batch on an out-of-memory error and going on.

    Each tail is scored independently of its batch mates (up to float rounding,
    tested to 1e-4), so the halves give the same read-outs. The halving is
    logged; a single tail that does not fit re-raises the error.
    """
    import torch

    oom = (torch.OutOfMemoryError,) if hasattr(torch, "OutOfMemoryError") else (torch.cuda.OutOfMemoryError,)
    try:
        return _run_tails(vlm, cache, next_pos, n_prefix, tails, gen_rows, max_new)
    except oom:
        if len(tails) == 1:
            raise
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        h = len(tails) // 2
        logging.getLogger("murk").warning("out of memory with a batch of %d prompt tails: halving it to %d + %d",
                                          len(tails), h, len(tails) - h)
        f1, g1, n1 = _run_tails_halving(vlm, cache, next_pos, n_prefix, tails[:h], [r for r in gen_rows if r < h],
                                        max_new)
        f2, g2, n2 = _run_tails_halving(vlm, cache, next_pos, n_prefix, tails[h:],
                                        [r - h for r in gen_rows if r >= h], max_new)
        return torch.cat([f1, f2], 0), {**g1, **{r + h: v for r, v in g2.items()}}, n1 + n2


def score_prompts(
    vlm: VLM,
    image: np.ndarray,
    user_texts: Sequence[str],
    generate: Sequence[bool] | None = None,
    config: Mapping[str, Any] | None = None,
    shared_prefix: bool = True,
    groups: Sequence[Sequence[int]] | None = None,
) -> PromptScores:
    """First-token probabilities (and greedy continuations) of several prompts on one image.

    With ``shared_prefix`` the image is encoded once and the shared prefix (chat
    head, image tokens and any text common to the prompts of the first group) is
    prefilled once; the tails of each group of prompts are then scored as one
    right-padded batch on copies of the cached prefix
    (``cache.batch_repeat_interleave``), with explicit position ids (M-RoPE text
    positions for Qwen-VL: ``max(prefix positions) + 1 + offset``, as
    ``get_rope_index`` assigns them) and a 2-D attention mask; the rows of the
    group that ask for a continuation are then greedy-decoded together from the
    same cache. The result equals scoring each full prompt on its own up to
    floating-point rounding (tests: ``|dp| <= 1e-6`` in float32).

    Parameters
    ----------
    vlm : VLM
    image : numpy.ndarray, shape (H, W, 3), dtype uint8
        Presented at most ``vlm.max_side_px`` per side (:func:`present_image`).
    user_texts : sequence of str
        User turns (from :func:`murk.prompts.render_prompt`); each becomes
        :func:`build_prompt_text` with the assistant prefill ``readout.assistant_prefill``.
    generate : sequence of bool, optional
        Which prompts also get a greedy continuation of ``readout.verbal_max_new_tokens``
        tokens (default none).
    config : dict, optional
        Study configuration.
    shared_prefix : bool
        False: every prompt runs whole (image encoded per prompt), as evaluation
        harnesses do; used as the reference and as the fallback.
    groups : sequence of sequences of int, optional
        A partition of the prompt indices into batches, scored one after another on
        the one prefix; default one batch of all prompts. The prefix is fixed by the
        first group alone, so the first group's results do not depend on which other
        groups are asked (in bfloat16 a batch's numbers depend on its composition):
        :func:`read_item` puts the verbal wordings v2/v3 into a group of their own.
        A later group whose prompts do not all extend that prefix is run with its own.

    Returns
    -------
    PromptScores

    Raises
    ------
    ValueError
        If ``generate`` or ``groups`` do not match ``user_texts``.

    Notes
    -----
    Fallback to whole prompts (``shared=False``) when the prefix holds no image
    token span shared by all prompts of a group, or when prefix + tail + continuation
    would exceed a sliding-attention window (Gemma: 512 tokens), where cache slots
    and positions diverge after the holes left by padding.
    """
    cfg = load_config() if config is None else config
    rcfg = cfg.get("readout", {})
    prefill = rcfg.get("assistant_prefill", "Answer:")
    max_new = int(rcfg.get("verbal_max_new_tokens", 12))
    n = len(user_texts)
    gen = [bool(g) for g in (generate if generate is not None else [False] * n)]
    if len(gen) != n:
        raise ValueError("generate must have one entry per prompt")
    groups = [list(range(n))] if groups is None else [[int(j) for j in g] for g in groups if len(g)]
    if sorted(j for g in groups for j in g) != list(range(n)):
        raise ValueError(f"groups must partition the {n} prompt indices, got {groups}")
    pil = present_image(image, vlm.max_side_px)
    texts = [build_prompt_text(vlm, u, prefill) for u in user_texts]
    enc, ids = _image_inputs(vlm, texts, pil)
    img_id = _image_token_id(vlm)
    window = _sliding_window(vlm)

    rows: list[Any] = [None] * n
    continuations: list = [None] * n
    stops: list = [math.nan] * n
    n_tail = [0] * n
    lm = vis = passes = 0
    shared_all = True
    prefix = None  # (prefix ids, cache, next position) of the first shared group
    n_prefix = 0
    for gi, g in enumerate(groups):
        gids = [ids[j] for j in g]
        if prefix is not None and all(len(i) > len(prefix[0]) and i[: len(prefix[0])] == prefix[0] for i in gids):
            k = len(prefix[0])
        else:
            k = min(_common_prefix_len(gids), min(len(i) for i in gids) - 1)
        too_long = window is not None and max(len(i) for i in gids) + max_new >= window
        image_in_prefix = img_id in gids[0][:k] and all(img_id not in i[k:] for i in gids)
        gen_rows = [b for b, j in enumerate(g) if gen[j]]
        if shared_prefix and image_in_prefix and not too_long:
            if prefix is None or k != len(prefix[0]) or gids[0][:k] != prefix[0]:
                cache, next_pos, v = _prefix_forward(vlm, enc, gids[0][:k])
                lm += k
                vis += v
                passes += 1
                if prefix is None:
                    prefix = (gids[0][:k], cache, next_pos)
                    n_prefix = k
            else:
                _, cache, next_pos = prefix
            tails = [i[k:] for i in gids]
            first, generated, n_lm = _run_tails_halving(vlm, cache, next_pos, k, tails, gen_rows, max_new)
            lm += n_lm
            for b, j in enumerate(g):
                rows[j] = first[b]
                n_tail[j] = len(tails[b])
        else:  # whole prompts, one at a time
            shared_all = False
            generated = {}
            for b, (j, seq_ids) in enumerate(zip(g, gids)):
                kk = len(seq_ids) - 1
                cache, next_pos, v = _prefix_forward(vlm, enc, seq_ids[:kk])
                first, gen_b, n_lm = _run_tails(vlm, cache, next_pos, kk, [seq_ids[kk:]], [0] if gen[j] else [],
                                                max_new)
                rows[j] = first[0]
                if gen[j]:
                    generated[b] = gen_b[0]
                n_tail[j] = len(seq_ids)
                lm += kk + n_lm
                vis += v
                passes += 1
        for b, seq in generated.items():
            j = g[b]
            continuations[j] = vlm.tokenizer.decode(seq, skip_special_tokens=True)
            stops[j] = continuation_stop(seq, vlm.eos_token_ids, max_new)
    import torch

    probs = _softmax32(torch.stack(rows))
    return PromptScores(probs, continuations, n_prefix if shared_all else 0, n_tail, lm, vis, passes, shared_all,
                        stops)


def read_item(
    vlm: VLM,
    image: np.ndarray,
    questions: Sequence[Question],
    config: Mapping[str, Any] | None = None,
    verbal_variants: Sequence[str] = ("v1",),
    shared_prefix: bool = True,
) -> dict[str, dict[str, Any]]:
    """The read-outs (spec Sec. III) of every question of one item on one condition's image.

    All prompts of the image (:func:`item_prompts`: each question in the three
    variants ``main``, ``abstain``, ``abstain2``, plus the ``main`` prompt in each
    further verbal wording of spec Table VI) are scored by :func:`score_prompts`
    from one shared prefix: one vision pass, one prefill of the prefix, one batch
    of the nine main tails with one batch of greedy continuations (12 tokens) for
    the ``main`` prompts, then the further wordings as a batch of their own
    (:func:`verbal_groups`), so that an item's main read-outs do not depend on
    whether v2/v3 were asked (also in bfloat16, where a batch's numbers depend on
    its composition).

    Parameters
    ----------
    vlm : VLM
    image : numpy.ndarray, shape (H, W, 3), dtype uint8
        The condition's image (degraded and boxed).
    questions : sequence of Question
        Usually t2, t3_true and t3_false of the item.
    config : dict, optional
    verbal_variants : sequence of {"v1", "v2", "v3"}
        Verbal wordings to ask; must contain ``"v1"`` (the main run's, which also
        gives the answer and c_int). Each other wording adds one ``main`` prompt per
        question and the read-outs ``verbal_conf_<v>``, ``verbal_stop_<v>`` and
        ``verbal_text_<v>``.
    shared_prefix : bool
        False: each full prompt on its own (reference).

    Returns
    -------
    dict of str -> dict
        ``{question.task: readouts}`` with every key of :data:`READOUTS` and
        :data:`TEXT_READOUTS` (float64 numbers, NaN when not asked / unparsed):
        ``answer``, ``correct``, ``c_int`` (max_k p_k / sum_k p_k), ``verbal_conf``,
        ``verbal_stop`` (0 end-of-sequence, 1 token limit), ``abstain``, ``abstain2``,
        ``option_mass`` (sum_k p_k), ``verbal_conf_v2``, ``verbal_conf_v3``,
        ``verbal_stop_v2``, ``verbal_stop_v3``, ``verbal_text``, ``top_token``,
        ``verbal_text_v2``, ``verbal_text_v3``.

    Raises
    ------
    ValueError
        If ``verbal_variants`` lacks ``"v1"`` or names an unknown wording.
    """
    cfg = load_config() if config is None else config
    slots = item_prompts(questions, cfg, verbal_variants)
    scores = score_prompts(vlm, image, [s.user for s in slots], [s.generate for s in slots], cfg, shared_prefix,
                           groups=verbal_groups(slots))
    p = [_letter_probs(vlm, scores.probs[j], s.letters) for j, s in enumerate(slots)]
    tops = [vlm.tokenizer.decode([int(np.argmax(scores.probs[j]))]) for j in range(len(slots))]
    return item_readouts(questions, slots, p, tops, scores.continuations, scores.stops)


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
        The rendered user turn (:func:`murk.prompts.render_prompt`).
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

    Raises
    ------
    ValueError
        If ``verbal_variants`` lacks ``"v1"`` or names an unknown wording.
    """
    cfg = load_config() if config is None else config
    variants = list(dict.fromkeys(verbal_variants))
    if "v1" not in variants:
        raise ValueError("verbal_variants must contain 'v1' (the main prompt)")
    unknown = [v for v in variants if v not in _VERBAL_EXTRA and v != "v1"]
    if unknown:
        raise ValueError(f"unknown verbal wordings {unknown}; choose from v1, {', '.join(_VERBAL_EXTRA)}")
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

    Scored as separate batches on one prefix (:func:`score_prompts` ``groups``), so an
    item's main read-outs never depend on whether v2/v3 were asked.
    """
    main = [j for j, s in enumerate(slots) if s.wording == "v1"]
    extra = [j for j, s in enumerate(slots) if s.wording != "v1"]
    return [main] + ([extra] if extra else [])


def item_readouts(questions: Sequence[Question], slots: Sequence[PromptSlot], letter_probs: Sequence[np.ndarray],
                  top_tokens: Sequence[str], continuations: Sequence[str | None],
                  stops: Sequence[float] | None = None) -> dict[str, dict[str, Any]]:
    """The read-outs of one item on one condition from its prompts' scores (see :func:`read_item`).

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
        Per slot, how the continuation ended (:func:`continuation_stop`: 0.0
        end-of-sequence, 1.0 token limit; NaN where not generated). Required for the
        ``verbal_stop`` read-outs: without it they are NaN and every continuation is
        parsed as ended by the model (a cut number then reads as a low value).

    Returns
    -------
    dict of str -> dict
        ``{question.task: readouts}`` as :func:`read_item` returns.
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
            else:
                r[s.variant] = float(int(np.argmax(p)) == len(s.letters) - 1)
        out[q.task] = r
    return out


_VERBAL_EXTRA = ("v2", "v3")


# --------------------------------------------------------------------------- option-mass guard


def check_option_mass(values: Any, model_id: str, threshold: float = OPTION_MASS_MIN,
                      top_tokens: Any = None) -> dict[str, float]:
    """Warn when the first token is mostly not an option letter (the option-mass guard).

    Call it from the read-out stage once a model's clean images are read out. The
    median first-token probability mass on the option letters (``option_mass``) on
    clean images is computed per task (:func:`murk.analysis.median_option_mass`);
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
    import xarray as xr

    from murk import analysis

    ds = values
    if isinstance(ds, xr.Dataset) and "model" in ds.dims:
        ds = ds.sel(model=model_id)
    medians = analysis.median_option_mass(ds)
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
