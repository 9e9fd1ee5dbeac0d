"""The items table's identity and files: its hash (:func:`items_hash`), the table and the selection written and
read back (``items.json``, :func:`save_items`, :func:`load_items`, :func:`read_items`), and the digests of the
images and annotations it was selected from (:func:`image_checks`, :func:`input_digests`).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from murk import core
from murk.core import canonical_json
from murk.protocol._items import COLUMNS, HASH_COLUMNS, _table

__all__ = ["items_hash", "save_items", "load_items", "read_items", "save_selection", "image_checks", "image_digests",
           "input_digests"]


# ----------------------------------------------------------------------------- hash, I/O


def _py(value: Any) -> Any:
    """Convert a cell to plain Python (int, float, str, lists thereof)."""
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_py(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    return str(value)


def _records(table: pd.DataFrame, columns: tuple[str, ...]) -> list[dict[str, Any]]:
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ValueError(f"items table lacks the column(s) {missing}; expected {list(columns)}")
    cols = [table[c].tolist() for c in columns]
    return [{c: _py(v) for c, v in zip(columns, vals)} for vals in zip(*cols)]


def items_hash(table: pd.DataFrame) -> str:
    """SHA-256 of the identifying columns of an items table.

    The serialisation is :func:`murk.core.canonical_json` (sorted keys, no
    whitespace, floats by Python's shortest round-trip repr) of
    ``{"columns": HASH_COLUMNS, "rows": [[...], ...]}``, with each row the
    values of :data:`HASH_COLUMNS` (``image_id``, ``annotation_id``,
    ``category``, ``bbox``, ``t2_options``, ``t2_answer_index``,
    ``t3_distractor``) as Python ints, floats, strs and lists, rows in table
    order. It is therefore the same across processes, platforms and Python
    versions, and independent of the order of the annotation file. The spec
    (Section III) quotes the prefix of this hash for its 1000 items.

    Parameters
    ----------
    table : pandas.DataFrame
        An items table (:func:`select_items`, :func:`load_items`).

    Returns
    -------
    str
        64 hex characters.

    Raises
    ------
    ValueError
        If a hashed column is missing.
    """
    recs = _records(table, HASH_COLUMNS)
    payload = {"columns": list(HASH_COLUMNS), "rows": [[r[c] for c in HASH_COLUMNS] for r in recs]}
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


def save_items(table: pd.DataFrame, path: str | os.PathLike | None = None) -> Path:
    """Write an items table as JSON records (UTF-8), atomically.

    The text is written to a temporary file in the target folder and moved
    into place with :func:`os.replace`, so a reader never sees a partial file.

    Parameters
    ----------
    table : pandas.DataFrame
        An items table with the columns of :data:`COLUMNS`.
    path : str or path-like, optional
        Target file; default :func:`murk.core.items_file`. Parent folders are
        created.

    Returns
    -------
    Path
        The file written.

    Raises
    ------
    ValueError
        If a column of :data:`COLUMNS` is missing.
    """
    path = Path(path) if path is not None else core.items_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_records(table, COLUMNS), ensure_ascii=False, indent=1)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with core.guard(path, _SELECT_KEPT, root=path.parent), os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; outputs are world-readable like the others
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load_items(path: str | os.PathLike | None = None) -> pd.DataFrame:
    """Read an items table written by :func:`save_items`.

    The round trip is exact: ints stay int64, ``bbox`` and ``t2_options`` stay
    Python lists, floats are read back bit for bit.

    Parameters
    ----------
    path : str or path-like, optional
        Default :func:`murk.core.items_file`.

    Returns
    -------
    pandas.DataFrame
        The items table (columns of :data:`COLUMNS`).

    Raises
    ------
    FileNotFoundError
        If the file does not exist (run the *select* stage first).
    ValueError
        If the file is not a JSON list of item records.
    """
    path = Path(path) if path is not None else core.items_file()
    if not path.is_file():
        raise FileNotFoundError(
            f"items file {path} not found: run the select stage (murk.protocol.select_items + "
            f"save_items) first"
        )
    with open(path, encoding="utf-8") as f:
        records = json.load(f)
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ValueError(f"{path} is not a JSON list of item records")
    missing = sorted({c for r in records for c in COLUMNS if c not in r})
    if missing:
        raise ValueError(f"{path}: item records lack the key(s) {missing}")
    return _table(records)


def save_selection(table: pd.DataFrame, meta: dict[str, Any], report: dict[str, Any],
                   output_dir: str | os.PathLike | None = None) -> Path:
    """Write what stage *select* produces under the output root, each file atomically.

    ``items.json`` (:func:`save_items`), ``items_meta.json`` (``meta``: config
    hash, items hash, the run identity ``run_id`` (:func:`murk.pipeline.run_id`), run name, n_items, seed, annotation file, image folder)
    and ``items_report.json`` (``report``, :func:`selection_report`).

    Returns
    -------
    Path
        The items file.
    """
    out = core.items_file(output_dir)
    save_items(table, out)
    for name, obj in (("items_meta.json", meta), ("items_report.json", report)):
        f = out.with_name(name)
        tmp = f.with_name(f".{name}.tmp")
        with core.guard(f, _SELECT_KEPT, cleanup=[tmp], root=out.parent):
            tmp.write_text(json.dumps(obj, indent=1, sort_keys=True, default=_py), encoding="utf-8")
        os.replace(tmp, f)
    return out


#: what a full disk while the selection is written keeps (:mod:`murk.core`)
_SELECT_KEPT = ("each selection file is written whole or not at all, and under Snakemake (make demo) the previous "
                "items.json and items_meta.json are restored; nothing of the later stages is touched")


def image_checks(table: pd.DataFrame, image_dir: str | os.PathLike,
                 progress: bool = False) -> dict[str, dict[str, str]]:
    """Check each selected image's file against its annotation, from the file headers only.

    The rule is :func:`murk.scene.load_image`'s, which every later stage applies
    when it reads the pixels: an image is used as stored when its stored size is its
    annotation's ``width`` x ``height``; used transposed when only its EXIF
    orientation (5-8) makes them agree; otherwise (another size, over Pillow's pixel
    limit, a header Pillow cannot read, or missing) each stage records it as
    missing. A file damaged only after its header (a truncated JPEG) passes here
    and is recorded by the stages that decode it. The select
    stage keeps this record in ``items_report.json`` and prints it, and the paper's
    colophon lists the images used transposed (the missing ones are listed from the
    stores' ``missing_reason``).

    Parameters
    ----------
    table : pandas.DataFrame
        The items (columns ``image_id``, ``file_name``, ``width``, ``height``).
    image_dir : path
        The COCO image folder.
    progress : bool
        A progress bar (:func:`murk.core.bar`, ``select: image headers``).

    Returns
    -------
    dict
        ``{"transposed": {image id (str): note}, "unreadable": {image id (str): reason},
        "converted": {image id (str): note}}``, in item order; all empty when every image is
        used as stored. ``converted``: an animated image of which only the first frame is
        used, or one whose alpha is dropped (:func:`murk.scene.conversion_note`).
    """
    from murk import scene
    from murk.core import bar as progress_bar


    out: dict[str, dict[str, str]] = {"transposed": {}, "unreadable": {}, "converted": {}}
    for row in progress_bar(table.itertuples(index=False), total=len(table), desc="select: image headers",
                            unit="img", disable=not progress):
        f = Path(image_dir) / str(row.file_name)
        try:
            note = scene.inspect_image(f, (int(row.width), int(row.height)))
            left_out = scene.conversion_note(f)
        except (FileNotFoundError, ValueError) as e:
            out["unreadable"][str(int(row.image_id))] = str(e)
            continue
        if note:
            out["transposed"][str(int(row.image_id))] = note
        if left_out:
            out["converted"][str(int(row.image_id))] = left_out
    return out


def image_digests(table: pd.DataFrame, image_dir: str | os.PathLike,
                  cache: core.DigestCache | None = None) -> dict[str, str | None]:
    """Each selected image file's content digest (SHA-256 of its bytes), as the select stage records it.

    Recorded in ``items_meta.json`` (``image_sha256``; ``images_sha256`` is
    :func:`murk.core.combined_digest` of them in item order). They are not part of
    :func:`items_hash`, which identifies the selection (the spec quotes it), not the pixels.

    Parameters
    ----------
    table : pandas.DataFrame
        The items (columns ``image_id``, ``file_name``).
    image_dir : path
        The COCO image folder.
    cache : murk.core.DigestCache, optional
        The fast path (:func:`murk.core.file_digest`).

    Returns
    -------
    dict
        Image id (str) -> 64 hex characters, or None for a file that is missing or cannot be
        read (the later stages record that image as missing), in item order.
    """
    out: dict[str, str | None] = {}
    for image_id, name in zip(table["image_id"].tolist(), table["file_name"].tolist()):
        try:
            out[str(int(image_id))] = core.file_digest(Path(image_dir) / str(name), cache)
        except OSError:
            out[str(int(image_id))] = None
    return out


def input_digests(table: pd.DataFrame, meta: dict[str, Any], partner) -> list[str]:
    """Per item, the digest of the image files its read-outs are made from.

    An item's read-outs render its own image and, for the shuffled control, its partner's
    (:func:`shuffled_partner`), so a row of a read-out store is out of date when either file
    changed: the digest is :func:`murk.core.combined_digest` of the two digests that the
    select stage recorded (``items_meta.json``: ``image_sha256``).

    Parameters
    ----------
    table : pandas.DataFrame
        The items (column ``image_id``), length N.
    meta : dict
        ``items_meta.json`` (:func:`read_items`).
    partner : sequence of int, length N
        The shuffled-control partner of each item (row positions).

    Returns
    -------
    list of str
        N digests (64 hex characters), or N empty strings when the select stage recorded
        no image digests (an output root of an earlier murk: nothing to compare with).
    """
    recorded = meta.get("image_sha256")
    ids = [str(int(i)) for i in table["image_id"].tolist()]
    if not isinstance(recorded, dict):
        return [""] * len(ids)
    return [core.combined_digest([recorded.get(ids[i]), recorded.get(ids[int(j)])])
            for i, j in zip(range(len(ids)), partner)]


def read_items(output_dir: str | os.PathLike | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The items table and its meta (``items_meta.json``) written by stage *select*.

    Returns
    -------
    (pandas.DataFrame, dict)
        The items (:func:`load_items`) and the meta of :func:`save_selection`.

    Raises
    ------
    FileNotFoundError
        If the select stage has not run for this output root.
    """
    f = core.items_file(output_dir)
    if not f.is_file():
        raise FileNotFoundError(f"{f} missing: run the select stage first (notebooks/01_select.py)")
    meta = json.loads(f.with_name("items_meta.json").read_text(encoding="utf-8"))
    return load_items(f), meta

