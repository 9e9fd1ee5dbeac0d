"""The stage notebooks and the workflow share one source of defaults: data/workflow.yaml (issue 20).

A notebook parameter that is also a run setting defaults to ``None`` and is resolved from
the run settings (:func:`murk.core.run_default`), so that a stage run by hand (papermill,
JupyterLab) with its defaults does what the same stage does under Snakemake.
"""

from __future__ import annotations

import ast

import jupytext
import pytest

from murk.core import _config as config
from murk.core import _paths as paths

ROOT = paths.project_root()

#: notebook -> {parameter: run setting it mirrors}
MIRRORED = {
    "01_select": {"split": "split", "n_items": "n_items", "seed": "seed", "run_name": "run_name",
                  "coco_dir": "coco_dir", "design": "binary_task"},   # design: the five settings of murk.protocol
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


def _store(root, model_id):
    """A read-out store as its attributes record it (zarr 3 metadata only: all that the lookup reads)."""
    import json

    store = paths.readout_store(model_id, root)
    store.mkdir(parents=True)
    (store / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group",
                                                 "attributes": {"model_id": model_id}}))


def test_analyse_models_left_at_none_are_the_roots_when_the_run_settings_have_no_read_out(tmp_path, monkeypatch):
    """The analyse notebook in Lab after the offline demo, MURK_OFFLINE not set in Lab (issue 39 item 5): its
    models = None finds the demo's models (the numbers file's analysis.models, else the stores), or says in one
    line what to set; the run settings' models win where their read-outs are there."""
    import json

    monkeypatch.delenv("MURK_OFFLINE", raising=False)
    root = tmp_path / "outputs"
    with pytest.raises(FileNotFoundError) as e:       # nothing there: one line, what to set
        config.analyse_models(None, root)
    assert "\n" not in str(e.value) and "parameters cell" in str(e.value) and "MURK_OFFLINE=1" in str(e.value)
    # the read-out notebook, which writes the stores: the run settings' models on a root that records none
    assert config.analyse_models(None, root, required=False) == (config.run_settings()["models"], None)
    assert config.root_depth_backend(root) is None
    (root / "depth").mkdir(parents=True)
    (root / "depth" / "current.json").write_text(json.dumps({"depth_backend": "constant-13.8m"}))
    assert config.root_depth_backend(root) == "constant"   # the depth notebook's backend 'auto' there
    offline = config.run_settings()["offline_models"]
    for m in offline:
        _store(root, m)
    _store(root, "murk/visibility-monitor")
    got, note = config.analyse_models(None, root)     # no numbers file: the stores' model ids, not the monitor
    assert sorted(got) == sorted(offline) and str(root) in note
    entries = [{"id": offline[0], "n_items": 4}, {"id": offline[1], "n_items": 3}]
    paths.numbers_file(root).write_text(json.dumps({"analysis.models": json.dumps(entries)}))
    assert config.analyse_models(None, root)[0] == entries   # the last analysis's entries, with their n_items
    assert config.analyse_models(["x/y"], root) == (["x/y"], None)   # a value given is kept
    monkeypatch.setenv("MURK_OFFLINE", "1")
    assert config.analyse_models(None, root) == (offline, None)      # the run settings' models, as before
    # the notebook's num-cube cell asks for them
    src = (ROOT / "notebooks" / "04_analyse.py").read_text()
    assert "pipeline.analysis_cube(models, shard_size, output_dir," in src     # which asks murk.core for them
    assert "core.analyse_models(models, output_dir, shard_size)" in (
        ROOT / "lib" / "murk" / "pipeline" / "_analysis_cube.py").read_text()
    assert "core.analyse_models(None, output_dir, shard_size, required=False)" in (
        ROOT / "notebooks" / "03_readout.py").read_text()
    assert "core.root_depth_backend(output_dir)" in (ROOT / "notebooks" / "02_depth.py").read_text()
