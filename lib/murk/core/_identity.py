"""Content identities: a file or a checkpoint folder named by a digest of its bytes, not by its name.

A local checkpoint's identity is :func:`checkpoint_digest`: SHA-256 over the files
that define the model (weights ``*.safetensors`` / ``*.bin`` and their index,
``config.json``, ``generation_config.json``, tokenizer, processor and
preprocessor configs, chat templates, the special-tokens map, any other small
``json``/``txt``/``jinja``/``model``/``py`` file beside them), each file's
SHA-256 combined with its path relative to the folder, in sorted order. A
folder renamed, copied or touched keeps its identity; one byte changed in one
of those files changes it.

Hashing a study-sized checkpoint (several GB) takes seconds, so a small cache
(:class:`DigestCache`, a JSON file) keeps each file's SHA-256 under its
resolved path with the file's size, modification time, change time and inode:
a file whose four values are unchanged is not read again. The cache is only a
shortcut: a damaged or unreadable cache is ignored (everything is hashed), and
it is written atomically (a temporary file renamed into place). It lives
outside the output roots (:func:`default_cache_path`), since one checkpoint
folder serves many roots.

The selected images of an output root have their own cache, beside the outputs
(:func:`cache_file`: the images belong to the root's selection). The select stage records each
selected image's digest (``items_meta.json``: ``image_sha256``, ``images_sha256``);
:func:`changed_images` compares the files with that record (the Snakefile calls it while it
builds its job graph, and re-runs the stages of a changed image). The read-out stores record,
per image, the digest of the files the image's read-outs were made from (:func:`combined_digest`
of the item's and its shuffled-control partner's: ``input_sha256``,
:func:`murk.results.open_readout_store`).

This module imports nothing heavy (the Snakefile imports it on every run).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Iterable

__all__ = [
    "IDENTITY_VERSION",
    "IDENTITY_MIME",
    "IDENTITY_LABEL",
    "store_attrs",
    "CACHE_ENV",
    "CHECKPOINT_SUFFIXES",
    "BUILT_MARKER",
    "IGNORED_NAMES",
    "DigestCache",
    "default_cache_path",
    "file_digest",
    "checkpoint_files",
    "checkpoint_digest",
    "checkpoint_revision",
    "CACHE_NAME",
    "cache_file",
    "combined_digest",
    "changed_images",
]

#: the digest cache's file name under an output root (:func:`cache_file`: the selected images' digests)
CACHE_NAME = ".murk-digests.json"

#: environment variable naming the digest cache file (default :func:`default_cache_path`)
CACHE_ENV = "MURK_DIGEST_CACHE"
#: the files of a checkpoint folder that define it, by suffix: weights (safetensors, pickles) and their
#: index, configs, tokenizer files (``tokenizer.json``, ``vocab.json``, ``merges.txt``, ``*.model``,
#: ``*.tiktoken``), chat templates (``*.jinja``), custom code (``*.py``)
CHECKPOINT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".json", ".txt", ".jinja", ".model", ".tiktoken",
                       ".py", ".yaml")
#: the marker murk writes into a checkpoint folder it built (``murk.offline.MARKER_FILE``): it records
#: the folder's :func:`checkpoint_digest` as built
BUILT_MARKER = "murk_tiny.json"
#: files that never enter a checkpoint's digest: murk's own marker, which records the digest of the rest
IGNORED_NAMES = (BUILT_MARKER,)
#: format version of the cache file
_CACHE_VERSION = 1
_CHUNK = 1 << 22


def default_cache_path() -> Path:
    """The digest cache file: ``$MURK_DIGEST_CACHE``, else ``$XDG_CACHE_HOME/murk/digests.json``
    (``~/.cache/murk/digests.json``)."""
    given = os.environ.get(CACHE_ENV)
    if given:
        return Path(given).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "murk" / "digests.json"


def _sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _stat_key(st: os.stat_result) -> list[int]:
    return [int(st.st_size), int(st.st_mtime_ns), int(st.st_ctime_ns), int(st.st_ino)]


class DigestCache:
    """Each file's SHA-256 under its resolved path, valid while its size, times and inode are unchanged.

    Parameters
    ----------
    path : path or None
        The JSON file (``{"version": 1, "files": {path: [size, mtime_ns, ctime_ns, inode, sha256]}}``).
        None: nothing is read or written (every file is hashed).

    Notes
    -----
    A missing, unreadable or damaged file (not JSON, another layout) is read as an
    empty cache. :meth:`save` writes only when an entry changed, atomically; entries
    of files that no longer exist are dropped then. Two processes saving at once
    lose each other's new entries at worst (it is a cache).
    """

    def __init__(self, path: str | os.PathLike | None):
        self.path = Path(path) if path is not None else None
        self._files: dict[str, list] = {}
        self._changed = False
        if self.path is None:
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            files = data["files"] if data.get("version") == _CACHE_VERSION else {}
            self._files = {str(k): v for k, v in files.items()
                           if isinstance(v, list) and len(v) == 5 and isinstance(v[4], str)}
        except (OSError, ValueError, TypeError, AttributeError, KeyError):
            self._files = {}

    def digest(self, file: str | os.PathLike) -> str:
        """SHA-256 (hex) of ``file``'s bytes: from the cache when its stat is unchanged, else read.

        Raises
        ------
        OSError
            The file cannot be read.
        """
        real = os.path.realpath(file)
        st = os.stat(real)
        key = _stat_key(st)
        entry = self._files.get(real)
        if entry is not None and list(entry[:4]) == key:
            return str(entry[4])
        sha = _sha256_of(Path(real))
        if list(_stat_key(os.stat(real))) == key:  # not changed while it was read: worth keeping
            self._files[real] = [*key, sha]
            self._changed = True
        return sha

    def save(self) -> None:
        """Write the cache (only when an entry changed; atomically; a failure to write is ignored)."""
        if self.path is None or not self._changed:
            return
        files = {k: v for k, v in self._files.items() if os.path.exists(k)}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump({"version": _CACHE_VERSION, "files": files}, f, sort_keys=True)
                os.replace(tmp, self.path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        except OSError:
            return
        self._changed = False


def file_digest(path: str | os.PathLike, cache: DigestCache | None = None) -> str:
    """SHA-256 of one file's bytes.

    Parameters
    ----------
    path : path
        The file (a link is followed).
    cache : DigestCache, optional
        Consulted and updated (not saved); None: the file is read.

    Returns
    -------
    str
        64 lowercase hex digits.

    Raises
    ------
    OSError
        The file cannot be read.
    """
    return cache.digest(path) if cache is not None else _sha256_of(Path(os.path.realpath(path)))


def checkpoint_files(folder: str | os.PathLike) -> list[str]:
    """The files that define a checkpoint folder, as sorted POSIX paths relative to it.

    Every file (links followed) whose name ends in :data:`CHECKPOINT_SUFFIXES`, in the
    folder and its sub-folders; hidden files and folders (``.cache/``, ``.git/``, a
    half-written ``.x.tmp``) and :data:`IGNORED_NAMES` are left out.

    Raises
    ------
    NotADirectoryError
        ``folder`` is not a folder.
    """
    root = Path(folder)
    if not root.is_dir():
        raise NotADirectoryError(f"checkpoint folder {root} is not a folder")
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            if name.startswith(".") or name in IGNORED_NAMES or not name.endswith(CHECKPOINT_SUFFIXES):
                continue
            p = Path(dirpath) / name
            if p.is_file():
                out.append(p.relative_to(root).as_posix())
    return sorted(out)


def checkpoint_digest(folder: str | os.PathLike, cache: str | os.PathLike | DigestCache | None = "default", *,
                      update_cache: bool = True) -> str:
    """The content digest of a checkpoint folder.

    SHA-256 over the lines ``<relative path>\\0<file SHA-256>\\n`` of
    :func:`checkpoint_files`, in sorted order. The folder's own name and place, and
    the files' times, do not enter it.

    Parameters
    ----------
    folder : path
        A checkpoint folder (a hub snapshot folder of links works too).
    cache : path, DigestCache, None or "default"
        The fast path (:class:`DigestCache`): ``"default"`` is :func:`default_cache_path`;
        None hashes every file.
    update_cache : bool
        Save new entries to the cache file (False: a dry run reads the cache only).

    Returns
    -------
    str
        64 lowercase hex digits.

    Raises
    ------
    NotADirectoryError
        ``folder`` is not a folder.
    OSError
        A file cannot be read.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "config.json").write_text("{}")
    >>> checkpoint_digest(d, None) == checkpoint_digest(d, None)
    True
    """
    if isinstance(cache, DigestCache):
        dc = cache
    else:
        dc = DigestCache(default_cache_path() if cache == "default" else cache)
    root = Path(folder)
    h = hashlib.sha256()
    for rel in checkpoint_files(root):
        h.update(f"{rel}\0{dc.digest(root / rel)}\n".encode("utf-8"))
    if update_cache and not isinstance(cache, DigestCache):
        dc.save()
    return h.hexdigest()


def checkpoint_revision(folder: str | os.PathLike, cache: str | os.PathLike | DigestCache | None = "default", *,
                        update_cache: bool = True) -> str:
    """A local checkpoint's revision as a store records it: ``"sha256:"`` and the first 16 hex digits of
    :func:`checkpoint_digest` (same parameters and errors)."""
    return "sha256:" + checkpoint_digest(folder, cache, update_cache=update_cache)[:16]


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


#: version of the identity digests below (a change of what enters them changes every identity)
IDENTITY_VERSION = 1
#: the mime type of the identity output that each executed stage notebook carries (:func:`identity_bundle`)
IDENTITY_MIME = "application/vnd.murk.identity+json"
#: the label of the notebook cell whose output it is (``#| label: murk-identity``)
IDENTITY_LABEL = "murk-identity"


def store_attrs(store: str | os.PathLike) -> dict:
    """A zarr store's attributes, read as JSON only (no zarr, no xarray).

    Parameters
    ----------
    store : path
        A zarr store folder: zarr 3 (``zarr.json``, its ``attributes``; the read-out stores) or zarr 2
        (``.zattrs``; the cube, and read-out stores of earlier murk versions).

    Returns
    -------
    dict
        The attributes.

    Raises
    ------
    FileNotFoundError
        The store has neither metadata file (none yet: a creation killed half-way).
    OSError, ValueError
        The metadata cannot be read, or is not a JSON mapping.
    """
    store = Path(store)
    if (store / "zarr.json").is_file():
        attrs = json.loads((store / "zarr.json").read_text(encoding="utf-8")).get("attributes", {})
    else:
        attrs = json.loads((store / ".zattrs").read_text(encoding="utf-8"))
    if not isinstance(attrs, dict):
        raise ValueError(f"the attributes of {store} are not a mapping")
    return attrs
