"""VLM loading and the four read-outs of spec Sec. III.

Per question and condition (spec Sec. III, "Four read-outs"):

1. **Answer**: the option with the largest first-token probability after the
   assistant turn is prefilled with ``readout.assistant_prefill`` ("Answer:").
2. **Internal confidence** ``c_int = max_k p_k / sum_k p_k``, with ``p_k`` the
   first-token probability of option letter k (summed over the letter's token
   variants, e.g. ``"A"`` and ``" A"``).
3. **Verbalized confidence**: the integer after "Confidence:" in the greedy
   12-token continuation, divided by 100; NaN when not parsed.
4. **Abstain** (two wordings): a second and third prompt add one more option;
   abstention is the event that its letter has the largest first-token
   probability.

Answers are never parsed from generated text (no yes/no substring matching):
they are the option letters' first-token probabilities.

Images are presented at most 448 x 448 pixels (aspect kept, PIL LANCZOS) as a
single tile: SmolVLM with ``do_image_splitting=False``, Qwen-VL with a pixel
budget of at most 448^2 pixels.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from murk import paths
from murk.checkpoints import TINY_MODELS, ensure_tiny_checkpoint, is_tiny_checkpoint
from murk.config import load_config
from murk.prompts import Question, render_prompt

__all__ = [
    "READOUTS",
    "TEXT_READOUTS",
    "VLM",
    "load_vlm",
    "present_image",
    "option_token_ids",
    "parse_verbal_confidence",
    "build_prompt_text",
    "read_question",
]

#: numeric read-outs of one question (float64; NaN = missing)
READOUTS = ("answer", "correct", "c_int", "verbal_conf", "abstain", "abstain2", "option_mass")
#: text read-outs of one question (diagnostics)
TEXT_READOUTS = ("verbal_text", "top_token")

_DEFAULT_MAX_SIDE = 448
_CONFIDENCE_RE = re.compile(r"confidence\s*:\s*(\d+)", re.IGNORECASE)


@dataclass
class VLM:
    """A loaded vision-language model with everything the read-outs need.

    Attributes
    ----------
    model : transformers.PreTrainedModel
        In eval mode, on ``device``.
    processor : transformers.ProcessorMixin
    tokenizer : transformers.PreTrainedTokenizerBase
    model_id : str
        What was asked for: hub id, local folder or ``murk-tiny/...`` id.
    revision : str
        Commit hash of the hub snapshot (``config._commit_hash``), else ``"local"``.
    is_pipeline_check : bool
        True for a murk tiny checkpoint (random weights: results are meaningless).
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
    """Processor call arguments that give one tile of at most ``max_side_px``^2 pixels."""
    ip = getattr(processor, "image_processor", None)
    kwargs: dict[str, Any] = {}
    if ip is None:
        return kwargs
    if hasattr(ip, "do_image_splitting"):  # Idefics3 / SmolVLM
        kwargs["do_image_splitting"] = False
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


def parse_verbal_confidence(text: str) -> float:
    """The verbalized confidence: the integer after "Confidence:" divided by 100.

    Parameters
    ----------
    text : str
        The generated continuation.

    Returns
    -------
    float
        In [0, 1]; NaN when no "Confidence: <integer>" (case-insensitive) is
        found or the integer exceeds 100 (spec Sec. III: unparsed outputs are kept
        as missing). A decimal such as "85.5" gives its integer part.

    >>> parse_verbal_confidence("B\\nConfidence: 85")
    0.85
    """
    m = _CONFIDENCE_RE.search(text or "")
    if m is None:
        return math.nan
    value = int(m.group(1))
    if not 0 <= value <= 100:
        return math.nan
    return value / 100.0


# --------------------------------------------------------------------------- loading


def _resolve_source(model: str, root: str | os.PathLike | None) -> tuple[str, bool, bool]:
    """Folder or hub id to load from, whether it is local, whether it is a tiny checkpoint."""
    if model in TINY_MODELS:
        return str(ensure_tiny_checkpoint(model, root)), True, True
    p = Path(model).expanduser()
    if p.is_dir():
        return str(p.resolve()), True, is_tiny_checkpoint(p)
    return model, False, False


def _not_found(model: str, err: Exception) -> OSError:
    hint = (
        "MURK_OFFLINE=1 is set, so only files already on this machine are used: pass a local "
        "checkpoint folder, a tiny pipeline-check model "
        f"({', '.join(sorted(TINY_MODELS))}), or put the model into the Hugging Face cache "
        "and retry; unset MURK_OFFLINE to allow downloads"
        if paths.offline()
        else "pass a local checkpoint folder or a tiny pipeline-check model "
        f"({', '.join(sorted(TINY_MODELS))}), or check the Hugging Face id and network access"
    )
    return OSError(f"cannot load model {model!r}: {type(err).__name__}: {err}\nFix: {hint}")


def load_vlm(
    model: str,
    device: str | None = None,
    dtype: Any = None,
    root: str | os.PathLike | None = None,
    config: Mapping[str, Any] | None = None,
) -> VLM:
    """Load a VLM (processor + model) for the read-outs.

    Parameters
    ----------
    model : str
        A Hugging Face id (e.g. ``"Qwen/Qwen3-VL-2B-Instruct"``), a local
        checkpoint folder, or a tiny pipeline-check id of
        :data:`murk.checkpoints.TINY_MODELS` (built on first use with
        :func:`murk.checkpoints.ensure_tiny_checkpoint` and then loaded from its
        folder by the same code path).
    device : str, optional
        Default ``"cuda"`` when available, else ``"cpu"``.
    dtype : torch.dtype or str, optional
        Default ``readout.dtype_gpu`` (bfloat16) on CUDA and ``readout.dtype_cpu``
        (float32) otherwise (spec Table III).
    root : path, optional
        Output root holding ``checkpoints/`` (:func:`murk.paths.checkpoints_dir`).
    config : dict, optional
        Study configuration; default the project's.

    Returns
    -------
    VLM

    Raises
    ------
    OSError
        If the model cannot be found or loaded; the message names the id and
        the fix. With ``MURK_OFFLINE=1`` nothing is downloaded
        (``local_files_only=True``, ``HF_HUB_OFFLINE=1``), so a missing id
        fails at once.
    """
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    cfg = load_config() if config is None else config
    rcfg = cfg.get("readout", {})
    max_side = int(cfg.get("render", {}).get("max_side_px", _DEFAULT_MAX_SIDE))
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype is None:
        name = rcfg.get("dtype_gpu", "bfloat16") if str(device).startswith("cuda") else rcfg.get("dtype_cpu", "float32")
        dtype = getattr(torch, name)
    elif isinstance(dtype, str):
        dtype = getattr(torch, dtype)

    kwargs: dict[str, Any] = {}
    if paths.offline():
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        kwargs["local_files_only"] = True
    source, local, tiny = _resolve_source(model, root)
    if not local and (model.startswith((".", "/", "~")) or model.count("/") > 1):
        raise _not_found(model, FileNotFoundError(f"no folder {model}"))
    try:
        processor = AutoProcessor.from_pretrained(source, **kwargs)
        net = AutoModelForImageTextToText.from_pretrained(source, dtype=dtype, **kwargs)
    except (OSError, ValueError) as err:
        raise _not_found(model, err) from err
    net.to(device)
    net.eval()
    tokenizer = processor.tokenizer
    letters = tuple(rcfg.get("option_letters", ("A", "B", "C", "D", "E")))
    option_tokens = {L: tuple(v) for L, v in option_token_ids(tokenizer, letters).items()}
    revision = getattr(net.config, "_commit_hash", None) or "local"
    vlm = VLM(
        model=net,
        processor=processor,
        tokenizer=tokenizer,
        model_id=model,
        revision=str(revision),
        is_pipeline_check=bool(tiny),
        device=str(device),
        dtype=dtype,
        option_tokens=option_tokens,
        image_kwargs=_single_tile_kwargs(processor, max_side),
        max_side_px=max_side,
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

    The prefill is appended to the generation prompt; when the generation
    prompt does not end in whitespace (SmolVLM's ``"Assistant:"``) one space is
    inserted, as the model itself writes ``"Assistant: ..."``.
    """
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": user_text}]}]
    text = vlm.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    if prefill:
        text = text + ("" if text[-1:].isspace() else " ") + prefill
    return text


def _encode(vlm: VLM, texts: list[str], image, **text_kwargs) -> Any:
    images = [[image] for _ in texts]
    inputs = vlm.processor(text=texts, images=images, return_tensors="pt", **vlm.image_kwargs, **text_kwargs)
    # floating-point tensors (pixel values) take the model's dtype; ids stay integer
    return inputs.to(vlm.device, dtype=vlm.dtype)


def _letter_probs(vlm: VLM, probs, letters: Sequence[str]) -> np.ndarray:
    """p_k: first-token probability of each letter, summed over its variants."""
    return np.array([float(probs[list(vlm.option_tokens[L])].sum()) for L in letters], dtype=np.float64)


def _generate(vlm: VLM, inputs: Any, max_new: int) -> Any:
    import torch

    with torch.inference_mode():
        return vlm.model.generate(
            **inputs,
            max_new_tokens=max_new,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
            pad_token_id=vlm.tokenizer.pad_token_id,
        )


def read_question(
    vlm: VLM,
    image: np.ndarray,
    question: Question,
    config: Mapping[str, Any] | None = None,
    batched: bool = False,
) -> dict[str, Any]:
    """The four read-outs (spec Sec. III) of one question on one image.

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
        ``answer`` (float, index of the option with the largest first-token
        probability, main prompt), ``correct`` (1.0 / 0.0), ``c_int``
        (max_k p_k / sum_k p_k, in [1/K, 1]), ``verbal_conf`` (in [0, 1] or NaN),
        ``abstain`` and ``abstain2`` (1.0 if the extra option's letter is the most
        probable, else 0.0), ``option_mass`` (sum_k p_k over the main prompt's
        letters, in [0, 1]: how much first-token probability lands on the
        options), ``verbal_text`` (str, the greedy continuation) and
        ``top_token`` (str, the decoded most probable first token).

    Notes
    -----
    The main prompt is run with greedy ``generate`` (``verbal_max_new_tokens``
    new tokens, ``output_logits=True``); the softmax of its first-step raw
    logits gives the first-token probabilities; p_k sums them over the token
    variants of letter k (:attr:`VLM.option_tokens`).
    """
    import torch

    cfg = load_config() if config is None else config
    rcfg = cfg.get("readout", {})
    prefill = rcfg.get("assistant_prefill", "Answer:")
    max_new = int(rcfg.get("verbal_max_new_tokens", 12))
    pil = present_image(image, vlm.max_side_px)
    rendered = {v: render_prompt(question, v, cfg) for v in ("main", "abstain", "abstain2")}
    texts = {v: build_prompt_text(vlm, user, prefill) for v, (user, _) in rendered.items()}

    first_probs: dict[str, Any] = {}
    if batched:
        order = list(texts)
        inputs = _encode(vlm, [texts[v] for v in order], pil, padding=True, padding_side="left")
        gen = _generate(vlm, inputs, max_new)
        for b, v in enumerate(order):
            first_probs[v] = torch.softmax(gen.logits[0][b].float(), dim=-1).cpu()
        new_tokens = gen.sequences[0, inputs["input_ids"].shape[1]:]
    else:
        inputs = _encode(vlm, [texts["main"]], pil)
        gen = _generate(vlm, inputs, max_new)
        first_probs["main"] = torch.softmax(gen.logits[0][0].float(), dim=-1).cpu()
        new_tokens = gen.sequences[0, inputs["input_ids"].shape[1]:]
        for v in ("abstain", "abstain2"):
            inp = _encode(vlm, [texts[v]], pil)
            with torch.inference_mode():
                logits = vlm.model(**inp).logits[0, -1].float()
            first_probs[v] = torch.softmax(logits, dim=-1).cpu()

    out: dict[str, Any] = {}
    probs = first_probs["main"]
    p = _letter_probs(vlm, probs, rendered["main"][1])
    mass = float(p.sum())
    k = int(np.argmax(p))
    out["answer"] = float(k)
    out["correct"] = float(k == question.correct_index)
    out["c_int"] = float(p[k] / mass) if mass > 0 else math.nan
    verbal_text = vlm.tokenizer.decode(new_tokens, skip_special_tokens=True)
    out["verbal_conf"] = parse_verbal_confidence(verbal_text)
    for v in ("abstain", "abstain2"):
        letters_v = rendered[v][1]
        pv = _letter_probs(vlm, first_probs[v], letters_v)
        out[v] = float(int(np.argmax(pv)) == len(letters_v) - 1)
    out["option_mass"] = mass
    out["verbal_text"] = verbal_text
    out["top_token"] = vlm.tokenizer.decode([int(torch.argmax(probs))])
    return out
