"""The per-unit shared-prefix engine: the baseline the batched engine is measured against.

**Not on the production path**: the read-out stage runs :mod:`murk.readout` (many
units per forward pass), which falls back to :mod:`murk.readout` (every prompt run
whole) where it cannot batch. This module is the earlier engine, kept as the named
baseline of ``benchmarks/readout.py`` (``shared`` vs ``separate``, and the batched
engine's ``batched_ratio``) and as a second, independent way of computing the same
numbers in the tests.

One unit at a time (:func:`read_item`): the image is encoded once and the shared
prefix (chat head, image tokens and any text common to the prompts) is prefilled
once; the prompts' tails are scored as one right-padded batch on copies of the
cached prefix, and the rows that ask for a continuation are greedy-decoded together
(:func:`score_prompts`). What a unit asks and records is :mod:`murk.readout`'s (the
same :func:`murk.readout.item_prompts`, :func:`murk.readout.verbal_groups` and, through
:func:`murk.readout.readouts_from_scores`, :func:`murk.readout.item_readouts` as every
engine); the kernels are :mod:`murk.readout`'s.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from murk.core import load_config
from murk.protocol import Question
from murk.readout import continuation_stop, item_prompts, verbal_groups
from murk.readout import (MM_KEYS_PER_ROW, VLM, build_prompt_text, common_prefix_len, eos_ids, image_inputs,
                          image_token_id, is_mrope, present_image, sliding_window, softmax32)
from murk.readout import readouts_from_scores

__all__ = ["PromptScores", "score_prompts", "read_item"]


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


def _prefix_forward(vlm: VLM, enc: Any, prefix_ids: list[int]):
    """Prefill the shared prefix (image included) once. Returns (cache, next position, vision tokens)."""
    import torch

    k = len(prefix_ids)
    ids = torch.tensor([prefix_ids], dtype=torch.long, device=vlm.device)
    mask = torch.ones_like(ids)
    kwargs: dict[str, Any] = {k_: v for k_, v in enc.items() if k_ in MM_KEYS_PER_ROW or k_ == "image_grid_thw"}
    if "mm_token_type_ids" in enc:
        mm = enc["mm_token_type_ids"][:, :k]
        if mm.shape[1] < k:  # a prompt longer than the encoded first one: its extra tokens are text (0)
            mm = torch.cat([mm, mm.new_zeros((mm.shape[0], k - mm.shape[1]))], dim=1)
        kwargs["mm_token_type_ids"] = mm
    if is_mrope(vlm):
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
    return pos[None].expand(3, -1, -1) if is_mrope(vlm) else pos


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
        eos = eos_ids(vlm)
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
        User turns (from :func:`murk.protocol.render_prompt`); each becomes
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
    enc, ids = image_inputs(vlm, texts, pil)
    img_id = image_token_id(vlm)
    window = sliding_window(vlm)

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
            k = min(common_prefix_len(gids), min(len(i) for i in gids) - 1)
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

    probs = softmax32(torch.stack(rows))
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
    return readouts_from_scores(vlm, questions, slots, scores.probs, scores.continuations, scores.stops)
