"""Tests of murk.core: the configuration hash, the frozen run record, Table III."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest

from murk.core import _config as mc
from murk.core import _paths as paths


@pytest.fixture
def frozen(tmp_path, monkeypatch):
    """A fresh MURK_FROZEN_DIR for this test."""
    d = tmp_path / "frozen"
    monkeypatch.setenv("MURK_FROZEN_DIR", str(d))
    return d


# ----------------------------------------------------------------------------- config hash

def test_config_hash_is_canonical():
    cfg = mc.load_config()
    h = mc.config_hash(cfg)
    assert len(h) == 64 and h == mc.config_hash() == mc.config_hash(copy.deepcopy(cfg))
    reordered = {k: cfg[k] for k in reversed(list(cfg))}  # key order does not matter
    assert mc.config_hash(reordered) == h


@pytest.mark.parametrize("section, key, value", [
    ("items", "min_box_side_px", 32),
    ("render", "box_width_px", 3),
    ("prompts", "abstain", "I am not sure"),
    ("readout", "assistant_prefill", "A:"),
])
def test_config_hash_changes_with_any_setting(section, key, value):
    cfg = mc.load_config()
    changed = copy.deepcopy(cfg)
    changed[section][key] = value
    assert mc.config_hash(changed) != mc.config_hash(cfg)


def test_config_hash_is_the_same_in_another_process():
    code = "from murk.core import config_hash; print(config_hash())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "99"})
    assert out.stdout.strip() == mc.config_hash()


def test_config_holds_the_spec_texts():
    cfg = mc.load_config()
    p = cfg["prompts"]
    assert p["abstain"] == "I cannot tell, the image is too unclear to decide"
    assert p["abstain2"] == "I don't know"
    assert cfg["readout"]["assistant_prefill"] == "Answer:"
    assert set(p["verbal_wordings"]) == {"v1", "v2", "v3"}
    assert (cfg["render"]["box_width_px"], cfg["render"]["box_color_rgb"]) == (8, [255, 0, 0])
    assert cfg["items"]["shuffle_offset"] == 37
    assert not {"n_items", "seed"} & set(cfg["items"])   # run settings (data/workflow.yaml, data/study.yaml)


# ----------------------------------------------------------------------------- frozen record

def test_frozen_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("MURK_FROZEN_DIR", raising=False)
    assert mc.frozen_folder() == paths.data_dir() / "frozen"
    monkeypatch.setenv("MURK_FROZEN_DIR", str(tmp_path))
    assert mc.frozen_folder() == tmp_path
    assert mc.frozen_folder(tmp_path / "x") == tmp_path / "x"


def test_freeze_run_writes_then_checks(frozen):
    rec = mc.freeze_run("study", "c" * 64, "i" * 64, n_items=1000, seed=1,
                        annotation_file="/somewhere/annotations/instances_val2017.json")
    f = frozen / "study.json"
    on_disk = json.loads(f.read_text(encoding="utf-8"))
    assert on_disk == rec
    assert rec["config_hash"] == "c" * 64 and rec["items_hash"] == "i" * 64
    assert (rec["n_items"], rec["seed"], rec["annotation_file"]) == (1000, 1, "instances_val2017.json")
    assert rec["created"].endswith("+00:00")
    # the same hashes again: accepted, record untouched
    assert mc.freeze_run("study", "c" * 64, "i" * 64) == rec
    assert json.loads(f.read_text(encoding="utf-8")) == on_disk
    # another config hash, or other items: refused, naming the record and the fix
    for ch, ih, what in (("d" * 64, "i" * 64, "config_hash"), ("c" * 64, "j" * 64, "items_hash")):
        with pytest.raises(ValueError, match="new run_name") as e:
            mc.freeze_run("study", ch, ih)
        assert str(f) in str(e.value) and what in str(e.value) and "delete the record" in str(e.value)
    assert json.loads(f.read_text(encoding="utf-8")) == on_disk
    # a new run name is accepted
    assert mc.freeze_run("study-2", "d" * 64, "i" * 64)["config_hash"] == "d" * 64
    assert sorted(p.name for p in frozen.iterdir()) == ["study-2.json", "study.json"]


def test_freeze_run_explicit_folder_and_errors(tmp_path, frozen):
    mc.freeze_run("a", "c" * 64, "i" * 64, tmp_path / "elsewhere")
    assert (tmp_path / "elsewhere" / "a.json").is_file() and not frozen.exists()
    for bad in ("", "../x", "a/b", ".hidden", "x" * 101):
        with pytest.raises(ValueError, match="run_name"):
            mc.freeze_run(bad, "c" * 64, "i" * 64)
    frozen.mkdir()
    (frozen / "broken.json").write_text("[1, 2", encoding="utf-8")
    with pytest.raises(ValueError, match="broken.json"):
        mc.freeze_run("broken", "c" * 64, "i" * 64)


def test_murk_config_names_the_configuration(tmp_path, monkeypatch):
    (tmp_path / "c.yaml").write_text("items:\n  seed: 3\n", encoding="utf-8")
    monkeypatch.setenv("MURK_CONFIG", str(tmp_path / "c.yaml"))
    assert paths.config_file() == tmp_path / "c.yaml" and mc.load_config() == {"items": {"seed": 3}}
    monkeypatch.delenv("MURK_CONFIG")
    assert paths.config_file() == paths.data_dir() / "config.yaml"


# ----------------------------------------------------------------------------- Table III

def test_settings_table():
    rows = mc.settings_table()
    table = {r["setting"]: r["value"] for r in rows}
    assert table["items.min_box_side_px"] == "48"
    assert table["items.supercategories"] == "vehicle, outdoor"
    assert table["render.box_width_px"] == "8"
    assert not any(k.startswith("prompts.") for k in table)
    assert all(set(r) == {"setting", "value"} for r in rows)


def _readers() -> set[str]:
    """The keys read by subscript or ``.get`` anywhere in lib/murk and the notebooks (``x["key"]``,
    ``x.get("key", ...)``)."""
    import ast

    root = paths.project_root()
    keys: set[str] = set()
    for f in [*(root / "lib" / "murk").rglob("*.py"), *(root / "notebooks").glob("*.py")]:
        for n in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str):
                keys.add(n.slice.value)
            elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get" and n.args
                  and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str)):
                keys.add(n.args[0].value)
    return keys


def _unread(cfg: dict, readers: set[str]) -> list[str]:
    """Settings of a configuration that no code reads: a leaf, or a mapping read whole (``chance``), must be
    read by its key."""
    out = []
    for section, body in cfg.items():
        if section == "prompts":          # Table II: murk.prompts reads the templates, tests/test_prompts.py
            continue
        if section not in readers:
            out.append(section)
            continue
        for key in body if isinstance(body, dict) else []:
            if key not in readers:
                out.append(f"{section}.{key}")
    return out


def test_every_row_of_the_settings_table_is_the_value_that_ran(tmp_path):
    """spec Table III (tbl-config, murk.report.settings_rows): each row is the value the code used. A setting
    of data/config.yaml has a reader (a key no code reads, as depth.min_m was while murk.depth clipped with
    its own constants, fails here); a constant in code is printed from the code and agrees with what the
    code computes with it; a choice of the run is printed from its record."""
    import numpy as np

    from murk import readout as verbal
    from murk import report as paper
    from murk import scene
    from murk.protocol import _design as design
    from murk.results import _cube as cube
    from murk.scene import _depth as depth
    from murk.scene import _nominal as nominal
    from murk.scene import _physics as physics

    cfg = mc.load_config()
    readers = _readers()
    assert _unread(cfg, readers) == []
    planted = copy.deepcopy(cfg)
    planted["depth"] = {"min_m": 0.3}                      # a value with two homes: the test notices
    assert _unread(planted, readers) == ["depth.min_m"]
    planted = copy.deepcopy(cfg)
    planted["readout"]["decoding"] = "beam"
    assert _unread(planted, readers) == ["readout.decoding"]

    meta = {"annotation_file": "/x/annotations/instances_val2017.json", "n_items": 8, "seed": 1}
    attrs = {"depth_backend": "depth-anything-v2:m", "depth_model": "org/m"}
    rows = paper.settings_rows(cfg, meta, attrs)
    table = {r["setting"]: r["value"] for r in rows}
    assert len(table) == len(rows) and all(r["source"] for r in rows)
    frozen = {r["setting"]: r["value"] for r in mc.settings_table(cfg)}
    assert {k: table[k] for k in frozen} == frozen
    assert [r["source"] for r in rows if r["setting"] in frozen] == ["data/config.yaml"] * len(frozen)

    def floats(key):
        return np.array([float(v) for v in table[key].split(", ")])

    # the run's choices, from its records
    assert (table["split"], table["n_items"], table["seed"], table["depth_model"]) == ("COCO val2017", "8", "1", "org/m")
    offline = {r["setting"]: r["value"] for r in paper.settings_rows(cfg, meta, {"depth_backend": "constant-13.8m",
                                                                               "depth_model": ""})}
    assert offline["depth_model"] == "constant-13.8m"
    assert paper.settings_rows(cfg)[1]["value"] == "not recorded"
    # the constants, against what the code computes with them
    v = np.array([2.0, 40.0])
    np.testing.assert_allclose(physics._fog_beta(v) * v, float(table["murk.scene.KOSCHMIEDER_CONSTANT"]), rtol=1e-12)
    np.testing.assert_array_equal(floats("murk.scene.SWEEP_M"), cube.level_coords()["visibility_m"].sel(arm="fog").values[1:])
    np.testing.assert_array_equal(floats("murk.scene.SWEEP_M"), design.sweep_of(cfg))
    pope = floats("murk.scene.POPE_FRY_ABSORPTION_PER_M")
    beta = physics._underwater_beta(3.912)
    np.testing.assert_allclose(beta / beta.min(), pope / pope.min(), rtol=1e-12)
    assert table["murk.scene.UNDERWATER_WAVELENGTHS_NM"] == "620, 540, 460"
    black = np.zeros((2, 2, 3), np.uint8)
    foggy = physics.fog_sweep(black, np.full((2, 2), 80.0, np.float32), np.array([1.953125]))[0]
    np.testing.assert_allclose(physics.srgb_to_linear(foggy), float(table["murk.scene.FOG_AIRLIGHT"]), atol=0.005)
    severities = [k for arm, k in scene.CONDITIONS if arm == "imagenet_c"]
    assert table["murk.scene.IMAGENET_C_SEVERITIES"] == ", ".join(map(str, severities))
    assert tuple(severities) == nominal.IMAGENET_C_SEVERITIES
    folder = tmp_path / "maps"
    folder.mkdir()
    np.save(folder / "7.npy", np.array([[0.01, 10.0], [5.0, 1e4]], np.float32))
    clipped = depth.get_backend("folder", str(folder))(np.zeros((2, 2, 3), np.uint8), image_id=7)
    assert (float(clipped.min()), float(clipped.max())) == (float(table["murk.scene.DEPTH_MIN_M"]),
                                                           float(table["murk.scene.DEPTH_MAX_M"]))
    assert table["murk.readout.DECODING"] == verbal.DECODING == "greedy"
