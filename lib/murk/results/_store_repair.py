"""A read-out store's damaged or missing chunk files repaired: the images they held are marked not done, so the
read-out reads them again (:func:`forget_images_of_files`; what is damaged: :func:`murk.core.damaged_chunks`).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import xarray as xr

from murk.core import chunk_files, proves_content, store_damage

__all__ = ["forget_images_of_files"]


def _blank(ds: xr.Dataset, name: str) -> xr.Dataset:
    """One image of variable ``name`` at its fill value (NaN, ``""``, False): zarr then stores no chunk."""
    v = ds[name]
    shape = tuple(1 if d == "image" else v.sizes[d] for d in v.dims)
    if v.dtype.kind == "f":
        data = np.full(shape, np.nan, dtype=v.dtype)
    elif v.dtype.kind == "b":
        data = np.zeros(shape, dtype=bool)
    else:
        data = np.full(shape, "", dtype=object)
    return xr.Dataset({name: (v.dims, data)})


def _unmark(path: Path, damaged: dict[int, list[Path]], broken: set[Path], bad_chunks: set[tuple[int, str]]) -> None:
    """Remove the broken files, empty the chunks that fail to decode, mark the damaged images not done."""
    for f in broken:
        f.unlink(missing_ok=True)  # reads as the fill value (NaN, "", not done)
    ds = xr.open_zarr(path, consolidated=False)
    for i, name in sorted(bad_chunks):  # rewrites its shard: the other images' chunks are kept as they are
        if name != "done":
            _blank(ds, name).to_zarr(path, region={"image": slice(i, i + 1)}, consolidated=False)
    if damaged:  # one write of `done` over the damaged images' span, the others' flags as they are
        import zarr

        lo, hi = min(damaged), max(damaged) + 1
        arr = zarr.open_array(path / "done", mode="r")
        try:
            done = np.asarray(arr[lo:hi], dtype=bool)
        except Exception:  # noqa: BLE001 - a damaged chunk of `done`: its image is among the damaged
            done = np.zeros(hi - lo, dtype=bool)
            for i in range(lo, hi):
                try:
                    done[i - lo] = bool(arr[i])
                except Exception:  # noqa: BLE001
                    pass
        done[[i - lo for i in damaged]] = False
        xr.Dataset({"done": ("image", done)}).to_zarr(path, region={"image": slice(lo, hi)}, consolidated=False)


def forget_images_of_files(path: str | os.PathLike, files=(), *, dry_run: bool = False) -> dict[int, list[Path]]:
    """Mark not done the images whose chunk files are damaged, missing, or named in ``files``; return them.

    What :func:`murk.core.damaged_chunks` finds is repaired: a file that decodes for none of its
    images (an index that fails its checksum, a file emptied or cut short) is removed,
    a chunk that fails is emptied (its shard rewritten, the other images' chunks kept
    as they are), and every image they hold is marked not done, so the read-out reads
    exactly these images again. Each file of ``files`` that this does not explain (it
    changed and still decodes, it appeared, or it is absent and its images were not
    done), and in a store of an earlier murk (no checksums: a chunk that decodes is not
    proven) each file of ``files``, is untrusted whole: it is removed and every image it
    holds is marked not done. The half-written files of a killed write (``*.partial``)
    are removed.

    Parameters
    ----------
    path : path
        A read-out store.
    files : iterable of path
        Chunk or shard files of the store's per-image variables (absolute, or relative to ``path``) that
        changed after the store was vouched for (:func:`murk.pipeline.changed_files`).
    dry_run : bool
        Find the images, change nothing.

    Returns
    -------
    dict
        Image position -> the files that made it not done (empty when nothing was).

    Raises
    ------
    ValueError
        A file of ``files`` that holds no image's chunk (a metadata file, a coordinate): murk cannot tell which
        images it affects. The message names the files and the fix (delete the store; the same command then
        reads the model out afresh). Nothing was changed.
    """
    path = Path(path)
    wanted = [Path(f) if Path(f).is_absolute() else path / f for f in files]

    def refuse(other: list[Path]) -> ValueError:
        names = ", ".join(f.relative_to(path).as_posix() if f.is_relative_to(path) else str(f) for f in other)
        return ValueError(f"read-out store {path}: {names} changed after its marker was written and hold(s) no "
                          f"image's read-outs (metadata or coordinates), so murk cannot tell which images they affect; "
                          f"nothing was changed. Delete the store (rm -r {path}) and run the same command again (make "
                          f"demo): it reads this model out afresh")

    # metadata files first: a changed one may not even be read
    metadata = [f for f in wanted if f.name in ("zarr.json", ".zarray", ".zattrs", ".zgroup")]
    if metadata:
        raise refuse(metadata)
    try:
        layout = chunk_files(path)
    except Exception as e:  # noqa: BLE001 - unreadable metadata: name it, and the fix
        raise refuse([path / "zarr.json"]) from e
    other = [f for f in wanted if f not in layout]
    if other:
        raise refuse(other)
    if not dry_run:
        for f in path.rglob("*.partial"):
            f.unlink(missing_ok=True)
    damaged, broken, bad_chunks = store_damage(path)
    # where every chunk carries a checksum, the chunks of a changed file that pass it are its own (a flip is
    # found in the chunk it hit); without checksums a changed file is untrusted whole
    explained = {f for fs in damaged.values() for f in fs} if proves_content(path) else set()
    for f in wanted:
        if f in explained:
            continue
        broken.add(f)
        for i in layout[f][1]:
            damaged.setdefault(i, []).append(f)
    if damaged and not dry_run:
        _unmark(path, damaged, broken, bad_chunks)
    return damaged


def _repair(path: Path, ds: xr.Dataset) -> None:
    """Mark images with damaged or missing chunks as not done (:func:`forget_images_of_files`), with a warning
    naming them, and remove the half-written chunk files (``*.partial``) of a killed write."""
    damaged = forget_images_of_files(path)
    if not damaged:
        return
    ids = ds["image"].values
    listing = "\n".join(f"  image {int(ids[i])} (position {i}): " + ", ".join(str(f) for f in fs)
                        for i, fs in sorted(damaged.items()))
    warnings.warn(f"read-out store {path}: {len(damaged)} image(s) had damaged or missing chunk files (empty, "
                  f"truncated or failing their checksum, e.g. after a power loss or a disk error, or deleted); "
                  f"damaged files were removed and these images are read out again:\n{listing}", stacklevel=3)
