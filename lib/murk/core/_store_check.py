"""A read-out store's damaged or missing chunk files (a power loss, a flipped bit, a deleted file) found, with zarr
and NumPy only (the marker step of the Snakefile checks a store without importing xarray): :func:`damaged_chunks`,
:func:`unfinished_images`. :func:`murk.results.forget_images_of_files` repairs what they find.

What proves a store's content
-----------------------------
A store written by this murk (its attribute :data:`STORE_LAYOUT_ATTR` is :data:`STORE_LAYOUT`) proves it:

* every chunk (one image of one variable) carries a CRC-32C checksum (zarr 3's ``crc32c`` codec, after
  ``zstd`` in the sharding codec's inner chain), and every shard file's index carries one too (zarr's
  default ``index_codecs``). zarr verifies both on every read and raises on a mismatch; a shard file holds
  nothing but its chunks and its index, so any flipped byte of it fails one of the two checks (CRC-32C
  finds every error burst of up to 32 bits);
* every chunk of an image marked done is stored, also one that holds only fill values (NaN, ``""``):
  :func:`murk.results.write_image` and :func:`murk.results.write_missing` write every per-image variable
  with zarr's ``write_empty_chunks``. A shard file, or a chunk in a shard's index, that is absent for an
  image marked done is therefore damage, not fill values.

A store of an earlier murk (no such attribute: no checksums, all-fill chunks omitted) is read as it is.
There, damage is what fails to decode (an empty or truncated file, a corrupt zstd frame), and a done image
with no ``missing_reason`` whose ``value`` file is absent (it always held read-outs). A changed chunk that
still decodes is found only by the store's marker (:func:`murk.pipeline.forget_changed`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import numpy as np

from murk.core._identity import store_attrs
from murk.core._schema import TEXT_READOUTS

__all__ = ["PER_IMAGE_VARIABLES", "STORE_LAYOUT_ATTR", "STORE_LAYOUT", "StoreDamage", "store_damage", "damaged_chunks",
           "chunk_files", "unfinished_images", "is_zarr_group", "is_zarr_array", "empty_chunk_files", "proves_content"]


#: metadata files of a zarr store (zarr 3: ``zarr.json``; zarr 2, stores of earlier murk versions: the others)
_METADATA_FILES = ("zarr.json", ".zgroup", ".zarray", ".zattrs")
#: the variables of a read-out store with one chunk per image (the others are coordinates, written once)
PER_IMAGE_VARIABLES = ("value", *TEXT_READOUTS, "missing_reason", "done", "input_sha256")
#: the store attribute that records how its chunks are stored (not part of its identity: a store of an
#: earlier murk, without it, is resumed as it is)
STORE_LAYOUT_ATTR = "store_layout"
#: :data:`STORE_LAYOUT_ATTR` of a store whose every chunk carries a CRC-32C checksum and whose done images have
#: every chunk stored (the module's docstring)
STORE_LAYOUT = "crc32c, every chunk of a done image stored"
#: an absent chunk in a shard index (zarr's sharding specification: offset and length 2**64 - 1)
_ABSENT = np.uint64(2**64 - 1)


def is_zarr_group(path: str | os.PathLike) -> bool:
    """Whether folder ``path`` holds a zarr group's metadata (zarr 3 ``zarr.json`` or zarr 2 ``.zgroup``)."""
    return (Path(path) / "zarr.json").is_file() or (Path(path) / ".zgroup").is_file()


def is_zarr_array(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` holds a zarr array's metadata (zarr 3 ``zarr.json`` or zarr 2 ``.zarray``)."""
    return (Path(folder) / "zarr.json").is_file() or (Path(folder) / ".zarray").is_file()


def empty_chunk_files(path: str | os.PathLike) -> list[Path]:
    """Chunk and shard files of zero bytes under ``path`` (sorted): zarr never writes one (an empty shard is
    deleted), and an empty shard file reads as the fill value without an error (zarr 3.1), so it is damage
    found by its size."""
    return sorted(f for f in path.rglob("*") if f.is_file() and f.name not in _METADATA_FILES
                  and not f.name.endswith(".partial") and f.stat().st_size == 0)


class _Layout:
    """One per-image array of a store: which file holds which images."""

    def __init__(self, folder: Path):
        import zarr

        self.folder = folder
        self.arr = zarr.open_array(folder, mode="r")  # zarr 3 or 2, as its metadata says
        arr = self.arr
        dims = list(getattr(arr.metadata, "dimension_names", None) or arr.attrs.get("_ARRAY_DIMENSIONS", []))
        self.axis = dims.index("image") if "image" in dims else 0
        self.step = int((getattr(arr, "shards", None) or arr.chunks)[self.axis])  # images per stored file
        self.n = int(arr.shape[self.axis])

    def files(self) -> list[tuple[Path, range]]:
        """Each stored file (shard, or chunk of zarr 2) and the image positions it holds."""
        out = []
        for j in range(-(-self.n // self.step)):
            key = self.arr.metadata.encode_chunk_key(tuple(j if a == self.axis else 0 for a in range(self.arr.ndim)))
            out.append((self.folder / key, range(j * self.step, min(self.n, (j + 1) * self.step))))
        return out

    def read(self, images: range):
        sel = tuple(slice(images.start, images.stop) if a == self.axis else slice(None) for a in range(self.arr.ndim))
        return self.arr[sel]

    def stored(self, f: Path, images: range) -> np.ndarray | None:
        """Whether each image's chunk is in shard file ``f``'s index (bool, one per image of ``images``), or None
        where the array is not sharded with its index at the end (a zarr 2 store: one file per chunk)."""
        codecs = getattr(self.arr.metadata, "codecs", ())
        if len(codecs) != 1 or type(codecs[0]).__name__ != "ShardingCodec":
            return None
        cfg = codecs[0].to_dict()["configuration"]
        if cfg.get("index_location", "end") != "end" or [c["name"] for c in cfg["index_codecs"]] != ["bytes", "crc32c"]:
            return None
        per_shard = [s // c for s, c in zip(self.arr.shards, self.arr.chunks)]
        size = 16 * int(np.prod(per_shard)) + 4  # (offset, length) as little-endian uint64 per chunk, then CRC-32C
        data = f.read_bytes()
        if len(data) < size:
            return None  # cut short: found by decoding
        index = np.frombuffer(data[-size:-4], dtype="<u8").reshape(*per_shard, 2)
        present = np.moveaxis(index[..., 0] != _ABSENT, self.axis, 0).reshape(per_shard[self.axis], -1).any(axis=1)
        return present[: len(images)]


def _layouts(path: Path) -> dict[str, _Layout]:
    return {name: _Layout(path / name) for name in PER_IMAGE_VARIABLES if is_zarr_array(path / name)}


def proves_content(path: str | os.PathLike) -> bool:
    """Whether a store's attribute :data:`STORE_LAYOUT_ATTR` is :data:`STORE_LAYOUT` (False for a store of an
    earlier murk, or one whose metadata cannot be read: its opening names that)."""
    try:
        return store_attrs(path).get(STORE_LAYOUT_ATTR) == STORE_LAYOUT
    except (OSError, ValueError, AttributeError):
        return False


class StoreDamage(NamedTuple):
    """What :func:`store_damage` found in a read-out store."""

    #: image position -> the damaged or missing files that hold it
    damaged: dict[int, list[Path]]
    #: files that decode for none of their images (an index that fails, a file emptied or cut short)
    broken: set[Path]
    #: (image position, variable) whose own chunk fails to decode, in a file whose other chunks decode
    bad_chunks: set[tuple[int, str]]


def store_damage(path: str | os.PathLike, decode: bool = True) -> StoreDamage:
    """The damaged and missing chunks of a read-out store, as :func:`damaged_chunks` finds them, and per file.

    Parameters
    ----------
    path : path
        A read-out store.
    decode : bool
        False: only the missing chunks of done images (the caller decoded the store without an error).

    Returns
    -------
    StoreDamage
        ``damaged``, ``broken`` (to be removed) and ``bad_chunks`` (to be emptied).
    """
    path = Path(path)
    layouts = _layouts(path)
    damaged: dict[int, list[Path]] = {}
    broken: set[Path] = set()
    bad_chunks: set[tuple[int, str]] = set()

    def add(i: int, f: Path) -> None:
        if f not in damaged.setdefault(i, []):
            damaged[i].append(f)

    # 1. what fails to decode (a checksum, a zstd frame, an index, a file emptied or cut short), by image
    for name, lay in layouts.items() if decode else ():
        empty = set(empty_chunk_files(lay.folder))
        if not empty:
            try:
                lay.arr[...]
                continue
            except Exception:  # noqa: BLE001 - any codec error means a damaged file; located below
                pass
        for f, images in lay.files():
            if f not in empty:
                try:
                    lay.read(images)
                    continue
                except Exception:  # noqa: BLE001
                    pass
            bad = []
            for i in images:  # each image's chunk alone (its shard's index, then its bytes)
                try:
                    if f in empty:
                        raise ValueError(f"{f} is empty")
                    lay.read(range(i, i + 1))
                except Exception:  # noqa: BLE001
                    bad.append(i)
            if len(bad) == len(images):
                broken.add(f)
            else:
                bad_chunks.update((i, name) for i in bad)
            for i in bad:
                add(i, f)

    # 2. what is missing for an image marked done
    if "done" not in layouts:
        return StoreDamage(damaged, broken, bad_chunks)
    done = np.zeros(layouts["done"].n, dtype=bool)
    for f, images in layouts["done"].files():
        if f not in broken:
            try:
                done[images.start:images.stop] = np.asarray(layouts["done"].read(images), dtype=bool)
            except Exception:  # noqa: BLE001 - its images are listed above
                pass
    done[list(damaged)] = False  # listed already
    if proves_content(path):  # every chunk of a done image is stored
        for name, lay in layouts.items():
            for f, images in lay.files():
                if f in broken or not done[images.start:images.stop].any():
                    continue
                present = lay.stored(f, images) if f.is_file() else np.zeros(len(images), dtype=bool)
                if present is None:
                    continue
                for i, ok in zip(images, present):
                    if done[i] and not ok:
                        add(i, f)
    elif "value" in layouts:  # an earlier murk's store: a done image without missing_reason held read-outs
        reasons = np.full(layouts["done"].n, "", dtype=object)
        if "missing_reason" in layouts:
            try:
                reasons = np.asarray(layouts["missing_reason"].arr[...], dtype=object)
            except Exception:  # noqa: BLE001 - its images are listed above
                pass
        for f, images in layouts["value"].files():
            if not f.exists():
                for i in images:
                    if done[i] and not str(reasons[i] or ""):
                        add(i, f)
    return StoreDamage(damaged, broken, bad_chunks)


def damaged_chunks(path: str | os.PathLike) -> dict[int, list[Path]]:
    """The chunk (or shard) files of a read-out store that are damaged or missing, by image position.

    A chunk or shard file can be empty or truncated after a power loss or a full
    disk (the file was renamed into place before its data reached the disk), a byte
    can flip on a failing disk, a file can be deleted. Each per-image variable
    (:data:`PER_IMAGE_VARIABLES`: ``value``, the text read-outs, ``missing_reason``,
    ``done``, ``input_sha256``) is decoded, shard file by shard file, and where that
    fails image by image (its shard's index, then its chunk): a store of this murk
    (:data:`STORE_LAYOUT`) verifies each chunk's and each shard index's CRC-32C, so
    every flipped byte is found; an index that fails lists every image of its shard,
    a chunk that fails lists its image alone. Then the images marked done are checked
    for missing chunks: in a store of this murk, every chunk of a done image is stored,
    so a shard file that is absent, or a chunk its index lacks, lists the image; in a
    store of an earlier murk (all-fill chunks were not stored), a done image without a
    ``missing_reason`` whose ``value`` file is absent is listed.

    Parameters
    ----------
    path : path
        A store written by :func:`open_readout_store` (zarr 3, sharded; or zarr 2, one file per image chunk).

    Returns
    -------
    dict
        Image position -> damaged or missing chunk or shard files (empty when the store is sound).

    Notes
    -----
    A chunk changed in a way that still decodes (an earlier murk's store without checksums, a shard file
    copied from another store) is not found here: the store's marker records each file's digest, and
    :func:`murk.pipeline.forget_changed` un-marks the images of the files that changed after it.
    """
    return store_damage(path).damaged


def chunk_files(path: str | os.PathLike) -> dict[Path, tuple[str, range]]:
    """Every chunk or shard file a read-out store's per-image variables have, or would have once written.

    Returns
    -------
    dict
        File (under ``path``) -> (its variable, the image positions it holds).
    """
    return {f: (name, images) for name, lay in _layouts(Path(path)).items() for f, images in lay.files()}


def unfinished_images(path: str | os.PathLike) -> dict[int, str]:
    """The images of a read-out store that a finished read-out must not leave: damaged, missing or not done.

    Parameters
    ----------
    path : path
        A read-out store.

    Returns
    -------
    dict
        Image position -> why (``"damaged or missing: value/c/0/0/0/0/0"``, ``"not done"``); empty when every
        image is done and every chunk sound (:func:`damaged_chunks`).
    """
    path = Path(path)
    out = {i: "damaged or missing: " + ", ".join(f.relative_to(path).as_posix() for f in fs)
           for i, fs in damaged_chunks(path).items()}
    if is_zarr_array(path / "done"):
        import zarr

        done = np.asarray(zarr.open_array(path / "done", mode="r")[...], dtype=bool)
        out.update({int(i): "not done" for i in np.flatnonzero(~done) if int(i) not in out})
    return dict(sorted(out.items()))


