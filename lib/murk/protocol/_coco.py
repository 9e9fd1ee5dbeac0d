"""Fetching COCO val2017 when no local copy exists (needs network access).

Only what the study uses is downloaded: the official instance annotations
(``annotations_trainval2017.zip``, checked by its published MD5) and then only
the *selected* images, one by one, each checked against
``data/checksums/coco-val2017-sample.sha256`` where listed there and recorded
in ``<coco_dir>/val2017.sha256`` otherwise. ``MURK_OFFLINE=1`` forbids every
download: the functions then raise with the fix (set ``MURK_COCO_DIR``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import urllib.request
import warnings
import zipfile
from pathlib import Path
from typing import Iterable

from murk import core
from murk.core import bar as progress_bar

__all__ = ["ANNOTATIONS_URL", "ANNOTATIONS_MD5", "IMAGES_URL", "MissingImageWarning", "coco_files", "fetch_annotations",
           "ensure_images"]

ANNOTATIONS_URL = "http://images.cocodataset.org/annotations/annotations_trainval2017.zip"
#: MD5 published with COCO 2017 (annotations_trainval2017.zip, 252,907,541 bytes)
ANNOTATIONS_MD5 = "f4bbac642086de4f52a3fdda2de5fa2c"
IMAGES_URL = "http://images.cocodataset.org/{split}/{file_name}"


class MissingImageWarning(UserWarning):
    """Selected images missing from the COCO folder offline: kept, recorded as missing later."""


def _no_network(what: str, dest: Path) -> None:
    if core.offline():
        raise FileNotFoundError(
            f"{what} not found at {dest} and MURK_OFFLINE=1 forbids downloading it: set MURK_COCO_DIR to a "
            f"folder in COCO's layout (e.g. ../shared/coco-val2017-sample) or unset MURK_OFFLINE")


def _download(url: str, dest: Path, desc: str) -> Path:
    tmp = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with urllib.request.urlopen(url, timeout=60) as r, open(tmp, "wb") as f:
            total = int(r.headers.get("Content-Length") or 0) or None
            with progress_bar(total=total, unit="B", unit_scale=True, desc=desc, leave=False) as bar:
                for chunk in iter(lambda: r.read(1 << 20), b""):
                    f.write(chunk)
                    bar.update(len(chunk))
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise OSError(f"download of {url} failed ({e}); check the network, or set MURK_COCO_DIR to a local copy") from e
    os.replace(tmp, dest)
    return dest


def _digest(path: Path, algo: str) -> str:
    h = hashlib.new(algo)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_annotations(coco_dir: Path, split: str = "val2017") -> Path:
    """Download and check the official annotations; extract ``instances_<split>.json``.

    Returns
    -------
    Path of the annotation file.

    Raises
    ------
    FileNotFoundError
        Offline (``MURK_OFFLINE=1``) and no local copy.
    OSError
        Download failed, or the archive's MD5 differs from :data:`ANNOTATIONS_MD5`.
    """
    coco_dir = Path(coco_dir)
    ann = coco_dir / "annotations" / f"instances_{split}.json"
    if ann.is_file():
        return ann
    _no_network("the COCO annotation file", ann)
    z = _download(ANNOTATIONS_URL, coco_dir / "annotations_trainval2017.zip", "COCO annotations")
    if _digest(z, "md5") != ANNOTATIONS_MD5:
        z.unlink()
        raise OSError(f"{ANNOTATIONS_URL}: MD5 mismatch (corrupt download); run again")
    member = f"annotations/instances_{split}.json"
    with zipfile.ZipFile(z) as zf:
        if member not in zf.namelist():
            raise FileNotFoundError(f"{z} holds no {member}: the official annotations cover train2017 and val2017; "
                                    f"use split='val2017' (the study) or 'train2017'")
    with zipfile.ZipFile(z) as zf, zf.open(member) as src:
        tmp = ann.with_name(ann.name + ".part")
        ann.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.replace(tmp, ann)
    return ann


def _known_sha256() -> dict[str, str]:
    f = core.data_dir() / "checksums" / "coco-val2017-sample.sha256"
    out = {}
    for line in f.read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        out[Path(name).name] = digest
    return out


def ensure_images(file_names: Iterable[str], image_dir: Path, split: str = "val2017", *,
                  missing_ok: bool = False) -> list[Path]:
    """Make sure the selected images exist locally, downloading the missing ones.

    Parameters
    ----------
    file_names : iterable of str
        COCO file names of the selected items.
    image_dir : Path
        ``<coco_dir>/<split>/``.
    split : str
        COCO split (the download URL's folder).
    missing_ok : bool
        Offline (``MURK_OFFLINE=1``), a missing image is not an error: a
        :class:`MissingImageWarning` names each missing file and the paths are
        returned all the same (the selection is defined by the annotations, so it
        stays reproducible; the later stages record each missing image in
        ``missing_reason``). Default False: raise.

    Returns
    -------
    list of Path, one per file name (missing ones included when ``missing_ok``).

    Raises
    ------
    FileNotFoundError
        An image is missing, downloading is forbidden (``MURK_OFFLINE=1``) and
        ``missing_ok`` is False.
    OSError
        A download failed or its SHA-256 differs from the recorded checksum.
    """
    image_dir = Path(image_dir)
    names = list(file_names)
    missing = [n for n in names if not (image_dir / n).is_file()]
    if missing and missing_ok and core.offline():
        warnings.warn(
            f"{len(missing)} of {len(names)} selected images are missing from {image_dir} and MURK_OFFLINE=1 "
            f"forbids downloading them: " + ", ".join(missing) + ". They stay in the selection and are recorded "
            f"as missing (missing_reason) by the later stages; put the files there to read them out.",
            MissingImageWarning, stacklevel=2)
        return [image_dir / n for n in names]
    if missing:
        _no_network(f"{len(missing)} selected images (e.g. {missing[0]})", image_dir)
        known = _known_sha256()
        ledger = image_dir.parent / f"{split}.sha256"
        for name in progress_bar(missing, desc="select: COCO images", unit="img"):
            p = _download(IMAGES_URL.format(split=split, file_name=name), image_dir / name, name)
            digest = _digest(p, "sha256")
            if name in known and known[name] != digest:
                p.unlink()
                raise OSError(f"{name}: SHA-256 mismatch with data/checksums; run again")
            with open(ledger, "a") as f:
                f.write(f"{digest}  {split}/{name}\n")
    return [image_dir / n for n in names]


def coco_files(coco_dir: str | os.PathLike | None = None, split: str = "val2017") -> tuple[Path, Path]:
    """The annotation file and image folder of a COCO folder in COCO's own layout.

    Where the annotations are missing and the network is allowed, they are
    fetched (:func:`fetch_annotations`) and an empty image folder is created
    (the selected images are fetched later, :func:`ensure_images`).

    Parameters
    ----------
    coco_dir : path, optional
        Default ``$MURK_COCO_DIR``, else ``outputs/coco`` (:func:`murk.core.coco_dir`).
    split : str
        ``val2017`` for the study; any split name present works (e.g. ``train2017``).

    Returns
    -------
    (annotation file, image folder)

    Raises
    ------
    FileNotFoundError
        If ``annotations/instances_<split>.json`` or ``<split>/`` is missing; the
        message names the folder and the fix.
    """
    d = core.coco_dir(coco_dir)
    ann = d / "annotations" / f"instances_{split}.json"
    img = d / split
    if not ann.is_file() and not core.offline():
        ann = fetch_annotations(d, split)  # network: official annotations, MD5-checked
        img.mkdir(parents=True, exist_ok=True)
    if not ann.is_file() or not img.is_dir():
        raise FileNotFoundError(
            f"COCO folder {d} lacks {ann.relative_to(d)} or {split}/: set MURK_COCO_DIR to a folder in "
            f"COCO's layout (e.g. ../shared/coco-val2017-sample), or unset MURK_OFFLINE and leave MURK_COCO_DIR "
            f"unset: `make demo` then downloads the official annotations and the selected images into outputs/coco/")
    return ann, img
