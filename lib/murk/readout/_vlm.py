"""The model and its inputs: the loaded VLM (loading it, and refusing what cannot be read out, is
:mod:`murk.readout._load`), presenting an image,
the option letters' tokens, the chat-templated prompt, and the kernels both read-out engines build on.

Loading (:func:`murk.readout.load_vlm`) checks a checkpoint before anything heavy loads and refuses, in one line
that names the file and the fix, what cannot be read out (broken JSON, missing or damaged weights,
pickle weights, custom code, a model that is not image-text-to-text). Decoding is greedy whatever the
checkpoint's ``generation_config`` says (sampling, temperature, top-k/p, repetition penalty...):
:func:`vlm_from_parts` replaces it by a greedy one and keeps what it ignored in
:attr:`VLM.ignored_generation_settings`; below float32 the output head runs in float32
(:func:`float32_head`).

Images are presented at most 448 x 448 pixels (aspect kept, PIL LANCZOS, :func:`present_image`) as a
single tile (:func:`single_tile_kwargs`): SmolVLM with ``do_image_splitting=False``, Qwen-VL with a
pixel budget of at most 448^2 pixels.

Kernels (used by :mod:`murk.readout`, :mod:`murk.readout` and :mod:`benchmarks.baseline`): :func:`encode`
(processor inputs on the model's device and dtype), :func:`image_inputs` (one image preprocessing,
every prompt's token ids), :func:`common_prefix_len`, :func:`image_token_id`, :func:`is_mrope`,
:func:`sliding_window`, :func:`eos_ids`, :func:`softmax32` (the first-token softmax in float32),
:func:`letter_probs` (``p_k`` summed over a letter's token variants) and :func:`generate_greedy`.
What a unit asks and records is :mod:`murk.readout`; the verbal grammar :mod:`murk.readout`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from murk.readout import _architectures as architectures

__all__ = ["DEFAULT_MAX_SIDE_PX", "VLM", "present_image", "single_tile_kwargs", "option_token_ids",
           "build_prompt_text", "join_prefill", "count_visual_tokens", "encode", "softmax32", "letter_probs",
           "generate_greedy", "image_token_id", "is_mrope", "eos_ids", "sliding_window", "MM_KEYS_PER_ROW",
           "image_inputs", "common_prefix_len"]

#: longest side of a presented image in pixels (spec Sec. III; ``render.max_side_px`` overrides it)
DEFAULT_MAX_SIDE_PX = 448


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
        Commit hash of the hub snapshot (its cache folder's name, :func:`hub_revision`); for a local
        folder (and murk's offline checkpoints) ``"sha256:"`` and 16 hex digits of its content digest
        (:func:`murk.core.checkpoint_revision`: weights, configs, tokenizer, processor, chat template).
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
    max_side_px: int = DEFAULT_MAX_SIDE_PX
    eos_token_ids: tuple[int, ...] = ()
    ignored_generation_settings: dict[str, Any] = field(default_factory=dict)
    custom_code_not_run: dict[str, str] = field(default_factory=dict)


# --------------------------------------------------------------------------- images


def present_image(image: np.ndarray, max_side_px: int = DEFAULT_MAX_SIDE_PX):
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


def single_tile_kwargs(processor: Any, max_side_px: int) -> dict[str, Any]:
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
        from murk.offline import gemma4_max_soft_tokens

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


def image_token_id(vlm: VLM) -> int:
    """The id of the image placeholder token (model config, processor or tokenizer, in that order).

    Raises
    ------
    ValueError
        If none of them names one.
    """
    for obj in (vlm.model.config, vlm.processor, vlm.tokenizer):
        i = getattr(obj, "image_token_id", None)
        if i is not None:
            return int(i)
    raise ValueError(f"cannot find the image token id of {vlm.model_id}")


def count_visual_tokens(vlm: VLM) -> int:
    """Image placeholder tokens for a ``max_side_px`` x ``max_side_px`` grey image (the largest presented).

    Returns
    -------
    int
        The count in the processor's ``input_ids`` (:attr:`VLM.n_visual_tokens`).
    """
    grey = np.full((vlm.max_side_px, vlm.max_side_px, 3), 128, dtype=np.uint8)
    inputs = encode(vlm, [build_prompt_text(vlm, "")], present_image(grey, vlm.max_side_px))
    return int((inputs["input_ids"][0] == image_token_id(vlm)).sum())


# --------------------------------------------------------------------------- prompts


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
    return join_prefill(text, prefill, _special_strings(vlm.tokenizer))


def _special_strings(tokenizer: Any) -> tuple[str, ...]:
    """The text of every special / added token of a tokenizer."""
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    names = [getattr(t, "content", str(t)) for t in added.values()]
    names += list(getattr(tokenizer, "all_special_tokens", []) or [])
    return tuple(sorted({n for n in names if n}, key=len, reverse=True))


def join_prefill(text: str, prefill: str, special: Sequence[str] = ()) -> str:
    """``text`` + ``prefill``, with one space between them only after ordinary text.

    Parameters
    ----------
    text : str
        The chat-templated prompt up to the generation prompt.
    prefill : str
        The assistant prefill (``readout.assistant_prefill``, "Answer:"); empty: ``text``.
    special : sequence of str
        Special-token strings: after one of them no space is inserted.

    >>> join_prefill("Assistant:", "Answer:")
    'Assistant: Answer:'
    >>> join_prefill("<|im_start|>assistant\\n", "Answer:")
    '<|im_start|>assistant\\nAnswer:'
    """
    if not prefill:
        return text
    if text[-1:].isspace() or any(text.endswith(t) for t in special):
        return text + prefill
    return text + " " + prefill


# --------------------------------------------------------------------------- kernels (public: the engines use them)


def encode(vlm: VLM, texts: list[str], image, **text_kwargs) -> Any:
    """Processor inputs of ``texts``, each with one copy of ``image``, on the model's device.

    Parameters
    ----------
    vlm : VLM
    texts : list of str
        Chat-templated prompts (:func:`build_prompt_text`).
    image : PIL.Image.Image
        The presented image (:func:`present_image`).
    **text_kwargs
        Passed to the processor (e.g. ``padding=True, padding_side="left"``).

    Returns
    -------
    transformers.BatchFeature
        ``input_ids`` (long) and the image inputs; floating-point tensors (pixel
        values) in the model's dtype, all on ``vlm.device``; the processor gets
        :attr:`VLM.image_kwargs` (one tile).
    """
    images = [[image] for _ in texts]
    inputs = vlm.processor(text=texts, images=images, return_tensors="pt", **vlm.image_kwargs, **text_kwargs)
    # floating-point tensors (pixel values) take the model's dtype; ids stay integer
    return inputs.to(vlm.device, dtype=vlm.dtype)


def softmax32(logits: Any) -> np.ndarray:
    """Softmax over the vocabulary, computed in float32 whatever the model's dtype (spec Sec. III).

    Parameters
    ----------
    logits : torch.Tensor, shape (..., vocab)

    Returns
    -------
    numpy.ndarray, shape (..., vocab), dtype float64
    """
    import torch

    return torch.softmax(logits.float(), dim=-1).double().cpu().numpy()


def letter_probs(vlm: VLM, probs: np.ndarray, letters: Sequence[str]) -> np.ndarray:
    """``p_k``: the first-token probability of each option letter, summed over its token variants.

    Parameters
    ----------
    vlm : VLM
        Its :attr:`VLM.option_tokens` give each letter's variants.
    probs : numpy.ndarray, shape (vocab,)
        A first-token distribution (:func:`softmax32`).
    letters : sequence of str
        The prompt's option letters, in order.

    Returns
    -------
    numpy.ndarray, shape (len(letters),), dtype float64

    Raises
    ------
    KeyError
        If a letter is not one of the VLM's option letters (``readout.option_letters``).
    """
    return np.array([float(np.asarray(probs)[list(vlm.option_tokens[L])].sum()) for L in letters], dtype=np.float64)


def generate_greedy(vlm: VLM, inputs: Any, max_new: int) -> Any:
    """Greedy ``generate`` with the VLM's greedy generation config (never the checkpoint's sampling settings).

    Parameters
    ----------
    vlm : VLM
    inputs : transformers.BatchFeature
        From :func:`encode`.
    max_new : int
        Token limit (``readout.verbal_max_new_tokens``).

    Returns
    -------
    transformers.generation.GenerateDecoderOnlyOutput
        With ``sequences`` and the raw per-step ``logits`` (before any logits processor).
    """
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


def is_mrope(vlm: VLM) -> bool:
    """Whether the model uses multimodal rotary positions (Qwen-VL: 3 x batch x seq, from ``get_rope_index``)."""
    return hasattr(getattr(vlm.model, "model", None), "get_rope_index")


def eos_ids(vlm: VLM) -> set[int]:
    """The tokens that end a continuation, as a set (:attr:`VLM.eos_token_ids`)."""
    return set(vlm.eos_token_ids)


def sliding_window(vlm: VLM) -> int | None:
    """The sliding-attention window of the text model in tokens, or None without sliding-window layers."""
    cfg = vlm.model.config
    window = architectures.text_attr(cfg, "sliding_window", default=None)
    if window and any("sliding" in str(t) for t in architectures.layer_types(cfg)):
        return int(window)
    return None


#: processor outputs with one entry per batch row (the image inputs a prefill of one prompt takes)
MM_KEYS_PER_ROW = ("pixel_values", "pixel_attention_mask", "image_position_ids", "image_sizes")


def image_inputs(vlm: VLM, texts: list[str], pil) -> tuple[dict[str, Any], list[list[int]]]:
    """Processor inputs of the first prompt (with its image) and the token ids of every prompt.

    The image is preprocessed once. The other prompts are tokenised without
    the image expansion; their ids after the (identical) image span are spliced
    onto the expanded head. Checked on the first prompt: the processor's ids must
    end with the text-only tokenisation's ids after the common head, else every
    prompt goes through the processor with its own copy of the image.

    Parameters
    ----------
    vlm : VLM
        Its ``device`` decides where the inputs go (the batched engine passes a
        copy with ``device="cpu"``).
    texts : list of str
        Chat-templated prompts (:func:`build_prompt_text`), all with the same image.
    pil : PIL.Image.Image
        The presented image.

    Returns
    -------
    enc : transformers.BatchFeature
        :func:`encode` of the first prompt.
    ids : list of list of int
        Every prompt's token ids, image span expanded.
    """
    enc = encode(vlm, texts[:1], pil)
    full0 = enc["input_ids"][0].tolist()
    tok = vlm.tokenizer
    plain = [tok(t)["input_ids"] for t in texts]
    k = common_prefix_len(plain)
    k = min(k, min(len(p) for p in plain) - 1)
    tail0 = plain[0][k:]
    head = full0[: len(full0) - len(tail0)]
    if len(tail0) and full0[len(head):] == tail0 and len(head) >= 0:
        ids = [head + p[k:] for p in plain]
    else:  # tokenisation across the image span differs: encode every prompt with the image
        encs = [encode(vlm, [t], pil) for t in texts]
        ids = [e["input_ids"][0].tolist() for e in encs]
    return enc, ids


def common_prefix_len(seqs: Sequence[Sequence[int]]) -> int:
    """Length of the longest common prefix of token sequences.

    >>> common_prefix_len([[1, 2, 3], [1, 2, 4], [1, 2]])
    2
    """
    n = min(len(s) for s in seqs)
    for i in range(n):
        v = seqs[0][i]
        if any(s[i] != v for s in seqs[1:]):
            return i
    return n
