"""murk.report._analyses: the two analysis notebooks' declared outputs and the numbers file merged from their
fragments."""

import json

import pytest

from murk.core import _paths as paths
from murk.report import _analyses as analyses
from murk import report


def test_each_table_is_written_by_the_one_notebook_that_holds_its_label():
    study, beyond = analyses.analysis_tables("04_analyse"), analyses.analysis_tables("05_beyond")
    assert not set(study) & set(beyond)
    assert set(study) | set(beyond) == set(report.ANALYSIS_TABLES)
    assert "tbl-crossings" in study and "tbl-monitor-gate" in beyond and "tbl-risk-coverage" in beyond
    assert "fig-monitor" in analyses.notebook_labels("05_beyond")
    with pytest.raises(ValueError, match="not an analysis notebook"):
        analyses.analysis_tables("03_readout")


def test_a_label_moved_between_notebooks_moves_its_table(tmp_path):
    src = paths.project_root() / "notebooks"
    for stage in analyses.NUMBERS_FRAGMENTS:
        (tmp_path / f"{stage}.py").write_text((src / f"{stage}.py").read_text(encoding="utf-8"), encoding="utf-8")
    study = (tmp_path / "04_analyse.py").read_text(encoding="utf-8")
    (tmp_path / "04_analyse.py").write_text(study.replace("#| label: tbl-missing\n", ""), encoding="utf-8")
    (tmp_path / "05_beyond.py").write_text((tmp_path / "05_beyond.py").read_text(encoding="utf-8")
                                           + "\n# %%\n#| label: tbl-missing\n", encoding="utf-8")
    assert "tbl-missing" not in analyses.analysis_tables("04_analyse", tmp_path)
    assert "tbl-missing" in analyses.analysis_tables("05_beyond", tmp_path)


def test_the_notebooks_declare_their_figures_once():
    study, beyond = analyses.analysis_figures("04_analyse"), analyses.analysis_figures("05_beyond")
    assert not set(study) & set(beyond) and len(set(study)) == len(study)
    assert {"signals_t2", "blind_spot", "examples_t2"} <= set(study)
    assert beyond == ("monitor_vhat", "reliability_recal", "risk_coverage")


def _fragment(root, stage, numbers, prov):
    path = analyses.fragment_file(stage, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    report.write_numbers(numbers, path, prov)
    return path


def test_merge_numbers_is_the_union_of_the_fragments(tmp_path):
    qmd = tmp_path / "index.qmd"
    qmd.write_text('`{python} N["a"]` `{python} N["b"]` `{python} N["c"]`\n', encoding="utf-8")
    ids = {"run_id": "r-1", "analysis_id": "a-1"}
    _fragment(tmp_path, "04_analyse", {**ids, "a": "1"}, {"a": "num-rq1", "run_id": "murk-identity"})
    _fragment(tmp_path, "05_beyond", {**ids, "b": "2"}, {"b": "num-monitor", "run_id": "murk-identity-beyond"})
    out = analyses.merge_numbers(tmp_path, qmd)
    assert out == paths.numbers_file(tmp_path)
    assert report.load_numbers(out) == {**ids, "a": "1", "b": "2", "c": f"n/a ({report.NOT_COMPUTED})"}
    prov = report.load_provenance(out)
    # each key keeps its cell; a key of both fragments keeps the study's; a filled key the numbers-file cell
    assert prov == {"a": "num-rq1", "b": "num-monitor", "run_id": "murk-identity", "c": analyses.FILLED_LABEL}


def test_merge_numbers_leaves_out_a_fragment_of_another_analysis(tmp_path, capsys):
    qmd = tmp_path / "index.qmd"
    qmd.write_text('`{python} N["b"]`\n', encoding="utf-8")
    _fragment(tmp_path, "04_analyse", {"run_id": "r-1", "analysis_id": "a-new", "a": "1"}, {})
    stale = _fragment(tmp_path, "05_beyond", {"run_id": "r-1", "analysis_id": "a-old", "b": "2"}, {})
    numbers = report.load_numbers(analyses.merge_numbers(tmp_path, qmd))
    assert numbers["analysis_id"] == "a-new" and numbers["b"] == f"n/a ({report.NOT_COMPUTED})"
    assert str(stale) in capsys.readouterr().out
    # the study's fragment alone (the beyond notebook not run yet): merged, its keys filled
    stale.unlink()
    assert json.loads(paths.numbers_file(tmp_path).read_text())["a"] == "1"
    assert report.load_numbers(analyses.merge_numbers(tmp_path, qmd))["b"].startswith("n/a")


def test_merge_numbers_without_a_fragment_names_the_stage(tmp_path):
    with pytest.raises(FileNotFoundError, match="04_analyse.py"):
        analyses.merge_numbers(tmp_path)
    assert not paths.numbers_file(tmp_path).exists()


def test_analysis_outputs_write_only_what_the_notebook_declares(tmp_path):
    out = report.AnalysisOutputs("04_analyse", tmp_path / "figures", tmp_path / "analysis")
    out.table("| a |\n|---|\n| 1 |\n", "models")
    assert (tmp_path / "analysis" / "tbl-models.md").read_text() == "| a |\n|---|\n| 1 |\n"
    with pytest.raises(ValueError, match="tbl-monitor-gate is not a table of notebooks/04_analyse.py"):
        out.table("| a |\n", "monitor-gate")             # 05_beyond's table
    with pytest.raises(ValueError, match=r"risk_coverage is not in murk.report.ANALYSIS_FIGURES\['04_analyse'\]"):
        out.figure(None, "risk_coverage")                  # 05_beyond's figure
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["tbl-models.md"]
    with pytest.raises(ValueError, match="not an analysis notebook"):
        report.AnalysisOutputs("03_readout", tmp_path, tmp_path)
