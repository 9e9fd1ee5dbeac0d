"""The workflow's bookkeeping (murk.workflow, the Snakefile): stale stores are noticed, stale locks
are removed, refusals write nothing (issue 14).

The unit tests check the markers and the lock; the slow tests run Snakemake on the offline demo
(one COCO item, one tiny checkpoint: a pipeline check) the way users run it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import xarray as xr

from murk import cube, paths, workflow

ROOT = paths.project_root()
SAMPLE = ROOT.parent / "shared" / "coco-val2017-sample"
MODEL = "murk-tiny/smolvlm"
needs_sample = pytest.mark.skipif(not SAMPLE.is_dir(), reason="../shared/coco-val2017-sample not present")


def _store(path: Path) -> Path:
    attrs = {"config_hash": "c", "items_hash": "i", "model_id": "m", "depth_backend": "constant-13.8m"}
    cube.open_readout_store(path, [11, 12], ["car", "bus"], attrs)
    r = {k: 0.5 for k in cube.READOUTS}
    r.update({k: "x" for k in cube.TEXT_READOUTS})
    cube.write_image(path, 0, {(a, lvl, t): r for a, lvl in cube.CONDITIONS for t in cube.TASKS})
    return path


def test_store_digest_follows_content_not_times(tmp_path):
    store = _store(tmp_path / "m.zarr")
    d = workflow.store_digest(store)
    assert d.startswith("sha256:") and workflow.store_digest(tmp_path / "none.zarr") == "absent"
    for f in store.rglob("*"):
        os.utime(f, (1, 1))
    (store / "value" / "0.0.0.0.0.abc.partial").write_bytes(b"half")  # a killed write's leftover
    assert workflow.store_digest(store) == d
    chunk = store / "value" / "0.0.0.0.0"
    chunk.write_bytes(chunk.read_bytes()[:-1])
    assert workflow.store_digest(store) != d


def test_stale_markers_are_named_and_dropped(tmp_path):
    folder = tmp_path / "readout"
    for name in ("ok", "changed", "deleted", "old"):
        _store(folder / f"{name}.zarr")
        workflow.write_marker(folder / f"{name}.done")
    (folder / "old.done").write_text("")  # a marker of an older murk (Snakemake's touch)
    workflow.write_marker(folder / "shard" / "s2-0005.done")  # a shard beyond the items: no store
    chunk = folder / "changed.zarr" / "done" / "0"
    chunk.write_bytes(b"")
    import shutil

    shutil.rmtree(folder / "deleted.zarr")
    assert workflow.stale_reason(folder / "ok.done") is None
    assert workflow.stale_reason(folder / "shard" / "s2-0005.done") is None
    dropped = dict(workflow.drop_stale_markers(folder))
    assert set(dropped) == {folder / "changed.done", folder / "deleted.done", folder / "old.done"}
    assert "changed after its marker" in dropped[folder / "changed.done"]
    assert "is missing" in dropped[folder / "deleted.done"]
    assert "no content digest" in dropped[folder / "old.done"]
    assert (folder / "ok.done").exists() and not (folder / "changed.done").exists()
    assert json.loads((folder / "ok.done").read_text())["store"] == "ok.zarr"


HOLD = """
import sys, time
from murk import workflow
removed = workflow.hold_run_lock(sys.argv[1])
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


# --- through Snakemake, as users run it ---

def _snakemake(out: Path, *args: str, config: tuple[str, ...] = (), timeout: int = 1500) -> subprocess.CompletedProcess:
    """``snakemake --cores 1 ARGS --config …`` (targets and flags go before --config, which takes the rest)."""
    env = {**os.environ, "MURK_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "MURK_COCO_DIR": str(SAMPLE),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "MPLBACKEND": "Agg"}
    cmd = [sys.executable, "-m", "snakemake", "--cores", "1", *args, "--config", f"output_dir={out}", "n_items=1",
           f'offline_models=["{MODEL}"]', "run_name=workflow-test", *config]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def _papermill_readout(out: Path, *params: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "MURK_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "MURK_COCO_DIR": str(SAMPLE),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "MPLBACKEND": "Agg"}
    cmd = (f"jupytext --to ipynb notebooks/03_readout.py -o - | papermill - {out}/by-hand.ipynb --cwd {ROOT} "
           f"-p output_dir {out} -p model {MODEL} " + " ".join(params))
    return subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)


@needs_sample
@pytest.mark.slow
def test_failed_select_keeps_the_previous_items(tmp_path):
    out = tmp_path / "out"
    r = _snakemake(out, f"{out}/items.json")
    assert r.returncode == 0, r.stderr[-3000:]
    before = (out / "items.json").read_bytes(), (out / "items_meta.json").read_bytes()
    r = _snakemake(out, f"{out}/items.json", config=("n_items=2",))  # other items under the same frozen run
    assert r.returncode != 0
    assert "workflow-test" in r.stdout + r.stderr  # the refusal names the frozen record
    assert ((out / "items.json").read_bytes(), (out / "items_meta.json").read_bytes()) == before


@needs_sample
@pytest.mark.slow
def test_stale_or_mixed_read_out_store_is_noticed(tmp_path):
    """A store read out by hand with other settings is refused, naming the setting, and left as it
    was; a store damaged or deleted after its marker makes Snakemake run its read-out again, which
    re-reads what is needed and ends with the same values."""
    out = tmp_path / "out"
    marker = out / "readout" / f"{paths.model_slug(MODEL)}.done"
    store = workflow.store_of(marker)
    r = _snakemake(out, f"{out}/depth/current.json")
    assert r.returncode == 0, r.stderr[-3000:]

    # by hand with another n_verbal_items (0) than the workflow's (2; the notebook's default is the workflow's),
    # then Snakemake
    r = _papermill_readout(out, "-p max_items 1", "-p n_verbal_items 0")  # (max_items 0 opens no store)
    assert r.returncode == 0, r.stderr[-3000:]
    digest = workflow.store_digest(store)
    r = _snakemake(out, str(marker))
    assert r.returncode != 0
    assert "n_verbal_items: store 0, this run 1" in r.stdout + r.stderr
    assert workflow.store_digest(store) == digest and not marker.exists()  # the refusal wrote nothing

    import shutil

    shutil.rmtree(store)
    r = _snakemake(out, str(marker))
    assert r.returncode == 0, r.stderr[-3000:]
    before = xr.open_zarr(store, consolidated=False).load()
    assert bool(before["done"].all()) and before.attrs["n_verbal_items"] == 1
    r = _snakemake(out, str(marker), "-n")
    assert "Nothing to be done" in r.stdout + r.stderr

    chunk = store / "value" / "0.0.0.0.0"  # damaged after the run (a power loss): zero bytes
    chunk.write_bytes(b"")
    r = _snakemake(out, str(marker), "-n")
    assert "changed after its marker was written" in r.stderr and "rule readout" in r.stdout + r.stderr
    r = _snakemake(out, str(marker))
    assert r.returncode == 0, r.stderr[-3000:]
    after = xr.open_zarr(store, consolidated=False).load()
    xr.testing.assert_identical(after["value"], before["value"])

    shutil.rmtree(store)  # deleted: its marker no longer vouches for anything
    r = _snakemake(out, str(marker), "-n")
    assert "is missing: its read-out runs again" in r.stderr and "rule readout" in r.stdout + r.stderr


# --- the Makefile's plumbing (make -n prints the recipes and runs none of them) ---

def _make_n(*args: str) -> str:
    import shutil

    if shutil.which("make") is None:
        pytest.skip("make not installed")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return subprocess.run(["make", "-n", "-C", str(ROOT), *args], capture_output=True, text=True, check=True,
                          env=env).stdout


def test_make_targets_pass_args_and_lab_runs_as_root():
    lab = _make_n("lab", "ARGS=--no-browser --port 8899")
    want = "--allow-root --no-browser --port 8899 notebooks/" if os.getuid() == 0 else " --no-browser --port 8899 notebooks/"
    assert "jupyter lab" in lab and want in lab
    assert '-m pytest -q -m "not slow" -k cube' in _make_n("test-fast", "ARGS=-k cube")
    full = _make_n("test")
    assert "-m pytest -q" in full and "not slow" not in full  # make test stays the whole suite
    demo = _make_n("demo", "ARGS=--config n_items=2", "VENV=/opt/env")
    assert "/opt/env/bin/snakemake --cores 1 --config n_items=2" in demo and 'PATH="/opt/env/bin:' in demo
    cpu = _make_n("env", "TORCH_INDEX=https://download.pytorch.org/whl/cpu")
    assert "--index-url https://download.pytorch.org/whl/cpu torch==2.14.1 torchvision==0.29.1" in cpu


def test_model_entries_plain_ids_and_mappings():
    got = workflow.model_entries(["org/a", {"id": "org/b", "n_items": 4}, {"id": "org/c"}], 6, "models")
    assert got == [("org/a", 6), ("org/b", 4), ("org/c", 6)]
    assert [e.id for e in got] == ["org/a", "org/b", "org/c"] and got[1].n_items == 4
    # more than the run has: all of them (as n_verbal_items)
    assert workflow.model_entries([{"id": "org/b", "n_items": 600}], 8) == [("org/b", 8)]
    assert workflow.model_entries(["org/a"], None) == [("org/a", None)]


def test_model_entries_from_text():
    """papermill -p models '[...]' passes a string: it is parsed as YAML/JSON, not iterated over."""
    assert workflow.model_entries('["org/a", "org/b"]', 3) == [("org/a", 3), ("org/b", 3)]
    assert workflow.model_entries('[org/a, {id: org/b, n_items: 2}]', 3) == [("org/a", 3), ("org/b", 2)]
    assert workflow.model_entries('[{"id": "org/b", "n_items": 2}]', 3) == [("org/b", 2)]
    assert workflow.model_entries("org/a", 3) == [("org/a", 3)]
    for bad in ('["org/a", ', "org/a, org/b"):
        with pytest.raises(ValueError, match=r"-y 'models: \[") as e:
            workflow.model_entries(bad, 3)
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("entries, match", [
    ([{"id": "org/a", "n": 3}], r"unknown key\(s\) n; the keys are id and n_items"),
    ([{"n_items": 3}], "has no id"),
    ([{"id": "org/a", "n_items": 0}], "n_items must be a whole number of items >= 1"),
    ([{"id": "org/a", "n_items": 2.5}], "n_items must be a whole number"),
    ([{"id": "org/a", "n_items": True}], "n_items must be a whole number"),
    (["org/a", {"id": "org/a", "n_items": 2}], r"lists org/a twice \(entries 1 and 2\)"),
    ([], "is empty"),
    ({"id": "org/a"}, "must be a list of models"),
    ([3], "neither a model id nor a mapping"),
])
def test_model_entries_refusals_name_the_setting_and_the_fix(entries, match):
    with pytest.raises(ValueError, match=match) as e:
        workflow.model_entries(entries, 6, "offline_models (data/workflow.yaml)")
    assert "offline_models (data/workflow.yaml)" in str(e.value)


def test_study_settings_express_the_spec_design():
    """data/study.yaml: 1000 items, three models on all of them, two on the first 600 and 400 (spec Sec. I)."""
    import yaml

    study = yaml.safe_load((ROOT / "data" / "study.yaml").read_text())
    got = workflow.model_entries(study["models"], study["n_items"], "models (data/study.yaml)")
    assert study["n_items"] == 1000 and sorted(n for _, n in got) == [400, 600, 1000, 1000, 1000]
    assert dict(got)["google/gemma-4-E2B-it"] == 600 and dict(got)["Qwen/Qwen3-VL-4B-Instruct"] == 400


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
    assert ('-y \'models: [{"id": "murk-tiny/smolvlm", "n_items": 5}, {"id": "murk-tiny/qwen3vl", "n_items": 3}, '
            '{"id": "murk-tiny/gemma", "n_items": 2}]\'') in out


def test_a_bad_model_entry_is_refused_by_snakemake_naming_the_setting(tmp_path):
    r = _plan(tmp_path, {"offline_models": [{"id": "murk-tiny/qwen3vl", "items": 3}]})
    assert r.returncode != 0
    err = r.stdout + r.stderr
    assert "offline_models (data/workflow.yaml, --configfile or --config), entry 1" in err
    assert "unknown key(s) items; the keys are id and n_items" in err


def test_two_folders_with_the_same_last_part_get_their_own_stores(tmp_path):
    """One slug function (murk.paths.model_slug) for the Snakefile's markers and the notebooks' stores and
    numbers keys: two checkpoints ``…/run1/final`` and ``…/run2/final`` never share a store or a key."""
    a, b = str(tmp_path / "run1" / "final"), str(tmp_path / "run2" / "final")
    assert paths.model_slug(a) != paths.model_slug(b)
    assert paths.readout_store(a, tmp_path) != paths.readout_store(b, tmp_path)
    assert paths.model_slug("murk-tiny/smolvlm") == "murk-tiny--smolvlm"   # hub-style ids as before
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
    assert b[workflow.IDENTITY_MIME] == {"run_id": "r-1", "analysis_id": "a-2", "models": ["m"]}
    assert b["text/plain"] == "murk identity: run_id r-1, analysis_id a-2"
