"""The batched engine's records (units, image jobs, results, statistics) and its schedule of units into batches.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["N_CONDITIONS", "Unit", "ImageJob", "ItemJobs", "ImageResult", "EngineStats", "schedule", "plan",
           "check_shard_alignment"]


#: conditions per image (:data:`murk.scene.CONDITIONS`: clean, 8 fog, 8 underwater, 5 ImageNet-C, blank, shuffled)
N_CONDITIONS = 24


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
        The condition's image, degraded and boxed (:func:`murk.scene.render_conditions`).
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
        Usually the generator :func:`murk.scene.render_conditions`; consumed by a
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
    (:func:`murk.scene.item_inputs`: image, depth, box, the shuffled control's
    partner) and returns its questions and its conditions as the generator
    :func:`murk.scene.render_conditions`, consumed by a preparing worker. Being
    picklable, it lets :func:`read_images` prepare in worker processes (a closure
    or a function defined in a notebook cannot be sent to one).

    Attributes
    ----------
    table : pandas.DataFrame
        The items (:func:`murk.protocol.read_items`); ``i`` is a row position.
    partner : sequence of int
        Each item's shuffled-control partner (:func:`murk.protocol.shuffled_partner`).
    image_dir, depth_folder : str
        The COCO image folder and the depth cache (:func:`murk.scene.current_depth`).
    config : dict
        Study configuration.
    seed : int
        The selection's seed (per-item randomness of the conditions).
    n_verbal_items : int
        Items ``i < n_verbal_items`` are asked the verbal wordings v1, v2, v3; the others v1 only.

    Raises
    ------
    FileNotFoundError, ValueError
        From :func:`murk.scene.item_inputs` on bad input (recorded as the image's missing reason).
    """

    table: Any
    partner: Sequence[int]
    image_dir: str
    depth_folder: str
    config: Mapping[str, Any]
    seed: int
    n_verbal_items: int = 0

    def __call__(self, i: int) -> ImageJob:
        from murk import protocol, scene

        row = self.table.iloc[i]
        x = scene.item_inputs(self.table, i, int(self.partner[i]), self.image_dir, self.depth_folder, self.config)
        conditions = scene.render_conditions(x["image"], x["depth_m"], x["bbox"], x["partner_image"],
                                              seed=int(self.seed), image_id=int(row["image_id"]),
                                              config=self.config)
        verbal = protocol.VERBAL_WORDINGS if i < int(self.n_verbal_items) else ("v1",)
        return ImageJob(protocol.questions_for_item(row, self.config), conditions, verbal)


@dataclass
class ImageResult:
    """Every read-out of one image, ready for :func:`murk.results.write_image`.

    Attributes
    ----------
    item : int
        Global item index.
    results : dict or None
        ``(arm, level, task) -> readouts`` for all conditions (None when the input
        was bad).
    missing_reason : str or None
        Why the image could not be read out (bad input; for
        :func:`murk.results.write_missing`).
    fallbacks : list of str
        ``"<arm>/<level>: <reason>"`` for each unit read with every prompt run whole
        (the fallback, :func:`murk.readout.read_unit`).
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
        Units read with every prompt run whole (the fallback, :func:`murk.readout.read_unit`).
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

