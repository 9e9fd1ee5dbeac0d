"""The paper: every number comes from the numbers file, nothing typed."""

import json
import os
import re

import numpy as np
import pytest

from murk import report
from murk.core import _paths as paths
from murk.report import _cells
from murk.report import _spec_map
from murk.report import paper

QMD = paths.project_root() / "paper" / "index.qmd"
#: a number standing alone in prose (not part of a name such as t2 or val2017)
NUMBER_RE = re.compile(r"(?<![\w.])[-+−]?\d+(?:[.,]\d+)*(?![\w])")


def _prose(text: str) -> str:
    """The prose of a .qmd: without front matter, code, inline code, math, citations, labels, includes."""
    text = _cells.FRONT_RE.sub("", text)
    text = _cells.CELL_RE.sub("", text)
    text = report.INCLUDE_RE.sub("", text)
    text = report.EMBED_RE.sub("", text)
    text = re.sub(r"`[^`]*`", "", text)                       # inline code and inline expressions
    text = re.sub(r"\$\$.*?\$\$|\$[^$]*\$", "", text, flags=re.S)  # math
    text = re.sub(r"\]\([^)]*\)", "]", text)                  # link / figure targets
    text = re.sub(r"\{[#.][^}]*\}", "", text)                 # labels and classes
    text = re.sub(r"@[A-Za-z][\w:-]*", "", text)             # citations and cross-references
    return text


def test_no_number_typed_into_the_paper():
    prose = _prose(QMD.read_text(encoding="utf-8"))
    typed = NUMBER_RE.findall(prose)
    assert typed == [], f"numbers typed into paper/index.qmd prose: {typed}"


def test_prose_checker_catches_typed_numbers():
    assert NUMBER_RE.findall(_prose("Accuracy was 0.97 at `{python} N[\"x\"]` m.")) == ["0.97"]
    assert NUMBER_RE.findall(_prose("at 12 m, 1,000 images, -3 dB, 50 %")) == ["12", "1,000", "-3", "50"]
    assert NUMBER_RE.findall(_prose("Accuracy `{python} N[\"x\"]` in $\\log_{10}$ [@lin2014coco] @fig-a, t2, val2017.")) == []


def test_resolve_inline_and_errors(tmp_path):
    (tmp_path / "t.md").write_text("| a |\n|---|\n| 1 |\n")
    qmd = ("```{python}\nN = 1\n```\nV is `{python} N[\"v\"]` m and `{python} N['w']`.\n"
           "{{< include t.md >}}")
    out = report.resolve_qmd(qmd, {"v": "12.4", "w": "≥ 0.80"}, tmp_path)
    assert "V is 12.4 m and ≥ 0.80." in out and "| 1 |" in out and "N = 1" not in out
    with pytest.raises(KeyError, match="missing"):
        report.resolve_qmd("`{python} N[\"nope\"]`", {}, tmp_path)
    with pytest.raises(ValueError, match="other than"):
        report.resolve_qmd("`{python} 1 + 1`", {}, tmp_path)
    with pytest.raises(ValueError, match="missing"):
        report.resolve_qmd("{{< include none.md >}}", {}, tmp_path)


def test_crossref_numbers_in_order():
    md = ("See @fig-b and @tbl-x.\n\n![B](b.png){#fig-b}\n\n![A](a.png){#fig-a}\n\n"
          ": The table {#tbl-x}\n\n| a |\n|---|\n")
    out = report.crossref(md)
    assert "[Figure 1](#fig-b)" in out and "[Table 1](#tbl-x)" in out
    assert "![Figure 2: A](a.png){#fig-a}" in out
    assert ": Table 1: The table {#tbl-x}" in out
    with pytest.raises(KeyError):
        report.crossref("@fig-none")



def test_tables_are_numbered_in_the_order_the_text_first_cites_them():
    """Issue 20: a table placed late but cited first is Table 1 (the fallback numbers by first citation, then
    the uncited ones by placement), in the captions and in every reference."""
    md = ("Methods cite @tbl-late first, then @tbl-early and @fig-b.\n\n"
          ": Early {#tbl-early}\n\n| a |\n|---|\n\n![A](a.png){#fig-a}\n\n![B](b.png){#fig-b}\n\n"
          ": Uncited {#tbl-uncited}\n\n| a |\n|---|\n\n: Late {#tbl-late}\n\n| a |\n|---|\n\nAgain @tbl-early.")
    out = report.crossref(md)
    assert ": Table 1: Late {#tbl-late}" in out and ": Table 2: Early {#tbl-early}" in out
    assert ": Table 3: Uncited {#tbl-uncited}" in out
    assert "[Figure 1](#fig-b)" in out and "![Figure 2: A](a.png){#fig-a}" in out
    assert out.count("[Table 2](#tbl-early)") == 2


def _first_citations(text: str, kind: str) -> list[str]:
    return list(dict.fromkeys(re.findall(rf"@({kind}-[A-Za-z0-9_-]+)", text)))


def test_the_paper_places_each_table_and_figure_in_the_order_it_is_first_cited():
    """Quarto numbers by placement and the fallback by first citation: in paper/index.qmd, the embeds of the
    cited tables and figures come in the order of their first citation, each after it, and every uncited one
    after all cited ones, so that both renderers give the first cited table number 1."""
    text = _cells.FRONT_RE.sub("", QMD.read_text(encoding="utf-8"))
    for kind in ("tbl", "fig"):
        cited = _first_citations(text, kind)
        placed = [label for _, label in report.EMBED_RE.findall(text) if label.startswith(kind + "-")]
        assert cited and set(cited) <= set(placed), set(cited) - set(placed)
        assert placed[:len(cited)] == cited, (kind, list(zip(placed, cited)))
        for label in cited:  # the embed after the first citation
            assert text.index("@" + label) < text.index("#" + label + " >}}"), label


def test_formatting():
    nan = float("nan")
    assert report.fmt(0.8049) == "0.80"
    assert report.fmt(nan) == "n/a" and report.fmt(None) == "n/a"
    assert report.fmt_crossing(0.8, True, lower_bound_sign="≥") == "≥ 0.80"  # legacy bool with an explicit sign
    assert report.fmt_crossing(12.44, False, 1) == "12.4"
    assert report.fmt_interval(0.1, 0.25) == "[0.10, 0.25]"
    assert report.fmt_interval(nan, 0.25) == ""                       # no interval where it is undefined
    assert report.fmt_estimate(0.97, 0.95, 0.98) == "0.97 [0.95, 0.98]"
    assert report.fmt_estimate(nan, 0.1, 0.9) == "n/a"                # no interval for an undefined point
    assert report.fmt_estimate(0.8, 0.7, 0.9, lower=True) == "≥ 0.80"  # = censored="above"; a bound alone (issue 39)
    assert report.fmt_bound(-0.2, upper=True) == "≤ -0.20"
    assert report.fmt_range([0.3, nan, 0.1]) == "0.10–0.30" and report.fmt_range([nan]) == "n/a"
    assert report.fmt_range([60.4, 147.2], digits=0) == "60–147"
    assert report.fmt_range([0.25, 0.25]) == "0.25"
    assert report.fmt_list([]) == "none" and report.fmt_list(["a"]) == "a" and report.fmt_list("abc") == "a, b and c"
    # one way to write a level: as the spec (half up, 31.25 -> 31.3), the exact value in keys
    assert [report.fmt_level(250 / 2 ** k) for k in range(8)] == ["250", "125", "62.5", "31.3", "15.6", "7.8", "3.9",
                                                                 "1.95"]
    assert report.fmt_level(float("inf")) == "clean" and report.fmt_level(float("nan")) == "n/a"
    assert report.level_label(15.625) == "15.625" and report.level_label(float("inf")) == "clean"
    with pytest.raises(TypeError):
        report.write_numbers({"a": 1.0})


def test_numbers_record_and_save(tmp_path):
    import numpy as np

    n = report.Numbers(tmp_path / "n.json")
    assert n.record("a", 0.123, ci=(0.1, 0.2)) == "0.12" and n["a.ci"] == "[0.10, 0.20]"
    assert n.record("b", float("nan"), ci=(0.1, 0.2)) == "n/a" and n["b.ci"] == ""
    assert n.record("c", np.int64(7)) == "7" and n.record("d", 3.0, 0) == "3"
    assert n.record("e", 1.05, ci=(0.9, 1.2), lower=True) == "≥ 1.05" and n["e.ci"] == ""   # a bound alone
    assert n.record("s", "A sentence, as is.") == "A sentence, as is."
    assert n.fill_missing({"a", "z"}) == ["z"] and n["z"] == f"n/a ({report.NOT_COMPUTED})"
    assert report.load_numbers(n.save())["e"] == "≥ 1.05"
    assert report.cited_keys('x `{python} N["a"]` y `{python} N[\'b\']`') == {"a", "b"}


def test_numbers_keep_the_cell_that_recorded_each_key(tmp_path):
    """Issue 23: in a kernel, each key set keeps the label of the cell being run (f-string keys, fill_missing
    and plain assignment too; none in an unlabelled cell); outside one, ``Numbers.cell``; written beside the
    numbers and read back by load_provenance, load_numbers unchanged."""
    import subprocess
    import sys

    script = f"""
from IPython.core.interactiveshell import InteractiveShell
sh = InteractiveShell.instance()
cells = ["from murk import report\\nn = report.Numbers({str(tmp_path / 'n.json')!r})\\nn.record('setup', 1)",
         "#| label: num-a\\nfor i in range(2):\\n    n.record(f'k.{{i}}', i, ci=(0, 1))",
         "n.record('scratch', 2)",
         "#| label: tbl-b\\n#| tbl-cap: 'B'\\nn['plain'] = 'x'\\nn.record('k.0', 5)",
         "#| label: num-c\\nn.fill_missing(['k.1', 'gone']); n.save()"]
for c in cells:
    assert sh.run_cell(c, store_history=True).success, c
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(paths.project_root() / "lib"), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    prov = report.load_provenance(tmp_path / "n.json")
    assert prov == {"k.0": "tbl-b", "k.0.ci": "num-a", "k.1": "num-a", "k.1.ci": "num-a", "plain": "tbl-b",
                    "gone": "num-c"}
    assert json.loads(report.provenance_file(tmp_path / "n.json").read_text(encoding="utf-8")) == prov
    assert report.provenance_file(tmp_path / "n.json").name == "n.provenance.json"
    assert set(report.load_numbers(tmp_path / "n.json")) == {"setup", "k.0", "k.0.ci", "k.1", "k.1.ci", "scratch",
                                                             "plain", "gone"}
    # outside IPython: the cell given
    n = report.Numbers(tmp_path / "m.json", cell="num-script")
    n.record("a", 1.0)
    del n["a"]
    n.record("b", 2.0)
    assert report.load_provenance(n.save()) == {"b": "num-script"}
    # a numbers file without provenance (an older murk): the error says to re-run the analyse stage
    report.write_numbers({"a": "1"}, tmp_path / "old" / "n.json")
    report.provenance_file(tmp_path / "old" / "n.json").unlink()
    with pytest.raises(FileNotFoundError, match="older murk.*analyse stage"):
        report.load_provenance(tmp_path / "old" / "n.json")
    with pytest.raises(TypeError, match="cell labels"):
        report.write_numbers({"a": "1"}, tmp_path / "x.json", {"a": 3})


def test_notebook_view_anchors_each_labelled_cell(tmp_path):
    """The rendered view of an executed notebook: one file, each labelled cell at ``#label`` with its source
    and outputs (a figure, a table, text), unlabelled cells and Markdown in order."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Title\n\nSome *text* with $V$."),
                nbformat.v4.new_code_cell("x = 1  # unlabelled"),
                nbformat.v4.new_code_cell("#| label: fig-a\n#| fig-cap: A\nplot()"),
                nbformat.v4.new_code_cell("#| label: num-b\nrecord('k', 1)\nprint('```')")]
    nb.cells[2].outputs = [nbformat.v4.new_output("display_data", data={"image/png": PNG})]
    nb.cells[3].outputs = [nbformat.v4.new_output("stream", name="stdout", text="\x1b[31mdone\x1b[0m ```\n"),
                           nbformat.v4.new_output("display_data", data={"text/markdown": "| t |\n|---|\n| 1 |\n"})]
    path = tmp_path / "notebooks" / "04_analyse.ipynb"
    path.parent.mkdir()
    nbformat.write(nb, path)
    out = report.notebook_view(path)
    assert out == tmp_path / "paper" / "04_analyse.html"
    page = out.read_text(encoding="utf-8")
    assert page.count('class="nb-cell"') == 3 and 'id="fig-a"' in page and 'id="num-b"' in page
    assert page.index('id="fig-a"') < page.index(f"data:image/png;base64,{PNG}") < page.index('id="num-b"')
    assert "<table" in page and "done ```" in page and "\x1b" not in page and "<em>text</em>" in page
    with pytest.raises(FileNotFoundError):
        report.notebook_view(tmp_path / "none.ipynb")


def _notebook(path, cells):
    """An executed-notebook stand-in: ``cells`` maps label -> (options, outputs)."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    for label, (opts, outputs) in cells.items():
        src = f"#| label: {label}\n" + "".join(f"#| {k}: {v}\n" for k, v in opts.items()) + "plot()"
        cell = nbformat.v4.new_code_cell(src)
        cell.outputs = [nbformat.v4.new_output(**o) for o in outputs]
        nb.cells.append(cell)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


#: a 1x1 PNG
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")


def test_cell_options():
    assert report.cell_options('#| label: fig-a\n#| fig-cap: "A: t2, fog"\nplot()') == {"label": "fig-a",
                                                                                       "fig-cap": "A: t2, fog"}
    assert report.cell_options("plot()\n#| label: late") == {}


def test_embeds_resolve_from_the_notebook_outputs(tmp_path):
    nb = _notebook(tmp_path / "out" / "notebooks" / "04_analyse.ipynb", {
        "fig-a": ({"fig-cap": "Accuracy, t2"}, [{"output_type": "display_data", "data": {"image/png": PNG}}]),
        "tbl-b": ({"tbl-cap": "Crossings"}, [{"output_type": "display_data",
                                               "data": {"text/markdown": "| x |\n|---|\n| 1 |\n"}}]),
        "fig-broken": ({}, [{"output_type": "error", "ename": "ValueError", "evalue": "bad", "traceback": []}]),
        "fig-empty": ({}, [])})
    qmd = ("See @fig-a and @tbl-b.\n\n{{< embed ../outputs/notebooks/04_analyse.ipynb#fig-a >}}\n\n"
           "{{< embed ../outputs/notebooks/04_analyse.ipynb#tbl-b >}}\n")
    md = report.resolve_qmd(qmd, {}, tmp_path / "paper", tmp_path / "out")
    fig = tmp_path / "out" / "paper" / "embed" / "04_analyse-fig-a.png"
    assert f"![Accuracy, t2]({fig.as_posix()}){{#fig-a}}" in md and fig.read_bytes()[:4] == b"\x89PNG"
    assert ": Crossings {#tbl-b}\n\n| x |" in md
    # links to the cell in the notebook's rendered view (beside the paper; render_paper writes it)
    assert "Source: [04_analyse.ipynb, cell `fig-a`](04_analyse.html#fig-a)" in md
    assert "Source: [04_analyse.ipynb, cell `tbl-b`](04_analyse.html#tbl-b)" in md
    out = report.crossref(md)
    assert "[Figure 1](#fig-a)" in out and "[Table 1](#tbl-b)" in out
    with pytest.raises(KeyError, match="fig-none"):
        report.resolve_qmd("{{< embed ../outputs/notebooks/04_analyse.ipynb#fig-none >}}", {}, tmp_path, tmp_path / "out")
    with pytest.raises(ValueError, match="failed"):
        report.resolve_qmd("{{< embed ../outputs/notebooks/04_analyse.ipynb#fig-broken >}}", {}, tmp_path, tmp_path / "out")
    with pytest.raises(ValueError, match="no image"):
        report.resolve_qmd("{{< embed ../outputs/notebooks/04_analyse.ipynb#fig-empty >}}", {}, tmp_path, tmp_path / "out")
    # a notebook whose stage did not run: a labelled placeholder that says so, and the list of them
    missing = []
    md = report.resolve_qmd("@fig-x @tbl-y\n\n{{< embed ../outputs/notebooks/02_depth.ipynb#fig-x >}}\n\n"
                           "{{< embed ../outputs/notebooks/02_depth.ipynb#tbl-y >}}", {}, tmp_path, tmp_path / "out",
                           missing=missing)
    assert missing == ["../outputs/notebooks/02_depth.ipynb#fig-x", "../outputs/notebooks/02_depth.ipynb#tbl-y"]
    assert md.count(report.NOT_COMPUTED) >= 2 and "{#fig-x}" in md and "{#tbl-y}" in md
    report.crossref(md)  # the labels still resolve


def test_bounds_print_on_their_side():
    """Issue 13: a crossing censored at the end of the sweep is a bound from above, one at the first level from below."""
    assert report.fmt_crossing(1.953125, "below") == "≤ 1.95"
    assert report.fmt_crossing(1.953125, "below", 1) == "≤ 1.95"  # the level's name, not "≤ 2.0"
    assert report.fmt_crossing(250.0, "above", 1) == "≥ 250"
    assert report.fmt_crossing(1.953125, True, 1) == "≤ 1.95"  # legacy bool: "not reached within the sweep"
    assert report.fmt_crossing(0.8, "above") == "≥ 0.80" and report.fmt_crossing(0.39, "below") == "≤ 0.39"
    assert report.fmt_crossing(0.8, "undefined") == "n/a" and report.fmt_crossing(float("nan"), "above") == "n/a"
    # an undefined point prints no interval (the "n/a [2.0, 250.0]")
    assert report.fmt_estimate(float("nan"), 1.953125, 250.0, digits=1) == "n/a"
    assert report.fmt_estimate(0.5, 0.1, 0.9, "undefined") == "n/a"
    assert report.fmt_estimate(0.75, 0.38, 1.05) == "0.75 [0.38, 1.05]"
    assert report.fmt_estimate(0.8, 0.7, 0.9, "above") == "≥ 0.80"
    # issue 39: never a bound with an interval that crosses it
    assert report.fmt_estimate(-2.11, -2.11, 0.26, upper=True) == "≤ -2.11"
    # a range over models keeps each end's bound (the bare "0.05–0.39")
    assert report.fmt_range([0.05, 0.39, 0.2], ["", "above", ""]) == "0.05 – ≥ 0.39"
    assert report.fmt_range([0.05, 0.39]) == "0.05–0.39"
    assert report.fmt_range([0.8, 0.86], ["above", "above"]) == "≥ 0.80 – ≥ 0.86"
    assert report.fmt_range([0.3, np.nan, 0.3], ["", "", "above"]) == "≥ 0.30"
    assert report.fmt_range([0.1, 0.2], ["", "undefined"]) == "0.10"
    assert report.fmt_range([np.nan]) == "n/a"


def test_every_cited_number_reaches_the_html(tmp_path):
    """Each inline N["key"] of the paper resolves and its value appears in the converted HTML, and every
    embedded cell's output reaches it too."""
    import pypandoc

    text = QMD.read_text(encoding="utf-8")
    keys = sorted(report.cited_keys(text))
    assert keys, "the paper cites no numbers"
    numbers = {k: f"VAL{i:03d}X" for i, k in enumerate(keys)}
    for inc in report.INCLUDE_RE.findall(text):  # included files, if any
        f = tmp_path / inc.replace("../outputs/", "")
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("| a |\n|---|\n| 1 |\n")
    books = {}
    for nb, label in report.EMBED_RE.findall(text):
        out = ([{"output_type": "display_data", "data": {"image/png": PNG}}] if label.startswith("fig-") else
               [{"output_type": "display_data", "data": {"text/markdown": f"| t |\n|---|\n| CELL-{label} |\n"}}])
        books.setdefault(nb, {})[label] = ({"fig-cap" if label.startswith("fig-") else "tbl-cap": f"CAP-{label}"}, out)
    assert books, "the paper embeds nothing"
    for nb, cells in books.items():
        _notebook(tmp_path / nb.replace("../outputs/", ""), cells)
    md = report.crossref(report.resolve_qmd(text, numbers, QMD.parent, tmp_path))
    html = pypandoc.convert_text(md, "html5", format="markdown")
    missing = [k for k, v in numbers.items() if v not in html]
    assert missing == [], f"cited numbers lost on the way to HTML: {missing}"
    lost = [label for cells in books.values() for label in cells
            if f"CAP-{label}" not in html or (label.startswith("tbl-") and f"CELL-{label}" not in html)]
    assert lost == [], f"embedded cells lost on the way to HTML: {lost}"


def test_headings_state_no_finding():
    """Headings are neutral: a finding is stated only by a sentence generated from the cube."""
    headings = re.findall(r"^#+\s+(.*)$", _cells.CELL_RE.sub("", QMD.read_text(encoding="utf-8")), flags=re.M)
    assert headings
    for h in headings:
        for word in ("collapse", "lag", "depend", "plateau", "floor", "blind", "fail", "robust", "exceed"):
            assert word not in h.lower(), h


def test_one_number_style():
    """Issue 20: no "-0.00"; a visibility's interval at its point's precision ("16.2 [15, 17.3]" was printed)."""
    assert report.fmt(-0.001) == "0.00" and report.fmt(-0.004, 2) == "0.00" and report.fmt(-0.04, 1) == "0.0"
    assert report.fmt(-0.006) == "-0.01" and report.fmt(-1.0, 0) == "-1"
    assert report.fmt_estimate(-0.001, -0.02, 0.01) == "0.00 [-0.02, 0.01]"
    assert report.fmt_bound(-0.001, lower=True) == "≥ 0.00"
    assert report.fmt_visibility_estimate(16.2, 15.0, 17.31) == "16.2 [15.0, 17.3]"
    assert report.fmt_visibility_estimate(1.97, 1.953125, 2.3) == "1.97 [1.95, 2.30]"
    assert report.fmt_visibility_estimate(16.2) == "16.2" and report.fmt_visibility_estimate(float("nan"), 1, 2) == "n/a"
    assert report.fmt_visibility_interval(15.0, 17.3) == "[15, 17.3]"   # without a point: each end as a level
    # every interval of an estimate has the point's decimals
    for p, lo, hi in ((16.2, 15.0, 17.31), (3.14, 1.96, 4.0), (120.0, 99.96, 180.0)):
        s = report.fmt_visibility_estimate(p, lo, hi)
        point, ci = s.split(" ", 1)
        decimals = {len(x.split(".")[1]) if "." in x else 0 for x in [point, *ci.strip("[]").split(", ")]}
        assert len(decimals) == 1, s


def _identity_notebook(path, ids, cells=None):
    """An executed-notebook stand-in whose cell ``murk-identity`` records ``ids`` (workflow.identity_bundle)."""
    import nbformat

    from murk import core
    from murk.pipeline import markers as workflow

    _notebook(path, cells or {})
    nb = nbformat.read(path, as_version=4)
    cell = nbformat.v4.new_code_cell(f"#| label: {core.IDENTITY_LABEL}\ndisplay(...)")
    cell.outputs = [nbformat.v4.new_output("display_data", data=workflow.identity_bundle(**ids))]
    nb.cells.insert(0, cell)
    nbformat.write(nb, path)
    return path


def _tree(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_make_paper_refuses_numbers_and_notebook_of_two_analyses(tmp_path, capsys, monkeypatch):
    """Issue 21: a numbers file of one analysis and an executed analyse notebook of another are refused by
    `python -m murk.report.paper` (what `make paper` runs) before anything is written, naming both files, both analysis
    identities and the fix: docs/stages.md's papermill command writing outputs/notebooks/04_analyse.ipynb, or rm the
    numbers file and make paper."""
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "out"
    report.write_numbers({"run_id": "r-111111111111", "analysis_id": "a-aaaaaaaaaaaa",
                         "analysis.models": '["murk-tiny/smolvlm", {"id": "murk-tiny/qwen3vl", "n_items": 3}]'},
                        paths.numbers_file(root))
    nb = _identity_notebook(root / "notebooks" / "04_analyse.ipynb",
                            {"run_id": "r-111111111111", "analysis_id": "a-bbbbbbbbbbbb", "models": ["murk-tiny/smolvlm"]})
    before = _tree(root)
    assert paper.main(["--output-dir", str(root), "--no-pdf"]) == 2
    err = capsys.readouterr().err
    assert _tree(root) == before and not (root / "paper").exists()     # nothing written
    assert str(paths.numbers_file(root)) in err and str(nb) in err
    assert "a-aaaaaaaaaaaa" in err and "a-bbbbbbbbbbbb" in err
    cmd = ("python -m murk.pipeline.execute notebooks/04_analyse.py out/notebooks/04_analyse.ipynb "
           "-y 'models: [murk-tiny/smolvlm, {id: murk-tiny/qwen3vl, n_items: 3}]' -p output_dir out")
    assert cmd in err, err
    frags = " ".join(str(paths.numbers_fragment(s, root)) for s in ("04_analyse", "05_beyond"))
    assert f"rm {frags}, then make paper ARGS='--config output_dir={root}'" in err
    with pytest.raises(report.MixedPaperError):                         # render_paper refuses the same
        report.render_paper(output_dir=root, pdf=False)
    assert _tree(root) == before
    # a notebook that records no analysis identity (an older murk) cannot vouch for the numbers either
    _notebook(nb, {})
    with pytest.raises(report.MixedPaperError, match="none recorded"):
        report.refuse_mixed_paper(root)
    # the beyond-the-spec notebook (notebooks/05_beyond.py) of another analysis than the numbers: refused too
    _identity_notebook(nb, {"run_id": "r-111111111111", "analysis_id": "a-aaaaaaaaaaaa"})
    assert report.refuse_mixed_paper(root) == {"run_id": "r-111111111111", "analysis_id": "a-aaaaaaaaaaaa"}
    beyond = _identity_notebook(root / "notebooks" / "05_beyond.ipynb",
                                {"run_id": "r-111111111111", "analysis_id": "a-bbbbbbbbbbbb"})
    with pytest.raises(report.MixedPaperError) as e:
        report.refuse_mixed_paper(root)
    assert str(beyond) in str(e.value) and "executed beyond notebook" in str(e.value)
    assert "python -m murk.pipeline.execute notebooks/05_beyond.py out/notebooks/05_beyond.ipynb -p output_dir out" \
        in str(e.value)
    _identity_notebook(beyond, {"run_id": "r-111111111111", "analysis_id": "a-aaaaaaaaaaaa"})
    assert report.refuse_mixed_paper(root) == {"run_id": "r-111111111111", "analysis_id": "a-aaaaaaaaaaaa"}
    # a depth notebook of another run than the numbers
    _identity_notebook(root / "notebooks" / "02_depth.ipynb", {"run_id": "r-222222222222"})
    with pytest.raises(report.MixedPaperError, match="r-111111111111.*\n.*r-222222222222"):
        report.refuse_mixed_paper(root)


def test_the_rendered_paper_carries_the_identities(tmp_path):
    """One analysis identity in numbers file and notebook: the paper renders, with both identities in its HTML head
    and in its text (the colophon's N["run_id"], N["analysis_id"])."""
    root, src = tmp_path / "out", tmp_path / "paper"
    src.mkdir()
    (src / "references.bib").write_text("")
    (src / "paper.css").write_text("")
    (src / "index.qmd").write_text('---\ntitle: Ids\n---\n\nSee @tbl-x. Run `{python} N["run_id"]`, analysis '
                                   '`{python} N["analysis_id"]`.\n\n'
                                   '{{< embed ../outputs/notebooks/04_analyse.ipynb#tbl-x >}}\n', encoding="utf-8")
    ids = {"run_id": "r-111111111111", "analysis_id": "a-aaaaaaaaaaaa"}
    report.write_numbers(ids, paths.numbers_file(root))
    _identity_notebook(root / "notebooks" / "04_analyse.ipynb", ids, {
        "tbl-x": ({"tbl-cap": "X"}, [{"output_type": "display_data", "data": {"text/markdown": "| x |\n|---|\n| 1 |\n"}}])})
    html = report.render_paper(src / "index.qmd", output_dir=root, pdf=False)["html"].read_text(encoding="utf-8")
    head = html[:html.index("</head>")]
    assert '<meta name="murk-run-id" content="r-111111111111">' in head
    assert '<meta name="murk-analysis-id" content="a-aaaaaaaaaaaa">' in head
    assert "Run r-111111111111, analysis a-aaaaaaaaaaaa." in " ".join(html.split())


# --- the spec's map (issue 39, item 4): every figure and table named as its spec counterpart, the spec's
# section numbers, a generated contributions list ---

#: the spec the study follows (README); where it is not beside the repository, the figures and tables its text
#: names, as read from it (the test below checks the two agree where the spec is present)
SPEC = paths.project_root().parent / "shared" / "spec" / "000_5b25beb428bfee63.txt"
SPEC_NAMED = {"Fig. 2", "Fig. 3", "Fig. 4", "Fig. 5", "Fig. 6", "Fig. 7", "Fig. 8", "Fig. 9", "Table II",
              "Table III", "Table IV", "Table V", "Table VI", "Table VII", "Table IX", "Table X"}


def _spec_text() -> str:
    return SPEC.read_text(encoding="utf-8") if SPEC.is_file() else " ".join(sorted(SPEC_NAMED))


def _paper_captions() -> dict[str, str]:
    """The figures and tables paper/index.qmd embeds: label -> the caption its notebook cell gives
    (``#| fig-cap:`` / ``#| tbl-cap:`` of notebooks/<stage>.py, the source of the executed notebook)."""
    out = {}
    for nb, label in report.EMBED_RE.findall(QMD.read_text(encoding="utf-8")):
        src = (paths.project_root() / "notebooks" / (nb.rsplit("/", 1)[-1].removesuffix(".ipynb") + ".py"))
        cells = {}
        for cell in src.read_text(encoding="utf-8").split("# %%"):
            opts = report.cell_options(cell.lstrip("\n"))
            if opts.get("label"):
                cells[opts["label"]] = opts
        assert label in cells, (src, label)
        out[label] = str(cells[label].get("fig-cap" if label.startswith("fig-") else "tbl-cap", ""))
    return out


def test_the_spec_names_the_figures_and_tables_the_map_is_held_against():
    assert report.spec_mentions("Figure 2; (Fig.\xa04, Table\xa0V); Figs. 3 and 8; Tables IX and X") == {
        "Fig. 2", "Fig. 4", "Table V", "Fig. 3", "Fig. 8", "Table IX", "Table X"}
    if not SPEC.is_file():
        pytest.skip(f"{SPEC} not present")
    assert report.spec_mentions(_spec_text()) == SPEC_NAMED


def test_every_figure_and_table_names_its_spec_counterpart():
    """Each figure and table the paper embeds has an entry in murk.report.SPEC_COUNTERPARTS ("spec Fig. N",
    "spec Table N" or "beyond the spec") that its caption carries, and every figure and table the spec's text
    names is named by one of them."""
    captions = _paper_captions()
    assert len(captions) > 30
    assert _spec_map._spec_map_problems(_spec_text(), captions) == []
    named = {label: _spec_map._spec_counterpart(label) for label in captions}
    assert named["fig-signals-t2"] == "spec Fig. 3" and named["tbl-sweep-t3"] == "spec Table X"
    assert named["tbl-monitor-gate"].startswith("beyond the spec")


def _tables_written(notebook_source: str) -> list[str]:
    """The ``tbl-<name>`` files a notebook's ``show_table(md, "<name>")`` calls write."""
    import ast

    return ["tbl-" + n.args[1].value for n in ast.walk(ast.parse(notebook_source))
            if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "show_table" and len(n.args) > 1
            and isinstance(n.args[1], ast.Constant)]


def test_the_snakefile_declares_every_table_the_analysis_writes():
    """The analyse and beyond rules' tables are murk.report.analysis_tables of their notebooks (derived from the
    labels each holds, not hand-listed); each notebook writes exactly those, and together murk.report.ANALYSIS_TABLES:
    a table added to a notebook and not to the list fails here (and at run time, in its show_table)."""
    from murk.report import _analyses as analyses

    written = {}
    for stage in ("04_analyse", "05_beyond"):
        source = (paths.project_root() / "notebooks" / f"{stage}.py").read_text(encoding="utf-8")
        written[stage] = _tables_written(source)
        assert len(written[stage]) == len(set(written[stage]))
        assert set(written[stage]) == set(analyses.analysis_tables(stage)), stage
        planted = source + '\nshow_table(md, "planted")\n'
        assert set(_tables_written(planted)) != set(analyses.analysis_tables(stage))
    assert len(written["04_analyse"]) + len(written["05_beyond"]) == 23
    assert set(written["04_analyse"]) | set(written["05_beyond"]) == set(_spec_map.ANALYSIS_TABLES)
    snakefile = (paths.project_root() / "Snakefile").read_text(encoding="utf-8")
    for stage in ("04_analyse", "05_beyond"):
        assert f't=murk_report.analysis_tables("{stage}")' in snakefile
        assert f'name=murk_report.analysis_figures("{stage}")' in snakefile
    assert '"tbl-crossings"' not in snakefile and '"blind_spot"' not in snakefile


def test_the_spec_map_check_notices_each_gap():
    """Change one side of the map and the check says so: a figure added without a counterpart, a spec figure
    with none, a caption that does not name its counterpart or names another one."""
    captions = _paper_captions()
    spec = _spec_text()
    problems = _spec_map._spec_map_problems(spec, {**captions, "fig-new": "A new figure."})
    assert problems == ["fig-new: no spec counterpart (murk.report.SPEC_COUNTERPARTS)"]
    without = {k: v for k, v in captions.items() if k != "fig-nominal"}
    assert _spec_map._spec_map_problems(spec, without) == ["spec Fig. 7: no figure or table of the paper names it"]
    assert _spec_map._spec_map_problems(spec + " Table VIII", captions) == [
        "spec Table VIII: no figure or table of the paper names it"]
    bare = {**captions, "tbl-prompts": captions["tbl-prompts"].replace("(spec Table II)", "")}
    problems = _spec_map._spec_map_problems(spec, bare)
    assert problems and all("tbl-prompts" in p or "Table II" in p for p in problems), problems
    wrong = {**captions, "tbl-nominal": captions["tbl-nominal"] + " (spec Table VI)"}
    assert any("tbl-nominal: its caption names ['Table VI']" in p for p in _spec_map._spec_map_problems(spec, wrong))
    with pytest.raises(KeyError, match="SPEC_COUNTERPARTS"):
        _spec_map._spec_counterpart("fig-new")


def _top_sections(text: str) -> list[str]:
    """The numbered top-level headings of a .qmd, in order (not .unnumbered, not .appendix)."""
    heads = re.findall(r"^# (.+?)\s*(\{[^}]*\})?\s*$", _cells.CELL_RE.sub("", text), flags=re.M)
    return [h for h, attrs in heads if ".unnumbered" not in attrs and ".appendix" not in attrs]


def test_the_sections_follow_the_spec_and_are_numbered_in_both_renderers():
    """The paper's top-level sections are the spec's I-VI in its order (the beyond-the-spec parts are subsections
    of the results); both renderers run the filter that numbers them in Roman numerals (Quarto: _quarto.yml;
    the fallback: murk.report.LUA_FILTERS), and it numbers HTML and Typst alike."""
    import pypandoc
    import yaml

    assert _top_sections(QMD.read_text(encoding="utf-8")) == list(report.SPEC_SECTIONS.values())
    quarto = yaml.safe_load((paths.project_root() / "_quarto.yml").read_text(encoding="utf-8"))
    assert [f"paper/{f}" for f in report.LUA_FILTERS] == quarto["filters"]
    assert not quarto.get("number-sections") and not quarto["format"]["html"].get("number-sections")
    lua = paths.project_root() / "paper" / report.SECTION_FILTER
    md = ("# Abstract {.unnumbered}\n\nx\n\n" + "".join(f"# {s}\n\n## Part\n\n## Part\n\n" for s in
                                                        report.SPEC_SECTIONS.values())
          + "# Sweep tables {.appendix}\n\n# Colophon {.appendix}\n\n# References {.unnumbered}\n")
    for fmt_ in ("html5", "typst"):
        out = " ".join(re.sub(r"<[^>]+>", "", pypandoc.convert_text(md, fmt_, format="markdown",
                                                                      extra_args=[f"--lua-filter={lua}"])).split())
        for num, title in report.SPEC_SECTIONS.items():
            assert f"{num}. {title}" in out, (fmt_, num, out)
        assert "A. Part" in out and "B. Part" in out and "C. Part" not in out, out
        assert "Appendix A. Sweep tables" in out and "Appendix B. Colophon" in out, out
        assert "Abstract" in out and ". Abstract" not in out and ". References" not in out, out


def test_the_introduction_lists_the_contributions_from_the_run():
    """The introduction carries the spec's (i)-(iv) as a list whose every item is a generated number key."""
    text = QMD.read_text(encoding="utf-8")
    intro = text.split("\n# Introduction\n", 1)[1].split("\n# Related work", 1)[0]
    items = re.findall(r"^\(([ivx]+)\) `\{python\} N\[\"(intro\.contribution\.[a-z]+)\"\]`\s*$", intro, flags=re.M)
    assert [i for i, _ in items] == ["i", "ii", "iii", "iv"], intro
    # generated by murk.report.contributions, which the analyse notebook's cell records, not typed
    src = (paths.project_root() / "lib" / "murk" / "report" / "_abstract.py").read_text(encoding="utf-8")
    for _, k in items:
        assert f'record("{k}"' in src, k
    nb = (paths.project_root() / "notebooks" / "04_analyse.py").read_text(encoding="utf-8")
    cell = nb.split("#| label: num-contributions\n", 1)[1].split("\n# %%", 1)[0]
    assert "report.contributions(" in cell and "record(k, text)" in cell


def _rendered_texts(res) -> tuple[str, str]:
    """The rendered paper's HTML as text (tags dropped, entities decoded, whitespace collapsed), and its PDF's text."""
    import html as html_lib
    import shutil
    import subprocess

    html = " ".join(html_lib.unescape(re.sub(r"<[^>]+>", " ", res["html"].read_text(encoding="utf-8"))).split())
    if shutil.which("pdftotext") is None:
        pytest.skip("poppler-utils (pdftotext) not installed")
    pdf = subprocess.run(["pdftotext", str(res["pdf"]), "-"], capture_output=True, text=True, check=True).stdout
    return html, " ".join(pdf.split())


@pytest.mark.slow
def test_the_rendered_paper_carries_the_spec_map(synthetic_paper):
    """In the HTML and in the PDF of a rendered paper (the synthetic root of tests/scenarios/test_notebook_analyse.py):
    every figure and table of the spec is named by a caption ("spec Fig. N" / "spec Table N"), the beyond-the-spec
    ones say so, the sections carry the spec's numbers I-VI, and the introduction lists the contributions
    (i)-(iv) as the run's numbers give them."""
    root, res = synthetic_paper
    numbers = report.load_numbers(paths.numbers_file(root))
    html_raw = res["html"].read_text(encoding="utf-8")
    html, pdf = _rendered_texts(res)
    beyond = sum(1 for p in _paper_captions().values() if "beyond the spec" in p)
    for where, text in (("html", html), ("pdf", pdf)):
        for m in sorted(SPEC_NAMED):
            assert f"spec {m}" in text, (where, m)
        assert text.count("beyond the spec") >= beyond, where
        for num, title in report.SPEC_SECTIONS.items():
            assert f"{num}. {title}" in text, (where, num, title)
        assert "Appendix A. Sweep tables" in text, where
        # the introduction's text (after the HTML's table of contents, which lists the numbered headings too)
        intro = text.split(f"I. {report.SPEC_SECTIONS['I']}")[-1].split(f"II. {report.SPEC_SECTIONS['II']}", 1)[0]
        for k in ("protocol", "measurement", "evidence", "diagnostics"):
            value = " ".join(numbers[f"intro.contribution.{k}"].split())
            assert value[:80] in intro, (where, k)
        assert numbers["config_hash"] in intro and f"on {numbers['n_items']} COCO val2017 images" in intro, where
        assert "pipeline check" in intro, where   # the synthetic root's random-weight model stays labelled
    assert '<ol type="i">' in html_raw.split('id="introduction"', 1)[1].split('id="related-work"', 1)[0]
    assert all(f"({i}) " in pdf for i in ("i", "ii", "iii", "iv"))


def test_the_html_numbers_the_contributions_as_the_pdf_does():
    """Issue 39: pandoc writes the "(i)" list of contributions as <ol type="i">, which browsers draw "i."; the
    paper's stylesheet draws "(i)", as the PDF does (looked at in headless Chromium)."""
    css = (QMD.parent / "paper.css").read_text(encoding="utf-8")
    rule = re.search(r'ol\[type="i"\]\s*>\s*li::before\s*\{([^}]*)\}', css)
    assert rule and re.search(r'content:\s*"\("\s*counter\(\s*([\w-]+)\s*,\s*lower-roman\s*\)\s*"\)"', rule.group(1))
    assert re.search(r'ol\[type="i"\]\s*\{[^}]*list-style:\s*none', css)
