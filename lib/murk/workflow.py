"""What the Snakefile needs besides Snakemake: completion markers that vouch for a store's
content, and resuming after a killed run without a manual unlock.

Markers
-------
A read-out store (``outputs/readout/<model>.zarr``, a shard store, the monitor's
store) is not a declared output of its Snakemake rule: Snakemake deletes the
outputs of a failed job, and a store must survive a killed job so the next run
resumes image by image. The rule declares a marker instead
(``outputs/readout/<model>.done``), written by :func:`write_marker` after the
stage finished; it records the store's content digest (:func:`store_digest`).
When the Snakefile is parsed, :func:`drop_stale_markers` compares each marker with
its store: a store that was deleted, changed or damaged after its marker was
written makes the marker stale; it is removed, so the read-out runs again
(resuming, or re-reading what is needed) and everything downstream follows.

Stores of another selection
---------------------------
A store belongs to one selection (its ``config_hash`` and ``items_hash``
attributes). The select and depth stages call :func:`refuse_foreign_stores` before
they write anything: an output root that holds stores of another selection is
refused, naming the stores and the fixes, so a changed configuration or selection
never leaves ``outputs/`` mixed.

Stale locks
-----------
Snakemake locks its working directory (``.snakemake/locks/``) while it runs and
removes the lock when it ends; a run killed with SIGKILL (a power loss, the
out-of-memory killer, a pre-empted job) leaves the lock behind, and the next run
stops with ``LockException`` until ``snakemake --unlock``. :func:`hold_run_lock`
tells a stale lock from a live run with an OS file lock (``flock``) that every
Snakemake main process of this workflow holds, shared, for its lifetime, and
that the kernel releases when the process dies, however it dies: when no
process holds it, no run is alive and the Snakemake locks are removed; when one
does, they are left alone and Snakemake's own protection against two concurrent
runs applies unchanged.

Model entries
-------------
The run settings ``models`` and ``offline_models`` (``data/workflow.yaml``,
``--configfile``, ``--config``) and the analyse notebook's parameter ``models``
list the models to read out: a hub id or a local folder, or a mapping
``{id: <hub id or folder>, n_items: N}`` for a model read out on the first N items
of the selection only (the spec runs two of its five models on the first 600 and
the first 400 of its 1000 items). :func:`model_entries` is the one parser of
these lists: the Snakefile (store names, the read-out's item count, the shards)
and the analyse notebook use it.

This module imports nothing heavy (the Snakefile imports it on every run).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from pathlib import Path
from typing import Any, NamedTuple

__all__ = ["ModelEntry", "model_entries", "IGNORED_SUFFIXES", "SELECTION_KEYS", "store_digest", "write_marker", "read_marker", "stale_reason",
           "store_of", "drop_stale_markers", "foreign_stores", "refuse_foreign_stores", "running_notebooks_dir", "hold_run_lock"]

#: files inside a store that are not its content: zarr's half-written chunk files of a
#: killed write (``<chunk>.<uuid>.partial``; :func:`murk.cube.open_readout_store` removes them)
IGNORED_SUFFIXES = (".partial",)

MARKER_VERSION = 1

#: the keys a mapping entry of ``models`` may have
MODEL_ENTRY_KEYS = ("id", "n_items")


class ModelEntry(NamedTuple):
    """One model of a run: its id (hub id or folder) and the number of items it is read out on."""

    id: str
    n_items: int


def _entry_form(setting: str) -> str:
    return (f"each entry of {setting} is a hub id or folder, or a mapping {{id: <hub id or folder>, n_items: N}} "
            f"(the first N items of the selection), e.g. {setting}: [HuggingFaceTB/SmolVLM-256M-Instruct, "
            f"{{id: google/gemma-4-E2B-it, n_items: 600}}]")


def _entries_from_text(text: str, setting: str) -> list:
    """A list given as text (papermill ``-p models '[...]'`` passes a string): parsed as YAML (JSON is YAML)."""
    import yaml

    hint = (f"pass it as YAML with papermill's -y, e.g. -y '{setting}: [murk-tiny/smolvlm, "
            f"{{id: murk-tiny/qwen3vl, n_items: 4}}]'")
    t = text.strip()
    if t.startswith(("[", "{")):
        try:
            parsed = yaml.safe_load(t)
        except yaml.YAMLError as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ValueError(f"{setting} arrived as the text {text!r}, which is not a YAML or JSON list ({first}): "
                             f"{hint}") from None
        return parsed if isinstance(parsed, list) else [parsed]
    if not t or "," in t or any(c.isspace() for c in t):
        raise ValueError(f"{setting} arrived as the text {text!r}, not as a list of models: {hint}")
    return [t]  # one model id


def model_entries(entries: Any, n_items: int | None = None, setting: str = "models") -> list[ModelEntry]:
    """The models of a run with the number of items each is read out on.

    Parameters
    ----------
    entries : list, or str
        The setting's value: a list whose entries are a hub id or local folder
        (str: read out on every item), or a mapping ``{id: <hub id or folder>,
        n_items: N}`` (read out on the first N items of the selection, in the
        selection's order). A str is a list given as text (papermill ``-p models
        '["a", "b"]'`` passes one): YAML or JSON text of a list, or a single id.
    n_items : int, optional
        The run's number of selected items (``n_items`` of the run settings, or
        the length of ``items.json``). An entry without ``n_items`` gets it; an
        entry asking for more items than the run has is read out on all of them
        (as ``n_verbal_items``). None: entries without ``n_items`` get None.
    setting : str
        The setting's name in messages, e.g. ``"offline_models (data/workflow.yaml)"``.

    Returns
    -------
    list of ModelEntry
        ``(id, n_items)`` per model, in the setting's order; ``id`` is a str,
        ``n_items`` an int >= 1 (or None, see ``n_items``).

    Raises
    ------
    ValueError
        If the list is empty or not a list, an entry is neither a str nor a
        mapping, a mapping has a key other than ``id`` and ``n_items`` or lacks
        ``id``, ``n_items`` is not an integer >= 1, a model is listed twice, or
        a text does not parse as a list. The message names the setting, the
        entry and the form to use.
    """
    if isinstance(entries, str):
        entries = _entries_from_text(entries, setting)
    if isinstance(entries, (dict, ModelEntry)) or not isinstance(entries, (list, tuple)):
        raise ValueError(f"{setting} must be a list of models, got {type(entries).__name__} {entries!r}: "
                         f"{_entry_form(setting)}")
    if not entries:
        raise ValueError(f"{setting} is empty: list at least one model; {_entry_form(setting)}")
    run_n = None if n_items is None else int(n_items)
    out: list[ModelEntry] = []
    seen: dict[str, int] = {}
    for k, e in enumerate(entries, start=1):
        where = f"{setting}, entry {k} ({e!r})"
        if isinstance(e, ModelEntry):
            e = e._asdict()
        if isinstance(e, str):
            mid, n = e, None
        elif isinstance(e, dict):
            unknown = [str(x) for x in e if x not in MODEL_ENTRY_KEYS]
            if unknown:
                raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}; the keys are id and n_items: "
                                 f"{_entry_form(setting)}")
            if "id" not in e:
                raise ValueError(f"{where} has no id: {_entry_form(setting)}")
            mid, n = e["id"], e.get("n_items")
            if not isinstance(mid, str):
                raise ValueError(f"{where}: id must be a hub id or folder (text), got {mid!r}")
            if n is not None:
                if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                    raise ValueError(f"{where}: n_items must be a whole number of items >= 1 (the first N items of "
                                     f"the selection), got {n!r}; leave it out to read the model out on every item")
        else:
            raise ValueError(f"{where} is neither a model id nor a mapping: {_entry_form(setting)}")
        mid = mid.strip()
        if not mid:
            raise ValueError(f"{where}: the model id is empty; {_entry_form(setting)}")
        if mid in seen:
            raise ValueError(f"{setting} lists {mid} twice (entries {seen[mid]} and {k}): list each model once, "
                             f"with one n_items")
        seen[mid] = k
        if n is None:
            n = run_n
        elif run_n is not None:
            n = min(int(n), run_n)
        out.append(ModelEntry(mid, None if n is None else int(n)))
    return out


def store_of(marker: str | os.PathLike) -> Path:
    """The store a marker vouches for: ``x.done`` -> ``x.zarr`` (same folder)."""
    return Path(marker).with_suffix(".zarr")


def store_digest(store: str | os.PathLike) -> str:
    """SHA-256 of a store's content: every file's relative path and bytes, in sorted order.

    Parameters
    ----------
    store : path
        A zarr store folder.

    Returns
    -------
    str
        ``"sha256:<hex>"``, or ``"absent"`` when the store does not exist.

    Notes
    -----
    Files ending in :data:`IGNORED_SUFFIXES` are skipped; modification times are
    not part of the digest (copying a store keeps its digest). A study-sized
    store (1000 images: 6055 files, 28 MB) hashes in about 0.5 s on a loaded
    2-core machine.
    """
    store = Path(store)
    if not store.exists():
        return "absent"
    h = hashlib.sha256()
    files = sorted(p for p in store.rglob("*") if p.is_file() and not p.name.endswith(IGNORED_SUFFIXES))
    for p in files:
        rel = p.relative_to(store).as_posix().encode("utf-8")
        h.update(len(rel).to_bytes(4, "little") + rel)
        data = p.read_bytes()
        h.update(len(data).to_bytes(8, "little") + data)
    return "sha256:" + h.hexdigest()


def write_marker(marker: str | os.PathLike, store: str | os.PathLike | None = None) -> Path:
    """Write the marker of a finished stage: the store's name and content digest (JSON, atomic).

    Parameters
    ----------
    marker : path
        ``….done``.
    store : path, optional
        Default :func:`store_of` the marker. A store that does not exist (a shard
        beyond the last item) is recorded as ``"absent"``.
    """
    marker = Path(marker)
    store = Path(store) if store is not None else store_of(marker)
    rec = {"marker_version": MARKER_VERSION, "store": store.name, "digest": store_digest(store)}
    marker.parent.mkdir(parents=True, exist_ok=True)
    tmp = marker.with_name(marker.name + ".tmp")
    from murk import diskfull

    with diskfull.guard(marker, "the store is complete and kept; only its marker is not written, so the next run "
                                "re-runs its read-out, which finds every image done and writes the marker", cleanup=[tmp]):
        tmp.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, marker)
    return marker


def read_marker(marker: str | os.PathLike) -> dict | None:
    """The marker's record, or None when it is empty or not a murk marker (an old ``touch`` marker)."""
    try:
        rec = json.loads(Path(marker).read_text() or "null")
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and "digest" in rec else None


def stale_reason(marker: str | os.PathLike, store: str | os.PathLike | None = None) -> str | None:
    """Why a marker no longer vouches for its store, or None when it does.

    Returns
    -------
    str or None
        E.g. ``"the store … is missing"``, ``"the store … changed after the marker
        was written"``, ``"the marker records no content digest"``; None when the
        marker does not exist (nothing to vouch for) or matches.
    """
    marker = Path(marker)
    if not marker.exists():
        return None
    store = Path(store) if store is not None else store_of(marker)
    rec = read_marker(marker)
    if rec is None:
        return f"the marker {marker} records no content digest of {store.name} (written by an older murk)"
    now = store_digest(store)
    if now == rec["digest"]:
        return None
    if now == "absent":
        return f"the store {store} is missing"
    if rec["digest"] == "absent":
        return f"the store {store} appeared after the marker was written"
    return f"the store {store} changed after its marker was written (content digest differs)"


def drop_stale_markers(folder: str | os.PathLike) -> list[tuple[Path, str]]:
    """Remove every marker under ``folder`` that no longer vouches for its store.

    Parameters
    ----------
    folder : path
        ``<output root>/readout`` (searched recursively: shard markers live in
        ``readout/<model>/``).

    Returns
    -------
    list of (marker, reason)
        The markers removed and why (:func:`stale_reason`); the caller prints them.
    """
    folder = Path(folder)
    dropped = []
    if not folder.is_dir():
        return dropped
    for marker in sorted(folder.rglob("*.done")):
        reason = stale_reason(marker)
        if reason is not None:
            marker.unlink(missing_ok=True)
            dropped.append((marker, reason))
    return dropped


#: attributes of a store that say which selection and configuration it belongs to
SELECTION_KEYS = ("config_hash", "items_hash")


def foreign_stores(root: str | os.PathLike, config_hash: str, items_hash: str) -> list[tuple[Path, str]]:
    """The stores under an output root that belong to another selection or configuration.

    Reads only each store's attributes (``.zattrs``): every read-out store under
    ``<root>/readout/`` (shard and monitor stores included) and ``<root>/cube.zarr``.

    Parameters
    ----------
    root : path
        The output root.
    config_hash, items_hash : str
        The selection about to be written (:func:`murk.config.config_hash`,
        :func:`murk.items.items_hash`).

    Returns
    -------
    list of (store, detail)
        Sorted by path; ``detail`` names the differing hashes (first 12 hex digits),
        e.g. ``"items_hash fe7dcb16c82a… (this run 0a1b2c3d4e5f…)"``. A store whose
        attributes cannot be read is listed too (``"attributes unreadable"``).
    """
    root = Path(root)
    given = {"config_hash": str(config_hash), "items_hash": str(items_hash)}
    found = sorted((root / "readout").rglob("*.zarr")) if (root / "readout").is_dir() else []
    found += [root / "cube.zarr"] if (root / "cube.zarr").is_dir() else []
    out = []
    for store in found:
        if not store.is_dir():
            continue
        try:
            attrs = json.loads((store / ".zattrs").read_text(encoding="utf-8"))
        except FileNotFoundError:
            continue  # no metadata yet (a creation killed half-way): it holds no read-outs
        except (OSError, ValueError):
            out.append((store, "attributes unreadable"))
            continue
        diff = [f"{k} {str(attrs.get(k))[:12]}… (this run {given[k][:12]}…)" for k in SELECTION_KEYS
                if str(attrs.get(k)) != given[k]]
        if diff:
            out.append((store, ", ".join(diff)))
    return out


def refuse_foreign_stores(root: str | os.PathLike, config_hash: str, items_hash: str, stage: str) -> None:
    """Refuse, before a stage writes anything, when the output root holds stores of another selection.

    The select stage calls it before it writes ``items.json``, the depth stage
    before it writes its figure and table: writing a selection that no store of the
    root matches would leave the root mixed (the read-outs then refuse their stores,
    the paper stands on the old ones).

    Parameters
    ----------
    root : path
        The output root.
    config_hash, items_hash : str
        The selection of this run.
    stage : str
        The stage that refuses (named in the message).

    Raises
    ------
    ValueError
        If :func:`foreign_stores` finds any; the message names the root, each store
        and what differs, and the complete fixes: restore the settings, or run the
        changed settings as a new run in a new output root, or delete the stale
        stores deliberately.
    """
    stale = foreign_stores(root, config_hash, items_hash)
    if not stale:
        return
    listed = "\n".join(f"  {p}: {d}" for p, d in stale)
    rm = " ".join(str(p) for p, _ in stale)
    raise ValueError(
        f"the {stage} stage refuses to write into the output root {root}: it holds {len(stale)} store(s) of "
        f"another selection or configuration:\n{listed}\nNothing was written. Fix, one of: (1) restore the "
        f"settings of that run (`git checkout data/config.yaml`, and the same n_items, seed and split); (2) run the "
        f"changed settings as a new run into a new output root: make demo ARGS='--config run_name=NEW "
        f"output_dir=outputs-NEW' (a new run_name alone is not enough: the stores in {root} stay those of the old "
        f"selection); (3) delete the stale stores deliberately: rm -r {rm}")


def running_notebooks_dir(output_dir: str | os.PathLike, snakemake_dir: str | os.PathLike = ".snakemake") -> Path:
    """Where the Snakefile's rules execute their notebooks (their logs) for one output root.

    ``<snakemake_dir>/murk-notebooks/<output root's absolute path as a slug>``; a
    notebook moves from there to ``<output_dir>/notebooks/`` only when it ran to
    its end, so a stage that fails or refuses leaves the output root as it was.
    """
    import re

    name = re.sub(r"[^A-Za-z0-9._-]+", "--", os.path.abspath(output_dir)).strip("-")
    return Path(snakemake_dir) / "murk-notebooks" / name


_HELD: dict[str, int] = {}


def hold_run_lock(snakemake_dir: str | os.PathLike = ".snakemake") -> list[Path]:
    """Hold this process's share of the run lock; remove Snakemake's locks when they are stale.

    Called once per Snakemake main process, when the Snakefile is parsed (before
    Snakemake locks the directory). Takes ``<snakemake_dir>/murk-run.flock``
    exclusively if it can: then no other Snakemake process of this workflow is
    alive in this directory, so every lock file in ``<snakemake_dir>/locks/`` was
    left by a killed run and is removed. Either way the process then holds the
    file lock shared until it exits (the kernel releases it at exit, also after
    SIGKILL), which marks this run as alive to later runs.

    Parameters
    ----------
    snakemake_dir : path
        Snakemake's folder in the working directory.

    Returns
    -------
    list of Path
        The stale lock files removed (empty when none, or when another run is alive).

    Notes
    -----
    ``flock`` is local to one machine on most network file systems: the check is
    meant for the machine that runs Snakemake's main process (the jobs that the
    SLURM executor starts do not call it).
    """
    d = Path(snakemake_dir).resolve()
    key = str(d)
    if key in _HELD:
        return []
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d / "murk-run.flock", os.O_RDWR | os.O_CREAT, 0o644)
    removed: list[Path] = []
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pass  # another run is alive: its locks are live, Snakemake's check applies
    else:
        locks = d / "locks"
        if locks.is_dir():
            removed = sorted(p for p in locks.iterdir() if p.is_file() and p.name.endswith(".lock"))
            for p in removed:
                p.unlink(missing_ok=True)
    fcntl.flock(fd, fcntl.LOCK_SH)  # held (shared) for this process's lifetime
    _HELD[key] = fd
    return removed


def main(argv: list[str] | None = None) -> int:
    """``python -m murk.workflow mark MARKER [STORE]``: write a stage's marker (used by the Snakefile)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m murk.workflow", description=main.__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("mark", help="write MARKER with the content digest of STORE (default: MARKER as .zarr)")
    m.add_argument("marker")
    m.add_argument("store", nargs="?")
    args = ap.parse_args(argv)
    if args.cmd == "mark":
        write_marker(args.marker, args.store)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
