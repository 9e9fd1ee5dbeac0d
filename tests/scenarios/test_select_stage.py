"""The select stage through papermill, as users meet it (issue 21): a changed configuration is refused for an
existing run before anything is written, and a run without a name is the offline demo's. The frozen record
itself: tests/test_config.py."""

import json

import pytest

from murk.core import _config as mc
from murk.protocol import _item_files
from murk.protocol import _items as items

import stages  # tests/stages.py: the stage notebooks through papermill
from test_config import frozen  # noqa: F401  (the fixture: a fresh MURK_FROZEN_DIR for the test)

SAMPLE = stages.SAMPLE
needs_sample = stages.needs_sample


@needs_sample
@pytest.mark.slow
def test_select_stage_refuses_a_changed_config_for_an_existing_run(frozen, tmp_path, monkeypatch):
    """A changed config changes the config hash and is refused for the existing run, before anything is
    written (through the select notebook, as users meet it); a new run name is accepted."""
    import papermill
    import yaml

    monkeypatch.setenv("MURK_OFFLINE", "1")
    out = tmp_path / "out"
    stages.run("01_select", out, coco_dir=str(SAMPLE), n_items=3, seed=1, run_name="r1")
    table = _item_files.load_items(out / "items.json")
    meta = json.loads((out / "items_meta.json").read_text())
    rec = json.loads((frozen / "r1.json").read_text())
    assert meta["run_name"] == "r1" and meta["items_hash"] == _item_files.items_hash(table) == rec["items_hash"]
    assert meta["config_hash"] == rec["config_hash"] == mc.config_hash()
    report = json.loads((out / "items_report.json").read_text())
    assert report["n_candidates"] == 37 and report["n_items"] == 3
    # the same run again: fine
    stages.run("01_select", out, coco_dir=str(SAMPLE), n_items=3, seed=1, run_name="r1")
    # a changed configuration ($MURK_CONFIG: every stage reads it)
    changed = mc.load_config()
    changed["prompts"]["abstain"] = "I am not sure"
    (tmp_path / "changed.yaml").write_text(yaml.safe_dump(changed, sort_keys=False), encoding="utf-8")
    monkeypatch.setenv("MURK_CONFIG", str(tmp_path / "changed.yaml"))
    before = (out / "items.json").stat().st_mtime_ns
    with pytest.raises(papermill.PapermillExecutionError, match="r1.json"):
        stages.run("01_select", out, coco_dir=str(SAMPLE), n_items=3, seed=1, run_name="r1")
    assert (out / "items.json").stat().st_mtime_ns == before  # nothing written
    stages.run("01_select", tmp_path / "out2", coco_dir=str(SAMPLE), n_items=3, seed=1, run_name="r2")
    assert json.loads((frozen / "r2.json").read_text())["config_hash"] == mc.config_hash(changed) != rec["config_hash"]
    # other items under the first config are refused too
    monkeypatch.delenv("MURK_CONFIG")
    with pytest.raises(papermill.PapermillExecutionError, match="items_hash"):
        stages.run("01_select", out, coco_dir=str(SAMPLE), n_items=4, seed=1, run_name="r1")


@pytest.mark.slow  # the select notebook through papermill (end to end: out of `make test-fast`)
def test_default_run_name(frozen, tmp_path, monkeypatch, coco_sample):
    monkeypatch.setenv("MURK_OFFLINE", "1")
    stages.run("01_select", tmp_path / "o", coco_dir=str(SAMPLE), n_items=2, seed=1)
    assert (frozen / "offline-demo.json").is_file()
