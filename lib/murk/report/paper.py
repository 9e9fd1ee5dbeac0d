"""``python -m murk.report.paper``: the paper rendered with Quarto where installed, else converted without it.

Every number in ``paper/index.qmd`` is an inline expression
```{python} N["key"]``` reading ``outputs/paper_numbers.json`` (key -> formatted
string, :mod:`murk.report._numbers`; every number formatted by :mod:`murk.report._format`).
Figures and tables are embedded from the executed notebooks under
``outputs/notebooks/`` by cell label, with Quarto's
``{{< embed ../outputs/notebooks/04_analyse.ipynb#fig-… >}}`` shortcode (:mod:`murk.report._resolve`). Where
Quarto is installed it renders the paper; where it is not,
:func:`render_paper` (:mod:`murk.report._render`) resolves the same inline expressions, embeds (from the
notebooks' cell outputs) and includes, then converts with pandoc
(``pypandoc-binary``) to HTML and, through Typst (PyPI ``typst``), to PDF.
"""

from __future__ import annotations

import os
import shutil

from murk import core
from murk.report._render import render_paper
from murk.report._resolve import EmbedError, MixedPaperError, refuse_mixed_paper, stamp_html

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """``python -m murk.report.paper``: render with Quarto where installed, else convert.

    Quarto renders ``paper/index.qmd`` per ``_quarto.yml`` (HTML and Typst PDF)
    and the result is copied to ``<output root>/paper/``; without Quarto,
    :func:`render_paper` converts the same source with pandoc and Typst. First, a
    numbers file and executed notebooks of different identities are refused
    (:func:`refuse_mixed_paper`): the message goes to stderr, nothing is written and
    the exit status is 2; so is a paper folder that cannot be written
    (:func:`murk.core.unwritable`: read-only) and a cell the paper embeds that is
    absent or failed (:class:`EmbedError`); and so is a root that another live process writes (a Snakemake run of
    another checkout, a stage or paper run by hand: :func:`murk.core.hold_root_writer`; a job of the run that
    holds the root writes as part of it). The rendered HTML carries the run and analysis identities
    in ``<meta name="murk-run-id">`` and ``<meta name="murk-analysis-id">``.
    """
    import argparse
    import sys

    # nbformat (the executed notebooks the paper embeds from) imports jsonschema, whose optional IRI format check
    # (rfc3987-syntax, installed with JupyterLab) builds a grammar on import: 1.2 s of CPU of each render's 4.5
    # (2026-12-05). The notebook schema has no "format" keyword, so the check is never used: this process does
    # without it, as murk.pipeline.execute does (a module already imported is kept)
    sys.modules.setdefault("rfc3987_syntax", None)
    ap = argparse.ArgumentParser(prog="python -m murk.report.paper", description=main.__doc__)
    ap.add_argument("--output-dir", default=None, help="output root (default: outputs/ or $MURK_OUTPUT_DIR)")
    ap.add_argument("--no-pdf", action="store_true", help="HTML only")
    ap.add_argument("--fallback", action="store_true", help="use pandoc + Typst even where Quarto is installed")
    args = ap.parse_args(argv)
    root = core.output_dir(args.output_dir)
    words = "python -m murk.report.paper"
    command = " ".join([words, *(sys.argv[1:] if argv is None else argv)])
    held = []

    def hold() -> None:  # right before the first write
        held.append(core.hold_root_writer(root, kind="murk.report.paper", command=command, words=words))

    try:  # one writer per root: refused while another process writes it, unless this is a job of that run
        core.refuse_root_writer(root, words=words)  # before the checks below (it creates nothing)
        return _paper(args, root, hold)
    except core.RootLocked as e:
        print(e, file=sys.stderr)
        return 2
    finally:
        if "taken" in held:  # a paper by hand holds the root while it writes, not for its process's lifetime
            core.release_root_writer(root)


def _paper(args, root, hold) -> int:
    """The paper of ``root`` (``main``'s work; ``hold()`` takes the root's writer lock before anything is written)."""
    import subprocess
    import sys

    try:
        ids = refuse_mixed_paper(root)   # the numbers and the embeds of one analysis, or nothing is written
    except MixedPaperError as e:
        print(f"murk: {e}", file=sys.stderr)
        return 2
    blocked = core.unwritable(core.paper_out_dir(root))  # before pandoc, whose own error is a Haskell backtrace
    if blocked is not None:
        print(f"murk: make paper (python -m murk.report.paper) cannot write the paper of {root}: {blocked[0]} is "
              f"{blocked[1]}; nothing was written (the numbers, tables, figures and cube are kept); fix: make "
              f"{blocked[0]} writable, then run the same command again", file=sys.stderr)
        return 2
    hold()
    quarto = shutil.which("quarto")
    if quarto and not args.fallback:
        env = {**os.environ, "MURK_OUTPUT_DIR": str(root)}
        subprocess.run([quarto, "render", "paper/index.qmd"], cwd=core.project_root(), env=env, check=True)
        src = core.project_root() / "outputs" / "paper" / "quarto"
        out = core.paper_out_dir(root)
        out.mkdir(parents=True, exist_ok=True)
        for f in src.rglob("index.*"):
            shutil.copy2(f, out / f.name)
        if (out / "index.html").is_file():
            stamp_html(out / "index.html", ids)
        print(f"rendered with Quarto: {out}")
        return 0
    try:
        with core.guard(core.paper_out_dir(root), "the numbers, tables, figures and the cube are kept; the "
                                                       "paper's files are each written whole or not at all",
                            root=root):
            res = render_paper(output_dir=root, pdf=not args.no_pdf)
    except core.DiskFullError as e:  # one line instead of pandoc's or Typst's traceback
        print(e, file=sys.stderr)
        return 1
    except EmbedError as e:  # a cell the paper embeds is absent or failed: the command that makes it again
        print(f"murk: make paper (python -m murk.report.paper) cannot render the paper of {root}: {e}", file=sys.stderr)
        return 2
    print("converted without Quarto (pandoc + Typst): "
          + ", ".join(str(p) for k, p in res.items() if k not in ("missing", "views"))
          + "".join(f", {p}" for p in res["views"].values()))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
