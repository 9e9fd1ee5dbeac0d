"""Markdown pieces the notebooks write for the paper: pipe tables, table cells with a line break, verbatim code.
"""

from __future__ import annotations

import re
from typing import Mapping

__all__ = ["markdown_table", "verbatim", "estimate_cell", "CELL_BREAK"]


#: a ``|`` with the backslashes before it
_PIPE_RE = re.compile(r"(\\*)\|")
#: a code span: a run of backticks not escaped, its content, the same run (CommonMark and pandoc)
_CODE_SPAN_RE = re.compile(r"(?<![\\`])(`+)(?!`).*?(?<!`)\1(?!`)", re.S)


def _cell(text) -> str:
    """A table cell's text with each ``|`` outside a code span escaped, unless it is already (after an odd
    number of backslashes, as :func:`murk.report.markdown_text` writes it). Inside a code span pandoc's pipe
    tables keep a ``|`` in the cell and would show a backslash before it (pandoc 3.9), so it stays as it is.

    >>> _cell("x|y"), _cell("x\\\\|y"), _cell("`a|b` c|d")
    ('x\\\\|y', 'x\\\\|y', '`a|b` c\\\\|d')
    """
    text, out, at = str(text), [], 0
    pipes = lambda t: _PIPE_RE.sub(lambda m: m.group(1) + ("|" if len(m.group(1)) % 2 else "\\|"), t)  # noqa: E731
    for m in _CODE_SPAN_RE.finditer(text):
        out += [pipes(text[at:m.start()]), m.group(0)]
        at = m.end()
    return "".join(out) + pipes(text[at:])


def markdown_table(rows: list[Mapping[str, str]], columns: list[str] | None = None) -> str:
    """A pipe table (pandoc/Quarto Markdown) from a list of row dicts of strings.

    The separator's dashes are proportional to each column's widest cell (at
    least its header's longest word), which pandoc turns into relative column
    widths for wide tables (PDF), so that short columns do not wrap. A ``|`` in a cell is escaped unless it is
    already (after an odd number of backslashes, as :func:`murk.report.markdown_text` writes it) or inside a
    code span (:func:`verbatim`).

    >>> markdown_table([{"a": "x|y", "b": "x\\\\|y"}])
    '| a | b |\\n|----|----|\\n| x\\\\|y | x\\\\|y |\\n'
    """
    if not rows:
        return "*(no rows)*\n"
    columns = columns or list(rows[0])
    esc = _cell
    width = {c: max([max((len(w) for w in str(c).split()), default=1)]
                    + [len(esc(r.get(c, ""))) for r in rows]) for c in columns}
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("-" * max(3, width[c]) for c in columns) + "|"]
    lines += ["| " + " | ".join(esc(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


#: the line break inside a table cell: raw HTML, which Jupyter and the HTML show as a break and which the Lua
#: filter ``paper/linebreak.lua`` (run by Quarto, ``_quarto.yml``, and by :func:`render_paper`) turns into a
#: line break of every output format (Typst ``\\``)
CELL_BREAK = "<br>"


def estimate_cell(text: str) -> str:
    """A table cell holding an estimate with its interval, the interval on a second line:
    ``"0.99 [0.97, 1.00]"`` -> ``"0.99<br>[0.97, 1.00]"`` (:data:`CELL_BREAK`).

    A column of such cells is as wide as its interval, so that a table of many estimates (the sweep tables,
    the crossings) fits the page width without its rows wrapping at random places; a cell without an
    interval (``"n/a"``, ``"≤ 1.95"``) is returned unchanged.

    >>> estimate_cell("≥ 0.80 [0.70, 0.90]"), estimate_cell("n/a")
    ('≥ 0.80<br>[0.70, 0.90]', 'n/a')
    """
    return re.sub(r" \[(?=[^\[\]]*\]\s*$)", CELL_BREAK + "[", str(text), count=1)


def verbatim(text: str) -> str:
    """A text shown exactly as written (a prompt, a template with ``<number>`` or ``{category}`` placeholders):
    a Markdown code span, so that neither pandoc (raw HTML such as ``<number>``, smart quotes, emphasis)
    nor Typst (smart quotes, markup) changes a character.

    The span's fence is one backtick longer than the longest run of backticks in ``text`` (CommonMark and
    pandoc), padded with a space where ``text`` starts or ends with a backtick; a ``|`` needs no escape in
    the cell of a pandoc pipe table (:func:`markdown_table` leaves it; GitHub's Markdown needs ``\\|``). A
    newline has no place in a table cell: replace it first.

    Raises
    ------
    ValueError
        ``text`` holds a newline.

    Examples
    --------
    >>> verbatim('as "Confidence: <number>".'), verbatim("a `b`")
    ('`as "Confidence: <number>".`', '`` a `b` ``')
    """
    text = str(text)
    if "\n" in text:
        raise ValueError(f"verbatim text for a table cell holds a newline: {text[:60]!r}")
    if not text:
        return ""
    runs = [len(r) for r in re.findall(r"`+", text)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"

