"""One writer per read-out store (murk.pipeline.hold_store_lock), with two real processes."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from murk.pipeline import _locks as runlock

LIB = str(Path(__file__).resolve().parents[1] / "lib")

HOLDER = textwrap.dedent("""
    import sys
    from murk.pipeline import _locks as runlock
    runlock.hold_store_lock(sys.argv[1], "snakemake")
    print("held", flush=True)
    sys.stdin.readline()   # hold until the test says so
""")

SECOND = textwrap.dedent("""
    import sys
    from murk.pipeline import _locks as runlock
    try:
        runlock.hold_store_lock(sys.argv[1], "snakemake")
    except runlock.StoreInUse as e:
        print(e)
        sys.exit(3)
    print("took it")
""")


def _env(**extra):
    return {**os.environ, "PYTHONPATH": LIB + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra}


def _second(store):
    return subprocess.run([sys.executable, "-c", SECOND, str(store)], capture_output=True, text=True, timeout=60,
                          env=_env())


def test_second_writer_refused_while_first_lives(tmp_path):
    store = tmp_path / "readout" / "m" / "s1-0000.zarr"
    first = subprocess.Popen([sys.executable, "-c", HOLDER, str(store)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=_env(SLURM_JOB_ID="4711"))
    try:
        assert first.stdout.readline().strip() == "held"
        before = sorted(p.name for p in store.parent.iterdir())
        record = (store.parent / "s1-0000.zarr.writer.json").read_text()
        r = _second(store)
        assert r.returncode == 3, r.stdout + r.stderr
        msg = r.stdout
        assert str(store) in msg and f"pid {first.pid}" in msg and "SLURM job 4711" in msg
        assert "scancel 4711" in msg and "Nothing was written" in msg
        # the refused writer wrote nothing: no store, the live writer's record unchanged
        assert sorted(p.name for p in store.parent.iterdir()) == before
        assert not store.exists()
        assert (store.parent / "s1-0000.zarr.writer.json").read_text() == record
        assert runlock._store_holder(store)["pid"] == first.pid
    finally:
        first.communicate("\n", timeout=30)
    # the lock ended with its process: the next writer takes it and records itself
    assert runlock._store_holder(store) is None
    r = _second(store)
    assert r.returncode == 0 and "took it" in r.stdout, r.stdout + r.stderr
    assert json.loads((store.parent / "s1-0000.zarr.writer.json").read_text())["pid"] != first.pid


def test_killed_writer_releases_its_store(tmp_path):
    store = tmp_path / "m.zarr"
    first = subprocess.Popen([sys.executable, "-c", HOLDER, str(store)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=_env())
    assert first.stdout.readline().strip() == "held"
    assert _second(store).returncode == 3
    first.kill()   # SIGKILL, as scancel or the OOM killer end a job
    first.wait(timeout=30)
    assert _second(store).returncode == 0


def test_same_process_holds_once(tmp_path):
    store = tmp_path / "x.zarr"
    assert runlock.hold_store_lock(store) == runlock.hold_store_lock(store) == tmp_path / "x.zarr.writer.flock"
    assert runlock._store_holder(store)["pid"] == os.getpid()
