"""A value (a model id or display name, a folder, a setting) written as data into the context it lands in: Markdown
text that pandoc and Jupyter show literally (:func:`markdown_text`; in HTML no raw HTML and no link, in Typst plain
text, since pandoc's Typst writer escapes the text it is given and ``paper/typst-text.lua`` the two shorthands it
leaves, ``...`` and ``-?``), and a matplotlib text without mathtext
(:func:`plot_text`). A code span (:func:`murk.report.verbatim`) is the other literal form of Markdown.

The rule is OWASP's for output encoding (escape for the context the value lands in): the sentence, table or label
that holds a value is murk's own markup, the value is escaped where it enters it, never the whole text afterwards.
"""

from __future__ import annotations

import re

__all__ = ["markdown_text", "plot_text"]

#: the ASCII punctuation that starts or ends inline Markdown (pandoc's Markdown with Quarto's extensions, and the
#: CommonMark of Jupyter): emphasis ``*`` ``_``, code `````, links and spans ``[`` ``]`` ``(`` ``)`` ``{`` ``}``,
#: raw HTML, autolinks and comments ``<`` ``>``, entities ``&``, math ``$``, citations and cross-references ``@``,
#: headings ``#``, table cells ``|``, sub-/superscript and strike-out ``~`` ``^``, images ``!``, smart quotes
#: ``'`` ``"``, emoji and definition lists ``:``, highlights ``=``, list markers ``+``, shortcodes ``%``, and the
#: escape ``\\`` itself. Every ASCII punctuation character may be backslash-escaped in both dialects (pandoc's
#: ``all_symbols_escapable``; CommonMark 0.31, section 2.4), so an escaped one is shown as itself.
_MARKDOWN_SPECIAL = r"\`*_{}[]()<>&$@#|~^!'\":=+%"
_MARKDOWN_RE = re.compile("[" + re.escape(_MARKDOWN_SPECIAL) + r"]|-(?=-)|\.(?=\.)")


def markdown_text(text) -> str:
    """A text shown literally in Markdown: every character that could start markup is backslash-escaped.

    Pandoc then writes it as text to every format: in HTML no tag, comment, entity or link comes from the
    value (``<`` becomes ``&lt;``; ``[x](javascript:…)`` stays text), in Typst (the PDF) text that pandoc's
    writer escapes itself (``#``, ``$``, ``@``, ``*``; ``...`` and ``-?`` by the paper's filter
    ``paper/typst-text.lua``, :data:`murk.report.TYPST_TEXT_FILTER`). Runs of ``-`` and ``.`` are broken so that
    pandoc's smart punctuation keeps them (no en or em dash, no ellipsis), and a leading ``-`` or ``1.`` starts no list.
    Letters, digits, blanks, ``/``, ``,``, ``;``, ``?`` and a single ``-`` or ``.`` are left as they are, so that
    ``murk-tiny/smolvlm`` or ``Qwen2.5-VL`` reads the same in the Markdown.

    Parameters
    ----------
    text : str
        The value (converted with ``str``). A line break has no place in an inline value: murk refuses names
        that hold one where they are read (:func:`murk.core.model_entries`).

    Returns
    -------
    str
        Markdown whose rendering is ``text`` exactly.

    Raises
    ------
    ValueError
        ``text`` holds a line break (it would end the paragraph or the table row the value is in).

    Examples
    --------
    >>> markdown_text("[x](javascript:alert(1))")
    '\\\\[x\\\\]\\\\(javascript\\\\:alert\\\\(1\\\\)\\\\)'
    >>> markdown_text("murk-tiny/smolvlm"), markdown_text("a--b")
    ('murk-tiny/smolvlm', 'a\\\\--b')
    """
    text = str(text)
    if "\n" in text or "\r" in text:
        raise ValueError(f"a value for Markdown text holds a line break: {text[:60]!r}")
    out = _MARKDOWN_RE.sub(lambda m: "\\" + m.group(0), text)
    if out.startswith("-"):                       # "- x" at the start of a line is a list item
        out = "\\" + out
    return re.sub(r"^(\d+)\.(?=\s|$)", r"\1\\.", out)   # and so is "1. x" (not "0.03": no list)


def plot_text(text) -> str:
    """A text drawn literally by matplotlib (a legend entry, a title, an axis label): each ``$`` escaped, so
    that no mathtext is parsed from it (matplotlib reads a text with an even number of unescaped ``$`` as math,
    and shows ``\\$`` as ``$`` otherwise; murk does not use ``text.usetex``).

    Parameters
    ----------
    text : str
        The value (converted with ``str``).

    Returns
    -------
    str

    Examples
    --------
    >>> plot_text("$x^2$ run")
    '\\\\$x^2\\\\$ run'
    """
    return str(text).replace("$", r"\$")
