"""Metric depth z (m) per image, estimated once on the clean image and cached.

Backends
--------
``depth-anything-v2``
    Depth Anything V2, metric outdoor model, small (Yang et al. 2024; spec
    Sec. III), through transformers' ``DepthAnythingForDepthEstimation``. Its
    ``predicted_depth`` is in metres (``pipeline(...)["depth"]`` is an 8-bit
    picture, not metres, and is not used). Default checkpoint
    ``depth-anything/Depth-Anything-V2-Metric-Outdoor-Small-hf``, or any local
    folder holding such a checkpoint.
``folder``
    Precomputed depth maps read from a folder given as ``model``: one
    ``<image_id>.npy`` per image, float (H, W) in metres (e.g. written by another
    estimator or by an earlier run of the depth stage on another machine); a map
    of another size is resized (bilinear) to the image. Its name records the
    folder, its revision the folder's ``manifest.json`` revision if present.
``constant``
    An explicitly *approximate* backend for runs without weights: every pixel
    at 13.8 m, the spec's median over images of the median scene depth
    (Sec. III). With a constant depth the fog is spatially uniform; crossing
    visibilities then scale with the assumed depth (W does not). The cube and
    the paper name the backend.

All depths are clipped to [0.5, 80] m (spec Sec. III).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from murk import core

__all__ = ["DEPTH_MIN_M", "DEPTH_MAX_M", "CONSTANT_DEPTH_M", "DepthBackend", "get_backend",
           "depth_cache_dir", "load_depth", "save_depth", "write_manifest", "read_manifest",
           "median_scene_depth_m", "is_cached",
           "set_current", "current_depth", "backend_from_record", "has_depth"]

DEPTH_MIN_M = 0.5     #: spec Sec. III: depth clipped to [0.5, 80] m
DEPTH_MAX_M = 80.0    #: spec Sec. III
CONSTANT_DEPTH_M = 13.8  #: spec Sec. III: median over images of the median scene depth


@dataclass
class DepthBackend:
    """A depth estimator.

    Attributes
    ----------
    name : str
        Backend name recorded in the cube (``depth-anything-v2:<model>``,
        ``folder:<folder name>`` or ``constant-13.8m``).
    approximate : bool
        True for a backend that does not estimate depth from the image.
    model_id, revision : str
        Checkpoint and its revision ("" for the constant backend; a hub snapshot's commit; for a
        local folder ``"sha256:"`` and 16 hex digits of its content, :func:`murk.core.checkpoint_revision`).
    """

    name: str
    approximate: bool
    model_id: str = ""
    revision: str = ""
    _model: object = None
    _processor: object = None
    _folder: Path | None = None

    def __call__(self, image: np.ndarray, image_id: int | None = None) -> np.ndarray:
        """Depth of one clean image.

        Parameters
        ----------
        image : uint8 ndarray (H, W, 3), sRGB
        image_id : int, optional
            COCO image id; required by the ``folder`` backend (the file name).

        Returns
        -------
        float32 ndarray (H, W), metres, clipped to [0.5, 80].

        Raises
        ------
        ValueError
            Not an (H, W, 3) image; ``folder`` backend without ``image_id`` or with a
            map that is not 2-D.
        FileNotFoundError
            ``folder`` backend: no ``<image_id>.npy`` in the folder.
        """
        if image.ndim != 3 or image.shape[2] != 3:
            raise ValueError(f"depth: expected an (H, W, 3) image, got shape {image.shape}")
        h, w = image.shape[:2]
        if self.approximate:
            return np.full((h, w), CONSTANT_DEPTH_M, dtype=np.float32)
        if self._folder is not None:
            if image_id is None:
                raise ValueError(f"depth backend {self.name!r} reads <image_id>.npy: pass image_id")
            p = self._folder / f"{int(image_id)}.npy"
            if not p.is_file():
                raise FileNotFoundError(f"depth map {p} missing in the precomputed depth folder "
                                        f"{self._folder}: add it, or use another depth backend")
            z = np.asarray(np.load(p), dtype=np.float32)
            if z.ndim != 2:
                raise ValueError(f"depth map {p} must be 2-D (H, W) in metres, got shape {z.shape}")
            if z.shape != (h, w):
                from PIL import Image

                z = np.asarray(Image.fromarray(z, mode="F").resize((w, h), Image.Resampling.BILINEAR),
                               dtype=np.float32)
            return np.clip(z, DEPTH_MIN_M, DEPTH_MAX_M).astype(np.float32)
        import torch
        from PIL import Image

        inputs = self._processor(images=Image.fromarray(image), return_tensors="pt")
        inputs = {k: v.to(self._model.device) for k, v in inputs.items()}
        with torch.inference_mode():
            out = self._model(**inputs)
        post = self._processor.post_process_depth_estimation(out, target_sizes=[(h, w)])
        depth = post[0]["predicted_depth"].float().cpu().numpy()
        return np.clip(depth, DEPTH_MIN_M, DEPTH_MAX_M).astype(np.float32)

    def describe(self) -> dict:
        """Provenance recorded in the depth cache, the cube and the paper."""
        return {"depth_backend": self.name, "depth_approximate": int(self.approximate),
                "depth_model": self.model_id, "depth_revision": self.revision}


def get_backend(backend: str = "auto", model: str | None = None) -> DepthBackend:
    """Build a depth backend.

    Parameters
    ----------
    backend : {"auto", "depth-anything-v2", "folder", "constant"}
        ``auto`` is ``constant`` when ``MURK_OFFLINE=1`` and
        ``depth-anything-v2`` otherwise.
    model : str, optional
        Hub id or local folder of a Depth Anything V2 metric checkpoint; for
        ``folder``, the folder of precomputed ``<image_id>.npy`` maps (metres).
        None: the run settings' ``depth_model`` (``data/workflow.yaml``, the one
        home of the default).

    Raises
    ------
    ValueError
        Unknown backend name.
    FileNotFoundError
        ``folder``: the folder does not exist.
    OSError
        The checkpoint cannot be loaded (message names it and the fix).
    """
    if backend == "auto":
        backend = "constant" if core.offline() else "depth-anything-v2"
    if model is None and backend != "constant":
        from murk.core import run_default

        model = str(run_default("depth_model"))
    if backend == "constant":
        return DepthBackend(name=f"constant-{CONSTANT_DEPTH_M}m", approximate=True)
    if backend == "folder":
        folder = Path(model)
        if not folder.is_dir():
            raise FileNotFoundError(f"depth folder {folder} not found: give a folder of <image_id>.npy "
                                    f"maps in metres as model=")
        revision = str(read_manifest(folder).get("depth_revision", "")) if (folder / "manifest.json").is_file() else ""
        return DepthBackend(name=f"folder:{folder.resolve().name}", approximate=False,
                            model_id=str(folder.resolve()), revision=revision, _folder=folder)
    if backend != "depth-anything-v2":
        raise ValueError(f"unknown depth backend {backend!r}: use 'auto', 'depth-anything-v2', 'folder' "
                         f"or 'constant'")
    import torch
    from transformers import AutoImageProcessor, DepthAnythingForDepthEstimation

    local = Path(model).is_dir()
    kw = {"local_files_only": True} if (core.offline() or local) else {}
    try:
        processor = AutoImageProcessor.from_pretrained(model, **kw)
        net = DepthAnythingForDepthEstimation.from_pretrained(model, **kw)
    except OSError as e:
        raise OSError(f"depth model {model!r} cannot be loaded ({e}). Give a local folder with a Depth "
                      f"Anything V2 metric checkpoint, allow network access, or use backend='constant' "
                      f"(an approximation the paper reports)") from e
    if getattr(net.config, "depth_estimation_type", None) != "metric":
        raise ValueError(f"depth model {model!r} is not a metric model (depth_estimation_type="
                         f"{getattr(net.config, 'depth_estimation_type', None)!r}); use a *-Metric-* checkpoint")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    net = net.to(device).eval()
    # a local folder is named by its content (murk.core): a re-saved checkpoint is another revision
    revision = core.checkpoint_revision(model) if local else str(getattr(net.config, "_commit_hash", "") or "")
    return DepthBackend(name=f"depth-anything-v2:{model if not local else Path(model).name}",
                        approximate=False, model_id=str(model), revision=revision,
                        _model=net, _processor=processor)


def backend_from_record(record: dict) -> DepthBackend:
    """The depth backend a depth stage recorded, built again (for the deployable monitor).

    Parameters
    ----------
    record : dict
        :func:`current_depth` (or :meth:`DepthBackend.describe`): ``depth_backend``
        (the name) and ``depth_model``.

    Returns
    -------
    DepthBackend
        The same backend (name, model and, for a checkpoint, revision).

    Raises
    ------
    ValueError
        An unknown backend name, or a checkpoint whose name or revision now differs
        from the record (the depth stage must run again).
    FileNotFoundError, OSError
        As :func:`get_backend`.
    """
    name = str(record.get("depth_backend", ""))
    kind = "constant" if name.startswith("constant-") else name.split(":", 1)[0]
    if kind not in ("constant", "folder", "depth-anything-v2"):
        raise ValueError(f"unknown depth backend {name!r} in the depth record: run the depth stage again")
    backend = get_backend(kind, str(record.get("depth_model") or "") or None)
    rev = str(record.get("depth_revision", ""))
    if backend.name != name or (kind == "depth-anything-v2" and rev and backend.revision != rev):
        raise ValueError(f"the depth backend recorded by the depth stage ({name}, revision {rev or '-'}) is now "
                         f"{backend.name} (revision {backend.revision or '-'}): run the depth stage again")
    return backend


def depth_cache_dir(backend_name: str, root: str | os.PathLike | None = None) -> Path:
    """Cache folder of one backend: ``outputs/depth/<backend slug>/``."""
    return core.depth_dir(root) / core.model_slug(backend_name)


def save_depth(folder: Path, image_id: int, depth_m: np.ndarray) -> Path:
    """Write one depth map atomically as ``<image_id>.npy`` (float32, metres)."""
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{int(image_id)}.npy"
    tmp = folder / f".{int(image_id)}.npy.tmp"
    with core.guard(out, "the depth maps already written are kept (the depth stage skips them when it runs again)", cleanup=[tmp]), open(tmp, "wb") as f:
        np.save(f, depth_m.astype(np.float32))
    os.replace(tmp, out)
    return out


def has_depth(folder: Path, image_id: int) -> bool:
    """Whether the cache holds a map for ``image_id`` (the depth stage skips bad images: they have none)."""
    return (Path(folder) / f"{int(image_id)}.npy").is_file()


def load_depth(folder: Path, image_id: int, shape: tuple[int, int] | None = None) -> np.ndarray:
    """Read one cached depth map (float32 (H, W), metres).

    Parameters
    ----------
    folder : path
        The depth cache (:func:`depth_cache_dir`).
    image_id : int
        COCO image id.
    shape : (H, W), optional
        The presented image's shape: a map of another shape is refused (the cache
        holds maps at the presented size; another shape means it is stale or damaged).

    Raises
    ------
    FileNotFoundError
        If the depth stage has not produced it (the message names the file and the fix).
    ValueError
        If the file cannot be read as a 2-D array, or its shape is not ``shape``
        (the message names the file and the fix).
    """
    p = Path(folder) / f"{int(image_id)}.npy"
    if not p.is_file():
        raise FileNotFoundError(
            f"depth map {p} missing (the depth stage writes none for an image it cannot read, or it was deleted): "
            f"run the depth stage (again: make demo ARGS='--forcerun depth', snakemake --forcerun depth); a read-out "
            f"store that recorded the image as missing keeps that record until it is removed (rm -r the store and "
            f"its .done marker, before that command)")
    fix = (f"delete {p}, and the read-out stores that recorded the image as missing with their .done markers (rm -r: "
           f"a store keeps that record), then run the depth stage again: make demo ARGS='--forcerun depth' "
           f"(snakemake --forcerun depth)")
    try:
        z = np.load(p)
    except (OSError, ValueError, EOFError) as e:
        raise ValueError(f"depth map {p} cannot be read ({e}): {fix}") from e
    if z.ndim != 2 or (shape is not None and tuple(z.shape) != tuple(shape)):
        want = f"{tuple(shape)}, the presented image's" if shape is not None else "2-D"
        raise ValueError(f"depth map {p} has shape {tuple(z.shape)}, not {want}: the cache is stale or damaged; {fix}")
    return z


def median_scene_depth_m(folder: Path, image_ids) -> float:
    """Median over images of the median scene depth (m) of a depth cache.

    The spec (Sec. III) reports 13.8 m for Depth Anything V2 on its 1000 items.

    Parameters
    ----------
    folder : path
        Depth cache (``<image_id>.npy``, metres).
    image_ids : iterable of int

    Returns
    -------
    float
        Metres; NaN for no images.

    Raises
    ------
    FileNotFoundError
        If a map is missing.
    """
    medians = [float(np.nanmedian(load_depth(folder, i))) for i in image_ids
               if (Path(folder) / f"{int(i)}.npy").is_file()]  # images skipped as bad input have no map
    return float(np.median(medians)) if medians else float("nan")


def write_manifest(folder: Path, backend: DepthBackend, image_ids, written=None, skipped=None,
                   image_sha256=None) -> Path:
    """Record the backend, its model id and revision, the images and the median scene
    depth of a depth cache in ``manifest.json``.

    Keys: the backend's :meth:`DepthBackend.describe` (``depth_backend``,
    ``depth_approximate``, ``depth_model``, ``depth_revision``), ``image_ids``,
    ``median_scene_depth_m`` (:func:`median_scene_depth_m`; spec Sec. III),
    ``per_image`` (image id -> model id and revision that wrote the map, merged with
    an existing manifest so that maps kept from earlier runs keep their provenance;
    the ids in *written*, maps written in this run, get *backend*'s) and ``skipped``
    (image id -> why the depth stage wrote no map for it in this run: a missing,
    truncated or undecodable image; *skipped*, a mapping). With *image_sha256* (image id
    -> the content digest of the image file, as the select stage recorded it), each map
    written in this run records the digest of the image it was computed from
    (``per_image[id]["image_sha256"]``, which :func:`is_cached` compares).
    """
    folder = Path(folder)
    ids = [int(i) for i in image_ids]
    old = read_manifest(folder) if (folder / "manifest.json").is_file() else {}
    per_image = dict(old.get("per_image", {}))
    mine = {"depth_model": backend.model_id, "depth_revision": backend.revision}
    for i in ids:
        per_image.setdefault(str(i), mine)
    for i in written or ():
        per_image[str(int(i))] = mine
        digest = (image_sha256 or {}).get(str(int(i)))
        if digest:
            per_image[str(int(i))] = {**mine, "image_sha256": str(digest)}
    m = {**backend.describe(), "image_ids": ids, "median_scene_depth_m": median_scene_depth_m(folder, ids),
         "per_image": per_image, "skipped": {str(int(k)): str(v) for k, v in (skipped or {}).items()}}
    out = folder / "manifest.json"
    tmp = out.with_suffix(".tmp")
    with core.guard(out, "the depth maps already written are kept (the depth stage skips them when it runs again)", cleanup=[tmp]):
        tmp.write_text(json.dumps(m, indent=1))
    os.replace(tmp, out)
    return out


def read_manifest(folder: Path) -> dict:
    """The ``manifest.json`` of a depth cache (see :func:`write_manifest`).

    Raises
    ------
    FileNotFoundError
        If the depth stage has not written it.
    """
    p = Path(folder) / "manifest.json"
    if not p.is_file():
        raise FileNotFoundError(f"{p} missing: run the depth stage first")
    return json.loads(p.read_text())


def is_cached(folder: Path, image_id: int, backend: DepthBackend, image_sha256: str | None = None) -> bool:
    """Whether ``<image_id>.npy`` exists and was written by *backend*'s model id and revision
    from the image file whose content digest is *image_sha256*.

    A map without a manifest entry (older caches) counts as cached, and so does one whose
    entry records no image digest, or when *image_sha256* is None. Use it to skip
    work: a map from another revision of the same model, or of an image file whose
    content changed since (:func:`murk.core.file_digest`), is recomputed.
    """
    folder = Path(folder)
    if not (folder / f"{int(image_id)}.npy").is_file():
        return False
    if not (folder / "manifest.json").is_file():
        return True
    entry = read_manifest(folder).get("per_image", {}).get(str(int(image_id)))
    if entry is None:
        return True
    if image_sha256 and entry.get("image_sha256") and entry["image_sha256"] != image_sha256:
        return False  # the image changed since its map was computed
    return (entry.get("depth_model"), entry.get("depth_revision")) == (backend.model_id, backend.revision)


def set_current(folder: Path, backend: DepthBackend, root: str | os.PathLike | None = None,
                run_id: str | None = None) -> Path:
    """Make ``folder`` the depth cache the later stages of this output root read.

    Writes ``outputs/depth/current.json`` (atomically): the backend's provenance
    (:meth:`DepthBackend.describe`), the cache folder's name and, when given, the
    identity of the run it was written for (``run_id``, :func:`murk.pipeline.run_id`),
    which the read-out stages check against ``items_meta.json``.
    """
    pointer = core.depth_dir(root) / "current.json"
    pointer.parent.mkdir(parents=True, exist_ok=True)
    tmp = pointer.with_name(".current.json.tmp")
    rec = {**backend.describe(), "folder": Path(folder).name, **({"run_id": str(run_id)} if run_id else {})}
    with core.guard(pointer, "the depth maps already written are kept (the depth stage skips them when it runs again)", cleanup=[tmp]):
        tmp.write_text(json.dumps(rec, indent=1, sort_keys=True))
    os.replace(tmp, pointer)
    return pointer


def current_depth(root: str | os.PathLike | None = None) -> dict:
    """The depth cache written by the last depth stage of this output root.

    Returns
    -------
    dict
        The backend's provenance (``depth_backend``, ``depth_approximate``,
        ``depth_model``, ``depth_revision``), ``folder`` (its name) and ``path``
        (the cache folder, :class:`pathlib.Path`).

    Raises
    ------
    FileNotFoundError
        If the depth stage has not run for this output root.
    """
    pointer = core.depth_dir(root) / "current.json"
    if not pointer.is_file():
        raise FileNotFoundError(f"{pointer} missing: run the depth stage first (notebooks/02_depth.py)")
    current = json.loads(pointer.read_text())
    current["path"] = core.depth_dir(root) / current["folder"]
    return current
