"""Content identities: inputs are identified by what they hold, not by their name.

A file's identity is the SHA-256 of its bytes (:func:`file_digest`). Hashing every
selected image on every run would cost seconds at study size, so a small cache
(:class:`DigestCache`, a JSON file beside the outputs, :func:`cache_file`) keeps each
file's digest with its ``(path, size, mtime_ns, ctime_ns, inode)``: while those are the
same the file is taken as unchanged (the fast path); any of them changed (a file
rewritten, replaced, copied over, restored from a backup with its old times: the
ctime still moves) and it is hashed again. A
damaged or unreadable cache is ignored (everything is hashed again), and the cache is
written atomically, so a killed run never leaves half a cache.

The select stage records each selected image's digest (``items_meta.json``:
``image_sha256``, ``images_sha256``); :func:`changed_images` compares the files with
that record (the Snakefile calls it while it builds its job graph, and re-runs the
stages of a changed image). The read-out stores record, per image, the digest of the
files the image's read-outs were made from (:func:`combined_digest` of the item's and
its shuffled-control partner's: ``input_sha256``, :func:`murk.cube.open_readout_store`).

This module imports only the standard library: the Snakefile imports it on every run.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Iterable

__all__ = ["CACHE_NAME", "cache_file", "DigestCache", "file_digest", "combined_digest", "changed_images"]

#: the digest cache's file name under an output root (:func:`cache_file`)
CACHE_NAME = ".murk-digests.json"
_CACHE_VERSION = 1
_BLOCK = 1 << 20  # bytes read at a time while hashing


def cache_file(root: str | os.PathLike) -> Path:
    """The digest cache of an output root: ``<root>/.murk-digests.json``.

    Parameters
    ----------
    root : path
        The output root (``outputs/``, the run settings' ``output_dir``).

    Returns
    -------
    Path
    """
    return Path(root) / CACHE_NAME


class DigestCache:
    """File digests kept with the ``(size, mtime_ns, ctime_ns, inode)`` they were computed for.

    Parameters
    ----------
    path : path, optional
        The JSON file (:func:`cache_file`); None: a cache in memory only. A missing,
        unreadable or damaged file reads as an empty cache (everything is hashed again).

    Notes
    -----
    The file holds ``{"version": 1, "files": {resolved path: [size, mtime_ns, ctime_ns,
    inode, sha256 hex]}}`` (a link is followed). :meth:`save` writes it atomically (a temporary file moved into
    place) and only when an entry changed; it is a cache, so a failure to write it
    (a read-only or full disk) is ignored.
    """

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.files: dict[str, list] = {}
        self.changed = False
        if self.path is not None:
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
                files = data.get("files", {}) if data.get("version") == _CACHE_VERSION else {}
                self.files = {str(k): list(v) for k, v in files.items()
                              if isinstance(v, list) and len(v) == 5 and isinstance(v[4], str)}
            except (OSError, ValueError, AttributeError, TypeError):
                self.files = {}  # a damaged cache is ignored: every file is hashed again

    @staticmethod
    def _key(path: str | os.PathLike) -> str:
        return os.path.realpath(os.fspath(path))

    @staticmethod
    def _stamp(st: os.stat_result) -> list[int]:
        return [int(st.st_size), int(st.st_mtime_ns), int(st.st_ctime_ns), int(st.st_ino)]

    def lookup(self, path: str | os.PathLike, st: os.stat_result) -> str | None:
        """The cached digest of ``path`` if its size, times and inode are those of ``st``, else None."""
        entry = self.files.get(self._key(path))
        return entry[4] if entry is not None and entry[:4] == self._stamp(st) else None

    def put(self, path: str | os.PathLike, st: os.stat_result, digest: str) -> None:
        """Remember ``digest`` for ``path`` as it is described by ``st``."""
        entry = [*self._stamp(st), str(digest)]
        if self.files.get(self._key(path)) != entry:
            self.files[self._key(path)] = entry
            self.changed = True

    def digest(self, file: str | os.PathLike) -> str:
        """:func:`file_digest` of ``file`` through this cache."""
        return file_digest(file, self)

    def save(self) -> None:
        """Write the cache (atomically), if it has a file and an entry changed; failures are ignored."""
        if self.path is None or not self.changed:
            return
        tmp = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"version": _CACHE_VERSION, "files": self.files}, f, sort_keys=True)
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.path)
            self.changed = False
        except OSError:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)


def file_digest(path: str | os.PathLike, cache: DigestCache | None = None) -> str:
    """SHA-256 of a file's bytes, through the fast path of ``cache``.

    Parameters
    ----------
    path : path
        A regular file.
    cache : DigestCache, optional
        Where the file's ``(size, mtime_ns, ctime_ns, inode)`` is unchanged since it was hashed,
        the cached digest is returned without reading the file; otherwise the file is
        hashed and the cache updated (call :meth:`DigestCache.save` to keep it).

    Returns
    -------
    str
        64 hex characters.

    Raises
    ------
    FileNotFoundError
        If the file does not exist.
    IsADirectoryError
        If ``path`` is a folder.
    OSError
        If it cannot be read.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
    >>> _ = p.write_bytes(b"abc")
    >>> file_digest(p)[:16]
    'ba7816bf8f01cfea'
    """
    path = Path(path)
    st = path.stat()
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder, not a file: its content digest is undefined")
    if cache is not None:
        hit = cache.lookup(path, st)
        if hit is not None:
            return hit
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            h.update(block)
    digest = h.hexdigest()
    if cache is not None and DigestCache._stamp(os.stat(path)) == DigestCache._stamp(st):
        cache.put(path, st, digest)  # kept only when the file did not change while it was read
    return digest


def combined_digest(digests: Iterable[str | None]) -> str:
    """SHA-256 of a sequence of digests (order matters; None, a missing file, is ``"-"``).

    Parameters
    ----------
    digests : iterable of str or None

    Returns
    -------
    str
        64 hex characters: the SHA-256 of the digests joined by newlines.

    Examples
    --------
    >>> combined_digest(["a", "b"]) == combined_digest(["a", "b"]) != combined_digest(["b", "a"])
    True
    """
    text = "\n".join("-" if d is None else str(d) for d in digests)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def changed_images(root: str | os.PathLike, cache: DigestCache | None = None) -> list[Path]:
    """The selected image files whose content differs from what the select stage recorded.

    Reads ``<root>/items.json`` (``image_id``, ``file_name``) and ``<root>/items_meta.json``
    (``image_dir``, ``image_sha256``: image id -> digest, None for a file that was
    missing) and hashes each file through ``cache`` (:func:`file_digest`'s fast path).

    Parameters
    ----------
    root : path
        The output root.
    cache : DigestCache, optional
        Default: the root's (:func:`cache_file`), saved afterwards. Pass one to decide
        yourself whether it is saved (a dry run saves nothing).

    Returns
    -------
    list of Path
        In item order: the files whose digest differs from the record, a recorded file now
        missing (or a folder), and a file that was missing at select and is there now. Empty
        when the select stage has not run, or recorded no digests (an output root of an
        earlier murk), or nothing changed.
    """
    root = Path(root)
    try:
        meta = json.loads((root / "items_meta.json").read_text(encoding="utf-8"))
        records = json.loads((root / "items.json").read_text(encoding="utf-8"))
        recorded = meta["image_sha256"]
        image_dir = Path(meta["image_dir"])
    except (OSError, ValueError, KeyError, TypeError):
        return []  # nothing recorded to compare with (the select stage runs anyway, or records it then)
    own = cache is None
    cache = DigestCache(cache_file(root)) if own else cache
    changed = []
    for r in records:
        key = str(r.get("image_id"))
        if key not in recorded:
            continue
        f = image_dir / str(r.get("file_name"))
        try:
            now = file_digest(f, cache)
        except OSError:  # missing, a folder, unreadable: the stages record it as missing
            now = None
        if now != recorded[key]:
            changed.append(f)
    if own:
        cache.save()
    return changed
