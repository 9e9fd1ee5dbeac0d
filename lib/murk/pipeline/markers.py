"""What the Snakefile needs besides Snakemake: completion markers that vouch for a store's
content, and resuming after a killed run without a manual unlock (locks per output root).

Markers
-------
A read-out store (``outputs/readout/<model>.zarr``, a shard store, the monitor's
store) is not a declared output of its Snakemake rule: Snakemake deletes the
outputs of a failed job, and a store must survive a killed job so the next run
resumes image by image. The rule declares a marker instead
(``outputs/readout/<model>.done``), written by :func:`write_marker` after the
stage finished, never over a store with an image damaged, missing or not done
(:func:`refuse_unfinished`); it records the store's content digest
(:func:`store_digest`) and each file's digest.
While Snakemake builds its job graph, :func:`rerun_reason` compares each marker
with its store: a store that was deleted, changed or damaged after its marker was
written (or a marker deleted, as the repair step of docs/recovery.md does) makes the Snakefile
force that read-out (:func:`force_rerun`), so it runs again (resuming, or
re-reading what is needed) and everything downstream follows, also when the cube
and the paper are newer; a dry run lists it and changes nothing. Before the forced
read-out runs, the images held by the files that changed are marked not done
(:func:`murk.pipeline.forget_changed`), so the read-out re-reads them even where the
store's codecs cannot see the change.

Stores of another selection
---------------------------
A store belongs to one selection (its ``config_hash`` and ``items_hash``
attributes). The select and depth stages call :func:`refuse_foreign_stores` before
they write anything: an output root that holds stores of another selection is
refused, naming the stores and the fixes, so a changed configuration or selection
never leaves ``outputs/`` mixed.

Stale locks
-----------
Snakemake locks the files of a run (``.snakemake/locks/``) and removes the locks
when it ends; a run killed with SIGKILL (a power loss, the out-of-memory killer, a
pre-empted job) leaves them behind, and Snakemake then stops the next run with
``LockException`` and suggests ``--unlock``, which removes the locks of every run,
live ones too. murk keeps a lock per output root (:mod:`murk.pipeline`, an OS file
lock the kernel releases when the process dies, however it dies), held by the
Snakemake main process for its lifetime: a second run on a root in use is
refused, naming the root and the live run; a Snakemake lock file whose paths lie
under roots that no live run holds is a dead run's and is removed, whatever other
runs of the checkout are alive; a live run's locks are kept. :func:`_hold_run_lock`
is the entry point of earlier versions (the checkout-wide part only).

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

Run and analysis identities
---------------------------
Every artifact of a run carries the run's identity, :func:`run_id`: a short
digest of the inputs that made it, the selection (the frozen config's hash and
the items' hash that ``items_meta.json`` records). The select stage writes it
into ``items_meta.json``, the depth stage into ``depth/current.json``, each
read-out store, the cube, the numbers file, the executed notebooks and the
figures' file metadata carry it, and the paper prints it. What the analyse
stage produced has its own identity, :func:`analysis_id` (the run identity, the
models and item counts it was given and the content of the stores it read): the
numbers file and the executed analyse notebook both record it, so that
``python -m murk.report.paper`` (``make paper``) refuses a numbers file and a notebook
of two different analyse runs. :func:`refuse_other_run` is the stage-side check:
a stage refuses an input store of another run identity, naming both.

This module imports nothing heavy (the Snakefile imports it on every run).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from murk.core import IDENTITY_MIME, IDENTITY_VERSION, store_attrs, unfinished_images
from murk.pipeline import _locks as runlock
from murk.pipeline._locks import RootInUse, hold_root_lock, snakefile_run_lock

__all__ = ["IGNORED_SUFFIXES", "SELECTION_KEYS", "store_digest", "write_marker", "read_marker", "stale_reason",
           "refuse_unfinished",
           "store_of", "rerun_reason", "rerun_words", "force_rerun", "checkpoint_identity", "file_states", "restore_times", "metadata_records", "restore_metadata", "foreign_stores", "refuse_foreign_stores", "running_notebooks_dir",
           "hold_root_lock", "snakefile_run_lock", "RootInUse",
           "run_id", "run_id_of", "analysis_id", "refuse_other_run", "refuse_other_depth", "identity_bundle"]

#: files inside a store that are not its content: zarr's half-written chunk files of a
#: killed write (``<chunk>.<uuid>.partial``; :func:`murk.results.open_readout_store` removes them)
IGNORED_SUFFIXES = (".partial",)

#: 2: the marker records each file's digest too (``files``); 1: the whole store's only (still read)
MARKER_VERSION = 2

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
    return _digests(store)[0]


def _digests(store: str | os.PathLike) -> tuple[str, dict[str, str]]:
    """:func:`store_digest` and each file's SHA-256 (relative POSIX path -> hex), in one pass over the files."""
    store = Path(store)
    if not store.exists():
        return "absent", {}
    h = hashlib.sha256()
    per_file = {}
    files = sorted(p for p in store.rglob("*") if p.is_file() and not p.name.endswith(IGNORED_SUFFIXES))
    for p in files:
        rel = p.relative_to(store).as_posix()
        h.update(len(rel.encode("utf-8")).to_bytes(4, "little") + rel.encode("utf-8"))
        data = p.read_bytes()
        h.update(len(data).to_bytes(8, "little") + data)
        per_file[rel] = hashlib.sha256(data).hexdigest()
    return "sha256:" + h.hexdigest(), per_file


def write_marker(marker: str | os.PathLike, store: str | os.PathLike | None = None) -> Path:
    """Write the marker of a finished stage: the store's name, content digest and each file's digest (JSON, atomic).

    Parameters
    ----------
    marker : path
        ``….done``.
    store : path, optional
        Default :func:`store_of` the marker. A store that does not exist (a shard
        beyond the last item) is recorded as ``"absent"``.

    Notes
    -----
    ``files`` (relative path -> SHA-256 hex of each file, as :func:`store_digest` reads them) tells which
    files changed after the marker was written (:func:`murk.pipeline.changed_files`), so that exactly the images
    they hold are read again (:func:`murk.pipeline.forget_changed`). A marker of an earlier murk
    (``marker_version`` 1) has none.
    """
    marker = Path(marker)
    store = Path(store) if store is not None else store_of(marker)
    digest, files = _digests(store)
    rec = {"marker_version": MARKER_VERSION, "store": store.name, "digest": digest, "files": files}
    marker.parent.mkdir(parents=True, exist_ok=True)
    tmp = marker.with_name(marker.name + ".tmp")
    from murk import core

    with core.guard(marker, "the store is complete and kept; only its marker is not written, so the next run "
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


def refuse_unfinished(store: str | os.PathLike) -> None:
    """Refuse to vouch for a read-out store that still has damaged, missing or not-done images.

    The Snakefile's ``mark`` step (``python -m murk.pipeline.markers mark``) calls it before
    :func:`write_marker`: a store is vouched for only when every image is done and every
    chunk decodes and is stored (:func:`murk.core.unfinished_images`: zarr only, no xarray),
    so a read-out that left damage behind is never approved.

    Raises
    ------
    ValueError
        Naming the store, the images (positions) and why, and the fix (run the same command again: its read-out
        re-reads them). No marker is written.
    """
    store = Path(store)
    if not store.is_dir():
        return
    bad = unfinished_images(store)
    if bad:
        listing = "; ".join(f"position {i}: {why}" for i, why in list(bad.items())[:5])
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        raise ValueError(f"no marker written for read-out store {store}: {len(bad)} image(s) are damaged, missing or "
                         f"not done ({listing}{more}); run the same command again (make demo): its read-out re-reads "
                         f"them")


def rerun_reason(marker: str | os.PathLike, downstream: list[str | os.PathLike] = (),
                 store: str | os.PathLike | None = None) -> str | None:
    """Why a stage whose output is ``marker`` must run again although Snakemake would skip it.

    Snakemake does not re-make a missing or outdated intermediate file when the files
    after it (the cube, the numbers file, the paper) are present and newer: a store
    deleted or damaged after its marker was written, or docs/recovery.md's repair step
    (``rm -r`` the store and its marker), would otherwise be announced and then
    ignored by the default target. The Snakefile forces the read-out of every marker
    this function names (:func:`force_rerun`), so the store is re-read (only the
    damaged or missing images, where the store allows: see
    :func:`murk.results.open_readout_store`) and everything downstream runs again.

    Parameters
    ----------
    marker : path
        A stage's marker (``<root>/readout/<slug>.done``, a shard's, the monitor's).
    downstream : list of path
        Files or folders made from the store (e.g. ``<root>/cube.zarr``,
        ``<root>/paper_numbers.json``). A missing marker is a reason only when one
        of them exists (otherwise Snakemake runs the stage anyway, and saying so
        on every fresh run would be noise).
    store : path, optional
        Default :func:`store_of` the marker.

    Returns
    -------
    str or None
        :func:`stale_reason` for a marker that exists and no longer vouches for
        its store; for a missing marker with something downstream, e.g. ``"the
        marker … is missing (its store … is missing too)"``; None otherwise.
    """
    marker = Path(marker)
    store = Path(store) if store is not None else store_of(marker)
    if marker.exists():
        return stale_reason(marker, store)
    if any(Path(d).exists() for d in downstream):
        state = "is kept: it resumes" if store.exists() else "is missing too"
        return f"the marker {marker} is missing (its store {store} {state})"
    return None


def rerun_words(marker: str | os.PathLike, dry_run: bool = False, store: str | os.PathLike | None = None) -> str:
    """What the Snakefile announces for a read-out that :func:`rerun_reason` forces.

    Parameters
    ----------
    marker : path
        The read-out's marker.
    dry_run : bool
        A dry run (``make plan``): "would run" instead of "runs".
    store : path, optional
        Default :func:`store_of` the marker.

    Returns
    -------
    str
        "its read-out runs again, and the cube and paper after it" when the store
        exists (it resumes) or its marker does (the store was read out before);
        "its read-out runs (no store of it in this output root: ...), ..." when
        neither exists (a model added to a finished run, which never ran; or the
        repair step of docs/recovery.md, which removed both).
    """
    marker = Path(marker)
    store = Path(store) if store is not None else store_of(marker)
    verb = "would run" if dry_run else "runs"
    ran = store.exists() or marker.exists()
    what = f"{verb} again" if ran else f"{verb} (no store of it in this output root: it reads out from the start)"
    return f"its read-out {what}, and the cube and paper after it"


def force_rerun(workflow: Any, marker: str) -> bool:
    """Make Snakemake run the job whose output is ``marker`` and every job after it.

    Called from an input function of the marker's rule (input functions run while
    Snakemake builds its job graph, after the DAG object exists and before it decides
    what needs to run): the marker joins the DAG's forced files, as ``snakemake
    --forcerun <marker>`` would, so the job runs with the reason "Forced execution"
    and the jobs downstream with "Input files updated by another job". A dry run
    (``snakemake -n``, ``make plan``) lists them and changes nothing on disk.

    Parameters
    ----------
    workflow : snakemake.workflow.Workflow
        The Snakefile's ``workflow`` object.
    marker : str
        The marker, spelled exactly as the rule's output names it.

    Returns
    -------
    bool
        True when forced; False when this Snakemake has no DAG with ``forcefiles``
        (the Snakefile then refuses, giving the ``--forcerun`` command that does the
        same). ``tests/test_workflow.py`` pins the behaviour of the Snakemake version
        murk installs.
    """
    dag = getattr(workflow, "dag", None)
    forced = getattr(dag, "forcefiles", None)
    if not isinstance(forced, set):
        return False
    forced.add(marker)
    return True


def _hub_cache_commit(model: str) -> str:
    """The commit of a hub id's ``main`` in the Hugging Face cache (``refs/main``), or ""."""
    import re

    from huggingface_hub import constants  # a light import (huggingface_hub loads its modules lazily)

    ref = Path(constants.HF_HUB_CACHE) / ("models--" + model.replace("/", "--")) / "refs" / "main"
    try:
        commit = ref.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return ""
    return commit if re.fullmatch(r"[0-9a-f]{40}", commit) else ""


def checkpoint_identity(model: str, root: str | os.PathLike, *, offline: bool = False,
                        update_cache: bool = True) -> str:
    """What a read-out's weights are, as known before it runs: a parameter of the Snakefile's read-out rules.

    Snakemake runs a job again when one of its ``params`` changed (its ``params`` rerun
    trigger, on by default): a local checkpoint re-saved with other weights re-runs its
    read-out, and the cube and paper after it (the read-out then starts a fresh store:
    :func:`murk.results.set_aside_superseded`). That trigger reads this checkout's ``.snakemake/``; what the
    store records decides too (:func:`murk.pipeline.weights_changed`), in a copied root or from a second checkout.

    Parameters
    ----------
    model : str
        A model entry's id: a local folder, a hub id, or an id murk builds offline
        (:data:`murk.offline.OFFLINE_MODELS`, built into ``<root>/checkpoints/<slug>``).
    root : path
        The output root.
    offline : bool
        ``MURK_OFFLINE``: a hub id is then what the Hugging Face cache holds.
    update_cache : bool
        Save the digest cache (:mod:`murk.core`); False in a dry run.

    Returns
    -------
    str
        A local folder: ``"sha256:<16 hex>"`` (:func:`murk.core.checkpoint_revision`).
        A checkpoint murk built: ``""`` while it is as built (the digest its marker,
        :data:`murk.core.BUILT_MARKER`, records) and before it is built, so building it
        re-runs nothing; its ``"sha256:…"`` once its files were changed. A hub id offline:
        the cached snapshot's commit; otherwise ``""`` (the read-out records the commit it
        loads in its store). ``"unreadable"`` for a folder that cannot be read (the
        read-out then names the problem).
    """
    from murk import core

    try:
        folder = Path(model).expanduser()
        if folder.is_dir():
            return core.checkpoint_revision(folder, update_cache=update_cache)
        built = core.checkpoints_dir(root) / core.model_slug(model)
        try:
            recorded = json.loads((built / core.BUILT_MARKER).read_text(encoding="utf-8")).get("digest")
        except (OSError, ValueError, AttributeError):
            recorded = None  # not built by murk, not yet, or (without its marker) to be built again
        if recorded is not None:
            now = core.checkpoint_digest(built, update_cache=update_cache)
            return "" if now == recorded else "sha256:" + now[:16]
    except OSError:
        return "unreadable"
    return _hub_cache_commit(model) if offline else ""


#: attributes of a store that say which selection and configuration it belongs to
SELECTION_KEYS = ("config_hash", "items_hash")


def foreign_stores(root: str | os.PathLike, config_hash: str, items_hash: str) -> list[tuple[Path, str]]:
    """The stores under an output root that belong to another selection or configuration.

    Reads only each store's attributes (:func:`store_attrs`): every read-out store under
    ``<root>/readout/`` (shard and monitor stores included) and ``<root>/cube.zarr``.

    Parameters
    ----------
    root : path
        The output root.
    config_hash, items_hash : str
        The selection about to be written (:func:`murk.core.config_hash`,
        :func:`murk.protocol.items_hash`).

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
            attrs = store_attrs(store)
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




def _short_digest(prefix: str, payload: Any) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return f"{prefix}-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def run_id(config_hash: str, items_hash: str) -> str:
    """The identity of a run: a short digest of the selection that made it.

    Parameters
    ----------
    config_hash : str
        :func:`murk.core.config_hash` of the frozen configuration (64 hex digits).
    items_hash : str
        :func:`murk.protocol.items_hash` of the selected items (64 hex digits).

    Returns
    -------
    str
        ``"r-"`` and 12 hex digits (48 bits of SHA-256 over both hashes and
        :data:`IDENTITY_VERSION`), e.g. ``"r-3f0c9a1b2d4e"``. Equal for equal
        hashes on every machine; any change of the config or of the items changes it.

    Raises
    ------
    ValueError
        If a hash is empty or not a str (an ``items_meta.json`` or a store written
        without them): the message names the missing hash.

    Examples
    --------
    >>> run_id("c" * 64, "i" * 64) == run_id("c" * 64, "i" * 64) != run_id("c" * 64, "j" * 64)
    True
    """
    for name, h in (("config_hash", config_hash), ("items_hash", items_hash)):
        if not isinstance(h, str) or not h:
            raise ValueError(f"a run identity needs the {name} of the selection, got {h!r}: run the select stage "
                             f"(make demo, or notebooks/01_select.py) to write items_meta.json with both hashes")
    return _short_digest("r", {"v": IDENTITY_VERSION, "config_hash": config_hash, "items_hash": items_hash})


def run_id_of(attrs: Any) -> str | None:
    """The run identity of a record that holds the selection's hashes (:data:`SELECTION_KEYS`).

    Parameters
    ----------
    attrs : mapping
        ``items_meta.json``, a store's or the cube's attributes, ``depth/current.json``.

    Returns
    -------
    str or None
        :func:`run_id` of its ``config_hash`` and ``items_hash`` (computed, not the
        recorded ``run_id``, so a store written before run identities existed has
        one too); None when either hash is absent.
    """
    if not hasattr(attrs, "get"):
        return None
    ch, ih = attrs.get("config_hash"), attrs.get("items_hash")
    if not (isinstance(ch, str) and ch and isinstance(ih, str) and ih):
        return None
    return run_id(ch, ih)


def analysis_id(run: str, models: Any, digests: Any, settings: Any = None) -> str:
    """The identity of what one analyse run produced (its numbers file, figures, tables, executed notebook).

    Parameters
    ----------
    run : str
        :func:`run_id` of the selection analysed.
    models : sequence of (str, int)
        The models the analyse notebook was given and the number of items of each
        (:class:`ModelEntry`), in the given order (the order of tables and legends).
    digests : mapping of str to str
        The content of every input it read: a name (a store's folder name, a file's
        name) -> its digest (:func:`store_digest` for a store, ``"sha256:<hex>"`` of a
        file's bytes, ``"absent"``).
    settings : mapping, optional
        Other parameters that change the outputs (e.g. ``shard_size``,
        ``monitor_sensitivity_items``, the code's ``git_commit``); JSON-serialisable.

    Returns
    -------
    str
        ``"a-"`` and 12 hex digits (SHA-256 of all of the above), e.g.
        ``"a-5b1e07c2d9f4"``: equal for two analyses of the same inputs with the same
        settings, different when the models, their item counts, a store's content or a
        setting differ.
    """
    payload = {"v": IDENTITY_VERSION, "run_id": str(run),
               "models": [[str(m), None if n is None else int(n)] for m, n in models],
               "inputs": {str(k): str(v) for k, v in dict(digests).items()},
               "settings": {str(k): v for k, v in dict(settings or {}).items()}}
    return _short_digest("a", payload)


def identity_bundle(**ids: Any) -> dict[str, Any]:
    """The output that records a stage's identities in its executed notebook.

    Display it raw in the notebook cell labelled :data:`IDENTITY_LABEL`
    (``IPython.display.display(workflow.identity_bundle(run_id=...), raw=True)``):
    the notebook file then holds the identities as JSON under :data:`IDENTITY_MIME`
    (read back by :func:`murk.report.notebook_identity`) and as one line of text.

    Parameters
    ----------
    **ids : str
        E.g. ``run_id="r-…"``, ``analysis_id="a-…"``, ``models=[...]``.

    Returns
    -------
    dict
        A mime bundle: ``{IDENTITY_MIME: ids, "text/plain": "murk identity: run_id r-…, …"}``.
    """
    text = "murk identity: " + ", ".join(f"{k} {v}" for k, v in ids.items() if isinstance(v, str))
    return {IDENTITY_MIME: dict(ids), "text/plain": text}


def refuse_other_run(stores: Any, run: str, stage: str, source: str | os.PathLike = "items.json") -> None:
    """Refuse, before a stage reads them, input stores of another run identity than this run's.

    Parameters
    ----------
    stores : iterable of path
        The stores the stage is about to read (read-out, shard and monitor stores).
        Only their attributes (:func:`store_attrs`) are read; a store without them is left
        to the stage's own checks.
    run : str
        This run's :func:`run_id` (from ``items_meta.json``, beside ``source``).
    stage : str
        The stage that refuses (named in the message).
    source : path
        Where this run's identity comes from (named in the message).

    Raises
    ------
    ValueError
        If a store's identity (:func:`run_id_of` its attributes) differs, or it
        records a ``run_id`` that is not the one of its hashes. The message names
        each store with both identities and the fixes: re-run the read-out of
        that store for this selection (delete it, then ``make demo``), or analyse
        it in the output root of its own run. Nothing was written.
    """
    bad = []
    for store in stores:
        store = Path(store)
        try:
            attrs = store_attrs(store)
        except FileNotFoundError:
            continue
        except (OSError, ValueError):
            bad.append((store, "attributes unreadable"))
            continue
        have = run_id_of(attrs)
        recorded = attrs.get("run_id")
        if have is None:
            bad.append((store, "no run identity (its attributes lack config_hash or items_hash)"))
        elif have != run or (recorded is not None and recorded != have):
            bad.append((store, f"run identity {recorded if recorded not in (None, have) else have}"))
    if not bad:
        return
    listed = "\n".join(f"  {p}: {d}" for p, d in bad)
    rm = " ".join(str(p) for p, _ in bad)
    raise ValueError(
        f"the {stage} stage refuses {len(bad)} store(s) of another run: this run's identity is {run} ({source}), "
        f"and\n{listed}\nA result is never made of two runs; nothing was written. Fix, one of: (1) read these "
        f"stores out again for this run: rm -r {rm}, then make demo (or the read-out by hand, as docs/stages.md shows); "
        f"(2) analyse them in the output root of their own run (-p output_dir DIR, or --config output_dir=DIR).")


def refuse_other_depth(current: Any, run: str, stage: str, pointer: str | os.PathLike = "depth/current.json") -> None:
    """Refuse a depth cache written for another run (``depth/current.json`` records its ``run_id``).

    Parameters
    ----------
    current : mapping
        :func:`murk.scene.current_depth`; one written before run identities existed
        (no ``run_id``) is accepted.
    run : str
        This run's :func:`run_id` (``items_meta.json``).
    stage : str
        The stage that refuses.
    pointer : path
        The file named in the message.

    Raises
    ------
    ValueError
        Naming the file, both identities and the fix (run the depth stage for this
        selection first: ``make demo`` runs it, by hand ``notebooks/02_depth.py``).
    """
    have = current.get("run_id") if hasattr(current, "get") else None
    if have is None or have == run:
        return
    raise ValueError(
        f"the {stage} stage refuses the depth cache {pointer}: it was written for the run {have}, this run (items.json) "
        f"is {run}. Nothing was written. Fix: run the depth stage for this selection first (make demo does; by hand, "
        f"notebooks/02_depth.py with the same output_dir), then this stage again.")


def file_states(files: list[str | os.PathLike]) -> dict[str, tuple[str, int]]:
    """SHA-256 and modification time (ns) of each existing file: what a failed job's restore must give back.

    Snakemake restores an ``update()`` output of a failed job (a refused select or
    depth, a refused paper) by copying its backup over it, which gives the file a new
    modification time: the next run would then redo every job after it although
    nothing changed. The Snakefile records these states when it is parsed and, on
    error, :func:`restore_times` puts the old times back on files whose content is
    the one recorded.

    Parameters
    ----------
    files : list of path
        The ``update()`` outputs of the workflow.

    Returns
    -------
    dict
        ``{path: (sha256 hex, st_mtime_ns)}`` for the files that exist.
    """
    out = {}
    for f in files:
        p = Path(f)
        if p.is_file():
            out[str(p)] = (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
    return out


def restore_times(states: dict[str, tuple[str, int]]) -> list[Path]:
    """Put back the recorded modification time of each file whose content is the recorded one.

    Returns
    -------
    list of Path
        The files whose time was put back (their content unchanged, their time had changed).
    """
    fixed = []
    for f, (digest, mtime_ns) in states.items():
        p = Path(f)
        try:
            st = p.stat()
            if st.st_mtime_ns != mtime_ns and hashlib.sha256(p.read_bytes()).hexdigest() == digest:
                os.utime(p, ns=(st.st_atime_ns, mtime_ns))
                fixed.append(p)
        except OSError:
            continue
    return fixed


def metadata_records(persistence: Any, files: list[str | os.PathLike]) -> dict[str, Any]:
    """Snakemake's metadata record of each file (what its last job recorded: params, code, input), before jobs run.

    Snakemake 9 records a *failed* job's params for its outputs too (``Job.postprocess(error=True)`` ends with
    ``persistence.finished``), so a refused select, whose ``update()`` outputs are restored unchanged, would
    leave the refused run's params recorded, and the next run with the old settings would run select and
    everything after it again. The Snakefile takes these records when the run starts (``onstart``) and
    :func:`restore_metadata` puts them back on error.

    Parameters
    ----------
    persistence : snakemake.persistence.Persistence
        ``workflow.persistence`` (its ``_read_record``: the key of a local file is its path as the rule gives it).
    files : list of path
        The ``update()`` outputs.

    Returns
    -------
    dict
        ``{path: record or None}``; empty when this Snakemake has no such records.
    """
    read = getattr(persistence, "_read_record", None)
    if read is None:
        return {}
    out = {}
    for f in files:
        try:
            out[str(f)] = read(str(f))
        except Exception:  # noqa: BLE001 - a record Snakemake cannot read is left to Snakemake
            continue
    return out


def restore_metadata(persistence: Any, records: dict[str, Any], states: dict[str, tuple[str, int]]) -> list[str]:
    """Put back the metadata record of each file whose content is the one recorded before the run.

    Parameters
    ----------
    persistence : snakemake.persistence.Persistence
        ``workflow.persistence``.
    records : dict
        :func:`metadata_records` at the run's start.
    states : dict
        :func:`file_states` at the run's start: a file whose content differs now was written by a job that
        succeeded, and keeps its new record.

    Returns
    -------
    list of str
        The files whose record was put back (or removed, where they had none).
    """
    write, delete = getattr(persistence, "_write_record", None), getattr(persistence, "_delete_record", None)
    if write is None or delete is None or not hasattr(persistence, "_read_record"):
        return []
    clear = getattr(persistence, "_clear_cache", lambda: None)
    fixed = []
    for f, old in records.items():
        p = Path(f)
        try:
            if f in states and (not p.is_file() or hashlib.sha256(p.read_bytes()).hexdigest() != states[f][0]):
                continue
            clear()
            if persistence._read_record(f) == old:
                continue
            if old is None:
                delete(f)
            else:
                write(f, old)
            clear()
            fixed.append(f)
        except Exception:  # noqa: BLE001 - never turn the run's error into another one
            continue
    return fixed


def running_notebooks_dir(output_dir: str | os.PathLike, snakemake_dir: str | os.PathLike = ".snakemake") -> Path:
    """Where the Snakefile's rules execute their notebooks (their logs) for one output root.

    ``<snakemake_dir>/murk-notebooks/<output root's absolute path as a slug>-<digest>``: the slug keeps the
    path's ASCII letters, digits and ``._-``, and the first 12 hex digits of the SHA-256 of the whole path
    make the name differ for every root (``outputs-ü`` and ``outputs-ä`` share a slug, not a folder); a
    notebook moves from there to ``<output_dir>/notebooks/`` only when it ran to
    its end, so a stage that fails or refuses leaves the output root as it was.
    """
    import hashlib
    import re

    full = os.path.abspath(output_dir)
    readable = re.sub(r"[^A-Za-z0-9._-]+", "--", full).strip("-")
    # the readable part drops what is not ASCII (outputs-ü and outputs-ä give the same one): a digest of the
    # whole path keeps two roots apart
    digest = hashlib.sha256(full.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return Path(snakemake_dir) / "murk-notebooks" / f"{readable}-{digest}"


def _hold_run_lock(snakemake_dir: str | os.PathLike = ".snakemake", output_dir: str | os.PathLike | None = None, *,
                  dry_run: bool = False) -> list[Path]:
    """Hold this process's run lock (and the output root's); remove the stale Snakemake locks of dead runs.

    A compatible wrapper of :func:`murk.pipeline.hold_root_lock` (the Snakefile calls
    :func:`murk.pipeline.snakefile_run_lock`).

    Parameters
    ----------
    snakemake_dir : path
        Snakemake's folder in the working directory.
    output_dir : path, optional
        The run's output root: its lock is taken too (a live run on it raises
        :class:`murk.pipeline.RootInUse`). None: the checkout-wide lock only; then a
        Snakemake lock file that names no recorded root is removed only when no other
        run of the checkout is alive.
    dry_run : bool
        Take no lock and remove nothing.

    Returns
    -------
    list of Path
        The stale lock files removed.

    Raises
    ------
    murk.pipeline.RootInUse
        If a live run holds the output root's lock.
    """
    return runlock.hold_root_lock(output_dir, snakemake_dir, dry_run=dry_run).removed


def main(argv: list[str] | None = None) -> int:
    """``python -m murk.pipeline.markers mark MARKER [STORE]``: write a stage's marker (used by the Snakefile)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m murk.pipeline.markers", description=main.__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("mark", help="write MARKER with the content digest of STORE (default: MARKER as .zarr)")
    m.add_argument("marker")
    m.add_argument("store", nargs="?")
    args = ap.parse_args(argv)
    if args.cmd == "mark":
        try:
            refuse_unfinished(args.store if args.store is not None else store_of(args.marker))
        except ValueError as e:  # one line, no traceback; nothing written
            print(f"murk: {e}", file=sys.stderr)
            return 1
        write_marker(args.marker, args.store)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
