"""The paper's PDF without Quarto (pandoc + Typst): long tables break across pages with their header
repeated, no row is lost, the page is A4 as `_quarto.yml` says, and no heading ends a page alone
(issue 14). A study-sized sweep table (5 models x 2 arms x 9 levels) is rendered through
:func:`murk.report.render_paper`; the demo papers themselves are checked in ``test_demo_resume.py``
and ``test_faults_snakemake.py``.
"""

import shutil

import pytest

from _pdf import check_pdf_keeps_every_table_row, check_rows_on_lines, pdf_words
from murk import report
from murk.report import paper

pytestmark = pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils (pdftotext) not installed")

#: the study's five models (data/study.yaml) as the paper names them, the longest with the † mark
MODELS = ["Qwen3-VL-2B-Instruct", "Qwen3-VL-4B-Instruct", "InternVL3_5-2B-HF", "SmolVLM2-2.2B-Instruct †",
          "gemma-4-E2B-it"]
LEVELS = ["clean", "250", "125", "62.5", "31.3", "15.6", "7.8", "3.9", "1.95"]
SIGNALS = ["accuracy", "c_int", "verbal", "abstain", "abstain₂"]   # the sweep tables' columns (04_analyse.py)


def _sweep_table() -> tuple[str, list[str]]:
    """A study-sized sweep table as the analyse notebook writes it (spec Table IX): model x arm x level,
    five signals, each an estimate with its interval at its widest."""
    rows, labels = [], []
    for m in MODELS:
        for arm in ("fog", "underwater"):
            for lvl in LEVELS:
                label = f"row{len(labels):03d}"
                labels.append(label)
                rows.append({"row": label, "model": m, "arm": arm, "V (m)": lvl,
                             **{s: report.estimate_cell(report.fmt_estimate(0.99, 0.97, 1.0)) for s in SIGNALS}})
    return report.markdown_table(rows), labels


def _crossings_table() -> str:
    """A study-sized crossings table as the analyse notebook writes it (spec Table V), with the widest cells."""
    rows = []
    for m in MODELS:
        for arm in ("fog", "underwater"):
            for task in ("t2", "t3"):
                v = report.estimate_cell("125 [62.5, 250]")
                w = report.estimate_cell(report.fmt_estimate(-0.05, -0.12, -0.03))
                rows.append({"model": m, "arm": arm, "task": task, "V_acc (m)": v, "V_acc, blank (m)": v,
                             **{f"W {s}": w for s in ("c_int", "verbal", "abstain", "abstain₂")}})
    return report.markdown_table(rows)


def _small_table(k: int) -> str:
    return report.markdown_table([{"row": f"s{k:02d}r{j}", "value": f"{0.1 * j:.2f}"} for j in range(8)])


#: the analysis identities of the rendered root's numbers file and executed notebook (they must agree)
IDS = {"run_id": "r-111111111111", "analysis_id": "a-aaaaaaaaaaaa"}
N_EMBEDDED_FIGURES, N_EMBEDDED_TABLES = 8, 8


def _embedded(nb_path) -> str:
    """An executed-notebook stand-in of 8 figures of growing height, then 8 tables of varying length, and the
    paper part that embeds them one by one after paragraphs of varying length: their ends, and so their
    "Source:" lines (:func:`murk.report.resolve_embeds`), fall at many heights of their pages."""
    import base64
    import io

    import nbformat
    from PIL import Image

    from murk import core
    from murk.pipeline import markers as workflow

    nb = nbformat.v4.new_notebook()
    ident = nbformat.v4.new_code_cell(f"#| label: {core.IDENTITY_LABEL}\ndisplay(...)")
    ident.outputs = [nbformat.v4.new_output("display_data", data=workflow.identity_bundle(**IDS))]
    nb.cells.append(ident)
    sentence = "A sentence of body text that moves the next figure down the page. "
    parts = ["# Figures and their sources\n"]
    for k in range(N_EMBEDDED_FIGURES + N_EMBEDDED_TABLES):
        if k < N_EMBEDDED_FIGURES:
            label = f"fig-e{k:02d}"
            png = io.BytesIO()
            Image.new("RGB", (400, 60 + 13 * k), (200, 200, 230)).save(png, "PNG")
            cell = nbformat.v4.new_code_cell(f"#| label: {label}\n#| fig-cap: 'Embedded figure {k:02d}.'\nx")
            cell.outputs = [nbformat.v4.new_output("display_data",
                                                   data={"image/png": base64.b64encode(png.getvalue()).decode()})]
            words = 1 + (4 * k + 11) % 21
        else:
            label = f"tbl-e{k:02d}"
            cell = nbformat.v4.new_code_cell(f"#| label: {label}\n#| tbl-cap: 'Embedded table {k:02d}.'\nx")
            rows = report.markdown_table([{"row": f"e{k:02d}r{j}", "value": f"{0.1 * j:.2f}"}
                                         for j in range(3 + (7 * k) % 23)])
            cell.outputs = [nbformat.v4.new_output("display_data", data={"text/markdown": rows})]
            words = 1 + 5 * k % 9
        nb.cells.append(cell)
        parts.append(sentence * words + f"\n\n{{{{< embed ../outputs/notebooks/{nb_path.name}#{label} >}}}}\n")
    # a figure taller than the page at the text width (spec Fig. 4 at the study's size)
    png = io.BytesIO()
    Image.new("RGB", (600, 1000), (200, 230, 200)).save(png, "PNG")
    cell = nbformat.v4.new_code_cell("#| label: fig-tall\n#| fig-cap: 'Embedded tall figure.'\nx")
    cell.outputs = [nbformat.v4.new_output("display_data",
                                           data={"image/png": base64.b64encode(png.getvalue()).decode()})]
    nb.cells.append(cell)
    parts.append(f"A paragraph.\n\n{{{{< embed ../outputs/notebooks/{nb_path.name}#fig-tall >}}}}\n")
    nb_path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, nb_path)
    return "\n".join(parts)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """A document whose headings, each followed by a table, land at many heights of their pages
    (paragraphs of growing length between them), then a study-sized sweep table."""
    base = tmp_path_factory.mktemp("paper-pdf")
    src, out = base / "paper", base / "out"
    src.mkdir()
    (out / "analysis").mkdir(parents=True)
    table, labels = _sweep_table()
    (out / "analysis" / "tbl-sweep.md").write_text(table, encoding="utf-8")
    (out / "analysis" / "tbl-crossings.md").write_text(_crossings_table(), encoding="utf-8")
    (src / "references.bib").write_text("")
    (src / "paper.css").write_text("")
    sentence = "A sentence of body text that moves the next heading down the page. "
    parts = ["---\ntitle: Long tables\n---\n"]
    for k in range(16):
        parts.append(f"# Section {k:02d}\n\n: A small table. {{#tbl-s{k:02d}}}\n\n{_small_table(k)}\n"
                     + sentence * (3 + 5 * (k % 7)) + "\n")
    parts.append("# Appendix: sweep tables\n\n: Means at every level of the sweep. {#tbl-sweep}\n\n"
                 "{{< include ../outputs/analysis/tbl-sweep.md >}}\n\n"
                 ": Crossing visibilities and blind-spot widths. {#tbl-crossings}\n\n"
                 "{{< include ../outputs/analysis/tbl-crossings.md >}}\n")
    parts.append(_embedded(out / "notebooks" / "04_analyse.ipynb"))
    (src / "index.qmd").write_text("\n".join(parts), encoding="utf-8")
    report.write_numbers(dict(IDS), out / "paper_numbers.json")
    res = report.render_paper(src / "index.qmd", output_dir=out)
    return res, labels


def _pages_of(pages, word: str) -> list[int]:
    return [k for k, (_, _, words) in enumerate(pages) if any(w[0] == word for w in words)]


def test_long_table_breaks_across_pages_with_its_header_and_every_row(rendered):
    res, labels = rendered
    md = res["md"].read_text(encoding="utf-8")
    check_pdf_keeps_every_table_row(res["pdf"], md)  # A4, every row, nothing drawn over anything
    table, _ = _sweep_table()
    assert check_rows_on_lines(res["pdf"], table) == len(labels)  # each row whole, on one line, cells apart
    pages = pdf_words(res["pdf"])
    found = {lab: _pages_of(pages, lab) for lab in labels}
    assert all(len(v) == 1 for v in found.values()), {k: v for k, v in found.items() if len(v) != 1}
    spanned = sorted({v[0] for v in found.values()})
    assert len(spanned) >= 2, "the table should not fit one page"
    for k in spanned:  # the header row is repeated on every page the table spans
        assert any(w[0] == "abstain₂" for w in pages[k][2]), f"no header on page {k + 1}"
    # the appendix heading stays with the table's first rows
    assert _pages_of(pages, "Appendix:") == [found[labels[0]][0]]


def test_study_sized_crossings_fit_the_page_without_cells_running_together(rendered):
    """Five models, both arms, both tasks: every row on one line, no model name running into its arm
    (issue 20: "InternVL3_5-2B-underwater"), every interval under its estimate."""
    res, _ = rendered
    table = _crossings_table()
    assert check_rows_on_lines(res["pdf"], table) == len(MODELS) * 4
    words = [w[0] for _, _, ws in pdf_words(res["pdf"]) for w in ws]
    assert words.count("[−0.12,") == len(MODELS) * 4 * 4  # each W interval, as its own words (Typst: a minus)


def test_the_run_together_check_can_fail(tmp_path):
    """A table whose columns cannot fit (one unbreakable word per cell, wider than the page shares):
    check_rows_on_lines reports cells running together or lost rows."""
    src, out = tmp_path / "paper", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    (src / "references.bib").write_text("")
    (src / "paper.css").write_text("")
    wide = report.markdown_table([{f"c{j}": f"Cell{k}{j}-" + "x" * 14 for j in range(9)} for k in range(3)])
    (src / "index.qmd").write_text(f"---\ntitle: Wide\n---\n\n: Too wide. {{#tbl-w}}\n\n{wide}\n", encoding="utf-8")
    report.write_numbers({}, out / "paper_numbers.json")
    res = report.render_paper(src / "index.qmd", output_dir=out)
    with pytest.raises(AssertionError, match="run together|not found as one line"):
        check_rows_on_lines(res["pdf"], wide)


def test_no_heading_ends_a_page_alone(rendered):
    """Each heading is on the page of its table's caption and first row, wherever it falls."""
    res, _ = rendered
    pages = pdf_words(res["pdf"])
    heading_pages = [k for k, (_, _, words) in enumerate(pages) for w in words if w[0] == "Section"]
    assert len(heading_pages) == 16 and len(set(heading_pages)) >= 4  # headings on many pages
    for k in range(16):
        at = [p for p, (_, _, words) in enumerate(pages)
              if any(a[0] == "Section" and b[0] == f"{k:02d}" for a, b in zip(words, words[1:]))]
        assert at and at == _pages_of(pages, f"s{k:02d}r0"), f"Section {k:02d} (page {at}) is apart from its table"


def test_no_page_starts_with_a_source_line(rendered):
    """Issue 39: a figure's or table's "Source:" line is never separated from it by a page break (it was
    orphaned at the top of a page); the document puts the ends of 16 embeds, figures then tables, at many
    heights of their pages, then a figure taller than a page. A figure keeps the line after it (one too tall
    for the page is scaled down to leave room), a table (which may break) carries it in its caption."""
    res, _ = rendered
    pages = pdf_words(res["pdf"])
    lines = [(k, w) for k, (_, _, words) in enumerate(pages) for w in words if w[0] == "Source:"]
    assert len(lines) == N_EMBEDDED_FIGURES + N_EMBEDDED_TABLES + 1
    assert len({k for k, _ in lines}) >= 4          # every embed has its source, on many pages
    for k, (_, _, words) in enumerate(pages):
        top = min(words, key=lambda w: (round(w[2]), w[1]))
        assert top[0] != "Source:", f"page {k + 1} starts with a source line, apart from its figure or table"
    # each table's source is in its caption (one line with "table NN."), on the page of its first row
    for k in range(N_EMBEDDED_FIGURES, N_EMBEDDED_FIGURES + N_EMBEDDED_TABLES):
        at = [(p, a[2]) for p, (_, _, words) in enumerate(pages) for a, b in zip(words, words[1:])
              if a[0] == "table" and b[0] == f"{k:02d}."]
        assert len(at) == 1 and at[0][0] in _pages_of(pages, f"e{k:02d}r0"), (k, at)
        p, y = at[0]
        assert any(w[0] == "Source:" and abs(w[2] - y) < 2 for w in pages[p][2]), f"table {k:02d}"
    # a figure taller than the page is scaled to fit it with its caption and source line
    tall = [k for k, (_, _, words) in enumerate(pages) for a, b in zip(words, words[1:])
            if a[0] == "tall" and b[0] == "figure."]
    assert tall and tall == _pages_of(pages, "fig-tall"), (tall, _pages_of(pages, "fig-tall"))


def test_typst_options_follow_quarto_yml(tmp_path):
    assert report.typst_options()["papersize"] == "a4"  # the project's _quarto.yml
    f = tmp_path / "_quarto.yml"
    f.write_text("format:\n  typst:\n    papersize: us-letter\n    margin:\n      x: 2cm\n")
    assert report.typst_options(f) == {"papersize": "us-letter", "margin": {"x": "2cm"}}
