"""The paper's conversion without Quarto: cross-references, Typst, citations of cells, :func:`render_paper`.

Where Quarto is not installed, :func:`render_paper` resolves the inline expressions, embeds
and includes of ``paper/index.qmd``, then converts with pandoc (``pypandoc-binary``) to HTML
and, through Typst (PyPI ``typst``), to PDF. The HTML links each number, figure and table to
its cell in a rendered view of the executed notebook; the PDF names the cell.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Mapping

from murk import core
from murk.report._cells import EMBED_RE, notebook_cells
from murk.report._format import NOT_COMPUTED
from murk.report._numbers import load_numbers, load_provenance
from murk.report._resolve import refuse_mixed_paper, resolve_qmd, stamp_html
from murk.report._view import notebook_view, view_name

__all__ = ["crossref", "label_numbers", "render_paper", "typst_options", "TYPST_HEADER", "LUA_FILTER",
           "SECTION_FILTER", "TYPST_TEXT_FILTER", "LUA_FILTERS"]


LABEL_RE = re.compile(r"\{#((fig|tbl)-[A-Za-z0-9_-]+)\}")
XREF_RE = re.compile(r"@((fig|tbl)-[A-Za-z0-9_-]+)")


def label_numbers(md: str) -> dict[str, str]:
    """``{label: "Table 3"}`` for every ``{#fig-…}`` / ``{#tbl-…}`` label of ``md``: numbered per kind in the
    order of first citation (``@label``), then the uncited ones in order of appearance (see :func:`crossref`).

    >>> label_numbers("@tbl-b, @tbl-a\\n\\n: A {#tbl-a}\\n\\n: B {#tbl-b}\\n\\n: C {#tbl-c}")
    {'tbl-b': 'Table 1', 'tbl-a': 'Table 2', 'tbl-c': 'Table 3'}
    """
    placed = [label for label, _ in LABEL_RE.findall(md)]
    cited = [label for label, _ in XREF_RE.findall(md) if label in placed]
    order = list(dict.fromkeys(cited + placed))
    count = {"fig": 0, "tbl": 0}
    numbers: dict[str, str] = {}
    for label in order:
        kind = label.split("-", 1)[0]
        count[kind] += 1
        numbers[label] = f"{'Figure' if kind == 'fig' else 'Table'} {count[kind]}"
    return numbers


def crossref(md: str, prefix_captions: bool = True) -> str:
    """Number figures and tables for the pandoc fallback, in the order the text first cites them.

    Each ``{#fig-…}`` / ``{#tbl-…}`` label gets its number in the order of its
    first reference (``@tbl-…``), as a paper numbers its tables; labels never
    cited follow in order of appearance. Quarto numbers by placement, so
    ``paper/index.qmd`` places each embed after its first citation and in that
    order (``tests/test_paper.py`` checks it): the two renderers then agree.
    Captions are prefixed ("Figure 1: …") unless ``prefix_captions`` is False,
    and ``@fig-…`` references become links ("Figure 1"). The fallback's PDF
    uses the prefixed captions too, with Typst's own (placement) numbering
    turned off (:data:`TYPST_HEADER`).

    Raises
    ------
    KeyError
        A reference to a label that does not exist.
    """
    numbers = label_numbers(md)
    missing = sorted({lab for lab, _ in XREF_RE.findall(md) if lab not in numbers})
    if missing:
        raise KeyError(f"cross-references to missing labels: {missing}")
    if not prefix_captions:
        return XREF_RE.sub(lambda m: f"[{numbers[m.group(1)]}](#{m.group(1)})", md)
    md = re.sub(r"!\[([^\]]*)\]\(([^)]+)\)\{#(fig-[A-Za-z0-9_-]+)\}",
                lambda m: f"![{numbers[m.group(3)]}: {m.group(1)}]({m.group(2)}){{#{m.group(3)}}}", md)
    md = re.sub(r"^: (.*)\{#(tbl-[A-Za-z0-9_-]+)\}\s*$",
                lambda m: f": {numbers[m.group(2)]}: {m.group(1).strip()} {{#{m.group(2)}}}", md, flags=re.M)
    return XREF_RE.sub(lambda m: f"[{numbers[m.group(1)]}](#{m.group(1)})", md)


#: Typst set/show rules added to pandoc's Typst output (the fallback PDF; Quarto's own Typst
#: format does the same by default): figure and table numbers come from the captions (citation order,
#: :func:`crossref`), a table too long for the rest of its page breaks across
#: pages and repeats its header row (``table.header`` repeats) without splitting a row, its caption
#: stays with its first rows, table text is set smaller, ragged and left-aligned (a table of nine or more columns
#: a point smaller again), a heading never ends a page alone, and no figure or table is separated from the
#: "Source:" line after it.
TYPST_HEADER = """\
// murk (pandoc + Typst fallback of the paper): captions carry their numbers in citation order
// (murk.report.crossref), so Typst's own numbering by placement is off
#set figure(numbering: none)
// long tables break across pages
#show figure.where(kind: table): set block(breakable: true)
#show figure.where(kind: table): set text(size: 8pt)
#show figure.where(kind: table): set par(justify: false)
// cells left-aligned (pandoc centres the table, and cells of alignment auto would inherit the centring)
#show table.cell: set align(left)
#show figure.caption: it => block(sticky: true, it)
// a figure sticks to the block after it, its "Source:" line (murk.report.resolve_embeds): never separated by a
// page break (a table, which may break across pages, carries its source in its caption instead)
#show figure.where(kind: image): set block(sticky: true)
// a table of nine or more columns (the crossings, spec Table V) is set a point smaller
#show table: it => if type(it.columns) == array and it.columns.len() >= 9 { set text(size: 7pt); it } else { it }
#set table(inset: (x: 4pt, y: 3pt))
#set table.cell(breakable: false)
#show heading: set block(sticky: true)
"""


#: the Lua filter that both Quarto (``filters:`` in ``_quarto.yml``) and :func:`render_paper` run: a raw
#: ``<br>`` (:data:`CELL_BREAK`) becomes a line break of every output format
LUA_FILTER = "linebreak.lua"
#: the Lua filter that numbers the sections as the spec does (I–VI, subsections A, B, …, appendices A, B, …;
#: Quarto's number-sections would be Arabic): run by Quarto (``_quarto.yml``) and by :func:`render_paper`
SECTION_FILTER = "sections.lua"
#: the Lua filter that writes the text pandoc's Typst writer leaves as a Typst shorthand (``...``, ``-?``) escaped,
#: so that a value (a model's folder name, :func:`murk.report.markdown_text`) prints in the PDF as written: run by
#: Quarto (``_quarto.yml``) and by :func:`render_paper`
TYPST_TEXT_FILTER = "typst-text.lua"
#: the Lua filters of both renderers, in the order they run (``_quarto.yml``'s ``filters:``)
LUA_FILTERS = (LUA_FILTER, SECTION_FILTER, TYPST_TEXT_FILTER)


def typst_options(quarto_yml: str | os.PathLike | None = None) -> dict:
    """The Typst page settings that ``_quarto.yml`` gives (``format: typst:``), for the fallback.

    Parameters
    ----------
    quarto_yml : path, optional
        Default the project's ``_quarto.yml``.

    Returns
    -------
    dict
        ``papersize`` (a Typst paper name; default ``"a4"``) and, where given,
        ``margin`` (e.g. ``{"x": "2cm", "y": "2.5cm"}``): pandoc variables of its
        Typst template.
    """
    import yaml

    f = Path(quarto_yml) if quarto_yml else core.project_root() / "_quarto.yml"
    typ = {}
    if f.is_file():
        typ = ((yaml.safe_load(f.read_text(encoding="utf-8")) or {}).get("format") or {}).get("typst") or {}
    out: dict = {"papersize": str(typ.get("papersize", "a4")).lower()}
    if isinstance(typ.get("margin"), dict):
        out["margin"] = {str(k): str(v) for k, v in typ["margin"].items()}
    return out


#: paper sizes (cm) of :func:`typst_options`' ``papersize`` values the fallback knows
PAPER_CM = {"a4": (21.0, 29.7), "us-letter": (21.59, 27.94), "a5": (14.8, 21.0)}
#: height (cm) kept free on a page for a figure's caption (up to three lines), its "Source:" line and the gaps
FIGURE_TEXT_CM = 4.0


def _length_cm(value: str) -> float | None:
    m = re.fullmatch(r"\s*([\d.]+)\s*(cm|mm|in|pt)\s*", str(value))
    return float(m.group(1)) * {"cm": 1.0, "mm": 0.1, "in": 2.54, "pt": 2.54 / 72}[m.group(2)] if m else None


def fit_figures_to_page(md: str, base: str | os.PathLike, options: Mapping | None = None) -> str:
    """Give each figure of ``md`` too tall for a page (at the text width) an explicit height, so that it fits
    one page together with its caption and "Source:" line (Typst would otherwise fill the page with the
    image and push them onto the next).

    Parameters
    ----------
    md : str
        Markdown with figures ``![caption](path){#fig-… …}``, paths relative to ``base``.
    base : path
        Folder the figure paths are relative to.
    options : mapping, optional
        :func:`typst_options` (default: this project's): ``papersize`` and ``margin`` (``x``, ``y``).

    Returns
    -------
    str
        ``md`` with `` height=…cm`` added to the attributes of each figure (PNG, JPEG) whose height at the
        text width exceeds the page's text height less :data:`FIGURE_TEXT_CM`; unchanged where the paper size or
        margins are not known.
    """
    from PIL import Image

    opts = typst_options() if options is None else options
    paper_cm = PAPER_CM.get(str(opts.get("papersize", "a4")))
    margin = opts.get("margin") or {}
    mx = _length_cm(margin.get("x", margin.get("rest", "2.5cm")))
    my = _length_cm(margin.get("y", margin.get("rest", "2.5cm")))
    if paper_cm is None or mx is None or my is None:
        return md
    text_w, max_h = paper_cm[0] - 2 * mx, paper_cm[1] - 2 * my - FIGURE_TEXT_CM

    def one(m):
        try:
            with Image.open(Path(base) / m.group(2)) as im:
                w, h = im.size
        except (OSError, ValueError):
            return m.group(0)
        if "height=" in m.group(3) or text_w * h / w <= max_h:
            return m.group(0)
        return f"{m.group(1)}{{{m.group(3)} height={max_h:.1f}cm}}"

    return re.sub(r"(!\[[^\]]*\]\(([^)\s]+\.(?:png|jpe?g))\))\{([^}]*)\}", one, md)


def _figure_paths(md: str) -> list[str]:
    return re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", md)


#: an inline value at most this long, or without words (a list of numbers), on one line and without a link of
#: its own, is itself the link to its cell in the HTML; a longer one (a sentence, a paragraph) is followed by a
#: small link mark instead
CITE_LINK_MAX = 40
#: the markers around a cited value between resolving and the per-format writing (never reach pandoc)
_CITE_RE = re.compile("\x02(\\d+)\x1f(.*?)\x03", re.S)


def _cite_html(value: str, key: str, label: str, href: str) -> str:
    title = f"computed in cell {label} of notebooks/{Path(href.split('#')[0]).stem}.py"
    attrs = f'key="{key}" cell="{label}"'
    short = len(value) <= CITE_LINK_MAX or not re.search(r"[^\W\d_]{2}", value)  # a list of numbers is short
    if short and "\n" not in value and "](" not in value and "[^" not in value:
        return f'[{value}]({href} "{title}"){{.murk-number {attrs}}}'
    return f'{value}[↗]({href} "{title}"){{.murk-source {attrs}}}'


#: a table embed as :func:`_embed` writes it: caption line, body, then its "Source:" block naming the same cell
_TABLE_SOURCE_RE = re.compile(r"^(: [^\n]*?)(\s*\{#(tbl-[A-Za-z0-9_-]+)\})[ \t]*\n(.*?)\n+::: \{\.embed-source\}\n"
                              r"(Source: \[[^\n]*?, cell `\3`\]\([^)\n]*\))\n:::\n", re.M | re.S)


def sources_into_table_captions(md: str) -> str:
    """Move each embedded table's "Source:" line into its caption (the PDF: a table may break across
    pages, so a line after it could start a page alone; its caption stays with its first rows).

    >>> sources_into_table_captions(": A table. {#tbl-a}\\n\\n| x |\\n|---|\\n| 1 |\\n\\n"
    ...                             "::: {.embed-source}\\nSource: [nb.ipynb, cell `tbl-a`](nb.html#tbl-a)\\n:::\\n")
    ': A table. Source: [nb.ipynb, cell `tbl-a`](nb.html#tbl-a) {#tbl-a}\\n\\n| x |\\n|---|\\n| 1 |\\n'
    """
    return _TABLE_SOURCE_RE.sub(lambda m: f"{m.group(1)} {m.group(5)}{m.group(2)}\n{m.group(4)}\n", md)


def _cite_typst(md: str, cites: list[tuple[str, str]], source) -> str:
    """The PDF's form of the cited numbers: the values as they are, and in each block of text (a paragraph)
    that cites numbers one footnote naming their cells and keys (at the end of the sentence of its last one).
    ``source`` is the notebook the cells are in: one path, or a callable giving a cell label's notebook."""
    source_of = source if callable(source) else (lambda label: source)
    blocks = re.split(r"(\n[ \t]*\n)", md)
    out = []
    for block in blocks:
        found = list(_CITE_RE.finditer(block))
        if not found:
            out.append(block)
            continue
        by_cell: dict[tuple[str, str], list[str]] = {}   # (notebook, label) -> keys
        for m in found:
            key, label = cites[int(m.group(1))]
            by_cell.setdefault((source_of(label), label), [])
            if key not in by_cell[(source_of(label), label)]:
                by_cell[(source_of(label), label)].append(key)
        by_source: dict[str, list[str]] = {}
        for (src, label), keys in by_cell.items():
            by_source.setdefault(src, []).append(f"cell `{label}` (" + ", ".join(f"`{k}`" for k in keys) + ")")
        note = "; ".join(f"{'from' if i else 'From'} `{src}`, " + "; ".join(cells)
                         for i, (src, cells) in enumerate(by_source.items()))
        # the footnote mark goes at the end of the sentence of the last number (else right after it)
        end = found[-1].end()
        stop = re.compile(r"[.!?][)\]]?(?=\s|$)").search(block, end)
        at = stop.end() if stop and "\n\n" not in block[end:stop.end()] and ":::" not in block[end:stop.end()] else end
        block = block[:at] + f"^[{note}.]" + block[at:]
        out.append(_CITE_RE.sub(lambda m: m.group(2), block))
    return "".join(out)


def render_paper(qmd: str | os.PathLike | None = None, output_dir: str | os.PathLike | None = None,
                 pdf: bool = True) -> dict[str, Path]:
    """Convert the paper without Quarto: resolve, then pandoc → HTML and Typst → PDF.

    Parameters
    ----------
    qmd : path, optional
        Default ``paper/index.qmd``.
    output_dir : path, optional
        Output root (default :func:`murk.core.output_dir`); the paper goes
        to ``<root>/paper/``.
    pdf : bool
        Also compile a PDF through Typst: paper size (and margins, if given) from
        ``_quarto.yml`` (:func:`typst_options`), long tables breaking across pages
        with their header repeated, headings kept with what follows
        (:data:`TYPST_HEADER`).

    The executed notebooks the paper draws on (``04_analyse.ipynb``, and each embedded one
    that exists) get a rendered view beside the paper (:func:`notebook_view`:
    ``<root>/paper/04_analyse.html``, a ``<div id="label">`` per labelled cell). In the HTML,
    each cited number links to the cell that recorded it (:func:`load_provenance`;
    ``04_analyse.html#num-rq1``, the link carrying ``data-key`` and ``data-cell``): a short value
    is itself the link, a sentence is followed by a small "↗" link (:data:`CITE_LINK_MAX`);
    each embedded figure and table links to its cell ("Source: 04_analyse.ipynb, cell
    `tbl-…`"). In the PDF, each paragraph that cites numbers names their cells and keys in a
    footnote. A numbers file without provenance (an older murk) gives unlinked numbers.

    Returns
    -------
    dict with ``md``, ``html`` and (if ``pdf``) ``pdf`` paths, ``views`` (notebook file name
    -> its rendered view) and ``missing`` (the embeds whose notebook did not exist: "not
    computed in this run").

    Raises
    ------
    FileNotFoundError
        A figure the paper cites does not exist.
    MixedPaperError
        The numbers file and the executed notebooks are of different identities
        (:func:`refuse_mixed_paper`; nothing is written).
    """
    import pypandoc

    qmd = Path(qmd) if qmd else core.project_root() / "paper" / "index.qmd"
    root = core.output_dir(output_dir)
    ids = refuse_mixed_paper(root)   # before anything is written
    numbers = load_numbers(core.numbers_file(root))
    try:
        prov = load_provenance(core.numbers_file(root))
    except FileNotFoundError:  # a numbers file of an older murk: its numbers are not linked
        prov = {}
    out = core.paper_out_dir(root)
    out.mkdir(parents=True, exist_ok=True)
    text = qmd.read_text(encoding="utf-8")
    # the rendered views of the executed notebooks the paper cites: numbers, figures and tables link to their cells
    views = {}
    analyse_nb = core.notebooks_out_dir(root) / "04_analyse.ipynb"
    embedded = {Path(nb).name for nb, _ in EMBED_RE.findall(text)}
    for nb in sorted({analyse_nb.name} | embedded):
        f = core.notebooks_out_dir(root) / nb
        if f.is_file():
            views[nb] = notebook_view(f, out / view_name(f))
    cites: list[tuple[str, str]] = []

    # a number links to the view of the analysis notebook whose cell recorded it (04_analyse or 05_beyond)
    home: dict[str, str] = {}   # label -> the analysis notebook that holds it
    for nb in (f"{stage}.ipynb" for stage in core.NUMBERS_FRAGMENTS if f"{stage}.ipynb" in views):
        for label in notebook_cells(core.notebooks_out_dir(root) / nb):
            home.setdefault(label, nb)

    def cite(key: str, value: str) -> str:
        if key not in prov or home.get(prov[key], analyse_nb.name) not in views:
            return value
        cites.append((key, prov[key]))
        return f"\x02{len(cites) - 1}\x1f{value}\x03"

    missing: list[str] = []
    resolved = resolve_qmd(text, numbers, qmd.parent, root, missing=missing, cite=cite)
    if missing:
        print(f"paper: {NOT_COMPUTED} (notebook missing): {missing}")
    md_marked = crossref(resolved)
    def href(label: str) -> str:
        return f"{view_name(home.get(label, analyse_nb.name))}#{label}"

    md = _CITE_RE.sub(lambda m: _cite_html(m.group(2), *cites[int(m.group(1))], href(cites[int(m.group(1))][1])),
                      md_marked)
    figs = _figure_paths(md)
    absent = [f for f in figs if not Path(f).is_file()]
    if absent:
        raise FileNotFoundError(f"figures cited by the paper are missing: {absent}; run the analyse stage")
    md_path = out / "index.md"
    md_path.write_text(md, encoding="utf-8")
    bib = qmd.parent / "references.bib"
    common = ["--standalone", "--citeproc", f"--bibliography={bib}", f"--resource-path={qmd.parent}:{root}"]
    for name in reversed(LUA_FILTERS):  # before --citeproc, as Quarto runs its filters, in _quarto.yml's order
        lua = qmd.parent / name
        if not lua.is_file():
            lua = core.project_root() / "paper" / name
        common.insert(0, f"--lua-filter={lua}")
    html = out / "index.html"
    pypandoc.convert_file(str(md_path), "html5", format="markdown", outputfile=str(html),
                          extra_args=[*common, "--embed-resources", "--mathml", "--toc",
                                      "--metadata=lang:en", f"--css={qmd.parent / 'paper.css'}"])
    stamp_html(html, ids)
    result = {"md": md_path, "html": html, "missing": missing, "views": views}
    if pdf:
        import typst

        typ = out / "index.typ"
        # Typst resolves image paths relative to the .typ file and forbids leaving
        # its root: copy the cited figures (PDF versions) next to it.
        fig_dir = out / "figures"
        fig_dir.mkdir(exist_ok=True)
        # captions numbered in citation order (crossref); Typst's own numbering is off; each paragraph that
        # cites numbers names their cells in a footnote
        # a figure keeps its "Source:" line after it (TYPST_HEADER: sticky), a table carries it in its caption
        md_typ = sources_into_table_captions(_cite_typst(
            md_marked, cites, lambda label: f"notebooks/{Path(home.get(label, analyse_nb.name)).stem}.py"))
        for f in figs:
            src = Path(f)
            shutil.copy2(src, fig_dir / src.name)
            md_typ = md_typ.replace(f"]({f})", f"](figures/{src.name})")
        md_typ = fit_figures_to_page(md_typ, out)   # a study-sized figure fits one page with its caption and source
        header = out / "typst-header.typ"
        header.write_text(TYPST_HEADER, encoding="utf-8")
        page = out / "typst-page.json"  # JSON is YAML: pandoc reads it as a metadata file
        page.write_text(json.dumps(typst_options()), encoding="utf-8")
        # --columns: no source line counts as "too long", so pandoc gives tables auto column
        # widths (sized by content) instead of equal shares of the text width
        pypandoc.convert_text(md_typ, "typst", format="markdown", outputfile=str(typ),
                              extra_args=[*common, "--resource-path=" + str(out), f"--metadata-file={page}",
                                          f"--include-in-header={header}", "--columns=100000"])
        tmp_pdf = out / "index.pdf.tmp"
        typst.compile(str(typ), output=str(tmp_pdf), root=str(out), format="pdf")
        os.replace(tmp_pdf, out / "index.pdf")  # a reader never sees a half-written PDF
        result["pdf"] = out / "index.pdf"
    return result

