"""Figure files: written whole, with the run's identities in their metadata (:func:`set_identity`, :func:`save`),
the pipeline-check mark of random-weight checkpoints, and the placeholder of a figure this run did not compute.
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["save", "set_identity", "PIPELINE_CHECK_MARK", "stamp_pipeline_check", "placeholder"]


#: the text of the pipeline-check mark stamped into figures of random-weight checkpoints
PIPELINE_CHECK_MARK = "PIPELINE CHECK · random-weight checkpoints · not a result about any VLM"


def stamp_pipeline_check(fig, text: str = PIPELINE_CHECK_MARK):
    """Put the visible pipeline-check mark on a figure: a red banner above it and a faint
    diagonal watermark across it, so that a cropped copy keeps it too. Returns ``fig``."""
    fig.text(0.5, 1.0, text, ha="center", va="bottom", fontsize=9, fontweight="bold", color="#B2182B",
             bbox=dict(boxstyle="round,pad=0.3", facecolor="#FDECEA", edgecolor="#B2182B", lw=1))
    fig.text(0.5, 0.5, "PIPELINE CHECK", ha="center", va="center", rotation=25, fontsize=36,
             fontweight="bold", color="#B2182B", alpha=0.10, zorder=0)
    return fig


#: the identities written into every figure file's metadata by :func:`save` (set by :func:`set_identity`)
_IDENTITY: dict[str, str] = {}
#: PNG text keys of the identities (``run_id`` -> ``murk-run-id``)
_PNG_KEY = "murk-{}"


def set_identity(**ids: str) -> dict[str, str]:
    """Set the identities that :func:`save` writes into the metadata of every figure file from now on.

    Parameters
    ----------
    **ids : str
        E.g. ``run_id="r-…"`` (:func:`murk.pipeline.run_id`) and ``analysis_id="a-…"``
        (:func:`murk.pipeline.analysis_id`); a stage notebook sets them once, before
        its first figure. No argument clears them.

    Returns
    -------
    dict
        The identities now set.
    """
    _IDENTITY.clear()
    _IDENTITY.update({str(k): str(v) for k, v in ids.items()})
    return dict(_IDENTITY)


def _metadata(ext: str, ids: dict[str, str]) -> dict[str, str]:
    if not ids:
        return {}
    if ext == "png":  # PNG text chunks, one per identity: murk-run-id, murk-analysis-id
        return {_PNG_KEY.format(k.replace("_", "-")): v for k, v in ids.items()}
    text = "murk " + "; ".join(f"{k} {v}" for k, v in ids.items())
    return {"Subject": text, "Keywords": text}  # PDF: the document information's standard keys


def _file_identity(path: str | Path) -> dict[str, str]:
    """The identities recorded in a PNG figure file's metadata by :func:`save`.

    Parameters
    ----------
    path : path
        A PNG written by :func:`save` (or the same image embedded from an executed notebook).

    Returns
    -------
    dict
        ``{"run_id": "r-…", "analysis_id": "a-…"}`` as recorded (empty when none is).
    """
    from PIL import Image

    with Image.open(path) as im:
        text = dict(getattr(im, "text", {}) or im.info)
    prefix = _PNG_KEY.format("")
    return {k[len(prefix):].replace("-", "_"): str(v) for k, v in text.items() if str(k).startswith(prefix)}


def save(fig, folder: str | Path, name: str, pipeline_check: bool = False,
         identity: dict[str, str] | None = None, pdf: bool = True) -> list[Path]:
    """Save ``fig`` as ``<name>.png`` (200 dpi) and, unless ``pdf`` is false, ``<name>.pdf``, then close it.

    Parameters
    ----------
    fig : matplotlib Figure
    folder : path
        Created if missing.
    name : str
        File name without extension.
    pipeline_check : bool
        Stamp :data:`PIPELINE_CHECK_MARK` into the image (results of tiny
        random-weight checkpoints, :func:`stamp_pipeline_check`).
    identity : dict of str, optional
        The run's (and analysis') identities, written into each file's metadata:
        PNG text chunks ``murk-run-id``, ``murk-analysis-id`` (:func:`_file_identity`
        reads them), the PDF's ``Subject`` and ``Keywords``. Default: those set by
        :func:`set_identity` (none unless set).
    pdf : bool
        Also write the figure as a vector PDF, for a manuscript or slides (the paper embeds the PNG; the
        analysis notebooks pass the run setting ``figure_pdf``, :data:`murk.core.SCHEMA`).

    Returns
    -------
    list of Path
        ``[png, pdf]``, or ``[png]`` when ``pdf`` is false.

    Raises
    ------
    murk.core.DiskFullError
        The disk is full: each figure file is written whole (a temporary file,
        renamed), so the previous figure is kept.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if pipeline_check:
        stamp_pipeline_check(fig)
    from murk import core

    ids = dict(_IDENTITY if identity is None else identity)
    out = []
    try:
        for ext in ("png", "pdf") if pdf else ("png",):
            p = folder / f"{name}.{ext}"
            tmp = folder / f".{name}.{ext}.tmp"  # written whole, then renamed: a full disk leaves the old figure
            with core.guard(p, cleanup=[tmp]):
                fig.savefig(tmp, format=ext, dpi=200 if ext == "png" else None, bbox_inches="tight",
                            metadata=_metadata(ext, ids) or None)
            os.replace(tmp, p)
            out.append(p)
    finally:
        plt.close(fig)
    return out


def placeholder(text: str, width_in: float = 5.0):
    """A small figure that only states ``text`` (e.g. "not computed in this run: …")."""
    fig, ax = plt.subplots(figsize=(width_in, 1.0))
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=10, wrap=True)
    return fig

