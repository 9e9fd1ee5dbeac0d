"""The rendered view of an executed notebook beside the paper (``outputs/paper/04_analyse.html#<label>``).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from murk import core
from murk.report._cells import notebook_cells
from murk.report._numbers import _label_of

__all__ = ["notebook_view", "view_name"]


def view_name(nb_path: str | os.PathLike) -> str:
    """File name of an executed notebook's rendered view beside the paper: ``04_analyse.ipynb`` -> ``04_analyse.html``."""
    return f"{Path(nb_path).stem}.html"


#: the rendered notebook view's styles (:func:`notebook_view`): the paper's type, code cells boxed, the cell
#: a link points at (``#label``) highlighted
VIEW_CSS = """\
body { max-width: 72em; margin: 2em auto; padding: 0 1em; font-family: Georgia, serif; line-height: 1.45; color: #222; }
img { max-width: 100%; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; display: block; overflow-x: auto; }
th, td { border-bottom: 1px solid #ccc; padding: 0.2em 0.5em; text-align: left; }
pre { font-size: 0.8em; overflow-x: auto; white-space: pre-wrap; margin: 0.3em 0; }
.view-note { font-size: 0.9em; color: #555; border-bottom: 1px solid #ccc; padding-bottom: 0.8em; }
.nb-cell { border: 1px solid #ddd; border-radius: 4px; margin: 1em 0; padding: 0.3em 0.8em; }
.nb-cell .cell-head { font-family: sans-serif; font-size: 0.8em; color: #666; margin: 0.2em 0; }
.nb-cell .cell-head code { color: #2b5d8a; font-weight: bold; }
.nb-cell div.sourceCode, .nb-cell > pre.source { background: #f6f8fa; }
.nb-output { border-left: 3px solid #9bc; padding-left: 0.8em; margin: 0.5em 0; }
.nb-output pre { background: none; }
pre > code.sourceCode { white-space: pre-wrap; }
pre > code.sourceCode > span { text-indent: 0; }
.nb-error pre { color: #a00; }
.nb-cell:target { border: 2px solid #EE6677; box-shadow: 0 0 0.6em #f3b6bf; }
"""

_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _fenced(text: str, attrs: str) -> str:
    """A fenced code block holding ``text`` exactly (its fence longer than any backtick run in it)."""
    fence = "`" * max(3, max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence} {{{attrs}}}\n{text.rstrip()}\n{fence}\n"


def _raw_html(html: str) -> str:
    fence = "`" * max(3, max((len(r) for r in re.findall(r"`+", html)), default=0) + 1)
    return f"{fence}{{=html}}\n{html}\n{fence}\n"


def _view_output(o) -> str:
    """Markdown of one cell output for :func:`notebook_view`."""
    import html as _html

    kind = o.get("output_type")
    if kind == "stream":
        text = o.get("text", "")
        text = "".join(text) if isinstance(text, list) else str(text)
        return _fenced(_ANSI_RE.sub("", text), ".stream")
    if kind == "error":
        tb = "\n".join(o.get("traceback") or [f"{o.get('ename')}: {o.get('evalue')}"])
        return f"::: {{.nb-error}}\n{_fenced(_ANSI_RE.sub('', tb), '.error')}:::\n"
    data = o.get("data", {})
    join = lambda v: "".join(v) if isinstance(v, list) else str(v)  # noqa: E731
    for mime in ("image/png", "image/jpeg"):
        if mime in data:
            b64 = join(data[mime]).replace("\n", "")
            return _raw_html(f'<img src="data:{mime};base64,{b64}" alt="figure output">')
    if "image/svg+xml" in data:
        return _raw_html(join(data["image/svg+xml"]))
    if "text/markdown" in data:
        return join(data["text/markdown"]).strip() + "\n"
    if "text/html" in data:
        return _raw_html(join(data["text/html"]))
    if "text/plain" in data:
        return _fenced(join(data["text/plain"]), ".text")
    other = [m for m in data if m.endswith("json")]
    if other:
        return _fenced(json.dumps(data[other[0]], indent=1, ensure_ascii=False), ".json")
    return ""


def notebook_view(nb_path: str | os.PathLike, html_path: str | os.PathLike | None = None,
                  source: str | None = None) -> Path:
    """A readable HTML view of an executed notebook, each labelled cell anchored at its label.

    Every cell in order: Markdown cells as text, code cells as their (highlighted) source
    with their outputs (text, Markdown tables, figures as embedded PNG, errors). A code cell
    whose options carry ``#| label: L`` is a ``<div class="nb-cell" id="L">`` headed
    "cell `L`", so that ``04_analyse.html#num-rq1`` opens at the cell that recorded a number
    and ``04_analyse.html#tbl-crossings`` at the cell of a table (the cell a link points at
    is highlighted). Converted by pandoc (``pypandoc-binary``), one self-contained file
    (no nbconvert, no network).

    Parameters
    ----------
    nb_path : path
        The executed notebook (``outputs/notebooks/04_analyse.ipynb``).
    html_path : path, optional
        Where to write it (rewritten atomically); default ``<output root>/paper/<stem>.html``
        (:func:`view_name`, beside the paper).
    source : str, optional
        The notebook's source named in the view's header; default ``notebooks/<stem>.py``.

    Returns
    -------
    Path
        ``html_path``.

    Raises
    ------
    FileNotFoundError
        The notebook does not exist.
    ValueError
        Two cells carry the same label (:func:`notebook_cells`).
    """
    import nbformat
    import pypandoc

    nb_path = Path(nb_path)
    notebook_cells(nb_path)  # missing notebook, duplicate labels: the errors of the embeds
    nb = nbformat.read(nb_path, as_version=4)
    if html_path is None:
        html_path = nb_path.parent.parent / "paper" / view_name(nb_path)
    html_path = Path(html_path)
    source = source or f"notebooks/{nb_path.stem}.py"
    parts = [_raw_html(f"<style>\n{VIEW_CSS}</style>"),
             f"::: {{.view-note}}\nThe executed notebook `{nb_path.name}` (from `{source}`), rendered for reading. "
             f"Each labelled cell is anchored at its label: `{html_path.name}#<label>`.\n:::\n"]
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            parts.append(cell.source.strip() + "\n")
            continue
        if cell.cell_type != "code":
            continue
        label = _label_of(cell.source)
        count = cell.get("execution_count")
        head = (f"cell `{label}`" if label else "cell") + (f" · In [{count}]" if count else "")
        body = [f"[{head}]{{.cell-head}}\n", _fenced(cell.source, ".python .source")]
        for o in cell.get("outputs", []):
            out = _view_output(o)
            if out:
                body.append(f"::::::: {{.nb-output}}\n{out}\n:::::::\n")
        attrs = (f"#{label} " if label else "") + ".nb-cell"
        parts.append(f"::::::::::: {{{attrs}}}\n" + "\n".join(body) + "\n:::::::::::\n")
    md = "\n".join(parts)
    html_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = html_path.with_name(html_path.name + ".tmp")
    with core.guard(html_path, cleanup=[tmp]):
        pypandoc.convert_text(md, "html5", format="markdown", outputfile=str(tmp),
                              extra_args=["--standalone", "--mathml", "--metadata=lang:en",
                                          f"--metadata=pagetitle:{nb_path.name}",
                                          f"--metadata=title:{nb_path.name} (executed)"])
    os.replace(tmp, html_path)
    return html_path

