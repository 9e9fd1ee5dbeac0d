"""Locks per output root: one live run per output root, a killed run's stale locks removed.

Several output roots per checkout are a documented use (``snakemake --config
output_dir=outputs-NEW``), and their runs share one Snakemake working directory
(``.snakemake/``). Snakemake locks it with lock files (``.snakemake/locks/<n>.input.lock``
and ``<n>.output.lock``, one path a line: the input files of every job of the run's DAG
and the output files of every job it will run; ``snakemake/persistence/file.py``,
``_write_locks``). A run killed with SIGKILL (a power loss, the out-of-memory killer, a
pre-empted job) leaves its lock files behind; Snakemake then refuses every run whose
files they name and suggests ``snakemake --unlock``, which removes *every* lock file,
those of live runs too.

murk keeps its own lock per output root, an OS file lock (``flock``) that the kernel
releases when the process ends, however it ends. It lives in the root itself
(``<root>/.murk/writer.flock``, its record and the runs' tokens: :mod:`murk.core`'s root writer lock), so a
run of another checkout (a second git clone, a ``git worktree``), a stage or ``python -m murk.report.paper``
by hand sees it; every writer below takes it besides the checkout's own records, which the clean-up of
Snakemake's lock files reads (they are per checkout, as ``.snakemake/locks/`` is):

- ``.snakemake/murk-roots/<root>.flock``, held exclusively by the Snakemake main
  process of the one run on that root for its lifetime, and ``<root>.json`` beside it,
  the record of that run (the root's real path, the pid, the start time, the command).
  ``<root>`` is the root's real path as a slug plus a hash of it (distinct roots never
  share a lock).
- ``.snakemake/murk-run.flock``, held shared by every run of the checkout: when a run
  can take it exclusively, no other run of the checkout is alive.

At start (:func:`hold_root_lock`, called when the Snakefile is parsed, before Snakemake
reads its locks):

1. A second run on a root whose lock is held is refused (:class:`RootInUse`), naming the
   root and the live run; nothing is changed.
2. Each of Snakemake's lock files is assigned to the output roots its paths lie under
   (the roots of every murk run recorded in ``murk-roots/``). A lock file whose roots are
   all free (no live run holds their lock) belongs to dead runs and is removed, whatever
   other runs of the checkout are alive; a lock file of a root that is held belongs to the
   live run and is kept. A lock file that names no recorded root (only the notebooks and
   the configuration, which no run writes, so it blocks no run) is removed only when no
   run of the checkout is alive.
3. A dry run (``snakemake -n``, ``make plan``) and the inspecting modes (``--summary``,
   ``--dag``, ...) take no lock and remove nothing: they run alongside a live run, and
   report what they see (:func:`snakefile_run_lock`). ``snakemake --unlock`` is refused
   while any run of the checkout is alive (it would remove that run's locks).

A stage run outside Snakemake writes into a root too: papermill or ``python -m murk.pipeline.execute``
as docs/stages.md prints them, ``tests/stages.py``, a JupyterLab kernel running a stage notebook.
Each stage notebook's first code cell after its parameters calls :func:`hold_for_stage`, which

a. returns at once in a job of the run that holds the root: that run exported
   ``MURK_RUN_LOCK=<root>::<token>`` (:data:`RUN_ENV`) and listed the token in the root's
   ``<root>.tokens``; local jobs inherit it, SLURM jobs too (the executor submits with
   ``sbatch --export=ALL``), and so do the kernels they start;
b. else takes the root's lock without waiting and keeps it for the life of the process (the
   kernel: a JupyterLab kernel keeps it until it is shut down), writing its record (``kind``
   ``jupyterlab``, ``papermill``, ``murk.pipeline.execute`` or ``kernel``), so that a Snakemake run
   started meanwhile is refused naming it;
c. else refuses (:class:`RootInUse`), naming the live holder and what to do, in the words of
   the command that ran the stage, before the stage writes anything.

``python -m murk.pipeline.execute`` does the same before papermill writes anything (its executed
notebook, the converted ``.input.ipynb``): it holds the root named by ``-p output_dir`` for
its kernel and refuses an executed notebook placed inside a root another run holds. Plain
papermill writes its output notebook before the first cell runs: point it outside the roots
that a live run may hold (docs/stages.md's by-hand commands use ``murk.pipeline.execute``). Reading a
root needs no lock.

The steps that read and remove lock files run one process at a time (``murk-locks.flock``),
after the run took its root lock and before Snakemake writes its own lock files, so a
lock file that a live run writes is never taken for a dead run's.

Notes
-----
``flock`` is local to one machine on most network file systems: the locks protect the
runs whose Snakemake main process runs on this machine (the jobs that the SLURM executor
starts do not parse the Snakefile as a main process and take no lock). Snakemake itself
removes the whole ``.snakemake/locks/`` folder when any run ends, so the Snakemake lock
files of another live run may vanish then; its murk root lock stays held, and still
refuses a second run on its root.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import NamedTuple, Sequence

from murk import core

__all__ = ["RootInUse", "StoreInUse", "RunLock", "store_lock_files", "hold_store_lock", "ROOTS_DIR", "RUN_FLOCK", "INSPECT_FLAGS", "root_key", "root_lock_files",
           "root_holder", "live_runs", "lock_file_roots", "stale_snakemake_locks", "hold_root_lock",
           "refuse_unlock", "snakefile_run_lock", "RUN_ENV", "StageLock", "hold_for_stage",
           "refuse_writes"]

#: folder (in Snakemake's ``.snakemake/``) of the root locks and their records
ROOTS_DIR = "murk-roots"
#: the checkout-wide lock every run holds shared (name kept from murk's first run lock)
RUN_FLOCK = "murk-run.flock"
#: serialises reading and removing Snakemake's lock files
CLEANUP_FLOCK = "murk-locks.flock"
#: seconds a run retries a root lock held by another process before it refuses (another
#: process's check of the lock holds it for microseconds; a live run holds it for its lifetime)
ACQUIRE_WAIT_S = 1.0
#: Snakemake's command-line flags that only inspect the workflow: treated like a dry run
INSPECT_FLAGS = ("--summary", "-S", "--detailed-summary", "-D", "--dag", "--rulegraph", "--filegraph", "--d3dag",
                 "--list-rules", "-l", "--list-target-rules", "--lt", "--lint", "--list-changes", "--lc",
                 "--list-input-changes", "--li", "--list-params-changes", "--lp", "--list-untracked", "--lu",
                 "--print-compilation")

#: environment variable naming the root a run holds and its token (``<root>::<token>``), exported to its jobs
#: (its home: :data:`murk.core.RUN_ENV`, which the report modules read too)
RUN_ENV = core.RUN_ENV
#: the kinds of holder that write outside a Snakemake run (:func:`hold_for_stage`, the report modules by hand); a
#: Snakemake run records ``snakemake``
STAGE_KINDS = core.BY_HAND_KINDS

#: fds of the locks this process holds (kept open for its lifetime; the kernel releases them at exit)
_HELD: dict[str, int] = {}
#: the roots this process holds, per Snakemake folder
_HELD_ROOTS: dict[str, set] = {}


class RootInUse(RuntimeError):
    """A run was refused: its output root is in use by a live run (or ``--unlock`` while runs are alive).

    Attributes
    ----------
    root : Path or None
        The output root (real path); None for a refused ``--unlock``.
    holders : list of dict
        The records of the live runs (keys ``root``, ``pid``, ``started``, ``command``).
    """

    def __init__(self, message: str, root: Path | None, holders: list[dict]):
        super().__init__(message)
        self.root = root
        self.holders = holders


class RunLock(NamedTuple):
    """What :func:`hold_root_lock` did and found.

    Attributes
    ----------
    root : Path or None
        The output root (real path), None for the checkout-wide lock only.
    removed : list of Path
        Snakemake lock files of dead runs that were removed.
    stale : list of Path
        Snakemake lock files of dead runs found but kept (a dry run removes nothing).
    live : dict or None
        In a dry run, the record of the live run on this root, if one is alive.
    held : bool
        Whether this process now holds the root's lock (False in a dry run).
    """

    root: Path | None
    removed: list
    stale: list
    live: dict | None
    held: bool


def root_key(output_dir: str | os.PathLike) -> Path:
    """The identity of an output root: its real path (symbolic links resolved, relative to the working directory)."""
    return Path(os.path.realpath(os.fspath(output_dir)))


def _slug(root: Path) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "--", str(root)).strip("-")[-120:]
    return f"{name}-{hashlib.sha256(str(root).encode('utf-8')).hexdigest()[:12]}"


def root_lock_files(output_dir: str | os.PathLike, snakemake_dir: str | os.PathLike = ".snakemake") -> tuple[Path, Path]:
    """The lock file and the record of an output root: ``<snakemake_dir>/murk-roots/<slug>.flock`` and ``.json``."""
    base = Path(snakemake_dir) / ROOTS_DIR / _slug(root_key(output_dir))
    return base.with_name(base.name + ".flock"), base.with_name(base.name + ".json")


def _tokens_file(record: Path) -> Path:
    """The tokens of the runs that held a root (one a line), beside its record: ``<slug>.tokens``."""
    return record.with_name(record.name[:-len(".json")] + ".tokens")


def _write_record(record: Path, rec: dict) -> None:
    """Write a root's record atomically and list its token among the root's tokens."""
    tmp = record.with_name(record.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, record)
    with open(_tokens_file(record), "a", encoding="utf-8") as f:
        f.write(rec["token"] + "\n")
    os.environ[RUN_ENV] = f"{rec['root']}::{rec['token']}"   # inherited by this run's jobs and kernels


def _read_json(path: Path) -> dict | None:
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def _blocked(flock_path: Path, probe: int) -> bool:
    """Whether taking ``flock_path`` with ``probe`` (``LOCK_SH`` or ``LOCK_EX``) would block (a missing file: no)."""
    try:
        fd = os.open(flock_path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, probe | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases the probe's lock
    return False


def _is_held(flock_path: Path) -> bool:
    """Whether another process holds ``flock_path`` exclusively (a missing file: no)."""
    return _blocked(flock_path, fcntl.LOCK_SH)


def _checkout_holder(output_dir: str | os.PathLike, snakemake_dir: str | os.PathLike) -> dict | None:
    """The record of the live process of this checkout that holds an output root (its ``murk-roots/`` lock)."""
    flock, record = root_lock_files(output_dir, snakemake_dir)
    root = root_key(output_dir)
    if str(root) in _HELD_ROOTS.get(str(Path(snakemake_dir).resolve()), set()) or _is_held(flock):
        return _read_json(record) or {"root": str(root)}
    return None


def root_holder(output_dir: str | os.PathLike, snakemake_dir: str | os.PathLike = ".snakemake") -> dict | None:
    """The record of the live run that holds an output root's lock, or None when no run holds it.

    The root's own lock (:func:`murk.core.root_writer`: any checkout, any writer) and the checkout's
    (``<snakemake_dir>/murk-roots/``, which earlier murk kept alone) are both read.

    Returns
    -------
    dict or None
        Keys ``root`` (str, real path), ``pid`` (int), ``started`` (str, UTC), ``command``
        (str), and in the root's record ``kind``, ``host``, ``checkout``; ``{"root": …}`` only when the record is
        unreadable. This process's own root lock counts as held.
    """
    return _checkout_holder(output_dir, snakemake_dir) or core.root_writer(root_key(output_dir))



def _records(snakemake_dir: Path) -> list[dict]:
    folder = snakemake_dir / ROOTS_DIR
    if not folder.is_dir():
        return []
    return [r for r in (_read_json(p) for p in sorted(folder.glob("*.json"))) if r and isinstance(r.get("root"), str)]


def live_runs(snakemake_dir: str | os.PathLike = ".snakemake") -> list[dict]:
    """The records of the runs alive now, one per held output root (see :func:`root_holder`)."""
    d = Path(snakemake_dir)
    out = []
    for rec in _records(d):
        held = _checkout_holder(rec["root"], d)
        if held is not None:
            out.append(held)
    return out


def lock_file_roots(lock_file: str | os.PathLike, roots: Sequence[str | os.PathLike],
                    workdir: str | os.PathLike) -> set[Path]:
    """The output roots that the paths of one Snakemake lock file lie under.

    Parameters
    ----------
    lock_file : path
        ``.snakemake/locks/<n>.input.lock`` or ``<n>.output.lock``: one path a line, as
        the Snakefile names it (relative to Snakemake's working directory, or absolute).
    roots : sequence of path
        Real paths of the output roots; a path lying under two (nested roots) belongs
        to the deeper one.
    workdir : path
        Snakemake's working directory (the folder holding ``.snakemake/``).

    Returns
    -------
    set of Path
        Empty when no path lies under a root (or the file cannot be read).
    """
    ordered = sorted({Path(r) for r in roots}, key=lambda r: len(str(r)), reverse=True)
    try:
        lines = Path(lock_file).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return set()
    found: set[Path] = set()
    for line in lines:
        p = line.strip()
        if not p:
            continue
        ap = os.path.realpath(os.path.join(os.fspath(workdir), p))
        for r in ordered:
            rs = str(r)
            if ap == rs or ap.startswith(rs.rstrip(os.sep) + os.sep):
                found.add(r)
                break
    return found


def stale_snakemake_locks(snakemake_dir: str | os.PathLike = ".snakemake", own_root: str | os.PathLike | None = None,
                          alone: bool = False) -> list[tuple[Path, str]]:
    """Snakemake's lock files that belong to dead runs, with why.

    Parameters
    ----------
    snakemake_dir : path
        Snakemake's folder (``<workdir>/.snakemake``); its ``locks/`` is read.
    own_root : path, optional
        The root whose lock the caller holds and whose Snakemake lock files it has not
        written yet: its lock files are a dead run's.
    alone : bool
        Whether no other run of the checkout is alive (the caller took ``murk-run.flock``
        exclusively): then lock files that name no recorded root are stale too.

    Returns
    -------
    list of (Path, str)
        The lock files and a reason, e.g. ``"no run is alive on /abs/outputs-a"``.
    """
    d = Path(snakemake_dir).resolve()
    locks = d / "locks"
    if not locks.is_dir():
        return []
    own = root_key(own_root) if own_root is not None else None
    roots = {Path(r["root"]) for r in _records(d)} | ({own} if own is not None else set())
    held: dict[Path, bool] = {}

    def is_free(r: Path) -> bool:
        if r == own:
            return True
        if r not in held:
            held[r] = _checkout_holder(r, d) is not None   # this checkout's Snakemake locks: its own runs
        return not held[r]

    out = []
    for f in sorted(locks.glob("*.lock")):
        if not f.is_file():
            continue
        owners = lock_file_roots(f, sorted(roots), d.parent)
        if owners:
            if all(is_free(r) for r in owners):
                out.append((f, "no run is alive on " + ", ".join(sorted(map(str, owners)))))
        elif alone:
            out.append((f, "no run of this workflow is alive"))
    return out


def _command(argv: Sequence[str] | None) -> str:
    if not argv:
        return ""
    text = " ".join(["snakemake", *map(str, argv[1:])])
    return text if len(text) <= 300 else text[:297] + "..."


def _take_in_root(root: Path, rec: dict) -> bool:
    """Take the root's own writer lock (:func:`murk.core.take_root_writer`) with ``rec``; False when another live
    process holds it. A root whose ``.murk/`` cannot be created (a read-only root, which no one writes) counts as
    taken: the checkout's lock still holds it for this checkout."""
    try:
        return core.take_root_writer(root, rec, wait_s=ACQUIRE_WAIT_S)
    except OSError:
        return True


def _take_root(flock: Path) -> int | None:
    """Take ``flock`` exclusively (retrying for :data:`ACQUIRE_WAIT_S`); its fd, or None when a live run holds it."""
    fd = os.open(flock, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + ACQUIRE_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(0.05)


def _refusal(root: Path, rec: dict) -> RootInUse:
    who, fix = core.root_writer_words(rec)
    return RootInUse(
        f"murk: the output root {root} is in use by {who}. A second run on "
        f"the same output root is refused: the two would write the same files. Nothing was changed. {fix[0].upper()}"
        f"{fix[1:]}, or run into another output root: make demo ARGS='--config output_dir=outputs-NEW' (snakemake "
        f"--config output_dir=outputs-NEW). murk's lock of a run ends with its process, however it ends (a killed "
        f"run's locks are removed by the next run): there is nothing to unlock.", root, [rec])


def hold_root_lock(output_dir: str | os.PathLike | None, snakemake_dir: str | os.PathLike = ".snakemake", *,
                   dry_run: bool = False, argv: Sequence[str] | None = None) -> RunLock:
    """Take an output root's lock for this process's lifetime and remove the stale Snakemake locks of dead runs.

    Called once per Snakemake main process, when the Snakefile is parsed (before
    Snakemake reads its locks); a second call in the same process returns at once.

    Parameters
    ----------
    output_dir : path or None
        The run's output root (``output_dir`` of the run settings), relative to the
        working directory or absolute. None: only the checkout-wide lock is taken.
    snakemake_dir : path
        Snakemake's folder in the working directory (``<checkout>/.snakemake``).
    dry_run : bool
        A dry run (``snakemake -n``) or an inspecting mode: no lock is taken and
        nothing is removed; the result lists the stale lock files and the live run on
        the root, if any.
    argv : sequence of str, optional
        The command line (``sys.argv``), kept in the root's record for messages.

    Returns
    -------
    RunLock
        The root, the lock files removed (or, in a dry run, found stale), the live run. When the root's
        lock was taken, its record holds a fresh token, listed in ``<root>.tokens``, and :data:`RUN_ENV`
        (``<root>::<token>``) is set in this process's environment: the run's jobs inherit it, and their
        stages (:func:`hold_for_stage`) write as part of this run.

    Raises
    ------
    RootInUse
        If another live process holds the root's lock (not in a dry run). Nothing is
        changed then.
    """
    d = Path(snakemake_dir).resolve()
    root = root_key(output_dir) if output_dir is not None else None
    key = f"{d}|{root}"
    if key in _HELD:
        return RunLock(root, [], [], None, True)
    if dry_run:
        live = root_holder(root, d) if root is not None else None
        alone = not _is_held_by_others(d / RUN_FLOCK)
        stale = [p for p, _ in stale_snakemake_locks(d, None, alone)]
        return RunLock(root, [], stale, live, False)

    d.mkdir(parents=True, exist_ok=True)
    fd_root = None
    if root is not None:
        flock, record = root_lock_files(root, d)
        flock.parent.mkdir(parents=True, exist_ok=True)
        fd_root = _take_root(flock)
        if fd_root is None:
            raise _refusal(root, root_holder(root, d) or _read_json(record) or {"root": str(root)})
        rec = core.new_writer_record(root, kind="snakemake", command=_command(argv), checkout=d.parent)
        if not _take_in_root(root, rec):   # a writer of another checkout (or of the root itself) holds it
            os.close(fd_root)
            raise _refusal(root, core.root_writer(root) or {"root": str(root)})
        _write_record(record, rec)   # and MURK_RUN_LOCK, which this run's jobs inherit (hold_for_stage)
        _HELD_ROOTS.setdefault(str(d), set()).add(str(root))
    removed: list[Path] = []
    fd_clean = os.open(d / CLEANUP_FLOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd_clean, fcntl.LOCK_EX)  # one process at a time reads and removes lock files
        fd_run = _HELD.get(f"{d}|run")
        if fd_run is None:
            fd_run = os.open(d / RUN_FLOCK, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd_run, fcntl.LOCK_EX | fcntl.LOCK_NB)
                alone = True
            except BlockingIOError:
                alone = False
        else:
            alone = False
        for p, _why in stale_snakemake_locks(d, root, alone):
            p.unlink(missing_ok=True)
            removed.append(p)
        fcntl.flock(fd_run, fcntl.LOCK_SH)  # held (shared) for this process's lifetime: a run is alive
        _HELD[f"{d}|run"] = fd_run
    finally:
        os.close(fd_clean)  # releases the cleanup lock
    if fd_root is not None:
        _HELD[key] = fd_root
    return RunLock(root, removed, [], None, fd_root is not None)


def _is_held_by_others(flock_path: Path) -> bool:
    """Whether any process holds ``flock_path`` (shared or exclusive); this process's own holds excluded."""
    if f"{flock_path.parent}|run" in _HELD:
        return True  # this process is a run itself
    return _blocked(flock_path, fcntl.LOCK_EX)


def refuse_unlock(snakemake_dir: str | os.PathLike = ".snakemake") -> None:
    """Refuse ``snakemake --unlock`` while any run of the checkout is alive (it would remove that run's locks).

    Raises
    ------
    RootInUse
        Naming each live run (root, pid, start, command) and what to do instead.
    """
    d = Path(snakemake_dir).resolve()
    live = [r for r in live_runs(d) if r.get("kind", "snakemake") not in STAGE_KINDS]   # stages write no Snakemake lock
    if not live and not _is_held_by_others(d / RUN_FLOCK):
        return
    listed = ("\n".join(f"  {r.get('root', '?')}: {core.describe_root_writer(r)}" for r in live)
              or "  (a run of an older murk)")
    raise RootInUse(
        f"murk: snakemake --unlock refused: it would remove the Snakemake locks of the run(s) of this workflow alive "
        f"now:\n{listed}\nNothing was changed. No unlock is needed: the locks of a killed run are removed when the next "
        f"run starts; run the command that was killed again (e.g. make demo), or use another output root "
        f"(--config output_dir=outputs-NEW) while these runs go on.", None, live)


def snakefile_run_lock(output_dir: str | os.PathLike, snakemake_dir: str | os.PathLike, *, dry_run: bool,
                       argv: Sequence[str] = ()) -> list[str]:
    """The Snakefile's lock step: what a Snakemake main process does at parse time, as messages to print.

    Parameters
    ----------
    output_dir : path
        The run's ``output_dir``.
    snakemake_dir : path
        ``<working directory>/.snakemake``.
    dry_run : bool
        Snakemake's ``-n`` / ``--dry-run`` (``workflow.output_settings.dryrun``).
    argv : sequence of str
        ``sys.argv``: ``--unlock`` (refused while a run is alive) and the inspecting
        flags of :data:`INSPECT_FLAGS` (treated like a dry run) are read from it.

    Returns
    -------
    list of str
        One line each (without the ``murk:`` prefix): the stale lock files removed, or
        in a dry run the stale lock files found and the live run on the root.

    Raises
    ------
    RootInUse
        A second run on a root in use, or ``--unlock`` while a run is alive.
    """
    args = list(map(str, argv[1:]))
    if "--unlock" in args:
        refuse_unlock(snakemake_dir)
        return []
    inspect = dry_run or any(a in INSPECT_FLAGS for a in args)
    lock = hold_root_lock(output_dir, snakemake_dir, dry_run=inspect, argv=argv)
    notes = [f"removed the stale Snakemake lock {p} of a killed run (no live run holds its output root)"
             for p in lock.removed]
    what = "this dry run" if dry_run else "this command"
    if lock.live is not None:
        holder = core.root_writer_words(lock.live)[0]
        who = (f"the output root {lock.root} is held by {holder}" if lock.live.get("kind") in STAGE_KINDS
               else f"a run of this workflow is alive on the output root {lock.root} "
                    f"({core.describe_root_writer(lock.live)})")
        notes.append(f"{who}: "
                     f"{what} only shows the files as they are now; a second run on this root is refused until "
                     f"that run ends")
    if lock.stale:
        names = ", ".join(p.name for p in lock.stale)
        notes.append(f"the Snakemake lock file(s) {names} in {Path(snakemake_dir) / 'locks'} belong to killed runs: "
                     f"the next run removes them ({what} removes nothing)")
    return notes


# --- stages run outside Snakemake: papermill, murk.pipeline.execute, JupyterLab ------------------------------------------

class StageLock(NamedTuple):
    """What :func:`hold_for_stage` did.

    Attributes
    ----------
    root : Path
        The output root (real path).
    how : {"run", "held", "taken", "unlocked"}
        ``run``: this process is a job (or the kernel of a job) of the run that holds the root;
        ``held``: this process held the root already; ``taken``: this process took the root's lock now and
        keeps it for its lifetime; ``unlocked``: the checkout's ``.snakemake/`` cannot be written, so no run
        of it can hold the root, and none was found holding it (the root's own lock,
        :func:`murk.core.take_root_writer`, is taken where the root can be written).
    """

    root: Path
    how: str


def _parent_command() -> str:
    """The command line of this process's parent (Linux ``/proc``), or ``""``."""
    try:
        raw = Path(f"/proc/{os.getppid()}/cmdline").read_bytes()
    except OSError:
        return ""
    args = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
    if args and os.path.basename(args[0]).startswith("python"):
        args[0] = "python"
    text = " ".join(args)
    return text if len(text) <= 300 else text[:297] + "..."


def _stage_runner(command: str | None) -> tuple[str, str]:
    """(kind, command) of what runs this stage: murk.pipeline.execute (``command`` given), a JupyterLab kernel
    (``JPY_SESSION_NAME``, set by the Jupyter server), a papermill kernel, or another kernel."""
    if command is not None:
        return "murk.pipeline.execute", command
    if os.environ.get("JPY_SESSION_NAME"):
        return "jupyterlab", ""
    parent = _parent_command()
    if "murk.pipeline.execute" in parent:
        return "murk.pipeline.execute", parent
    if "papermill" in parent:
        return "papermill", parent
    return "kernel", parent


def _another_root(kind: str) -> str:
    """How the stage's command gives it another output root, in that command's words."""
    if kind == "jupyterlab":
        return "set output_dir = \"outputs-NEW\" in the notebook's parameters cell and run the notebook again"
    if kind in ("papermill", "murk.pipeline.execute"):
        return "-p output_dir outputs-NEW"
    return "the notebook parameter output_dir (papermill: -p output_dir outputs-NEW)"


def _stage_refusal(root: Path, rec: dict, stage: str, kind: str) -> RootInUse:
    who, fix = core.root_writer_words(rec)
    if rec.get("kind", "snakemake") not in STAGE_KINDS:
        fix = "wait until that run ends and run the stage again"
    return RootInUse(
        f"murk: the output root {root} is in use by {who}: the stage {stage} was refused and wrote nothing into it "
        f"(reading the root stays allowed). {fix[0].upper()}{fix[1:]}, or give the stage another output root: "
        f"{_another_root(kind)}.", root, [rec])


def _tokens(record: Path) -> set[str]:
    try:
        return set(_tokens_file(record).read_text(encoding="utf-8").split())
    except OSError:
        return set()


def _job_of(root: Path, record: Path) -> bool:
    """Whether this process carries the token of a run that held ``root`` (:data:`RUN_ENV`, inherited), listed in
    the checkout's tokens (``record``'s) or the root's own (:func:`murk.core.job_of_root`)."""
    held, _, token = os.environ.get(RUN_ENV, "").rpartition("::")
    return (bool(held and token) and root_key(held) == root
            and (token in _tokens(record) or core.job_of_root(root)))


def _under(path: str | os.PathLike, root: Path) -> bool:
    p = os.path.realpath(os.fspath(path))
    return p == str(root) or p.startswith(str(root).rstrip(os.sep) + os.sep)


def refuse_writes(writes: Sequence, *, stage: str, command: str | None = None,
                  snakemake_dir: str | os.PathLike | None = None, own_root: str | os.PathLike | None = None) -> None:
    """Refuse to write files under an output root that another live run holds (murk.pipeline.execute's executed notebook).

    Parameters
    ----------
    writes : sequence of path
        The files the caller is about to write.
    stage : str
        The notebook's name, for the message.
    command : str, optional
        The caller's command line (murk.pipeline.execute's); None: a kernel (see :func:`hold_for_stage`).
    snakemake_dir : path, optional
        Where the root locks live; default ``<project>/.snakemake``.
    own_root : path, optional
        A root the caller holds or is about to hold: not checked here.

    Raises
    ------
    RootInUse
        A path of ``writes`` lies under a root held by a live process this one is not a job of (a root of this
        checkout's records, or any folder above the path whose own lock, :func:`murk.core.root_writer`, is
        held); the message names the root and the holder, as :func:`hold_for_stage`'s does.
    """
    if not writes:
        return
    d = Path(snakemake_dir if snakemake_dir is not None else core.project_root() / ".snakemake").resolve()
    own = root_key(own_root) if own_root is not None else None
    for rec in live_runs(d):
        other = root_key(rec["root"])
        if other != own and any(_under(w, other) for w in writes) and not _job_of(other, root_lock_files(other, d)[1]):
            raise _stage_refusal(other, rec, stage, _stage_runner(command)[0])
    for w in writes:   # a root held from another checkout: its own lock, in one of the folders above the file
        for folder in Path(os.path.realpath(os.fspath(w))).parents:
            rec = core.root_writer(folder) if folder != own else None
            if rec is not None and rec.get("pid") != os.getpid() and not core.job_of_root(folder):
                raise _stage_refusal(folder, rec, stage, _stage_runner(command)[0])


def hold_for_stage(output_dir: str | os.PathLike | None = None, *, stage: str, writes: Sequence = (),
                   command: str | None = None, snakemake_dir: str | os.PathLike | None = None) -> StageLock:
    """Hold a stage's output root for this process's lifetime, or refuse the stage while another run holds it.

    Called by each stage notebook's first code cell after its parameters (in a papermill, murk.pipeline.execute or
    JupyterLab kernel), before the stage writes anything, and by ``python -m murk.pipeline.execute`` before papermill
    starts. One writer per output root: a Snakemake run, a stage run by hand, a JupyterLab kernel.

    Parameters
    ----------
    output_dir : path, optional
        The notebook's ``output_dir`` parameter (None: ``$MURK_OUTPUT_DIR`` or ``outputs/``;
        :func:`murk.core.output_dir`).
    stage : str
        The stage notebook's name (``04_analyse``), for the record and messages.
    writes : sequence of path
        Other files the caller writes (murk.pipeline.execute: its executed notebook): refused when one lies under
        an output root that another live run holds.
    command : str, optional
        murk.pipeline.execute's command line; None: a kernel, whose runner (JupyterLab, papermill) is found from its
        environment and its parent process.
    snakemake_dir : path, optional
        Where the root locks live; default ``<project>/.snakemake`` (the Snakefile's, run from the project).

    Returns
    -------
    StageLock
        The root and how it is held (see :class:`StageLock`). When the lock was taken, the root's record
        names this process (``kind``, pid, start, command, notebook) and :data:`RUN_ENV` is set for the
        processes it starts (murk.pipeline.execute's kernel).

    Raises
    ------
    RootInUse
        Another live process holds the root (or the root under which a path of ``writes`` lies) and this
        process is not a job of it. The one-line message names the root, the holder (a Snakemake run, a stage
        run by hand, a JupyterLab kernel: pid, start, command or notebook), and what to do in the words of
        the command that ran the stage (``-p output_dir DIR`` under papermill and murk.pipeline.execute, the
        parameters cell in JupyterLab). Nothing was written.
    """
    d = Path(snakemake_dir if snakemake_dir is not None else core.project_root() / ".snakemake").resolve()
    root = root_key(core.output_dir(output_dir))
    key = f"{d}|{root}"
    if key in _HELD:
        return StageLock(root, "held")
    kind, cmd = _stage_runner(command)
    refuse_writes(writes, stage=stage, command=command, snakemake_dir=d, own_root=root)
    flock, record = root_lock_files(root, d)
    if _job_of(root, record):
        return StageLock(root, "run")
    try:
        flock.parent.mkdir(parents=True, exist_ok=True)
        fd = _take_root(flock)
        unwritable = False
    except OSError:   # a checkout whose .snakemake/ cannot be written: no run of it holds a lock there
        fd, unwritable = None, True
        holder = root_holder(root, d)
        if holder is not None:
            raise _stage_refusal(root, holder, stage, kind) from None
    if fd is None and not unwritable:
        raise _stage_refusal(root, root_holder(root, d) or _read_json(record) or {"root": str(root)}, stage, kind)
    notebook = os.path.basename(os.environ.get("JPY_SESSION_NAME", "")) if kind == "jupyterlab" else ""
    rec = core.new_writer_record(root, kind=kind, command=cmd, checkout=d.parent, stage=stage,
                                 notebook=notebook or stage)
    if unwritable:   # the root's own lock only; its token tells this process's kernel that it writes this stage
        if not _take_in_root(root, rec):
            raise _stage_refusal(root, core.root_writer(root) or {"root": str(root)}, stage, kind)
        if core.root_writer(root) is not None:   # taken (not a read-only root)
            os.environ[RUN_ENV] = f"{root}::{rec['token']}"
        return StageLock(root, "unlocked")
    if not _take_in_root(root, rec):   # a writer of another checkout holds the root
        os.close(fd)
        raise _stage_refusal(root, core.root_writer(root) or {"root": str(root)}, stage, kind)
    _write_record(record, rec)
    _HELD_ROOTS.setdefault(str(d), set()).add(str(root))
    _HELD[key] = fd
    return StageLock(root, "taken")


# --- one writer per read-out store ------------------------------------------------------------------------------
#
# A read-out job (the 03_readout notebook, locally or as a SLURM job) holds ``<store>.writer.flock`` beside its
# store exclusively for its lifetime, and ``<store>.writer.json`` records it (host, pid, SLURM job id, start,
# command). A restarted driver whose old job still runs (a SIGKILLed Snakemake leaves its SLURM jobs running)
# starts a second job on the same store: that one is refused before it writes anything, naming the store and the
# live writer. The lock ends with the writer's process, however it ends (also ``scancel``: SLURM kills the job's
# processes). ``flock`` locks are seen across the nodes of a cluster on NFS (v4, or v3 with lockd) and on Lustre
# mounted with ``flock``; on a file system without them the lock only covers writers on one node.

#: suffixes of a store's writer lock and record, beside the store (``s1-0000.zarr.writer.flock``)
STORE_FLOCK_SUFFIX = ".writer.flock"
STORE_RECORD_SUFFIX = ".writer.json"


class StoreInUse(RuntimeError):
    """A read-out was refused: another live process writes its store.

    Attributes
    ----------
    store : Path
        The read-out store.
    holder : dict
        The live writer's record (keys ``store``, ``host``, ``pid``, ``slurm_job_id``, ``started``, ``command``;
        only ``store`` when its record is unreadable).
    """

    def __init__(self, message: str, store: Path, holder: dict):
        super().__init__(message)
        self.store = store
        self.holder = holder


def store_lock_files(store: str | os.PathLike) -> tuple[Path, Path]:
    """The writer lock and record of a read-out store: ``<store>.writer.flock`` and ``<store>.writer.json``."""
    s = Path(store)
    return s.with_name(s.name + STORE_FLOCK_SUFFIX), s.with_name(s.name + STORE_RECORD_SUFFIX)


def _store_holder(store: str | os.PathLike) -> dict | None:
    """The record of the live process writing a read-out store, or None when no process holds its lock.

    This process's own hold counts as live.
    """
    flock, record = store_lock_files(store)
    if f"store|{os.path.realpath(store)}" in _HELD or _is_held(flock):
        return _read_json(record) or {"store": str(store)}
    return None


def _describe_writer(rec: dict) -> str:
    bits = []
    if rec.get("slurm_job_id"):
        bits.append(f"SLURM job {rec['slurm_job_id']}")
    if rec.get("host") or rec.get("pid"):
        bits.append(f"pid {rec.get('pid', '?')} on {rec.get('host', '?')}")
    if rec.get("started"):
        bits.append(f"started {rec['started']}")
    text = ", ".join(bits) or "its record is unreadable"
    return text + (f": {rec['command']}" if rec.get("command") else "")


def hold_store_lock(store: str | os.PathLike, command: str = "") -> Path:
    """Take a read-out store's writer lock for this process's lifetime (one writer per store).

    Call it before the store is opened or written. A second call in the same process returns at once.

    Parameters
    ----------
    store : path
        The read-out store (``outputs/readout/<slug>.zarr`` or a shard's ``<slug>/s<size>-<k>.zarr``); its
        folder must exist or is created. The store itself need not exist yet.
    command : str
        What runs the read-out (e.g. ``snakemake``, ``papermill``), kept in the record for messages.

    Returns
    -------
    Path
        The lock file held (``<store>.writer.flock``).

    Raises
    ------
    StoreInUse
        Another live process holds the lock (retried for :data:`ACQUIRE_WAIT_S`). The message names the store,
        the live writer (SLURM job id, host, pid, start) and what to do; this process wrote nothing (the lock
        file is only opened).
    """
    flock, record = store_lock_files(store)
    key = f"store|{os.path.realpath(store)}"
    if key in _HELD:
        return flock
    flock.parent.mkdir(parents=True, exist_ok=True)
    fd = _take_root(flock)
    if fd is None:
        rec = _read_json(record) or {"store": str(store)}
        job = rec.get("slurm_job_id")
        fix = (f"wait until it ends, or end it (scancel {job}) and run again" if job else
               f"wait until it ends, or end it (kill {rec['pid']} on {rec.get('host', 'that machine')}) and run again"
               if rec.get("pid") else "wait until it ends and run again")
        raise StoreInUse(
            f"murk: the read-out store {store} is being written by another live read-out ({_describe_writer(rec)}). "
            f"A second writer is refused: the two would write the same images. Nothing was written. This happens "
            f"when a driver was restarted while its old job still runs; {fix}: a read-out resumes image by image.",
            Path(store), rec)
    rec = {"store": str(store), "host": os.uname().nodename, "pid": os.getpid(),
           "slurm_job_id": os.environ.get("SLURM_JOB_ID", ""), "command": command,
           "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    tmp = record.with_name(record.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, record)
    _HELD[key] = fd
    return flock
