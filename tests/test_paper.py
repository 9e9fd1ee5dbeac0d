"""The paper: every number comes from the numbers file, nothing typed."""

import re

import numpy as np
import pytest

from murk import paper, paths

QMD = paths.project_root() / "paper" / "index.qmd"
#: a number standing alone in prose (not part of a name such as t2 or val2017)
NUMBER_RE = re.compile(r"(?<![\w.])[-+−]?\d+(?:[.,]\d+)*(?![\w])")


def _prose(text: str) -> str:
    """The prose of a .qmd: without front matter, code, inline code, math, citations, labels, includes."""
    text = paper.FRONT_RE.sub("", text)
    text = paper.CELL_RE.sub("", text)
    text = paper.INCLUDE_RE.sub("", text)
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
    out = paper.resolve_qmd(qmd, {"v": "12.4", "w": "≥ 0.80"}, tmp_path)
    assert "V is 12.4 m and ≥ 0.80." in out and "| 1 |" in out and "N = 1" not in out
    with pytest.raises(KeyError, match="missing"):
        paper.resolve_qmd("`{python} N[\"nope\"]`", {}, tmp_path)
    with pytest.raises(ValueError, match="other than"):
        paper.resolve_qmd("`{python} 1 + 1`", {}, tmp_path)
    with pytest.raises(ValueError, match="missing"):
        paper.resolve_qmd("{{< include none.md >}}", {}, tmp_path)


def test_crossref_numbers_in_order():
    md = ("See @fig-b and @tbl-x.\n\n![B](b.png){#fig-b}\n\n![A](a.png){#fig-a}\n\n"
          ": The table {#tbl-x}\n\n| a |\n|---|\n")
    out = paper.crossref(md)
    assert "[Figure 1](#fig-b)" in out and "[Table 1](#tbl-x)" in out
    assert "![Figure 2: A](a.png){#fig-a}" in out
    assert ": Table 1: The table {#tbl-x}" in out
    with pytest.raises(KeyError):
        paper.crossref("@fig-none")


def test_formatting():
    assert paper.fmt(0.8049) == "0.80"
    assert paper.fmt(float("nan")) == "n/a"
    assert paper.fmt_crossing(0.8, True, lower_bound_sign="≥") == "≥ 0.80"  # legacy bool with an explicit sign
    assert paper.fmt_crossing(12.44, False, 1) == "12.4"
    assert paper.fmt_interval(0.1, 0.25) == "[0.10, 0.25]"
    with pytest.raises(TypeError):
        paper.write_numbers({"a": 1.0})


def test_bounds_print_on_their_side():
    """Issue 13: a crossing censored at the end of the sweep is a bound from above, one at the first level from below."""
    assert paper.fmt_crossing(1.953125, "below") == "≤ 1.95"
    assert paper.fmt_crossing(1.953125, "below", 1) == "≤ 1.95"  # the level's name, not "≤ 2.0"
    assert paper.fmt_crossing(250.0, "above", 1) == "≥ 250"
    assert paper.fmt_crossing(1.953125, True, 1) == "≤ 1.95"  # legacy bool: "not reached within the sweep"
    assert paper.fmt_crossing(0.8, "above") == "≥ 0.80" and paper.fmt_crossing(0.39, "below") == "≤ 0.39"
    assert paper.fmt_crossing(0.8, "undefined") == "n/a" and paper.fmt_crossing(float("nan"), "above") == "n/a"
    # an undefined point prints no interval (the "n/a [2.0, 250.0]")
    assert paper.fmt_estimate(float("nan"), 1.953125, 250.0, digits=1) == "n/a"
    assert paper.fmt_estimate(0.5, 0.1, 0.9, "undefined") == "n/a"
    assert paper.fmt_estimate(0.75, 0.38, 1.05) == "0.75 [0.38, 1.05]"
    assert paper.fmt_estimate(0.8, 0.7, 0.9, "above") == "≥ 0.80 [0.70, 0.90]"
    # a range over models keeps each end's bound (the bare "0.05–0.39")
    assert paper.fmt_range([0.05, 0.39, 0.2], ["", "above", ""]) == "0.05 – ≥ 0.39"
    assert paper.fmt_range([0.05, 0.39]) == "0.05–0.39"
    assert paper.fmt_range([0.8, 0.86], ["above", "above"]) == "≥ 0.80 – ≥ 0.86"
    assert paper.fmt_range([0.3, np.nan, 0.3], ["", "", "above"]) == "≥ 0.30"
    assert paper.fmt_range([0.1, 0.2], ["", "undefined"]) == "0.10"
    assert paper.fmt_range([np.nan]) == "n/a"


def test_every_cited_number_reaches_the_html(tmp_path):
    """Each inline N["key"] of the paper resolves and its value appears in the converted HTML."""
    import pypandoc

    text = QMD.read_text(encoding="utf-8")
    keys = sorted(set(paper.INLINE_RE.findall(text)))
    assert keys, "the paper cites no numbers"
    numbers = {k: f"VAL{i:03d}X" for i, k in enumerate(keys)}
    for inc in paper.INCLUDE_RE.findall(text):  # included tables are written by the analyse stage
        f = tmp_path / inc.replace("../outputs/", "")
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("| a |\n|---|\n| 1 |\n")
    md = paper.crossref(paper.resolve_qmd(text, numbers, QMD.parent, tmp_path))
    html = pypandoc.convert_text(md, "html5", format="markdown")
    missing = [k for k, v in numbers.items() if v not in html]
    assert missing == [], f"cited numbers lost on the way to HTML: {missing}"
