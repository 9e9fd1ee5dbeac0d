"""The analyse notebook (notebooks/04_analyse.py) through papermill on a synthetic cube with known curves,
and the paper rendered from the executed notebook (tests/synthetic.py; fixture ``synthetic_paper``)."""

import base64
import shutil

import numpy as np
import pytest
import xarray as xr

from murk import paper, paths, physics

import stages
import synthetic

MODELS = synthetic.MODELS
KEY = "org--synthetic-a"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def root(synthetic_paper):
    return synthetic_paper[0]


@pytest.fixture(scope="module")
def numbers(root):
    return paper.load_numbers(paths.numbers_file(root))


def test_crossings_recover_the_synthetic_midway(root):
    c = xr.open_dataset(paths.analysis_dir(root) / "crossings.nc")
    v_fog = c["v_cross_m"].sel(arm="fog", task="t2", readout="correct").values
    v_uw = c["v_cross_m"].sel(arm="underwater", task="t2", readout="correct").values
    # midway of 1 and 0.25 is reached at 12 m (fog) and 25 m (underwater), up to sampling noise
    assert np.all((v_fog > 6) & (v_fog < 24)), v_fog
    assert np.all((v_uw > 12) & (v_uw < 50)), v_uw
    # a constant confidence never reaches its midway: censored, W is a lower bound
    assert c["censored"].sel(readout="c_int").all()
    assert c["w_lower_bound"].sel(readout="c_int").all()
    w = c["w"].sel(arm="fog", task="t2", readout="c_int").values
    np.testing.assert_allclose(w, np.log10(v_fog / physics.SWEEP_M[-1]))
    assert (c["v_lo_m"] <= c["v_hi_m"]).sel(readout="correct").all()


def test_means_have_intervals(root):
    m = xr.open_dataset(paths.analysis_dir(root) / "condition_means.nc")
    ok = m["mean"].notnull()
    assert ((m["lo"] <= m["mean"] + 1e-12) & (m["mean"] <= m["hi"] + 1e-12)).where(ok, True).all()
    assert float(m["mean"].sel(model=MODELS[0], arm="fog", level=0, task="t2", readout="correct")) == 1.0


def test_scores_dataset(root):
    sc = xr.open_dataset(paths.analysis_dir(root) / "scores.nc")
    assert list(sc["stat"].values) == ["point", "lo", "hi"]
    for var in ("mean", "ece", "auroc", "coverage", "risk", "v_cross_m", "w", "v_acc_blank_m", "confident_accuracy"):
        assert sc[var].dims[-1] == "stat", var
    ok = sc["mean"].sel(stat="point").notnull()
    lo, p, hi = (sc["mean"].sel(stat=k) for k in ("lo", "point", "hi"))
    assert ((lo <= p + 1e-12) & (p <= hi + 1e-12)).where(ok, True).all()
    assert sc["w_lower_bound"].sel(arm=["fog", "underwater"], readout="c_int").all()
    # blank floor (0.25 here, the chance level) gives a V_acc close to the chance-floor one
    v = sc["v_cross_m"].sel(stat="point", arm="fog", task="t2", readout="correct")
    vb = sc["v_acc_blank_m"].sel(stat="point", arm="fog", task="t2")
    assert np.all(np.abs(np.log2(vb / v)) < 1.5)
    # confident errors: pooled over V <= 15.625 m of both arms, t2 -> 4 levels x 2 arms x 30 images
    assert (sc["confident_n"] == 4 * 2 * synthetic.N_IMAGES).all()
    rel = sc["reliability_count"].sel(task="t2", confidence="c_int").sum("bin")
    assert (rel.sel(arm=["fog", "underwater"]) == 8 * synthetic.N_IMAGES).all() and (rel.sel(arm="blank") == 0).all()


def test_numbers_keys(numbers):
    assert numbers[f"w.c_int.fog.t2.{KEY}"].startswith("≥ ")
    assert numbers[f"w.c_int.fog.t2.{KEY}.ci"].startswith("[")  # a bound keeps its bootstrap interval
    assert "Pipeline check" in numbers["pipeline_check_note"]
    for key in (f"ece.c_int.end.fog.t2.{KEY}", f"ece.c_int.end.underwater.t2.{KEY}.ci",
                f"auroc.c_int.62.5.fog.t2.{KEY}", f"auroc.c_int.1.953125.underwater.t2.{KEY}.ci",
                f"confident.acc.{KEY}", f"confident.n.{KEY}", f"mono.correct.fog.t2.{KEY}",
                f"mono.abstain.fog.t3.{KEY}.sig", f"mono.c_int.underwater.t2.{KEY}.count",
                f"v.correct_blank.fog.t2.{KEY}", f"correct.7.8125.fog.t2.{KEY}", f"correct.clean.fog.t2.{KEY}",
                f"coverage.abstain.7.8125.fog.t2.{KEY}", f"risk.abstain2.clean.fog.t2.{KEY}.ci",
                "mono.pooled.raw", "mono.pooled.sig", "mono.pooled.imagenet_c.raw", "nominal.veq.1",
                "methods.depth", "finding.rq1.fog.t2"):
        assert key in numbers, key
    assert numbers[f"confident.n.{KEY}"] == str(4 * 2 * synthetic.N_IMAGES)
    assert numbers[f"mono.c_int.fog.t2.{KEY}.count"].endswith("/8")
    assert "physical arms" in numbers["mono.pooled.what"]   # Methods says what is pooled
    assert "constant-13.8m" in numbers["methods.depth"] and "approximation" in numbers["methods.depth"]
    assert paper.level_label(float("inf")) == "clean" and paper.level_label(1.953125) == "1.953125"


def test_tables_figures_and_their_cells(root):
    adir, fdir = paths.analysis_dir(root), paths.figures_dir(root)
    cells = paper.notebook_cells(root / "notebooks" / "04_analyse.ipynb")
    for label, cell in cells.items():
        kind, name = label.split("-", 1)
        if kind == "tbl":
            md = "".join(o["data"]["text/markdown"] for o in cell["outputs"] if "text/markdown" in o.get("data", {}))
            assert md.lstrip().startswith("|"), label
            assert (adir / f"{label}.md").read_text(encoding="utf-8") == md
        else:
            pngs = [o["data"]["image/png"] for o in cell["outputs"] if "image/png" in o.get("data", {})]
            assert len(pngs) == 1, label          # one figure per labelled cell
            assert paper.cell_options(cell["source"]).get("fig-cap"), label
    for name in ("accuracy", "confidence", "verbal", "abstain", "reliability", "abstain2", "blind_spot"):
        for task in ("t2", "t3"):
            for ext in ("png", "pdf"):
                assert (fdir / f"{name}_{task}.{ext}").is_file(), (name, task, ext)
    assert "≥" in (adir / "tbl-crossings.md").read_text(encoding="utf-8")
    t4 = (adir / "tbl-end-of-sweep.md").read_text(encoding="utf-8")
    assert t4.count("\n") >= 2 + 2 * len(MODELS) - 1 and "ECE c_int" in t4
    t9 = (adir / "tbl-sweep-t2.md").read_text(encoding="utf-8")
    # levels as the spec writes them, intervals one way
    assert "| 1.95 |" in t9 and "| 31.3 |" in t9 and "| 7.8 |" in t9 and "1.953125" not in t9 and "15.625" not in t9
    assert "[" in t9 and "(" not in t9.split("\n", 2)[2]


def test_paper_from_the_executed_notebook(synthetic_paper, numbers):
    root, res = synthetic_paper
    html = res["html"].read_text(encoding="utf-8")
    assert "`{python}" not in html and "{{<" not in html
    assert numbers["finding.rq1.fog.t2"].split(" (")[0] in html
    assert "Figure 1" in html and "Table 1" in html and "?" not in numbers["config_hash"]
    assert res["pdf"].read_bytes()[:4] == b"%PDF"
    # this root has no depth notebook: its figure is a labelled "not computed in this run" placeholder
    assert res["missing"] == ["../outputs/notebooks/02_depth.ipynb#fig-scene"]
    assert "not computed in this run" in html
    # every embedded figure is the notebook's output, with a link back to the notebook
    cells = paper.notebook_cells(root / "notebooks" / "04_analyse.ipynb")
    png = base64.b64decode(cells["fig-accuracy-t2"]["outputs"][0]["data"]["image/png"])
    assert (root / "paper" / "embed" / "04_analyse-fig-accuracy-t2.png").read_bytes() == png
    assert 'href="../notebooks/04_analyse.ipynb"' in html


def test_changing_a_plot_argument_and_rerunning_the_cell_changes_the_figure(root, tmp_path):
    """As in JupyterLab: run the analyse notebook in one kernel, edit one cell's plot argument, re-run that
    cell alone: its output and the figure file change."""
    import jupytext
    import nbformat
    from nbclient import NotebookClient

    work = tmp_path / "out"
    shutil.copytree(root, work)
    nb = jupytext.read(stages.ROOT / "notebooks" / "04_analyse.py")
    i_par = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    nb.cells.insert(i_par + 1, nbformat.v4.new_code_cell(f"output_dir = {str(work)!r}\nmodels = {MODELS!r}"))
    i_fig = next(i for i, c in enumerate(nb.cells) if "#| label: fig-accuracy-t2" in c.source)
    client = NotebookClient(nb, kernel_name="python3", resources={"metadata": {"path": str(stages.ROOT)}})
    with client.setup_kernel():
        for i, cell in enumerate(nb.cells[: i_fig + 1]):
            client.execute_cell(cell, i)
        before = nb.cells[i_fig].outputs[0]["data"]["image/png"]
        file_before = (paths.figures_dir(work) / "accuracy_t2.png").read_bytes()
        assert 'marked=LOW_MASS)' in nb.cells[i_fig].source
        nb.cells[i_fig].source = nb.cells[i_fig].source.replace('marked=LOW_MASS)', 'marked=LOW_MASS, band=False)')
        client.execute_cell(nb.cells[i_fig], i_fig)
        after = nb.cells[i_fig].outputs[0]["data"]["image/png"]
    assert after != before
    assert (paths.figures_dir(work) / "accuracy_t2.png").read_bytes() != file_before
    assert base64.b64decode(after) == (paths.figures_dir(work) / "accuracy_t2.png").read_bytes()
