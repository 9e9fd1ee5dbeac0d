"""A read-out store's damaged chunk files (a power loss, a killed write) found and repaired: the images they held
are read again (:func:`damaged_chunks`).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import xarray as xr

from murk.core import TEXT_READOUTS

__all__ = ["damaged_chunks"]


#: metadata files of a zarr store (zarr 3: ``zarr.json``; zarr 2, stores of earlier murk versions: the others)
_METADATA_FILES = ("zarr.json", ".zgroup", ".zarray", ".zattrs")


def _has_metadata(path: Path) -> bool:
    """Whether ``path`` holds a zarr group's metadata (zarr 3 or zarr 2)."""
    return (path / "zarr.json").is_file() or (path / ".zgroup").is_file()


def _is_array(folder: Path) -> bool:
    return (folder / "zarr.json").is_file() or (folder / ".zarray").is_file()


def _empty_chunk_files(path: Path) -> list[Path]:
    """Chunk and shard files of zero bytes: zarr never writes one (an empty shard is deleted), and an empty
    shard file reads as the fill value without an error (zarr 3.1), so it is damage found by its size."""
    return sorted(f for f in path.rglob("*") if f.is_file() and f.name not in _METADATA_FILES
                  and not f.name.endswith(".partial") and f.stat().st_size == 0)


def damaged_chunks(path: str | os.PathLike) -> dict[int, list[Path]]:
    """The chunk (or shard) files of a read-out store that cannot be decoded, by image position.

    A chunk or shard file can be empty or truncated after a power loss or a full
    disk (the file was renamed into place before its data reached the disk). Each
    per-image variable (``value``, the text read-outs, ``missing_reason``,
    ``done``) is decoded; where that fails, file by file along ``image``. In a
    sharded store (zarr 3, :data:`IMAGES_PER_SHARD`) a shard file holds several
    images, and a damaged one is listed for each of its images.

    Parameters
    ----------
    path : path
        A store written by :func:`open_readout_store` (zarr 3, sharded; or zarr 2, one file per image chunk).

    Returns
    -------
    dict
        Image position -> damaged chunk or shard files (empty when the store is sound).
    """
    import zarr

    path = Path(path)
    out: dict[int, list[Path]] = {}
    for name in ("value", *TEXT_READOUTS, "missing_reason", "done", "input_sha256"):
        folder = path / name
        if not _is_array(folder):
            continue
        arr = zarr.open_array(folder, mode="r")  # zarr 3 or 2, as its metadata says
        empty = set(_empty_chunk_files(folder))
        if not empty:
            try:
                arr[...]
                continue
            except Exception:  # noqa: BLE001 - any codec error means a damaged file; located below
                pass
        dims = list(getattr(arr.metadata, "dimension_names", None) or arr.attrs.get("_ARRAY_DIMENSIONS", []))
        axis = dims.index("image") if "image" in dims else 0
        step = int((getattr(arr, "shards", None) or arr.chunks)[axis])  # images per stored file
        n = int(arr.shape[axis])
        for j in range(-(-n // step)):
            sel = tuple(slice(j * step, min(n, (j + 1) * step)) if a == axis else slice(None)
                        for a in range(arr.ndim))
            f = folder / arr.metadata.encode_chunk_key(tuple(j if a == axis else 0 for a in range(arr.ndim)))
            try:
                if f in empty:
                    raise ValueError(f"{f} is empty")
                arr[sel]
            except Exception:  # noqa: BLE001
                for i in range(j * step, min(n, (j + 1) * step)):
                    out.setdefault(i, []).append(f)
    return out


def _repair(path: Path, ds: xr.Dataset) -> None:
    """Mark images with damaged chunks as not done (dropping the damaged files), and remove
    the half-written chunk files (``*.partial``) of a killed write."""
    for f in path.rglob("*.partial"):
        f.unlink(missing_ok=True)
    damaged = damaged_chunks(path)
    if not damaged:
        return
    ids = ds["image"].values
    for files in damaged.values():
        for f in files:
            f.unlink(missing_ok=True)  # reads as the fill value (NaN, "", not done)
    for i in damaged:
        xr.Dataset({"done": ("image", np.zeros(1, dtype=bool))}).to_zarr(
            path, region={"image": slice(i, i + 1)}, consolidated=False)
    listing = "\n".join(f"  image {int(ids[i])} (position {i}): " + ", ".join(str(f) for f in fs)
                        for i, fs in sorted(damaged.items()))
    warnings.warn(f"read-out store {path}: {len(damaged)} image(s) had damaged chunk files (empty or truncated, "
                  f"e.g. after a power loss or a full disk); they were removed and these images are read out "
                  f"again:\n{listing}", stacklevel=3)

