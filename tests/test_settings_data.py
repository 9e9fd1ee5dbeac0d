"""Settings are data (issue 37, item 1): no value of a run setting or a model id is ever parsed by a shell.

Every string setting and model id is given shell metacharacters (``;``, ``$( )``, backticks, quotes, a newline,
blanks, braces, non-ASCII): each value is either refused before the first job, naming its key, or reaches the
stage as one argument, literally. The dry runs read the commands Snakemake prints (``-p``) back with
:func:`shlex.split`, as a shell would; the end-to-end run (``make demo``) checks that the file a payload would
create never appears and that the cube names the model folder as it was given.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from murk.core import SettingsError, check_run_settings, model_id_problem, remote_job_problems, settings
from murk.core import _paths as paths

import stages  # tests/stages.py: the shared COCO sample

ROOT = paths.project_root()
SAMPLE = stages.SAMPLE


def payload(token: str) -> str:
    """Text that runs ``touch pwned-<token>-<k>`` (k = 1..4) wherever a shell parses it, in any quoting."""
    return (f"x; touch pwned-{token}-1 #$(touch pwned-{token}-2)`touch pwned-{token}-3`'\"; touch pwned-{token}-4\n"
            f" ü {{slug}} *")


def _pwned(*folders: Path) -> list[Path]:
    return [p for f in folders for p in f.glob("pwned-*")]


def _yaml(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    return path


# --- the kernels ---

@pytest.mark.parametrize("model", ["HuggingFaceTB/SmolVLM-256M-Instruct", "murk-tiny/smolvlm", "google/gemma-4-E2B-it",
                                   "gpt2", "Qwen/Qwen3-VL-2B-Instruct"])
def test_a_hub_id_is_a_model(model):
    assert model_id_problem(model) is None


@pytest.mark.parametrize("model", ["murk-tiny/smolvlm; touch x #", "org/name$(id)", "a/b/c", "org--x/name",
                                   "org/na..me", "/no/such/folder", "x" * 97, "org/name\n"])
def test_an_id_that_is_neither_a_hub_id_nor_a_folder_is_refused(model):
    why = model_id_problem(model, "/")
    assert why and "neither a hub id" in why and "existing folder" in why


def test_an_existing_folder_is_a_model_whatever_it_is_called(tmp_path):
    folder = tmp_path / payload("folder").replace("/", "_")
    folder.mkdir()
    assert model_id_problem(str(folder)) is None
    assert model_id_problem(folder.name, tmp_path) is None  # relative: from Snakemake's working directory
    assert model_id_problem(folder.name, tmp_path.parent) is not None


def test_the_run_settings_refuse_a_model_id_with_a_command_naming_the_key(tmp_path):
    cfg = yaml.safe_load((ROOT / "data" / "workflow.yaml").read_text())
    cfg["offline_models"] = ["murk-tiny/smolvlm; touch x #"]
    with pytest.raises(SettingsError) as e:
        check_run_settings(cfg, offline=True, cwd=tmp_path)
    line = str(e.value)
    assert "offline_models, entry 1 ('murk-tiny/smolvlm; touch x #'): neither a hub id" in line
    assert "refused before any job ran (nothing was written)" in line


def test_what_the_slurm_executor_cannot_carry_literally_is_named_with_the_fix():
    carried = ["n_items=2", "offline_models=['/data/my model']", 'models=["a b"]', "depth_model=it's"]
    assert remote_job_problems(carried, ["/tmp/run.yaml", "/tmp/it's.yaml"]) == []
    lines = remote_job_problems(["depth_model=x$(touch y)", "n_items=2", "models=[\"a`b`\"]",
                                 "depth_model=it's \"q\"", "depth_model=a\\b"], ["/tmp/a$b.yaml"])
    assert len(lines) == 5, lines
    assert lines[0].startswith("--config depth_model=x$(touch y): the value of depth_model holds '$'")
    assert "give depth_model in a --configfile instead" in lines[0]
    assert "'`'" in lines[1] and "\"'\"" in lines[2] and "'\\\\'" in lines[3]
    assert lines[4].startswith("--configfile /tmp/a$b.yaml: its path holds '$'")


# --- through Snakemake: every string setting, as a configfile and the command line give it (dry runs) ---

def _plan(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "MURK_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "MURK_COCO_DIR": str(SAMPLE),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run([sys.executable, "-m", "snakemake", "-n", "-p", "--cores", "1", "-s",
                           str(ROOT / "Snakefile"), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def _commands(text: str) -> list[list[str]]:
    """Each shell command of a dry run's plan (``-p``: after ``Shell command:``, up to the blank line that ends
    it; a value with a line break spans lines), split as a shell splits it."""
    cmds = re.findall(r"^Shell command: (.*?)\n\n", text, re.M | re.S)
    return [shlex.split(c) for c in cmds]


def _arg(cmd: list[str], flag: str, name: str) -> str | None:
    for k in range(len(cmd) - 2):
        if cmd[k] == flag and cmd[k + 1] == name:
            return cmd[k + 2]
    return None


TEXT_SETTINGS = [k for k, s in settings.SCHEMA.items() if s.kind in ("name", "text", "path", "choice", "device")]


def test_every_text_setting_with_shell_code_is_refused_naming_the_key_or_reaches_its_stage_literally(tmp_path):
    assert {"output_dir", "coco_dir", "split", "run_name", "depth_backend", "depth_model", "device",
            "compare_with", "binary_task", "distractors"} <= set(TEXT_SETTINGS)
    folder = tmp_path / "models" / "ck pt;$(touch pwned-m-1)`touch pwned-m-2`'\"ü"
    folder.mkdir(parents=True)
    out = tmp_path / "out"
    literal = {}
    for key in TEXT_SETTINGS:
        value = payload(key)
        cfg = _yaml(tmp_path / f"{key}.yaml", {"output_dir": str(out), key: value, "offline_models": [str(folder)]})
        r = _plan("--configfile", str(cfg))
        text = r.stdout + r.stderr
        if r.returncode != 0:
            # refused before any job: the message names the key, in the file where it was given
            assert f"{key}: " in text and f"{cfg.name} (--configfile): {key} must be" in text, (key, text[-2000:])
            assert "Shell command:" not in text
            continue
        literal[key] = value
        cmds = _commands(text)
        assert cmds, text[-2000:]
        got = {_arg(c, "-r", "model") for c in cmds if "notebooks/02_depth.py" in c}
        assert got == {value}, (key, got)
        models = {_arg(c, "-r", "model") for c in cmds if "notebooks/03_readout.py" in c}
        assert models == {str(folder)}, models  # the model folder: one argument, as given
    assert set(literal) == {"depth_model"}, literal  # the one free-text setting; every other kind refuses
    assert not _pwned(ROOT, tmp_path, Path.cwd()) and not out.exists()


def test_a_model_id_with_shell_code_is_refused_on_the_command_line_and_in_a_configfile(tmp_path):
    out = tmp_path / "out"
    r = _plan("--config", f"output_dir={out}", "offline_models=[\"murk-tiny/smolvlm; touch pwned-c-1 #\"]")
    text = r.stdout + r.stderr
    assert r.returncode != 0 and "--config offline_models=" in text, text[-2000:]
    assert "offline_models, entry 1 ('murk-tiny/smolvlm; touch pwned-c-1 #'): neither a hub id" in text
    cfg = _yaml(tmp_path / "run.yaml", {"offline_models": [{"id": payload("f"), "n_items": 1}]})
    r = _plan("--configfile", str(cfg), "--config", f"output_dir={out}")
    text = r.stdout + r.stderr
    assert r.returncode != 0 and "run.yaml (--configfile): offline_models, entry 1" in text, text[-2000:]
    assert "Shell command:" not in text and not _pwned(ROOT, tmp_path) and not out.exists()


def test_make_plan_prints_commands_that_carry_each_value_as_one_argument(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make not installed")
    folder = tmp_path / "my models" / "smol;$(touch pwned-p-1)"
    folder.mkdir(parents=True)
    cfg = _yaml(tmp_path / "run.yaml", {"offline_models": [str(folder)], "depth_model": payload("p")})
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env.update({"MURK_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "MURK_COCO_DIR": str(SAMPLE)})
    r = subprocess.run(["make", "-C", str(ROOT), "plan", f"ARGS=-p --configfile {cfg} --config "
                        f"output_dir={tmp_path / 'out'}"], env=env, capture_output=True, text=True, timeout=600)
    text = r.stdout + r.stderr
    assert r.returncode == 0, text[-3000:]
    cmds = _commands(text)
    assert {_arg(c, "-r", "model") for c in cmds if "notebooks/03_readout.py" in c} == {str(folder)}
    assert {_arg(c, "-r", "model") for c in cmds if "notebooks/02_depth.py" in c} == {payload("p")}
    assert not _pwned(ROOT, tmp_path)


# --- the whole pipeline, as users run it ---

@pytest.mark.slow
def test_make_demo_runs_nothing_but_murk_and_uses_a_model_folder_as_it_was_given(tmp_path, tiny_checkpoint_dirs):
    """A model folder whose path holds a blank and shell code, and a depth model that is shell code, through
    ``make demo``: the run finishes, the cube names the folder as given, no payload ran; a second ``make demo``
    has nothing to do."""
    if shutil.which("make") is None:
        pytest.skip("make not installed")
    import xarray as xr

    folder = tmp_path / "my models" / "smol vlm;$(touch pwned-d-1)`touch pwned-d-2`'ü"
    shutil.copytree(tiny_checkpoint_dirs["smolvlm"], folder)
    out = tmp_path / "out"
    cfg = _yaml(tmp_path / "run.yaml", {"offline_models": [str(folder)], "depth_model": payload("d"),
                                        "n_items": 1, "n_verbal_items": 1, "run_name": "settings-are-data"})
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env.update({"MURK_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "MPLBACKEND": "Agg",
                "MURK_COCO_DIR": str(SAMPLE)})
    args = f"ARGS=--configfile {cfg} --config output_dir={out}"
    r = subprocess.run(["make", "-C", str(ROOT), "demo", args], env=env, capture_output=True, text=True,
                       timeout=1500)
    text = r.stdout + r.stderr
    assert r.returncode == 0, text[-4000:]
    assert not _pwned(ROOT, tmp_path, out, out / "notebooks", folder.parent)
    cube = xr.open_zarr(out / "cube.zarr")
    assert str(folder) in [str(m) for m in cube["model"].values]   # beside the visibility monitor's two
    assert (out / "paper" / "index.html").is_file()
    # the run setting figure_pdf, true in data/workflow.yaml: each analysis figure as a PNG and a vector PDF
    from murk import report
    for stage in ("04_analyse", "05_beyond"):
        for name in report.analysis_figures(stage):
            assert (out / "figures" / f"{name}.png").is_file(), name
            assert (out / "figures" / f"{name}.pdf").read_bytes()[:4] == b"%PDF", name
    again = subprocess.run(["make", "-C", str(ROOT), "demo", args], env=env, capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr, again.stderr[-2000:]
