"""Markdown pieces the notebooks write for the paper: pipe tables, table cells with a line break, verbatim code.
"""

from __future__ import annotations

import re
from typing import Mapping

__all__ = ["markdown_table", "verbatim", "estimate_cell", "CELL_BREAK"]


def markdown_table(rows: list[Mapping[str, str]], columns: list[str] | None = None) -> str:
    """A pipe table (pandoc/Quarto Markdown) from a list of row dicts of strings.

    The separator's dashes are proportional to each column's widest cell (at
    least its header's longest word), which pandoc turns into relative column
    widths for wide tables (PDF), so that short columns do not wrap.
    """
    if not rows:
        return "*(no rows)*\n"
    columns = columns or list(rows[0])
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
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
    pandoc), padded with a space where ``text`` starts or ends with a backtick; ``|`` is left to
    :func:`markdown_table` to escape. A newline has no place in a table cell: replace it first.

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

