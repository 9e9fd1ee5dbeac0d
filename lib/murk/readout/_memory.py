"""What the batched engine supports, and how many images a batch holds: the attention implementation, the
model family, and the rows' memory against the device's free memory (:func:`auto_images_per_batch`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from murk.core import load_config
from murk.protocol import Question
from murk.readout import _architectures as architectures
from murk.readout._device import _MASK_MAPPING_TEXT_TYPES, _mask_spec
from murk.readout._item_readouts import item_prompts
from murk.readout._rows import _prepare_row
from murk.readout._schedule import N_CONDITIONS
from murk.readout._vlm import VLM, present_image

__all__ = ["batching_support", "auto_images_per_batch"]


#: model types whose forward accepts custom 4-D attention masks and explicit per-row positions
_FAMILIES = {"smolvlm": "SmolVLM", "idefics3": "Idefics3", "qwen3_vl": "Qwen3-VL", "internvl": "InternVL",
             "gemma4": "Gemma 4"}


# --------------------------------------------------------------------------- support, memory


def batching_support(vlm: VLM) -> str | None:
    """Why this model cannot be batched by this engine, or None if it can.

    Batched rows need: a supported family (:data:`_FAMILIES`: SmolVLM / Idefics3,
    Qwen3-VL, InternVL, Gemma 4), an attention kernel that takes custom 4-D masks
    (``sdpa`` or ``eager``, not flash attention), layer types among full and
    sliding-window attention (sliding layers only in text models that take a mask
    per layer type) and a causal language model (not Gemma's fully bidirectional
    mode).
    """
    cfg = vlm.model.config
    if cfg.model_type not in _FAMILIES:
        return f"model type {cfg.model_type!r} is not one of the batched families ({', '.join(_FAMILIES.values())})"
    text_type = architectures.text_attr(cfg, "model_type")
    impl = _attn_impl(vlm)
    if impl not in ("sdpa", "eager"):
        return f"attention implementation {impl!r} cannot take tree-shaped 4-D masks (use sdpa or eager)"
    types = set(architectures.layer_types(cfg))
    if not types <= {"full_attention", "sliding_attention"}:
        return f"layer types {sorted(types)} are not supported (only full and sliding-window attention)"
    if "sliding_attention" in types and text_type not in _MASK_MAPPING_TEXT_TYPES:
        return f"text model {text_type!r} has sliding-window layers but takes no mask per layer type"
    if architectures.text_attr(cfg, "use_bidirectional_attention", default=None) == "all":
        return "use_bidirectional_attention='all' is not a causal language model"
    return None


def _attn_impl(vlm: VLM) -> str:
    """The text model's attention implementation (``"sdpa"``, ``"eager"``, ...)."""
    cfg = vlm.model.config
    return (architectures.text_attr(cfg, "_attn_implementation", default=None)
            or getattr(cfg, "_attn_implementation", None) or "eager")


def _free_bytes(device: str) -> int:
    if str(device).startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 8 << 30


#: length bucket of :func:`read_units` / :func:`read_images` (rows are padded to a multiple of it)
_DEFAULT_BUCKET = 32


def _row_bytes_terms(vlm: VLM, slots: int, ends: int, gens: int, max_new: int, vision_tokens: int,
                     length: int | None = None) -> dict[str, float]:
    """Peak device memory of one row in a batch, term by term (bytes; an estimate from the config).

    With ``b`` bytes per element of ``vlm.dtype``, ``L`` the padded row length
    (``length``: the batch's longest row rounded up to its length bucket; default
    ``slots`` rounded up to 32 tokens), ``T = L + gens * max_new`` the key slots at the
    last decode step, and per decoder layer ``i`` its KV heads ``kv_i``, head size
    ``d_i`` and MLP width ``f_i`` (:func:`murk.readout.kv_heads`,
    :func:`~murk.readout.head_dims`, :func:`~murk.readout.intermediate_sizes`;
    ``H`` query heads, ``h`` hidden size, ``V`` vocabulary):

    ``kv_cache``
        ``sum_i 2 kv_i d_i T b`` over the layers that store a cache (not Gemma 4's
        KV-sharing layers).
    ``cache_growth``
        ``max_i 2 kv_i d_i T b``: a decode step concatenates each layer's cache into a
        new tensor while the old one is alive.
    ``activations``
        One layer's transients: ``L (4 h + 2 H d + 2 kv d + 3 f) b`` (largest ``d``,
        ``kv``, ``f`` of any layer) plus two float32 norms ``8 L h``.
    ``per_layer_inputs``
        Gemma 4's per-layer embeddings, all layers at once: ``2 L n_layers p b``.
    ``masks``
        The tree mask ``L^2`` (bool) and one mask per layer type: ``L^2`` bool under
        sdpa, ``2 L^2 b`` under eager (built then filled); with a sliding window the
        position difference ``8 L^2`` (int64) and its comparison ``L^2``; under sdpa on
        CUDA the bool mask converted to an additive ``L^2 b`` mask per call.
    ``attention_scores``
        Per-layer score matrices where the kernel materialises them: eager
        (``H L^2 (b + 4)``: scores and float32 softmax), sdpa on the CPU with a mask
        (``4 H L^2``), sdpa on CUDA only for head sizes above 256 (math kernel,
        ``4 H L^2``); the memory-efficient kernel tiles them.
    ``repeat_kv``
        Under a custom mask transformers copies K and V to every query head before
        sdpa or eager attention (its ``use_gqa_in_sdpa`` needs no mask):
        ``max_i 2 H d_i T b`` where ``kv_i < H``.
    ``logits``
        The prompt-final and continuation logits ``(ends + gens) V (b + 8)`` (in the
        model's dtype, then float32 logits and their softmax).
    ``vision``
        The vision tower's transients ``n_v (6 h_v + 2 f_v) b``, plus its scores
        ``4 H_v n_v^2`` on the CPU.

    Returns
    -------
    dict of str to float
        The terms above, in bytes; :func:`_row_bytes` is their sum.
    """
    import torch

    cfg = vlm.model.config
    A = architectures
    cuda = str(vlm.device).startswith("cuda")
    impl = _attn_impl(vlm)
    b = torch.finfo(vlm.dtype).bits // 8
    hidden = int(A.text_attr(cfg, "hidden_size"))
    heads = int(A.text_attr(cfg, "num_attention_heads"))
    n_layers = int(A.text_attr(cfg, "num_hidden_layers"))
    hd, kvh, inter = A.head_dims(cfg), A.kv_heads(cfg), A.intermediate_sizes(cfg)
    stored = range(n_layers - A.kv_shared_layers(cfg))
    vocab = int(A.text_attr(cfg, "vocab_size"))
    L = int(length) if length is not None else int(math.ceil(slots / _DEFAULT_BUCKET) * _DEFAULT_BUCKET)
    L = max(L, int(slots))
    T = L + gens * max_new
    t: dict[str, float] = {}
    per_slot = [2 * kvh[i] * hd[i] * b for i in stored]
    t["kv_cache"] = float(T * sum(per_slot))
    t["cache_growth"] = float(T * max(per_slot, default=0))
    t["activations"] = float(L * (4 * hidden + 2 * heads * max(hd) + 2 * max(k * d for k, d in zip(kvh, hd))
                                  + 3 * max(inter)) * b + 8 * L * hidden)
    ple = int(A.text_attr(cfg, "hidden_size_per_layer_input", default=0))
    t["per_layer_inputs"] = float(2 * L * n_layers * ple * b)
    mapping, window, _, _ = _mask_spec(vlm)
    n_masks = len(mapping) if mapping is not None else 1
    masks = L * L * (1 + n_masks * (1 if impl == "sdpa" else 2 * b))
    if window is not None:
        masks += 9 * L * L
    if cuda and impl == "sdpa":
        masks += L * L * b
    t["masks"] = float(masks)
    if impl == "eager":
        scores = heads * L * L * (b + 4)
    elif not cuda or max(hd) > 256:
        scores = 4 * heads * L * L
    else:
        scores = 0
    t["attention_scores"] = float(scores)
    t["repeat_kv"] = float(max((2 * heads * d * T * b for k, d in zip(kvh, hd) if k < heads), default=0))
    t["logits"] = float((ends + gens) * vocab * (b + 8))
    vh = int(A.vision_attr(cfg, "hidden_size", default=0))
    vi = int(A.vision_attr(cfg, "intermediate_size", default=4 * vh))
    vheads = int(A.vision_attr(cfg, "num_attention_heads", "num_heads", default=1))
    vision = vision_tokens * (6 * vh + 2 * vi) * b
    if not cuda:
        vision += vheads * vision_tokens * vision_tokens * 4
    t["vision"] = float(vision)
    return t


def _row_bytes(vlm: VLM, slots: int, ends: int, gens: int, max_new: int, vision_tokens: int,
               length: int | None = None) -> float:
    """Peak device memory of one row in a batch (bytes; an estimate from the config): the sum of
    :func:`_row_bytes_terms` (KV cache and its growth, one layer's activations, per-layer inputs, masks,
    attention scores and K/V copies, logits, vision tower), for a row padded to ``length`` tokens."""
    return float(sum(_row_bytes_terms(vlm, slots, ends, gens, max_new, vision_tokens, length).values()))


def auto_images_per_batch(vlm: VLM, questions: Sequence[Question] | None = None,
                          config: Mapping[str, Any] | None = None, free_bytes: int | None = None,
                          fraction: float = 0.6, max_images: int | None = None) -> int:
    """Images per scheduled batch from the device's free memory and the model's size.

    One probe row (a grey image at the presented size with the study's prompts)
    gives the row length; :func:`_row_bytes` estimates a row's peak memory at that
    length padded to the length bucket (KV cache of prefix, tree and continuations
    and its growth in decode; one layer's activations; masks; attention scores and
    the K/V copies per query head where the kernel makes them; logits of the
    prompt-final tokens; the vision encoder's activations). The result is the
    largest power of two ``k <= max_images`` with ``k * N_CONDITIONS`` rows within
    ``fraction`` of the free memory.

    Parameters
    ----------
    vlm : VLM
        Loaded (its weights are already outside the free memory).
    questions : sequence of Question, optional
        Prompts of the probe; default :data:`murk.protocol.EXAMPLE_ITEM`'s.
    config : dict, optional
    free_bytes : int, optional
        Default ``torch.cuda.mem_get_info`` on CUDA, the available RAM on CPU.
    fraction : float
        Share of the free memory to plan for (the rest absorbs allocator
        fragmentation and estimate error; an out-of-memory error still splits the
        batch, see the module notes).
    max_images : int, optional
        Upper bound; default 8 on CUDA (192 rows of about 650 tokens: prefills of
        ~10^5 tokens already saturate the matrix units, and decode steps are bound
        by reading the KV cache, which grows with the rows) and 1 on CPU, where
        larger batches add memory but no speed (one image already gives decode
        steps of 72 rows: two images per batch read 0.86 times the units per second
        of one, ``benchmarks/cpu_batch.py`` on a 2-core AVX-512 CPU, 2026-12-03).

    Returns
    -------
    int
        ``>= 1``. The value fixes the schedule: record it with the run (a resumed
        run or another shard must use the same value to get bit-identical results).
    """
    from murk.protocol import EXAMPLE_ITEM, questions_for_item

    cfg = load_config() if config is None else config
    qs = list(questions) if questions is not None else questions_for_item(EXAMPLE_ITEM, cfg)
    max_new = int(cfg.get("readout", {}).get("verbal_max_new_tokens", 12))
    grey = np.full((vlm.max_side_px, vlm.max_side_px, 3), 128, dtype=np.uint8)
    slots = item_prompts(qs, cfg, ("v1",))
    row = _prepare_row(vlm, present_image(grey, vlm.max_side_px), slots, cfg)
    if isinstance(row, str):
        n, e, g, v = 1024, len(slots), len(slots), 1024
    else:
        n, e, g, v = row.n, row.n_end, len(row.gen_ends), row.n_vision
    length = int(math.ceil(n / _DEFAULT_BUCKET) * _DEFAULT_BUCKET)  # the probe is the longest row (largest image)
    per_image = N_CONDITIONS * _row_bytes(vlm, n, e, g, max_new, v, length=length)
    free = _free_bytes(vlm.device) if free_bytes is None else int(free_bytes)
    cap = max_images if max_images is not None else (8 if str(vlm.device).startswith("cuda") else 1)
    k = max(1, int(fraction * free // max(per_image, 1.0)))
    k = min(k, int(cap))
    return 1 << (k.bit_length() - 1)

