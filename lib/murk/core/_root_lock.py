"""The writer lock of an output root, kept in the root itself: one writer per root, whichever checkout writes it.

An output root is written by one process at a time: a Snakemake run's main process (for the run's lifetime, its
jobs write as part of it), a stage notebook run by hand (papermill, ``python -m murk.pipeline.execute``, a
JupyterLab kernel), ``python -m murk.report.paper`` or ``python -m murk.report.export`` run by hand. The lock lives
in the root, so every checkout (a second git clone, a git worktree) and every process on the machine sees it:

- ``<root>/.murk/writer.flock``: an OS file lock (``flock``) held exclusively by the writer for its lifetime; the
  kernel releases it when that process ends, however it ends (there is nothing to unlock after a kill);
- ``<root>/.murk/writer.json``: the record of the writer (``root``, ``kind``, ``pid``, ``host``, ``checkout``,
  ``started``, ``command``), for the refusal's words; read only while the lock is held;
- ``<root>/.murk/writer.tokens``: the token of each run that held the root, one a line. A run exports
  ``MURK_RUN_LOCK=<root>::<token>`` (:data:`RUN_ENV`) to its jobs (local jobs inherit it, SLURM jobs too: the executor
  submits with ``sbatch --export=ALL``); a process carrying a token listed here is a job of the run that holds the
  root (:func:`job_of_root`) and writes without the lock: it must not deadlock against its own run.

``.murk/`` is not a store: the stages, the store checks (``murk.pipeline.foreign_stores``, the markers' content
digests) and Snakemake's outputs read ``readout/``, ``cube.zarr`` and named files only. A copied root carries a
copy of the record but no held lock: it is free. Reading a root needs no lock.

``murk.pipeline`` keeps, besides, the per-checkout records of earlier murk (``.snakemake/murk-roots/``) that its
clean-up of a killed run's Snakemake locks reads.

Notes
-----
``flock`` is seen across the machines of a cluster on NFS v4 (or v3 with lockd) and on Lustre mounted with
``flock``; on a file system without it the lock covers the writers of one machine.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import time
from pathlib import Path

__all__ = ["RUN_ENV", "ROOT_LOCK_DIR", "BY_HAND_KINDS", "RootLocked", "root_lock_paths", "root_writer",
           "take_root_writer", "release_root_writer", "job_of_root", "describe_root_writer", "root_writer_words",
           "new_writer_record", "refuse_root_writer", "hold_root_writer"]

#: environment variable naming the root a run holds and its token (``<root>::<token>``), exported to its jobs
RUN_ENV = "MURK_RUN_LOCK"
#: the folder, in the output root, of its writer lock, record and tokens
ROOT_LOCK_DIR = ".murk"
#: the kinds of writer besides a Snakemake run (``snakemake``): stages run by hand and the report modules by hand
BY_HAND_KINDS = ("jupyterlab", "papermill", "murk.pipeline.execute", "kernel", "murk.report.paper",
                 "murk.report.export")
#: seconds a writer retries a lock held by another process before it refuses (a probe holds it for microseconds)
ACQUIRE_WAIT_S = 1.0

#: the roots (real paths) whose lock this process holds -> the lock's fd (kept open for the process's lifetime)
_HELD: dict[str, int] = {}


class RootLocked(RuntimeError):
    """A writer was refused: another live process holds the output root's writer lock.

    Attributes
    ----------
    root : Path
        The output root (real path).
    holder : dict
        The live writer's record (see :func:`root_writer`).
    """

    def __init__(self, message: str, root: Path, holder: dict):
        super().__init__(message)
        self.root = root
        self.holder = holder


def _real(root: str | os.PathLike) -> Path:
    return Path(os.path.realpath(os.fspath(root)))


def root_lock_paths(root: str | os.PathLike) -> tuple[Path, Path, Path]:
    """The writer lock, record and tokens of an output root: ``<root>/.murk/writer.flock``, ``.json``, ``.tokens``.

    Parameters
    ----------
    root : path
        The output root (a link is followed).

    Returns
    -------
    tuple of Path
        (lock, record, tokens), under the root's real path.
    """
    d = _real(root) / ROOT_LOCK_DIR
    return d / "writer.flock", d / "writer.json", d / "writer.tokens"


def _read_json(path: Path) -> dict | None:
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def _held_elsewhere(flock: Path) -> bool:
    """Whether another process holds ``flock`` (a missing or unreadable file: no)."""
    try:
        fd = os.open(flock, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases the probe's lock
    return False


def root_writer(root: str | os.PathLike) -> dict | None:
    """The record of the live process that holds an output root's writer lock, or None when none holds it.

    Parameters
    ----------
    root : path
        The output root.

    Returns
    -------
    dict or None
        Keys ``root``, ``kind``, ``pid``, ``host``, ``checkout``, ``started``, ``command`` (and ``stage``,
        ``notebook`` for a stage); ``{"root": …}`` only when the record is unreadable. This process's own hold
        counts as live.
    """
    flock, record, _ = root_lock_paths(root)
    if str(_real(root)) in _HELD or _held_elsewhere(flock):
        return _read_json(record) or {"root": str(_real(root))}
    return None


def new_writer_record(root: str | os.PathLike, *, kind: str, command: str, checkout: str | os.PathLike | None = None,
                      **extra: str) -> dict:
    """A writer's record: this process (pid, host), its checkout, the time, the command and a fresh token.

    Parameters
    ----------
    root : path
        The output root.
    kind : str
        ``snakemake`` or one of :data:`BY_HAND_KINDS`.
    command : str
        The writer's command line, for messages.
    checkout : path, optional
        The checkout the writer runs from (default: the project murk is imported from).
    **extra
        Other keys (``stage``, ``notebook``).

    Returns
    -------
    dict
    """
    from murk.core._paths import project_root

    return {"root": str(_real(root)), "kind": kind, "pid": os.getpid(), "host": os.uname().nodename,
            "checkout": str(Path(checkout if checkout is not None else project_root()).resolve()), "command": command,
            "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "token": secrets.token_hex(16),
            **extra}


def take_root_writer(root: str | os.PathLike, record: dict, *, wait_s: float = ACQUIRE_WAIT_S) -> bool:
    """Take an output root's writer lock for this process's lifetime and write its record and token.

    Parameters
    ----------
    root : path
        The output root; it and its ``.murk/`` are created when missing.
    record : dict
        The writer's record (:func:`new_writer_record`); its ``token`` is listed in the root's tokens.
    wait_s : float
        Seconds to retry a lock held by another process (default :data:`ACQUIRE_WAIT_S`).

    Returns
    -------
    bool
        True: this process holds the lock (now, or already); False: another live process holds it (nothing was
        written).

    Raises
    ------
    OSError
        The lock cannot be created or its record written (a read-only root); nothing is held then.
    """
    real = str(_real(root))
    if real in _HELD:
        return True
    flock, rec_file, tokens = root_lock_paths(root)
    flock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(flock, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return False
            time.sleep(0.05)
    try:
        tmp = rec_file.with_name(rec_file.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, rec_file)
        with open(tokens, "a", encoding="utf-8") as f:
            f.write(str(record["token"]) + "\n")
    except OSError:
        os.close(fd)
        raise
    _HELD[real] = fd
    return True


def release_root_writer(root: str | os.PathLike) -> None:
    """Release an output root's writer lock this process holds (a no-op when it holds none).

    A writer keeps its lock for its lifetime; this is for a caller that took it and then was refused by another
    check before it wrote anything.
    """
    fd = _HELD.pop(str(_real(root)), None)
    if fd is not None:
        os.close(fd)


def job_of_root(root: str | os.PathLike) -> bool:
    """Whether this process is a job of the run that holds (or held) ``root``: it carries that run's token.

    The token comes from :data:`RUN_ENV` (``<root>::<token>``, inherited from the run's main process) and must be
    listed in the root's tokens (``<root>/.murk/writer.tokens``): a forged or another root's token does not count.
    """
    held, _, token = os.environ.get(RUN_ENV, "").rpartition("::")
    if not (held and token) or _real(held) != _real(root):
        return False
    try:
        return token in root_lock_paths(root)[2].read_text(encoding="utf-8").split()
    except OSError:
        return False


def describe_root_writer(rec: dict) -> str:
    """A writer's record in words: pid, host and checkout where they are not this process's, start, command.

    Examples
    --------
    >>> describe_root_writer({"pid": 7, "started": "2026-01-01 00:00:00 UTC", "command": "snakemake"})
    'pid 7, started 2026-01-01 00:00:00 UTC: snakemake'
    """
    from murk.core._paths import project_root

    pid = f"pid {rec['pid']}" if rec.get("pid") else "pid unknown"
    if rec.get("host") and rec["host"] != os.uname().nodename:
        pid += f" on {rec['host']}"
    bits = [pid]
    if rec.get("started"):
        bits.append(f"started {rec['started']}")
    here = {str(project_root().resolve()), os.path.realpath(os.getcwd())}
    if rec.get("checkout") and str(rec["checkout"]) not in here:
        bits.append(f"from the checkout {rec['checkout']}")
    return ", ".join(bits) + (f": {rec['command']}" if rec.get("command") else "")


def root_writer_words(rec: dict) -> tuple[str, str]:
    """Who holds a root, for a message (from its record), and what ends the hold.

    Returns
    -------
    (str, str)
        E.g. ``("a live run of this workflow (pid 7, started …: snakemake …)", "wait until that run ends")``.
    """
    kind = rec.get("kind", "snakemake")
    if kind == "jupyterlab":
        when = f", started {rec['started']}" if rec.get("started") else ""
        return (f"a JupyterLab kernel (pid {rec.get('pid', '?')}, notebook {rec.get('notebook', '?')}{when}), "
                f"which holds it until the kernel is shut down",
                "shut that kernel down (JupyterLab: Kernel > Shut Down Kernel)")
    if kind in ("murk.report.paper", "murk.report.export"):
        return f"python -m {kind} run by hand ({describe_root_writer(rec)})", "wait until it ends"
    if kind in BY_HAND_KINDS:
        return f"a stage run by hand ({rec.get('stage', '?')}: {describe_root_writer(rec)})", "wait until it ends"
    return f"a live run of this workflow ({describe_root_writer(rec)})", "wait until that run ends"


def _refusal(root: str | os.PathLike, holder: dict, words: str) -> RootLocked:
    who, fix = root_writer_words(holder)
    return RootLocked(
        f"murk: the output root {_real(root)} is in use by {who}: {words} was refused and wrote nothing into it "
        f"(reading the root stays allowed). {fix[0].upper()}{fix[1:]}, then run the same command again; a run "
        f"of the workflow makes its own paper and export (make paper, make export).", _real(root), holder)


def refuse_root_writer(root: str | os.PathLike, *, words: str) -> None:
    """Refuse a module run by hand while another live process writes its output root; creates nothing.

    Called before the module's own checks (which then need not name a root mid-way through another run); the
    module takes the lock (:func:`hold_root_writer`) right before it writes.

    Parameters
    ----------
    root : path
        The output root.
    words : str
        The command as the user typed it, for the refusal (``python -m murk.report.paper``).

    Raises
    ------
    RootLocked
        As :func:`hold_root_writer`.
    """
    if job_of_root(root) or str(_real(root)) in _HELD:
        return
    holder = root_writer(root)
    if holder is not None:
        raise _refusal(root, holder, words)


def hold_root_writer(root: str | os.PathLike, *, kind: str, command: str, words: str) -> str:
    """Hold an output root for a module run by hand (the paper, the export), or refuse while another writer holds it.

    Parameters
    ----------
    root : path
        The output root the module writes into.
    kind : {"murk.report.paper", "murk.report.export"}
        The module, for the record.
    command : str
        Its command line, for the record.
    words : str
        The command as the user typed it, for the refusal (``python -m murk.report.paper``).

    Returns
    -------
    str
        ``run``: this process is a job of the run that holds the root (it writes as part of that run);
        ``held``: this process held it already; ``taken``: this process took the lock (release it with
        :func:`release_root_writer` when done, or it is kept for the process's lifetime); ``unlocked``: the root
        does not exist or its ``.murk/`` cannot be created (a read-only root), which the caller refuses in its
        own words.

    Raises
    ------
    RootLocked
        Another live process holds the root. The one-line message names the root, the holder (what it is, its
        pid, host and checkout where they are not this process's, start and command) and the fix; nothing was
        written.
    """
    if job_of_root(root):
        return "run"
    if str(_real(root)) in _HELD:
        return "held"
    if not _real(root).is_dir():
        return "unlocked"   # no root: nothing to hold (the caller refuses a missing root in its own words)
    try:
        if take_root_writer(root, new_writer_record(root, kind=kind, command=command)):
            return "taken"
    except OSError:
        return "unlocked"
    raise _refusal(root, root_writer(root) or _read_json(root_lock_paths(root)[1]) or {"root": str(_real(root))},
                   words)
