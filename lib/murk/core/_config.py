"""The frozen study configuration (spec Tables II and III), its hash and the frozen run record.

The spec froze its configuration by hash before any model was run (Sec. III:
"frozen in a configuration file (SHA-256 prefix 812b518e9400) before any
stage-1 model was run; the 1000 selected items have hash prefix
619cbf46561d"). murk does the same: :func:`config_hash` hashes
``data/config.yaml`` (Table III and the prompt templates of Table II), and
:func:`freeze_run` records the config hash and the items hash of a named run
on its first *select* and refuses any later *select* of that run whose hashes
differ.
"""

from __future__ import annotations

import copy
import datetime as _dt
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml

from murk.core import _paths as paths

__all__ = ["load_config", "config_hash", "canonical_json", "frozen_folder", "freeze_run",
           "settings_table", "git_commit", "package_versions", "run_settings_file", "run_settings", "run_default",
           "root_models", "analyse_models", "root_depth_backend"]


def load_config(path: str | Path | None = None) -> dict[str, Any]:
    """Read the study configuration.

    Parameters
    ----------
    path : str or Path, optional
        A YAML file; default ``data/config.yaml`` of the project
        (:func:`murk.core.config_file`).

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


def run_settings_file() -> Path:
    """The run settings' defaults: ``data/workflow.yaml`` (Snakemake's ``configfile``)."""
    return paths.data_dir() / "workflow.yaml"


def run_settings(path: str | Path | None = None) -> dict[str, Any]:
    """The default run settings (which models, how many items, where), as Snakemake reads them.

    ``data/workflow.yaml`` is the one source of the defaults that the workflow and the
    stage notebooks share: a notebook parameter that is also a run setting defaults to
    ``None``, which :func:`run_default` resolves from this file, so that a notebook run by
    hand (papermill, JupyterLab) and the same stage run by Snakemake agree.

    Parameters
    ----------
    path : str or Path, optional
        A YAML mapping; default :func:`run_settings_file`.

    Returns
    -------
    dict
        The settings as written (``models`` entries are ids or ``{id, n_items}`` mappings).

    Raises
    ------
    FileNotFoundError, ValueError
        If the file is missing or not a YAML mapping (the message names it).
    """
    path = Path(path) if path is not None else run_settings_file()
    if not path.is_file():
        raise FileNotFoundError(f"run settings {path} not found: restore it (git checkout data/workflow.yaml)")
    with open(path, encoding="utf-8") as f:
        settings = yaml.safe_load(f)
    if not isinstance(settings, dict):
        raise ValueError(f"{path} is not a YAML mapping: restore it (git checkout data/workflow.yaml)")
    return settings


def run_default(key: str, value: Any = None) -> Any:
    """A notebook parameter's value: ``value`` when given, else the run settings' default for ``key``.

    Parameters
    ----------
    key : str
        A key of ``data/workflow.yaml`` (e.g. ``"n_verbal_items"``, ``"depth_backend"``). The key
        ``"models"`` gives the models of the current mode, as the Snakefile picks them:
        ``offline_models`` when ``MURK_OFFLINE=1``, else ``models``.
    value : any, optional
        The parameter as passed (``None``: not passed).

    Returns
    -------
    any
        ``value``, or the default.

    Raises
    ------
    KeyError
        If the run settings have no such key (the message names the file).
    murk.core.SettingsError
        A ValueError, if the value (given, or the default) is not of the setting's type
        and range (:data:`murk.core.SCHEMA`): the message names the parameter as
        papermill takes it (``-p n_items abc``), or the file, and the accepted form.

    Notes
    -----
    A value of a setting of :data:`murk.core.SCHEMA` is returned normalised by
    :func:`murk.core.check_setting`, as the Snakefile normalises it: papermill's
    ``-p trust_remote_code false`` (the text ``"false"``) gives False, ``-p n_items 8``
    gives 8. The model lists are returned as given (:func:`murk.core.model_entries`
    checks them where they are used).

    >>> run_default("seed", 7), run_default("seed")
    (7, 1)
    """
    from murk.core import settings as _settings

    if value is not None:
        origin = _settings.PAPERMILL
    else:
        settings = run_settings()
        if key == "models":
            key = "offline_models" if paths.offline() else "models"
        if key not in settings:
            raise KeyError(f"{run_settings_file()} has no setting {key!r}")
        value, origin = settings[key], _settings.DEFAULT_FILE
    if key in _settings.SCHEMA and _settings.SCHEMA[key].kind != "models":
        return _settings.check_setting(key, value, origin)
    return value


def root_models(output_dir: str | os.PathLike) -> tuple[list, str] | None:
    """The models an output root was analysed or read out with, as the root itself records them.

    Parameters
    ----------
    output_dir : path
        The output root (absolute, or as :func:`murk.core.output_dir` takes it).

    Returns
    -------
    (list, str) or None
        The model entries (a hub id or folder, or ``{"id": ..., "n_items": N}``) and where they were read:
        the models the root's last analysis was given (``paper_numbers.json``, its ``analysis.models``), else
        the ``model_id`` of each read-out store under ``readout/`` (the monitors left out); None when the root
        records none.
    """
    from murk.core import _identity
    from murk.core import _paths as paths

    root = paths.output_dir(output_dir)
    numbers = paths.numbers_file(root)
    try:
        value = json.loads(numbers.read_text(encoding="utf-8")).get("analysis.models")
        value = value.get("value") if isinstance(value, dict) else value
        entries = json.loads(value) if isinstance(value, str) else None
        if isinstance(entries, list) and entries:
            return entries, f"{numbers} (the models its last analysis was given)"
    except (OSError, ValueError, AttributeError):
        pass
    found = []
    for store in sorted((root / "readout").glob("*.zarr")) + sorted((root / "readout").glob("*/s*-0000.zarr")):
        try:
            mid = _identity.store_attrs(store).get("model_id")
        except (OSError, ValueError):
            continue
        if isinstance(mid, str) and mid and not mid.startswith("murk/visibility-monitor") and mid not in found:
            found.append(mid)
    return (found, f"the read-out stores in {root / 'readout'}") if found else None


def analyse_models(models: Any, output_dir: str | os.PathLike, shard_size: int | None = None,
                   offline: bool | None = None, required: bool = True) -> tuple[Any, str | None]:
    """The analyse notebook's ``models`` when left at None: the run settings' models if the root holds their
    read-outs, else the models the root records (:func:`root_models`).

    A notebook run in JupyterLab after a documented run (``make demo`` offline, a by-hand read-out) finds that
    run's models whatever ``MURK_OFFLINE`` says in Lab's environment.

    Parameters
    ----------
    models : list, str or None
        The parameter as given; anything but None is returned as it is.
    output_dir : path
        The output root.
    shard_size : int, optional
        The read-outs' shard size (where the stores are).
    offline : bool, optional
        Default :func:`murk.core.offline` (which run settings' list is the default).
    required : bool
        The read-outs must be there (the analyse notebook); False (the read-out notebook, which writes them):
        the run settings' models when the root records none.

    Returns
    -------
    (models, str or None)
        The models to analyse, and a line saying where they came from when they are not the run settings'.

    Raises
    ------
    FileNotFoundError
        Neither the run settings' models nor models the root records have their read-out stores there: one
        line naming the root and what to set (``models`` in the parameters cell, ``-y 'models: [...]'``, or
        ``MURK_OFFLINE=1`` for an offline run's root). Not raised when ``required`` is False.
    """
    from murk.core import settings
    from murk.core import _paths as paths

    if models is not None:
        return models, None
    offline = paths.offline() if offline is None else bool(offline)
    key = "offline_models" if offline else "models"
    default = run_default("models")
    root = paths.output_dir(output_dir)

    def have_stores(entries) -> bool:
        try:
            ids = [e.id for e in settings.model_entries(entries, None, key)]
        except ValueError:
            return False
        stores = [paths.readout_stores(m, 1, shard_size, root) for m in ids]   # (a sharded read-out: its first shard)
        return all(Path(s[0] if isinstance(s, list) else s).exists() for s in stores)

    if have_stores(default):
        return default, None
    recorded = root_models(root)
    if not required and recorded is None:
        return default, None
    if recorded is not None and have_stores(recorded[0]):
        return recorded[0], (f"murk: models = None, and the run settings' {key} ({', '.join(map(str, default))}) "
                             f"have no read-out in {root}: taking the models of {recorded[1]}")
    other = "MURK_OFFLINE=1 (e.g. MURK_OFFLINE=1 make lab) for an offline run's root" if not offline else \
        "MURK_OFFLINE unset for an online run's root"
    if not required:
        return default, None
    raise FileNotFoundError(
        f"the analyse notebook's models = None takes the run settings' {key} ({', '.join(map(str, default))}), and "
        f"{root} holds no read-out of them nor records other models: set models in the parameters cell (e.g. "
        f"models = ['murk-tiny/smolvlm']; papermill -y 'models: [...]'), or {other}")


def root_depth_backend(output_dir: str | os.PathLike) -> str | None:
    """The depth backend the root's depth stage used, as a ``backend`` parameter: ``"constant"`` where
    ``depth/current.json`` names murk's constant backend (an offline run), else None."""
    from murk.core import _paths as paths

    try:
        name = json.loads((paths.depth_dir(output_dir) / "current.json").read_text(encoding="utf-8"))["depth_backend"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return "constant" if str(name).startswith("constant") else None


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


# ----------------------------------------------------------------------------- frozen run record

_RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
#: the keys compared by :func:`freeze_run`; a difference in any is refused
FROZEN_KEYS = ("config_hash", "items_hash")


def frozen_folder(frozen_dir: str | os.PathLike | None = None) -> Path:
    """Folder of the frozen run records.

    Parameters
    ----------
    frozen_dir : path, optional
        Explicit folder. Default ``$MURK_FROZEN_DIR`` if set, else
        ``data/frozen/`` of the project (:func:`murk.core.data_dir`). Tests
        set ``MURK_FROZEN_DIR`` so that they never write into ``data/``.

    Returns
    -------
    Path
    """
    d = frozen_dir or os.environ.get("MURK_FROZEN_DIR") or (paths.data_dir() / "frozen")
    return Path(d).expanduser()


def freeze_run(
    run_name: str,
    config_hash: str,
    items_hash: str,
    frozen_dir: str | os.PathLike | None = None,
    *,
    n_items: int | None = None,
    seed: int | None = None,
    annotation_file: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Write, or check against, the frozen record of a run (spec Sec. III).

    On the first call for ``run_name`` the record
    ``<frozen_dir>/<run_name>.json`` is written with the config hash, the
    items hash, ``n_items``, ``seed``, the annotation file's name (no folder,
    so the record is machine independent) and a UTC ``created`` timestamp
    (ISO 8601). On every later call the given config hash and items hash
    are compared with the record's: equal, the record is returned unchanged;
    different, the call is refused. So a run whose configuration or items
    changed cannot write into the outputs of the same run name.

    Parameters
    ----------
    run_name : str
        Name of the run: letters, digits, ``.``, ``_``, ``-`` (1-100
        characters, starting with a letter or digit).
    config_hash : str
        :func:`config_hash` of the configuration used.
    items_hash : str
        :func:`murk.protocol.items_hash` of the selected items.
    frozen_dir : path, optional
        Folder of the records; default :func:`frozen_folder` (``$MURK_FROZEN_DIR``
        or ``data/frozen/``). Created if missing.
    n_items, seed : int, optional
        Number of items selected and the selection seed (recorded, not
        compared: both enter the items hash).
    annotation_file : path, optional
        The COCO annotation file; only its name is recorded.

    Returns
    -------
    dict
        The record: ``run_name``, ``config_hash``, ``items_hash``,
        ``n_items``, ``seed``, ``annotation_file``, ``created``.

    Raises
    ------
    ValueError
        If ``run_name`` is not a valid name; if the existing record's config
        hash or items hash differs (the message names the record file, the
        differing hashes and the complete fixes: restore the settings, or a
        new run name *and* a new output root, or delete the record
        deliberately); if the record file is not a JSON object.
    """
    if not isinstance(run_name, str) or not _RUN_NAME.match(run_name):
        raise ValueError(f"run_name {run_name!r} is not valid: use 1-100 letters, digits, '.', '_' or '-', "
                         f"starting with a letter or digit (e.g. 'study-2025')")
    folder = frozen_folder(frozen_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{run_name}.json"
    given = {"config_hash": str(config_hash), "items_hash": str(items_hash)}
    if path.is_file():
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"frozen record {path} is not valid JSON ({e}); restore it from git or "
                             f"delete it deliberately") from e
        if not isinstance(record, dict):
            raise ValueError(f"frozen record {path} is not a JSON object; restore it from git or delete it deliberately")
        diff = [k for k in FROZEN_KEYS if record.get(k) != given[k]]
        if diff:
            detail = "; ".join(f"{k} {str(record.get(k))[:12]}… recorded, {given[k][:12]}… now" for k in diff)
            raise ValueError(
                f"run {run_name!r} is frozen in {path} with other settings ({detail}): the configuration "
                f"(data/config.yaml) or the selected items (n_items, seed, split, the annotation file) changed since "
                f"its first run, and its outputs must not be mixed with this one's. Nothing was written. Fix, one of: "
                f"(1) restore the settings of that run (`git checkout data/config.yaml`, and the same n_items, seed "
                f"and split); (2) run the changed settings as a new run into a new output root: make demo "
                f"ARGS='--config run_name=NEW output_dir=outputs-NEW' (a new run_name alone is not enough: the "
                f"read-out stores of the old output root refuse the new configuration); (3) delete the record "
                f"{path} deliberately (the old outputs are then no longer protected)."
            )
        return record
    record = {
        "run_name": run_name,
        **given,
        "n_items": None if n_items is None else int(n_items),
        "seed": None if seed is None else int(seed),
        "annotation_file": None if annotation_file is None else Path(annotation_file).name,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(record, indent=1, sort_keys=True) + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return record


# ----------------------------------------------------------------------------- Table III

def settings_table(config: dict[str, Any] | None = None, exclude: tuple[str, ...] = ("prompts",)) -> list[dict[str, str]]:
    """The fixed settings of the configuration as rows (spec Table III).

    Parameters
    ----------
    config : dict, optional
        Default the project's (:func:`load_config`).
    exclude : tuple of str
        Top-level sections left out; default ``prompts`` (Table II,
        :func:`murk.protocol.prompt_table`).

    Returns
    -------
    list of dict
        One row per leaf setting, in file order: ``setting`` (dotted key,
        e.g. ``items.min_box_side_px``) and ``value`` (lists joined by ", ").
    """
    cfg = load_config() if config is None else config
    rows: list[dict[str, str]] = []

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            value = ", ".join(str(v) for v in node) if isinstance(node, (list, tuple)) else str(node)
            rows.append({"setting": prefix, "value": value})

    walk("", {k: v for k, v in cfg.items() if k not in exclude})
    return rows


def git_commit() -> str:
    """The project's git commit, with ``-dirty`` if tracked files have changes; ``"unknown"``
    outside a git checkout (provenance: the cube's ``git_commit`` attribute, the colophon)."""
    import subprocess

    try:
        root = paths.project_root()
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def package_versions(packages=("torch", "transformers", "numpy", "xarray", "zarr", "snakemake",
                              "imagecorruptions-imaug")) -> dict[str, str]:
    """Installed versions of ``packages`` and of Python, for the colophon.

    Returns
    -------
    dict
        package name -> version string (``"n/a"`` when not installed), and ``python``.
    """
    import platform
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in packages:
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "n/a"
    out["python"] = platform.python_version()
    return out
