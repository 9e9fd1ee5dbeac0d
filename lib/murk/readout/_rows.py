"""The batched engine's rows, on the CPU: each unit's prompts as one tree of shared prefix and branches, with its
positions, token types and vision inputs (:func:`_prepare_unit`).
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from murk.readout import _architectures as architectures
from murk.readout._item_readouts import PromptSlot, item_prompts, verbal_groups
from murk.readout._schedule import Unit
from murk.readout._vlm import (VLM, build_prompt_text, common_prefix_len, image_inputs, image_token_id, is_mrope,
                               present_image)


#: the verbal wordings as a branch of the core row (False: a row of their own, with its own vision and prefix;
#: ``benchmarks/flops.py`` compares the two)
_BRANCHES = True
_VISION_KEYS = ("pixel_values", "pixel_attention_mask", "image_position_ids", "image_sizes", "image_grid_thw")


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
    (:func:`murk.readout.verbal_groups`)."""
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

