"""The stage notebooks and the workflow share one source of defaults: data/workflow.yaml (issue 20).

A notebook parameter that is also a run setting defaults to ``None`` and is resolved from
the run settings (:func:`murk.config.run_default`), so that a stage run by hand (papermill,
JupyterLab) with its defaults does what the same stage does under Snakemake.
"""

from __future__ import annotations

import ast

import jupytext
import pytest

from murk import config, paths

ROOT = paths.project_root()

#: notebook -> {parameter: run setting it mirrors}
MIRRORED = {
    "01_select": {"split": "split", "n_items": "n_items", "seed": "seed", "run_name": "run_name",
                  "coco_dir": "coco_dir", "design": "binary_task"},   # design: the five settings of murk.design
    "02_depth": {"backend": "depth_backend", "model": "depth_model"},
    "03_readout": {"model": "models", "device": "device", "n_verbal_items": "n_verbal_items",
                   "trust_remote_code": "trust_remote_code", "allow_pickle": "allow_pickle"},
    "04_analyse": {"models": "models", "shard_size": "shard_size", "compare_with": "compare_with"},
}


def parameters(stage: str) -> dict[str, object]:
    """The literal defaults of a notebook's ``parameters`` cell."""
    nb = jupytext.read(ROOT / "notebooks" / f"{stage}.py")
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"{stage}: one parameters cell"
    out = {}
    for node in ast.parse(cells[0].source).body:
        assert isinstance(node, ast.Assign), f"{stage}: the parameters cell holds assignments only"
        out[node.targets[0].id] = ast.literal_eval(node.value)  # literals only
    return out


@pytest.mark.parametrize("stage", sorted(MIRRORED))
def test_mirrored_parameters_default_to_the_run_settings(stage):
    params = parameters(stage)
    settings = config.run_settings()
    for name, key in MIRRORED[stage].items():
        assert name in params, f"{stage} lost its parameter {name}"
        assert key in settings or key == "models", f"data/workflow.yaml lost {key}"
        # None: resolved from data/workflow.yaml; a literal here would be a second source that can drift
        assert params[name] is None, f"{stage}.{name} = {params[name]!r}: leave it None (run settings: {key})"


def test_run_default_resolves_from_workflow_yaml(monkeypatch):
    settings = config.run_settings()
    assert config.run_default("n_verbal_items") == settings["n_verbal_items"]
    assert config.run_default("n_verbal_items", 0) == 0      # a value given wins, even a falsy one
    monkeypatch.setenv("MURK_OFFLINE", "1")
    assert config.run_default("models") == settings["offline_models"]
    monkeypatch.setenv("MURK_OFFLINE", "0")
    assert config.run_default("models") == settings["models"]
    with pytest.raises(KeyError, match="workflow.yaml"):
        config.run_default("no_such_setting")


@pytest.mark.parametrize("stage", sorted(p.stem for p in (ROOT / "notebooks").glob("*.py")))
def test_papermill_reads_every_parameter_of_every_notebook(stage, tmp_path, caplog):
    """papermill's own parser (papermill.inspect_notebook, PythonTranslator.inspect) reads each assignment of the
    parameters cell, with its default, and warns nothing: a line it cannot parse (a comment with ``=`` on a
    parameter line) made it print ``Unable to parse line`` and ``Passed unknown parameter`` on every run."""
    import logging

    import nbformat
    import papermill

    src = tmp_path / f"{stage}.ipynb"
    nbformat.write(jupytext.read(ROOT / "notebooks" / f"{stage}.py"), src)
    with caplog.at_level(logging.DEBUG, logger="papermill"):
        found = papermill.inspect_notebook(str(src))
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    expected = parameters(stage)
    assert list(found) == list(expected)
    assert {k: ast.literal_eval(v["default"]) for k, v in found.items()} == expected
