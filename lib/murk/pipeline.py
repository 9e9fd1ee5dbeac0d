"""Stage drivers: what each notebook calls. One function per stage.

Data flows one way: COCO → :func:`stage_select` → :func:`stage_depth` →
:func:`stage_readout` (per model) → :func:`stage_cube` → analysis → paper.
A stage reads only what earlier stages wrote, under one output root.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from murk import config as _config
from murk import coco, cube, depth, items, paths, render

log = logging.getLogger("murk")

__all__ = ["git_commit", "coco_files", "stage_select", "read_items", "stage_depth",
           "stage_readout", "stage_cube"]


def git_commit() -> str:
    """The project's git commit (with ``-dirty`` if the tree has changes), or ``"unknown"``."""
    try:
        root = paths.project_root()
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def coco_files(coco_dir: str | os.PathLike | None = None, split: str = "val2017") -> tuple[Path, Path]:
    """The annotation file and image folder of a COCO folder in COCO's own layout.

    Parameters
    ----------
    coco_dir : path, optional
        Default ``$MURK_COCO_DIR`` (:func:`murk.paths.coco_dir`).
    split : str
        ``val2017`` for the study; any split name present works (e.g. ``train2017``).

    Raises
    ------
    FileNotFoundError
        If ``annotations/instances_<split>.json`` or ``<split>/`` is missing; the
        message names the folder and the fix.
    """
    d = paths.coco_dir(coco_dir)
    ann = d / "annotations" / f"instances_{split}.json"
    img = d / split
    if not ann.is_file() and not paths.offline():
        ann = coco.fetch_annotations(d, split)  # network: official annotations, MD5-checked
        img.mkdir(parents=True, exist_ok=True)
    if not ann.is_file() or not img.is_dir():
        raise FileNotFoundError(
            f"COCO folder {d} lacks {ann.relative_to(d)} or {split}/: set MURK_COCO_DIR to a folder in "
            f"COCO's layout (e.g. ../shared/coco-val2017-sample), or unset MURK_OFFLINE and leave MURK_COCO_DIR unset: "
            f"`make demo` then downloads the official annotations and the selected images into outputs/coco/")
    return ann, img


def stage_select(coco_dir=None, n_items: int = 1000, seed: int = 1, output_dir=None,
                 split: str = "val2017") -> "items.pd.DataFrame":
    """Stage *select*: COCO annotations → ``outputs/items.json`` (+ ``items_meta.json``).

    Returns the items table (see :func:`murk.items.select_items`). The meta file
    holds the config hash, the items hash and the COCO folder.
    """
    ann, img_dir = coco_files(coco_dir, split)
    cfg = _config.load_config()
    table = items.select_items(ann, n_items=n_items, seed=seed, config=cfg)
    coco.ensure_images(table["file_name"], img_dir, split)  # downloads only the selected images, if online
    out = paths.items_file(output_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    items.save_items(table, out)
    meta = {"config_hash": _config.config_hash(cfg), "items_hash": items.items_hash(table),
            "n_items": int(len(table)), "n_items_requested": int(n_items), "seed": int(seed),
            "annotation_file": str(ann), "image_dir": str(img_dir)}
    _write_json(out.with_name("items_meta.json"), meta)
    return table


def read_items(output_dir=None):
    """Items table and meta written by :func:`stage_select`.

    Raises
    ------
    FileNotFoundError
        If the select stage has not run for this output root.
    """
    f = paths.items_file(output_dir)
    if not f.is_file():
        raise FileNotFoundError(f"{f} missing: run the select stage first (notebooks/01_select.py)")
    meta = json.loads(f.with_name("items_meta.json").read_text())
    return items.load_items(f), meta


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True))
    os.replace(tmp, path)


def _presented(row, image_dir: Path, max_side: int):
    img = render.load_image(Path(image_dir) / row["file_name"])
    size = render.presented_size(img.shape[1], img.shape[0], max_side)
    return img, size


def stage_depth(backend: str = "auto", model: str = depth.DEFAULT_MODEL, output_dir=None) -> Path:
    """Stage *depth*: metric depth of each item's clean image, cached on disk.

    Depth is estimated on the full-resolution clean image (spec Sec. III), then
    resized to the presented size (longer side ≤ 448 px) and stored as
    ``outputs/depth/<backend>/<image_id>.npy``. Maps already cached are skipped.

    Returns
    -------
    Path of the cache folder (holding ``manifest.json``).
    """
    table, meta = read_items(output_dir)
    cfg = _config.load_config()
    est = depth.get_backend(backend, model)
    folder = depth.depth_cache_dir(est.name, output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    for _, row in tqdm(table.iterrows(), total=len(table), desc="depth", unit="img"):
        if (folder / f"{int(row['image_id'])}.npy").is_file():
            continue
        img, size = _presented(row, meta["image_dir"], cfg["render"]["max_side_px"])
        z = render.resize_depth(est(img), size)
        depth.save_depth(folder, int(row["image_id"]), z)
    depth.write_manifest(folder, est, table["image_id"])
    # one pointer for the next stage: which backend's cache is current
    _write_json(paths.depth_dir(output_dir) / "current.json", {**est.describe(), "folder": folder.name})
    return folder


def stage_readout(model: str, output_dir=None, max_items: int | None = None, device: str | None = None) -> Path:
    """Stage *readout* for one model: every item × condition × question.

    For each item (in order) the 24 conditions are rendered
    (:func:`murk.render.render_conditions`) and each of t2, t3_true and
    t3_false is asked with the three prompt variants; the read-outs are written
    into ``outputs/readout/<model>.zarr`` one image at a time, so an
    interrupted run resumes where it stopped and finished images are never
    read out again.

    Parameters
    ----------
    model : str
        Hugging Face id, local folder, or ``murk-tiny/<arch>`` (a pipeline check).
    max_items : int, optional
        Read out only the first ``max_items`` items (the store still spans all).
    device : str, optional
        ``cuda`` / ``cpu``; default CUDA when available.

    Returns
    -------
    Path of the model's store.
    """
    from murk import prompts, readout  # heavy imports (torch) only here

    table, meta = read_items(output_dir)
    cfg = _config.load_config()
    current = json.loads((paths.depth_dir(output_dir) / "current.json").read_text())
    dfolder = paths.depth_dir(output_dir) / current["folder"]
    store = paths.readout_store(model, output_dir)
    n = len(table)
    todo_n = n if max_items is None else min(n, int(max_items))
    vlm = readout.load_vlm(model, device=device, root=output_dir)
    attrs = {"config_hash": meta["config_hash"], "items_hash": meta["items_hash"], "model_id": model,
             "model_revision": vlm.revision, "pipeline_check": int(vlm.is_pipeline_check),
             "n_visual_tokens": int(vlm.n_visual_tokens),
             "depth_backend": current["depth_backend"], "depth_approximate": current["depth_approximate"],
             "depth_model": current.get("depth_model", ""), "schema_version": cube.SCHEMA_VERSION}
    if vlm.is_pipeline_check:
        attrs["note"] = "PIPELINE CHECK: tiny randomly initialised checkpoint; numbers carry no meaning"
    elif current["depth_approximate"]:
        warnings.warn(f"{model} is a real model but the depth is the approximate backend "
                      f"{current['depth_backend']!r}: its crossing visibilities in metres rest on that assumption "
                      f"(W does not). Rerun the depth stage with backend='depth-anything-v2' for the study.",
                      stacklevel=2)
    ds = cube.open_readout_store(store, table["image_id"], table["category"], attrs)
    done = ds["done"].values.copy()
    partner = items.shuffled_partner(n, cfg["items"].get("shuffle_offset", 37))
    max_side = cfg["render"]["max_side_px"]
    todo = [i for i in range(todo_n) if not done[i]]
    log.info("%s: %d of %d images to read out", model, len(todo), todo_n)
    for i in tqdm(todo, desc=f"readout {paths.model_slug(model)}", unit="img"):
        row = table.iloc[i]
        img, size = _presented(row, meta["image_dir"], max_side)
        img = render.resize_image(img, size)
        z = depth.load_depth(dfolder, int(row["image_id"]))
        bbox = render.scale_bbox(row["bbox"], (int(row["width"]), int(row["height"])), size)
        prow = table.iloc[int(partner[i])]
        pimg, psize = _presented(prow, meta["image_dir"], max_side)
        pimg = render.resize_image(pimg, psize)
        questions = prompts.questions_for_item(row, cfg)
        results = {}
        for arm, level, shown in render.render_conditions(
                img, z, bbox, pimg, seed=meta["seed"], image_id=int(row["image_id"]), config=cfg):
            for q in questions:
                results[(arm, level, q.task)] = readout.read_question(vlm, shown, q, cfg)
        cube.write_image(store, i, results)
    return store


def stage_cube(models: list[str], output_dir=None) -> "cube.xr.Dataset":
    """Merge the models' read-out stores into ``outputs/cube.zarr``."""
    stores = {m: paths.readout_store(m, output_dir) for m in models}
    missing = [str(p) for p in stores.values() if not Path(p).exists()]
    if missing:
        raise FileNotFoundError(f"read-out stores missing: {missing}; run the readout stage for these models")
    return cube.merge_models(stores, paths.cube_store(output_dir), attrs={"git_commit": git_commit()})
