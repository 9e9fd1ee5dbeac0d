"""The workflow's bookkeeping (murk.pipeline.markers, the Snakefile): stale stores are noticed, stale locks
are removed, refusals write nothing (issue 14).

The unit tests check the markers and the lock, the Makefile's recipes and Snakemake's plans (dry runs). The
runs of Snakemake on the offline demo, the way users run it, are scenarios: tests/scenarios/test_workflow_runs.py,
and for stale and damaged stores tests/scenarios/test_stale_stores.py and tests/scenarios/test_damaged_demo.py
(modules of their own, so that the suite's parallel workers share the long runs: issue 22 item 4).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from murk import core, scene
from murk.core import _paths as paths
from murk.pipeline import _locks as runlock
from murk.pipeline import markers as workflow
from murk.results import _cube as cube

ROOT = paths.project_root()


def _store(path: Path) -> Path:
    attrs = {"config_hash": "c", "items_hash": "i", "model_id": "m", "depth_backend": "constant-13.8m"}
    cube.open_readout_store(path, [11, 12], ["car", "bus"], attrs)
    r = {k: 0.5 for k in cube.READOUTS}
    r.update({k: "x" for k in cube.TEXT_READOUTS})
    cube.write_image(path, 0, {(a, lvl, t): r for a, lvl in scene.CONDITIONS for t in cube.TASKS})
    return path


def test_store_digest_follows_content_not_times(tmp_path):
    store = _store(tmp_path / "m.zarr")
    d = workflow.store_digest(store)
    assert d.startswith("sha256:") and workflow.store_digest(tmp_path / "none.zarr") == "absent"
    for f in store.rglob("*"):
        os.utime(f, (1, 1))
    chunk = store / "value" / "c" / "0" / "0" / "0" / "0" / "0"  # the shard file of both images
    chunk.with_name("0.abc.partial").write_bytes(b"half")  # a killed write's leftover
    assert workflow.store_digest(store) == d
    chunk.write_bytes(chunk.read_bytes()[:-1])
    assert workflow.store_digest(store) != d


def test_stale_markers_are_named_and_nothing_is_deleted(tmp_path):
    folder = tmp_path / "readout"
    for name in ("ok", "changed", "deleted", "old", "repaired"):
        _store(folder / f"{name}.zarr")
        workflow.write_marker(folder / f"{name}.done")
    (folder / "old.done").write_text("")  # a marker of an older murk (Snakemake's touch)
    workflow.write_marker(folder / "shard" / "s2-0005.done")  # a shard beyond the items: no store
    chunk = folder / "changed.zarr" / "done" / "0"
    chunk.write_bytes(b"")

    shutil.rmtree(folder / "deleted.zarr")
    shutil.rmtree(folder / "repaired.zarr")  # docs/recovery.md's repair step: the store and its marker
    (folder / "repaired.done").unlink()
    cube_zarr = tmp_path / "cube.zarr"
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    why = {m: workflow.rerun_reason(folder / f"{m}.done", [cube_zarr]) for m in
           ("ok", "changed", "deleted", "old", "repaired")}
    assert why["ok"] is None and workflow.rerun_reason(folder / "shard" / "s2-0005.done", [cube_zarr]) is None
    assert "changed after its marker" in why["changed"]
    assert "is missing" in why["deleted"]
    assert "no content digest" in why["old"]
    assert why["repaired"] is None  # nothing downstream yet: Snakemake runs it anyway, no message
    cube_zarr.mkdir()
    assert "marker" in workflow.rerun_reason(folder / "repaired.done", [cube_zarr]) \
        and "is missing too" in workflow.rerun_reason(folder / "repaired.done", [cube_zarr])
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before  # a plan deletes nothing
    assert json.loads((folder / "ok.done").read_text())["store"] == "ok.zarr"


HOLD = """
import sys, time
from murk.pipeline import markers as workflow
removed = workflow._hold_run_lock(sys.argv[1])
print(len(removed), flush=True)
if len(sys.argv) > 2:
    time.sleep(3600)
"""


def _hold(snake_dir: Path, stay: bool = False) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", HOLD, str(snake_dir), *(["stay"] if stay else [])],
                            stdout=subprocess.PIPE, text=True, env=os.environ.copy())


def test_stale_snakemake_lock_is_removed_only_when_no_run_is_alive(tmp_path):
    snake = tmp_path / ".snakemake"
    (snake / "locks").mkdir(parents=True)
    lock = snake / "locks" / "0.output.lock"
    lock.write_text("outputs/items.json\n")
    alive = _hold(snake, stay=True)  # a live run: holds the run lock (no stale locks were there for it)
    try:
        assert alive.stdout.readline().strip() == "1"  # it found the lock of a dead run and removed it
        lock.write_text("outputs/items.json\n")  # the live run's own lock
        other = _hold(snake)
        assert other.stdout.readline().strip() == "0" and other.wait() == 0
        assert lock.exists()  # kept: Snakemake refuses the second run as before
    finally:
        alive.kill()
        alive.wait()
    after = _hold(snake)  # the live run died (SIGKILL): its lock is stale now
    assert after.stdout.readline().strip() == "1" and after.wait() == 0
    assert not lock.exists()


HOLD_ROOT = """
import json, sys, time
from murk.pipeline import _locks as runlock
snake, root, mode = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    if mode == "unlock":
        notes = runlock.snakefile_run_lock(root, snake, dry_run=False, argv=["snakemake", "--unlock"])
        print(json.dumps({"notes": notes}), flush=True)
    else:
        lock = runlock.hold_root_lock(root, snake, dry_run=mode == "dry", argv=["snakemake", "--config", "x"])
        print(json.dumps({"removed": [p.name for p in lock.removed], "stale": [p.name for p in lock.stale],
                          "live": lock.live, "held": lock.held}), flush=True)
except runlock.RootInUse as e:
    print(json.dumps({"refused": str(e)}), flush=True)
    sys.exit(3)
if mode == "stay":
    time.sleep(3600)
"""


class _Run:
    """A process that takes an output root's lock as a Snakemake main process does (murk.pipeline)."""

    def __init__(self, snake: Path, root: Path | str, mode: str = "once"):
        self.p = subprocess.Popen([sys.executable, "-c", HOLD_ROOT, str(snake), str(root), mode],
                                  stdout=subprocess.PIPE, text=True, env=os.environ.copy(), cwd=snake.parent)
        self.out = json.loads(self.p.stdout.readline())

    def kill(self):  # as a power loss or the OOM killer would
        self.p.send_signal(9)
        self.p.wait()

    def done(self) -> int:
        return self.p.wait(timeout=60)


def _snake_locks(snake: Path, n: int, *paths: str) -> tuple[Path, Path]:
    """Write a run's Snakemake lock files as Snakemake does (persistence/file.py: one path a line)."""
    locks = snake / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    files = []
    for kind in ("input", "output"):
        f = locks / f"{n}.{kind}.lock"
        f.write_text("\n".join(["notebooks/01_select.py", *paths] if kind == "input" else paths) + "\n")
        files.append(f)
    return tuple(files)


def test_second_run_on_a_live_root_is_refused_naming_it_and_other_roots_run(tmp_path):
    work = tmp_path / "work"
    snake = work / ".snakemake"
    snake.mkdir(parents=True)
    a, b = work / "outputs-a", work / "outputs-b"
    live = _Run(snake, a, "stay")
    try:
        assert live.out["held"] and live.out["removed"] == []
        second = _Run(snake, a)
        assert second.done() == 3
        msg = second.out["refused"]
        assert str(a) in msg and f"pid {live.p.pid}" in msg and "output_dir=outputs-NEW" in msg
        assert "--unlock" not in msg and "Nothing was changed" in msg
        (tmp_path / "link").symlink_to(a, target_is_directory=True)  # another spelling of the same root
        assert (a / core.ROOT_LOCK_DIR).is_dir()   # the lock lives in the root (made as Snakemake would make it)
        assert _Run(snake, tmp_path / "link").done() == 3
        clone = tmp_path / "clone" / ".snakemake"   # a second git clone: its own .snakemake/, the same root
        clone.mkdir(parents=True)
        second = _Run(clone, a)
        assert second.done() == 3 and not (clone / "locks").exists()
        msg = second.out["refused"]
        assert f"the output root {a} is in use by a live run of this workflow (pid {live.p.pid}" in msg
        assert f"from the checkout {work}: snakemake --config x" in msg and "output_dir=outputs-NEW" in msg
        assert "\n" not in msg
        dry = _Run(clone, a, "dry")   # make plan from the clone names the live run of the other checkout
        assert dry.done() == 0 and dry.out["live"]["pid"] == live.p.pid and dry.out["live"]["checkout"] == str(work)
        other = _Run(snake, b)  # another output root of the checkout runs alongside
        assert other.done() == 0 and other.out["held"]
        dry = _Run(snake, a, "dry")  # a dry run alongside the live run: allowed, takes nothing
        assert dry.done() == 0 and not dry.out["held"] and dry.out["live"]["pid"] == live.p.pid
        assert runlock.root_holder(a, snake)["pid"] == live.p.pid
        assert [r["pid"] for r in runlock.live_runs(snake)] == [live.p.pid]
    finally:
        live.kill()
    assert runlock.root_holder(a, snake) is None  # the kernel released it with the killed process
    after = _Run(snake, a)
    assert after.done() == 0 and after.out["held"]


def test_killed_runs_stale_locks_are_removed_while_another_root_is_alive(tmp_path):
    work = tmp_path / "work"
    snake = work / ".snakemake"
    snake.mkdir(parents=True)
    a, b = work / "outputs-a", work / "outputs-b"
    live_b = _Run(snake, b, "stay")
    killed_a = _Run(snake, "outputs-a", "stay")  # a relative root: the same root as its absolute path
    b_files = _snake_locks(snake, 0, f"{b}/items.json", f"{b}/readout/m.done")  # absolute paths
    a_files = _snake_locks(snake, 1, "outputs-a/items.json", "outputs-a/readout/m.done")  # relative
    shared = snake / "locks" / "2.input.lock"  # names no output root: blocks no run
    shared.write_text("notebooks/01_select.py\ndata/config.yaml\n")
    killed_a.kill()
    try:
        dry = _Run(snake, a, "dry")  # make plan: reports, removes nothing
        assert dry.done() == 0 and sorted(dry.out["stale"]) == sorted(f.name for f in a_files)
        assert dry.out["live"] is None and all(f.exists() for f in (*a_files, *b_files, shared))
        dry_b = _Run(snake, b, "dry")  # a dry run on the live root: its locks stay
        assert dry_b.done() == 0 and dry_b.out["live"]["pid"] == live_b.p.pid
        assert all(f.exists() for f in b_files)
        unlock = _Run(snake, a, "unlock")  # snakemake --unlock would remove the live run's locks
        assert unlock.done() == 3 and str(b) in unlock.out["refused"] and f"pid {live_b.p.pid}" in unlock.out["refused"]
        assert all(f.exists() for f in (*a_files, *b_files))
        rerun = _Run(snake, a, "stay")  # the killed run's rerun, while the run on b is alive
        try:
            assert sorted(rerun.out["removed"]) == sorted(f.name for f in a_files)
            assert not any(f.exists() for f in a_files)
            assert all(f.exists() for f in b_files) and shared.exists()  # the live run's locks are kept
            assert _Run(snake, b).done() == 3  # and its root is still refused to a second run
            a2 = _snake_locks(snake, 3, "outputs-a/items.json")  # the rerun's own locks, once it wrote them
            assert _Run(snake, work / "outputs-c").done() == 0 and all(f.exists() for f in (*a2, *b_files))
        finally:
            rerun.kill()
    finally:
        live_b.kill()
    last = _Run(snake, work / "outputs-c")  # no run alive: every lock file is a dead run's
    assert last.done() == 0 and not any((snake / "locks").glob("*.lock"))
    unlock = _Run(snake, a, "unlock")
    assert unlock.done() == 0 and unlock.out["notes"] == []


def test_a_run_on_another_root_started_after_the_kill_removes_the_stale_locks(tmp_path):
    snake = tmp_path / ".snakemake"
    snake.mkdir()
    killed = _Run(snake, tmp_path / "a", "stay")
    watcher = _Run(snake, tmp_path / "w", "stay")  # keeps the checkout "not alone" throughout
    a_files = _snake_locks(snake, 0, f"{tmp_path}/a/items.json")
    killed.kill()
    try:
        other = _Run(snake, tmp_path / "b", "stay")
        try:
            assert sorted(other.out["removed"]) == sorted(f.name for f in a_files)
            assert _Run(snake, tmp_path / "b").done() == 3
        finally:
            other.kill()
    finally:
        watcher.kill()


def test_two_runs_started_at_once_on_one_root_one_is_refused(tmp_path):
    snake = tmp_path / ".snakemake"
    go = tmp_path / "go"
    code = ("import os, sys, time\n"
            "while not os.path.exists(sys.argv[4]): time.sleep(0.001)\n") + HOLD_ROOT
    for attempt in range(3):
        root = tmp_path / f"out{attempt}"
        procs = [subprocess.Popen([sys.executable, "-c", code, str(snake), str(root), "stay", str(go)],
                                  stdout=subprocess.PIPE, text=True) for _ in range(2)]
        time.sleep(0.5)
        go.touch()
        try:
            outs = [json.loads(p.stdout.readline()) for p in procs]
            assert sorted("refused" in o for o in outs) == [False, True]
            assert [o["held"] for o in outs if "refused" not in o] == [True]
        finally:
            for p in procs:
                p.kill()
                p.wait()
            go.unlink()


def test_lock_file_paths_belong_to_the_deepest_root(tmp_path):
    f = tmp_path / "0.output.lock"
    f.write_text(f"out/items.json\n{tmp_path}/out/sub/cube.zarr\nnotebooks/x.py\n\n")
    roots = [tmp_path / "out", tmp_path / "out" / "sub", tmp_path / "outx"]
    assert runlock.lock_file_roots(f, roots, tmp_path) == {tmp_path / "out", tmp_path / "out" / "sub"}
    f.write_text("outx-not/items.json\n")
    assert runlock.lock_file_roots(f, roots, tmp_path) == set()
    assert runlock.root_lock_files(tmp_path / "a--b", tmp_path)[0] != runlock.root_lock_files(tmp_path / "a" / "b",
                                                                                               tmp_path)[0]


# --- the Makefile's plumbing (make -n prints the recipes and runs none of them) ---

def _make_n(*args: str) -> str:

    if shutil.which("make") is None:
        pytest.skip("make not installed")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return subprocess.run(["make", "-n", "-C", str(ROOT), *args], capture_output=True, text=True, check=True,
                          env=env).stdout


def test_make_targets_pass_args_and_lab_runs_as_root():
    lab = _make_n("lab", "ARGS=--no-browser --port 8899")
    want = "--allow-root --no-browser --port 8899 notebooks/" if os.getuid() == 0 else " --no-browser --port 8899 notebooks/"
    assert "lab/jupyter-lab" in lab and want in lab  # the project launcher (lab/jupyter-lab runs jupyter lab)
    fast = _make_n("test-fast", "ARGS=-k cube")
    assert '-m pytest -q -n 3 --dist loadfile --no-loadscope-reorder -m "not slow and not realsize and not served" -k cube' in fast
    full = _make_n("test")
    assert "-m pytest -q -n 3 --dist loadfile" in full and "not slow" not in full  # make test: the whole suite,
    assert '-m "not realsize and not served"' in full  # but the full-size models and the vLLM server's tests
    assert '-m pytest -q -n 0 -m realsize' in _make_n("test-realsize")
    assert '-m pytest -q -n 0 -m served -rs' in _make_n("test-served") and "tools/vllm-cpu-env" in _make_n("vllm-env")
    one = _make_n("test", "TEST_WORKERS=0", "ARGS=--durations=15")  # one process
    assert "-m pytest -q -n 0 --dist loadfile --no-loadscope-reorder -m \"not realsize and not served\" --durations=15" in one
    demo = _make_n("demo", "ARGS=--config n_items=2", "VENV=/opt/env")
    assert "/opt/env/bin/snakemake --cores 1 --config n_items=2" in demo and 'PATH="/opt/env/bin:' in demo
    cpu = _make_n("env", "TORCH_INDEX=https://download.pytorch.org/whl/cpu")
    assert "--index-url https://download.pytorch.org/whl/cpu torch==2.14.1 torchvision==0.29.1" in cpu


def test_model_entries_plain_ids_and_mappings():
    got = core.model_entries(["org/a", {"id": "org/b", "n_items": 4}, {"id": "org/c"}], 6, "models")
    assert [tuple(e[:2]) for e in got] == [("org/a", 6), ("org/b", 4), ("org/c", 6)]
    assert [e.id for e in got] == ["org/a", "org/b", "org/c"] and got[1].n_items == 4
    # more than the run has: all of them (as n_verbal_items)
    assert [tuple(e[:2]) for e in core.model_entries([{"id": "org/b", "n_items": 600}], 8)] == [("org/b", 8)]
    assert [tuple(e[:2]) for e in core.model_entries(["org/a"], None)] == [("org/a", None)]


def test_model_entries_served():
    """A served entry keeps its id as identity; served_model defaults to the id; without server nothing changes."""
    got = core.model_entries(["org/a", {"id": "org/b", "server": "http://127.0.0.1:8000/v1/", "max_in_flight": 4},
                              {"id": "org/c", "server": "https://h/v1", "served_model": "c-fp32"}], 6)
    assert got[0] == ("org/a", 6, None, None, None)
    assert got[1] == ("org/b", 6, "http://127.0.0.1:8000/v1", "org/b", 4)
    assert (got[2].server, got[2].served_model, got[2].max_in_flight) == ("https://h/v1", "c-fp32", None)
    assert core.model_entries(got, 6) == got  # entries pass through unchanged
    assert core.model_entries('[{id: org/b, server: "http://h:1/v1"}]', 3)[0].server == "http://h:1/v1"


def test_model_entries_from_text():
    """papermill -p models '[...]' passes a string: it is parsed as YAML/JSON, not iterated over."""
    assert [tuple(e[:2]) for e in core.model_entries('["org/a", "org/b"]', 3)] == [("org/a", 3), ("org/b", 3)]
    assert [tuple(e[:2]) for e in core.model_entries('[org/a, {id: org/b, n_items: 2}]', 3)] == [("org/a", 3), ("org/b", 2)]
    assert [tuple(e[:2]) for e in core.model_entries('[{"id": "org/b", "n_items": 2}]', 3)] == [("org/b", 2)]
    assert [tuple(e[:2]) for e in core.model_entries("org/a", 3)] == [("org/a", 3)]
    for bad in ('["org/a", ', "org/a, org/b"):
        with pytest.raises(ValueError, match=r"-y 'models: \[") as e:
            core.model_entries(bad, 3)
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("entries, match", [
    ([{"id": "org/a", "n": 3}], r"unknown key\(s\) n; the keys are id, n_items, server"),
    ([{"n_items": 3}], "has no id"),
    ([{"id": "org/a", "n_items": 0}], "n_items must be a whole number of items >= 1"),
    ([{"id": "org/a", "n_items": 2.5}], "n_items must be a whole number"),
    ([{"id": "org/a", "n_items": True}], "n_items must be a whole number"),
    (["org/a", {"id": "org/a", "n_items": 2}], r"lists org/a twice \(entries 1 and 2\)"),
    ([], "is empty"),
    ({"id": "org/a"}, "must be a list of models"),
    ([3], "neither a model id nor a mapping"),
    ([{"id": "org/a", "server": "127.0.0.1:8000"}], "server must be the base URL"),
    ([{"id": "org/a", "server": "http://h/v1; rm -rf /"}], "server must be the base URL"),
    ([{"id": "org/a", "served_model": "a"}], "served_model without server: add server"),
    ([{"id": "org/a", "server": "http://h:8000/v1", "max_in_flight": 0}], "max_in_flight must be a whole number"),
    (["runs/a\nb/final"], r"the model id 'runs/a\\nb/final' holds U\+000A \(a line break\).*: rename the folder"),
    (["runs/a\r\n"], r"U\+000D \(a line break\), U\+000A \(a line break\)"),
    ([{"id": "/ckpt/smol\u202evlm"}], r"U\+202E \(RIGHT-TO-LEFT OVERRIDE\)"),
    (["org/a\u200b"], r"U\+200B \(ZERO WIDTH SPACE\)"),
    (["org/a\u2028b"], r"U\+2028 \(a line break\)"),
    ([{"id": "org/a", "server": "http://h:8000/v1", "served_model": "a\tb"}], r"served_model 'a\\tb' holds U\+0009"),
])
def test_model_entries_refusals_name_the_setting_and_the_fix(entries, match):
    with pytest.raises(ValueError, match=match) as e:
        core.model_entries(entries, 6, "offline_models (data/workflow.yaml)")
    assert "offline_models (data/workflow.yaml)" in str(e.value) and "\n" not in str(e.value)   # one line


def test_a_model_folder_with_a_line_break_is_refused_naming_the_file_and_the_fix(tmp_path):
    """Issue 49: a folder whose name holds a line break exists, yet the run settings refuse it before any job, in
    one line naming the settings file, the entry and the fix (it would reach the paper unlike itself); a folder
    named with markup (HTML, a Markdown link, mathtext) is data and is accepted."""
    import yaml

    odd, markup = tmp_path / "run\nfinal", tmp_path / "<img src=x onerror=alert(1)> [x](javascript:alert(1)) $x$"
    odd.mkdir()
    markup.mkdir()
    cfg = yaml.safe_load((ROOT / "data" / "workflow.yaml").read_text())
    cfg["offline_models"] = [str(odd)]
    with pytest.raises(core.SettingsError) as e:
        core.check_run_settings(cfg, origins={"offline_models": "run.yaml (--configfile)"}, offline=True, cwd=tmp_path)
    (line,) = e.value.problems
    assert line.startswith("offline_models: ") and " in run.yaml (--configfile): offline_models, entry 1: " in line
    assert "U+000A (a line break)" in line and line.endswith("rename the folder (or give the id) without it")
    cfg["offline_models"] = [str(markup)]
    assert [m.id for m in core.check_run_settings(cfg, offline=True, cwd=tmp_path).model_entries] == [str(markup)]


def test_study_settings_express_the_spec_design():
    """data/study.yaml: 1000 items, three models on all of them, two on the first 600 and 400 (spec Sec. I)."""
    import yaml

    study = yaml.safe_load((ROOT / "data" / "study.yaml").read_text())
    got = core.model_entries(study["models"], study["n_items"], "models (data/study.yaml)")
    assert study["n_items"] == 1000 and sorted(e.n_items for e in got) == [400, 600, 1000, 1000, 1000]
    n_of = {e.id: e.n_items for e in got}
    assert n_of["google/gemma-4-E2B-it"] == 600 and n_of["Qwen/Qwen3-VL-4B-Instruct"] == 400
    assert all(e.server is None for e in got)  # the study reads out in-process


def _plan(tmp_path, settings: dict, *config: str):
    """``snakemake -n -p`` with a configfile of ``settings`` (offline), as a user writes one."""
    import yaml

    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(settings, sort_keys=False))
    env = {**os.environ, "MURK_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run([sys.executable, "-m", "snakemake", "-n", "-p", "--forceall", "--configfile", str(cfg),
                           "--config", f"output_dir={tmp_path / 'out'}", *config],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_per_model_item_counts_plan_their_reads_and_shards(tmp_path):
    """Model entries with n_items (a configfile): each read-out gets its item count, each model
    ceil(n / shard_size) shards, and the analyse stage the same entries."""
    settings = {"n_items": 5, "offline_models": ["murk-tiny/smolvlm", {"id": "murk-tiny/qwen3vl", "n_items": 3},
                                                 {"id": "murk-tiny/gemma", "n_items": 2}]}
    r = _plan(tmp_path, settings, "shard_size=2")
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout + r.stderr
    jobs = [b for b in out.split("\nrule ")[1:] if b.startswith("readout_shard:")]
    shards = sorted(re.search(r"readout/([^/]+)/s2-(\d+)\.done", b).groups() for b in jobs)
    assert shards == [("murk-tiny--gemma", "0000"), ("murk-tiny--qwen3vl", "0000"), ("murk-tiny--qwen3vl", "0001"),
                      ("murk-tiny--smolvlm", "0000"), ("murk-tiny--smolvlm", "0001"), ("murk-tiny--smolvlm", "0002")]
    for b in jobs:
        slug = re.search(r"readout/([^/]+)/s2-", b).group(1)
        assert f"-p max_items {dict(smolvlm=5, qwen3vl=3, gemma=2)[slug.split('--')[1]]} " in b
    assert ('-y \'{"models": [{"id": "murk-tiny/smolvlm", "n_items": 5}, {"id": "murk-tiny/qwen3vl", "n_items": 3}, '
            '{"id": "murk-tiny/gemma", "n_items": 2}]}\'') in out


def test_a_bad_model_entry_is_refused_by_snakemake_naming_the_setting(tmp_path):
    r = _plan(tmp_path, {"offline_models": [{"id": "murk-tiny/qwen3vl", "items": 3}]})
    assert r.returncode != 0
    err = r.stdout + r.stderr
    assert "run.yaml (--configfile): offline_models, entry 1" in err  # the file that set it (murk.core.settings)
    assert "unknown key(s) items; the keys are id, n_items, server, served_model, max_in_flight" in err


def test_two_folders_with_the_same_last_part_get_their_own_stores(tmp_path):
    """One slug function (murk.core.model_slug) for the Snakefile's markers and the notebooks' stores and
    numbers keys: two checkpoints ``…/run1/final`` and ``…/run2/final`` never share a store or a key."""
    a, b = str(tmp_path / "run1" / "final"), str(tmp_path / "run2" / "final")
    assert paths.model_slug(a) != paths.model_slug(b)
    assert paths.readout_store(a, tmp_path) != paths.readout_store(b, tmp_path)
    assert paths.model_slug("murk-tiny/smolvlm") == "murk-tiny--smolvlm"   # hub-style ids as before
    r = _plan(tmp_path, {"offline_models": [a, b]})
    assert r.returncode != 0 and "neither a hub id" in r.stdout + r.stderr   # a model folder must exist (murk.core.settings)
    Path(a).mkdir(parents=True), Path(b).mkdir(parents=True)
    r = _plan(tmp_path, {"offline_models": [a, b]})
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout + r.stderr
    for m in (a, b):  # the marker the rule writes is the one of the store the notebook writes
        assert f"readout/{paths.model_slug(m)}.done" in out
        assert workflow.store_of(paths.readout_store(m, tmp_path).with_suffix(".done")) == paths.readout_store(m, tmp_path)


# --- one identity per run (issue 21) ---
def test_run_id_is_a_short_digest_of_the_selection():
    a = workflow.run_id("c" * 64, "i" * 64)
    assert re.fullmatch(r"r-[0-9a-f]{12}", a)
    assert a == workflow.run_id("c" * 64, "i" * 64)                     # the same selection, the same identity
    assert len({a, workflow.run_id("d" * 64, "i" * 64), workflow.run_id("c" * 64, "j" * 64),
                workflow.run_id("i" * 64, "c" * 64)}) == 4             # each hash counts, in its place
    assert workflow.run_id_of({"config_hash": "c" * 64, "items_hash": "i" * 64, "run_id": "r-ignored"}) == a
    assert workflow.run_id_of({"config_hash": "c" * 64}) is None and workflow.run_id_of(None) is None
    with pytest.raises(ValueError, match="items_hash.*select stage"):
        workflow.run_id("c" * 64, "")


def test_analysis_id_changes_with_models_items_inputs_and_settings():
    base = dict(run="r-000000000000", models=[("a", 4), ("b", 3)], digests={"readout/a.zarr": "sha256:1"},
                settings={"shard_size": None})
    a = workflow.analysis_id(**base)
    assert re.fullmatch(r"a-[0-9a-f]{12}", a) and a == workflow.analysis_id(**base)
    others = [dict(base, run="r-000000000001"), dict(base, models=[("a", 4)]), dict(base, models=[("a", 4), ("b", 2)]),
              dict(base, models=[("b", 3), ("a", 4)]), dict(base, digests={"readout/a.zarr": "sha256:2"}),
              dict(base, settings={"shard_size": 2})]
    ids = [workflow.analysis_id(**o) for o in others]
    assert a not in ids and len(set(ids)) == len(ids)


def test_a_stage_refuses_stores_of_another_run_naming_both_identities(tmp_path):
    this = workflow.run_id("c" * 64, "i" * 64)
    ok = tmp_path / "readout" / "a.zarr"
    other = tmp_path / "readout" / "b.zarr"
    lying = tmp_path / "readout" / "c.zarr"
    for p, attrs in ((ok, {"config_hash": "c" * 64, "items_hash": "i" * 64}),
                     (other, {"config_hash": "c" * 64, "items_hash": "j" * 64}),
                     (lying, {"config_hash": "c" * 64, "items_hash": "i" * 64, "run_id": "r-0123456789ab"})):
        p.mkdir(parents=True)
        (p / ".zattrs").write_text(json.dumps(attrs))
    workflow.refuse_other_run([ok, tmp_path / "readout" / "absent.zarr"], this, "analyse")   # nothing to refuse
    before = sorted((p, p.stat().st_mtime_ns) for p in tmp_path.rglob("*"))
    with pytest.raises(ValueError) as e:
        workflow.refuse_other_run([ok, other, lying], this, "analyse", tmp_path / "items.json")
    msg = str(e.value)
    other_id = workflow.run_id("c" * 64, "j" * 64)
    assert this in msg and other_id in msg and "r-0123456789ab" in msg and str(tmp_path / "items.json") in msg
    assert str(other) in msg and str(lying) in msg and f"{ok}:" not in msg
    assert "rm -r" in msg and "make demo" in msg and "nothing was written" in msg
    assert sorted((p, p.stat().st_mtime_ns) for p in tmp_path.rglob("*")) == before
    # a depth cache written for another run is refused too; one without a run identity (older) is accepted
    workflow.refuse_other_depth({"depth_backend": "constant"}, this, "readout")
    workflow.refuse_other_depth({"run_id": this}, this, "readout")
    with pytest.raises(ValueError, match=f"{other_id}.*{this}.*depth stage"):
        workflow.refuse_other_depth({"run_id": other_id}, this, "readout", "out/depth/current.json")


def test_identity_bundle_is_json_and_text():
    b = workflow.identity_bundle(run_id="r-1", analysis_id="a-2", models=["m"])
    assert b[core.IDENTITY_MIME] == {"run_id": "r-1", "analysis_id": "a-2", "models": ["m"]}
    assert b["text/plain"] == "murk identity: run_id r-1, analysis_id a-2"


def test_a_restored_update_output_gets_its_time_back(tmp_path):
    """Snakemake restores a failed job's update() output by copying its backup (a new modification time):
    restore_times puts the recorded time back, only where the content is the recorded one."""

    same, changed = tmp_path / "items.json", tmp_path / "items_meta.json"
    same.write_text("[1]")
    changed.write_text("{}")
    for p in (same, changed):
        os.utime(p, ns=(10**18, 10**18))
    states = workflow.file_states([same, changed, tmp_path / "absent.json"])
    assert set(states) == {str(same), str(changed)}
    backup = tmp_path / "backup"
    shutil.copy(same, backup)
    shutil.copy(backup, same)  # what Snakemake's restore does: same bytes, a new time
    changed.write_text('{"x": 1}')  # rewritten by a job that ran: keeps its new time
    assert same.stat().st_mtime_ns != 10**18
    assert workflow.restore_times(states) == [same]
    assert same.stat().st_mtime_ns == 10**18 and changed.stat().st_mtime_ns != 10**18


def test_force_rerun_adds_the_marker_to_the_dags_forced_files():
    from types import SimpleNamespace

    wf = SimpleNamespace(dag=SimpleNamespace(forcefiles=set()))
    assert workflow.force_rerun(wf, "out/readout/m.done") and wf.dag.forcefiles == {"out/readout/m.done"}
    assert not workflow.force_rerun(SimpleNamespace(dag=None), "out/readout/m.done")  # the Snakefile then refuses


def test_a_changed_configuration_forces_select_from_what_the_root_records(tmp_path):
    """Issue 49 item 5: a root whose items_meta.json records another config hash than the run's configuration
    has now (a copied root, a second checkout: no Snakemake metadata, file times that say nothing) plans select
    again with one line, and the plan writes nothing."""
    from murk import pipeline

    root = tmp_path / "copied"
    root.mkdir()
    (root / "items.json").write_text("[]\n")
    (root / "items_meta.json").write_text(json.dumps({"config_hash": "0" * 64, "items_hash": "i", "image_sha256": {}}))
    assert pipeline.configuration_changed(root, "0" * 64) is None
    assert pipeline.configuration_changed(tmp_path / "none", "1" * 64) is None   # no selection yet
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    env = {**os.environ, "MURK_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    r = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--config", f"output_dir={root}", "n_items=2",
                        'offline_models=["murk-tiny/smolvlm"]', "--", f"{root}/items.json"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    text = r.stdout + r.stderr
    assert r.returncode == 0, text[-3000:]
    line = [ln for ln in text.splitlines() if ln.startswith("murk: the configuration (config hash ")]
    assert len(line) == 1 and f"is not the one select recorded in {root}/items_meta.json (000000000000)" in line[0]
    assert "select would run again" in line[0] and re.search(r"^(local)?rule select:", text, re.M), text[-3000:]
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before
