"""Killing a running stage or a whole `make demo` at moments chosen from observed progress.

Used by the kill-and-resume tests (``test_scale.py``, ``test_demo_resume.py``). Nothing here
guesses a moment from the wall clock: a test starts a run (:class:`KillableRun`), polls for
progress it can see on disk (a store's ``done`` flags, a file that a stage creates, or the
*pause* below), then kills every process of the run with SIGKILL, as a power loss would.

:data:`SITECUSTOMIZE` is loaded into every Python process of the run (it is first on
PYTHONPATH). It records each process id, so the run's processes can be killed by id, the
papermill kernel included (Jupyter starts kernels in a session of their own, out of reach of
the run's process group), and, when armed with ``MURK_TEST_PAUSE_AT`` (a chunk or shard file's path), it
pauses the process right after that file is in place for the ``MURK_TEST_PAUSE_AFTER``-th time (default 1):
in the middle of writing one image of a read-out store, its values written, its texts and its ``done`` flag
not (a shard file holds several images and is rewritten for each: its k-th write is the k-th image's).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

SITECUSTOMIZE = """
import os
_d = os.environ.get("MURK_TEST_FAULT_DIR")
if _d:
    open(os.path.join(_d, "pid-%d" % os.getpid()), "w").close()
    _target = os.environ.get("MURK_TEST_PAUSE_AT")
    if _target:
        import time
        import zarr.storage._local as _local
        _real = _local._put
        _target = os.path.realpath(_target)
        _after = [int(os.environ.get("MURK_TEST_PAUSE_AFTER", "1"))]

        def _put(path, value, exclusive=False):
            n = _real(path, value, exclusive=exclusive)
            if os.path.realpath(str(path)) == _target:
                _after[0] -= 1
            if os.path.realpath(str(path)) == _target and _after[0] == 0:
                open(os.path.join(_d, "paused"), "w").close()
                time.sleep(3600)  # until the test kills this process
            return n

        _local._put = _put
"""


class KillableRun:
    """A command started in a session of its own, with the fault hook loaded.

    Parameters
    ----------
    argv : list of str
        The command.
    cwd : path
    env : mapping
        Its environment (the hook's variables are added).
    faults : path
        A fresh folder for the hook (process ids, the pause flag) and the run's output
        (``output.txt``).
    pause_at : path, optional
        Pause right after this chunk or shard file has been written (``MURK_TEST_PAUSE_AT``) ...
    pause_after : int
        ... for the ``pause_after``-th time (``MURK_TEST_PAUSE_AFTER``; 1 = its first write).
    """

    def __init__(self, argv, cwd, env, faults: Path, pause_at: Path | None = None, pause_after: int = 1):
        import shutil

        shutil.rmtree(faults, ignore_errors=True)
        (faults / "hook").mkdir(parents=True)
        (faults / "hook" / "sitecustomize.py").write_text(SITECUSTOMIZE)
        self.faults = faults
        self.token = f"MURK_TEST_FAULT_DIR={faults}"
        env = {**env, "MURK_TEST_FAULT_DIR": str(faults),
               "PYTHONPATH": os.pathsep.join([str(faults / "hook"), *filter(None, [env.get("PYTHONPATH")])])}
        if pause_at is not None:
            env["MURK_TEST_PAUSE_AT"] = str(pause_at)
            env["MURK_TEST_PAUSE_AFTER"] = str(int(pause_after))
        self.output = faults / "output.txt"
        with open(self.output, "w") as out:
            self.p = subprocess.Popen(argv, cwd=cwd, env=env, start_new_session=True,
                                      stdout=out, stderr=subprocess.STDOUT)

    @property
    def paused(self) -> bool:
        return (self.faults / "paused").exists()

    def text(self) -> str:
        return self.output.read_text(errors="replace")

    def wait_for(self, condition, what: str, limit_s: float = 1800) -> None:
        """Poll until ``condition()`` holds. The limit only ends a hung test; it chooses no moment."""
        t0 = time.monotonic()
        while not condition():
            if self.p.poll() is not None:
                raise AssertionError(f"the run ended (rc {self.p.returncode}) before {what}:\n{self.text()[-4000:]}")
            if time.monotonic() - t0 > limit_s:
                self.kill()
                raise AssertionError(f"no {what} after {limit_s} s:\n{self.text()[-4000:]}")
            time.sleep(0.05)

    def finish(self, limit_s: float = 1800) -> int:
        """Wait for the run to end by itself; its exit status."""
        try:
            return self.p.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the run did not end within {limit_s} s:\n{self.text()[-4000:]}") from None

    def _ours(self, pid: int) -> bool:
        try:
            return self.token.encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL every process of the run and wait until all are gone.

        The process group goes first (make, snakemake, bash, jupytext, papermill), then each
        recorded process that still carries this run's token in its environment (the kernel);
        a recorded id is never signalled unless it is still one of this run's processes.
        """
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.p.wait()
        pids = [int(f.name[4:]) for f in self.faults.glob("pid-*")]
        for pid in pids:
            if self._ours(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for pid in pids:
            while self._ours(pid) and not _is_zombie(pid):
                time.sleep(0.05)


def _is_zombie(pid: int) -> bool:
    try:
        return "zombie" in Path(f"/proc/{pid}/status").read_text().split("State:")[1].split("\n")[0].lower()
    except (OSError, IndexError):
        return True


def done_flags(store: Path) -> list[bool]:
    """A read-out store's ``done`` flags as its files say now ([] before the store exists).

    zarr replaces chunk files atomically, so reading while a run writes is safe.
    """
    import zarr

    if not (store / "done" / "zarr.json").is_file():
        return []
    try:
        return [bool(x) for x in zarr.open_array(store / "done", mode="r", zarr_format=3)[:]]
    except Exception:  # noqa: BLE001 - not yet readable
        return []
