"""The schema of murk's result cube: the one place that knows dims, coordinates, units.

The cube is an :class:`xarray.Dataset` stored as zarr (``outputs/cube.zarr``)
with the variable ``value`` of dims

    model × arm × level × task × image × readout

Conventions
-----------
* ``arm``: ``fog``, ``underwater`` (the physical arms, spec Sec. III),
  ``imagenet_c`` (the nominal control, ImageNet-C fog severities 1-5),
  ``blank`` and ``shuffled`` (image controls).
* ``level``: integer 0-8. Level 0 is the undegraded condition of each arm:
  the clean image for ``fog``, ``underwater`` and ``imagenet_c`` (read out
  once and written into all three), the control image for ``blank`` and
  ``shuffled`` (their only level). Levels 1-8 carry the visibilities of
  :data:`murk.scene.SWEEP_M` for the physical arms; levels 1-5 carry the
  ImageNet-C severities for ``imagenet_c``. The coordinates ``visibility_m``
  (arm × level; ``inf`` at level 0, CF ``units = "m"``, NaN where a level has no
  visibility: ImageNet-C severities, controls) and ``severity`` (arm × level)
  label them. Cells that do not exist (e.g. ``blank`` at level 3) are NaN.
* ``task``: ``t2`` (4-way identification), ``t3_true`` and ``t3_false``
  (the two verification questions of t3, true category and distractor).
  Deviation from a 2-valued task dim: t3 is asked twice per image, so its two
  questions are separate entries; t3 scores are the image-level mean of both.
* ``image``: the COCO image id (never a position), with ``category`` (the
  target's name) as an auxiliary coordinate.
* ``readout``: :data:`murk.core.READOUTS` (``visibility_hat_m``: the visibility monitor's
  estimate V̂ in metres, :mod:`murk.monitor`; ``visibility_hat_censored``: 0 = V̂
  is a point estimate, -1 = an upper bound (opaque: V ≤ V̂, the monitor abstains),
  +1 = a lower bound (clear or capped: V ≥ V̂), NaN = no estimate; both NaN for
  VLMs). ``value`` is float64 (:data:`murk.core.VALUE_DTYPE`). Missing is NaN; ``verbal_conf`` is NaN when
  the continuation held no parseable confidence (the raw text is kept in
  ``verbal_text``). ``verbal_stop`` (and ``_v2``/``_v3`` for the wording
  variants) codes how the continuation ended: 0 = end-of-sequence, 1 = token
  limit (a number touching the cut is missing), NaN = not asked.
  ``p_option_0`` ... ``p_option_3``: the main prompt's first-token option
  probabilities renormalised over the options (their maximum is ``c_int``; NaN
  beyond the item's 4 or 2 options), ``target``: the correct option's index,
  ``p_abstain`` / ``p_abstain2``: the abstain prompts' extra-option share (schema 4:
  what temperature scaling and risk-coverage need; NaN for the monitor);
  ``visibility_hat_arm``: the estimator arm a monitor used (0 fog, 1 underwater;
  estimated from the image by the deployable monitor; NaN for VLMs).
* attrs: provenance (config hash, items hash, git commit, depth backend,
  schema version); per-model provenance (model id, revision, pipeline check)
  are coordinates along ``model``.
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import xarray as xr

from murk import core, scene
from murk.core import (ARMS, CONTROL_ARMS, DIMS, PHYSICAL_ARMS, READOUTS, SCHEMA_VERSION, TASKS, TEXT_READOUTS,
                       VALUE_DTYPE)
from murk.core import (PER_IMAGE_VARIABLES, STORE_LAYOUT, STORE_LAYOUT_ATTR, damaged_chunks, empty_chunk_files,
                       is_zarr_array, is_zarr_group, store_damage)
from murk.results._store_repair import _repair
from murk.results._store_identity import (_REQUIRED_ATTRS, IDENTITY_ATTRS, SUPERSEDED_NAME, _attr, _identity_diff,
                                          _n_items_message, _only_n_items_changed, set_aside_superseded,
                                          store_identity)
from murk.results._store_permissions import store_write_guard
from murk.scene import IMAGENET_C_SEVERITIES, N_LEVELS

__all__ = ["level_coords", "sweep_visibility", "empty_model_dataset", "open_readout_store", "write_image", "merge_models",
           "open_cube", "t3_image_scores", "NOT_RUN", "images_run", "IMAGES_PER_SHARD", "write_missing"]

#: ``missing_reason`` of an image a model was not asked about (its entry's ``n_items`` stops
#: before it, spec: two models on the first 600 and 400 items): not bad input, never counted as such
NOT_RUN = "not run"
#: images per shard file of a read-out store (zarr 3's sharding codec, :func:`open_readout_store`): each
#: per-image variable is chunked by image (one chunk = one image) and its chunks are kept together in shard
#: files of this many images. An image written rewrites its shard of each variable whole (atomically: zarr's
#: local store writes ``<shard>.<uuid>.partial`` and renames it into place), about 12 kB per image held
#: (measured on the value, text and done variables, zstd): at most about 3 MB per image written. Measured on
#: a 4,000-image store (2-core CPU, load 4-6): 65 ms per image written with 256 images per shard, 71 ms with 64,
#: 81 ms with zarr 2's one file per image (xarray's region write dominates). A 4,000-image store is then 16
#: shards per variable (about 150 files, not one per image and variable: 32,000); a damaged shard file (a power
#: loss) re-reads the images it holds.
IMAGES_PER_SHARD = 256


def _checksummed() -> tuple:
    """The bytes-to-bytes codecs of a new store's chunks: zstd at level 0 (zarr 3's default compression),
    then CRC-32C (zarr 3's ``crc32c`` codec: 4 bytes per chunk, verified on every read)."""
    from zarr.codecs import Crc32cCodec, ZstdCodec

    return (ZstdCodec(level=0), Crc32cCodec())


def _write_rows(path: str | os.PathLike, index: int, rows: Mapping[str, tuple]) -> None:
    """Write one image's chunk of every per-image variable of the store (``rows``: name -> (dims, data); a
    variable not given is written at its fill value: NaN, ``""``), then mark it done. Every chunk is stored,
    also one of fill values only (zarr's ``write_empty_chunks``), so a done image's absent chunk is damage
    (:func:`damaged_chunks`). Variables a store of an earlier murk lacks are not written."""
    path = Path(path)
    value_shape = (len(ARMS), N_LEVELS, len(TASKS), 1, len(READOUTS))
    fill = {"value": (DIMS[1:], np.full(value_shape, np.nan, dtype=VALUE_DTYPE)),
            **{n: (DIMS[1:-1], np.full(value_shape[:-1], "", dtype=object)) for n in TEXT_READOUTS},
            "missing_reason": ("image", np.array([""], dtype=object)),
            "input_sha256": ("image", np.array([""], dtype=object))}
    data = {n: rows.get(n, v) for n, v in fill.items() if n in rows or is_zarr_array(path / n)}
    region = {"image": slice(index, index + 1)}
    xr.Dataset(data).to_zarr(path, region=region, consolidated=False, write_empty_chunks=True)
    xr.Dataset({"done": ("image", np.ones(1, dtype=bool))}).to_zarr(path, region=region, consolidated=False,
                                                                   write_empty_chunks=True)


def level_coords() -> dict[str, xr.DataArray]:
    """Coordinates of the ``level`` dimension, per arm: what a level is on each arm.

    Returns
    -------
    dict
        ``level`` (level; int 0-8); ``visibility_m`` (arm × level; float64, m): on ``fog`` the
        meteorological visibility V, on ``underwater`` the best-channel visibility V_best, ``inf`` at level 0
        (clean) and :data:`murk.scene.SWEEP_M` at levels 1-8 (spec Sec. III "Sweep"); on ``imagenet_c``
        ``inf`` at level 0 and NaN at its severities, which have no visibility (their placement on the
        physical axis is a measurement: the equivalent visibility of the nominal analysis); NaN on the
        controls ``blank`` and ``shuffled``, whose image is not a degradation. ``severity`` (arm × level;
        float64): the ImageNet-C fog severity on ``imagenet_c`` (0 = clean, 1-5, NaN beyond), NaN on the
        other arms.

    Notes
    -----
    No CF ``standard_name``: ``visibility_in_air`` would claim air on the underwater arm. Both are derived from
    the design (not read out), so :func:`merge_models` sets them on the cube whatever a store holds.
    """
    level = np.arange(N_LEVELS)
    sweep = np.concatenate([[np.inf], np.asarray(scene.SWEEP_M, dtype=float)])
    vis = np.full((len(ARMS), N_LEVELS), np.nan)
    sev = np.full((len(ARMS), N_LEVELS), np.nan)
    for i, arm in enumerate(ARMS):
        if arm in PHYSICAL_ARMS:
            vis[i] = sweep
        elif arm == "imagenet_c":
            vis[i, 0] = np.inf
            sev[i, : 1 + len(IMAGENET_C_SEVERITIES)] = np.arange(1 + len(IMAGENET_C_SEVERITIES))
    return {
        "level": xr.DataArray(level, dims="level", attrs={"long_name": "degradation level (0 = undegraded)"}),
        "visibility_m": xr.DataArray(vis, dims=("arm", "level"), coords={"arm": list(ARMS)}, attrs={
            "units": "m", "long_name": "visibility of the level: meteorological visibility V (fog), best-channel "
                                       "visibility V_best (underwater); inf = clean; NaN = a level without one "
                                       "(ImageNet-C severities, the controls)"}),
        "severity": xr.DataArray(sev, dims=("arm", "level"), coords={"arm": list(ARMS)}, attrs={
            "units": "1", "long_name": "ImageNet-C fog severity (imagenet_c arm; NaN on the other arms)"}),
    }


def sweep_visibility(ds: xr.Dataset | xr.DataArray) -> np.ndarray:
    """The visibility of each level on the physical arms: the axis crossing visibilities are read on.

    Parameters
    ----------
    ds : xarray.Dataset or DataArray
        A cube, or a selection of it, with the ``visibility_m`` coordinate (arm × level, or level alone once
        one arm is selected; :func:`level_coords`).

    Returns
    -------
    numpy.ndarray
        float64 (level,), m: ``inf`` at level 0, then the sweep (:data:`murk.scene.SWEEP_M`, or a design's
        shorter sweep where the cube holds fewer levels).

    Raises
    ------
    ValueError
        ``ds`` holds no physical arm (fog, underwater) to read the levels from, or its physical arms disagree.
    """
    vis = ds["visibility_m"]
    if "arm" in vis.dims:
        arms = [a for a in PHYSICAL_ARMS if a in vis["arm"].values]
        if not arms:
            raise ValueError(f"sweep_visibility: no physical arm ({', '.join(PHYSICAL_ARMS)}) among the arms "
                             f"{', '.join(map(str, vis['arm'].values))}: their levels have no visibility")
        rows = vis.sel(arm=arms).transpose("arm", "level").values
        if not all(np.array_equal(rows[0], r) for r in rows[1:]):
            raise ValueError(f"sweep_visibility: the physical arms' levels differ: {rows.tolist()}")
        return np.asarray(rows[0], dtype=np.float64)
    return np.asarray(vis.values, dtype=np.float64)


def empty_model_dataset(image_ids: Iterable[int], categories: Iterable[str]) -> xr.Dataset:
    """An all-missing dataset of one model's read-outs (the cube without ``model``).

    Parameters
    ----------
    image_ids : iterable of int, length N
        COCO image ids, in item order.
    categories : iterable of str, length N
        Target category name of each item.

    Returns
    -------
    xarray.Dataset
        ``value`` float64 (arm, level, task, image, readout) all NaN;
        ``verbal_text`` and ``top_token`` str (arm, level, task, image), empty;
        ``done`` bool (image), False; ``input_sha256`` str (image), empty.
    """
    image_ids = np.asarray(list(image_ids), dtype=np.int64)
    categories = np.asarray(list(categories), dtype=object)
    if image_ids.size != categories.size:
        raise ValueError("image_ids and categories must have the same length")
    shape = (len(ARMS), N_LEVELS, len(TASKS), image_ids.size, len(READOUTS))
    coords: dict[str, Any] = {
        "arm": ("arm", list(ARMS)),
        "task": ("task", list(TASKS)),
        "image": xr.DataArray(image_ids, dims="image", attrs={"long_name": "COCO image id"}),
        "category": xr.DataArray(categories.astype(str), dims="image", attrs={"long_name": "target category"}),
        "readout": ("readout", list(READOUTS)),
        **level_coords(),
    }
    data_vars = {
        "value": xr.DataArray(np.full(shape, np.nan, dtype=VALUE_DTYPE), dims=DIMS[1:], attrs={
            "long_name": "read-out value (answer: option index; correct, abstain, abstain2: 0/1; "
                         "c_int, verbal_conf, option_mass: probability; "
                         "verbal_stop: 0 = end-of-sequence, 1 = token limit)", "units": "1"}),
        "missing_reason": xr.DataArray(np.full(image_ids.size, "", dtype=object), dims="image",
                                       attrs={"long_name": "why this image has no read-outs ('' = it has)"}),
        "done": xr.DataArray(np.zeros(image_ids.size, dtype=bool), dims="image",
                             attrs={"long_name": "all conditions of this image are read out"}),
        "input_sha256": xr.DataArray(np.full(image_ids.size, "", dtype=object), dims="image", attrs={
            "long_name": "content digest of the image files this image was read out from (its own and its "
                         "shuffled-control partner's, murk.protocol.input_digests; '' = not recorded)"}),
    }
    for name in TEXT_READOUTS:
        data_vars[name] = xr.DataArray(np.full(shape[:-1], "", dtype=object), dims=DIMS[1:-1])
    ds = xr.Dataset(data_vars, coords=coords)
    ds.attrs["schema_version"] = SCHEMA_VERSION
    return ds


def _quiet():
    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.filterwarnings("ignore", message=".*[Cc]onsolidated metadata.*")
    # the fixed-width str coordinates (arm, task, readout, category) of a zarr 3 store: zarr-python reads them
    # back as written (a variable-length str would come back as numpy's StringDType, not <U)
    warnings.filterwarnings("ignore", message=".*FixedLengthUTF32.*does not have a Zarr V3 specification")
    return ctx


def open_readout_store(path: str | os.PathLike, image_ids, categories,
                       attrs: Mapping[str, Any], input_sha256=None, *,
                       images_per_shard: int = IMAGES_PER_SHARD) -> xr.Dataset:
    """Create, or reopen for resuming, one model's read-out store.

    The store is zarr 3, chunked by image and sharded (zarr's sharding codec):
    the chunks of ``images_per_shard`` images are kept in one shard file per
    variable, so a store is a few files per variable, not one per image.
    :func:`write_image` updates exactly one image's chunks, rewriting their shard
    files whole, each atomically (written beside, then renamed into place: a kill
    mid-write leaves the shard as it was, and a ``*.partial`` file, removed on
    resume). The ``done`` flag is written after the values, so an image
    interrupted half-way is read out again on resume. One process writes a store
    (:mod:`murk.pipeline`; shards of a read-out are separate stores), so no two
    writes race on a shard. A new store proves its content: every chunk carries a
    CRC-32C (zarr's ``crc32c`` after ``zstd``; each shard index has one too) and every
    chunk of a done image is stored, NaN ones too (:data:`murk.core.STORE_LAYOUT_ATTR`). On
    resume, images whose chunks are damaged or missing (:func:`murk.core.damaged_chunks`) are
    marked not done, with a warning naming the files, and read out again
    (:func:`forget_images_of_files`: a failing chunk its image alone, a failing index
    or file its shard's images); nothing sound is lost. A store of an earlier murk
    (no checksums; or zarr 2) is resumed as it is. With
    ``input_sha256``, images done from other image files (their recorded
    ``input_sha256`` is not empty and differs) are emptied and marked not done, with a
    warning naming them, so they are read out again; the other images are kept bit for bit.

    Parameters
    ----------
    path : path
        Zarr store (``outputs/readout/<model>.zarr``).
    image_ids, categories : sequences of length N
        The items, in order.
    attrs : mapping
        Provenance, best built by :func:`store_identity`: must contain
        ``config_hash``, ``items_hash``, ``model_id`` and ``depth_backend``; every
        key of :data:`IDENTITY_ATTRS` given here or recorded in the store must
        equal the store's.
    input_sha256 : sequence of str of length N, optional
        Each image's input digest (:func:`murk.protocol.input_digests`), which
        :func:`write_image` and :func:`write_missing` record with it.
    images_per_shard : int
        Images per shard file of a new store (default :data:`IMAGES_PER_SHARD`;
        at most N). An image written rewrites its shard of each variable; a damaged
        shard file is read out again whole.

    Returns
    -------
    xarray.Dataset
        The store's current content (lazy).

    Raises
    ------
    ValueError
        If an existing store was written with other settings (the message names
        each differing setting, what it changes, and the fix), for other images,
        or is damaged beyond resuming: its metadata missing or unreadable (the
        message says to delete it).
    murk.core.DiskFullError
        The disk is full while a new store is created (nothing is left of it).
    """
    path = Path(path)
    missing = [k for k in _REQUIRED_ATTRS if k not in attrs]
    if missing:
        raise ValueError(f"open_readout_store: attrs lack {missing}")
    ctx = _quiet()
    try:
        if path.exists() and not is_zarr_group(path):
            if path.is_dir() and not any(path.iterdir()):
                path.rmdir()  # an empty folder holds nothing to lose
            else:
                raise ValueError(
                    f"read-out store {path} exists but is not a complete zarr store (its metadata file zarr.json "
                    f"is missing: its creation was interrupted, or it was damaged or written by another tool). "
                    f"Delete it (rm -r {path}) and run again: the read-out starts afresh.")
        if is_zarr_group(path):  # zarr 3 (sharded), or zarr 2 of an earlier murk (resumed as it is)
            try:
                ds = xr.open_zarr(path, consolidated=False)
            except Exception as e:  # noqa: BLE001 - any failure to read metadata: name the store and the fix
                raise ValueError(
                    f"read-out store {path} cannot be opened ({type(e).__name__}: {e}): its metadata is damaged. "
                    f"Delete it (rm -r {path}) and run again: the read-out starts afresh.") from e
            if ds["value"].dtype != VALUE_DTYPE or list(ds["readout"].values) != list(READOUTS):
                raise ValueError(
                    f"read-out store {path} was written with another schema (value {ds['value'].dtype}, "
                    f"read-outs {list(ds['readout'].values)}; now {np.dtype(VALUE_DTYPE)}, {list(READOUTS)}); "
                    f"delete it to start afresh (rm -r {path}), or give this run another output_dir")
            have, want = [int(i) for i in ds.image.values], [int(i) for i in image_ids]
            n_changed = have != want and (have[:len(want)] == want or want[:len(have)] == have)
            if n_changed and _only_n_items_changed(ds.attrs, attrs, len(have), len(want)):
                raise ValueError(_n_items_message(path, ds.attrs.get("model_id", ""), len(have), len(want)))
            msg = _identity_diff(path, ds.attrs, attrs)
            if msg:
                raise ValueError(msg)
            if have != want:
                n_differ = (f" (it holds the first {len(have)} items, this run asks for {len(want)}: the model's "
                            f"n_items changed)" if have[:len(want)] == want or want[:len(have)] == have else "")
                raise ValueError(
                    f"read-out store {path} was written for other images{n_differ}; delete it to start afresh "
                    f"(rm -r {path}), or give this run another output_dir")
            with store_write_guard(path):   # a read-only shard: one line naming it and the fix
                _repair(path, ds)
                if input_sha256 is not None:
                    _forget_changed_inputs(path, [str(d) for d in input_sha256])
            return xr.open_zarr(path, consolidated=False)
        tmp = path.with_name(path.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        ds = empty_model_dataset(image_ids, categories)
        ds.attrs.update({k: _attr(v) for k, v in attrs.items()})
        if int(images_per_shard) < 1:
            raise ValueError(f"open_readout_store: images_per_shard={images_per_shard!r}; give a whole number >= 1")
        per_shard = max(1, min(int(images_per_shard), ds.sizes["image"]))
        ds.attrs[STORE_LAYOUT_ATTR] = STORE_LAYOUT  # what damaged_chunks may rely on (not part of the identity)
        enc = {name: {"chunks": tuple(1 if d == "image" else ds[name].sizes[d] for d in ds[name].dims),
                      "shards": tuple(per_shard if d == "image" else ds[name].sizes[d] for d in ds[name].dims)}
               for name in PER_IMAGE_VARIABLES}
        for name in ds.variables:  # every chunk (and every shard's index, zarr's default) carries a CRC-32C
            enc.setdefault(name, {})["compressors"] = _checksummed()
        with core.guard(path, "no store was created (the half-made one is removed); every other file is kept",
                            cleanup=[tmp]):
            ds.to_zarr(tmp, mode="w", encoding=enc, consolidated=False, zarr_format=3)
        os.replace(tmp, path)  # a store exists only once fully initialised
        return xr.open_zarr(path, consolidated=False)
    finally:
        ctx.__exit__(None, None, None)


def write_image(path: str | os.PathLike, index: int,
                results: Mapping[tuple[str, int, str], Mapping[str, Any]], input_sha256: str | None = None) -> None:
    """Write all read-outs of one image into a model's store, then mark it done.

    Parameters
    ----------
    path : path
        Store created by :func:`open_readout_store`.
    index : int
        Position of the image along ``image``.
    results : mapping
        ``(arm, level, task) -> {readout: value}`` with every key of
        :data:`READOUTS` and :data:`TEXT_READOUTS`; the arm ``"clean"`` is
        written to level 0 of ``fog``, ``underwater`` and ``imagenet_c``.
    input_sha256 : str, optional
        The image's input digest (:func:`murk.protocol.input_digests`), recorded with its values.

    Notes
    -----
    Every per-image chunk is written, fill values too (``missing_reason`` ``""``), then ``done``
    (:func:`damaged_chunks`): 1.07-1.40 times (median 1.19) the CPU time per image of a store without checksums
    and empty chunks (256-image shard, 2-core CPU, seven alternating runs of 60 images; 35-62 ms before).

    Raises
    ------
    murk.core.DiskFullError
        The disk is full: the message names the output root, says that the images
        written before are kept and this one is read again, and how to resume.
    StoreNotWritableError
        A shard file the file system will not let this user write (read-only, immutable): one line naming it
        and the fix (:mod:`murk.results._store_permissions`).
    """
    value = np.full((len(ARMS), N_LEVELS, len(TASKS), 1, len(READOUTS)), np.nan, dtype=VALUE_DTYPE)
    texts = {name: np.full(value.shape[:-1], "", dtype=object) for name in TEXT_READOUTS}
    for (arm, level, task), r in results.items():
        arms = ["fog", "underwater", "imagenet_c"] if arm == "clean" else [arm]
        t = TASKS.index(task)
        for a in arms:
            ai = ARMS.index(a)
            value[ai, level, t, 0, :] = [r[k] for k in READOUTS]
            for name in TEXT_READOUTS:
                texts[name][ai, level, t, 0] = str(r[name])
    rows = {"value": (DIMS[1:], value), **{n: (DIMS[1:-1], v) for n, v in texts.items()}}
    if input_sha256 is not None:
        rows["input_sha256"] = ("image", np.array([str(input_sha256)], dtype=object))
    ctx = _quiet()
    try:
        with core.guard(path, _STORE_KEPT.format(path=path, index=index)), store_write_guard(path, index):
            _write_rows(path, index, rows)  # every per-image chunk (missing_reason ""), then `done`
    finally:
        ctx.__exit__(None, None, None)


def _forget_changed_inputs(path: Path, want: list[str]) -> None:
    """Empty and mark not done the images done from other image files than ``want`` says
    (a store of an earlier murk, without ``input_sha256``, gets the variable, all unrecorded)."""
    if not is_zarr_array(path / "input_sha256"):
        n = len(want)
        xr.Dataset({"input_sha256": ("image", np.full(n, "", dtype=object))}).to_zarr(
            path, mode="a", consolidated=False, encoding={"input_sha256": {"chunks": (1,)}})
        return
    ds = xr.open_zarr(path, consolidated=False)
    have = [str(v) for v in ds["input_sha256"].values]
    done = ds["done"].values
    stale = [i for i, (a, b) in enumerate(zip(have, want)) if done[i] and a and b and a != b]
    if not stale:
        return
    blank = empty_model_dataset([int(ds["image"].values[0])], [""]).drop_vars(["category", "input_sha256"])
    blank = blank.drop_vars([c for c in blank.coords])
    for i in stale:  # values, texts and missing_reason emptied, then `done` cleared
        region = {"image": slice(i, i + 1)}
        blank.drop_vars("done").to_zarr(path, region=region, consolidated=False)
        xr.Dataset({"done": ("image", np.zeros(1, dtype=bool))}).to_zarr(path, region=region, consolidated=False)
    ids = ds["image"].values
    warnings.warn(f"read-out store {path}: {len(stale)} image(s) were read out from image files whose content has "
                  f"changed since (their own or their shuffled-control partner's); they are read out again: "
                  + ", ".join(f"image {int(ids[i])}" for i in stale), stacklevel=3)


#: what a full disk while an image is written keeps (:mod:`murk.core`)
_STORE_KEPT = ("the store {path} keeps every image written before this one; this image (position {index}) is not "
               "marked done, so the resumed read-out reads it again (a chunk file the full disk cut short is found "
               "and removed then)")


def _load_store(q: str | os.PathLike) -> xr.Dataset:
    """A read-out store, loaded; damage is reported with the files, the images and the fix."""
    q = Path(q)
    if not is_zarr_group(q):
        raise ValueError(f"read-out store {q} is missing or incomplete (no zarr.json): run the readout stage of "
                         f"its model again (delete the folder first if it exists: rm -r {q})")
    try:
        if empty_chunk_files(q):  # zarr reads an empty shard file as missing values, without an error
            raise ValueError("an empty chunk or shard file")
        ds = xr.open_zarr(q, consolidated=False).load()
        if store_damage(q, decode=False).damaged:  # zarr reads a missing chunk as fill values, without an error
            raise ValueError("a missing chunk or shard file of an image marked done")
        return ds
    except Exception as e:  # noqa: BLE001 - locate the damage, then say what to do
        try:
            damaged = damaged_chunks(q)
        except Exception:  # noqa: BLE001 - the metadata itself is unreadable
            damaged = {}
        if not damaged:
            raise ValueError(f"read-out store {q} cannot be read ({type(e).__name__}: {e}): it is damaged; "
                             f"delete it (rm -r {q}) and run the readout stage of its model again") from e
        listing = "; ".join(f"position {i}: {', '.join(f.name for f in fs)}" for i, fs in sorted(damaged.items()))
        raise ValueError(
            f"read-out store {q} has damaged or missing chunk files (empty, truncated, failing their checksum or "
            f"deleted, e.g. after a power loss or a disk error) for {len(damaged)} image(s) ({listing}): run the "
            f"readout stage of its model again (snakemake does so by itself: the store no longer matches its "
            f"marker); it re-reads exactly these images") from e


def _open_shards(p) -> xr.Dataset:
    """One model's read-outs from one store or a list of shard stores (concatenated along image)."""
    shards = [p] if isinstance(p, (str, os.PathLike)) else list(p)
    parts = [_load_store(q) for q in shards]
    if len(parts) == 1:
        return parts[0]
    for q, d in zip(shards[1:], parts[1:]):
        diff = [k for k in IDENTITY_ATTRS if d.attrs.get(k) != parts[0].attrs.get(k)]
        if diff:
            raise ValueError(f"shard {q} was written with other settings than {shards[0]} ({', '.join(diff)}); "
                             f"delete it (rm -r {q}) and rerun its readout")
    ds = xr.concat(parts, dim="image", data_vars="minimal", coords="minimal", compat="override",
                   combine_attrs="override")
    if not ds.indexes["image"].is_unique:
        raise ValueError(f"shards {shards} overlap in images; remove the stores of other shard sizes")
    return ds


def write_missing(path: str | os.PathLike, index: int, reason: str, input_sha256: str | None = None) -> None:
    """Record that one image cannot be read out (its values stay NaN) and mark it done.

    Used for bad input (a missing or truncated image, a missing depth map): the
    run goes on, nothing already computed is lost, and the reason is kept in
    ``missing_reason`` of the store, the cube and the paper's colophon. Its values
    (NaN) and texts (``""``) are written too, so that every chunk of a done image is
    stored (:func:`write_image`). A full disk raises :class:`murk.core.DiskFullError` and a read-only
    shard :class:`StoreNotWritableError`, as :func:`write_image`. ``input_sha256``: as
    :func:`write_image`'s.
    """
    rec = {"missing_reason": ("image", np.array([str(reason)], dtype=object))}
    if input_sha256 is not None:
        rec["input_sha256"] = ("image", np.array([str(input_sha256)], dtype=object))
    ctx = _quiet()
    try:
        with core.guard(path, _STORE_KEPT.format(path=path, index=index)), store_write_guard(path, index):
            _write_rows(path, index, rec)  # values NaN and texts "" stored too, then `done`
    finally:
        ctx.__exit__(None, None, None)


def merge_models(stores: Mapping[str, str | os.PathLike], out: str | os.PathLike,
                 attrs: Mapping[str, Any] | None = None, images=None) -> xr.Dataset:
    """Merge per-model read-out stores into the cube (atomic replace of ``out``).

    Parameters
    ----------
    stores : mapping model id -> store path, or list of shard store paths
        Shards (disjoint, in item order) are concatenated along ``image``.
    out : path
        Cube store (``outputs/cube.zarr``); written to a temporary sibling and
        moved into place, so a reader never sees a half-written cube.
    attrs : mapping, optional
        Extra global attributes (e.g. git commit).
    images : (image_ids, categories), optional
        The selection (``items.json``: its ``image_id`` and ``category`` columns,
        in order): the cube's ``image`` axis. Default: the union of the stores'
        images, the longest store's first.

    Returns
    -------
    xarray.Dataset
        The merged cube, loaded.

    Raises
    ------
    ValueError
        If the stores disagree on items, config or depth backend, a store
        has images not yet read out, or (with ``images``) holds an image that is
        not in the selection.
    murk.core.DiskFullError
        The disk is full while the cube is written: the previous cube is kept.

    Notes
    -----
    Stores of different sizes (a model read out on the first N items of the
    selection, its entry's ``n_items``) are merged over the union of their
    images, in the selection's order (the longest store's; a shorter store holds
    the first items): where a model was not asked about an image its read-outs
    are NaN, its text read-outs ``""`` and its ``missing_reason`` is
    :data:`NOT_RUN` (not bad input). The coordinate ``n_items`` (model, int64)
    records how many images each model was read out on; :func:`images_run` says
    which.
    """
    parts, models = [], []
    common = ("config_hash", "items_hash", "depth_backend")
    text_vars = (*TEXT_READOUTS, "missing_reason")
    first_attrs = None
    ctx = _quiet()
    try:
        for model, p in stores.items():
            ds = _open_shards(p)
            if not bool(ds["done"].all()):
                n = int((~ds["done"]).sum())
                raise ValueError(f"{p}: {n} images not read out yet; run the readout stage for {model} again")
            if first_attrs is None:
                first_attrs = dict(ds.attrs)
            elif any(ds.attrs.get(k) != first_attrs.get(k) for k in common):
                raise ValueError(f"{p} differs from the other stores in {common}; rerun its readout")
            models.append((model, ds.attrs))
            if "missing_reason" not in ds:  # stores written before bad-input records existed
                ds["missing_reason"] = ("image", np.full(ds.sizes["image"], "", dtype=object))
            for name in text_vars:  # object strings: numpy's StringDType cannot be outer-joined with a fill
                if name in ds:
                    ds[name] = ds[name].copy(data=np.asarray(ds[name].values, dtype=object))
            # the level's per-arm coordinates come from the design (level_coords), set on the cube below: a
            # store written before they were per arm holds them per level
            parts.append(ds.drop_vars(["done", "input_sha256", "visibility_m", "severity"], errors="ignore"))
    finally:
        ctx.__exit__(None, None, None)
    if not parts:
        raise ValueError("merge_models: no read-out stores given")
    # Stores of different sizes (a model read out on the first N items): the images in the
    # selection's order (the longest store's, which the shorter ones begin with), not sorted ids;
    # an image a model was not asked about is NaN, "" and missing_reason NOT_RUN.
    order: list[int] = []
    category: dict[int, str] = {}
    if images is not None:
        for img, cat in zip(*images):
            order.append(int(img))
            category[int(img)] = str(cat)
        for (model, _), ds in zip(models, parts):
            extra = [int(i) for i in ds["image"].values if int(i) not in category]
            if extra:
                raise ValueError(f"the read-out store of {model} holds {len(extra)} image(s) that are not in the "
                                 f"selection (e.g. {extra[:3]}): it belongs to another selection; delete it and run "
                                 f"its read-out again")
    for ds in sorted(parts, key=lambda d: -d.sizes["image"]):
        for img, cat in zip(ds["image"].values.tolist(), ds["category"].values.tolist()):
            if img not in category:
                order.append(img)
                category[img] = str(cat)
    n_run = [int(ds.sizes["image"]) for ds in parts]
    fill = {"value": np.nan, "missing_reason": NOT_RUN, **{name: "" for name in TEXT_READOUTS}}
    parts = [ds if ds["image"].values.tolist() == order else
             ds.drop_vars("category").reindex(image=order, fill_value=fill).assign_coords(
                 category=("image", [category[i] for i in order]))
             for ds in parts]
    cube = xr.concat(parts, dim="model", combine_attrs="drop", join="outer")
    cube["value"] = cube["value"].astype(VALUE_DTYPE)  # stores of older versions held float32
    cube = cube.assign_coords(
        model=("model", [m for m, _ in models]),
        model_revision=("model", [str(a.get("model_revision", "")) for _, a in models]),
        pipeline_check=("model", [bool(a.get("pipeline_check", 0)) for _, a in models]),
        n_visual_tokens=("model", [int(a.get("n_visual_tokens", -1)) for _, a in models]),
        kind=("model", [str(a.get("kind", "vlm")) for _, a in models]),
        n_items=("model", np.asarray(n_run, dtype=np.int64)),
        **{k: c for k, c in level_coords().items() if k != "level"},
    )
    cube["n_items"].attrs.update(long_name="images the model was read out on (the first n_items of the selection; "
                                           "the others have missing_reason 'not run')")
    cube = cube.transpose(*DIMS)
    cube.attrs = {k: first_attrs[k] for k in first_attrs if k in (*common, "depth_approximate", "depth_model")}
    cube.attrs["schema_version"] = SCHEMA_VERSION
    cube.attrs["pipeline_check"] = int(any(bool(a.get("pipeline_check", 0)) for _, a in models))
    if cube.attrs["pipeline_check"]:
        cube.attrs["note"] = ("PIPELINE CHECK: at least one model is a tiny randomly initialised checkpoint; "
                              "its numbers test the pipeline and say nothing about any real VLM")
    cube.attrs.update({k: _attr(v) for k, v in (attrs or {}).items()})
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    for name in (*TEXT_READOUTS, "missing_reason"):  # variable-length UTF-8 strings in the store
        cube[name] = cube[name].copy(data=np.asarray(cube[name].values, dtype=object))
    for v in cube.variables.values():  # encodings of the source stores do not apply
        v.encoding = {}
    with core.guard(out, f"the previous cube {out}, if any, is kept as it was (the new one, being written to "
                             f"{tmp}, is removed), and so is every read-out store", cleanup=[tmp]):
        cube.to_zarr(tmp, mode="w", consolidated=True, zarr_format=2)
    old = out.with_name(out.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)
    return cube


def images_run(ds: xr.Dataset) -> xr.DataArray:
    """Which images each model was asked about (its own images).

    Parameters
    ----------
    ds : xarray.Dataset
        The cube (:func:`merge_models`), or a selection of it.

    Returns
    -------
    xarray.DataArray
        bool, dims of ``missing_reason`` (model, image): False where
        ``missing_reason`` is :data:`NOT_RUN` (the model's ``n_items`` stopped
        before the image). Images with bad input count as run (they are the
        model's missing values, not a smaller sample). All True for a cube
        without ``missing_reason``.
    """
    if "missing_reason" not in ds:
        dims = [d for d in ("model", "image") if d in ds.dims]
        return xr.DataArray(np.ones([ds.sizes[d] for d in dims], dtype=bool), dims=dims,
                            coords={d: ds[d] for d in dims})
    return ds["missing_reason"] != NOT_RUN


def open_cube(path: str | os.PathLike) -> xr.Dataset:
    """Open the cube written by :func:`merge_models` (lazy)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"cube {path} not found: run the analyse stage (snakemake) first")
    return xr.open_zarr(path)


def t3_image_scores(value: xr.DataArray) -> xr.DataArray:
    """Collapse ``task`` to the two tasks of the spec, ``t2`` and ``t3``.

    t3's image-level score is the mean of its two questions (true category and
    distractor), so t3 accuracy is the fraction of correct verification
    answers (spec Sec. III, chance 0.5).

    Parameters
    ----------
    value : DataArray with a ``task`` dim holding :data:`TASKS`

    Returns
    -------
    DataArray with ``task`` = ``["t2", "t3"]``
    """
    t2 = value.sel(task="t2", drop=True)
    t3 = value.sel(task=["t3_true", "t3_false"]).mean("task")
    return xr.concat([t2, t3], dim=xr.DataArray(["t2", "t3"], dims="task", name="task"))
