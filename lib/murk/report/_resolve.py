"""The paper's sources resolved: notebook cells by label, Quarto's embeds and includes, inline numbers.

Figures and tables are embedded from the executed notebooks under ``outputs/notebooks/`` by
cell label (``{{< embed ../outputs/notebooks/04_analyse.ipynb#fig-… >}}``, :func:`resolve_embeds`);
every number is an inline expression ```{python} N["key"]``` (:func:`resolve_qmd`). A numbers
file and executed notebooks of two analyses are refused before anything is written
(:func:`refuse_mixed_paper`).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
from pathlib import Path
from typing import Mapping

from murk import core
from murk.report._atomic import write_text_atomic
from murk.report._cells import (
    ANY_INLINE_RE,
    CELL_RE,
    EMBED_RE,
    INCLUDE_RE,
    INLINE_RE,
    _outputs,
    cell_options,
    notebook_cells,
    notebook_identity,
)
from murk.report._format import NOT_COMPUTED
from murk.report._markdown import markdown_table
from murk.report._numbers import load_numbers
from murk.report._spec_map import SPEC_COUNTERPARTS
from murk.report._view import view_name

__all__ = ["resolve_embeds", "EmbedError", "remake_words", "resolve_qmd", "MixedPaperError", "refuse_mixed_paper",
           "stamp_html"]


class MixedPaperError(ValueError):
    """The numbers file and the executed notebooks the paper embeds from are of different identities."""


class EmbedError(KeyError, ValueError):
    """A cell the paper embeds is absent from its executed notebook, failed there or has no output of its kind.

    A :class:`KeyError` (a label absent) and a :class:`ValueError` (a failed or
    empty cell); its ``str`` is its one-line message (no quotes), which names the
    notebook, the cell and the command that makes the notebook again
    (:func:`remake_words`). ``python -m murk.report.paper`` prints it and exits with 2.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def remake_words(nb_path: str | os.PathLike) -> str:
    """The command that makes the executed stage notebook ``nb_path`` again, for its output root.

    Parameters
    ----------
    nb_path : path
        ``<output root>/notebooks/<stage>.ipynb`` (``02_depth``, ``04_analyse``).

    Returns
    -------
    str
        The user's command again with ``--forcerun <stage>``, e.g. ``"make demo
        ARGS='--forcerun analyse'"`` (with ``--config output_dir=<root>`` for
        another root than ``outputs/``; Snakemake runs the
        stage again, which writes the notebook when it runs to its end, and what
        follows it), and for the analyse notebook also docs/stages.md's by-hand
        papermill command.
    """
    nb = Path(nb_path)
    root = nb.parent.parent if nb.parent.name == "notebooks" else core.output_dir()
    stage = {"02_depth": "depth", "04_analyse": "analyse", "05_beyond": "beyond"}.get(nb.stem)
    if stage is None:
        return f"run the stage notebooks/{nb.stem}.py again into {root} (make demo)"
    od = "" if root.absolute() == core.output_dir().absolute() else f"--config output_dir={root} "
    words = (f"run the command that made this output root again with --forcerun {stage} added, e.g. "
             f"make demo ARGS='{od}--forcerun {stage}' with your other --config settings (Snakemake runs the "
             f"{stage} stage again, which rewrites {nb}, and what follows it)")
    if stage in ("analyse", "beyond"):
        words += f", or by hand: {_analyse_command(root, nb, None)}"
    return words


def _analyse_command(root: Path, nb: Path, models: str | None) -> str:
    """The by-hand analyse (or beyond) command of docs/stages.md that writes ``nb`` for the output root ``root``."""
    def shown(p: Path) -> str:
        try:
            return p.relative_to(Path.cwd()).as_posix()
        except ValueError:
            return p.as_posix()

    y = f" -y {shlex.quote(f'models: {models}')}" if models else ""
    od = "" if root == core.output_dir() else f" -p output_dir {shlex.quote(shown(root))}"
    stage = "05_beyond" if nb.stem.startswith("05_beyond") else "04_analyse"
    y = "" if stage == "05_beyond" else y   # the beyond notebook takes the study's models
    return f"python -m murk.pipeline.execute notebooks/{stage}.py {shlex.quote(shown(nb))}{y}{od}"


def refuse_mixed_paper(output_dir: str | os.PathLike | None = None) -> dict[str, str]:
    """Refuse, before anything is written, a paper whose text and embeds would come from two analyses.

    The paper takes its numbers and sentences from ``paper_numbers.json`` and its
    tables and figures from the executed ``notebooks/04_analyse.ipynb`` (and the scene
    figure from ``notebooks/02_depth.ipynb``). The analyse notebook writes its analysis
    identity (:func:`murk.pipeline.analysis_id`) into both; the depth notebook records
    the run identity (:func:`murk.pipeline.run_id`) that the numbers file records too.

    Parameters
    ----------
    output_dir : path, optional
        The output root (default :func:`murk.core.output_dir`).

    Returns
    -------
    dict
        ``run_id`` and ``analysis_id`` of the paper (empty strings where the numbers
        file records none and no executed notebook contradicts it; ``{}`` without a
        numbers file, which :func:`load_numbers` then reports).

    Raises
    ------
    MixedPaperError
        (a ValueError) If ``04_analyse.ipynb`` exists and its analysis identity is not
        the numbers file's (or either records none), the same for ``05_beyond.ipynb``, or
        ``02_depth.ipynb`` exists and records another run identity than the numbers file.
        The one message names both files, both identities and the fix: re-run that stage so
        that it writes both (docs/stages.md's by-hand command, python -m murk.pipeline.execute,
        which writes ``outputs/notebooks/04_analyse.ipynb``), or remove the two numbers
        fragments (``analysis/numbers-study.json``, ``numbers-beyond.json``) and run ``make
        paper`` (Snakemake then re-runs the analysis stages).
    """
    root = core.output_dir(output_dir)
    numbers_path = core.numbers_file(root)
    if not numbers_path.is_file():
        return {}
    numbers = load_numbers(numbers_path)
    got = {"run_id": str(numbers.get("run_id", "")), "analysis_id": str(numbers.get("analysis_id", ""))}
    nb_dir = core.notebooks_out_dir(root)

    def said(x: str) -> str:
        return x or "none recorded (written by an older murk)"

    for nb in (nb_dir / f"{stage}.ipynb" for stage in core.NUMBERS_FRAGMENTS):   # the study's, then beyond the spec
        if not nb.is_file():
            continue
        which = "analyse" if nb.stem == "04_analyse" else "beyond"
        ident = notebook_identity(nb) or {}
        have = str(ident.get("analysis_id") or "")
        if not (have and got["analysis_id"] and have == got["analysis_id"]):
            models = numbers.get("analysis.models")
            try:
                import yaml

                models_yaml = (yaml.safe_dump(json.loads(models), default_flow_style=True, width=10 ** 6).strip()
                               if models else None)
            except (ValueError, TypeError):
                models_yaml = None
            nb_models = ident.get("models")
            nb_note = f", models {json.dumps(nb_models)}" if nb_models else ""
            num_note = f", models {models}" if models else ""
            make_paper = "make paper" if root == core.output_dir() else f"make paper ARGS='--config output_dir={root}'"
            raise MixedPaperError(
                f"make paper (python -m murk.report.paper) refuses to render the paper of {root}: its numbers file and the "
                f"executed {which} notebook it embeds tables and figures from come from different analyses (the "
                f"text would say one thing and the tables and figures another):\n"
                f"  {numbers_path}: analysis identity {said(got['analysis_id'])}{num_note}\n"
                f"  {nb}: analysis identity {said(have)}{nb_note}\n"
                f"Nothing was written. Fix: re-run the {which} stage so that it writes both, one of:\n"
                f"  (1) by hand, as docs/stages.md shows, writing the executed notebook to {nb}:\n"
                f"      {_analyse_command(root, nb, models_yaml)}\n"
                f"  (2) rm {' '.join(str(core.numbers_fragment(s_, root)) for s_ in core.NUMBERS_FRAGMENTS)}, then {make_paper} "
                f"(Snakemake re-runs the analyse and beyond stages with the run settings' models).")
    depth_nb = nb_dir / "02_depth.ipynb"
    if depth_nb.is_file() and got["run_id"]:
        have = str((notebook_identity(depth_nb) or {}).get("run_id") or "")
        if have != got["run_id"]:
            raise MixedPaperError(
                f"make paper (python -m murk.report.paper) refuses to render the paper of {root}: the executed depth "
                f"notebook it embeds the scene figure from is of another run than its numbers file:\n"
                f"  {numbers_path}: run identity {got['run_id']}\n"
                f"  {depth_nb}: run identity {said(have)}\n"
                f"Nothing was written. Fix: run the depth and analyse stages of this output root again (make demo; "
                f"by hand notebooks/02_depth.py, then {_analyse_command(root, nb, None)}).")
    return got


def stamp_html(path: str | os.PathLike, ids: Mapping[str, str]) -> Path:
    """Write the identities into a rendered HTML page's head: ``<meta name="murk-run-id" content="r-…">``.

    Parameters
    ----------
    path : path
        The HTML file (rewritten atomically).
    ids : mapping
        ``run_id``, ``analysis_id`` (:func:`refuse_mixed_paper`); empty values are left out.

    Returns
    -------
    Path
        ``path``.
    """
    import html as _html

    path = Path(path)
    tags = "".join(f'<meta name="murk-{k.replace("_", "-")}" content="{_html.escape(str(v), quote=True)}">\n'
                   for k, v in ids.items() if v)
    if not tags:
        return path
    text = path.read_text(encoding="utf-8")
    text = text.replace("</head>", tags + "</head>", 1) if "</head>" in text else tags + text
    return write_text_atomic(path, text)


def _embed(nb_path: Path, label: str, cell, fig_dir: Path, link: str) -> str:
    """Markdown for one embedded cell: its figure or table, caption and label, and a link to the notebook."""
    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    if errors:
        raise EmbedError(f"cell {label!r} of {nb_path} (embedded by the paper) failed "
                         f"({errors[0].get('ename')}); fix: {remake_words(nb_path)}")
    opts = cell_options(cell.source)
    if label.startswith("fig-"):
        pngs = _outputs(cell, "image/png")
        if not pngs:
            raise EmbedError(f"cell {label!r} of {nb_path} (embedded by the paper) has no image output; "
                             f"fix: {remake_words(nb_path)}")
        fig_dir.mkdir(parents=True, exist_ok=True)
        f = fig_dir / f"{nb_path.stem}-{label}.png"
        data = pngs[0] if isinstance(pngs[0], str) else "".join(pngs[0])
        f.write_bytes(base64.b64decode(data))
        body = f"![{opts.get('fig-cap', '')}]({f.as_posix()}){{#{label}}}"
    else:
        mds = ["".join(m) if isinstance(m, list) else str(m) for m in _outputs(cell, "text/markdown")]
        if not mds:
            raise EmbedError(f"cell {label!r} of {nb_path} (embedded by the paper) has no Markdown output; "
                             f"fix: {remake_words(nb_path)}")
        body = "\n\n".join(m.strip() for m in mds)
        if label.startswith("tbl-"):
            body = f": {opts.get('tbl-cap', '')} {{#{label}}}\n\n{body}"
    return (f"{body}\n\n::: {{.embed-source}}\nSource: [{nb_path.name}, cell `{label}`]({link})\n:::\n")


def _placeholder(label: str, fig_dir: Path, why: str) -> str:
    """A labelled stand-in for an embed whose notebook is missing: the paper says so instead of failing."""
    text = f"{NOT_COMPUTED}: {why}"
    # the placeholder's caption names its spec counterpart too (SPEC_COUNTERPARTS)
    cap = text + (f" ({SPEC_COUNTERPARTS[label]})" if label in SPEC_COUNTERPARTS else "")
    if label.startswith("fig-"):
        fig_dir.mkdir(parents=True, exist_ok=True)
        f = fig_dir / f"missing-{label}.svg"
        esc = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        f.write_text(f'<svg xmlns="http://www.w3.org/2000/svg" width="640" height="60" viewBox="0 0 640 60">'
                     f'<rect width="640" height="60" fill="#f4f4f4" stroke="#999"/>'
                     f'<text x="320" y="35" font-family="sans-serif" font-size="14" text-anchor="middle">{esc}</text>'
                     f'</svg>', encoding="utf-8")
        return f"![{cap}]({f.as_posix()}){{#{label}}}\n"
    body = markdown_table([{"note": text}])
    return f": {cap} {{#{label}}}\n\n{body}" if label.startswith("tbl-") else f"*{text}*\n"


def resolve_embeds(text: str, redirect, fig_dir: str | os.PathLike, link_from: str | os.PathLike,
                   missing: list[str] | None = None) -> str:
    """Replace Quarto's ``{{< embed nb.ipynb#label >}}`` by the cell's output, from the executed notebook.

    An ``image/png`` output of a ``fig-`` cell becomes a figure file in
    ``fig_dir`` with the cell's ``fig-cap`` and label; the Markdown output of a
    ``tbl-`` cell becomes a table with its ``tbl-cap`` and label; each is
    followed by a line "Source: 04_analyse.ipynb, cell `label`" linking to the
    cell in the notebook's rendered view (``04_analyse.html#label``, beside the
    HTML in ``link_from``: :func:`notebook_view`, written by :func:`render_paper`),
    as Quarto links embedded output to its source notebook.

    A notebook that does not exist (its stage did not run for this output root)
    gives a labelled placeholder saying "not computed in this run"; its
    shortcode is appended to ``missing`` when a list is given.

    Parameters
    ----------
    redirect : callable
        Path of the shortcode (as written in the .qmd) -> path on disk.

    Raises
    ------
    EmbedError
        (a KeyError) A label is not in its (existing) notebook; (a ValueError) the
        cell failed or has no output of its kind. One line naming the notebook, the
        cell and the command that makes the notebook again (:func:`remake_words`).
    """
    books: dict[Path, dict] = {}

    def one(m):
        nb_path = Path(redirect(m.group(1)))
        label = m.group(2)
        if not nb_path.is_file():
            if missing is not None:
                missing.append(f"{m.group(1)}#{label}")
            return _placeholder(label, Path(fig_dir), f"{nb_path.name} (its stage did not run)")
        if nb_path not in books:
            books[nb_path] = notebook_cells(nb_path)
        cells = books[nb_path]
        if label not in cells:
            raise EmbedError(f"{nb_path} has no cell labelled {label!r} (embedded by the paper): it is not the "
                             f"executed notebook of this murk's stage (written by another version or by hand), or "
                             f"the label is wrong; fix: {remake_words(nb_path)}; or fix the label in "
                             f"notebooks/{nb_path.stem}.py")
        return _embed(nb_path, label, cells[label], Path(fig_dir), f"{view_name(nb_path)}#{label}")

    return EMBED_RE.sub(one, text)


def resolve_qmd(text: str, numbers: Mapping[str, str], base_dir: str | os.PathLike,
                output_dir: str | os.PathLike | None = None, fig_dir: str | os.PathLike | None = None,
                missing: list[str] | None = None, cite=None) -> str:
    """Turn the paper's Quarto source into plain Markdown.

    Embed shortcodes are replaced by the cells' outputs (:func:`resolve_embeds`;
    figures written to ``fig_dir``, default ``<output root>/paper/embed``), include
    shortcodes by the included file, inline ``N["key"]`` expressions by their
    values, and Python cells (the setup cell, which only loads ``N``) are
    dropped. Paths starting with ``../outputs/`` are redirected to
    ``output_dir`` when given. Embeds from a notebook that does not exist
    become "not computed in this run" placeholders, listed in ``missing``.
    ``cite``, a callable ``(key, value) -> markdown``, writes each inline value
    (:func:`render_paper` links it to its cell); default the value itself.

    Raises
    ------
    KeyError
        An inline expression names a key missing from the numbers file, or an
        embed a label missing from its notebook.
    ValueError
        An inline expression other than ``N["key"]`` (the fallback evaluates
        no code), a missing include file, or an embedded cell that failed.
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

    paper_dir = core.paper_out_dir(out_root) if out_root is not None else base
    text = CELL_RE.sub("", text)
    if EMBED_RE.search(text):
        text = resolve_embeds(text, redirect, Path(fig_dir) if fig_dir else paper_dir / "embed", paper_dir, missing)
    text = INCLUDE_RE.sub(include, text)
    absent = [k for k in INLINE_RE.findall(text) if k not in numbers]
    if absent:
        raise KeyError(f"paper numbers missing from the numbers file: {sorted(set(absent))}")
    text = INLINE_RE.sub(lambda m: cite(m.group(1), numbers[m.group(1)]) if cite else numbers[m.group(1)], text)
    other = ANY_INLINE_RE.findall(text)
    if other:
        raise ValueError(f"inline expressions other than N[\"key\"] cannot be resolved without Quarto: {other[:3]}")
    if out_root is not None:
        text = re.sub(r"\]\(\.\./outputs/", "](" + out_root.as_posix().rstrip("/") + "/", text)
    return text

