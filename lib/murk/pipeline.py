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
                 split: str = "val2017", run_name: str | None = None) -> "items.pd.DataFrame":
    """Stage *select*: COCO annotations → ``items.json``, ``items_meta.json``, ``items_report.json``.

    The items are drawn by :func:`murk.items.select_items`; then the run is
    frozen (:func:`murk.config.freeze_run`): the first select of ``run_name``
    records the config hash and the items hash, and a later select of the
    same run name with a different configuration or other items is refused
    *before anything is written* under ``output_dir``.

    Parameters
    ----------
    coco_dir : path, optional
        Folder in COCO's layout; default ``$MURK_COCO_DIR`` (:func:`coco_files`).
    n_items : int, default 1000
        Items to draw (spec: 1000).
    seed : int, default 1
        Selection seed (spec: 1).
    output_dir : path, optional
        Output root (:func:`murk.paths.output_dir`).
    split : str, default "val2017"
        COCO split.
    run_name : str, optional
        Name of the frozen record (``$MURK_FROZEN_DIR`` or ``data/frozen/``,
        ``<run_name>.json``). Default ``"offline-demo"`` when ``MURK_OFFLINE``
        is set, else ``"demo"``.

    Returns
    -------
    pandas.DataFrame
        The items table (see :func:`murk.items.select_items`).

    Notes
    -----
    Writes ``items.json`` (the table), ``items_meta.json`` (config hash, items hash,
    run name, n_items, seed, annotation file, image folder) and
    ``items_report.json`` (:func:`murk.items.selection_report`: candidate
    count, guesser statistic, target category shares) under the output root.

    Raises
    ------
    ValueError
        If the run is frozen with another config hash or items hash (the
        message names the record and the fix).
    FileNotFoundError
        If the COCO files are missing (:func:`coco_files`).
    """
    ann, img_dir = coco_files(coco_dir, split)
    cfg = _config.load_config()
    table = items.select_items(ann, n_items=n_items, seed=seed, config=cfg)
    if run_name is None:
        run_name = "offline-demo" if paths.offline() else "demo"
    chash, ihash = _config.config_hash(cfg), items.items_hash(table)
    _config.freeze_run(run_name, chash, ihash, n_items=len(table), seed=seed, annotation_file=ann)
    report = items.selection_report(table, ann, cfg)
    coco.ensure_images(table["file_name"], img_dir, split)  # downloads only the selected images, if online
    out = paths.items_file(output_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    items.save_items(table, out)
    meta = {"config_hash": chash, "items_hash": ihash, "run_name": run_name,
            "n_items": int(len(table)), "n_items_requested": int(n_items), "seed": int(seed),
            "annotation_file": str(ann), "image_dir": str(img_dir)}
    _write_json(out.with_name("items_meta.json"), meta)
    _write_json(out.with_name("items_report.json"), report)
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


def _item_inputs(table, i: int, partner: int, image_dir, depth_folder: Path, cfg: dict) -> dict:
    """What the readout and monitor stages need of item ``i``, at the presented size.

    Returns
    -------
    dict with ``image`` (uint8 (H, W, 3)), ``depth_m`` (float32 (H, W)), ``bbox``
    (x, y, w, h in the image's pixels), ``partner_image`` and ``partner_depth_m``
    (the shuffled control's item; a grey image with the item's depth when the
    partner's own image or depth is bad).

    Raises
    ------
    FileNotFoundError, ValueError
        The item's own image or depth map is missing or cannot be decoded (the
        caller records it as missing and goes on).
    """
    max_side = cfg["render"]["max_side_px"]
    row = table.iloc[i]
    img, size = _presented(row, image_dir, max_side)
    z = depth.load_depth(depth_folder, int(row["image_id"]))
    img = render.resize_image(img, size)
    prow = table.iloc[int(partner)]
    try:
        pimg, psize = _presented(prow, image_dir, max_side)
        pimg = render.resize_image(pimg, psize)
        pz = depth.load_depth(depth_folder, int(prow["image_id"]))
    except (FileNotFoundError, ValueError):  # the shuffled control falls back to a grey image
        pimg, pz = np.full_like(img, int(cfg["render"].get("blank_grey", 128))), z
    return {"image": img, "depth_m": z, "partner_image": pimg, "partner_depth_m": pz,
            "bbox": render.scale_bbox(row["bbox"], (int(row["width"]), int(row["height"])), size)}


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
    written: list[int] = []
    skipped: dict[int, str] = {}
    for _, row in tqdm(table.iterrows(), total=len(table), desc="depth", unit="img"):
        if depth.is_cached(folder, int(row["image_id"]), est):
            continue
        try:
            img, size = _presented(row, meta["image_dir"], cfg["render"]["max_side_px"])
        except (FileNotFoundError, ValueError) as e:  # recorded; the readout stage records it as missing
            skipped[int(row["image_id"])] = str(e)
            continue
        z = render.resize_depth(est(img, image_id=int(row["image_id"])), size)
        depth.save_depth(folder, int(row["image_id"]), z)
        written.append(int(row["image_id"]))
    depth.write_manifest(folder, est, table["image_id"], written=written)
    _summarise_skipped("depth", skipped)
    # one pointer for the next stage: which backend's cache is current
    _write_json(paths.depth_dir(output_dir) / "current.json", {**est.describe(), "folder": folder.name})
    return folder


def current_depth(output_dir=None) -> dict:
    """The depth cache written by the last depth stage of this output root.

    Returns
    -------
    dict
        The backend's provenance (``depth_backend``, ``depth_approximate``,
        ``depth_model``, ``depth_revision``), ``folder`` (its name) and ``path``
        (the cache folder).

    Raises
    ------
    FileNotFoundError
        If the depth stage has not run for this output root.
    """
    pointer = paths.depth_dir(output_dir) / "current.json"
    if not pointer.is_file():
        raise FileNotFoundError(f"{pointer} missing: run the depth stage first (notebooks/02_depth.py)")
    current = json.loads(pointer.read_text())
    current["path"] = paths.depth_dir(output_dir) / current["folder"]
    return current


def stage_readout(model: str, output_dir=None, max_items: int | None = None, device: str | None = None,
                  n_verbal_items: int = 0, shard: int | None = None, shard_size: int | None = None) -> Path | None:
    """Stage *readout* for one model: every item × condition × question.

    For each item (in order) the 24 conditions are rendered
    (:func:`murk.render.render_conditions`) and each of t2, t3_true and
    t3_false is asked with the three prompt variants, all nine prompts of a
    condition from one shared prefix (:func:`murk.readout.read_item`: one vision
    pass and one prefill per condition); the read-outs are written
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
    n_verbal_items : int
        The first ``n_verbal_items`` items are also asked the verbal wordings v2 and
        v3 of spec Table VI (all their conditions): read-outs ``verbal_conf_v2``,
        ``verbal_conf_v3`` (NaN for the other items). Default 0: only v1.
    shard, shard_size : int, optional
        Read out only items ``shard * shard_size`` to ``(shard + 1) * shard_size - 1``
        into their own store (:func:`murk.paths.readout_store`), so that shards run
        as independent jobs (one per GPU or cluster job) and are merged by
        :func:`stage_cube`. The read-outs of an image do not depend on the shard
        (prompts are batched within one image and condition only), so any shard
        size gives the same cube.

    Returns
    -------
    Path of the store, or None for a shard beyond the last item (nothing to do).
    """
    from murk import prompts, readout  # heavy imports (torch) only here

    table, meta = read_items(output_dir)
    cfg = _config.load_config()
    current = current_depth(output_dir)
    dfolder = current["path"]
    store = paths.readout_store(model, output_dir, shard, shard_size)
    n = len(table)
    todo_n = n if max_items is None else min(n, int(max_items))
    if shard is None:
        first, last = 0, todo_n
    else:
        first, last = int(shard) * int(shard_size), min(todo_n, (int(shard) + 1) * int(shard_size))
        if first >= last:
            log.info("%s: shard %s of size %s is beyond the %d items: nothing to do", model, shard, shard_size, n)
            return None
    vlm = readout.load_vlm(model, device=device, root=output_dir)
    attrs = cube.store_identity(  # every setting that changes the store's content (issue 14)
        config_hash=meta["config_hash"], items_hash=meta["items_hash"], model_id=model,
        model_revision=vlm.revision, dtype=vlm.dtype, n_verbal_items=n_verbal_items, n_items=n,
        depth_backend=current["depth_backend"], depth_model=current.get("depth_model", ""),
        depth_revision=current.get("depth_revision", ""),
        pipeline_check=int(vlm.is_pipeline_check), n_visual_tokens=int(vlm.n_visual_tokens),
        depth_approximate=current["depth_approximate"])
    if vlm.is_pipeline_check:
        attrs["note"] = "PIPELINE CHECK: tiny randomly initialised checkpoint; numbers carry no meaning"
    elif current["depth_approximate"]:
        warnings.warn(f"{model} is a real model but the depth is the approximate backend "
                      f"{current['depth_backend']!r}: its crossing visibilities in metres rest on that assumption "
                      f"(W does not). Rerun the depth stage with backend='depth-anything-v2' for the study.",
                      stacklevel=2)
    span = slice(first, last) if shard is not None else slice(0, n)
    ds = cube.open_readout_store(store, table["image_id"].iloc[span], table["category"].iloc[span], attrs)
    done = ds["done"].values.copy()
    partner = items.shuffled_partner(n, cfg["items"].get("shuffle_offset", 37))
    todo = [i for i in range(first, last) if not done[i - span.start]]
    log.info("%s: %d of %d images to read out", model, len(todo), last - first)
    skipped: dict[int, str] = {}
    for i in tqdm(todo, desc=f"readout {paths.model_slug(model)}", unit="img"):
        row = table.iloc[i]
        try:
            x = _item_inputs(table, i, partner[i], meta["image_dir"], dfolder, cfg)
        except (FileNotFoundError, ValueError) as e:  # bad input: record it, keep going, lose nothing
            skipped[int(row["image_id"])] = str(e)
            cube.write_missing(store, i - span.start, str(e))
            continue
        questions = prompts.questions_for_item(row, cfg)
        verbal = prompts.VERBAL_WORDINGS if i < int(n_verbal_items) else ("v1",)
        results = {}
        for arm, level, shown in render.render_conditions(
                x["image"], x["depth_m"], x["bbox"], x["partner_image"], seed=meta["seed"],
                image_id=int(row["image_id"]), config=cfg):
            for task, r in readout.read_item(vlm, shown, questions, cfg, verbal_variants=verbal).items():
                results[(arm, level, task)] = r
        cube.write_image(store, i - span.start, results)
    _summarise_skipped(f"readout {model}", skipped)
    return store


def _summarise_skipped(stage: str, skipped: dict[int, str]) -> None:
    """Print (and log) which items a stage could not process, with the reasons."""
    if not skipped:
        print(f"{stage}: every item processed")
        return
    msg = f"{stage}: {len(skipped)} item(s) skipped, recorded as missing:\n" + "\n".join(
        f"  image {k}: {v}" for k, v in skipped.items())
    log.warning(msg)
    print(msg)


def stage_cube(models: list[str], output_dir=None, shard_size: int | None = None) -> "cube.xr.Dataset":
    """Merge the models' read-out stores (or shard stores) into ``outputs/cube.zarr``.

    The visibility monitor's store (:func:`stage_monitor`), when present, joins
    as the model :data:`MONITOR_ID` (coordinate ``kind`` = "monitor").

    Parameters
    ----------
    models : list of str
    shard_size : int, optional
        The shard size the read-outs were run with (None: unsharded).
    """
    table, _ = read_items(output_dir)
    k = paths.n_shards(len(table), shard_size)
    stores = {m: (paths.readout_store(m, output_dir) if shard_size is None else
                  [paths.readout_store(m, output_dir, s, shard_size) for s in range(k)]) for m in models}
    if MONITOR_ID not in stores and paths.readout_store(MONITOR_ID, output_dir).exists():
        stores[MONITOR_ID] = paths.readout_store(MONITOR_ID, output_dir)  # the monitor is never sharded
    flat = [p for v in stores.values() for p in ([v] if isinstance(v, Path) else v)]
    missing = [str(p) for p in flat if not Path(p).exists()]
    if missing:
        raise FileNotFoundError(f"read-out stores missing: {missing}; run the readout stage for these models")
    return cube.merge_models(stores, paths.cube_store(output_dir), attrs={"git_commit": git_commit()})


def stage_nominal(output_dir=None) -> "xr.Dataset":
    """Stage *nominal*: ImageNet-C fog severities translated into visibility (spec Table VII).

    For every item, at the presented size and with the current depth cache
    (``outputs/depth/current.json``), :func:`murk.nominal.nominal_equivalence`
    solves the gain-matched and std-ratio-matched fog visibility of each ImageNet-C
    severity (the cube's ``imagenet_c`` images, same seeds). Writes
    ``<output>/analysis/nominal_equivalence.nc`` (image x severity) and
    ``<output>/analysis/tbl-nominal.md`` (Table VII as a pipe table, with the monotone
    share and the depth backend below it).

    Returns
    -------
    xarray.Dataset
        ``v_eq_gain_m``, ``v_eq_std_ratio_m``, ``gain``, ``std_ratio`` over image x severity.

    Raises
    ------
    FileNotFoundError
        If the select or depth stage has not run for this output root.
    """
    from murk import nominal, paper

    table, meta = read_items(output_dir)
    cfg = _config.load_config()
    current = current_depth(output_dir)
    attrs = {"config_hash": meta["config_hash"], "items_hash": meta["items_hash"],
             "depth_backend": current["depth_backend"], "depth_approximate": int(current["depth_approximate"]),
             "depth_model": current.get("depth_model", ""), "depth_revision": current.get("depth_revision", ""),
             "git_commit": git_commit()}
    ds = nominal.nominal_equivalence(
        table, meta["image_dir"], current["path"],
        max_side=cfg["render"]["max_side_px"], seed=meta["seed"],
        severities=cfg["physics"].get("imagenet_c_fog_severities", nominal.IMAGENET_C_SEVERITIES),
        attrs=attrs, progress=True)
    out = paths.analysis_dir(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    nc = out / "nominal_equivalence.nc"
    tmp = out / ".nominal_equivalence.nc.tmp"
    ds.to_netcdf(tmp)
    os.replace(tmp, nc)

    df = nominal.table_vii(ds)
    fmt = lambda x, d=0: "–" if not np.isfinite(x) else f"{x:.{d}f}"  # noqa: E731
    rows = [{"ImageNet-C severity": str(s), "median V_eq (gain), m": fmt(r.median_v_eq_gain_m),
             "P90/P10 across images": fmt(r.spread_p90_p10, 1) + "×",
             "median V_eq (std ratio), m": fmt(r.median_v_eq_std_ratio_m), "images": str(int(r.n_images))}
            for s, r in df.iterrows()]
    note = (f"\nShare of images whose gain-matched V_eq decreases monotonically over severities "
            f"{df.index.min()}–{df.index.max()}: {fmt(100 * df.attrs['monotone_share'])} % "
            f"(of {df.attrs['monotone_n']} images with a V_eq at every severity). "
            f"Depth: {current['depth_backend']}"
            + (" (approximate: metres rest on the assumed depth scale)." if current["depth_approximate"] else ".")
            + "\n")
    paper.write_text_atomic(out / "tbl-nominal.md", paper.markdown_table(rows) + note)
    return ds


MONITOR_ID = "murk/visibility-monitor"


def stage_monitor(output_dir=None, threshold_m: float | None = None) -> Path:
    """Stage *monitor*: the visibility monitor as an awareness "model" of the cube.

    For every item and condition, :func:`murk.monitor.monitor_readouts` estimates
    the visibility V̂ (m) from the degraded image without the box and the item's
    depth, and maps it to read-outs: ``c_int`` = a confidence from V̂,
    ``abstain`` = V̂ below ``threshold_m``, ``visibility_hat_m`` = V̂; the other
    read-outs are NaN (the monitor does not answer). Written like a model's
    read-outs, one image at a time and resumable, into
    ``outputs/readout/murk--visibility-monitor.zarr``.

    Parameters
    ----------
    threshold_m : float, optional
        Abstain threshold in metres; default :data:`murk.monitor.DEFAULT_THRESHOLD_M`.

    Returns
    -------
    Path of the store.
    """
    from murk import monitor

    threshold_m = monitor.DEFAULT_THRESHOLD_M if threshold_m is None else float(threshold_m)
    table, meta = read_items(output_dir)
    cfg = _config.load_config()
    current = current_depth(output_dir)
    store = paths.readout_store(MONITOR_ID, output_dir)
    attrs = {"config_hash": meta["config_hash"], "items_hash": meta["items_hash"], "model_id": MONITOR_ID,
             "model_revision": f"murk {__import__('murk').__version__}", "pipeline_check": 0, "n_visual_tokens": -1,
             "kind": "monitor", "monitor_threshold_m": threshold_m,
             "depth_backend": current["depth_backend"], "depth_approximate": current["depth_approximate"],
             "depth_model": current.get("depth_model", ""), "schema_version": cube.SCHEMA_VERSION}
    ds = cube.open_readout_store(store, table["image_id"], table["category"], attrs)
    done = ds["done"].values.copy()
    n = len(table)
    partner = items.shuffled_partner(n, cfg["items"].get("shuffle_offset", 37))
    skipped: dict[int, str] = {}
    for i in tqdm([i for i in range(n) if not done[i]], desc="monitor", unit="img"):
        row = table.iloc[i]
        try:
            x = _item_inputs(table, i, partner[i], meta["image_dir"], current["path"], cfg)
        except (FileNotFoundError, ValueError) as e:  # bad input: record it, keep going, lose nothing
            skipped[int(row["image_id"])] = str(e)
            cube.write_missing(store, i, str(e))
            continue
        conds = {(arm, level): shown for arm, level, shown in render.render_conditions(
            x["image"], x["depth_m"], x["bbox"], x["partner_image"], seed=meta["seed"],
            image_id=int(row["image_id"]), config=cfg, marker=False)}
        out = monitor.monitor_readouts(conds, {("clean", 0): x["depth_m"], ("shuffled", 0): x["partner_depth_m"]},
                                       threshold_m=threshold_m)
        results = {}
        for (arm, level), r in out.items():
            r = {k: r.get(k, np.nan) for k in cube.READOUTS}
            r.update({k: "" for k in cube.TEXT_READOUTS})
            for task in cube.TASKS:
                results[(arm, level, task)] = r
        cube.write_image(store, i, results)
    _summarise_skipped("monitor", skipped)
    return store
