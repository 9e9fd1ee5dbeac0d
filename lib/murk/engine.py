"""Batched read-out engine: many (image, condition) units per forward pass.

A **unit** is one image under one condition with all its prompts (spec Sec. III:
each of t2, t3_true and t3_false in the variants main / abstain / abstain2, 9
prompts; plus the main prompt in the verbal wordings v2 / v3 on the items that
ask them). The per-unit baseline (:func:`murk.baseline.read_item`, measured
against in ``benchmarks/readout.py``) reads one unit at a time: one vision pass,
one prefill, one batch of prompt tails and 11 greedy decode steps of 3 rows, about
13 small forward calls per unit. This engine, the read-out stage's, reads a whole
scheduled batch of units with about ``verbal_max_new_tokens`` forward calls. What a
unit asks and records is :mod:`murk.unit`'s (:func:`murk.unit.item_prompts`,
:func:`murk.unit.verbal_groups`, :func:`murk.unit.item_readouts`); the model kernels
are :mod:`murk.vlm`'s public ones. This module only schedules and computes:

1. **One row per unit, its prompts as a token tree.** The prompts of a unit share
   the chat head and the image, and prompts of one question share the stem and
   the options; the row holds each distinct token prefix once (a trie of the
   prompts' token ids, :func:`_tree`). A token attends to its ancestors in the
   tree only, so every prompt sees exactly its own tokens, at the positions it has
   when run alone (``position_ids`` = its index in the prompt; Qwen3-VL's M-RoPE
   positions from ``get_rope_index`` on the shared prefix). The last token of
   every prompt is placed at the end of the row, so ``logits_to_keep`` returns the
   first-token distributions of all prompts and nothing else.
2. **One forward for the batch.** The presented images of all units go through
   the vision encoder together (inside the model's forward), and all rows are
   prefilled at once with 4-D attention masks built from the tree and the
   positions (sliding-window layers: ``q - k < window`` on positions, Gemma 4's
   bidirectional image blocks where the config asks for them), never from cache
   slots, so padding and tree branches cannot shift a window.
3. **One decode loop for the batch.** The greedy continuations of all ``main``
   prompts of all units are decoded together, ``G`` tokens per row per step
   (one per continuation), on the cache of the prefill; each continuation token
   attends to its prompt's ancestors and its own earlier tokens.

The verbal wordings v2 / v3 are scored as a **branch** of their unit's row, in a
forward of their own after the core rows' decode, so the main read-outs do not depend
on whether they are asked: the branch holds only the tokens of the verbal prompts that
the core tree lacks, and attends to the core row's cached keys and values for the rest
(the chat head, the image, the system text, a question's stem), so the processor, the
vision tower and the shared prefix run once per unit (:func:`_run_branches`).

Results do not depend on how a run is cut
-----------------------------------------
Batch membership comes from a fixed global schedule (:func:`schedule`): batch
``b`` holds the items ``b * images_per_batch`` to ``(b + 1) * images_per_batch - 1``
(all conditions of each), so shards whose size is a multiple of
``images_per_batch`` (:func:`check_shard_alignment`) and resumed runs see the
same batches as an uninterrupted run; a resumed run recomputes whole batches
(:func:`plan`), re-reading the finished batch-mates of an unfinished image
without writing them, so a killed-and-resumed store is bit-identical to an
uninterrupted one. Row lengths are padded to multiples of ``length_bucket``
tokens so that most batches have the same shapes. Each row's read-outs are
computed independently of its batch-mates up to floating-point rounding of the
batched kernels (tests: ``<= 1e-6`` in float32 against every prompt scored on its
own, :func:`murk.whole.score_whole` and :func:`murk.baseline.score_prompts` with
``shared_prefix=False``).

Out of memory
-------------
A batch that raises an out-of-memory error is split into halves and each half is
run again (logged, counted in :attr:`EngineStats.oom_splits`), after the failed
batch is released: the handler only records the error; outside it the collated
rows and the exception's traceback (which holds the activations, KV cache and
logits) are dropped, ``gc.collect()`` and, on CUDA, ``torch.cuda.empty_cache()``
run (:func:`_run_rows`). One unit that does not fit alone stops the read-out with
a one-line ``torch.OutOfMemoryError`` naming the settings that make it fit
(``render.max_side_px``, ``readout.dtype_gpu``). Only the rows of
that batch can change, and only by the rounding of the smaller kernels: in float32
by at most the engine's agreement with per-prompt scoring (``<= 1e-6`` in every
probability read-out); in bfloat16 by the bf16 differences that
``benchmarks/readout_gpu.py`` reports (``bf16_max_abs_dp=``, ``bf16_flip_rate=``),
which can flip an answer or a greedy continuation that sits on a near-tie.

Fallback
--------
Where a unit cannot be batched safely (model family or attention kernel without
custom 4-D masks, an image span not shared by all prompts of the unit, Gemma's
fully bidirectional mode), it is read with every prompt run whole
(:func:`murk.whole.read_unit`: transformers' own forward and ``generate``, the
reference the engines are tested against) and the reason is recorded in
:attr:`ImageResult.fallbacks` and :attr:`EngineStats.fallback_units`.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import itertools
import logging
import math
import os
import queue
import threading
import time
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from murk import architectures, whole
from murk.config import load_config
from murk.prompts import Question
from murk.unit import PromptSlot, item_prompts, item_readouts, verbal_groups
from murk.verbal import VERBAL_STOP_EOS, VERBAL_STOP_LIMIT
from murk.vlm import (VLM, build_prompt_text, common_prefix_len, eos_ids, image_inputs, image_token_id, is_mrope,
                      present_image)

log = logging.getLogger("murk")

__all__ = [
    "N_CONDITIONS",
    "Unit",
    "ImageJob",
    "ItemJobs",
    "ImageResult",
    "EngineStats",
    "schedule",
    "plan",
    "check_shard_alignment",
    "batching_support",
    "auto_images_per_batch",
    "read_units",
    "read_images",
    "job_cpus",
    "BAD_INPUT_ERRORS",
]

#: conditions per image (:data:`murk.cube.CONDITIONS`: clean, 8 fog, 8 underwater, 5 ImageNet-C, blank, shuffled)
N_CONDITIONS = 24

#: model types whose forward accepts custom 4-D attention masks and explicit per-row positions
_FAMILIES = {"smolvlm": "SmolVLM", "idefics3": "Idefics3", "qwen3_vl": "Qwen3-VL", "internvl": "InternVL",
             "gemma4": "Gemma 4"}
#: text-model types whose forward takes a mapping {layer type: 4-D mask} (needed for sliding-window layers)
_MASK_MAPPING_TEXT_TYPES = {"gemma4_text", "gemma3_text", "qwen3", "qwen2"}
#: the verbal wordings as a branch of the core row (False: a row of their own, with its own vision and prefix;
#: ``benchmarks/flops.py`` compares the two)
_BRANCHES = True
_VISION_KEYS = ("pixel_values", "pixel_attention_mask", "image_position_ids", "image_sizes", "image_grid_thw")


# --------------------------------------------------------------------------- public records


@dataclass(frozen=True)
class Unit:
    """One image under one condition, with every prompt asked of it.

    Attributes
    ----------
    item : int
        Global item index (position in ``items.json``): the schedule's key.
    arm : str
        ``clean``, ``fog``, ``underwater``, ``imagenet_c``, ``blank`` or ``shuffled``.
    level : int
        Level of the arm (0 for clean and the controls).
    image : numpy.ndarray, shape (H, W, 3), dtype uint8
        The condition's image, degraded and boxed (:func:`murk.render.render_conditions`).
    questions : tuple of Question
        Usually t2, t3_true, t3_false.
    verbal_variants : tuple of str
        Verbal wordings asked (must contain ``"v1"``).
    """

    item: int
    arm: str
    level: int
    image: np.ndarray
    questions: tuple[Question, ...]
    verbal_variants: tuple[str, ...] = ("v1",)


@dataclass
class ImageJob:
    """What :func:`read_images` needs of one item: returned by the caller's ``load(item)``.

    Attributes
    ----------
    questions : sequence of Question
    conditions : iterable of (arm, level, image)
        Usually the generator :func:`murk.render.render_conditions`; consumed by a
        preparing worker (:func:`read_images`), so rendering overlaps with the model.
    verbal_variants : sequence of str
    """

    questions: Sequence[Question]
    conditions: Iterable[tuple[str, int, np.ndarray]]
    verbal_variants: Sequence[str] = ("v1",)

@dataclass(frozen=True)
class ItemJobs:
    """The read-out stage's ``load(item)`` for :func:`read_images`: a module-level, picklable callable.

    ``ItemJobs(...)(i)`` gathers item ``i``'s inputs at the presented size
    (:func:`murk.render.item_inputs`: image, depth, box, the shuffled control's
    partner) and returns its questions and its conditions as the generator
    :func:`murk.render.render_conditions`, consumed by a preparing worker. Being
    picklable, it lets :func:`read_images` prepare in worker processes (a closure
    or a function defined in a notebook cannot be sent to one).

    Attributes
    ----------
    table : pandas.DataFrame
        The items (:func:`murk.items.read_items`); ``i`` is a row position.
    partner : sequence of int
        Each item's shuffled-control partner (:func:`murk.items.shuffled_partner`).
    image_dir, depth_folder : str
        The COCO image folder and the depth cache (:func:`murk.depth.current_depth`).
    config : dict
        Study configuration.
    seed : int
        The selection's seed (per-item randomness of the conditions).
    n_verbal_items : int
        Items ``i < n_verbal_items`` are asked the verbal wordings v1, v2, v3; the others v1 only.

    Raises
    ------
    FileNotFoundError, ValueError
        From :func:`murk.render.item_inputs` on bad input (recorded as the image's missing reason).
    """

    table: Any
    partner: Sequence[int]
    image_dir: str
    depth_folder: str
    config: Mapping[str, Any]
    seed: int
    n_verbal_items: int = 0

    def __call__(self, i: int) -> ImageJob:
        from murk import prompts, render

        row = self.table.iloc[i]
        x = render.item_inputs(self.table, i, int(self.partner[i]), self.image_dir, self.depth_folder, self.config)
        conditions = render.render_conditions(x["image"], x["depth_m"], x["bbox"], x["partner_image"],
                                              seed=int(self.seed), image_id=int(row["image_id"]),
                                              config=self.config)
        verbal = prompts.VERBAL_WORDINGS if i < int(self.n_verbal_items) else ("v1",)
        return ImageJob(prompts.questions_for_item(row, self.config), conditions, verbal)


@dataclass
class ImageResult:
    """Every read-out of one image, ready for :func:`murk.cube.write_image`.

    Attributes
    ----------
    item : int
        Global item index.
    results : dict or None
        ``(arm, level, task) -> readouts`` for all conditions (None when the input
        was bad).
    missing_reason : str or None
        Why the image could not be read out (bad input; for
        :func:`murk.cube.write_missing`).
    fallbacks : list of str
        ``"<arm>/<level>: <reason>"`` for each unit read with every prompt run whole
        (the fallback, :func:`murk.whole.read_unit`).
    """

    item: int
    results: dict | None
    missing_reason: str | None = None
    fallbacks: list[str] = field(default_factory=list)


@dataclass
class EngineStats:
    """Counters of a batched read-out (summed over batches).

    Attributes
    ----------
    units, images, batches, rows : int
        Units read, images yielded, scheduled batches run, prefilled rows (a unit has
        one core row and, with verbal wordings v2/v3, a branch of it: the verbal
        prompts prefilled on the core row's cached shared prefix, so the image and the
        prefix run once per unit).
    forward_calls : int
        Model forward calls (prefills and decode steps).
    prefill_tokens : int
        Real (unpadded) tree tokens prefilled.
    prefill_slots : int
        Padded positions prefilled (``rows x row length``).
    end_tokens : int
        Prompt-final tokens (one per distinct prompt: whose logits are read).
    decode_tokens : int
        Real continuation tokens fed back during decoding.
    decode_slots : int
        Padded decode positions (``rows x G x steps``).
    attn_pairs : int
        Attended (query, key) pairs of real tokens in the prefills (per layer,
        summed over rows; the tree's ancestor pairs).
    end_attn_pairs : int
        The part of ``attn_pairs`` whose query is a prompt-final token (all a
        KV-sharing layer of Gemma 4 computes in a prefill).
    decode_attn_pairs : int
        Attended pairs of the continuation tokens.
    attn_slots, end_slots, end_attn_slots, decode_attn_slots : int
        What the kernels execute, padding and masked pairs included: (query, key) pairs of the prefills
        (``rows x row length x keys``), logits computed in the prefills (``rows x E``), the (query, key) pairs
        of those last ``E`` queries (``rows x E x keys``: all that Gemma 4's KV-sharing layers compute where
        transformers slices their inputs to ``logits_to_keep``) and (query, key) pairs of the decode steps
        (``rows x G x keys``); ``benchmarks/flops.py`` counts executed FLOPs from them.
    vision_tokens : int
        Patch tokens through the vision encoder (before merging or pooling).
    image_tokens : int
        Image placeholder tokens of the rows (the vision features after merging or
        pooling, i.e. the tokens through the projector).
    vision_attn_pairs : int
        (query, key) patch pairs of the vision encoder's attention (per layer).
    prompts : int
        Prompts scored.
    model_s : float
        Seconds the model thread spent running batches.
    wait_s : float
        Seconds the model thread waited for prepared batches (rendering,
        processor, collation not ready): ``wait_s / (wait_s + model_s)`` is the
        share of time the model waits for the CPU.
    oom_splits : int
        Batches split in halves after an out-of-memory error.
    fallback_units : int
        Units read with every prompt run whole (the fallback, :func:`murk.whole.read_unit`).
    """

    units: int = 0
    images: int = 0
    batches: int = 0
    rows: int = 0
    forward_calls: int = 0
    prefill_tokens: int = 0
    prefill_slots: int = 0
    end_tokens: int = 0
    decode_tokens: int = 0
    decode_slots: int = 0
    attn_pairs: int = 0
    end_attn_pairs: int = 0
    decode_attn_pairs: int = 0
    attn_slots: int = 0
    end_slots: int = 0
    end_attn_slots: int = 0
    decode_attn_slots: int = 0
    vision_tokens: int = 0
    image_tokens: int = 0
    vision_attn_pairs: int = 0
    prompts: int = 0
    model_s: float = 0.0
    wait_s: float = 0.0
    oom_splits: int = 0
    fallback_units: int = 0

    @property
    def wait_share(self) -> float:
        """Share of the model thread's time spent waiting for input (NaN before any batch)."""
        t = self.model_s + self.wait_s
        return self.wait_s / t if t > 0 else math.nan


# --------------------------------------------------------------------------- schedule


def schedule(first: int, last: int, images_per_batch: int) -> list[list[int]]:
    """The fixed global schedule of items ``first`` .. ``last - 1`` in batches.

    Batch ``b`` holds items ``b * k`` .. ``(b + 1) * k - 1`` (``k = images_per_batch``)
    that lie in ``[first, last)``; ``first`` must be a batch boundary, so that a
    shard sees exactly the batches an unsharded run sees (the last batch of a run
    ends at ``last``).

    Parameters
    ----------
    first, last : int
        Item range (global item indices).
    images_per_batch : int
        Images per batch (each brings its :data:`N_CONDITIONS` units).

    Returns
    -------
    list of list of int

    Raises
    ------
    ValueError
        If ``images_per_batch < 1`` or ``first`` is not a multiple of it.
    """
    k = int(images_per_batch)
    if k < 1:
        raise ValueError(f"images_per_batch must be >= 1, got {images_per_batch}")
    if int(first) % k:
        raise ValueError(f"item {first} is not a batch boundary of images_per_batch={k}: shards must start at "
                         f"multiples of it (see check_shard_alignment)")
    return [list(range(s, min(s + k, int(last)))) for s in range(int(first), int(last), k)]


def plan(todo: Iterable[int], first: int, last: int, images_per_batch: int) -> list[list[int]]:
    """The scheduled batches a (resumed) run must compute to read out ``todo``.

    Whole batches of :func:`schedule` that hold at least one item of ``todo``:
    finished batch-mates of an unfinished image are read again (and not written
    again, see ``done`` of :func:`read_images`), so every image is read with the
    same batch-mates as in an uninterrupted run.

    Parameters
    ----------
    todo : iterable of int
        Items still to read (global indices in ``[first, last)``).
    first, last, images_per_batch : int
        As in :func:`schedule`.

    Returns
    -------
    list of list of int
    """
    want = set(int(i) for i in todo)
    return [b for b in schedule(first, last, images_per_batch) if want.intersection(b)]


def check_shard_alignment(shard_size: int | None, images_per_batch: int) -> None:
    """Refuse a shard size that would cut scheduled batches.

    Raises
    ------
    ValueError
        If ``shard_size`` is not a multiple of ``images_per_batch``; the message
        names both and the fix.
    """
    if shard_size is None:
        return
    if int(shard_size) % int(images_per_batch):
        raise ValueError(f"shard_size={shard_size} is not a multiple of images_per_batch={images_per_batch}: a "
                         f"shard would cut a scheduled batch and its images would be read with other batch-mates "
                         f"than in an unsharded run. Choose a shard size that is a multiple of {images_per_batch}, "
                         f"or set images_per_batch to a divisor of {shard_size}")


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
    ``d_i`` and MLP width ``f_i`` (:func:`murk.architectures.kv_heads`,
    :func:`~murk.architectures.head_dims`, :func:`~murk.architectures.intermediate_sizes`;
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
        Prompts of the probe; default :data:`murk.prompts.EXAMPLE_ITEM`'s.
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
    from murk.prompts import EXAMPLE_ITEM, questions_for_item

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


# --------------------------------------------------------------------------- rows (CPU side)


@dataclass
class _Row:
    """One unit's prompts as a token tree, in slot order (body tokens, then the prompt-final tokens)."""

    ids: np.ndarray  # (n,) int64
    depth: np.ndarray  # (n,) int64: index of the token in its prompt
    pos: np.ndarray  # (n,) or (3, n) int64: rotary positions
    anc: np.ndarray  # (n, n) bool: key is an ancestor-or-self of query
    vblock: np.ndarray  # (n,) int64: vision block id (-1: text)
    n_end: int  # distinct prompt-final tokens (the last n_end slots)
    end_of_prompt: list[int]  # prompt j -> index among the final tokens
    gen_ends: list[int]  # distinct final-token indices that start a continuation
    vision: dict[str, Any]
    n_vision: int
    mrope: bool
    n_image_tokens: int = 0  # image placeholder tokens in the row (vision features after merging/pooling)
    vision_pairs: int = 0  # (query, key) patch pairs of the vision encoder's attention, per layer
    pre: np.ndarray | None = None  # a branch: (n, n_core) bool, its tokens' ancestors among its core row's tokens
    branch: _Row | None = None  # the verbal wordings' prompts as a branch of this row's token tree

    @property
    def n(self) -> int:
        return int(self.ids.shape[0])


def _tree(seqs: Sequence[Sequence[int]]) -> tuple[list[int], list[int], list[int], list[int]]:
    """Trie of token sequences: (token, parent, depth) per node in creation order, and each sequence's last node."""
    tok: list[int] = []
    parent: list[int] = []
    depth: list[int] = []
    child: dict[tuple[int, int], int] = {}
    ends: list[int] = []
    for seq in seqs:
        p = -1
        for d, t in enumerate(seq):
            n = child.get((p, int(t)))
            if n is None:
                n = len(tok)
                child[(p, int(t))] = n
                tok.append(int(t))
                parent.append(p)
                depth.append(d)
            p = n
        ends.append(p)
    return tok, parent, depth, ends


@dataclass(frozen=True)
class _Layout:
    """A unit's token tree in slot order (read-only; shared by the units with the same prompt tokens)."""

    tok: np.ndarray  # (n,) int64
    depth: np.ndarray  # (n,) int64
    anc: np.ndarray  # (n, n) bool
    uniq: list  # distinct prompt-final nodes, in prompt order
    ends: list  # node of each prompt's last token


@functools.lru_cache(maxsize=256)
def _layout(ids: tuple[tuple[int, ...], ...]) -> _Layout:
    """The token tree of a unit's prompts, with the prompt-final tokens last; cached because the 24 conditions of
    an item share their prompts' tokens (only the image's token count can differ, e.g. for the shuffled control)."""
    tok, parent, depth, ends = _tree(ids)
    n = len(tok)
    uniq = list(dict.fromkeys(ends))
    end_set = set(uniq)
    order = np.asarray([i for i in range(n) if i not in end_set] + uniq, dtype=np.int64)
    anc = np.zeros((n, n), dtype=bool)
    for i in range(n):  # parents are created before their children
        if parent[i] >= 0:
            anc[i] = anc[parent[i]]
        anc[i, i] = True
    out = _Layout(np.asarray(tok, dtype=np.int64)[order], np.asarray(depth, dtype=np.int64)[order],
                  anc[np.ix_(order, order)], uniq, ends)
    for a in (out.tok, out.depth, out.anc):
        a.setflags(write=False)
    return out


_ROPE_CACHE: dict = {}
_ROPE_LOCK = threading.Lock()


def _rope_index(vlm: VLM, trunk: tuple[int, ...], grid, types) -> np.ndarray:
    """Qwen-VL's M-RoPE positions (3, k) of the shared prefix (``get_rope_index``), cached per prefix and grid."""
    import torch

    merge = int(architectures.vision_attr(vlm.model.config, "spatial_merge_size"))
    key = (merge, trunk, grid, types)  # all it depends on
    with _ROPE_LOCK:
        hit = _ROPE_CACHE.get(key)
    if hit is not None:
        return hit
    t = torch.tensor([trunk], dtype=torch.long)
    p3, _ = vlm.model.model.get_rope_index(
        t, image_grid_thw=None if grid is None else torch.tensor(grid, dtype=torch.long), video_grid_thw=None,
        attention_mask=torch.ones_like(t), mm_token_type_ids=None if types is None else torch.tensor([types]))
    out = p3[:, 0].numpy().astype(np.int64)
    out.setflags(write=False)
    with _ROPE_LOCK:
        if len(_ROPE_CACHE) > 1024:
            _ROPE_CACHE.clear()
        _ROPE_CACHE[key] = out
    return out


def _vision_blocks(types: np.ndarray) -> np.ndarray:
    """Contiguous image/video token runs -> block ids 0, 1, ... (-1 for text), as Gemma 4 groups them."""
    is_v = (types == 1) | (types == 2)
    start = is_v & ~np.concatenate([[False], is_v[:-1]])
    gid = np.cumsum(start) - 1
    return np.where(is_v, gid, -1).astype(np.int64)


def _patch_tokens(vlm: VLM, enc: Mapping[str, Any]) -> int:
    """Patch tokens the vision encoder runs on for the encoded image (before any merge or pooling)."""
    pv = enc.get("pixel_values")
    if pv is None:
        return 0
    if "image_grid_thw" in enc:  # Qwen-VL: flattened patches
        return int(enc["image_grid_thw"].prod(-1).sum())
    if "image_position_ids" in enc:  # Gemma 4: padded patch list
        return int((enc["image_position_ids"] != -1).all(-1).sum())
    patch = architectures.vision_attr(vlm.model.config, "patch_size", default=14)
    ph, pw = (patch, patch) if isinstance(patch, int) else tuple(patch)
    n_images = int(np.prod(pv.shape[:-3]))
    return n_images * (int(pv.shape[-2]) // int(ph)) * (int(pv.shape[-1]) // int(pw))


def _prepare_row(vlm: VLM, pil, slots: Sequence[PromptSlot], cfg: Mapping[str, Any]) -> _Row | str:
    """Processor inputs and the token tree of one row (on the host). A str is the reason it cannot be batched."""
    prefill = cfg.get("readout", {}).get("assistant_prefill", "Answer:")
    texts = [build_prompt_text(vlm, s.user, prefill) for s in slots]
    host = dataclasses.replace(vlm, device="cpu")  # processor outputs stay on the host (pinned later)
    enc, ids = image_inputs(host, texts, pil)
    return _row_from_ids(vlm, enc, ids, slots)


def _token_types(enc, ids0: Sequence[int], k: int) -> np.ndarray | None:
    """The processor's token types (``mm_token_type_ids``: 0 text, 1 image, 2 video) of the first ``k`` tokens of
    the prompt ``ids0``; ``enc`` is the processor's output for a prompt with the same image span (its types up to
    where the two prompts differ, text beyond). None if the processor gives no types."""
    if "mm_token_type_ids" not in enc:
        return None
    m = common_prefix_len([enc["input_ids"][0].tolist(), list(ids0)])
    t = enc["mm_token_type_ids"][0, :min(k, m)].cpu().numpy().astype(np.int64)
    return np.concatenate([t, np.zeros(max(0, k - m), dtype=np.int64)])


def _tree_positions(vlm: VLM, enc, ids0: Sequence[int], k: int, dep: np.ndarray,
                    types: np.ndarray | None) -> np.ndarray:
    """M-RoPE positions ``(3, n)`` int64 of a token tree: the model's own rope index on the shared trunk (the
    first ``k`` tokens of ``ids0``, image included; ``types`` their token types), and after it one position per
    depth, counted on from the trunk's largest position (text: the three axes equal)."""
    grid = enc["image_grid_thw"].cpu() if "image_grid_thw" in enc else None
    p3 = _rope_index(vlm, tuple(ids0[:k]), None if grid is None else tuple(map(tuple, grid.tolist())),
                     None if types is None else tuple(types.tolist()))
    nxt = int(p3.max()) + 1
    pos = np.empty((3, len(dep)), dtype=np.int64)
    trunk = dep < k
    pos[:, trunk] = p3[:, dep[trunk]]
    pos[:, ~trunk] = (nxt + dep[~trunk] - k)[None]
    return pos


def _row_from_ids(vlm: VLM, enc, ids: Sequence[Sequence[int]], slots: Sequence[PromptSlot]) -> _Row | str:
    """The token tree of one row from the processor's output ``enc`` (of ``ids[0]``'s prompt) and the prompts'
    token ids. A str is the reason it cannot be batched."""
    k = min(common_prefix_len(ids), min(len(i) for i in ids) - 1)
    img = image_token_id(vlm)
    if img not in ids[0][:k] or any(img in i[k:] for i in ids):
        return "the image span is not shared by all prompts of the unit"
    layout = _layout(tuple(tuple(i) for i in ids))
    tok, dep, anc, uniq, ends = layout.tok, layout.depth, layout.anc, layout.uniq, layout.ends
    n = len(tok)
    mrope = is_mrope(vlm)
    types = _token_types(enc, ids[0], k)
    pos = _tree_positions(vlm, enc, ids[0], k, dep, types) if mrope else dep.copy()
    vblock = np.full(n, -1, dtype=np.int64)
    if types is not None:
        vb = _vision_blocks(types)
        trunk = dep < k
        vblock[trunk] = vb[dep[trunk]]
    end_index = {node: e for e, node in enumerate(uniq)}
    end_of_prompt = [end_index[ends[j]] for j in range(len(slots))]
    gen_ends = list(dict.fromkeys(end_of_prompt[j] for j, s in enumerate(slots) if s.generate))
    vision = {key: enc[key] for key in _VISION_KEYS if key in enc}
    n_patch = _patch_tokens(vlm, enc)
    if "image_grid_thw" in enc:  # Qwen-VL: attention within each image
        pairs = int((enc["image_grid_thw"].prod(-1) ** 2).sum())
    else:
        n_img = max(1, int(np.prod(enc["pixel_values"].shape[:-3]))) if "image_position_ids" not in enc else 1
        pairs = n_img * (n_patch // n_img) ** 2
    return _Row(tok, dep, pos, anc, vblock, len(uniq), end_of_prompt, gen_ends,
                vision, n_patch, mrope, int(sum(1 for t in ids[0][:k] if t == img)), pairs)


def _branch_from_ids(vlm: VLM, enc, core_ids: Sequence[Sequence[int]], ids: Sequence[Sequence[int]], core: _Row,
                     slots: Sequence[PromptSlot]) -> _Row | str:
    """The prompts ``ids`` (the verbal wordings) as a branch of the core row ``core`` (of ``core_ids``).

    The branch holds the tokens of the union tree of all prompts that the core tree lacks (slot order: body,
    then the prompt-final tokens); :attr:`_Row.pre` says which core tokens each of them attends to (its
    ancestors there: at least the chat head and the image). Positions are those each prompt has run whole
    (M-RoPE from ``get_rope_index`` on the prompts' shared prefix, as in :func:`_row_from_ids`). A str is the
    reason it cannot be a branch (then the prompts get a row of their own).
    """
    nc = len(core_ids)
    tok, parent, depth, ends = _tree(list(core_ids) + list(ids))
    n_core = len(_tree(core_ids)[0])  # the union tree's first nodes are the core tree's, in the same order
    vends = ends[nc:]
    img = image_token_id(vlm)
    if any(e < n_core for e in vends) or img in tok[n_core:]:
        return "a verbal prompt ends inside the core prompts' tree or has image tokens of its own"
    uniq_core = list(dict.fromkeys(ends[:nc]))
    core_set = set(uniq_core)
    core_order = [i for i in range(n_core) if i not in core_set] + uniq_core  # as _layout orders the core row
    core_slot = np.empty(n_core, dtype=np.int64)
    core_slot[core_order] = np.arange(n_core)
    uniq = list(dict.fromkeys(vends))
    end_set = set(uniq)
    order = [i for i in range(n_core, len(tok)) if i not in end_set] + uniq
    slot = {node: j for j, node in enumerate(order)}
    n = len(order)
    anc = np.zeros((n, n), dtype=bool)
    pre = np.zeros((n, n_core), dtype=bool)
    for node in range(n_core, len(tok)):  # parents are created before their children
        j, p = slot[node], parent[node]
        if p >= n_core:
            anc[j], pre[j] = anc[slot[p]], pre[slot[p]]
        else:  # hangs off the core tree: the core token and its ancestors there
            pre[j] = core.anc[core_slot[p]]
        anc[j, j] = True
    dep = np.asarray(depth, dtype=np.int64)[order]
    k = min(common_prefix_len(ids), min(len(i) for i in ids) - 1)
    if core.mrope:
        m = common_prefix_len([core_ids[0], ids[0]])  # enc is core_ids[0]'s: its token types up to here
        if img not in ids[0][:min(k, m)]:
            return "the image span is not in the prefix the verbal prompts share with the core prompts"
        pos = _tree_positions(vlm, enc, ids[0], k, dep, _token_types(enc, ids[0], k))
    else:
        pos = dep.copy()
    end_index = {node: e for e, node in enumerate(uniq)}
    end_of_prompt = [end_index[vends[j]] for j in range(len(slots))]
    gen_ends = list(dict.fromkeys(end_of_prompt[j] for j, s in enumerate(slots) if s.generate))
    return _Row(np.asarray(tok, dtype=np.int64)[order], dep, pos, anc, np.full(n, -1, dtype=np.int64), len(uniq),
                end_of_prompt, gen_ends, {}, 0, core.mrope, pre=pre)


@dataclass
class _PreparedUnit:
    unit: Unit
    slots: list  # [core slots, verbal slots]
    rows: list  # [core row, verbal row or None]; None everywhere with a fallback reason
    fallback: str | None = None

    @property
    def kind_rows(self) -> list:
        """[core row, verbal row]: the verbal row is the core row's branch where it has one."""
        core, verbal = self.rows
        return [core, verbal if verbal is not None or core is None else core.branch]


def _split_slots(slots: Sequence[PromptSlot]) -> tuple[list, list]:
    """The slots of a unit's two row kinds: the main run's (wording v1), then the further wordings
    (:func:`murk.unit.verbal_groups`)."""
    groups = verbal_groups(slots)
    return [slots[j] for j in groups[0]], [slots[j] for j in (groups[1] if len(groups) > 1 else [])]


def _prepare_unit(vlm: VLM, unit: Unit, cfg: Mapping[str, Any], support: str | None) -> _PreparedUnit:
    slots = item_prompts(unit.questions, cfg, unit.verbal_variants)
    core, verbal = _split_slots(slots)
    if support is not None:
        return _PreparedUnit(unit, [core, verbal], [None, None], support)
    pil = present_image(unit.image, vlm.max_side_px)
    # the processor runs once per unit: the verbal wordings' prompts are tokenised onto the same image span
    prefill = cfg.get("readout", {}).get("assistant_prefill", "Answer:")
    texts = [build_prompt_text(vlm, s.user, prefill) for s in core + verbal]
    enc, ids = image_inputs(dataclasses.replace(vlm, device="cpu"), texts, pil)  # outputs stay on the host
    row = _row_from_ids(vlm, enc, ids[: len(core)], core)
    if isinstance(row, str):
        return _PreparedUnit(unit, [core, verbal], [None, None], row)
    if not verbal:
        return _PreparedUnit(unit, [core, verbal], [row, None])
    # the verbal wordings as a branch of the core row's token tree: their prefill reuses the keys and values of
    # every token they share with the core prompts (chat head, image, system text, question stems), so neither
    # the vision tower nor the shared prefix runs twice
    branch = (_branch_from_ids(vlm, enc, ids[: len(core)], ids[len(core):], row, verbal) if _BRANCHES
              else "branches switched off")
    if not isinstance(branch, str):
        return _PreparedUnit(unit, [core, verbal], [dataclasses.replace(row, branch=branch), None])
    other = _row_from_ids(vlm, enc, ids[len(core):], verbal)  # a row of its own (its own prefill and vision)
    if isinstance(other, str):
        return _PreparedUnit(unit, [core, verbal], [None, None], other)
    return _PreparedUnit(unit, [core, verbal], [row, other])


# --------------------------------------------------------------------------- device side


@dataclass
class _Batch:
    """Collated rows of one forward (host tensors, pinned when the model is on CUDA)."""

    ids: Any  # (B, L) long
    pos: Any  # (B, L) or (3, B, L) long
    depth: Any  # (B, L) long
    tree: Any  # (B, L, L) bool
    vblock: Any  # (B, L) long
    vision: dict
    L: int
    E: int
    rows: list
    real_tokens: int
    attn_pairs: int
    end_pairs: int
    vision_tokens: int
    image_tokens: int
    vision_pairs: int
    branches: _Batch | None = None  # the rows' branches, collated (their queries after the cached prefix)
    core_index: list | None = None  # a branch batch: the core row (batch index) of each branch
    prefix: int = 0  # a branch batch: P, the cached prefix slots its keys start with
    kdepth: Any = None  # a branch batch: (B, P + L) long, depths of all keys (prefix slots, then the branch)


def _collate(vlm: VLM, rows: Sequence[_Row], bucket: int) -> _Batch:
    import torch

    E = max(r.n_end for r in rows)
    body = max(r.n - r.n_end for r in rows)
    L = int(math.ceil((body + E) / bucket) * bucket)
    B = len(rows)
    pad = vlm.tokenizer.pad_token_id if vlm.tokenizer.pad_token_id is not None else 0
    ids = np.full((B, L), int(pad), dtype=np.int64)
    depth = np.zeros((B, L), dtype=np.int64)
    mrope = rows[0].mrope
    pos = np.zeros((3, B, L) if mrope else (B, L), dtype=np.int64)
    vblock = np.full((B, L), -1, dtype=np.int64)
    tree = np.zeros((B, L, L), dtype=bool)
    idx_all = np.arange(L)
    tree[:, idx_all, idx_all] = True  # a padding query attends to itself only (no empty softmax rows)
    pairs = end_pairs = 0
    pres: list = []
    for b, r in enumerate(rows):
        nb = r.n - r.n_end
        slot = np.concatenate([np.arange(nb), L - E + np.arange(r.n_end)])
        ids[b, slot] = r.ids
        depth[b, slot] = r.depth
        if mrope:
            pos[:, b, slot] = r.pos
        else:
            pos[b, slot] = r.pos
        vblock[b, slot] = r.vblock
        tree[b][np.ix_(slot, slot)] = r.anc
        if r.branch is not None:  # the branch's ancestors among this row's tokens, at their slots in the batch
            pre = np.zeros((r.branch.n, L), dtype=bool)
            pre[:, slot] = r.branch.pre
            pres.append(pre)
        pairs += int(r.anc.sum())
        end_pairs += int(r.anc[nb:].sum())
    vision: dict[str, Any] = {}
    for key in rows[0].vision:
        parts = [r.vision[key] for r in rows]
        if any(p.shape[1:] != parts[0].shape[1:] for p in parts):
            raise ValueError(f"vision input {key} has different shapes across rows")
        vision[key] = torch.cat(parts, dim=0)
    t = {k: torch.from_numpy(v) for k, v in (("ids", ids), ("pos", pos), ("depth", depth), ("tree", tree),
                                               ("vblock", vblock))}
    if str(vlm.device).startswith("cuda"):
        t = {k: v.pin_memory() for k, v in t.items()}
        vision = {k: v.pin_memory() for k, v in vision.items()}
    core_index = [b for b, r in enumerate(rows) if r.branch is not None]
    return _Batch(t["ids"], t["pos"], t["depth"], t["tree"], t["vblock"], vision, L, E, list(rows),
                  sum(r.n for r in rows), pairs, end_pairs, sum(r.n_vision for r in rows),
                  sum(r.n_image_tokens for r in rows), sum(r.vision_pairs for r in rows),
                  _collate_branches(vlm, [rows[b].branch for b in core_index], pres, t["depth"][core_index],
                                    core_index, bucket) if core_index else None)


def _collate_branches(vlm: VLM, branches: Sequence[_Row], pres: Sequence[np.ndarray], core_depth, core_index: list,
                      bucket: int) -> _Batch:
    """Collated branches (:attr:`_Row.branch`): :func:`_collate`'s rows, each query also attending to its
    ancestors among the ``P`` slots of its collated core row (``pres``: (n, P) bool each; ``core_depth`` (B, P)
    their depths): tree (B, L, P + L), a padding query attends to itself only."""
    import torch

    br = _collate(vlm, [dataclasses.replace(r, branch=None) for r in branches], bucket)
    B, L, E = len(branches), br.L, br.E
    P = int(core_depth.shape[-1])
    pre = np.zeros((B, L, P), dtype=bool)
    for b, (r, m) in enumerate(zip(branches, pres)):
        nb = r.n - r.n_end
        pre[b, np.concatenate([np.arange(nb), L - E + np.arange(r.n_end)])] = m
    tree = torch.cat([torch.from_numpy(pre), br.tree], dim=-1)
    kdepth = torch.cat([core_depth, br.depth], dim=-1)
    if str(vlm.device).startswith("cuda"):
        tree, kdepth = tree.pin_memory(), kdepth.pin_memory()
    pairs = sum(int(m.sum()) for m in pres)  # attended core tokens (the image, the shared prefix, the stems)
    end_pairs = sum(int(m[r.n - r.n_end:].sum()) for r, m in zip(branches, pres))
    return dataclasses.replace(br, tree=tree, rows=list(branches), attn_pairs=br.attn_pairs + pairs,
                               end_pairs=br.end_pairs + end_pairs, core_index=list(core_index), prefix=P,
                               kdepth=kdepth)


def _mask_spec(vlm: VLM) -> tuple[list[str] | None, int | None, bool, str]:
    """(layer types needing their own mask or None for one mask, sliding window, bidirectional image blocks, impl)."""
    cfg = vlm.model.config
    types = sorted(set(architectures.layer_types(cfg)))
    sw = architectures.text_attr(cfg, "sliding_window", default=None)
    window = int(sw) if "sliding_attention" in types and sw else None
    bidir = architectures.text_attr(cfg, "use_bidirectional_attention", default=None) == "vision"
    impl = architectures.text_attr(cfg, "_attn_implementation", default=None) or "eager"
    text_type = architectures.text_attr(cfg, "model_type")
    mapping = types if (text_type in _MASK_MAPPING_TEXT_TYPES and (window is not None or len(types) > 1)) else None
    return mapping, window, bidir, impl


def _masks(vlm: VLM, tree, qdepth, kdepth, qblock=None, kblock=None):
    """The model's attention mask(s) from the tree mask (B, Q, K) and positions: a 4-D tensor or a mapping."""
    import torch

    mapping, window, bidir, impl = _mask_spec(vlm)

    def fmt(m):
        m = m[:, None]
        if impl == "sdpa":
            return m
        return torch.zeros(m.shape, dtype=vlm.dtype, device=m.device).masked_fill(~m, torch.finfo(vlm.dtype).min)

    if mapping is None:
        return fmt(tree)
    out = {}
    for lt in mapping:
        m = tree
        if lt == "sliding_attention" and window is not None:
            if bidir and qblock is not None:
                same = (qblock[:, :, None] == kblock[:, None, :]) & (qblock[:, :, None] >= 0)
                m = m | same
            m = m & ((qdepth[:, :, None] - kdepth[:, None, :]) < window)
        out[lt] = fmt(m)
    return out


#: transformers' switch (``sdpa_attention.use_gqa_in_sdpa``) for SDPA's own grouped-query attention under a mask
_FORCE_GQA = "TRANSFORMERS_SDPA_FORCE_GQA"
_GQA_LOCK = threading.Lock()


@contextlib.contextmanager
def _grouped_query_attention(vlm: VLM):
    """A decode step on the CPU with SDPA's grouped-query attention (``enable_gqa``) instead of transformers'
    copy of the keys and values to every query head (``repeat_kv``), which its sdpa path makes whenever a mask
    is given: the same numbers up to float32 rounding (bit-identical on the real-format checkpoints, 1.5e-7 in
    a tiny model's logits), and about 5 times less time in a decode step's attention at Qwen3-VL-2B's sizes on
    a 2-core CPU (24 rows x 3 queries x 720 keys: 137-147 against 669-739 ms per layer and step, load 12). Not
    on CUDA, where a masked grouped-query SDPA runs the math kernel. The switch is transformers' environment
    variable, set for the call only (under a lock: the model thread is its only user)."""
    on = (not str(vlm.device).startswith("cuda") and _mask_spec(vlm)[3] == "sdpa"
          and os.environ.get(_FORCE_GQA) is None)
    if not on:
        yield
        return
    with _GQA_LOCK:
        os.environ[_FORCE_GQA] = "1"
        try:
            yield
        finally:
            os.environ.pop(_FORCE_GQA, None)


def _oom_types():
    import torch

    return (torch.OutOfMemoryError,) if hasattr(torch, "OutOfMemoryError") else (torch.cuda.OutOfMemoryError,)


@dataclass
class _RowOut:
    letter_probs: np.ndarray  # (n_end, n_option_ids) float64: first-token probabilities of the option tokens
    top: np.ndarray  # (n_end,) int64: most probable first token
    tokens: list  # per gen_end: generated token ids (up to and including the first EOS)
    eos: list  # per gen_end: True if stopped at an end-of-sequence token, False at the token limit
    probs: np.ndarray | None = None  # (n_end, vocab) float64 when asked (tests)
    branch: _RowOut | None = None  # the output of the row's branch (the verbal wordings), if it has one


def _run_batch(vlm: VLM, batch: _Batch, opt_ids, max_new: int, stats: EngineStats,
               keep_probs: bool = False) -> list[_RowOut]:
    """Prefill the collated rows (vision included), read the first-token distributions, decode the continuations;
    then the rows' branches (the verbal wordings) on the cached shared prefixes (:func:`_run_branches`)."""
    import torch
    from transformers import DynamicCache

    dev = vlm.device
    nb = dev.startswith("cuda")
    ids = batch.ids.to(dev, non_blocking=nb)
    pos = batch.pos.to(dev, non_blocking=nb)
    depth = batch.depth.to(dev, non_blocking=nb)
    tree = batch.tree.to(dev, non_blocking=nb)
    vblock = batch.vblock.to(dev, non_blocking=nb)
    vision = {k: v.to(dev, non_blocking=nb, dtype=vlm.dtype if v.is_floating_point() else None)
              for k, v in batch.vision.items()}
    B, L, E = ids.shape[0], batch.L, batch.E
    cache = DynamicCache()
    masks = _masks(vlm, tree, depth, depth, vblock, vblock)
    out = vlm.model(input_ids=ids, attention_mask=masks, position_ids=pos, cache=cache, use_cache=True,
                    logits_to_keep=E, **vision)
    stats.forward_calls += 1
    logits = [out.logits.float()]  # (B, E, V), handed over: freed before the decode
    del out, masks
    outs, kept = _read_and_decode(vlm, logits, cache, batch.rows, tree, depth, depth, pos, L, E, opt_ids, max_new,
                                  stats, keep_probs)
    _count_prefill(stats, batch, L)
    if batch.branches is not None:
        _run_branches(vlm, batch.branches, cache, kept, outs, opt_ids, max_new, stats, keep_probs)
    del cache
    return outs


def _count_prefill(stats: EngineStats, batch: _Batch, K: int) -> None:
    """Add a prefill's counters (``K`` keys per query: the row length, plus the cached prefix for branches)."""
    B, Q = int(batch.ids.shape[0]), batch.L
    stats.prefill_tokens += batch.real_tokens
    stats.prefill_slots += B * Q
    stats.attn_slots += B * Q * K
    stats.end_tokens += sum(r.n_end for r in batch.rows)
    stats.end_slots += B * batch.E
    stats.end_attn_slots += B * batch.E * K
    stats.attn_pairs += batch.attn_pairs
    stats.end_attn_pairs += batch.end_pairs
    stats.vision_tokens += batch.vision_tokens
    stats.image_tokens += batch.image_tokens
    stats.vision_attn_pairs += batch.vision_pairs
    stats.rows += B


def _read_and_decode(vlm: VLM, logits, cache, rows: Sequence[_Row], tree, qdepth, kdepth, pos, Q: int, E: int,
                     opt_ids, max_new: int, stats: EngineStats, keep_probs: bool) -> tuple[list[_RowOut], list[int]]:
    """First-token read-outs from a prefill's kept logits (``[tensor (B, E, V)]``: the list is emptied, so the
    logits are freed before the decode), then the greedy decode of its continuations.

    ``tree`` (B, Q, K) says which keys each of the prefill's Q queries attends to, ``qdepth`` (B, Q) and
    ``kdepth`` (B, K) are their depths, ``pos`` their positions ((B, Q) or (3, B, Q)); the queries are the last
    Q keys (K = Q for a row, K = P + Q for a branch on a cached prefix of P slots). Returns the rows' outputs and
    the batch indices of the rows the cache holds afterwards (rows without a continuation are dropped from it).
    """
    import torch

    dev = vlm.device
    logits = logits.pop()
    B = int(logits.shape[0])
    K = int(tree.shape[-1])
    opt = torch.as_tensor(opt_ids, device=dev)
    # softmax per row keeps the float32 temporaries at E x vocab
    letter = torch.empty((B, E, len(opt_ids)), dtype=torch.float32, device=dev)
    top = torch.empty((B, E), dtype=torch.long, device=dev)
    full = [] if keep_probs else None
    for b in range(B):
        p = torch.softmax(logits[b], dim=-1)
        letter[b] = p[:, opt]
        top[b] = torch.argmax(p, dim=-1)
        if keep_probs:
            full.append(p.double().cpu().numpy())
    first_tok = torch.argmax(logits, dim=-1)  # greedy first token, as the per-prompt engine takes it (logits)
    del logits

    # ---- decode: G continuations per row, one token each per step
    kept = list(range(B))
    gen_rows = [b for b, r in enumerate(rows) if r.gen_ends]
    tokens = {b: [[] for _ in rows[b].gen_ends] for b in range(B)}
    eos_hit = {b: [False] * len(rows[b].gen_ends) for b in range(B)}
    if gen_rows and max_new > 0:
        G = max(len(rows[b].gen_ends) for b in gen_rows)
        Bg = len(gen_rows)
        sel = torch.tensor(gen_rows, device=dev)
        if Bg != B:
            cache.batch_select_indices(sel)
            kept = gen_rows
        eidx = torch.zeros((Bg, G), dtype=torch.long)  # index among the kept final tokens
        real = torch.zeros((Bg, G), dtype=torch.bool)
        for i, b in enumerate(gen_rows):
            g = rows[b].gen_ends
            eidx[i, : len(g)] = torch.tensor(g)
            real[i, : len(g)] = True
        eidx, real = eidx.to(dev), real.to(dev)
        slot = Q - E + eidx  # query index of the prompt-final token in the row
        ar = torch.arange(Bg, device=dev)[:, None]
        dtree = tree[sel][ar, slot] & real[:, :, None]  # (Bg, G, K): ancestors of each continuation's prompt
        kdepth = kdepth[sel]
        qdepth0 = qdepth[sel][ar, slot]
        if pos.dim() == 3:
            qpos0 = pos[0][sel][ar, slot]  # the prompt-final token is text: its three M-RoPE axes are equal
        else:
            qpos0 = pos[sel][ar, slot]
        pad = vlm.tokenizer.pad_token_id if vlm.tokenizer.pad_token_id is not None else 0
        tok = torch.where(real, first_tok[sel][ar, eidx], torch.full_like(slot, int(pad)))
        eos = torch.tensor(sorted(eos_ids(vlm)) or [-1], device=dev)
        done = ~real | torch.isin(tok, eos)
        seq = [tok]
        eye = torch.eye(G, dtype=torch.bool, device=dev)[None].expand(Bg, G, G)
        n_real = int(real.sum())
        base_pairs = int(dtree[real].sum())  # each step adds one own-continuation key per real query
        for s in range(max_new - 1):
            if bool(done.all()):
                break
            qdepth = qdepth0 + 1 + s
            dtree = torch.cat([dtree, eye], dim=-1)
            kdepth = torch.cat([kdepth, qdepth], dim=-1)
            qp = qpos0 + 1 + s
            with _grouped_query_attention(vlm):
                o = vlm.model(input_ids=tok, attention_mask=_masks(vlm, dtree, qdepth, kdepth),
                              position_ids=qp[None].expand(3, -1, -1) if pos.dim() == 3 else qp,
                              cache=cache, use_cache=True)
            stats.forward_calls += 1
            stats.decode_tokens += n_real
            stats.decode_slots += Bg * G
            stats.decode_attn_pairs += base_pairs + (s + 1) * n_real
            stats.decode_attn_slots += Bg * G * (K + (s + 1) * G)
            tok = torch.argmax(o.logits.float(), dim=-1)
            del o
            seq.append(torch.where(done, torch.full_like(tok, -1), tok))
            done = done | torch.isin(tok, eos)
        gen = torch.stack(seq, dim=-1).cpu().numpy()  # (Bg, G, steps); -1 after a continuation has ended
        eos_set = set(eos_ids(vlm))
        for i, b in enumerate(gen_rows):
            for g in range(len(rows[b].gen_ends)):
                t = [int(x) for x in gen[i, g] if x >= 0]
                tokens[b][g] = t
                eos_hit[b][g] = bool(t) and t[-1] in eos_set
    letter_np = letter.double().cpu().numpy()
    top_np = top.cpu().numpy()
    outs = []
    for b, r in enumerate(rows):
        sl = slice(0, r.n_end)  # a row's final tokens fill the first n_end of the E kept slots
        outs.append(_RowOut(letter_np[b, sl], top_np[b, sl], tokens[b], eos_hit[b],
                            full[b][sl] if keep_probs else None))
    return outs, kept


def _keep_prefix(cache, index: Sequence[int], P: int) -> None:
    """Keep only the cached keys and values of the first ``P`` slots of the rows ``index`` (in that order)."""
    import torch

    for layer in getattr(cache, "layers", ()):
        k, v = getattr(layer, "keys", None), getattr(layer, "values", None)
        if k is None or v is None or k.dim() != 4 or k.shape[-2] == 0:  # not initialised (e.g. KV-sharing layers)
            continue
        sel = torch.as_tensor(list(index), device=k.device)
        layer.keys, layer.values = k[:, :, :P][sel], v[:, :, :P][sel]  # copies only the kept part


def _run_branches(vlm: VLM, br: _Batch, cache, kept: Sequence[int], outs: list[_RowOut], opt_ids, max_new: int,
                  stats: EngineStats, keep_probs: bool) -> None:
    """Prefill and decode the rows' branches (the verbal wordings) on their core rows' cached shared prefixes.

    The cache holds the core rows ``kept`` (after their decode); it is cut to the ``P`` slots of the prefill
    (:attr:`_Batch.prefix`, the core rows' length) of the rows with a branch, whose queries attend to their
    ancestors there (:attr:`_Row.pre`: the chat head, the image, the system text, a question's stem) and in the
    branch. Each core output gets its branch's output (``.branch``).
    """
    dev = vlm.device
    nb = dev.startswith("cuda")
    P = br.prefix
    _keep_prefix(cache, [kept.index(b) for b in br.core_index], P)
    ids = br.ids.to(dev, non_blocking=nb)
    pos = br.pos.to(dev, non_blocking=nb)
    depth = br.depth.to(dev, non_blocking=nb)
    tree = br.tree.to(dev, non_blocking=nb)  # (Bv, Lb, P + Lb)
    kdepth = br.kdepth.to(dev, non_blocking=nb)  # (Bv, P + Lb)
    out = vlm.model(input_ids=ids, attention_mask=_masks(vlm, tree, depth, kdepth), position_ids=pos, cache=cache,
                    use_cache=True, logits_to_keep=br.E)
    stats.forward_calls += 1
    logits = [out.logits.float()]
    del out
    bouts, _ = _read_and_decode(vlm, logits, cache, br.rows, tree, depth, kdepth, pos, br.L, br.E, opt_ids, max_new,
                                stats, keep_probs)
    _count_prefill(stats, br, P + br.L)
    for b, o in zip(br.core_index, bouts):
        outs[b].branch = o


def _run_rows(vlm: VLM, rows: Sequence[_Row], opt_ids, max_new: int, bucket: int, stats: EngineStats,
              keep_probs: bool = False, collated: _Batch | None = None) -> list[_RowOut]:
    """:func:`_run_batch` on the rows, splitting them in halves on an out-of-memory error.

    The ``except`` clause only records the failure: the failed batch (its collated host
    tensors and, through the exception's traceback, its device inputs, masks,
    activations, KV cache and logits) is released outside it, then ``gc.collect()``
    and, on CUDA, ``torch.cuda.empty_cache()`` run, and only then are the halves run
    (the PyTorch FAQ's "my out of memory exception handler can't allocate memory").
    Halves run left first, iteratively: at most ``2 * len(rows) - 1`` forward batches,
    outputs in row order.

    Parameters
    ----------
    vlm : VLM
    rows : sequence of _Row
        The rows of one forward (one row per unit).
    opt_ids : list of int
        All option-letter token ids (:func:`_option_ids`).
    max_new : int
        Greedy decode steps of the continuations.
    bucket : int
        Row lengths are padded to multiples of this many tokens.
    stats : EngineStats
        Counters to add to (:attr:`EngineStats.oom_splits` counts the splits).
    keep_probs : bool
        Keep every prompt-final token's full distribution (tests).
    collated : _Batch, optional
        ``rows`` already collated (by a preparing worker). Pass the only reference
        to it: it is dropped when its forward fails, before the halves run.

    Returns
    -------
    list of _RowOut
        One per row, in the order of ``rows``.

    Raises
    ------
    torch.OutOfMemoryError
        If a single row does not fit; the message names the settings that make it fit.
    """
    import torch

    rows = list(rows)
    batch, collated = collated, None  # the caller's reference is gone (_run_prepared pops it): ours is the only one
    todo = [(0, len(rows))]  # row ranges still to run, the next one last
    outs: list[_RowOut] = []
    while todo:
        lo, hi = todo.pop()
        failed = None
        try:
            if batch is None:
                batch = _collate(vlm, rows[lo:hi], bucket)
            with torch.inference_mode():
                got = _run_batch(vlm, batch, opt_ids, max_new, stats, keep_probs)
        except _oom_types() as e:  # record only: the halves must not run while this frame holds the failed batch
            failed = (str(e).strip().splitlines() or [type(e).__name__])[0]
            _drop_traceback(e)
            del e
        batch = None
        if failed is None:
            outs.extend(got)
            got = None
            continue
        _free_after_oom(vlm)
        if hi - lo == 1:
            raise _oom_types()[0](_one_row_oom_message(vlm, rows[lo], failed))
        h = (hi - lo) // 2
        stats.oom_splits += 1
        log.warning("out of memory with a batch of %d rows: splitting it into %d + %d (these rows can differ from "
                    "an unsplit run by floating-point rounding)", hi - lo, h, hi - lo - h)
        todo += [(lo + h, hi), (lo, lo + h)]
    return outs


def _drop_traceback(e: BaseException) -> None:
    """Release what a caught exception's traceback holds: the locals of the finished frames, then the traceback."""
    import traceback

    traceback.clear_frames(e.__traceback__)  # the frame still running (the handler's) is skipped
    e.__traceback__ = None
    e.__context__ = e.__cause__ = None


def _free_after_oom(vlm: VLM) -> None:
    """Return the failed batch's memory: collect reference cycles, then hand cached CUDA blocks back."""
    import gc

    import torch

    gc.collect()
    if str(vlm.device).startswith("cuda") and torch.cuda.is_available():
        torch.cuda.empty_cache()


def _one_row_oom_message(vlm: VLM, row: _Row, error: str) -> str:
    """One line: a single unit does not fit in the device's memory, and the settings that make it fit."""
    cuda = str(vlm.device).startswith("cuda")
    dtype = str(vlm.dtype).replace("torch.", "")
    key = "readout.dtype_gpu" if cuda else "readout.dtype_cpu"
    smaller = f"set {key}: bfloat16 in data/config.yaml (now {dtype}), or " if dtype == "float32" else ""
    return (f"out of memory reading out one unit of {vlm.model_id} on {vlm.device} (a row of {row.n} tokens, "
            f"{row.n_image_tokens} of them image tokens from {row.n_vision} vision patches; {dtype}) alone in its "
            f"forward pass: {error.rstrip('.')}. Nothing of this batch was written (images written before it are kept; rerunning resumes after them). "
            f"images_per_batch cannot help (the batch was already split down to one unit): free the device's "
            f"memory (other processes on it), or {smaller}lower render.max_side_px in data/config.yaml (now "
            f"{vlm.max_side_px} px: fewer vision tokens), or run the read-out on a device with more memory "
            f"(the device setting)")


def _option_ids(vlm: VLM) -> tuple[list[int], dict[str, list[int]]]:
    """All option-letter token ids (flat, in a fixed order) and each letter's positions in that list."""
    flat: list[int] = []
    where: dict[str, list[int]] = {}
    for L_, ids in vlm.option_tokens.items():
        where[L_] = list(range(len(flat), len(flat) + len(ids)))
        flat.extend(int(i) for i in ids)
    return flat, where


def _unit_readouts(vlm: VLM, pu: _PreparedUnit, outs: Sequence[_RowOut | None], where) -> dict:
    """Read-outs of one unit (:func:`murk.unit.item_readouts`) from its rows' outputs."""
    slots: list = []
    p: list = []
    tops: list = []
    conts: list = []
    stops: list = []
    for group, row, o in zip(pu.slots, pu.kind_rows, outs):
        if not group:
            continue
        for j, s in enumerate(group):
            e = row.end_of_prompt[j]
            p.append(np.array([o.letter_probs[e, where[L_]].sum() for L_ in s.letters], dtype=np.float64))
            tops.append(vlm.tokenizer.decode([int(o.top[e])]))
            if s.generate:
                g = row.gen_ends.index(e)
                conts.append(vlm.tokenizer.decode(o.tokens[g], skip_special_tokens=True))
                stops.append(VERBAL_STOP_EOS if o.eos[g] else VERBAL_STOP_LIMIT)
            else:
                conts.append(None)
                stops.append(float("nan"))
            slots.append(s)
    return item_readouts(pu.unit.questions, slots, p, tops, conts, stops)


def _run_prepared(vlm: VLM, prepared: Sequence[_PreparedUnit], cfg: Mapping[str, Any], stats: EngineStats,
                  bucket: int, keep_probs: bool = False, collated: dict[int, _Batch | None] | None = None
                  ) -> list:
    """The model's part for prepared units: batched rows in one forward per row kind, fallback units one by one.

    Returns per unit ``[core row output, verbal row output]`` (:class:`_RowOut` or None), or, for a fallback
    unit (every prompt run whole, :func:`murk.whole.read_unit`), its read-outs (a dict). ``collated`` holds
    rows already collated by a worker (``{0: core, 1: verbal}``); each entry is popped as its rows run, so
    that a batch that runs out of memory is freed before its halves run (:func:`_run_rows`).
    """
    import torch

    max_new = int(cfg.get("readout", {}).get("verbal_max_new_tokens", 12))
    opt_ids, _ = _option_ids(vlm)
    outs: list = [[None, None] for _ in prepared]
    for kind in (0, 1):  # core rows, then the verbal-wording rows in a forward of their own
        which = [i for i, pu in enumerate(prepared) if pu.fallback is None and pu.rows[kind] is not None]
        if not which:
            continue
        ro = _run_rows(vlm, [prepared[i].rows[kind] for i in which], opt_ids, max_new, bucket, stats, keep_probs,
                       collated=None if collated is None else collated.pop(kind, None))
        for i, o in zip(which, ro):
            outs[i][kind] = o
            if kind == 0 and o.branch is not None:  # the verbal wordings, read as a branch of the core row
                outs[i][1] = o.branch
    for i, pu in enumerate(prepared):
        if pu.fallback is not None:
            u = pu.unit
            with torch.inference_mode():
                outs[i] = whole.read_unit(vlm, u.image, u.questions, cfg, verbal_variants=u.verbal_variants)
            stats.fallback_units += 1
        else:
            stats.prompts += sum(len(g) for g in pu.slots)
    stats.units += len(prepared)
    stats.batches += 1
    return outs


def _assemble(vlm: VLM, prepared: Sequence[_PreparedUnit], outs: Sequence) -> list[dict]:
    """Per unit, ``{task: readouts}`` from :func:`_run_prepared`'s outputs (host work, off the model thread)."""
    _, where = _option_ids(vlm)
    return [o if isinstance(o, dict) else _unit_readouts(vlm, pu, o, where) for pu, o in zip(prepared, outs)]


def _read_prepared(vlm: VLM, prepared: Sequence[_PreparedUnit], cfg: Mapping[str, Any], stats: EngineStats,
                   bucket: int, keep_probs: bool = False) -> list[tuple[dict, list | None]]:
    """Read-outs of prepared units (synchronously), with the rows' outputs when ``keep_probs``."""
    outs = _run_prepared(vlm, prepared, cfg, stats, bucket, keep_probs)
    return [(r, (o if keep_probs and not isinstance(o, dict) else None))
            for r, o in zip(_assemble(vlm, prepared, outs), outs)]


def read_units(vlm: VLM, units: Sequence[Unit], config: Mapping[str, Any] | None = None,
               length_bucket: int = 32, stats: EngineStats | None = None) -> list[dict[str, dict[str, Any]]]:
    """Read out a batch of units together (synchronously; :func:`read_images` pipelines this).

    Parameters
    ----------
    vlm : VLM
        From :func:`murk.vlm.load_vlm`.
    units : sequence of Unit
        One scheduled batch (all units run in one forward per row kind).
    config : dict, optional
        Study configuration (prompt templates, ``readout.assistant_prefill``,
        ``readout.verbal_max_new_tokens``).
    length_bucket : int
        Row lengths are padded to multiples of this many tokens.
    stats : EngineStats, optional
        Counters to add to.

    Returns
    -------
    list of dict
        Per unit, ``{task: readouts}`` (:func:`murk.unit.item_readouts`: every key of
        :data:`murk.cube.READOUTS` and :data:`murk.cube.TEXT_READOUTS`).

    Raises
    ------
    ValueError
        If a unit's ``verbal_variants`` lacks ``"v1"`` or names an unknown wording.
    """
    cfg = load_config() if config is None else config
    st = stats if stats is not None else EngineStats()
    support = batching_support(vlm)
    prepared = [_prepare_unit(vlm, u, cfg, support) for u in units]
    return [r for r, _ in _read_prepared(vlm, prepared, cfg, st, length_bucket)]


def _read_units_with_probs(vlm, units, config=None, length_bucket: int = 32):
    """Tests: read-outs plus each prompt's full first-token distribution, in :func:`murk.unit.item_prompts` order."""
    cfg = load_config() if config is None else config
    st = EngineStats()
    prepared = [_prepare_unit(vlm, u, cfg, batching_support(vlm)) for u in units]
    res = _read_prepared(vlm, prepared, cfg, st, length_bucket, keep_probs=True)
    out = []
    for pu, (r, outs) in zip(prepared, res):
        probs = []
        for group, row, o in zip(pu.slots, pu.kind_rows, outs or [None, None]):
            for j, _ in enumerate(group):
                probs.append(o.probs[row.end_of_prompt[j]])
        # back to item_prompts order
        order = item_prompts(pu.unit.questions, cfg, pu.unit.verbal_variants)
        flat = [s for g in pu.slots for s in g]
        idx = [flat.index(s) for s in order]
        out.append((r, np.stack([probs[i] for i in idx]) if probs else None))
    return out, st


# --------------------------------------------------------------------------- the pipelined iterator


@dataclass
class _PreparedImage:
    item: int
    units: list  # of _PreparedUnit
    missing: str | None = None


#: what ``load(item)`` may raise for bad input (missing or undecodable image, missing depth map): recorded
#: as the image's missing reason (PIL's ``UnidentifiedImageError`` is an OSError)
BAD_INPUT_ERRORS = (FileNotFoundError, ValueError, OSError)


def _prepare_image(vlm, item: int, load: Callable[[int], ImageJob], cfg, support) -> _PreparedImage:
    try:
        job = load(item)
    except BAD_INPUT_ERRORS as e:  # bad input: recorded by the caller, the run goes on
        return _PreparedImage(int(item), [], str(e))
    try:  # all conditions first: a failure anywhere in the rendering loses only this image
        conditions = [(str(arm), int(level), image) for arm, level, image in job.conditions]
    except Exception as e:  # noqa: BLE001 - e.g. a depth map of another shape: recorded, the run goes on
        return _PreparedImage(int(item), [], f"rendering failed: {type(e).__name__}: {e}")
    units = [_prepare_unit(vlm, Unit(int(item), arm, level, image, tuple(job.questions),
                                     tuple(job.verbal_variants)), cfg, support)
             for arm, level, image in conditions]
    return _PreparedImage(int(item), units)


_STOP = object()


# --------------------------------------------------------------------------- preparation in worker processes


def job_cpus() -> int:
    """The CPUs this job was given: the process's CPU affinity, and ``SLURM_CPUS_PER_TASK`` when set (the smaller).

    ``os.cpu_count()`` counts the whole node; a SLURM job (or a ``taskset``) may hold a few of its CPUs only.

    Returns
    -------
    int
        ``>= 1``. A ``SLURM_CPUS_PER_TASK`` that is not a positive integer is ignored (logged).
    """
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - no affinity on this platform
        n = os.cpu_count() or 1
    slurm = os.environ.get("SLURM_CPUS_PER_TASK", "").strip()
    if slurm:
        if slurm.isdigit() and int(slurm) > 0:
            n = min(n, int(slurm))
        else:
            log.warning("SLURM_CPUS_PER_TASK=%r is not a positive integer: ignored (the CPU affinity gives %d)",
                        slurm, n)
    return max(1, n)


class _BorrowedMethods:
    """A model's config and its methods, without its weights: what ``get_rope_index`` reads (Qwen-VL's M-RoPE
    positions depend on the config and the token ids only). Picklable: the class travels by reference."""

    def __init__(self, cls: type, config: Any) -> None:
        self.cls = cls
        self.config = config

    def __getattr__(self, name: str):
        cls = self.__dict__.get("cls")  # absent while unpickling
        f = getattr(cls, name, None) if cls is not None else None
        if callable(f):
            return f.__get__(self)
        raise AttributeError(name)


@dataclass
class _ModelView:
    """What preparation reads of ``VLM.model``: its config, and the inner model's ``get_rope_index`` (M-RoPE only)."""

    config: Any
    model: Any = None


def _prep_view(vlm: VLM) -> VLM:
    """A picklable copy of ``vlm`` for preparation: processor, tokenizer and settings, the model replaced by its
    config (:class:`_ModelView`); never the weights. Its device is the host: a worker never starts CUDA."""
    inner = getattr(vlm.model, "model", None)
    borrowed = _BorrowedMethods(type(inner), inner.config) if is_mrope(vlm) else None
    return dataclasses.replace(vlm, model=_ModelView(vlm.model.config, borrowed), device="cpu")


def _unshippable(obj: Any) -> str | None:
    """Why ``obj`` cannot be sent to a worker process (None if it can): it does not pickle, or it refers to a
    function or class of a ``__main__`` that a new process cannot import (a notebook, an interactive session)."""
    import io
    import pickle
    import sys

    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    importable_main = bool(main_file) and str(main_file).endswith(".py")

    class _Check(pickle.Pickler):
        def reducer_override(self, o):
            if not importable_main and getattr(o, "__module__", None) == "__main__":
                raise pickle.PicklingError(f"{getattr(o, '__qualname__', o)!r} is defined in __main__ (a notebook "
                                           f"or an interactive session), which a worker process cannot import")
            return NotImplemented

    try:
        _Check(io.BytesIO(), protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    except Exception as e:  # noqa: BLE001 - any failure to pickle means: prepare in threads
        return f"{type(e).__name__}: {e}"
    return None


#: the preparation state of a worker process (set once by :func:`_worker_start`)
_WORKER: dict[str, Any] = {}


def _worker_start(view: VLM, load: Callable[[int], ImageJob], cfg: Mapping[str, Any], support: str | None) -> None:
    """Initializer of a preparing process: one thread for torch (the processes are the parallelism)."""
    import torch

    torch.set_num_threads(1)
    _WORKER.update(vlm=view, load=load, cfg=cfg, support=support)


def _vision_as(im: _PreparedImage, convert) -> _PreparedImage:
    """``im`` with every row's vision inputs converted (in place)."""
    for u in im.units:
        for r in u.rows:
            if r is not None:
                r.vision = {k: convert(v) for k, v in r.vision.items()}
    return im


def _tensor_to_array(t) -> tuple[np.ndarray, bool]:
    """A tensor as a numpy array of the same bytes (bfloat16 as int16), and whether it was bfloat16."""
    import torch

    bf16 = t.dtype == torch.bfloat16
    return (t.view(torch.int16) if bf16 else t).numpy(), bf16


def _array_to_tensor(packed: tuple[np.ndarray, bool]):
    import torch

    a, bf16 = packed
    t = torch.from_numpy(a if a.flags.writeable else a.copy())
    return t.view(torch.bfloat16) if bf16 else t


def _worker_prepare(item: int) -> bytes:
    """One image prepared in a worker process, pickled with its tensors as numpy arrays (one copy each way, no
    per-tensor serialisation)."""
    import pickle

    w = _WORKER
    im = _prepare_image(w["vlm"], item, w["load"], w["cfg"], w["support"])
    return pickle.dumps(_vision_as(im, _tensor_to_array), protocol=5)


def _received(data: bytes) -> _PreparedImage:
    import pickle

    return _vision_as(pickle.loads(data), _array_to_tensor)


def _process_pool(nw: int, vlm: VLM, load, cfg, support):
    """A pool of ``nw`` preparing processes ('forkserver': no fork of a process whose torch threads run), or
    (None, reason) when what they need cannot be sent to them."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    view = _prep_view(vlm)
    why = _unshippable((view, load, cfg, support))
    if why is not None:
        return None, why
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":  # the server imports torch, transformers and the processor's modules once (before
        # any torch thread starts), so that a worker starts by a fork of it instead of importing them again
        inner = getattr(vlm.model, "model", None)
        mods = {"murk.engine", type(vlm.processor).__module__, type(vlm.tokenizer).__module__, type(inner).__module__,
                *(type(getattr(vlm.processor, a)).__module__ for a in ("image_processor", "tokenizer")
                  if getattr(vlm.processor, a, None) is not None)}
        ctx.set_forkserver_preload(["__main__", *sorted(m for m in mods if m.split(".")[0] in ("murk", "transformers"))])
    return ProcessPoolExecutor(max_workers=nw, mp_context=ctx, initializer=_worker_start,
                               initargs=(view, load, cfg, support)), None


def read_images(vlm: VLM, batches: Iterable[Sequence[int]], load: Callable[[int], ImageJob], *,
                config: Mapping[str, Any] | None = None, done: Container[int] = (), workers: int | None = None,
                prefetch: int | None = None, length_bucket: int = 32, progress: bool | str = True,
                stats: EngineStats | None = None) -> Iterator[ImageResult]:
    """Read out scheduled batches of images, the CPU work overlapping with the model.

    Preparing workers call ``load(item)`` (reading the image and depth, and usually
    returning :func:`murk.render.render_conditions` as the conditions), render the
    conditions and run the processor and the token trees of every unit, one image
    per task; a feeder thread collates each scheduled batch; collated batches wait
    in a bounded queue; one model thread runs them in schedule order; this
    generator yields each image once all its conditions are read, so the caller
    writes it (:func:`murk.cube.write_image`) while the model reads the next batch.
    An image counts as done only after the caller has written it.

    With ``workers >= 2`` the workers are processes ('forkserver' start, one torch
    thread each), so preparation does not share the model's interpreter lock: each
    gets, once, a copy of the processor, tokenizer and settings with the model
    replaced by its config (never the weights), and ``load``; prepared images come
    back pickled (numpy arrays and tensors by value). When ``load`` or the
    processor cannot be sent to a process (a closure, a function defined in a
    notebook: use a module-level callable object such as :class:`ItemJobs`), the
    workers are threads of this process, as they are with ``workers <= 1``; the
    read-outs are the same bit for bit either way.

    Parameters
    ----------
    vlm : VLM
    batches : iterable of sequence of int
        Scheduled batches of global item indices (:func:`plan`); each is one batch
        of ``len(batch) * N_CONDITIONS`` units.
    load : callable
        ``load(item) -> ImageJob``; a :class:`FileNotFoundError`,
        :class:`ValueError` or :class:`OSError` (:data:`BAD_INPUT_ERRORS`: missing
        or undecodable image, missing depth) makes the image's result carry
        ``missing_reason`` (the error's message), and the run goes on. An error
        while the conditions are rendered (consuming ``ImageJob.conditions``, e.g.
        a depth map of another shape than the image) is recorded likewise, as
        ``"rendering failed: <type>: <message>"``.
    config : dict, optional
    done : container of int
        Items already written: read again with their batch (so that their
        batch-mates see the same batch) but not yielded.
    workers : int, optional
        Preparing workers: processes when ``>= 2``, else one thread. Default with
        CUDA: the CPUs the job was given (:func:`job_cpus`: affinity and
        ``SLURM_CPUS_PER_TASK``) minus one for the model thread; on a CPU device 1
        (the model's own threads use the cores).
    prefetch : int, optional
        Batches prepared ahead (what bounds the host memory: at most ``prefetch``
        batches' images in preparation or prepared, besides the two collated batches
        waiting for the model); default ``max(2, ceil(workers / images per batch) + 1)``,
        enough to keep every worker busy.
    length_bucket : int
        Row lengths are padded to multiples of this many tokens.
    progress : bool or str
        A progress bar in units per second (:func:`murk.progress.bar`; a str is its description).
    stats : EngineStats, optional
        Counters to add to (model and wait seconds included).

    Yields
    ------
    ImageResult
        In schedule order, one per item of ``batches`` not in ``done``.
    """
    from murk.progress import bar as progress_bar

    cfg = load_config() if config is None else config
    st = stats if stats is not None else EngineStats()
    support = batching_support(vlm)
    if support is not None:
        log.warning("%s: batched read-out not possible (%s); every unit is read with every prompt run whole",
                    vlm.model_id, support)
    cuda = str(vlm.device).startswith("cuda")
    nw = max(1, int(workers) if workers is not None else (job_cpus() - 1 if cuda else 1))
    batches = [list(b) for b in batches]
    per_batch = max([len(b) for b in batches] or [1])
    depth_q = max(1, int(prefetch)) if prefetch is not None else max(2, -(-nw // per_batch) + 1)
    total = sum(N_CONDITIONS for b in batches for i in b if i not in done)
    pool, why = _process_pool(nw, vlm, load, cfg, support) if nw >= 2 else (None, None)
    if pool is None:
        if why is not None:
            log.info("preparing in %d threads, not processes: %s", nw, why)
        pool = ThreadPoolExecutor(max_workers=nw, thread_name_prefix="murk-prep")

        def prepare(i: int):
            return pool.submit(_prepare_image, vlm, i, load, cfg, support), lambda got: got
    else:
        def prepare(i: int):
            return pool.submit(_worker_prepare, i), _received
    ready: queue.Queue = queue.Queue(maxsize=2)
    results: queue.Queue = queue.Queue(maxsize=2)  # batches read, waiting for the consumer
    stop = threading.Event()

    def put(q_: queue.Queue, item) -> None:
        while not stop.is_set():
            try:
                q_.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def collate(imgs):
        units = [u for im in imgs for u in im.units]
        collated = {}
        for kind in (0, 1):
            rows = [u.rows[kind] for u in units if u.fallback is None and u.rows[kind] is not None]
            collated[kind] = _collate(vlm, rows, length_bucket) if rows else None
        return imgs, collated

    def feeder():
        try:  # images are prepared one per task, ``depth_q`` batches ahead; batches are collated in order
            it = iter(batches)
            futs = collections.deque([prepare(i) for i in b] for b in itertools.islice(it, depth_q))
            while futs and not stop.is_set():
                imgs = [unpack(f.result()) for f, unpack in futs.popleft()]
                nxt = next(it, None)
                if nxt is not None:
                    futs.append([prepare(i) for i in nxt])
                put(ready, collate(imgs))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            put(ready, e)
            return
        put(ready, _STOP)

    def model_loop():
        try:
            while not stop.is_set():
                t0 = time.perf_counter()
                got = None
                while got is None:
                    try:
                        got = ready.get(timeout=0.2)
                    except queue.Empty:
                        if stop.is_set():
                            return
                t1 = time.perf_counter()
                st.wait_s += t1 - t0
                if got is _STOP or isinstance(got, BaseException):
                    put(results, got)
                    return
                imgs, collated = got
                units = [u for im in imgs for u in im.units]
                outs = _run_prepared(vlm, units, cfg, st, length_bucket, collated=collated)
                t2 = time.perf_counter()
                st.model_s += t2 - t1
                put(results, (imgs, outs))
                st.wait_s += time.perf_counter() - t2  # a full output queue: the model waits for the consumer
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            put(results, e)

    def image_results(imgs, outs) -> list[ImageResult]:
        units = [u for im in imgs for u in im.units]
        per_unit = _assemble(vlm, units, outs)
        out, k = [], 0
        for im in imgs:
            if im.missing is not None:
                out.append(ImageResult(im.item, None, im.missing))
                continue
            res: dict = {}
            fb: list[str] = []
            for u in im.units:
                for task, r in per_unit[k].items():
                    res[(u.unit.arm, u.unit.level, task)] = r
                if u.fallback is not None:
                    fb.append(f"{u.unit.arm}/{u.unit.level}: {u.fallback}")
                k += 1
            out.append(ImageResult(im.item, res, None, fb))
        return out

    threads = [threading.Thread(target=feeder, name="murk-feed", daemon=True),
               threading.Thread(target=model_loop, name="murk-model", daemon=True)]
    for t in threads:
        t.start()
    bar = progress_bar(total=total, unit="unit", desc=progress if isinstance(progress, str) else "readout",
                       disable=not progress, smoothing=0.1)
    try:
        while True:
            got = results.get()
            if got is _STOP:
                break
            if isinstance(got, BaseException):
                raise got
            for res in image_results(*got):
                if res.item in done:
                    continue
                st.images += 1
                bar.update(len({(a, lv) for a, lv, _ in res.results}) if res.results is not None else 0)
                yield res
    finally:
        stop.set()
        bar.close()
        for q_ in (ready, results):  # unblock threads waiting on a full queue
            try:
                while True:
                    q_.get_nowait()
            except queue.Empty:
                pass
        pool.shutdown(wait=False, cancel_futures=True)
        for t in threads:  # the batch in flight finishes before the caller goes on (device memory, timing)
            t.join(timeout=120)
