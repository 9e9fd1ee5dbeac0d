"""The store check and the read-out agree: a read-out store that changed after its marker is re-read where it
changed (:func:`forget_changed`); a store that still has damaged, missing or unfinished images is never vouched
for (:func:`murk.pipeline.refuse_unfinished`, the ``mark`` step of ``python -m murk.pipeline.markers``).

The marker (:func:`murk.pipeline.write_marker`) records the store's content digest and each file's digest;
:func:`changed_files` compares them with the store. The codecs of a store of this murk find a flipped byte and a
missing chunk by themselves (:func:`murk.core.damaged_chunks`); the per-file digests find what they cannot
see: a store of an earlier murk without checksums, or a chunk that changed and still decodes.
"""

from __future__ import annotations

import os
from pathlib import Path

from murk.core import PER_IMAGE_VARIABLES
from murk.pipeline.markers import IGNORED_SUFFIXES, _digests, read_marker, store_of

__all__ = ["changed_files", "forget_changed"]


def changed_files(marker: str | os.PathLike, store: str | os.PathLike | None = None) -> list[str] | None:
    """The files of a store that changed after its marker was written: changed, deleted or new.

    Parameters
    ----------
    marker : path
        A marker written by :func:`write_marker`.
    store : path, optional
        Default :func:`store_of` the marker.

    Returns
    -------
    list of str or None
        Relative POSIX paths inside the store, sorted (``[]`` when the store is as the marker recorded it);
        None when the marker is absent, records no digest, or records no per-file digests (a marker of an
        earlier murk, ``marker_version`` 1) while the store differs from its digest, or the store is absent.
    """
    rec = read_marker(marker)
    store = Path(store) if store is not None else store_of(marker)
    if rec is None:
        return None
    digest, now = _digests(store)
    if digest == rec["digest"]:
        return []
    have = rec.get("files")
    if not isinstance(have, dict) or digest == "absent" or rec["digest"] == "absent":
        return None
    return sorted(k for k in set(have) | set(now) if have.get(k) != now.get(k))


def forget_changed(marker: str | os.PathLike, store: str | os.PathLike | None = None, *,
                   dry_run: bool = False) -> str | None:
    """Mark not done the images of a read-out store held by the files that changed after its marker.

    The store check (:func:`stale_reason`) and the read-out agree: a store that changed
    after its marker is re-read where it changed, also where its codecs cannot see it
    (a store of an earlier murk, without checksums; a chunk that changed and still
    decodes). The Snakefile calls this for a stale marker while it plans the jobs,
    before the read-out it forces (Snakemake deletes the marker before the job runs).
    The files that changed (:func:`changed_files`) are given to
    :func:`murk.results.forget_images_of_files`, which also repairs what the codecs
    find damaged or missing. A marker of an earlier murk records no per-file digests:
    where its store changed, every image of the store is read again. The marker is then
    removed (its record is applied; the forced read-out writes a new one): a run
    stopped before the read-out leaves a store that resumes, not one whose un-marking
    would be taken for another change.

    Parameters
    ----------
    marker : path
        The read-out's marker (``<root>/readout/<slug>.done``, a shard's, the monitor's).
    store : path, optional
        Default :func:`store_of` the marker.
    dry_run : bool
        A dry run (``make plan``): say which images would be read again, change nothing.

    Returns
    -------
    str or None
        One line naming the store, the files and the images read again; None when the store is as its marker
        recorded it, or is absent, or the marker is absent or records no digest.

    Raises
    ------
    ValueError
        A changed file holds no image's read-outs (the store's metadata, a coordinate): the message names the
        files and the fix (delete the store and run the same command again). Nothing was changed.
    """
    store = Path(store) if store is not None else store_of(marker)
    rec = read_marker(marker)
    if rec is None or not Path(store).is_dir():
        return None
    files = changed_files(marker, store)
    if files == []:
        return None
    from murk.results import forget_images_of_files

    if files is None:  # an earlier murk's marker: which files changed is not known
        files = [p for name in PER_IMAGE_VARIABLES if (store / name).is_dir() for p in sorted((store / name).rglob("*"))
                 if p.is_file() and p.name not in ("zarr.json", ".zarray", ".zattrs")
                 and not p.name.endswith(IGNORED_SUFFIXES)]
        why = "its marker (of an earlier murk) records no per-file digests, so every image"
    else:
        why = "the images held by " + ", ".join(files)
    images = forget_images_of_files(store, files, dry_run=dry_run)
    if not images:
        return None
    if not dry_run:  # what it recorded is applied: a run stopped before the read-out must not apply it again
        Path(marker).unlink(missing_ok=True)
    verb = "would be" if dry_run else "are"
    return (f"read-out store {store} changed after its marker was written: {why} ({len(images)} image(s), positions "
            f"{', '.join(str(i) for i in sorted(images))}) {verb} marked not done and read out again")
