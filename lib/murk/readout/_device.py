"""The batched engine on the device: rows collated into a batch, the tree's attention masks, one forward pass and
the greedy decoding of the letters and the verbal answers (:func:`_read_and_decode`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from murk.readout import _architectures as architectures
from murk.readout._rows import _Row
from murk.readout._schedule import EngineStats
from murk.readout._vlm import VLM, eos_ids


#: text-model types whose forward takes a mapping {layer type: 4-D mask} (needed for sliding-window layers)
_MASK_MAPPING_TEXT_TYPES = {"gemma4_text", "gemma3_text", "qwen3", "qwen2"}


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

