"""COCO item selection, distractors and the items hash (spec Section III).

Stage *select* of the pipeline: COCO annotation file -> one table of items.
An *item* is one image with one boxed target instance and the options of the
two tasks posed on it:

* t2 (identification): the target category and three distractors, shown in a
  seeded random order (chance 0.25);
* t3 (verification): "Is the object inside the red box a(n) <category>?",
  asked once with the true category and once with ``t3_distractor`` (one of
  the t2 distractors), in the manner of POPE (chance 0.5).

Every random choice that concerns one image is drawn from a generator seeded
by ``(seed, image_id)``, so that the items of a subset of images reproduce
whatever else was selected; only the draw of the images themselves uses the
generator seeded by ``seed`` alone. The frequencies that weight the draws are
computed over the whole candidate set and do not depend on the draw.

The target of an image is drawn with probability inversely proportional to
``freq(c)``, the number of *candidate images in which category c has at least
one boxable instance* (see :func:`select_items` for the exact rule and the
distractor weights).

The selection thresholds are read from ``items:`` of the study configuration
(``data/config.yaml``, spec Table III). :func:`selection_report` gives the
checks the outputs report (candidate count, the most-frequent-category
guesser, target shares); :func:`items_hash` the hash frozen with the run
(:func:`murk.core.freeze_run`).
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from murk import core
from murk.core import load_config

__all__ = ["BadBoxWarning", "BOX_BORDER_TOLERANCE_PX", "COLUMNS", "HASH_COLUMNS", "select_items", "selection_report",
           "shuffled_partner"]

#: Columns of the items table, in order.
COLUMNS: tuple[str, ...] = (
    "image_id",
    "file_name",
    "width",
    "height",
    "annotation_id",
    "category_id",
    "category",
    "supercategory",
    "bbox",
    "t2_options",
    "t2_answer_index",
    "t3_distractor",
)

#: The identifying columns hashed by :func:`items_hash`, in this order.
HASH_COLUMNS: tuple[str, ...] = (
    "image_id",
    "annotation_id",
    "category",
    "bbox",
    "t2_options",
    "t2_answer_index",
    "t3_distractor",
)

_INT_COLUMNS = ("image_id", "width", "height", "annotation_id", "category_id", "t2_answer_index")
_N_DISTRACTORS = 3  # t2 has four options: the target and three distractors (spec Sec. III)


# ----------------------------------------------------------------------------- reading


def _default_annotation_file() -> Path:
    return core.coco_dir() / "annotations" / "instances_val2017.json"


def _read_coco(annotation_file: Path) -> dict[str, Any]:
    if not annotation_file.is_file():
        raise FileNotFoundError(
            f"COCO annotation file {annotation_file} not found: set MURK_COCO_DIR to a COCO "
            f"folder holding annotations/instances_val2017.json, or pass the annotation file "
            f"explicitly (select_items(annotation_file=...))"
        )
    try:
        with open(annotation_file, encoding="utf-8") as f:
            coco = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        from murk.protocol._coco import ANNOTATIONS_MD5

        if isinstance(e, json.JSONDecodeError):
            detail = f" (line {e.lineno}, column {e.colno}: {e.msg})"
        else:
            detail = f" (not UTF-8 text: {e.reason})"
        raise ValueError(
            f"COCO annotation file {annotation_file} is not valid JSON{detail}. "
            f"It is truncated or damaged (an interrupted copy or download?). Replace it with the official "
            f"annotations/{annotation_file.name} from annotations_trainval2017.zip (MD5 {ANNOTATIONS_MD5}); "
            f"if murk downloaded it (outputs/coco/), delete it and run again to download it afresh"
        ) from None
    if not isinstance(coco, dict):
        raise ValueError(
            f"{annotation_file} is not a COCO instances file: expected a JSON object with "
            f"the keys 'images', 'annotations' and 'categories'"
        )
    for key in ("images", "annotations", "categories"):
        if key not in coco:
            raise ValueError(
                f"{annotation_file} is not a COCO instances file: the key {key!r} is missing "
                f"(expected 'images', 'annotations' and 'categories', as in "
                f"instances_val2017.json)"
            )
    return coco


# ----------------------------------------------------------------------------- checks of the annotations


class BadBoxWarning(UserWarning):
    """Annotations whose box cannot mark a target (zero or negative size, outside the image): never a target."""


#: How far (px) a box may reach past the image border and still count as inside it: COCO's boxes are
#: rounded to 1/100 px from the polygons, which lie inside the image (none of the shared sample's boxes,
#: val2017 or train2017, reaches past the border at all).
BOX_BORDER_TOLERANCE_PX = 1.0


def _ids(values, n: int = 5) -> str:
    values = list(values)
    return ", ".join(str(v) for v in values[:n]) + (f" and {len(values) - n} more" if len(values) > n else "")


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_)) \
        and bool(np.isfinite(v))


def _check_annotations(annotation_file: Path, anns: pd.DataFrame, cat_ids: np.ndarray,
                       images: pd.DataFrame) -> np.ndarray:
    """Refuse what no selection can be drawn from, and mark the boxes that cannot mark a target.

    Per case, what a user needs:

    * **An unknown category id** (an annotation whose ``category_id`` is not in the
      file's ``categories``) is refused: the category's name is what t2 and t3 ask
      about, and its presence in an image decides which categories may be shown there
      as distractors, so no correct item can be made without it. The official files
      never have one: the file was edited or merged by hand. The message names the
      file, the annotation ids and the fix.
    * **A box that is not four finite numbers** (``null``, text, a list of another
      length) is refused: the file was not written by COCO's tools (a converter
      bug, which rarely hits one annotation alone), and dropping such boxes would
      change the selection without a word.
    * **A box of zero or negative width or height, or outside its image** (by more
      than :data:`BOX_BORDER_TOLERANCE_PX`) is kept as an annotation (its category
      still counts as present in the image, so it is never a distractor there) but
      is never a target, with one :class:`BadBoxWarning` naming the file, the
      annotation ids and the fix: such boxes occur in real data sets (the marker
      cannot be drawn around them), and refusing them would make a whole split
      unusable for a few annotations. (Before issue 21 a box with a negative side was
      already never a target, by the 48-px side rule; a box outside the image could
      be, with its marker drawn off the target.)

    Returns
    -------
    numpy.ndarray
        bool (n_annotations,), aligned with ``anns``: the box can mark a target.

    Raises
    ------
    ValueError
        For an unknown category id or a box that is not four finite numbers.

    Warns
    -----
    BadBoxWarning
        For boxes of zero or negative size or outside their image.
    """
    known = set(int(c) for c in cat_ids)
    unknown = [(int(a), c) for a, c in zip(anns["id"], anns["category_id"])
               if not (_is_number(c) and float(c) == int(c) and int(c) in known)]
    if unknown:
        cats = sorted({str(c) for _, c in unknown})
        raise ValueError(
            f"{annotation_file}: annotation {unknown[0][0]} has category_id {unknown[0][1]!r}, which is not among "
            f"the file's categories ({len(unknown)} such annotation(s): ids {_ids(a for a, _ in unknown)}; category "
            f"id(s) {_ids(cats)}): add each such category to 'categories' (id, name, supercategory) or remove "
            f"those annotations, then run select again. The official annotations/{annotation_file.name} has none")
    bad = [int(a) for a, b in zip(anns["id"], anns["bbox"])
           if not (isinstance(b, (list, tuple)) and len(b) == 4 and all(_is_number(v) for v in b))]
    if bad:
        first = anns.loc[anns["id"] == bad[0], "bbox"].iloc[0]
        raise ValueError(
            f"{annotation_file}: annotation {bad[0]} has bbox {first!r}, not four finite numbers [x, y, width, "
            f"height] in px ({len(bad)} such annotation(s): ids {_ids(bad)}): write each box in COCO's format or "
            f"remove those annotations, then run select again")
    xywh = np.array([[float(v) for v in b] for b in anns["bbox"]], dtype=float).reshape(-1, 4)
    img_w = images["width"].reindex(anns["image_id"]).to_numpy(dtype=float)
    img_h = images["height"].reindex(anns["image_id"]).to_numpy(dtype=float)
    tol = BOX_BORDER_TOLERANCE_PX
    degenerate = (xywh[:, 2] <= 0) | (xywh[:, 3] <= 0)
    with np.errstate(invalid="ignore"):
        outside = ~degenerate & ((xywh[:, 0] < -tol) | (xywh[:, 1] < -tol) | (xywh[:, 0] + xywh[:, 2] > img_w + tol)
                                 | (xywh[:, 1] + xywh[:, 3] > img_h + tol))
    if degenerate.any() or outside.any():
        ids = anns["id"].to_numpy()
        parts = []
        if degenerate.any():
            parts.append(f"{int(degenerate.sum())} with a box of zero or negative width or height "
                         f"(annotation ids {_ids(ids[degenerate])})")
        if outside.any():
            parts.append(f"{int(outside.sum())} with a box reaching outside its image "
                         f"(annotation ids {_ids(ids[outside])})")
        warnings.warn(
            f"{annotation_file}: " + " and ".join(parts) + " are never a target (their categories still count "
            f"as present in their images, so they are never distractors there); to make them eligible, correct "
            f"their bbox ([x, y, width, height] px, inside the image's width and height)",
            BadBoxWarning, stacklevel=4)
    return ~(degenerate | outside)


# ----------------------------------------------------------------------------- selection


@dataclass(frozen=True)
class _Pool:
    """What :func:`select_items` derives from the whole candidate set."""

    annotation_file: Path
    candidates: np.ndarray  # (n_cand,) int64, sorted image ids
    images: pd.DataFrame  # indexed by image id
    present: pd.Series  # image id -> set of category ids annotated (crowd included)
    boxable_by_image: dict  # image id -> (annotation ids, category ids, bboxes) of boxable instances
    target_p: dict  # image id -> (k,) probabilities of its boxable instances
    target_freq: pd.Series  # category id -> freq(c) (candidate images with >= 1 boxable instance of c)
    distractor_weight: np.ndarray  # (n_categories,) unnormalised, aligned with cat_ids
    cat_ids: np.ndarray  # (n_categories,) sorted category ids
    cat_name: dict
    cat_super: dict


def _candidate_pool(annotation_file: str | os.PathLike | None, config: dict[str, Any] | None) -> _Pool:
    """Candidates, target probabilities and distractor weights (see :func:`select_items`)."""
    cfg = (load_config() if config is None else config)["items"]
    supercats = set(cfg["supercategories"])
    min_frac = float(cfg["min_box_area_fraction"])
    max_frac = float(cfg["max_box_area_fraction"])
    min_side = float(cfg["min_box_side_px"])

    annotation_file = Path(annotation_file) if annotation_file is not None else _default_annotation_file()
    coco = _read_coco(annotation_file)

    cats = pd.DataFrame(coco["categories"], columns=["id", "name", "supercategory"])
    cats = cats.sort_values("id", kind="stable").reset_index(drop=True)
    images = pd.DataFrame(coco["images"], columns=["id", "file_name", "width", "height"])
    images = images.set_index("id").sort_index(kind="stable")
    anns = pd.DataFrame(
        coco["annotations"], columns=["id", "image_id", "category_id", "bbox", "iscrowd"]
    )
    anns = anns.sort_values("id", kind="stable").reset_index(drop=True)
    anns["iscrowd"] = anns["iscrowd"].fillna(0).astype(int)

    cat_name = dict(zip(cats["id"], cats["name"]))
    cat_super = dict(zip(cats["id"], cats["supercategory"]))
    cat_ids = cats["id"].to_numpy()

    # boxable instances
    usable_box = _check_annotations(annotation_file, anns, cat_ids, images)
    xywh = np.array([[float(v) for v in b] for b in anns["bbox"]], dtype=float).reshape(-1, 4)
    wh = xywh[:, 2:]
    img_w = images["width"].reindex(anns["image_id"]).to_numpy(dtype=float)
    img_h = images["height"].reindex(anns["image_id"]).to_numpy(dtype=float)
    area_frac = wh[:, 0] * wh[:, 1] / (img_w * img_h)
    boxable = (
        (anns["iscrowd"].to_numpy() == 0)
        & usable_box
        & (area_frac >= min_frac)
        & (area_frac <= max_frac)
        & (wh.min(axis=1) >= min_side)
    )
    anns["boxable"] = boxable

    # candidates
    in_super = anns["category_id"].map(cat_super).isin(supercats)
    has_super = set(anns.loc[in_super, "image_id"])
    has_boxable = set(anns.loc[anns["boxable"], "image_id"])
    candidates = np.array(sorted(has_super & has_boxable & set(images.index)), dtype=np.int64)
    n_cand = len(candidates)
    if n_cand == 0:
        raise ValueError(f"{annotation_file}: no image passes the selection filter")

    cand_anns = anns[anns["image_id"].isin(candidates)]
    box_anns = cand_anns[cand_anns["boxable"]]
    present = cand_anns.groupby("image_id")["category_id"].agg(lambda s: set(s.tolist()))
    boxable_by_image = {
        iid: (g["id"].to_numpy(), g["category_id"].to_numpy(), g["bbox"].tolist())
        for iid, g in box_anns.groupby("image_id", sort=True)
    }

    # freq(c): candidate images in which c has >= 1 boxable instance
    freq = box_anns.groupby("category_id")["image_id"].nunique()
    # target probabilities per image, and the expected target count per category
    target_p: dict[int, np.ndarray] = {}
    expected_targets = pd.Series(0.0, index=cat_ids)
    for iid in candidates:
        _, ccat, _ = boxable_by_image[iid]
        w = 1.0 / freq.reindex(ccat).to_numpy(dtype=float)
        p = w / w.sum()
        target_p[iid] = p
        for c, pc in zip(ccat, p):
            expected_targets[c] += pc
    # the spec's prior: the expected frequency of c among the targets, no floor (issue 13)
    p_target = expected_targets.to_numpy() / n_cand
    n_present = np.array([sum(c in present[i] for i in candidates) for c in cat_ids], dtype=float)
    frac_absent = 1.0 - n_present / n_cand
    with np.errstate(divide="ignore", invalid="ignore"):
        distractor_weight = np.where(frac_absent > 0, p_target / frac_absent, 0.0)

    return _Pool(annotation_file, candidates, images, present, boxable_by_image, target_p, freq,
                 distractor_weight, cat_ids, cat_name, cat_super)


def select_items(
    annotation_file: str | os.PathLike | None = None,
    n_items: int = 1000,
    seed: int = 1,
    config: dict[str, Any] | None = None,
) -> pd.DataFrame:
    """Select the study items from a COCO instances file (spec Section III).

    Candidates
        Images with at least one annotation (crowd or not) of a category whose
        supercategory is in ``config['items']['supercategories']``
        (``vehicle``, ``outdoor``) **and** at least one *boxable* instance of
        any category. An instance is boxable if ``iscrowd == 0``, its box lies
        inside the image (to :data:`BOX_BORDER_TOLERANCE_PX`), its box area
        ``w * h`` lies in ``[min_box_area_fraction, max_box_area_fraction]``
        (3 % and 50 %, bounds included) of the image area ``width * height``
        (from the ``images`` table), and ``min(w, h) >= min_box_side_px``
        (48 px). The full val2017 split has 1146 candidates.
    Images
        The candidates are sorted by image id and ``n_items`` of them are drawn
        without replacement with ``numpy.random.default_rng(seed).choice``;
        rows are returned in this draw order (so the first k rows are "the
        first k images" of the spec). With fewer candidates than ``n_items``
        all are taken (in the order of the same draw) and a warning is issued.
    Target
        One boxable instance of the image. Each boxable instance ``j`` of the
        image is chosen with probability ``w_j / sum_i w_i``, where
        ``w_j = 1 / freq(category_j)`` and ``freq(c)`` is the number of
        candidate images in which category ``c`` has at least one boxable
        instance. The weight is per *instance*: a category with two boxable
        instances in the image gets twice the weight of one with a single
        instance. Instances are ordered by annotation id before the draw.
    Distractors
        Drawn without replacement among the categories with no annotation of
        any kind (crowd included) in the image, with probability proportional
        to ``p_target(c) / frac_absent(c)``. ``p_target(c)`` is the *expected*
        frequency of ``c`` among the targets,
        ``sum over candidate images of P(target category = c) / n_candidates``
        (being an expectation it does not depend on the draw);
        ``frac_absent(c)`` is the fraction of candidate images with no
        annotation of ``c``. So a category is about as likely to be shown as a
        distractor as to be the answer (spec Section III), and a category that
        can never be a target (no boxable instance in any candidate) is never a
        distractor. There is no floor: murk before issue 13 added 0.5 to the
        expected count, which made rare categories frequent distractors and
        raised the always-guess-the-most-frequent-category baseline on the
        sample's 37 items from 0.292 to 0.311 (spec: 0.29 for its 1000 items).
        With ``items.distractors: uniform`` (a design variant, :mod:`murk.protocol`:
        the pilot's rule, spec Sec. III "(ii)") every absent category has the same
        weight, rare ones included; the random numbers are consumed in the same
        order, so the images and targets are those of the study's rule.
    Options
        t2: the target and three distractors in the order of a random
        permutation; t3: the true category and ``t3_distractor``, one of the
        three t2 distractors chosen uniformly.

    Per-item randomness uses ``numpy.random.default_rng([seed, image_id])``,
    consumed in the order: target, distractors, t2 permutation, t3 distractor.
    The result does not depend on the order in which the file lists images,
    annotations or categories.

    Parameters
    ----------
    annotation_file : str or path-like, optional
        A COCO instances JSON file. Default
        ``$MURK_COCO_DIR/annotations/instances_val2017.json`` (see
        :func:`murk.core.coco_dir`).
    n_items : int, default 1000
        Number of images to draw (spec Section III: 1000).
    seed : int, default 1
        Seed of the image draw and of the per-item generators (spec: seed 1).
    config : dict, optional
        Study configuration (:func:`murk.core.load_config`); only its
        ``items`` section is used. Default: the project's.

    Returns
    -------
    pandas.DataFrame
        One row per item, in draw order, with the columns of :data:`COLUMNS`:
        ``image_id``, ``width``, ``height`` (px), ``annotation_id``,
        ``category_id``, ``t2_answer_index`` (0..3) as int64; ``file_name``,
        ``category``, ``supercategory``, ``t3_distractor`` as str; ``bbox``
        (list of 4 floats ``[x, y, w, h]`` in px, COCO's convention) and
        ``t2_options`` (list of 4 distinct category names, in shown order) as
        Python lists.

    Raises
    ------
    FileNotFoundError
        If the annotation file does not exist (the message names the file and
        the fix).
    ValueError
        If the file lacks ``images``, ``annotations`` or ``categories``; if
        ``n_items < 1``; if an image has fewer than three absent categories
        that are ever a target (distractor weight > 0); if an annotation's
        ``category_id`` is not among the file's categories, or its ``bbox`` is
        not four finite numbers (one line naming the file, the annotation ids
        and the fix; why these refuse: :func:`_check_annotations`).

    Warns
    -----
    UserWarning
        If there are fewer candidates than ``n_items``.
    BadBoxWarning
        For annotations whose box has a zero or negative side or reaches outside
        its image by more than :data:`BOX_BORDER_TOLERANCE_PX`: never a target.
    """
    if int(n_items) < 1:
        raise ValueError(f"n_items must be at least 1, got {n_items}")
    n_items = int(n_items)
    seed = int(seed)
    pool = _candidate_pool(annotation_file, config)
    annotation_file = pool.annotation_file
    candidates, n_cand = pool.candidates, len(pool.candidates)
    images, present, boxable_by_image = pool.images, pool.present, pool.boxable_by_image
    target_p, distractor_weight = pool.target_p, pool.distractor_weight
    cat_ids, cat_name, cat_super = pool.cat_ids, pool.cat_name, pool.cat_super
    # the distractor rule: the study's prior-matched weights, or a design variant's uniform draw over the
    # categories absent from the image (murk.protocol; the pilot's rule, spec Sec. III "(ii)")
    rule = str((load_config() if config is None else config)["items"].get("distractors", "prior-matched"))
    if rule not in ("prior-matched", "uniform"):
        raise ValueError(f"items.distractors must be prior-matched or uniform, got {rule!r}")

    # the draw of images
    n_take = min(n_items, n_cand)
    if n_cand < n_items:
        warnings.warn(
            f"{annotation_file}: only {n_cand} images pass the selection filter, fewer than "
            f"n_items={n_items}; taking all {n_cand}",
            UserWarning,
            stacklevel=2,
        )
    order = np.random.default_rng(seed).choice(n_cand, size=n_take, replace=False)

    rows = []
    for iid in candidates[order]:
        iid = int(iid)
        rng = np.random.default_rng([seed, iid])
        aid, ccat, bboxes = boxable_by_image[iid]
        j = int(rng.choice(len(aid), p=target_p[iid]))
        target_cat = int(ccat[j])
        absent_mask = np.array([c not in present[iid] for c in cat_ids])
        if absent_mask.sum() < _N_DISTRACTORS:
            raise ValueError(
                f"{annotation_file}: image {iid} has fewer than {_N_DISTRACTORS} absent "
                f"categories; cannot draw distractors"
            )
        absent_ids = cat_ids[absent_mask]
        w = distractor_weight[absent_mask] if rule == "prior-matched" else np.ones(int(absent_mask.sum()))
        if np.count_nonzero(w) < _N_DISTRACTORS:
            raise ValueError(
                f"{annotation_file}: image {iid} has only {np.count_nonzero(w)} absent categories that are "
                f"ever a target; {_N_DISTRACTORS} distractors are needed (spec prior, no floor): "
                f"select from more images")
        distractors = rng.choice(absent_ids, size=_N_DISTRACTORS, replace=False, p=w / w.sum())
        distractor_names = [str(cat_name[int(c)]) for c in distractors]
        shown = [str(cat_name[target_cat])] + distractor_names
        perm = rng.permutation(len(shown))
        t2_options = [shown[k] for k in perm]
        t2_answer_index = int(np.flatnonzero(perm == 0)[0])
        t3_distractor = distractor_names[int(rng.integers(_N_DISTRACTORS))]
        img = images.loc[iid]
        rows.append(
            {
                "image_id": iid,
                "file_name": str(img["file_name"]),
                "width": int(img["width"]),
                "height": int(img["height"]),
                "annotation_id": int(aid[j]),
                "category_id": target_cat,
                "category": str(cat_name[target_cat]),
                "supercategory": str(cat_super[target_cat]),
                "bbox": [float(v) for v in bboxes[j]],
                "t2_options": t2_options,
                "t2_answer_index": t2_answer_index,
                "t3_distractor": t3_distractor,
            }
        )
    return _table(rows)


def _candidate_ids(
    annotation_file: str | os.PathLike | None = None, config: dict[str, Any] | None = None
) -> np.ndarray:
    """Image ids of the selection candidates (spec Section III).

    The candidate rule is that of :func:`select_items`: at least one
    annotation of a category in ``items.supercategories`` (``vehicle``,
    ``outdoor``) and at least one boxable instance of any category. The spec
    reports 1146 candidates on the full val2017 split; the shared 158-image
    sample has 37.

    Parameters
    ----------
    annotation_file : str or path-like, optional
        A COCO instances JSON file; default as in :func:`select_items`.
    config : dict, optional
        Study configuration; only ``items`` is used. Default: the project's.

    Returns
    -------
    numpy.ndarray
        Shape (n_candidates,), int64, sorted COCO image ids.

    Raises
    ------
    FileNotFoundError, ValueError
        As :func:`select_items` (also if no image passes the filter).
    """
    return _candidate_pool(annotation_file, config).candidates.copy()


def selection_report(
    table: pd.DataFrame,
    annotation_file: str | os.PathLike | None = None,
    config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Checks of a selection that the outputs report (spec Section III).

    Parameters
    ----------
    table : pandas.DataFrame
        An items table (:func:`select_items`, :func:`load_items`) with at
        least ``category``, ``t2_options`` and ``t2_answer_index``.
    annotation_file : str or path-like, optional
        The COCO instances file the table was drawn from (for the candidate
        count); default as in :func:`select_items`.
    config : dict, optional
        Study configuration (``items`` section); default the project's.

    Returns
    -------
    dict
        Plain JSON-serialisable values:

        ``n_candidates`` : int
            Images passing the filter (:func:`_candidate_ids`; spec: 1146 on
            full val2017).
        ``n_items`` : int
            Rows of ``table``.
        ``annotation_file`` : str
            File name (no folder) of the annotation file.
        ``guesser_category`` : str
            The most frequent target category ``m`` of ``table`` (ties broken
            by name, alphabetically first).
        ``guesser_accuracy_t2`` : float
            Expected t2 accuracy of the guesser that always answers ``m``
            (spec Section III: 0.29 for its 1000 items; chance 0.25). Per
            item it scores 1 if ``m`` is among the four options and is the
            target, 0 if ``m`` is among the options but is not the target,
            and 1/4 (a uniform guess) if ``m`` is not among the options; the
            statistic is the mean over items:
            ``share_m + (1 - P(m shown)) / 4``.
        ``guesser_option_share`` : float
            Fraction of items whose t2 options include ``m``.
        ``prior_guesser_accuracy_t2`` : float
            A stronger variant: per item, pick among the four options the one
            most frequent as target in ``table`` (ties shared equally);
            expected accuracy, mean over items.
        ``chance_t2`` : float
            ``1 / len(options)`` (0.25).
        ``target_share`` : dict
            Category name -> fraction of items with that target, sorted by
            decreasing share then name; the values sum to 1.
        ``answer_position_share`` : dict
            Option letter index (``"0"``..``"3"``) -> fraction of items whose
            answer is shown at that position (about 0.25 each).

    Raises
    ------
    ValueError
        If ``table`` is empty or lacks a needed column.
    """
    need = ("category", "t2_options", "t2_answer_index")
    missing = [c for c in need if c not in table.columns]
    if missing:
        raise ValueError(f"items table lacks the column(s) {missing}; expected {list(need)}")
    if len(table) == 0:
        raise ValueError("items table is empty: nothing to report")
    pool = _candidate_pool(annotation_file, config)
    cats = [str(c) for c in table["category"]]
    options = [[str(o) for o in opts] for opts in table["t2_options"]]
    n = len(cats)
    counts = pd.Series(cats).value_counts()
    share = {name: int(counts[name]) / n for name in sorted(counts.index, key=lambda c: (-counts[c], c))}
    guess = next(iter(share))  # most frequent, alphabetically first among ties
    n_opt = len(options[0])
    per_item = [(1.0 if c == guess else 0.0) if guess in opts else 1.0 / len(opts)
                for c, opts in zip(cats, options)]
    prior = []
    for c, opts in zip(cats, options):
        f = np.array([counts.get(o, 0) for o in opts], dtype=float)
        best = f == f.max()
        prior.append(float(best[opts.index(c)]) / best.sum() if c in opts else 0.0)
    pos = pd.Series(table["t2_answer_index"].astype(int)).value_counts()
    return {
        "n_candidates": int(len(pool.candidates)),
        "n_items": int(n),
        "annotation_file": pool.annotation_file.name,
        "guesser_category": guess,
        "guesser_accuracy_t2": float(np.mean(per_item)),
        "guesser_option_share": float(np.mean([guess in opts for opts in options])),
        "prior_guesser_accuracy_t2": float(np.mean(prior)),
        "chance_t2": 1.0 / n_opt,
        "target_share": share,
        "answer_position_share": {str(k): int(pos.get(k, 0)) / n for k in range(n_opt)},
    }


def _table(records: list[dict[str, Any]]) -> pd.DataFrame:
    """Build the items table with fixed columns and dtypes."""
    table = pd.DataFrame.from_records(records, columns=list(COLUMNS))
    for col in _INT_COLUMNS:
        table[col] = table[col].astype(np.int64)
    for col in ("bbox", "t2_options"):
        table[col] = pd.Series([list(v) for v in table[col]], index=table.index, dtype=object)
    return table


def shuffled_partner(n_items: int, offset: int) -> np.ndarray:
    """Partner index of the shuffled-image control (spec Section III).

    The question of item ``i`` is asked on the clean pixels of item
    ``j = (i + offset) mod N``.

    Parameters
    ----------
    n_items : int
        Number of items N (>= 1).
    offset : int
        Shift: the frozen configuration's ``items.shuffle_offset`` (spec Section III: 37).

    Returns
    -------
    numpy.ndarray
        Shape (N,), int64: the partner positions ``j`` (row positions in the
        items table, not image ids).

    Raises
    ------
    ValueError
        If ``n_items < 1``.

    Examples
    --------
    >>> shuffled_partner(5, offset=2).tolist()
    [2, 3, 4, 0, 1]
    """
    n_items = int(n_items)
    if n_items < 1:
        raise ValueError(f"n_items must be at least 1, got {n_items}")
    return (np.arange(n_items, dtype=np.int64) + int(offset)) % n_items


