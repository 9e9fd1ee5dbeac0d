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

import logging
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
    "PromptScores",
    "score_prompts",
    "read_item",
]

#: numeric read-outs of one question (float64; NaN = missing)
READOUTS = ("answer", "correct", "c_int", "verbal_conf", "abstain", "abstain2", "option_mass",
            "verbal_conf_v2", "verbal_conf_v3", "visibility_hat_m", "visibility_hat_censored")
#: text read-outs of one question (diagnostics); ``verbal_text_v2/v3`` are empty when not asked
TEXT_READOUTS = ("verbal_text", "top_token", "verbal_text_v2", "verbal_text_v3")

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
    for v in _VERBAL_EXTRA:  # the wording variants are asked by read_item only
        out[f"verbal_conf_{v}"] = math.nan
        out[f"verbal_text_{v}"] = ""
    for key in READOUTS:  # read-outs of other sources (e.g. the visibility monitor's V_hat) are missing
        out.setdefault(key, math.nan)
    return out


# --------------------------------------------------------------------------- shared-prefix engine


@dataclass
class PromptScores:
    """First-token distributions and greedy continuations of a set of prompts on one image.

    Attributes
    ----------
    probs : numpy.ndarray, shape (n_prompts, vocab), dtype float64
        Softmax of the first generated token's logits (computed in float32, the
        model's dtype on CPU), one row per prompt.
    continuations : list of str or None
        Greedy continuation (``max_new_tokens`` tokens or up to EOS, special tokens
        skipped) of each prompt that asked for one, else None.
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


def _is_mrope(vlm: VLM) -> bool:
    """Qwen-VL models: multimodal rotary positions (3 x batch x seq), text positions offset by rope_deltas."""
    return hasattr(getattr(vlm.model, "model", None), "get_rope_index")


def _eos_ids(vlm: VLM) -> set[int]:
    ids: set[int] = set()
    for obj in (getattr(vlm.model, "generation_config", None), vlm.model.config, vlm.tokenizer):
        e = getattr(obj, "eos_token_id", None)
        if e is None:
            continue
        ids.update(int(i) for i in (e if isinstance(e, (list, tuple)) else [e]))
    return ids


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
        kwargs["mm_token_type_ids"] = enc["mm_token_type_ids"][:, :k]
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
) -> PromptScores:
    """First-token probabilities (and greedy continuations) of several prompts on one image.

    With ``shared_prefix`` the image is encoded once and the shared prefix (chat
    head, image tokens and any text common to all prompts) is prefilled once; every
    prompt's tail is then scored in one right-padded batch on copies of the cached
    prefix (``cache.batch_repeat_interleave``), with explicit position ids
    (M-RoPE text positions for Qwen-VL: ``max(prefix positions) + 1 + offset``, as
    ``get_rope_index`` assigns them) and a 2-D attention mask; the rows that ask
    for a continuation are then greedy-decoded together from the same cache. The
    result equals scoring each full prompt on its own up to floating-point
    rounding (tests: ``|dp| <= 1e-4`` in float32) and does not depend on which
    other prompts share the batch.

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

    Returns
    -------
    PromptScores

    Notes
    -----
    Fallback to whole prompts (``shared=False``) when the prefix holds no image
    token span shared by all prompts, or when prefix + tail + continuation would
    exceed a sliding-attention window (Gemma: 512 tokens), where cache slots and
    positions diverge after the holes left by padding.
    """
    import torch

    cfg = load_config() if config is None else config
    rcfg = cfg.get("readout", {})
    prefill = rcfg.get("assistant_prefill", "Answer:")
    max_new = int(rcfg.get("verbal_max_new_tokens", 12))
    gen = [bool(g) for g in (generate if generate is not None else [False] * len(user_texts))]
    if len(gen) != len(user_texts):
        raise ValueError("generate must have one entry per prompt")
    pil = present_image(image, vlm.max_side_px)
    texts = [build_prompt_text(vlm, u, prefill) for u in user_texts]
    enc, ids = _image_inputs(vlm, texts, pil)
    k = min(_common_prefix_len(ids), min(len(i) for i in ids) - 1)
    img_id = _image_token_id(vlm)
    window = _sliding_window(vlm)
    too_long = window is not None and max(len(i) for i in ids) + max_new >= window
    image_in_prefix = img_id in ids[0][:k] and all(img_id not in i[k:] for i in ids)
    vocab_probs = []
    continuations: list = [None] * len(texts)
    if shared_prefix and image_in_prefix and not too_long:
        cache, next_pos, vis = _prefix_forward(vlm, enc, ids[0][:k])
        tails = [i[k:] for i in ids]
        first, generated, lm = _run_tails_halving(vlm, cache, next_pos, k, tails, [j for j, g in enumerate(gen) if g],
                                                  max_new)
        probs = torch.softmax(first, dim=-1).double().cpu().numpy()
        for j, seq in generated.items():
            continuations[j] = vlm.tokenizer.decode(seq, skip_special_tokens=True)
        return PromptScores(probs, continuations, k, [len(t) for t in tails], k + lm, vis, 1, True)
    # whole prompts, one at a time
    lm = vis = 0
    for j, seq_ids in enumerate(ids):
        kk = len(seq_ids) - 1
        cache, next_pos, v = _prefix_forward(vlm, enc, seq_ids[:kk])
        first, generated, n = _run_tails(vlm, cache, next_pos, kk, [seq_ids[kk:]], [0] if gen[j] else [], max_new)
        vocab_probs.append(torch.softmax(first[0], dim=-1).double().cpu().numpy())
        if gen[j]:
            continuations[j] = vlm.tokenizer.decode(generated[0], skip_special_tokens=True)
        lm += kk + n
        vis += v
    return PromptScores(np.stack(vocab_probs), continuations, 0, [len(i) for i in ids], lm, vis, len(ids), False)


def _readouts_from_probs(vlm: VLM, probs: np.ndarray, letters: Sequence[str]) -> tuple[np.ndarray, str]:
    p = np.array([float(probs[list(vlm.option_tokens[L])].sum()) for L in letters], dtype=np.float64)
    return p, vlm.tokenizer.decode([int(np.argmax(probs))])


def read_item(
    vlm: VLM,
    image: np.ndarray,
    questions: Sequence[Question],
    config: Mapping[str, Any] | None = None,
    verbal_variants: Sequence[str] = ("v1",),
    shared_prefix: bool = True,
) -> dict[str, dict[str, Any]]:
    """The read-outs (spec Sec. III) of every question of one item on one condition's image.

    All prompts of the image (each question in the three variants ``main``,
    ``abstain``, ``abstain2``, plus the ``main`` prompt in each further verbal
    wording of spec Table VI) are scored by :func:`score_prompts` from one
    shared prefix: one vision pass, one prefill of the prefix, one batch of tails
    and one batch of greedy continuations (12 tokens) for the ``main`` prompts.

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
        question and the read-outs ``verbal_conf_<v>`` and ``verbal_text_<v>``.
    shared_prefix : bool
        False: each full prompt on its own (reference).

    Returns
    -------
    dict of str -> dict
        ``{question.task: readouts}`` with every key of :data:`READOUTS` and
        :data:`TEXT_READOUTS` (float64 numbers, NaN when not asked / unparsed):
        ``answer``, ``correct``, ``c_int`` (max_k p_k / sum_k p_k), ``verbal_conf``,
        ``abstain``, ``abstain2``, ``option_mass`` (sum_k p_k),
        ``verbal_conf_v2``, ``verbal_conf_v3``, ``verbal_text``, ``top_token``,
        ``verbal_text_v2``, ``verbal_text_v3``.

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
    slots: list[tuple[int, str, str]] = []  # (question index, prompt variant, verbal wording)
    users: list[str] = []
    letters: list[tuple[str, ...]] = []
    for qi, q in enumerate(questions):
        for variant in ("main", "abstain", "abstain2"):
            text, lt = render_prompt(q, variant, cfg)
            slots.append((qi, variant, "v1"))
            users.append(text)
            letters.append(lt)
        for v in variants:
            if v != "v1":
                text, lt = render_prompt(q, "main", cfg, verbal=v)
                slots.append((qi, "main", v))
                users.append(text)
                letters.append(lt)
    scores = score_prompts(vlm, image, users, [s[1] == "main" for s in slots], cfg, shared_prefix)
    out: dict[str, dict[str, Any]] = {}
    for qi, q in enumerate(questions):
        r: dict[str, Any] = {k: math.nan for k in READOUTS}
        r.update({k: "" for k in TEXT_READOUTS})
        for j, (qj, variant, v) in enumerate(slots):
            if qj != qi:
                continue
            p, top = _readouts_from_probs(vlm, scores.probs[j], letters[j])
            if variant == "main" and v == "v1":
                mass = float(p.sum())
                k = int(np.argmax(p))
                r["answer"] = float(k)
                r["correct"] = float(k == q.correct_index)
                r["c_int"] = float(p[k] / mass) if mass > 0 else math.nan
                r["option_mass"] = mass
                r["top_token"] = top
                r["verbal_text"] = scores.continuations[j] or ""
                r["verbal_conf"] = parse_verbal_confidence(r["verbal_text"])
            elif variant == "main":
                r[f"verbal_text_{v}"] = scores.continuations[j] or ""
                r[f"verbal_conf_{v}"] = parse_verbal_confidence(r[f"verbal_text_{v}"])
            else:
                r[variant] = float(int(np.argmax(p)) == len(letters[j]) - 1)
        out[q.task] = r
    return out


_VERBAL_EXTRA = ("v2", "v3")
