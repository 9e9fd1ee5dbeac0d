"""Atomic writers of the report: a file is written whole (temporary sibling + rename) or not at all.
"""

from __future__ import annotations

import os
from pathlib import Path

from murk import core

__all__ = ["write_text_atomic", "write_netcdf_atomic"]


def write_netcdf_atomic(ds, path: str | os.PathLike) -> Path:
    """Write an xarray Dataset as netCDF atomically (temporary sibling + rename).

    Raises
    ------
    murk.core.DiskFullError
        The disk is full: the temporary file is removed, the previous file kept.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with core.guard(path, cleanup=[tmp]):
        ds.to_netcdf(tmp)
    os.replace(tmp, path)
    return path


def write_text_atomic(path: Path, text: str) -> Path:
    """Write a text file atomically (temporary sibling + rename); a full disk raises
    :class:`murk.core.DiskFullError` and keeps the previous file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with core.guard(path, cleanup=[tmp]):
        tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path

