"""The run settings are validated before anything runs (issue 21, part 5): murk.core.settings's schema of the
keys, types and ranges of data/workflow.yaml, applied by the Snakefile (also in a dry run) and by the
notebooks' parameters that mirror a run setting (murk.core.run_default).

The unit tests check the schema; the Snakemake tests run ``snakemake -n`` (a dry run, seconds) with bad
settings as users type them and check that each refusal names the key and that nothing was written.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from murk.core import COMMAND_LINE, PAPERMILL, SettingsError, announce, check_run_settings, check_setting, settings
from murk.core import _config as config
from murk.core import _paths as paths

ROOT = paths.project_root()


def _defaults() -> dict:
    return yaml.safe_load((ROOT / "data" / "workflow.yaml").read_text())


def _refusal(key, value, origin=COMMAND_LINE) -> str:
    with pytest.raises(SettingsError) as e:
        check_setting(key, value, origin)
    return str(e.value)


# --- the schema ---

def test_the_schema_lists_exactly_the_keys_of_workflow_yaml_and_accepts_its_defaults_and_the_study(tmp_path):
    defaults = _defaults()
    assert list(settings.SCHEMA) == list(defaults)  # a new run setting is added to both, in the same order
    run = check_run_settings(defaults, offline=True, cwd=ROOT)
    assert run.settings == {**defaults, "output_dir": "outputs"}
    study = {**defaults, **yaml.safe_load((ROOT / "data" / "study.yaml").read_text())}
    run = check_run_settings(study, offline=False, cwd=ROOT)
    assert [e.n_items for e in run.model_entries] == [1000, 400, 1000, 1000, 600]
    for profile in sorted((ROOT / "profiles").glob("*/config.yaml")):  # a profile's config: entries are run settings
        entries = (yaml.safe_load(profile.read_text()) or {}).get("config") or []
        for entry in entries:
            k, _, v = str(entry).partition("=")
            check_setting(k, yaml.safe_load(v), f"{profile.relative_to(ROOT)}")


def test_an_unknown_key_is_refused_with_the_nearest_known_key():
    msg = _refusal("n_itmes", 2)
    assert msg.startswith("--config n_itmes=2: n_itmes is not a run setting: did you mean n_items?")
    assert "data/workflow.yaml" in msg
    assert "did you mean shard_size?" in _refusal("shard_szie", 4)
    assert "did you mean offline_models?" in _refusal("ofline_models", ["x"])
    far = _refusal("colour", "red")  # nothing near: the known keys are listed
    assert "did you mean" not in far and "n_items, seed" in far


@pytest.mark.parametrize("key, value, why", [
    ("n_items", "abc", "got text"), ("n_items", 0, "got 0, below 1"), ("n_items", 2.5, "a number with a fraction"),
    ("n_items", True, "got a boolean"), ("n_items", None, "it is not set"),
    ("shard_size", 0, "below 1"), ("shard_size", -3, "below 1"), ("shard_size", "x", "got text"),
    ("seed", -1, "below 0"), ("n_verbal_items", -1, "below 0"), ("n_verbal_items", "two", "got text"),
    ("trust_remote_code", "yes", "the text 'yes'"), ("allow_pickle", 1, "got 1"), ("allow_pickle", "on", "'on'"),
    ("depth_backend", "cnstant", "did you mean constant?"), ("device", 0, "got a number"), ("device", "gpu", ""),
    ("run_name", "2025", ""), ("run_name", "a b", ""), ("split", "", "it is not set"),
    ("output_dir", "out put", "a blank"), ("output_dir", "o{x}", "'{'"), ("output_dir", None, "it is not set"),
    ("binary_task", "existance", "did you mean existence?"), ("distractors", "uniformly", "did you mean uniform?"),
    ("box_width_px", 0, "got 0, below 1"), ("abstain_wordings", 3, "got 3, above 2"),
    ("sweep_end_m", 3.0, "got 3, not a level of the sweep"), ("sweep_end_m", "deep", "got text"),
])
def test_a_wrong_type_or_range_is_refused_naming_the_key_as_typed_and_the_form(key, value, why):
    msg = _refusal(key, value)
    typed = "" if value is None else str(value)
    assert msg.startswith(f"--config {key}={typed}: {key} must be {settings.SCHEMA[key].form}")
    assert why in msg
    assert f"e.g. --config {key}={settings.SCHEMA[key].example}" in msg


def test_values_as_snakemake_and_papermill_pass_them_are_normalised():
    # --config passes True/False as booleans, other words as text; null as the text "null"; `key=` as None
    assert check_setting("trust_remote_code", "true") is True and check_setting("allow_pickle", "False") is False
    assert check_setting("allow_pickle", True) is True
    assert check_setting("shard_size", "null") is None and check_setting("shard_size", None) is None
    assert check_setting("shard_size", "~") is None and check_setting("device", "none") is None
    assert check_setting("n_items", " 12 ") == 12 and check_setting("seed", 0) == 0
    assert check_setting("n_verbal_items", 0) == 0 and check_setting("device", "cuda:1") == "cuda:1"
    assert check_setting("output_dir", "~/murk-out") == os.path.expanduser("~/murk-out")
    assert check_setting("output_dir", 2025) == "2025"  # a folder named by digits arrives as a number
    # a sweep level as the spec prints it (3.9, 1.95) or exact, from YAML or as --config text
    assert check_setting("sweep_end_m", 3.9) == 3.90625 and check_setting("sweep_end_m", "1.95") == 1.953125
    assert check_setting("sweep_end_m", 250) == 250.0 and check_setting("sweep_end_m", "null") is None
    assert check_setting("box_width_px", "3") == 3 and check_setting("abstain_wordings", 1) == 1
    # a model entry's n_items arrives as text from --config (YAML scalars stay text)
    assert check_setting("models", [{"id": "a/b", "n_items": "2"}, "c/d"]) == [{"id": "a/b", "n_items": 2}, "c/d"]
    assert check_setting("models", [{"id": "a/b", "server": "http://h/v1", "max_in_flight": "3"}]) == \
        [{"id": "a/b", "server": "http://h/v1", "max_in_flight": 3}]  # --config gives the digits as text


def test_the_refusal_is_written_in_the_words_of_where_the_setting_was_given():
    assert _refusal("n_items", "abc", PAPERMILL).startswith("-p n_items abc: n_items must be")
    assert "e.g. -p n_items 8" in _refusal("n_items", "abc", PAPERMILL)
    msg = _refusal("seed", -1, "data/study.yaml (--configfile)")
    assert msg.startswith("seed: -1 in data/study.yaml (--configfile): seed must be")
    assert "e.g. seed: 1 in data/study.yaml (--configfile)" in msg


def test_setting_origins_follow_snakemakes_order(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("n_items: 3\nseed: 2\n")
    b.write_text("seed: 4\n")
    got = settings.setting_origins(["n_items", "seed", "split", "device"], {"device": "cpu"},
                                   [a, b, ROOT / "data" / "workflow.yaml"], cwd=ROOT)
    # data/workflow.yaml given again as a --configfile (make study) still holds the defaults
    assert got == {"n_items": f"{a} (--configfile)", "seed": f"{b} (--configfile)",
                   "split": "data/workflow.yaml", "device": COMMAND_LINE}
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "study.yaml").write_text("n_items: 5\n")
    got = settings.setting_origins(["n_items"], {}, [tmp_path / "data" / "study.yaml"], cwd=tmp_path)
    assert got == {"n_items": "data/study.yaml (--configfile)"}  # shown relative to Snakemake's folder


# --- a whole configuration ---

def test_every_problem_of_a_configuration_is_listed_at_once():
    cfg = {**_defaults(), "n_itmes": 2, "shard_size": 0, "offline_models": []}
    origins = {"n_itmes": COMMAND_LINE, "shard_size": COMMAND_LINE, "offline_models": COMMAND_LINE}
    with pytest.raises(SettingsError) as e:
        check_run_settings(cfg, origins, offline=True, cwd=ROOT)
    assert len(e.value.problems) == 3
    msg = str(e.value)
    assert msg.startswith("murk: these 3 run settings are refused before any job ran (nothing was written)")
    assert "did you mean n_items?" in msg and "--config shard_size=0" in msg
    assert "--config offline_models=[]: offline_models is empty: list at least one model" in msg


@pytest.mark.parametrize("key", ["models", "offline_models"])
def test_an_empty_model_list_is_refused_whichever_the_run_reads(key):
    with pytest.raises(SettingsError, match=f"{key} is empty"):
        check_run_settings({**_defaults(), key: []}, {key: COMMAND_LINE}, offline=key == "models", cwd=ROOT)


def test_a_missing_setting_is_refused(tmp_path):
    cfg = _defaults()
    del cfg["n_items"]
    with pytest.raises(SettingsError, match="n_items is not set: data/workflow.yaml lists every run setting"):
        check_run_settings(cfg, offline=True, cwd=tmp_path)


def test_an_output_dir_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    for value, words in (("f", "is a file, not a folder"), ("f/sub", f"lies inside {tmp_path / 'f'}, which is a file")):
        with pytest.raises(SettingsError, match="--config output_dir=" + value) as e:
            check_run_settings({**_defaults(), "output_dir": value}, {"output_dir": COMMAND_LINE}, True, tmp_path)
        assert words in str(e.value)


def test_a_relative_output_dir_is_taken_from_snakemakes_working_directory(tmp_path):
    run = check_run_settings({**_defaults(), "output_dir": "rel/./x/"}, offline=True, cwd=tmp_path)
    assert run.output_dir == "rel/x" and run.output_root == str(tmp_path / "rel" / "x")
    # the notebooks get the absolute path: murk.core takes a relative one from the project root instead
    assert paths.output_dir(run.output_root) == tmp_path / "rel" / "x" != paths.output_dir(run.output_dir)
    run = check_run_settings({**_defaults(), "output_dir": str(tmp_path / "abs")}, offline=True, cwd=ROOT)
    assert run.output_dir == run.output_root == str(tmp_path / "abs")


def test_the_start_lines_name_the_models_that_run_and_why_models_is_not_used_offline(capsys):
    cfg = {**_defaults(), "n_items": 5, "models": ["org/a"],
           "offline_models": ["murk-tiny/smolvlm", {"id": "murk-tiny/qwen3vl", "n_items": 3}]}
    run = check_run_settings(cfg, {"models": COMMAND_LINE}, offline=True, cwd=ROOT)
    assert [tuple(e[:2]) for e in run.model_entries] == [("murk-tiny/smolvlm", 5), ("murk-tiny/qwen3vl", 3)]
    assert run.notes[1] == ("murk: 2 models to read out (offline_models, since MURK_OFFLINE=1): "
                            "murk-tiny/smolvlm (5 items), murk-tiny/qwen3vl (3 items)")
    assert run.notes[2].startswith("murk: --config models=… is not used: with MURK_OFFLINE=1 a run reads offline_models")
    assert announce(run) == run.notes and announce(run) == []  # printed once per process
    assert capsys.readouterr().err.count("models to read out") == 1
    online = check_run_settings(cfg, {"models": COMMAND_LINE}, offline=False, cwd=ROOT)
    assert online.notes[1] == "murk: 1 model to read out (models): org/a (5 items)" and len(online.notes) == 2
    quiet = check_run_settings(cfg, offline=True, cwd=ROOT)  # models from data/workflow.yaml: nothing to say
    assert len(quiet.notes) == 2
    served = check_run_settings({**cfg, "models": [{"id": "org/a", "server": "http://127.0.0.1:8000/v1"}]},
                                offline=False, cwd=ROOT)
    assert served.notes[1] == ("murk: 1 model to read out (models): org/a (5 items; served by "
                               "http://127.0.0.1:8000/v1 as org/a)")


# --- the notebooks' parameters that mirror a run setting ---

def test_notebook_parameters_that_mirror_a_setting_are_checked_and_normalised():
    assert config.run_default("trust_remote_code", "false") is False  # papermill -p passes "false" as text
    assert config.run_default("n_items", 3) == 3 and config.run_default("shard_size") is None
    with pytest.raises(ValueError, match=r"^-p n_items abc: n_items must be a whole number"):
        config.run_default("n_items", "abc")
    with pytest.raises(ValueError, match="-p shard_size 0: shard_size must be"):
        config.run_default("shard_size", 0)
    with pytest.raises(ValueError, match="-p allow_pickle yes"):
        config.run_default("allow_pickle", "yes")


# --- through Snakemake, as users type them (dry runs: seconds) ---

def _plan(cwd: Path, *config_args: str, configfile: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "MURK_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    cmd = [sys.executable, "-m", "snakemake", "-n", "-p", "-s", str(ROOT / "Snakefile")]
    cmd += ["--configfile", str(configfile)] if configfile else []
    return subprocess.run(cmd + ["--config", *config_args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def test_each_bad_setting_is_refused_by_snakemake_before_any_job_naming_the_key(tmp_path):
    out = tmp_path / "out"
    (out / "readout").mkdir(parents=True)
    (out / "notebooks").mkdir()
    (tmp_path / "a-file").write_text("not a folder")
    before = _tree(out)
    # one dry run with many bad settings: each is named, in the words typed
    bad = ["n_itmes=2", "n_items=abc", "shard_size=0", "seed=-1", "n_verbal_items=-1", "trust_remote_code=yes",
           "allow_pickle=1", "depth_backend=cnstant", "offline_models=[]"]
    r = _plan(ROOT, f"output_dir={out}", *bad)
    err = r.stdout + r.stderr
    assert r.returncode != 0 and f"these {len(bad)} run settings are refused before any job ran" in err, err[-3000:]
    assert "--config n_itmes=2: n_itmes is not a run setting: did you mean n_items?" in err
    for entry in bad:
        assert f"--config {entry}: " in err
    assert " to read out (" not in err and "Job stats" not in err
    # each alone is refused too (a few: the unit tests check every kind)
    for entry, words in (("models=[]", "models is empty"), (f"output_dir={tmp_path / 'a-file'}", "is a file"),
                         ("n_items=abc", "n_items must be a whole number")):
        r = _plan(ROOT, f"output_dir={out}", entry)
        err = r.stdout + r.stderr
        assert r.returncode != 0 and f"--config {entry}: " in err and words in err, err[-3000:]
    # a configfile's bad key is named with its file
    cfg = tmp_path / "run.yaml"
    cfg.write_text("n_itmes: 3\noffline_models:\n  - {id: murk-tiny/qwen3vl, items: 3}\n")
    r = _plan(ROOT, f"output_dir={out}", configfile=cfg)
    err = r.stdout + r.stderr
    assert r.returncode != 0 and "n_itmes: 3 in " in err and "run.yaml (--configfile): n_itmes is not" in err
    assert "run.yaml (--configfile): offline_models, entry 1" in err and "unknown key(s) items" in err
    assert _tree(out) == before  # nothing written, nothing removed under the output root


def test_a_relative_output_dir_ends_in_one_folder_for_snakemake_and_the_notebooks(tmp_path):
    """Snakemake run in another folder than the project root (its workflow files linked there, as a second
    checkout or a cluster's work folder has them): the rules' files and the notebooks' output_dir agree."""
    for name in ("data", "notebooks", "paper", "profiles"):
        (tmp_path / name).symlink_to(ROOT / name)
    r = _plan(tmp_path, "output_dir=rel/", "n_items=1", 'offline_models=["murk-tiny/smolvlm"]',
              'models=["org/not-used"]')
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout + r.stderr
    root = tmp_path / "rel"
    assert f"murk: output root {root} (output_dir=rel/)" in out
    assert "murk: 1 model to read out (offline_models, since MURK_OFFLINE=1): murk-tiny/smolvlm (1 item)" in out
    assert "murk: --config models=… is not used" in out
    assert out.count(" to read out (") == 1
    assert "output: rel/items.json" in out  # Snakemake's files: relative to its working directory
    commands = [ln for ln in out.splitlines() if "murk.pipeline.execute " in ln or "murk.report.paper" in ln]
    assert len(commands) == 7 and all(f"-r output_dir {root} " in c for c in commands if "murk.pipeline.execute" in c)
    assert f"python -m murk.report.paper --output-dir {root}" in out
    assert paths.output_dir(str(root)) == root != paths.output_dir("rel")  # what murk would have made of "rel"
    assert not root.exists() and not (ROOT / "rel").exists()
