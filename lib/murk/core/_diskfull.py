"""A full disk while a stage writes: one message naming the output root, what is kept, and how to resume.

Every writer of murk under the output root (read-out stores and the cube,
:mod:`murk.results`; the depth cache, :mod:`murk.scene`; figures; the numbers file,
tables and the paper, :mod:`murk.report`; the selection, :mod:`murk.protocol`; the
run markers, :mod:`murk.pipeline.markers`) writes inside :func:`guard`. A full disk
(``OSError`` errno 28, ``ENOSPC``, or a quota, ``EDQUOT``, or numpy's short write
``"N requested and M written"``) then becomes a :class:`DiskFullError` whose one
message names the output root and the file being written, says what is safe
(each writer says what it keeps), and gives the command that resumes: the same
command again, after freeing space. Its half-written temporary file is removed
first, so that the space it took is free again. The writers already write to a
temporary name and rename only complete files, and a read-out store counts an
image as done only after all its values are written, so nothing finished is lost.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

__all__ = ["DiskFullError", "FULL_DISK_ERRNOS", "RESUME", "is_full_disk", "output_root_of", "message", "guard"]

#: errno values of a full disk: ENOSPC (no space left on device) and EDQUOT (disk quota exceeded)
FULL_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
#: how to resume, in the words of the documented commands
RESUME = ("free space on that disk (or run into another output root: --config output_dir=DIR, papermill "
          "-p output_dir DIR), then run the same command again (`make demo`, `make paper`, or the `snakemake ...` "
          "/ `papermill ...` line you ran): it resumes where it stopped and redoes nothing finished")
_DEFAULT_KEPT = ("every file finished before this one is kept, and this one was being written under a temporary "
                 "name (renamed only when complete), so its previous version, if any, is intact")
_SHORT_WRITE = re.compile(r"\d+ requested and \d+ written")  # numpy's tofile/np.save on a full disk (errno None)


class DiskFullError(OSError):
    """The disk of the output root is full (errno ``ENOSPC``); the message says what is kept and how to resume.

    An :class:`OSError` (``errno`` 28), so that code cleaning up after a failed
    write still sees one; its ``str`` is the one-line message of :func:`message`.
    """

    def __init__(self, text: str, filename: str | os.PathLike | None = None):
        super().__init__(text)
        self.errno = errno.ENOSPC
        self.strerror = os.strerror(errno.ENOSPC)
        self.filename = None if filename is None else str(filename)

    def __str__(self) -> str:
        return str(self.args[0])


def is_full_disk(e: BaseException) -> bool:
    """Whether ``e`` is an out-of-space error of the file system.

    An :class:`OSError` of errno ``ENOSPC`` or ``EDQUOT``; numpy's short write
    (an ``OSError`` without errno, ``"N requested and M written"``); or the
    error of a tool run as a library or subprocess that reports the system's
    message (pandoc's ``RuntimeError``, Typst's error: "No space left on device",
    "Disk quota exceeded").
    """
    if isinstance(e, DiskFullError):
        return True
    if isinstance(e, OSError) and (e.errno in FULL_DISK_ERRNOS
                                   or (e.errno is None and bool(_SHORT_WRITE.search(str(e))))):
        return True
    text = str(e)
    return isinstance(e, Exception) and any(os.strerror(n) in text for n in FULL_DISK_ERRNOS)


def output_root_of(path: str | os.PathLike) -> Path:
    """The output root a file lies under: the nearest folder above it holding ``items.json`` (stage select's).

    Falls back to ``$MURK_OUTPUT_DIR`` when the path lies under it, else to the
    file's own folder (e.g. a frozen record under ``data/frozen/``).
    """
    p = Path(path).absolute()
    for d in [p, *p.parents]:
        if (d / "items.json").is_file():
            return d
    env = os.environ.get("MURK_OUTPUT_DIR")
    if env and Path(env).absolute() in p.parents:
        return Path(env).absolute()
    return p.parent


def message(path: str | os.PathLike, kept: str | None = None, root: str | os.PathLike | None = None) -> str:
    """The one-line message of a full disk while ``path`` was written.

    Parameters
    ----------
    path : path
        The file or store being written.
    kept : str, optional
        What the writer keeps (default: finished files are kept, this one was
        written under a temporary name).
    root : path, optional
        The output root; default :func:`output_root_of` ``path``.
    """
    root = Path(root) if root is not None else output_root_of(path)
    return (f"murk: no space left on the disk of the output root {root} (No space left on device) while "
            f"writing {path}. Safe: {kept or _DEFAULT_KEPT}. To resume: {RESUME}.")


def _remove(paths: Iterable[str | os.PathLike]) -> None:
    for t in paths:
        t = Path(t)
        try:
            if t.is_dir() and not t.is_symlink():
                shutil.rmtree(t, ignore_errors=True)
            else:
                t.unlink(missing_ok=True)
        except OSError:
            pass


@contextmanager
def guard(path: str | os.PathLike, kept: str | None = None, *, cleanup: Iterable[str | os.PathLike] = (),
          root: str | os.PathLike | None = None) -> Iterator[None]:
    """Turn a full disk inside the block into a :class:`DiskFullError` (other errors pass unchanged).

    Parameters
    ----------
    path : path
        What the block writes (named in the message).
    kept : str, optional
        What is safe, in the writer's words (:func:`message`).
    cleanup : iterable of path
        Temporary files or folders of the block, removed on a full disk (their
        space is given back; the finished files are never among them).
    root : path, optional
        The output root, where the writer knows it.

    Raises
    ------
    DiskFullError
        On a full disk (:func:`is_full_disk`), with the chained traceback
        suppressed: the message is the whole story.
    """
    try:
        yield
    except DiskFullError:
        _remove(cleanup)
        raise
    except Exception as e:  # noqa: BLE001 - only a full disk is turned into DiskFullError
        if not is_full_disk(e):
            raise
        _remove(cleanup)
        raise DiskFullError(message(path, kept, root), path) from None
