"""The analyse notebook (notebooks/04_analyse.py) through papermill on a synthetic cube with known curves,
and the paper rendered from the executed notebook (tests/synthetic.py; fixture ``synthetic_paper``)."""

import base64
import html as html_lib
import re
import shutil

import numpy as np
import pytest
import xarray as xr

from murk import report
from murk.core import _paths as paths
from murk.scene import _physics as physics

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
    return report.load_numbers(paths.numbers_file(root))


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
    assert numbers[f"w.c_int.fog.t2.{KEY}.ci"] == ""  # a bound prints alone, no interval crossing it (issue 39)
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
    assert report.level_label(float("inf")) == "clean" and report.level_label(1.953125) == "1.953125"


def test_tables_figures_and_their_cells(root):
    adir, fdir = paths.analysis_dir(root), paths.figures_dir(root)
    cells = report.notebook_cells(root / "notebooks" / "04_analyse.ipynb")
    assert set(cells) - {label for label in cells if label.startswith(("tbl-", "fig-", "num-"))} == {"murk-identity"}
    for label, cell in cells.items():
        kind, name = label.split("-", 1)
        if kind in ("murk", "num"):   # the identity cell (workflow.IDENTITY_LABEL), a cell recording numbers
            continue
        if kind == "tbl":
            md = "".join(o["data"]["text/markdown"] for o in cell["outputs"] if "text/markdown" in o.get("data", {}))
            assert md.lstrip().startswith("|"), label
            assert (adir / f"{label}.md").read_text(encoding="utf-8") == md
        else:
            pngs = [o["data"]["image/png"] for o in cell["outputs"] if "image/png" in o.get("data", {})]
            assert len(pngs) == 1, label          # one figure per labelled cell
            assert report.cell_options(cell["source"]).get("fig-cap"), label
    for name in ("accuracy", "confidence", "verbal", "abstain", "reliability", "abstain2", "signals"):
        for task in ("t2", "t3"):
            for ext in ("png", "pdf"):
                assert (fdir / f"{name}_{task}.{ext}").is_file(), (name, task, ext)
    assert (fdir / "blind_spot.png").is_file() and (fdir / "blind_spot.pdf").is_file()   # spec Fig. 4: t2 and t3
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
    cells = report.notebook_cells(root / "notebooks" / "04_analyse.ipynb")
    png = base64.b64decode(cells["fig-signals-t2"]["outputs"][0]["data"]["image/png"])
    assert (root / "paper" / "embed" / "04_analyse-fig-signals-t2.png").read_bytes() == png
    assert 'href="04_analyse.html#fig-signals-t2"' in html     # its cell in the notebook's rendered view
    assert res["views"]["04_analyse.ipynb"] == root / "paper" / "04_analyse.html"


def _visible(html: str) -> str:
    """The text of an HTML page as a reader sees it: no tags (a cited number is a link), one space."""
    return " ".join(html_lib.unescape(re.sub(r"<[^>]+>", "", html)).split())


def _source_labels(stages_=("04_analyse", "05_beyond")) -> set[str]:
    """The cell labels of the analysis notebooks (jupytext percent cells, ``#| label: …``)."""
    import jupytext

    return {report.cell_options(c.source).get("label") for stage in stages_
            for c in jupytext.read(stages.ROOT / "notebooks" / f"{stage}.py").cells if c.cell_type == "code"} - {None}


def test_every_number_names_the_cell_that_recorded_it(root, numbers):
    """Issue 23: every key of the numbers file (all the paper cites among them, f-string keys included) has a
    provenance entry naming a cell label of the analysis notebooks (04_analyse.py, 05_beyond.py), and the cell it
    names records it."""
    import jupytext

    prov = report.load_provenance(paths.numbers_file(root))
    assert prov == report.load_provenance(root / "paper_numbers.json")
    labels = _source_labels()
    cited = report.cited_keys((stages.ROOT / "paper" / "index.qmd").read_text(encoding="utf-8"))
    assert cited and cited <= set(numbers)
    assert sorted(set(numbers) - set(prov)) == [], "numbers without a provenance entry"
    assert {k: v for k, v in prov.items() if v not in labels} == {}, "provenance naming no cell of the notebook"
    # f-string keys too: a finding sentence and a per-model key name the cells that build them
    assert prov["finding.rq1.fog.t2"] == "num-rq1" and prov[f"option_mass.{KEY}.t2"] == "num-option-mass"
    assert prov["cfg.sweep"] == "num-scores" and prov["version.numpy"] == "num-numbers-file"
    # a number of the analysis beyond the spec names its cell in notebooks/05_beyond.py
    assert prov["monitor.threshold_m"] == "num-monitor" and "num-monitor" in _source_labels(("05_beyond",))
    assert "num-monitor" not in _source_labels(("04_analyse",))
    # docs/paper.md's tracing recipe gives what it says it gives
    readme = (stages.ROOT / "docs" / "paper.md").read_text(encoding="utf-8")
    assert "load_provenance()['finding.rq1.fog.t2']" in readme and f"-> {prov['finding.rq1.fog.t2']}:" in readme
    # the named cell is where the key is set: its source records the key's stem (or calls the helper that does)
    src = {report.cell_options(c.source).get("label"): c.source
           for c in jupytext.read(stages.ROOT / "notebooks" / "04_analyse.py").cells if c.cell_type == "code"}
    src_beyond = {report.cell_options(c.source).get("label"): c.source
                  for c in jupytext.read(stages.ROOT / "notebooks" / "05_beyond.py").cells if c.cell_type == "code"}
    assert '"monitor.threshold_m"' in src_beyond[prov["monitor.threshold_m"]]
    for key in ("n_items", "abstract", "run_id"):
        assert f'"{key}"' in src[prov[key]], (key, prov[key])
    import inspect   # a cell that calls the library's recorder: the helper records the key
    assert "report.record_settings(" in src[prov["cfg.koschmieder"]]
    assert '"cfg.koschmieder"' in inspect.getsource(report.record_settings)


def _element_text(page: str, element_id: str) -> str | None:
    """The text inside the element with ``id=element_id`` of an HTML page (stdlib parser), or None."""
    from html.parser import HTMLParser

    class Finder(HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=True)
            self.depth, self.parts, self.found = 0, [], False

        def handle_starttag(self, tag, attrs):
            if self.depth:
                self.depth += tag not in ("img", "br", "meta", "link", "input", "hr")
            elif dict(attrs).get("id") == element_id:
                self.depth, self.found = 1, True

        def handle_endtag(self, tag):
            if self.depth:
                self.depth -= 1

        def handle_data(self, data):
            if self.depth:
                self.parts.append(data)

    f = Finder()
    f.feed(page)
    return "".join(f.parts) if f.found else None


def test_the_html_links_every_cited_number_to_its_cell(root, numbers, synthetic_paper):
    """Issue 23: each cited number of the HTML paper is a link to the cell that recorded it in the rendered
    view of the executed notebook; following the link opens that file at an anchor whose content is the
    labelled cell (its ``#| label:`` line); each embedded figure and table links to its own cell; the PDF names
    the cells."""
    res = synthetic_paper[1]
    html = res["html"].read_text(encoding="utf-8")
    prov = report.load_provenance(paths.numbers_file(root))
    cited = report.cited_keys((stages.ROOT / "paper" / "index.qmd").read_text(encoding="utf-8"))
    links = re.findall(r'<a href="([^"#]+)#([^"]+)" class="murk-(?:number|source)" data-key="([^"]+)" '
                       r'data-cell="([^"]+)"', html)
    assert {k for *_, k, _ in links} == cited
    pages: dict[str, str] = {}
    for target, anchor, key, cell in links:
        assert anchor == cell == prov[key], key
        f = res["html"].parent / target
        # a number links to the view of the notebook whose cell recorded it
        home = "05_beyond.html" if anchor in _source_labels(("05_beyond",)) - _source_labels(("04_analyse",)) \
            else "04_analyse.html"
        assert f.is_file() and f.name == home, (target, anchor)
        page = pages.setdefault(target, f.read_text(encoding="utf-8"))
        text = _element_text(page, anchor)
        assert text is not None, f"{target} has no anchor #{anchor} (for {key})"
        assert f"#| label: {anchor}\n" in text and f"cell {anchor}" in text, anchor
    # the anchored cell holds what it recorded: the value of a short number is in its output or source
    view = pages["04_analyse.html"]
    assert "fig-signals-t2" in (_element_text(view, "fig-signals-t2") or "")
    assert "data:image/png;base64," in view and "nb-cell" in view
    # each embedded figure and table links to its cell in the view, which holds that cell
    assert "05_beyond.html" in pages   # the numbers of the analysis beyond the spec link to its view
    for nb, label in report.EMBED_RE.findall((stages.ROOT / "paper" / "index.qmd").read_text(encoding="utf-8")):
        for stage in ("04_analyse", "05_beyond"):
            if nb.endswith(f"{stage}.ipynb"):
                assert f'href="{stage}.html#{label}"' in html, label
                view_ = (res["html"].parent / f"{stage}.html").read_text(encoding="utf-8")
                assert f"#| label: {label}\n" in (_element_text(view_, label) or ""), label
    # the PDF names the cell of every cited number (a footnote per paragraph)
    typ = (res["html"].parent / "index.typ").read_text(encoding="utf-8")
    assert "#footnote[From `notebooks/04_analyse.py`, cell `num-rq1`" in typ
    assert "`notebooks/05_beyond.py`, cell `num-monitor`" in typ   # a beyond number's footnote names its notebook
    assert {prov[k] for k in cited} <= set(re.findall(r"cell `([^`]+)`", typ))
    if shutil.which("pdftotext"):
        import subprocess

        # (a label may break across lines at one of its hyphens, which pdftotext then drops, and a footnote may
        # break across pages right after its label, which puts the page number between the label and its keys)
        text = "".join(subprocess.run(["pdftotext", str(res["pdf"]), "-"], capture_output=True, text=True,
                                      check=True).stdout.split()).replace("-", "")
        lost = sorted({prov[k] for k in cited
                       if not re.search(re.escape(f"cell{prov[k]}".replace("-", "")) + r"\d*\(", text)})
        assert lost == [], f"cells of cited numbers missing from the PDF: {lost}"


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


# --------------------------------------------------------------------------- read-out health (issue 12)

KEY_B = "murk-tiny--synthetic-b"


def _table(root, name: str) -> list[dict]:
    """The rows of analysis/tbl-<name>.md as dicts (header -> cell)."""
    lines = [ln for ln in (paths.analysis_dir(root) / f"tbl-{name}.md").read_text(encoding="utf-8").splitlines()
             if ln.startswith("|")]
    cells = [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines]
    return [dict(zip(cells[0], row)) for row in cells[2:]]


def test_option_mass_marks_the_model_below_the_threshold(root, numbers, synthetic_paper):
    assert numbers[f"option_mass.{KEY}.t2"] == "0.99" and numbers[f"option_mass.{KEY}.t3"] == "0.99"
    assert numbers[f"option_mass.{KEY_B}.t2"] == "0.30" and numbers[f"option_mass.{KEY_B}.t3"] == "0.30"
    assert numbers["option_mass.threshold"] == "0.5"
    assert numbers["option_mass.low_models"] == "synthetic-b"
    foot = numbers["option_mass.footnote"]
    assert foot.startswith("† ") and "below 0.5" in foot and "synthetic-b" in foot and "synthetic-a" not in foot
    assert "not interpreted" in foot and "random-weight" in foot            # b is a pipeline check
    rows = {r["model"]: r for r in _table(root, "models")}
    assert rows["`murk-tiny/synthetic-b` †"]["option mass (clean, t2 / t3)"] == "0.30 / 0.30"
    assert rows["`org/synthetic-a`"]["option mass (clean, t2 / t3)"] == "0.99 / 0.99"
    assert foot in (paths.analysis_dir(root) / "tbl-models.md").read_text(encoding="utf-8")   # under the table
    # the mark follows the model into the other tables and the generated sentences, never onto model a
    for name in ("end-of-sweep", "crossings", "verbal-wordings"):
        models = {r["model"] for r in _table(root, name)}
        assert models == {"synthetic-a", "synthetic-b †"}, (name, models)
    assert "synthetic-b †" in numbers["finding.rq1.fog.t2"] and "synthetic-a †" not in numbers["finding.rq1.fog.t2"]
    html = synthetic_paper[1]["html"].read_text(encoding="utf-8")
    assert "† Median first-token probability" in html


def test_verbal_parse_and_limit_hit_rates(root, numbers):
    # model a: nine images in ten parsed, never cut; model b: never parsed, always cut
    for arm in ("fog", "underwater"):
        for lab in ("clean", "end"):
            assert numbers[f"verbal.parse_rate.{KEY}.{arm}.v1.{lab}"] == "0.90"
            assert numbers[f"verbal.limit_hit_rate.{KEY}.{arm}.v1.{lab}"] == "0.00"
            assert numbers[f"verbal.parse_rate.{KEY_B}.{arm}.v1.{lab}"] == "0.00"
            assert numbers[f"verbal.limit_hit_rate.{KEY_B}.{arm}.v1.{lab}"] == "1.00"
            # every image, pooled over the three questions (t2, t3 true, t3 false)
            assert numbers[f"verbal.n_asked.{KEY}.{arm}.v1.{lab}"] == str(3 * synthetic.N_IMAGES)
    # the wordings v2/v3 were asked on the first N_VERBAL images only, and always parsed for model a
    assert numbers[f"verbal.n_asked.{KEY}.fog.v2.clean"] == str(3 * synthetic.N_VERBAL)
    assert numbers[f"verbal.parse_rate.{KEY}.fog.v3.end"] == "1.00"
    # pooled over the physical arms and levels, the clean image counted once: 1 + 2 x 8 conditions
    assert numbers[f"verbal.n_asked.{KEY}.v1.all"] == str(3 * synthetic.N_IMAGES * (1 + 2 * len(physics.SWEEP_M)))
    assert numbers[f"verbal.parse_rate.{KEY}.v1.all"] == "0.90" and numbers[f"verbal.limit_hit_rate.{KEY_B}.v1.all"] == "1.00"
    rates = xr.open_dataset(paths.analysis_dir(root) / "verbal_rates.nc")
    assert set(rates.dims) == {"model", "arm", "level", "wording"}
    np.testing.assert_allclose(rates["parse_rate"].sel(model=MODELS[0], arm="fog", wording="v1").values, 0.9)
    # the sentences: a rate for a, "no parseable confidence" for b
    s = numbers["finding.rq2.verbal_rates"]
    assert "synthetic-a, a share of 0.90 held a parseable confidence and 0.00 were cut by the 12-token limit" in s
    assert "synthetic-b †: no parseable confidence in" in s and "1.00 were cut" in s
    assert numbers["finding.rq2.verbal_parse"].startswith("synthetic-b † gave no parseable confidence")


def test_verbal_tables_state_parsed_and_cut(root):
    t4 = {(r["model"], r["arm"]): r for r in _table(root, "end-of-sweep")}
    assert t4[("synthetic-b †", "fog")]["mean verbal"] == "no parseable confidence"
    assert t4[("synthetic-b †", "fog")]["verbal parsed / cut"] == "0.00 / 1.00"
    assert t4[("synthetic-a", "fog")]["mean verbal"].startswith("0.90 [")
    assert t4[("synthetic-a", "underwater")]["verbal parsed / cut"] == "0.90 / 0.00"
    t6 = _table(root, "verbal-wordings")
    a_clean = next(r for r in t6 if r["model"] == "synthetic-a" and r["V (m)"] == "clean")
    assert (a_clean["items"], a_clean["v1"], a_clean["v2"], a_clean["v3"]) == ("10", "0.90", "0.80", "0.70")
    assert (a_clean["v1 parsed"], a_clean["v1 cut"], a_clean["v2 parsed"], a_clean["v3 cut"]) == ("0.90", "0.00",
                                                                                                  "1.00", "0.00")
    for r in (r for r in t6 if r["model"] == "synthetic-b †"):
        assert (r["v1"], r["v2"], r["v3"], r["v2 parsed"], r["v2 cut"]) == ("none", "none", "none", "0.00", "1.00")


def test_methods_and_colophon_keys(numbers, synthetic_paper):
    assert numbers["cfg.ece_bins"] == "10" and numbers["cfg.value_dtype"] == "`float64`"
    assert numbers["cfg.monitor_quantile"] == "0.3" and numbers["cfg.monitor_far_fraction"] == "0.9875"
    assert "12-token limit" in numbers["methods.verbal_grammar"] and "missing" in numbers["methods.verbal_grammar"]
    gen = numbers["colophon.ignored_generation_settings"]
    assert "`org/synthetic-a`: `do_sample = true`, `temperature = 0.7`, `top_k = 20`" in gen
    assert "`murk-tiny/synthetic-b`: not recorded" in gen              # a store of an older murk says so
    load = numbers["colophon.loading_options"]
    assert "`trust_remote_code = false`, `allow_pickle = false` for `org/synthetic-a`" in load
    assert "not recorded (an older store) for `murk-tiny/synthetic-b`" in load
    # custom code a checkpoint declared and the read-out did not run: which class was used instead
    (where, what), = synthetic.CUSTOM_CODE_NOT_RUN_A.items()
    custom, used = what.split(" -> ")
    file, auto = where.split(" ")
    assert (f"`org/synthetic-a`'s {file} names `{custom}` ({auto}), not run: the built-in `{used}` was "
            f"used instead") in load
    assert load.count("custom code declared but not run") == 1 and "synthetic-b`'s" not in load
    html = synthetic_paper[1]["html"].read_text(encoding="utf-8")
    text = _visible(html)   # a cited number is a link to its cell: the text a reader sees
    for phrase in ("Decoding is greedy", "sampling settings are recorded", "float32", "V ≥ 250 m", "V ≤ 1.95 m",
                   "one random seed per image shared by its severities", "without a floor", "an oracle",
                   "0.3 quantile", "do_sample = true", "modeling_synth.SynthForConditionalGeneration"):
        assert phrase in text, phrase
    assert "(Guo et al." in text and "@guo2017calibration" not in text       # the ECE bins' citation resolves


def test_nominal_removed_pairs_and_the_absent_monitor(root, numbers):
    assert numbers["nominal.n_pairs"] == str(5 * synthetic.N_IMAGES)
    assert numbers["nominal.removed.total"] == "0" and numbers["nominal.removed.several_roots"] == "0"
    assert numbers["nominal.removed_sentence"] == f"The equivalent visibility is defined for every one of the " \
                                                  f"{5 * synthetic.N_IMAGES} image–severity pairs"
    assert numbers["nominal.removed_sentence"] in (paths.analysis_dir(root) / "tbl-nominal.md").read_text("utf-8")
    # no monitor and no depth cache in this root: its numbers say so instead of failing
    assert numbers["finding.monitor.depth"].startswith(report.NOT_COMPUTED)
    assert "did not run" in numbers["finding.monitor.accuracy"] and "did not run" in numbers["finding.monitor.awareness"]
    assert "not computed" in (paths.analysis_dir(root) / "tbl-monitor-depth.md").read_text("utf-8")


def _mass(text: str) -> float:
    """An option mass as the numbers file writes it: ``0.30`` or ``7.1×10⁻³``."""
    if "×10" not in text:
        return float(text)
    mant, exp = text.split("×10")
    return float(mant) * 10.0 ** int(exp.translate(str.maketrans("⁻⁰¹²³⁴⁵⁶⁷⁸⁹", "-0123456789")))


def test_the_demo_cube_health_and_monitor_numbers(demo):
    """The same keys on the offline demo (three tiny random-weight VLMs, two on subsets of its four items, the
    monitor, constant depth)."""
    import json

    import stages

    n = report.load_numbers(paths.numbers_file(demo))
    tiny = tuple(stages.DEMO_N)
    # random weights put a sliver of the first-token probability on the letters: all are marked
    assert set(n["option_mass.low_models"].replace(" and ", ", ").split(", ")) == {m.split("/")[1] for m in tiny}
    for m in tiny:
        k = paths.model_slug(m)
        assert _mass(n[f"option_mass.{k}.t2"]) < 0.5 and _mass(n[f"option_mass.{k}.t3"]) < 0.5
    assert "† Median first-token probability" in n["option_mass.footnote"]
    assert _mass("7.1×10⁻³") == pytest.approx(7.1e-3) and _mass("0.30") == 0.3
    # the sentence names exactly the models without a parseable confidence
    zero = [m.split("/")[1] for m in tiny if n[f"verbal.parse_rate.{paths.model_slug(m)}.v1.all"] == "0.00"]
    for m in tiny:
        s = f"{m.split('/')[1]} †: no parseable confidence in"
        assert (s in n["finding.rq2.verbal_rates"]) == (m.split("/")[1] in zero), m
    assert all(f"verbal.limit_hit_rate.{paths.model_slug(m)}.fog.v1.end" in n for m in tiny)
    # the Snakefile passed the loading options by name (workflow.yaml: false), and the store recorded them
    nb = json.loads((demo / "notebooks" / "03_readout-murk-tiny--smolvlm.ipynb").read_text(encoding="utf-8"))
    params = nb["metadata"]["papermill"]["parameters"]
    assert params["trust_remote_code"] is False and params["allow_pickle"] is False
    assert params["run_by"] == "snakemake"  # its refusals speak Snakemake's words (--config allow_pickle=true)
    assert n["colophon.loading_options"] == ("`trust_remote_code = false`, `allow_pickle = false` for "
                                             + report.fmt_list(f"`{m}`" for m in tiny))
    assert n["colophon.ignored_generation_settings"].count("`murk-tiny/") == len(tiny)
    # the monitor: false abstentions on clean images, opaque shares per level, the wrong-depth table
    k_, of = n["monitor.false_abstain_clean.count"].split("/")
    assert of == str(stages.DEMO_N_ITEMS) and 0 <= int(k_) <= stages.DEMO_N_ITEMS
    for arm in ("fog", "underwater"):
        shares = [float(n[f"monitor.opaque_share.{arm}.{report.level_label(v)}"]) for v in physics.SWEEP_M]
        assert all(0 <= x <= 100 for x in shares) and n[f"monitor.opaque_share.{arm}.end"] == n[
            f"monitor.opaque_share.{arm}.1.953125"]
        # a global depth factor kappa moves V_hat by exactly kappa (only beta * z enters the image formation)
        assert n[f"monitor.depth.kappa_0.5.{arm}.ratio_to_oracle"] == "0.50"
        assert n[f"monitor.depth.kappa_2.{arm}.ratio_to_oracle"] == "2.00"
        assert n[f"monitor.depth.oracle.{arm}.ratio_to_oracle"] == "1.00"
        # the demo's depth is the constant backend: the constant-depth row is the oracle's
        assert n[f"monitor.depth.constant.{arm}.gate_changed"] == "0"
    assert n["monitor.depth.n_items"] == str(stages.DEMO_N_ITEMS)
    assert "moves V̂ by κ" in n["finding.monitor.depth"] and "one global factor" in n["finding.monitor.depth"]
    assert len(_table(demo, "monitor-depth")) == 8
    assert n["nominal.removed_sentence"] and n["nominal.curve_non_monotone"].endswith("going murkier")


# --- issue 20: every generated sentence states the direction, bound and size that the synthetic truth has ---
SIGNALS = {"c_int": "finding.rq2.c_int.t2", "verbal_conf": "finding.rq2.verbal_conf.t2",
           "abstain": "finding.rq3.abstain.t2", "abstain2": "finding.rq3.abstain2.t2"}


def _sentences(text: str) -> list[str]:
    return [x for x in re.split(r"(?<=[.])\s+(?=[A-Z])", text) if x]


def test_sentences_move_each_signal_its_own_way(numbers):
    """Confidences fall, abstain rates rise: no sentence says an abstain rate falls, or a confidence rises."""
    for signal, key in SIGNALS.items():
        for sentence in _sentences(numbers[key]):
            rest = sentence.replace("accuracy falls", "").replace("accuracy does", "")
            if signal.startswith("abstain"):
                assert "fall" not in rest and re.search(r"\bris(e|es|ing|en)\b", rest), sentence
            else:
                assert not re.search(r"\bris(e|es|ing|en)\b", rest), sentence


def test_a_censored_signal_is_stated_as_not_reached_with_its_bound(numbers):
    """The internal confidence never moves and "I don't know" is never chosen (tests/synthetic.py): neither is
    said to fall or rise in murkier conditions; each is said not to reach its mid-way value within the sweep,
    with the lower bound on W that the crossings give."""
    for signal, verb in (("c_int", "fall"), ("abstain2", "rise")):
        text = numbers[SIGNALS[signal]]
        assert f"does not {verb} to its mid-way value within the sweep" in text, text
        assert "murkier conditions" not in text, text
        for m in MODELS:
            k = paths.model_slug(m)
            for arm in ("fog", "underwater"):
                rq = "rq2" if signal == "c_int" else "rq3"
                assert numbers[f"verdict.{rq}.{signal}.{arm}.t2.{k}"] == "lags"
                assert numbers[f"lag_case.{rq}.{signal}.{arm}.t2.{k}"] == "not reached"
                w = numbers[f"w.{signal}.{arm}.t2.{k}"]
                assert w.startswith("≥ ") and (f"W {w})" in text or f"W {w};" in text), (w, text)   # the bound alone


def test_abstention_rises_with_and_without_a_lag(numbers):
    """Model a abstains on (most of) its errors: its abstain rate reaches its mid-way value in murkier conditions
    than accuracy (a lag, W > 0); model b's rate rises exactly as accuracy falls (W = 0 within its interval)."""
    a, b = (paths.model_slug(m) for m in MODELS)
    text = numbers["finding.rq3.abstain.t2"]
    for arm in ("fog", "underwater"):
        assert numbers[f"verdict.rq3.abstain.{arm}.t2.{a}"] == "lags"
        assert numbers[f"verdict.rq3.abstain.{arm}.t2.{b}"] == "with"
        assert float(numbers[f"w.abstain.{arm}.t2.{a}"]) > 0
    lag, together = _sentences(text)
    assert "lags accuracy, rising only in murkier conditions" in lag and "synthetic-a" in lag and "-b" not in lag
    assert "rises as accuracy falls, its interval of W excluding a lag of one sweep level" in together
    assert "synthetic-b" in together
    assert "W = " in lag and "≥" not in lag      # an exact W, not a bound


def test_rq1_states_the_collapse_with_its_crossing_at_the_points_precision(numbers):
    for arm, v_half in synthetic.V_HALF_M.items():
        text = numbers[f"finding.rq1.{arm}.t2"]
        assert "collapses to chance for" in text
        found = re.findall(r"V_acc = (\d+\.\d) \[(\d+\.\d), (\d+\.\d)\] m", text)   # one decimal each
        assert len(found) == len(MODELS), text
        for v, lo, hi in found:
            assert v_half / 2 < float(v) < 2 * v_half and float(lo) <= float(v) <= float(hi)


def test_verdict_words_match_their_intervals(root, numbers, synthetic_paper):
    """Issue 39, item 2, on the synthetic truths: two models collapse, and each fall band names its model (never
    "for this model" next to two names); a censored W prints as its bound alone (never "≥ 0.76 [0.63, 0.87]");
    model b's abstain rate rises exactly with accuracy, so its W interval excludes a lag of one sweep level
    (read from the design: log10 2) and only there "rises as accuracy falls" is said; the Methods state the
    Holm control with its generated family size."""
    for arm in synthetic.V_HALF_M:
        text = numbers[f"finding.rq1.{arm}.t2"]
        assert "this model" not in text and "these models" not in text, text
        for m in MODELS:
            assert re.search(rf"between V = [\d.]+ and [\d.]+ m for {re.escape(m.split('/')[-1])}", text), (m, text)
    c = xr.open_dataset(paths.analysis_dir(root) / "crossings.nc")
    assert c.attrs["w_margin_decades"] == pytest.approx(np.log10(2)) and numbers["methods.w_margin"] == "0.30"
    for key in ("finding.rq2.c_int.t2", "finding.rq3.abstain2.t2"):
        assert not re.search(r"[≥≤] -?\d+\.\d+ \[", numbers[key]), numbers[key]   # a bound alone
    b = paths.model_slug(MODELS[1])
    for arm in ("fog", "underwater"):
        w = c.sel(model=MODELS[1], arm=arm, task="t2", readout="abstain")
        assert float(w["w_hi"]) < np.log10(2) and float(w["w_lo"]) > -np.log10(2)
        assert numbers[f"verdict.rq3.abstain.{arm}.t2.{b}"] == "with"
    assert numbers["lag.family.rq3.abstain.t2"] == "4" and numbers["diagnostic.floor_family"] == "8"
    html = " ".join(re.sub(r"<[^>]+>", "", synthetic_paper[1]["html"].read_text(encoding="utf-8")).split())
    assert "Holm" in html and "the 8 control floors" in html


def test_rq4_names_the_largest_change_by_magnitude_with_its_sign_and_severity(numbers):
    """Model a's ImageNet-C accuracy falls below clean, most at severity 3; model b's lies above its clean
    accuracy (the spec's SmolVLM case), most at severity 2 (tests/synthetic.py IMAGENET_C_CORRECT)."""
    text = numbers["finding.rq4.t2"]
    for k_, m in enumerate(MODELS):
        sev, change = synthetic.largest_imagenet_c_change(k_)
        k = paths.model_slug(m)
        assert numbers[f"rq4.largest_change.severity.t2.{k}"] == str(sev)
        assert float(numbers[f"rq4.largest_change.t2.{k}"]) == pytest.approx(change, abs=0.005)
        words = f"a {'rise' if change > 0 else 'fall'} of {abs(change):.2f}"
        assert re.search(rf"{re.escape(words)} \[[^]]*\](, its interval holding zero)?, at severity {sev}", text), text
    assert numbers[f"rq4.largest_change.verdict.t2.{paths.model_slug(MODELS[1])}"] == "above"


def test_methods_describes_the_severities_from_the_parameter_table(numbers, synthetic_paper):
    from murk.scene import _nominal as nominal

    assert numbers["methods.imagenet_c_severities"] == nominal.describe_severities()
    text = " ".join(html_lib.unescape(synthetic_paper[1]["html"].read_text(encoding="utf-8")).translate(STRAIGHT).split())
    assert "3 and 4 only in the fractal's roughness (wibble decay 1.7, 1.5)" in text
    assert "neighbouring severities differ only in its roughness" not in text


def test_one_number_style_in_every_number(numbers):
    assert not [k for k, v in numbers.items() if re.search(r"(?<![\d.])-0\.0+(?!\d*[1-9])\b", v)]


STRAIGHT = str.maketrans({"‘": "'", "’": "'", "“": '"', "”": '"'})   # pandoc makes quotes curly
#: the BARE variant's first model as the paper names it (its folder's name, then the last part both ids share):
#: as written in the HTML's and the PDF's text, escaped in the Markdown of the numbers and tables
HOSTILE_NAME = f"{synthetic.HOSTILE_FOLDER}/final"
HOSTILE_MD = report.markdown_text(HOSTILE_NAME)


@pytest.fixture(scope="module")
def bare(synthetic_bare):
    root, res = synthetic_bare
    text = html_lib.unescape(re.sub(r"<[^>]+>", "", res["html"].read_text(encoding="utf-8")))
    return report.load_numbers(paths.numbers_file(root)), " ".join(text.translate(STRAIGHT).split())


def test_absent_sections_say_what_was_not_run(bare):
    """No nominal equivalence, no verbal wordings, no parseable verbal confidence, no monitor: each section says
    so in one sentence, and no sentence is assembled from "not computed" placeholders."""
    n, html = bare
    assert n["finding.rq4.nominal"].startswith("The nominal equivalence was not run for this output root")
    assert all(n[f"verdict.rq4.t2.{paths.model_slug(m)}"] == "not computed" for m in synthetic.BARE["models"])
    assert "did not run" in n["finding.monitor.accuracy"] and "did not run" in n["finding.monitor.awareness"]
    assert "not compared" in n["finding.rq3.verbal_wordings"]
    assert n["finding.rq2.verbal_conf.t2"].endswith("it has no parseable value.")
    assert "their verbalized confidence has no mean" in n["finding.rq2.verbal_parse"]   # two models
    for bad in ("of not computed in this run m", "n/a (not computed in this run)", "-0.00"):
        assert bad not in html, bad
    for key in ("finding.rq4.nominal", "finding.monitor.accuracy", "finding.monitor.awareness",
                "finding.rq3.verbal_wordings"):
        assert n[key].split(" (")[0] in html, key


def test_design_diagnostics_name_the_confounded_design_and_clear_the_other(bare):
    """Issue 26: the first model's design is confounded as the spec's pilot was (blank-image t2 accuracy 0, below
    chance; "No" to every t3 question on the blank image), the second's is not (its controls at chance, its
    answers spread): the generated diagnostics say so, model by model, and the paper states them."""
    n, html = bare
    a, b = (paths.model_slug(m) for m in synthetic.BARE["models"])
    assert n[f"diagnostic.floor.blank.t2.{a}"] == "below chance"
    assert (n[f"diagnostic.t3_blank_top_answer.{a}"], n[f"diagnostic.t3_blank_top_share.{a}"]) == ("No", "1.00")
    assert all(n[f"diagnostic.floor.{c}.{t}.{b}"] == "none" for c in ("blank", "shuffled") for t in ("t2", "t3"))
    assert n[f"diagnostic.t3_blank_top_share.{b}"] == "0.50" and n[f"diagnostic.guesser.t3.{b}"] == "0.50"
    f = n["finding.diagnostic"]
    assert (f"On the blank image the t2 floor lies below chance for {HOSTILE_MD} (0.00 [0.00, 0.00]): the "
            "distractors carry a prior the model exploits against.") in f, f
    assert f"On the blank image {HOSTILE_MD} (1.00) answers “No” to at least 0.90 of the t3 questions" in f, f
    assert f.endswith("For run2/final † the controls show no design confound: its floors are at chance or between "
                      "chance and the prior guesser, and no answer dominates t3 on the blank image."), f
    assert "run2" not in f.split("For run2/final †")[0]   # flagged nowhere
    assert "the controls show no design confound" in html
    assert f"the t2 floor lies below chance for {HOSTILE_NAME}" in html   # the folder's name as written


def test_models_with_the_same_last_part_keep_apart_everywhere(bare, synthetic_bare):
    """Two local folders ``runs/run1 <img …>/final``, ``runs/run2/final``: every sentence and table names them
    apart."""
    n, html = bare
    root = synthetic_bare[0]
    assert n["option_mass.low_models"] == "run2/final"
    assert "of this model rest" in n["option_mass.footnote"] and "its results" in n["option_mass.footnote"]
    for key in ("finding.rq1.fog.t2", "finding.rq2.c_int.t2", "finding.controls.blank.t2"):
        assert HOSTILE_MD in n[key] and "run2/final †" in n[key], n[key]
        assert "final and final" not in n[key]
    for table in ("crossings", "end-of-sweep", "confident"):
        md = (paths.analysis_dir(root) / f"tbl-{table}.md").read_text(encoding="utf-8")
        assert f"| {HOSTILE_MD} |" in md and "| run2/final † |" in md, (table, md[:400])


def test_a_model_folder_named_with_markup_is_shown_as_written_in_the_html_and_the_pdf(synthetic_bare):
    """Issue 49: the first model's folder is named with HTML (an ``onerror`` that sets the page's title), a
    Markdown link to ``javascript:``, mathtext, a Typst rule, a citation, emphasis, code and a pipe. Headless
    Chromium opens the paper and the two notebook views it links to: no script ran (the title is the page's
    own), no image or link came from the name, no ``javascript:`` link exists, and the page's text holds the name
    as written; the PDF's text holds it too, and the Typst rule in it set no page size."""
    import subprocess
    from pathlib import Path

    root, res = synthetic_bare
    flat = lambda t: " ".join(t.translate(STRAIGHT).split())  # noqa: E731  (line breaks of the layout)
    driver = stages.browser()
    try:
        for page in (res["html"], *res["views"].values()):
            html = Path(page).read_text(encoding="utf-8")
            title = re.search(r"<title>(.*?)</title>", html, re.S)
            driver.get(Path(page).resolve().as_uri())
            got = driver.execute_script(
                "return [document.title, document.querySelectorAll('img[src=\"x\"], img[onerror]').length,"
                " Array.from(document.querySelectorAll('[href]')).filter("
                "  e => /^\\s*javascript:/i.test(e.getAttribute('href'))).length, document.body.innerText];")
            assert got[0] != "pwned" and got[0] == html_lib.unescape(title.group(1).strip() if title else ""), got[0]
            assert got[1:3] == [0, 0], (page, got[1:3])
            assert HOSTILE_NAME in flat(got[3]), page
    finally:
        driver.quit()
    if shutil.which("pdftotext") is None:
        pytest.skip("pdftotext not installed: apt-get install poppler-utils")
    text = subprocess.run(["pdftotext", str(res["pdf"]), "-"], capture_output=True, text=True, check=True).stdout
    assert flat(HOSTILE_NAME) in flat(text.replace("-\n", "-")), "the folder's name, as written, in the PDF"
    info = subprocess.run(["pdfinfo", str(res["pdf"])], capture_output=True, text=True, check=True).stdout
    assert "Page size" in info and "28.3" not in info.split("Page size:")[1].split("\n")[0], info   # not 1 cm wide


def test_every_prompt_of_table_ii_reads_back_exactly_from_the_html_and_the_pdf(synthetic_paper):
    """Issue 20: placeholders (``<number>``, ``{category}``) and straight quotes of the prompt texts survive
    pandoc and Typst: each template and example of murk.protocol.prompt_table, as data/config.yaml holds it,
    is a cell of the HTML's prompts table and a run of the PDF table's column text."""
    import html as html_lib
    import shutil
    from html.parser import HTMLParser

    from murk.core import _config as config
    from murk.protocol import _prompts as prompts

    _, res = synthetic_paper
    rows = prompts.prompt_table(config.load_config())
    one_line = lambda v: " ".join(str(v).replace("\n", " ⏎ ").split())  # noqa: E731  (as the notebook's cell)
    assert any("<number>" in r["template"] for r in rows) and any('"' in r["template"] for r in rows)

    class Cells(HTMLParser):
        def __init__(self):
            super().__init__()
            self.tables, self.cell = [], None

        def handle_starttag(self, tag, attrs):
            if tag == "table":
                self.tables.append([])
            elif tag == "tr" and self.tables:
                self.tables[-1].append([])
            elif tag in ("td", "th") and self.tables:
                self.cell = []

        def handle_endtag(self, tag):
            if tag in ("td", "th") and self.cell is not None:
                self.tables[-1][-1].append(" ".join("".join(self.cell).split()))
                self.cell = None

        def handle_data(self, data):
            if self.cell is not None:
                self.cell.append(data)

    parser = Cells()
    parser.feed(res["html"].read_text(encoding="utf-8"))
    table = next(t for t in parser.tables if t and t[0] == ["prompt", "template", "example"])
    body = {r[0]: r[1:] for r in table[1:]}
    for r in rows:
        assert body.get(r["name"]) == [one_line(r["template"]), one_line(r["example"])], (r["name"], body.get(r["name"]))
    assert "&lt;number&gt;" in res["html"].read_text(encoding="utf-8") and html_lib.unescape("&lt;number&gt;") == "<number>"

    if shutil.which("pdftotext") is None:
        pytest.skip("poppler-utils (pdftotext) not installed")
    from _pdf import table_column_texts

    cols = table_column_texts(res["pdf"], ["prompt", "template", "example"])
    missing = [(r["name"], col) for r in rows for col in ("template", "example")
               if one_line(r[col]) not in cols[col]]
    assert not missing, (missing, cols["template"][:400])



def test_tables_are_numbered_in_citation_order_in_the_rendered_paper(synthetic_paper):
    """Issue 20: the first table the text cites is Table 1, and the numbers of the tables, taken in the order
    the text first cites them, are 1, 2, 3, ... (HTML/Markdown of the fallback and the PDF's captions)."""
    import re

    _, res = synthetic_paper
    md = res["md"].read_text(encoding="utf-8")
    body = re.sub(r"^: .*\{#tbl-[^}]+\}\s*$", "", md, flags=re.M)   # captions are not citations
    first = list(dict.fromkeys(re.findall(r"\[Table (\d+)\]\(#tbl-", body)))
    assert first[:1] == ["1"] and [int(x) for x in first] == list(range(1, len(first) + 1)), first
    assert re.search(r"^: Table 1: Prompt templates", md, flags=re.M)   # the first cited (Methods)
    if shutil.which("pdftotext") is not None:
        import subprocess

        text = subprocess.run(["pdftotext", str(res["pdf"]), "-"], capture_output=True, text=True, check=True).stdout
        assert "Table 1: Prompt templates" in " ".join(text.split())


def _expected_abstract_rq1(n: dict, arm: str) -> str:
    verdicts = [v for k, v in n.items() if k.startswith(f"verdict.rq1.{arm}.t2.")]
    return ("collapses to chance for" if "collapse" in verdicts else
            "falls through its mid-way value" if "partial" in verdicts else
            "is not above chance even on the clean image" if set(verdicts) == {"no skill"} else "no collapse")


def test_the_abstract_and_discussion_follow_the_verdicts(numbers, synthetic_paper):
    """The abstract and the Discussion are generated from the verdicts: on the synthetic cube (a collapse in
    both arms, a confidence lag) they say so, and the paper prints them under their headings."""
    _, res = synthetic_paper
    a = numbers["abstract"]
    low = a.lower()
    for arm, words in (("fog", "in fog,"), ("underwater", "under water,")):
        clause = words if words in low else "in both arms,"   # one clause when both arms say the same
        assert clause in low, (arm, a)
        part = low.split(clause, 1)[1].split(";")[0].split(". ")[0]
        assert _expected_abstract_rq1(numbers, arm) in part, (arm, a)
    assert "collapses to chance" in a   # the synthetic truth: accuracy collapses
    lags = [k for k, v in numbers.items() if k.startswith("verdict.rq2.c_int.") and v == "lags"]
    assert ("lags it (W > 0) for " in a) == bool(lags) and bool(lags)   # the synthetic truth: a lagging confidence
    assert ("random-weight checkpoints" in a) == ("tiny randomly initialised" in numbers["pipeline_check_note"])
    assert numbers["discussion.confidence"].startswith("Where a confidence lags accuracy")
    html = " ".join(res["html"].read_text(encoding="utf-8").split())   # pandoc wraps its lines
    assert "Abstract" in html and "Related work" in html and "Discussion" in html
    for k in ("abstract", "discussion.confidence", "discussion.abstention", "discussion.nominal"):
        assert " ".join(numbers[k].split("(")[0].split())[:60] in html, k


def test_the_demo_abstract_says_no_collapse(demo):
    """On the demo's tiny random-weight checkpoints (accuracy at chance) the same cells say that no collapse
    is observed, and that the results are a pipeline check: the texts change with the cube."""
    n = report.load_numbers(paths.numbers_file(demo))
    for arm in ("fog", "underwater"):
        assert _expected_abstract_rq1(n, arm) in n["abstract"]
    assert "collapses to chance for" not in n["abstract"] and "pipeline check" in n["abstract"]
    assert n["discussion.confidence"].startswith("No lag of a confidence")
    # the introduction's contributions (issue 39): a run of random-weight checkpoints only is a pipeline check,
    # neither a measurement nor evidence, and no lag is claimed where accuracy does not collapse
    assert n["intro.contribution.measurement"].startswith(f"A pipeline check on {n['n_items']} COCO val2017 images")
    assert n["intro.contribution.evidence"].startswith("What this run's read-outs show, all of them a pipeline check")
    assert "lags it" not in n["intro.contribution.evidence"] and "cannot be stated" in n["intro.contribution.evidence"]


def test_one_analysis_identity_in_every_artifact_and_a_mixed_paper_refused(root, numbers, synthetic_paper, tmp_path):
    """Issue 21: the numbers file, the executed notebook (the cell the paper reads), the cube, every figure file and
    the rendered paper carry the run identity of items_meta.json and one analysis identity; a copy of the root whose
    numbers file is of another analysis is refused by `python -m murk.report.paper`, writing nothing."""
    import json
    import subprocess
    import sys

    from murk.pipeline import markers as workflow
    from murk.report import _figure_files

    run = workflow.run_id("c" * 64, "i" * 64)                  # tests/synthetic.py's items_meta.json
    assert numbers["run_id"] == run and re.fullmatch(r"a-[0-9a-f]{12}", numbers["analysis_id"])
    assert json.loads(numbers["analysis.models"]) == MODELS
    ident = report.notebook_identity(paths.notebooks_out_dir(root) / "04_analyse.ipynb")
    assert ident["run_id"] == run and ident["analysis_id"] == numbers["analysis_id"] and ident["models"] == MODELS
    assert set(ident["inputs"]) >= {str(paths.readout_store(m, root).relative_to(root)) for m in MODELS}
    assert xr.open_zarr(paths.cube_store(root)).attrs["run_id"] == run
    ids = {"run_id": run, "analysis_id": numbers["analysis_id"]}
    for png in sorted(paths.figures_dir(root).glob("*.png")):
        assert _figure_files._file_identity(png) == ids, png
    embedded = sorted((paths.paper_out_dir(root) / "embed").glob("04_analyse-fig-*.png"))
    assert embedded and all(_figure_files._file_identity(f) == ids for f in embedded)
    html = synthetic_paper[1]["html"].read_text(encoding="utf-8")
    assert f'<meta name="murk-analysis-id" content="{numbers["analysis_id"]}">' in html[:html.index("</head>")]
    assert f"Run identity {run}; analysis identity {numbers['analysis_id']}" in _visible(html)
    # the numbers of another analysis beside this notebook: refused, naming both, nothing written
    copy = tmp_path / "out"
    shutil.copytree(root, copy)
    other = dict(numbers, analysis_id="a-000000000000", **{"analysis.models": json.dumps(MODELS[:1])})
    report.write_numbers(other, paths.numbers_file(copy))
    before = {p: p.read_bytes() for p in sorted(copy.rglob("*")) if p.is_file()}
    r = subprocess.run([sys.executable, "-m", "murk.report.paper", "--output-dir", str(copy)], capture_output=True,
                       text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert {p: p.read_bytes() for p in sorted(copy.rglob("*")) if p.is_file()} == before
    for s in ("a-000000000000", numbers["analysis_id"], str(paths.numbers_file(copy)),
              str(paths.notebooks_out_dir(copy) / "04_analyse.ipynb"),
              "python -m murk.pipeline.execute notebooks/04_analyse.py out/notebooks/04_analyse.ipynb -y 'models: [org/synthetic-a]' "
              "-p output_dir out",
              f"rm {paths.numbers_fragment('04_analyse', copy)} {paths.numbers_fragment('05_beyond', copy)}, then "
              "make paper"):
        assert s in r.stderr, (s, r.stderr)


def _interval(text: str) -> tuple[float, float]:
    lo, hi = (float(x.replace("−", "-")) for x in text.strip("[]").split(","))
    return lo, hi


def test_recalibration_and_risk_coverage_on_the_synthetic_cube(numbers):
    """Issue 24 on a cube with a known lag: model a's confidence is flat (0.9, or 1.0 on some errors) while its
    accuracy collapses, so without recalibration and with one temperature W is a positive lower bound (a lag);
    its overconfidence grows as V falls, so T(V) rises as V falls (b < 0); every recalibrated W is stated with its
    interval, and the sentence's verdict is the one the interval gives. Risk-coverage: the (perfect) monitor's V̂
    ranks model a's answers, whose errors sit in the murky levels, better than its internal confidence, which
    is higher on errors than on correct answers; the best signal the sentence names is the recorded one.
    Issue 39: each model's sentence states its own test half's n (the split of its own images), and what T(V̂)
    did to the blind spot is said from W before and after (:func:`murk.report.blind_spot_change`)."""
    from murk.core import _config as config
    from murk.monitor import _evaluation
    from murk.report import _claims as claims

    seed = config.load_config()["analysis"]["bootstrap_seed"]
    n_test = int((~_evaluation.split_images(np.arange(100, 100 + synthetic.N_IMAGES), seed=seed)).sum())

    for arm in ("fog", "underwater"):
        for method in ("none", "global"):
            assert numbers[f"recal.{method}.{arm}.t2.{KEY}.w"].startswith("≥"), method
            assert numbers[f"verdict.recal.{method}.{arm}.t2.{KEY}"] == claims.LAGS
        for method in ("none", "global", "per_level", "visibility"):
            w_, ci = numbers[f"recal.{method}.{arm}.t2.{KEY}.w"], numbers[f"recal.{method}.{arm}.t2.{KEY}.w.ci"]
            verdict = numbers[f"verdict.recal.{method}.{arm}.t2.{KEY}"]
            assert bool(ci) != w_.startswith(("≥", "≤")), (method, arm)   # a bound prints alone (issue 39)
            if w_.startswith("≥"):
                assert verdict == (claims.LAGS if float(w_.lstrip("≥ ").replace("−", "-")) > 0 else claims.NO_LAG)
            elif w_.startswith("≤"):
                assert verdict in (claims.LEADS, claims.NO_LAG)
            else:
                lo, hi = _interval(ci)
                assert verdict == (claims.WITH if lo <= 0 <= hi else claims.LEADS if hi < 0 else claims.LAGS)
        where = "in fog" if arm == "fog" else "under water"
        before, after = (numbers[f"verdict.recal.{mt}.{arm}.t2.{KEY}"] for mt in ("none", "visibility"))
        assert before == claims.LAGS   # the planted blind spot: the words may say what T(V̂) did to it
        if after in (claims.WITH, claims.LEADS, claims.LAGS):
            phrase = {claims.WITH: "closes", claims.LEADS: "is reversed", claims.LAGS: "stays open"}[after]
            tail = {claims.WITH: " (its interval holds 0)", claims.LEADS: " (the confidence falls first)",
                    claims.LAGS: ""}
            assert claims.blind_spot_change(before, after) == f"with T(V̂) the blind spot {phrase}" + tail[after]
        else:
            assert "closes cannot be established" in claims.blind_spot_change(before, after)
        w_ci = lambda mt: " ".join(filter(None, (numbers[f"recal.{mt}.{arm}.t2.{KEY}.w"],  # noqa: E731
                                                 numbers[f"recal.{mt}.{arm}.t2.{KEY}.w.ci"])))
        w_vis = w_ci("visibility")
        assert (f"{where}, W of the internal confidence is {w_ci('none')} without "
                f"recalibration") in numbers["finding.recal"]
        assert f"{w_vis} with T(V̂): {claims.blind_spot_change(before, after)}" in numbers["finding.recal"]
        # risk-coverage
        aurc = {s: float(numbers[f"rc.{s}.{arm}.t2.{KEY}.aurc"]) for s in ("c_int", "monitor_deployable", "abstain")}
        assert aurc["monitor_deployable"] < aurc["c_int"] and aurc["abstain"] < aurc["c_int"]
        # the sentence states the recorded verdict (murk.report.best_signal, tie-aware AURC): a signal is named only
        # where its paired resamples beat every other; else the lowest AURC is reported as not separated
        best = numbers[f"rc.best.{arm}.t2.{KEY}"]
        said = next(t for t in numbers["finding.rc"].split(". ") if t.startswith(where.capitalize()))
        said = next(p for p in said.split("; ") if "for synthetic-a," in p)
        if best != "none":
            assert f"for synthetic-a, {best} ranks the answers best" in said, said
        else:
            assert "for synthetic-a, no signal can be named best: the lowest AURC, " in said, said
            assert "ranks the answers best" not in said
        lowest = min(float(numbers[k]) for k in numbers if k.startswith("rc.") and k.endswith(f".{arm}.t2.{KEY}.aurc"))
        assert f"AURC {report.fmt(lowest)} [" in said or f"AURC, {report.fmt(lowest)} [" in said, said
    assert float(numbers[f"recal.b.t2.{KEY}"].replace("−", "-")) < 0
    for key_ in (KEY, "murk-tiny--synthetic-b"):
        assert numbers[f"recal.n_test_images.{key_}"] == str(n_test)
        assert numbers[f"recal.n_calibration_images.{key_}"] == str(synthetic.N_IMAGES - n_test)
    assert numbers["finding.recal"].startswith(f"On the {n_test} test images of synthetic-a (t2), in fog, W ")
    assert f". On the {n_test} test images of synthetic-b † (t2), in fog, W " in numbers["finding.recal"]


def test_a_subset_models_recalibration_is_over_its_own_images(synthetic_subset):
    """Issue 39, planted: model a read out on the first 12 of the 30 images (the monitor on all 30). Its halves are
    drawn from its 12 images, the finding states the n of its own test half (not the 30 images' test half), and
    its intervals are those of the draw over its own test images, recomputed here from the cube."""
    from murk.core import _config as config
    from murk.monitor import _evaluation

    A = config.load_config()["analysis"]
    numbers = report.load_numbers(paths.numbers_file(synthetic_subset))
    ids = np.arange(100, 100 + synthetic.N_IMAGES)
    n_own = int((~_evaluation.split_images(ids[: synthetic.N_SUBSET], seed=A["bootstrap_seed"])).sum())
    assert n_own != int((~_evaluation.split_images(ids, seed=A["bootstrap_seed"])).sum())   # the planted difference
    assert numbers["finding.recal"].startswith(f"On the {n_own} test images of synthetic-a (t2), in fog, W ")
    assert f"synthetic-a, {synthetic.N_SUBSET - n_own} and {n_own} of its {synthetic.N_SUBSET} images" == \
        numbers["recal.halves"]
    stages.check_recalibration_over_own_images(synthetic_subset, numbers, {MODELS[0]: synthetic.N_SUBSET}, A)
