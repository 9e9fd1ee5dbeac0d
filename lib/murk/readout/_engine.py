"""Batched read-out engine: many (image, condition) units per forward pass.

A **unit** is one image under one condition with all its prompts (spec Sec. III:
each of t2, t3_true and t3_false in the variants main / abstain / abstain2, 9
prompts; plus the main prompt in the verbal wordings v2 / v3 on the items that
ask them). The per-unit baseline (:func:`benchmarks.baseline.read_item`, measured
against in ``benchmarks/readout.py``) reads one unit at a time: one vision pass,
one prefill, one batch of prompt tails and 11 greedy decode steps of 3 rows, about
13 small forward calls per unit. This engine, the read-out stage's, reads a whole
scheduled batch of units with about ``verbal_max_new_tokens`` forward calls. What a
unit asks and records is :mod:`murk.readout`'s (:func:`murk.readout.item_prompts`,
:func:`murk.readout.verbal_groups`, :func:`murk.readout.item_readouts`); the model kernels
are :mod:`murk.readout`'s public ones. This module only schedules and computes:

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
own, :func:`murk.readout.score_whole` and :func:`benchmarks.baseline.score_prompts` with
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
(:func:`murk.readout.read_unit`: transformers' own forward and ``generate``, the
reference the engines are tested against) and the reason is recorded in
:attr:`ImageResult.fallbacks` and :attr:`EngineStats.fallback_units`.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from murk.core import load_config
from murk.readout import _reference as reference
from murk.readout._device import _Batch, _RowOut, _collate, _oom_types, _run_batch
from murk.readout._item_readouts import item_prompts, item_readouts
from murk.readout._memory import batching_support
from murk.readout._rows import _PreparedUnit, _Row, _prepare_unit
from murk.readout._schedule import EngineStats, ImageJob, ImageResult, N_CONDITIONS, Unit
from murk.readout._verbal import VERBAL_STOP_EOS, VERBAL_STOP_LIMIT
from murk.readout._vlm import VLM, is_mrope

log = logging.getLogger("murk")

__all__ = ["read_units", "read_images", "job_cpus", "BAD_INPUT_ERRORS"]


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
    """Read-outs of one unit (:func:`murk.readout.item_readouts`) from its rows' outputs."""
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
    unit (every prompt run whole, :func:`murk.readout.read_unit`), its read-outs (a dict). ``collated`` holds
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
                outs[i] = reference.read_unit(vlm, u.image, u.questions, cfg, verbal_variants=u.verbal_variants)
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
        From :func:`murk.readout.load_vlm`.
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
        Per unit, ``{task: readouts}`` (:func:`murk.readout.item_readouts`: every key of
        :data:`murk.readout.READOUTS` and :data:`murk.readout.TEXT_READOUTS`).

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
    """Tests: read-outs plus each prompt's full first-token distribution, in :func:`murk.readout.item_prompts` order."""
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
        mods = {"murk.readout", type(vlm.processor).__module__, type(vlm.tokenizer).__module__, type(inner).__module__,
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
    returning :func:`murk.scene.render_conditions` as the conditions), render the
    conditions and run the processor and the token trees of every unit, one image
    per task; a feeder thread collates each scheduled batch; collated batches wait
    in a bounded queue; one model thread runs them in schedule order; this
    generator yields each image once all its conditions are read, so the caller
    writes it (:func:`murk.results.write_image`) while the model reads the next batch.
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
        A progress bar in units per second (:func:`murk.core.bar`; a str is its description).
    stats : EngineStats, optional
        Counters to add to (model and wait seconds included).

    Yields
    ------
    ImageResult
        In schedule order, one per item of ``batches`` not in ``done``.
    """
    from murk.core import bar as progress_bar

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
