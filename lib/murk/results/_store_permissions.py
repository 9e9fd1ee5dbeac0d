"""A read-out store that the file system will not let the read-out write: one line naming the file and the fix.

zarr's local store writes each shard file to ``<shard>.<uuid>.partial`` beside it and renames it into place, so a
shard made read-only for this user (``chmod a-w`` on its folder; for root, whom modes do not stop, ``chattr +i`` on
the file) fails that write with a raw ``PermissionError`` naming the temporary file. :func:`store_write_guard`, around
the read-out's writes of a store (:func:`murk.results.write_image`, :func:`murk.results.write_missing`, a resumed
store's repair), turns it into a :class:`StoreNotWritableError` whose one line names the store's file, what is
kept, and the fix in the words of the command that ran: make it writable and run the same command again (it
resumes), or delete the store and read the model out afresh. The failed image is not marked done, so nothing is
half-counted: the images written before it are kept, and it is read again on resume.
"""

from __future__ import annotations

import errno
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

__all__ = ["StoreNotWritableError", "NOT_PERMITTED_ERRNOS", "store_write_guard"]

#: errno values of a write the file system refuses: EACCES (the mode), EPERM (an immutable file), EROFS (a read-only
#: mount)
NOT_PERMITTED_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS)
# zarr's local store (zarr.storage.LocalStore, _atomic_write): <file>.<32 hex digits>.partial
_PARTIAL = re.compile(r"\.[0-9a-f]{32}\.partial$")


class StoreNotWritableError(PermissionError):
    """A file of a read-out store cannot be written; its ``str`` is one line naming the file and the fix.

    A :class:`PermissionError` (its ``errno`` and ``filename`` those of the refused write), so that code that
    handles one still does.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()


def _refused_file(e: OSError, store: Path) -> Path:
    """The store's file a refused write was for: the destination of a rename, not zarr's temporary file."""
    name = e.filename2 if getattr(e, "filename2", None) else e.filename
    if not name:
        return store
    return Path(_PARTIAL.sub("", str(name)))


@contextmanager
def store_write_guard(store: str | os.PathLike, index: int | None = None) -> Iterator[None]:
    """Turn a write that the file system refuses inside the block into a :class:`StoreNotWritableError`.

    Parameters
    ----------
    store : path
        The read-out store being written.
    index : int, optional
        The position of the image being written (said to be read again on resume).

    Raises
    ------
    StoreNotWritableError
        For a :class:`PermissionError`, or an :class:`OSError` of errno ``EROFS`` (:data:`NOT_PERMITTED_ERRNOS`),
        raised in the block, with the chained traceback suppressed: the message is the whole story. Other errors
        pass unchanged.
    """
    store = Path(store)
    try:
        yield
    except StoreNotWritableError:
        raise
    except OSError as e:
        if not (isinstance(e, PermissionError) or e.errno in NOT_PERMITTED_ERRNOS):
            raise
        f = _refused_file(e, store)
        this = "" if index is None else f"; this image (position {index}) is not marked done and is read again"
        err = StoreNotWritableError(
            f"murk: {f} of the read-out store {store} cannot be written ({e.strerror or e}: it is read-only, "
            f"immutable or not this user's). Safe: every image written before is kept{this}. Fix: make the store "
            f"writable (chmod -R u+w {store}; an immutable file: chattr -i {f}) and run the same command again "
            f"(make demo, or the papermill line you ran): it resumes; or delete the store (rm -r {store}) to read "
            f"the model out afresh")
        err.errno, err.strerror, err.filename = e.errno, e.strerror, str(f)
        raise err from None
