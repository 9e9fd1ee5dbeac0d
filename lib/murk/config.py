"""The frozen study configuration (spec Tables II and III) and its hash."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

from murk import paths

__all__ = ["load_config", "config_hash", "canonical_json"]


def load_config(path: str | Path | None = None) -> dict[str, Any]:
    """Read the study configuration.

    Parameters
    ----------
    path : str or Path, optional
        A YAML file; default ``data/config.yaml`` of the project
        (:func:`murk.paths.config_file`).

    Returns
    -------
    dict
        The configuration (nested dicts and lists of literals).

    Raises
    ------
    FileNotFoundError
        If the file does not exist (the message names it).
    ValueError
        If the file is not a YAML mapping.
    """
    path = Path(path) if path is not None else paths.config_file()
    if not path.is_file():
        raise FileNotFoundError(
            f"config file {path} not found: pass the path of a murk config.yaml "
            f"(the project's is data/config.yaml)"
        )
    with open(path, encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    if not isinstance(cfg, dict):
        raise ValueError(f"{path} is not a YAML mapping; compare with data/config.yaml")
    return cfg


def canonical_json(obj: Any) -> str:
    """Serialise ``obj`` to canonical JSON (sorted keys, no whitespace, UTF-8).

    Floats are written by Python's shortest round-trip repr, which is the same
    on every platform, so the text (and any hash of it) is machine independent.
    """
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def config_hash(cfg: dict[str, Any] | None = None) -> str:
    """SHA-256 (hex, 64 chars) of the canonical JSON of the configuration.

    Parameters
    ----------
    cfg : dict, optional
        A configuration as returned by :func:`load_config`; default the
        project's. Comments and key order in the YAML file do not matter.

    Returns
    -------
    str
        Hex digest.
    """
    cfg = load_config() if cfg is None else copy.deepcopy(cfg)
    return hashlib.sha256(canonical_json(cfg).encode("utf-8")).hexdigest()
