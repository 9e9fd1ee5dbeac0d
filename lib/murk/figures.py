"""Figures of the study, written as files (PNG for HTML, PDF for print).

Conventions (spec Figs. 3-8): log-V axis in metres running from clear (left)
to murky (right), the clean value drawn at the left edge, bootstrap bands,
chance (dashed) and blank-image (dotted) floors, both physical arms side by
side, one colour per model fixed across all figures (Paul Tol's colour-blind
safe "muted" scheme).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

__all__ = ["PALETTE", "model_colors", "short_name", "plot_signal_vs_visibility", "save"]

#: Paul Tol, "muted" qualitative scheme (colour-blind safe, nine colours)
PALETTE = ("#332288", "#CC6677", "#117733", "#DDCC77", "#88CCEE", "#882255", "#44AA99", "#999933", "#AA4499")
#: fixed order of known models, so that a model keeps its colour in every figure and run
KNOWN_MODELS = (
    "Qwen/Qwen3-VL-2B-Instruct", "OpenGVLab/InternVL3_5-2B-HF", "HuggingFaceTB/SmolVLM2-2.2B-Instruct",
    "google/gemma-4-E2B-it", "Qwen/Qwen3-VL-4B-Instruct", "HuggingFaceTB/SmolVLM-256M-Instruct",
    "murk-tiny/smolvlm", "murk-tiny/qwen3vl",
)
ARM_TITLES = {"fog": "fog (V, Koschmieder)", "underwater": r"underwater ($V_\mathrm{best}$, Pope–Fry)"}
READOUT_LABELS = {"correct": "accuracy", "c_int": "internal confidence", "verbal_conf": "verbalized confidence",
                  "abstain": "abstain rate", "abstain2": "abstain₂ rate"}


def model_colors(models) -> dict[str, str]:
    """Colour of each model: known models by their fixed rank, others after them."""
    others = sorted(m for m in models if m not in KNOWN_MODELS)
    order = list(KNOWN_MODELS) + others
    return {m: PALETTE[order.index(m) % len(PALETTE)] for m in models}


def short_name(model: str) -> str:
    """Display name: the last path component of a model id."""
    return str(model).rstrip("/").split("/")[-1]


def plot_signal_vs_visibility(means: xr.Dataset, readout: str, task: str = "t2",
                              arms=("fog", "underwater"), chance: float | None = None,
                              reference: str | None = None, title: str | None = None):
    """Plot one signal against visibility, one panel per arm, one line per model.

    Parameters
    ----------
    means : Dataset from :func:`murk.analysis.condition_means`
        (``mean``, ``lo``, ``hi`` over model, arm, level, task, readout).
    readout : str
        Signal to draw, e.g. ``"correct"``.
    task : {"t2", "t3"}
    chance : float, optional
        Chance floor drawn as a dashed line.
    reference : str, optional
        A second signal drawn thin and dashed in the same colour (e.g. accuracy
        behind the confidence).

    Returns
    -------
    matplotlib Figure
    """
    colors = model_colors(list(means["model"].values))
    vis = means["visibility_m"].values
    x_clean = vis[1] * 2.0  # clean drawn one factor 2 left of the first level
    fig, axes = plt.subplots(1, len(arms), figsize=(3.4 * len(arms), 2.9), sharey=True, squeeze=False)
    for ax, arm in zip(axes[0], arms):
        for model in means["model"].values:
            m = means.sel(model=model, arm=arm, task=task, readout=readout)
            c = colors[str(model)]
            ax.fill_between(vis[1:], m["lo"].values[1:], m["hi"].values[1:], color=c, alpha=0.2, lw=0)
            ax.plot(vis[1:], m["mean"].values[1:], "-o", color=c, ms=3, lw=1.5, label=short_name(model))
            m0, lo0, hi0 = (float(m[k].values[0]) for k in ("mean", "lo", "hi"))
            yerr = np.nan_to_num([[max(m0 - lo0, 0.0)], [max(hi0 - m0, 0.0)]])
            ax.errorbar([x_clean], [m0], yerr=yerr, fmt="s", color=c, ms=4, capsize=2)
            if reference is not None:
                r = means["mean"].sel(model=model, arm=arm, task=task, readout=reference)
                ax.plot(vis[1:], r.values[1:], "--", color=c, lw=0.9, alpha=0.8)
            if "blank" in means["arm"].values:
                b = float(means["mean"].sel(model=model, arm="blank", level=0, task=task, readout=readout))
                ax.axhline(b, color=c, ls=":", lw=1)
        if chance is not None:
            ax.axhline(chance, color="0.3", ls="--", lw=1)
        ax.set_xscale("log")
        ticks = [x_clean, *vis[1:]]
        ax.set_xticks(ticks)
        ax.set_xticklabels(["clean"] + [f"{v:.3g}" for v in vis[1:]], rotation=45, fontsize=7)
        ax.minorticks_off()
        ax.set_xlim(x_clean * 1.4, vis[-1] / 1.4)
        ax.set_xlabel("visibility (m)")
        ax.set_title(ARM_TITLES.get(arm, arm), fontsize=9)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel(READOUT_LABELS.get(readout, readout) + f" ({task})")
    axes[0, -1].legend(fontsize=7, frameon=False, loc="lower left")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def save(fig, folder: str | Path, name: str) -> list[Path]:
    """Save ``fig`` as ``<name>.png`` (200 dpi) and ``<name>.pdf``; close it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for ext in ("png", "pdf"):
        p = folder / f"{name}.{ext}"
        fig.savefig(p, dpi=200 if ext == "png" else None, bbox_inches="tight")
        out.append(p)
    plt.close(fig)
    return out
