"""murk.report._escape: a value written as data into Markdown (then HTML and Typst through pandoc) and into a
matplotlib text (issue 49, item 2: names are data everywhere they are shown).

Each hostile string is checked where it lands, not against the escaped text: pandoc's HTML holds no tag,
comment, link or math from it and reads back as the string; pandoc's Typst compiles to a PDF whose text is the
string (and whose page size a ``#set page`` in a name did not change); matplotlib draws no mathtext.
"""

from __future__ import annotations

import html as html_lib
import re
import shutil
import subprocess

import pytest

from murk.report import _escape as escape
from murk.core import _paths as paths
from murk.report import LUA_FILTERS, markdown_table, model_label, verbatim

HOSTILE = [
    "<img src=x onerror=alert(1)>",
    "[x](javascript:alert(1))",
    "<javascript:alert(1)>",
    "$x^2$",
    "#set page(width: 1cm)",
    "*bold* and _it_ and **strong**",
    "a `code` span",
    "@ref and [@ref]",
    "<!-- hidden -->",
    "a | table pipe",
    "&lt;b&gt; &amp;",
    "- a list? 1. no",
    "1. an ordered list",
    "x^sup^ ~sub~ ~~strike~~ ==mark==",
    "'quoted' \"twice\" -- and --- and ...",
    "\\backslash\\ \\* \\",
    "{#id .class} :emoji: %shortcode%",
    "![img](x.png)",
    "ƒ ü † – Ω",
]


def _pandoc(md: str, to: str) -> str:
    """``md`` converted by pandoc as the paper's fallback converts it (its Lua filters, murk.report.LUA_FILTERS)."""
    pypandoc = pytest.importorskip("pypandoc")
    filters = [str(paths.project_root() / "paper" / f) for f in LUA_FILTERS]
    return pypandoc.convert_text(md, to, format="markdown", filters=filters)


def test_markdown_text_reaches_html_as_the_text_itself():
    """One paragraph per hostile string, and the same strings as table cells: pandoc's HTML has no element that
    the values made (no img, a, script, em, strong, code, span, comment, math) and its text is each string."""
    paragraphs = "\n\n".join(escape.markdown_text(s) for s in HOSTILE)
    table = markdown_table([{"value": escape.markdown_text(s)} for s in HOSTILE])
    html = _pandoc(paragraphs + "\n\n" + table, "html5")
    assert not re.search(r"<(img|a|script|em|strong|code|span|sup|sub|del|mark|ol|ul|h\d)\b", html), html
    assert "<!--" not in html and "href=" not in html
    paras = [html_lib.unescape(p) for p in re.findall(r"<p>(.*?)</p>", html, re.S)]
    cells = [html_lib.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", html, re.S)]
    assert paras == HOSTILE, paras
    assert cells == HOSTILE, cells


def test_unescaped_the_same_strings_do_make_markup():
    """The check above can fail: the strings as they are give tags, links and a comment."""
    html = _pandoc("\n\n".join(HOSTILE), "html5")
    assert "<img" in html and 'href="javascript:alert(1)"' in html and "<!--" in html and "<em>" in html


def test_markdown_text_reaches_the_pdf_as_the_text_itself(tmp_path):
    """Pandoc's Typst of the escaped strings compiles (a ``#``, ``$``, ``@`` or ``*`` of a value is Typst text; a
    ``...`` is not Typst's ellipsis: ``paper/typst-text.lua``), and the PDF's text is each string; the page keeps
    its size (``#set page(width: 1cm)`` ran nowhere)."""
    typst = pytest.importorskip("typst")
    if shutil.which("pdftotext") is None:
        pytest.skip("pdftotext not installed: apt-get install poppler-utils")
    typ = tmp_path / "x.typ"
    typ.write_text(_pandoc("\n\n".join(escape.markdown_text(s) for s in HOSTILE), "typst"), encoding="utf-8")
    pdf = tmp_path / "x.pdf"
    typst.compile(str(typ), output=str(pdf))
    text = subprocess.run(["pdftotext", "-raw", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    lines = [" ".join(x.split()) for x in text.splitlines() if x.strip()]
    assert lines == [" ".join(s.split()) for s in HOSTILE], lines
    info = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True).stdout
    assert "595.276 x 841.89" in info or "612 x 792" in info, info   # A4 or US letter: Typst's page, unchanged


def test_a_line_break_is_refused_not_shown():
    with pytest.raises(ValueError, match="line break"):
        escape.markdown_text("a\nb")
    with pytest.raises(ValueError, match="newline"):
        verbatim("a\nb")


def test_plain_names_stay_readable_in_the_markdown():
    assert escape.markdown_text("murk-tiny/smolvlm") == "murk-tiny/smolvlm"
    assert escape.markdown_text("Qwen/Qwen2.5-VL-3B-Instruct †") == "Qwen/Qwen2.5-VL-3B-Instruct †"


def test_plot_text_draws_no_mathtext():
    """A ``$x^2$`` in a name is text in a legend (matplotlib's own test of a math text is false), and
    :func:`murk.report.model_label` escapes it; unescaped it would be math."""
    import matplotlib
    import matplotlib.pyplot as plt
    from matplotlib import cbook

    assert cbook.is_math_text("$x^2$")
    for s in HOSTILE:
        assert not cbook.is_math_text(escape.plot_text(s)), s
    drawn = ["runs/$x^2$ a$b/final", "runs/other/final"]
    assert model_label(drawn[0], (), drawn) == r"\$x^2\$ a\$b/final"
    matplotlib.use("Agg")
    fig, ax = plt.subplots()
    t = ax.text(0, 0, escape.plot_text("$x^2$"))
    fig.canvas.draw()   # the text lays out as plain text
    assert t._preprocess_math(t.get_text()) == ("$x^2$", False)
    plt.close(fig)
