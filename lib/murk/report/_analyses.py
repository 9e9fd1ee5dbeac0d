"""The two analysis notebooks and what each writes: its tables and figures, its numbers fragment, and the one
numbers file the paper reads, merged from the fragments.

The analysis is split at the spec's boundary: ``notebooks/04_analyse.py`` is the study's analysis (the cube, RQ1–RQ4,
the controls, the verification task, the settings and prompts tables, the abstract and discussion), and
``notebooks/05_beyond.py`` the analysis beyond the spec (the visibility monitor and its gate, recalibration by
visibility, risk–coverage), read from the cube and scores the first writes. Each is its own Snakemake job and writes
its own numbers fragment (``analysis/numbers-study.json``, ``analysis/numbers-beyond.json``, each with its
provenance beside it); :func:`merge_numbers` writes their union as ``paper_numbers.json``, the file the paper reads,
keyed as before the split.

Which notebook writes a table is read from the notebooks themselves (the notebook that holds its ``#| label:``), so
that the Snakefile's outputs are derived, not hand-listed.
"""

from __future__ import annotations

import os
from pathlib import Path
from murk import core

#: the analysis notebooks -> their numbers fragment (defined with the output root's other paths, in murk.core)
NUMBERS_FRAGMENTS = core.NUMBERS_FRAGMENTS

#: the cell label under which :func:`merge_numbers` records the cited keys no fragment holds ("not computed")
FILLED_LABEL = "num-numbers-file"

#: the figure files (``figures/<name>.png|pdf``) each analysis notebook writes: the one list its ``show`` checks a
#: name against and the Snakefile declares as the job's outputs
ANALYSIS_FIGURES: dict[str, tuple[str, ...]] = {
    "04_analyse": tuple(f"{name}_{task}" for name in ("accuracy", "confidence", "verbal", "abstain", "reliability",
                                                      "abstain2", "signals") for task in ("t2", "t3"))
    + ("blind_spot", "nominal_t2", "examples_t2"),
    "05_beyond": ("monitor_vhat", "reliability_recal", "risk_coverage"),
}


def _stage(stage: str) -> str:
    if stage not in NUMBERS_FRAGMENTS:
        raise ValueError(f"{stage!r} is not an analysis notebook: one of {', '.join(NUMBERS_FRAGMENTS)}")
    return stage


def notebook_labels(stage: str, notebooks_dir: str | os.PathLike | None = None) -> tuple[str, ...]:
    """The cell labels an analysis notebook's source holds (its ``#| label: …`` lines), in order.

    Parameters
    ----------
    stage : str
        ``"04_analyse"`` or ``"05_beyond"`` (:data:`NUMBERS_FRAGMENTS`).
    notebooks_dir : path, optional
        Where the notebooks' sources are (default ``<project>/notebooks``).

    Returns
    -------
    tuple of str
        E.g. ``("num-cube", "murk-identity", ..., "tbl-models", ...)``.

    Raises
    ------
    ValueError
        If ``stage`` is not an analysis notebook.
    FileNotFoundError
        If its source is missing.
    """
    folder = Path(notebooks_dir) if notebooks_dir is not None else core.project_root() / "notebooks"
    text = (folder / f"{_stage(stage)}.py").read_text(encoding="utf-8")
    return tuple(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("#| label:"))


def analysis_tables(stage: str, notebooks_dir: str | os.PathLike | None = None) -> tuple[str, ...]:
    """The tables (``analysis/<label>.md``) one analysis notebook writes: the labels of
    :data:`murk.report.ANALYSIS_TABLES` its source holds, in that order.

    Parameters
    ----------
    stage, notebooks_dir
        As :func:`notebook_labels`.

    Returns
    -------
    tuple of str
        ``tbl-…`` labels; the two notebooks' tuples are disjoint and together make ``ANALYSIS_TABLES``.
    """
    from murk.report._spec_map import ANALYSIS_TABLES

    held = set(notebook_labels(stage, notebooks_dir))
    return tuple(t for t in ANALYSIS_TABLES if t in held)


def analysis_figures(stage: str) -> tuple[str, ...]:
    """The figure names (``figures/<name>.png``, and ``.pdf`` with the run setting ``figure_pdf``) one analysis
    notebook writes (:data:`ANALYSIS_FIGURES`).

    >>> analysis_figures("05_beyond")
    ('monitor_vhat', 'reliability_recal', 'risk_coverage')
    """
    return ANALYSIS_FIGURES[_stage(stage)]


def fragment_file(stage: str, root: str | os.PathLike | None = None) -> Path:
    """The numbers fragment an analysis notebook writes: ``<root>/analysis/numbers-study.json`` (``04_analyse``)
    or ``numbers-beyond.json`` (``05_beyond``); its provenance is beside it (:func:`murk.report.provenance_file`).

    Parameters
    ----------
    stage : str
        ``"04_analyse"`` or ``"05_beyond"``.
    root : path, optional
        The output root (default :func:`murk.core.output_dir`).

    Raises
    ------
    ValueError
        If ``stage`` is not an analysis notebook.
    """
    return core.numbers_fragment(stage, root)


def merge_numbers(root: str | os.PathLike | None = None, qmd: str | os.PathLike | None = None) -> Path:
    """Write the numbers file the paper reads, ``<root>/paper_numbers.json``, as the union of the fragments.

    Each analysis notebook calls it after writing its fragment, so that the numbers file is current whichever of
    them ran last. A key in both fragments (the identities) takes the study's value. A fragment of another analysis
    than the study's (its ``analysis_id`` differs: written before the study ran again) is left out, and its keys
    with it. Every key the paper cites that no fragment holds is recorded as "n/a (not computed in this run)"
    (:meth:`murk.report.Numbers.fill_missing`, cell :data:`FILLED_LABEL`), so the paper says so instead of failing.
    Written atomically with its provenance (:func:`murk.report.write_numbers`).

    Parameters
    ----------
    root : path, optional
        The output root (default :func:`murk.core.output_dir`).
    qmd : path, optional
        The paper source whose cited keys are filled (default ``paper/index.qmd``; absent: none are).

    Returns
    -------
    Path
        The numbers file.

    Raises
    ------
    FileNotFoundError
        If no fragment exists (run the analyse stage first).
    """
    from murk.report._numbers import Numbers, cited_keys, load_numbers, load_provenance

    root = core.output_dir(root)
    found = {s: fragment_file(s, root) for s in NUMBERS_FRAGMENTS if fragment_file(s, root).is_file()}
    if not found:
        raise FileNotFoundError(f"no numbers fragment under {core.analysis_dir(root)}: run the analyse stage "
                                f"(notebooks/04_analyse.py) first")
    study = load_numbers(found[next(iter(NUMBERS_FRAGMENTS))]) if next(iter(NUMBERS_FRAGMENTS)) in found else {}
    merged = Numbers(core.numbers_file(root), cell=FILLED_LABEL)
    for stage in reversed(list(found)):   # the study's last: its identities win
        frag = load_numbers(found[stage])
        if study and frag.get("analysis_id") != study.get("analysis_id"):
            print(f"murk: {found[stage]} is of another analysis ({frag.get('analysis_id')}) than the study's "
                  f"({study.get('analysis_id')}): left out of {merged.path}; run notebooks/{stage}.py again")
            continue
        try:
            prov = load_provenance(found[stage])
        except FileNotFoundError:
            prov = {}
        dict.update(merged, frag)
        for k in frag:
            if k in prov:
                merged.provenance[k] = prov[k]
            else:
                merged.provenance.pop(k, None)
    qmd = Path(qmd) if qmd is not None else core.project_root() / "paper" / "index.qmd"
    if qmd.is_file():
        merged.fill_missing(cited_keys(qmd.read_text(encoding="utf-8")))
    return merged.save()



class AnalysisOutputs:
    """Where one analysis notebook keeps the figures and tables it declares, and how a cell shows them: the file
    written is what the cell displays and what the paper embeds.

    Parameters
    ----------
    stage : str
        ``"04_analyse"`` or ``"05_beyond"``.
    fig_dir, table_dir : path
        The output root's ``figures/`` and ``analysis/`` folders.
    pipeline_check : bool
        Stamp the pipeline-check mark into every figure (results of random-weight checkpoints); a notebook sets it
        once its cube is read.
    pdf : bool
        Also write each figure as ``figures/<name>.pdf`` (the run setting ``figure_pdf``; the PNG is always
        written: it is what the cell displays and the paper embeds).

    Raises
    ------
    ValueError
        ``stage`` is not an analysis notebook.
    """

    def __init__(self, stage: str, fig_dir: str | os.PathLike, table_dir: str | os.PathLike,
                 pipeline_check: bool = False, pdf: bool = True) -> None:
        self.stage, self.fig_dir, self.table_dir = _stage(stage), Path(fig_dir), Path(table_dir)
        self.pipeline_check, self.pdf = pipeline_check, bool(pdf)

    def figure(self, fig, name: str, pipeline_check: bool | None = None) -> None:
        """Save ``fig`` as ``figures/<name>.png`` (and ``.pdf`` where :attr:`pdf`; :func:`murk.report.save`) and
        display the PNG.

        Raises
        ------
        ValueError
            ``name`` is not one of the notebook's figures (:func:`analysis_figures`); nothing is written.
        """
        if name not in analysis_figures(self.stage):
            raise ValueError(f"figure {name} is not in murk.report.ANALYSIS_FIGURES['{self.stage}']: add it there")
        from IPython.display import Image, display

        from murk.report._figure_files import save

        png = save(fig, self.fig_dir, name, pipeline_check=self.pipeline_check if pipeline_check is None
                   else pipeline_check, pdf=self.pdf)[0]
        display(Image(filename=str(png)))

    def table(self, md: str, name: str) -> None:
        """Keep a Markdown table as ``analysis/tbl-<name>.md`` (atomic) and display it.

        Raises
        ------
        ValueError
            ``tbl-<name>`` is not a table of the notebook (:func:`analysis_tables`: the list the Snakefile
            declares); nothing is written.
        """
        if f"tbl-{name}" not in analysis_tables(self.stage):
            raise ValueError(f"table tbl-{name} is not a table of notebooks/{self.stage}.py: label its cell tbl-{name} "
                             f"and add it to murk.report.SPEC_COUNTERPARTS")
        from IPython.display import Markdown, display

        from murk.report._atomic import write_text_atomic

        write_text_atomic(self.table_dir / f"tbl-{name}.md", md)
        display(Markdown(md))
