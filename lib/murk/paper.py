"""The flat numbers file the paper reads, and the paper's conversion without Quarto.

Every number in ``paper/index.qmd`` is an inline expression
```{python} N["key"]``` reading ``outputs/paper_numbers.json`` (key -> formatted
string) written by the analyse stage; tables are Markdown files written by the
same stage and pulled in with Quarto's ``{{< include … >}}`` shortcode. Where
Quarto is installed it renders the paper; where it is not,
:func:`render_paper` resolves the same inline expressions and includes, then
converts with pandoc (``pypandoc-binary``) to HTML and, through Typst (PyPI
``typst``), to PDF.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path
from typing import Mapping

from murk import paths

__all__ = ["fmt", "fmt_interval", "fmt_crossing", "fmt_level", "fmt_estimate", "fmt_range", "BOUND_SIGNS",
           "write_numbers", "load_numbers",
           "INLINE_RE", "INCLUDE_RE", "resolve_qmd", "render_paper", "typst_options", "TYPST_HEADER"]

INLINE_RE = re.compile(r"`\{python\}\s*N\[\s*[\"']([^\"']+)[\"']\s*\]\s*`")
ANY_INLINE_RE = re.compile(r"`\{python\}[^`]*`")
INCLUDE_RE = re.compile(r"\{\{<\s*include\s+(\S+)\s*>\}\}")
CELL_RE = re.compile(r"^```\{python\}.*?^```\s*$", re.S | re.M)
FRONT_RE = re.compile(r"\A---\n(.*?)\n---\n", re.S)


def fmt(x: float, digits: int = 2) -> str:
    """A number as the paper prints it: ``digits`` decimals; NaN as "n/a"."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.{digits}f}"


def fmt_interval(lo: float, hi: float, digits: int = 2) -> str:
    """A bootstrap interval as ``[lo, hi]``."""
    return f"[{fmt(lo, digits)}, {fmt(hi, digits)}]"


#: Sign printed before a value censored on each side: "below" = the true value is
#: at most the printed one (a crossing below the last sweep level; W bounded from
#: above), "above" = at least (a crossing at or before the first level; W
#: bounded from below).
BOUND_SIGNS: dict[str, str] = {"below": "≤", "above": "≥"}


def _side(censored, lower_bound_sign: str | None = None) -> str:
    """Normalise a ``censored`` argument to "", "below", "above" or "undefined".

    ``True`` (the legacy boolean) means "not reached within the sweep", i.e.
    ``"below"``, unless ``lower_bound_sign`` asks for the old "≥" explicitly.
    """
    if censored is None or censored is False or (isinstance(censored, float) and math.isnan(censored)):
        return ""
    if isinstance(censored, (bool, int)) and not isinstance(censored, str):
        if not censored:
            return ""
        return "above" if lower_bound_sign == "≥" else "below" if lower_bound_sign in (None, "≤") else "sign"
    side = str(censored)
    if side not in ("", "below", "above", "undefined"):
        raise ValueError(f"censored must be '', 'below', 'above', 'undefined' or a bool, got {censored!r}")
    return side


def _is_sweep_level(v: float) -> bool:
    from murk import physics

    return any(math.isclose(v, float(x), rel_tol=1e-9) for x in physics.SWEEP_M)


def fmt_level(v: float) -> str:
    """A sweep level as the spec names it: three significant digits (``250``, ``62.5``, ``1.95``)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return f"{float(v):.3g}"


def fmt_crossing(value: float, censored=None, digits: int = 2, lower_bound_sign: str | None = None) -> str:
    """A crossing visibility or a W, printed as a bound on the side it is censored.

    Parameters
    ----------
    value : float
        Crossing visibility in metres, or W in decades; NaN prints "n/a".
    censored : {"", "below", "above", "undefined"} or bool, optional
        Side of the bound (``censored_side`` / ``w_censored_side`` of
        :func:`murk.analysis.crossing_table`): ``"below"`` = the true value is
        at most *value* (a crossing below the last level, ``≤ 1.95``; a W
        bounded from above), ``"above"`` = at least (a crossing at or before
        the first level, ``≥ 250``; a W bounded from below), ``"undefined"``
        prints "n/a". A boolean is the legacy form, "not reached within the
        sweep": True is ``"below"`` (``≤``); with ``lower_bound_sign="≥"`` it is
        ``"above"``, the old default for a W.
    digits : int, default 2
        Decimals of an unbounded value and of a bounded W. A bound that is a
        sweep level (1.953125 m, 250 m) prints as the level's name
        (:func:`fmt_level`: ``1.95``, ``250``), not as ``2.0``.
    lower_bound_sign : str, optional
        Legacy: the sign printed for ``censored=True``.

    Returns
    -------
    str
        ``"12.4"``, ``"≤ 1.95"``, ``"≥ 250"``, ``"≥ 0.80"`` or ``"n/a"``.

    Examples
    --------
    >>> fmt_crossing(1.953125, "below", 1), fmt_crossing(250.0, "above", 1), fmt_crossing(0.8, "above")
    ('≤ 1.95', '≥ 250', '≥ 0.80')
    """
    side = _side(censored, lower_bound_sign)
    if side == "undefined" or value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if not side:
        return fmt(value, digits)
    s = fmt_level(value) if _is_sweep_level(float(value)) else fmt(value, digits)
    sign = lower_bound_sign if side == "sign" else BOUND_SIGNS[side]
    return f"{sign} {s}"


def fmt_estimate(point: float, lo: float, hi: float, censored=None, digits: int = 2) -> str:
    """A point with its bootstrap interval, ``"0.75 [0.38, 1.05]"``; bounds as :func:`fmt_crossing`.

    An undefined point (NaN, or ``censored="undefined"``) prints ``"n/a"`` alone,
    never an interval of something that is not defined; an interval whose ends
    are both NaN is left out.
    """
    p = fmt_crossing(point, censored, digits)
    if p == "n/a":
        return p
    nan = lambda x: x is None or (isinstance(x, float) and math.isnan(x))  # noqa: E731
    if nan(lo) and nan(hi):
        return p
    return f"{p} {fmt_interval(lo, hi, digits)}"


def fmt_range(values, censored=None, digits: int = 2) -> str:
    """The range of a quantity over models, each end keeping its own bound.

    Parameters
    ----------
    values : array_like of float
        One value per model (NaN left out).
    censored : array_like of str or bool, optional
        The side of each value (as :func:`fmt_crossing`); default none.
    digits : int, default 2

    Returns
    -------
    str
        ``"0.05–0.39"`` without bounds; ``"0.05 – ≥ 0.39"`` when an end is a
        bound (the end's sign is kept); one value (all equal) prints once;
        ``"n/a"`` when nothing is defined. Values whose W is undefined are left
        out.

    Examples
    --------
    >>> fmt_range([0.05, 0.39, 0.2], ["", "above", ""])
    '0.05 – ≥ 0.39'
    """
    import numpy as np

    v = np.asarray(values, dtype=np.float64).ravel()
    if censored is None:
        sides = [""] * v.size
    else:
        c = np.broadcast_to(np.asarray(censored, dtype=object), v.shape)
        sides = [_side(x if not isinstance(x, np.bool_) else bool(x)) for x in c]
    keep = [i for i in range(v.size) if np.isfinite(v[i]) and sides[i] != "undefined"]
    if not keep:
        return "n/a"

    def end(pick):
        vals = np.array([v[i] for i in keep])
        target = pick(vals)
        at = [i for i in keep if math.isclose(v[i], target, rel_tol=1e-12, abs_tol=1e-12)]
        bounded = [i for i in at if sides[i]]  # a tie keeps the bound (the weaker statement)
        i = (bounded or at)[0]
        return fmt_crossing(float(v[i]), sides[i], digits)

    lo, hi = end(np.min), end(np.max)
    if lo == hi:
        return lo
    return f"{lo} – {hi}" if (lo[0] in "≤≥" or hi[0] in "≤≥") else f"{lo}–{hi}"


def write_numbers(numbers: Mapping[str, str], path: str | os.PathLike | None = None) -> Path:
    """Write the numbers file atomically (JSON object, sorted keys, str values).

    Raises
    ------
    TypeError
        If a value is not a string (numbers are formatted where they are computed).
    """
    bad = [k for k, v in numbers.items() if not isinstance(v, str)]
    if bad:
        raise TypeError(f"numbers must be formatted strings; not: {bad[:5]}")
    path = Path(path) if path else paths.numbers_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(dict(numbers), indent=1, sort_keys=True, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)
    return path


def load_numbers(path: str | os.PathLike | None = None) -> dict[str, str]:
    """Read the numbers file (default ``outputs/paper_numbers.json``).

    Raises
    ------
    FileNotFoundError
        If the analyse stage has not written it.
    """
    path = Path(path) if path else paths.numbers_file()
    if not path.is_file():
        raise FileNotFoundError(f"{path} missing: run the analyse stage (notebooks/04_analyse.py) first")
    return json.loads(path.read_text(encoding="utf-8"))


def resolve_qmd(text: str, numbers: Mapping[str, str], base_dir: str | os.PathLike,
                output_dir: str | os.PathLike | None = None) -> str:
    """Turn the paper's Quarto source into plain Markdown.

    Inline ``N["key"]`` expressions are replaced by their values, include
    shortcodes by the included file, and Python cells (the setup cell, which
    only loads ``N``) are dropped. Paths starting with ``../outputs/`` are
    redirected to ``output_dir`` when given.

    Raises
    ------
    KeyError
        An inline expression names a key missing from the numbers file.
    ValueError
        An inline expression other than ``N["key"]`` (the fallback evaluates
        no code), or a missing include file.
    """
    base = Path(base_dir)
    out_root = Path(output_dir) if output_dir else None

    def redirect(p: str) -> Path:
        if out_root is not None and p.startswith("../outputs/"):
            return out_root / p[len("../outputs/"):]
        return (base / p).resolve()

    def include(m):
        f = redirect(m.group(1))
        if not f.is_file():
            raise ValueError(f"paper include {m.group(1)} -> {f} missing: run the analyse stage")
        return f.read_text(encoding="utf-8")

    text = INCLUDE_RE.sub(include, text)
    text = CELL_RE.sub("", text)
    missing = [k for k in INLINE_RE.findall(text) if k not in numbers]
    if missing:
        raise KeyError(f"paper numbers missing from the numbers file: {sorted(set(missing))}")
    text = INLINE_RE.sub(lambda m: numbers[m.group(1)], text)
    other = ANY_INLINE_RE.findall(text)
    if other:
        raise ValueError(f"inline expressions other than N[\"key\"] cannot be resolved without Quarto: {other[:3]}")
    if out_root is not None:
        text = re.sub(r"\]\(\.\./outputs/", "](" + out_root.as_posix().rstrip("/") + "/", text)
    return text


LABEL_RE = re.compile(r"\{#((fig|tbl)-[A-Za-z0-9_-]+)\}")
XREF_RE = re.compile(r"@((fig|tbl)-[A-Za-z0-9_-]+)")


def crossref(md: str, prefix_captions: bool = True) -> str:
    """Number figures and tables the way Quarto does, for the pandoc fallback.

    Each ``{#fig-…}`` / ``{#tbl-…}`` label gets its number in order of
    appearance; captions are prefixed ("Figure 1: …") unless
    ``prefix_captions`` is False (Typst numbers captions itself), and
    ``@fig-…`` references become links ("Figure 1").

    Raises
    ------
    KeyError
        A reference to a label that does not exist.
    """
    numbers: dict[str, str] = {}
    count = {"fig": 0, "tbl": 0}
    for label, kind in LABEL_RE.findall(md):
        if label not in numbers:
            count[kind] += 1
            numbers[label] = f"{'Figure' if kind == 'fig' else 'Table'} {count[kind]}"
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
#: format does the same by default): a table too long for the rest of its page breaks across
#: pages and repeats its header row (``table.header`` repeats) without splitting a row, its caption
#: stays with its first rows, table text is set smaller and ragged, and a heading never ends a page alone.
TYPST_HEADER = """\
// murk (pandoc + Typst fallback of the paper): long tables break across pages
#show figure.where(kind: table): set block(breakable: true)
#show figure.where(kind: table): set text(size: 8pt)
#show figure.where(kind: table): set par(justify: false)
#show figure.caption: it => block(sticky: true, it)
#set table(inset: (x: 4pt, y: 3pt))
#set table.cell(breakable: false)
#show heading: set block(sticky: true)
"""


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

    f = Path(quarto_yml) if quarto_yml else paths.project_root() / "_quarto.yml"
    typ = {}
    if f.is_file():
        typ = ((yaml.safe_load(f.read_text(encoding="utf-8")) or {}).get("format") or {}).get("typst") or {}
    out: dict = {"papersize": str(typ.get("papersize", "a4")).lower()}
    if isinstance(typ.get("margin"), dict):
        out["margin"] = {str(k): str(v) for k, v in typ["margin"].items()}
    return out


def _figure_paths(md: str) -> list[str]:
    return re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", md)


def render_paper(qmd: str | os.PathLike | None = None, output_dir: str | os.PathLike | None = None,
                 pdf: bool = True) -> dict[str, Path]:
    """Convert the paper without Quarto: resolve, then pandoc → HTML and Typst → PDF.

    Parameters
    ----------
    qmd : path, optional
        Default ``paper/index.qmd``.
    output_dir : path, optional
        Output root (default :func:`murk.paths.output_dir`); the paper goes
        to ``<root>/paper/``.
    pdf : bool
        Also compile a PDF through Typst: paper size (and margins, if given) from
        ``_quarto.yml`` (:func:`typst_options`), long tables breaking across pages
        with their header repeated, headings kept with what follows
        (:data:`TYPST_HEADER`).

    Returns
    -------
    dict with ``md``, ``html`` and (if ``pdf``) ``pdf`` paths.

    Raises
    ------
    FileNotFoundError
        A figure the paper cites does not exist.
    """
    import pypandoc

    qmd = Path(qmd) if qmd else paths.project_root() / "paper" / "index.qmd"
    root = paths.output_dir(output_dir)
    numbers = load_numbers(paths.numbers_file(root))
    resolved = resolve_qmd(qmd.read_text(encoding="utf-8"), numbers, qmd.parent, root)
    md = crossref(resolved)
    figs = _figure_paths(md)
    missing = [f for f in figs if not Path(f).is_file()]
    if missing:
        raise FileNotFoundError(f"figures cited by the paper are missing: {missing}; run the analyse stage")
    out = paths.paper_out_dir(root)
    out.mkdir(parents=True, exist_ok=True)
    md_path = out / "index.md"
    md_path.write_text(md, encoding="utf-8")
    bib = qmd.parent / "references.bib"
    common = ["--standalone", "--citeproc", f"--bibliography={bib}", f"--resource-path={qmd.parent}:{root}"]
    html = out / "index.html"
    pypandoc.convert_file(str(md_path), "html5", format="markdown", outputfile=str(html),
                          extra_args=[*common, "--embed-resources", "--mathml", "--toc",
                                      "--metadata=lang:en", f"--css={qmd.parent / 'paper.css'}"])
    result = {"md": md_path, "html": html}
    if pdf:
        import typst

        typ = out / "index.typ"
        # Typst resolves image paths relative to the .typ file and forbids leaving
        # its root: copy the cited figures (PDF versions) next to it.
        fig_dir = out / "figures"
        fig_dir.mkdir(exist_ok=True)
        md_typ = crossref(resolved, prefix_captions=False)
        for f in figs:
            src = Path(f)
            shutil.copy2(src, fig_dir / src.name)
            md_typ = md_typ.replace(f"]({f})", f"](figures/{src.name})")
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


def markdown_table(rows: list[Mapping[str, str]], columns: list[str] | None = None) -> str:
    """A pipe table (pandoc/Quarto Markdown) from a list of row dicts of strings."""
    if not rows:
        return "*(no rows)*\n"
    columns = columns or list(rows[0])
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(["---"] * len(columns)) + "|"]
    lines += ["| " + " | ".join(esc(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write_text_atomic(path: Path, text: str) -> Path:
    """Write a text file atomically (temporary sibling + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m murk.paper``: render with Quarto where installed, else convert.

    Quarto renders ``paper/index.qmd`` per ``_quarto.yml`` (HTML and Typst PDF)
    and the result is copied to ``<output root>/paper/``; without Quarto,
    :func:`render_paper` converts the same source with pandoc and Typst.
    """
    import argparse
    import subprocess

    ap = argparse.ArgumentParser(prog="python -m murk.paper", description=main.__doc__)
    ap.add_argument("--output-dir", default=None, help="output root (default: outputs/ or $MURK_OUTPUT_DIR)")
    ap.add_argument("--no-pdf", action="store_true", help="HTML only")
    ap.add_argument("--fallback", action="store_true", help="use pandoc + Typst even where Quarto is installed")
    args = ap.parse_args(argv)
    root = paths.output_dir(args.output_dir)
    quarto = shutil.which("quarto")
    if quarto and not args.fallback:
        env = {**os.environ, "MURK_OUTPUT_DIR": str(root)}
        subprocess.run([quarto, "render", "paper/index.qmd"], cwd=paths.project_root(), env=env, check=True)
        src = paths.project_root() / "outputs" / "paper" / "quarto"
        out = paths.paper_out_dir(root)
        out.mkdir(parents=True, exist_ok=True)
        for f in src.rglob("index.*"):
            shutil.copy2(f, out / f.name)
        print(f"rendered with Quarto: {out}")
        return 0
    res = render_paper(output_dir=root, pdf=not args.no_pdf)
    print("converted without Quarto (pandoc + Typst): " + ", ".join(str(p) for p in res.values()))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
