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

__all__ = ["PALETTE", "model_colors", "short_name", "plot_signal_vs_visibility", "save", "SCENE_LEVELS_M",
           "plot_scene_levels", "plot_reliability", "plot_abstain_comparison", "plot_blind_spot_widths",
           "plot_nominal_vs_physical", "plot_item_grid", "plot_monitor_accuracy"]

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


def plot_reliability(scores: xr.Dataset, task: str = "t2", confidence: str = "c_int",
                     arms=("fog", "underwater")):
    """Reliability diagram (spec Fig. 5 style), one panel per arm, one line per model.

    Parameters
    ----------
    scores : xarray.Dataset
        :func:`murk.analysis.scores_dataset` (``reliability_count``,
        ``reliability_confidence``, ``reliability_accuracy`` over model, arm,
        task, confidence, bin), pooled over the sweep levels 1-8.
    task : {"t2", "t3"}
    confidence : {"c_int", "verbal_conf"}
    arms : sequence of str

    Returns
    -------
    matplotlib Figure
        Accuracy against mean confidence per bin (markers sized by the share
        of answers in the bin), the diagonal of perfect calibration, and the
        confident region c >= 0.9 shaded.
    """
    models = [str(m) for m in scores["model"].values]
    colors = model_colors(models)
    fig, axes = plt.subplots(1, len(arms), figsize=(3.3 * len(arms), 3.2), sharey=True, squeeze=False)
    for ax, arm in zip(axes[0], arms):
        ax.plot([0, 1], [0, 1], color="0.5", lw=0.8, ls="--", label="perfect calibration")
        ax.axvspan(0.9, 1.0, color="0.9", lw=0, zorder=0)
        for m in models:
            sel = dict(model=m, arm=arm, task=task, confidence=confidence)
            cnt = scores["reliability_count"].sel(**sel).values
            x = scores["reliability_confidence"].sel(**sel).values
            y = scores["reliability_accuracy"].sel(**sel).values
            ok = cnt > 0
            if not ok.any():
                continue
            share = cnt[ok] / cnt[ok].sum()
            c = colors[m]
            ax.plot(x[ok], y[ok], "-", color=c, lw=1.2, label=short_name(m))
            ax.scatter(x[ok], y[ok], s=8 + 120 * share, color=c, edgecolor="white", lw=0.4, zorder=3)
        ax.set_xlim(0, 1)
        ax.set_ylim(-0.02, 1.02)
        ax.set_aspect("equal")
        ax.set_xlabel(f"mean {READOUT_LABELS.get(confidence, confidence)} in bin")
        ax.set_title(ARM_TITLES.get(arm, arm), fontsize=9)
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel(f"accuracy in bin ({task})")
    axes[0, -1].legend(fontsize=7, frameon=False, loc="upper left")
    fig.tight_layout()
    return fig


def plot_abstain_comparison(means: xr.Dataset, task: str = "t2", arms=("fog", "underwater"),
                            chance: float | None = None):
    """Abstain rate with the main wording, with "I don't know" and accuracy (spec Fig. 6 style).

    One row per model, one column per arm; log-V axis in metres from clear
    (left, clean at the left edge) to murky. Solid: abstain (main wording);
    dashed: abstain₂ ("I don't know"); dotted: accuracy; bands: bootstrap
    intervals. The model's colour is fixed by :func:`model_colors`.

    Parameters
    ----------
    means : xarray.Dataset
        :func:`murk.analysis.condition_means` (``mean``, ``lo``, ``hi``).
    task : {"t2", "t3"}
    arms : sequence of str
    chance : float, optional
        Chance accuracy, drawn as a thin grey line.

    Returns
    -------
    matplotlib Figure
    """
    models = [str(m) for m in means["model"].values]
    colors = model_colors(models)
    vis = means["visibility_m"].values
    x_clean = vis[1] * 2.0
    xs = np.r_[x_clean, vis[1:]]
    fig, axes = plt.subplots(len(models), len(arms), figsize=(3.4 * len(arms), 1.9 * len(models) + 0.6),
                             sharex=True, sharey=True, squeeze=False)
    styles = (("abstain", "-", "abstain (main wording)"), ("abstain2", "--", "abstain₂ (“I don't know”)"),
              ("correct", ":", "accuracy"))
    for i, m in enumerate(models):
        c = colors[m]
        for j, arm in enumerate(arms):
            ax = axes[i, j]
            for ro, ls, lab in styles:
                d = means.sel(model=m, arm=arm, task=task, readout=ro)
                mk = {"abstain": "o", "abstain2": "s", "correct": "^"}[ro]
                ax.fill_between(vis[1:], d["lo"].values[1:], d["hi"].values[1:], color=c, alpha=0.12, lw=0)
                ax.plot(vis[1:], d["mean"].values[1:], ls, color=c, lw=1.5, marker=mk, ms=2.5)
                ax.plot([x_clean], [float(d["mean"].values[0])], mk, color=c, ms=3.5)  # clean, not joined
            if chance is not None:
                ax.axhline(chance, color="0.6", lw=0.7)
            ax.axvline(np.sqrt(x_clean * vis[1]), color="0.8", lw=0.6)
            ax.set_xscale("log")
            ax.set_xticks(xs)
            ax.set_xticklabels(["clean"] + [f"{v:.3g}" for v in vis[1:]], rotation=45, fontsize=7)
            ax.minorticks_off()
            ax.set_xlim(x_clean * 1.4, vis[-1] / 1.4)
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
            if i == 0:
                ax.set_title(ARM_TITLES.get(arm, arm), fontsize=9)
            if i == len(models) - 1:
                ax.set_xlabel("visibility (m)")
            if j == 0:
                ax.set_ylabel(short_name(m), fontsize=8, color=c)
    handles = [plt.Line2D([], [], color="0.2", ls=ls, marker={"abstain": "o", "abstain2": "s", "correct": "^"}[ro],
                          ms=3, lw=1.5, label=lab) for ro, ls, lab in styles]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=7, frameon=False)
    fig.text(0.005, 0.5, f"rate ({task})", rotation=90, va="center", fontsize=9)
    fig.tight_layout(rect=(0.02, 0.06, 1, 1))
    return fig


#: Levels of the spec's Figure 2 (m): six of the sweep's eight, clear to murky.
SCENE_LEVELS_M = (250.0, 62.5, 15.625, 7.8125, 3.90625, 1.953125)


def plot_scene_levels(image, depth_m, bbox, visibilities_m=SCENE_LEVELS_M, *, box_width_px: int = 8,
                      depth_label: str | None = None, approximate: bool = False):
    """Figure 2 of the spec: one scene at six levels, fog (top) and underwater (bottom).

    Each panel is the image as presented to the models: degraded first
    (:func:`murk.physics.fog_sweep` / :func:`murk.physics.underwater_sweep`, Eq. 1 in
    linear RGB), then the red target box drawn (:func:`murk.render.draw_box`).

    Parameters
    ----------
    image : numpy.ndarray of uint8, shape (H, W, 3)
        Clean scene at the presented size, 8-bit sRGB.
    depth_m : array_like of float, shape (H, W)
        Metric depth in metres.
    bbox : (x, y, w, h)
        Target box in px, in *image*'s pixel frame (COCO convention).
    visibilities_m : sequence of float, optional
        Visibilities in metres (fog V; underwater V_best), clear to murky; default the
        spec's six levels 250 ... 1.95 m.
    box_width_px : int, optional
        Box line width (spec: 8 px).
    depth_label : str, optional
        Depth backend, written in the suptitle.
    approximate : bool, optional
        Whether the depth is an approximation (the suptitle then says so).

    Returns
    -------
    matplotlib.figure.Figure
    """
    from murk import physics, render

    levels = np.asarray(visibilities_m, dtype=np.float64)
    rows = {"fog": physics.fog_sweep(image, depth_m, levels),
            "underwater": physics.underwater_sweep(image, depth_m, levels)}
    h, w = image.shape[:2]
    n = levels.size
    panel_w = 1.6
    fig, axes = plt.subplots(2, n, figsize=(panel_w * n, 2 * panel_w * h / w + 0.8), squeeze=False)
    for r, (arm, stack) in enumerate(rows.items()):
        for c, v in enumerate(levels):
            ax = axes[r, c]
            ax.imshow(render.draw_box(stack[c], bbox, box_width_px), interpolation="lanczos")
            ax.set_xticks([])
            ax.set_yticks([])
            for side in ax.spines.values():
                side.set_visible(False)
            sym = "V" if arm == "fog" else r"$V_\mathrm{best}$"
            ax.set_title(f"{sym} = {v:.3g} m", fontsize=8)
        axes[r, 0].set_ylabel(arm, fontsize=9)
    if depth_label:
        note = " — approximate depth: metres rest on the assumed depth scale" if approximate else ""
        fig.suptitle(f"depth: {depth_label}{note}", fontsize=8)
    fig.tight_layout()
    return fig


def plot_blind_spot_widths(crossings: xr.Dataset, task: str = "t2", arms=("fog", "underwater"),
                           signals=("c_int", "verbal_conf", "abstain", "abstain2")):
    """Blind-spot widths W with bootstrap intervals (spec Fig. 4), one panel per arm.

    Parameters
    ----------
    crossings : Dataset from :func:`murk.analysis.crossing_table`
        ``w``, ``w_lo``, ``w_hi`` (decades) and ``w_lower_bound`` over
        (model, arm, task, readout).
    task : {"t2", "t3"}

    Returns
    -------
    matplotlib Figure. A lower bound (censored awareness crossing) is drawn as a
    right-pointing triangle with its interval; W = 0 (awareness falls with
    accuracy) is the dashed line.
    """
    models = [str(m) for m in crossings["model"].values]
    colors = model_colors(models)
    n_rows = len(signals) * len(models)
    fig, axes = plt.subplots(1, len(arms), figsize=(3.4 * len(arms), 0.8 + 0.24 * n_rows), sharey=True, squeeze=False)
    for ax, arm in zip(axes[0], arms):
        ticks, labels = [], []
        for i, sig in enumerate(signals):
            for j, model in enumerate(models):
                y = -(i * (len(models) + 1) + j)
                c = crossings.sel(model=model, arm=arm, task=task, readout=sig)
                w, lo, hi = (float(c[k]) for k in ("w", "w_lo", "w_hi"))
                bound = bool(c["w_lower_bound"])
                if np.isfinite(lo) and np.isfinite(hi):
                    ax.plot([lo, hi], [y, y], color=colors[model], lw=1.5)
                upper = bool(c["w_upper_bound"]) if "w_upper_bound" in c else False
                if np.isfinite(w):
                    ax.plot([w], [y], ">" if bound else "<" if upper else "o", color=colors[model], ms=5,
                            label=short_name(model) if (i == 0 and arm == arms[0]) else None)
                else:
                    ax.text(0.02, y, f"{short_name(model)}: no crossing (n/a)", transform=ax.get_yaxis_transform(),
                            fontsize=6, va="center", color=colors[model])
                ticks.append(y)
                labels.append(READOUT_LABELS.get(sig, sig) if j == 0 else "")
        ax.axvline(0, color="0.3", ls="--", lw=1)
        ax.set_yticks(ticks)
        ax.set_yticklabels(labels, fontsize=7)
        ax.set_xlabel("W = log10(V_acc / V_aware) (decades)")
        ax.set_title(ARM_TITLES.get(arm, arm), fontsize=9)
        ax.grid(alpha=0.3, axis="x")
    handles, names = axes[0, 0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, names, fontsize=7, frameon=False, loc="lower center", ncol=min(len(models), 5),
                   bbox_to_anchor=(0.5, -0.02))
    fig.suptitle(f"blind-spot width ({task}); ▶ lower bound, ◀ upper bound", fontsize=9)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def plot_nominal_vs_physical(means: xr.Dataset, v_eq_median_m, task: str = "t2", readout: str = "correct",
                             chance: float | None = None):
    """Nominal ImageNet-C severities placed on the physical axis (spec Fig. 7).

    Parameters
    ----------
    means : Dataset from :func:`murk.analysis.condition_means`
    v_eq_median_m : sequence of 5 floats
        Median gain-matched equivalent visibility (m) of severities 1-5
        (spec Table VII, :func:`murk.nominal.table_vii`).
    task, readout : str
    chance : float, optional

    Returns
    -------
    matplotlib Figure: each model's fog curve (line) and its ImageNet-C
    severities (triangles, labelled 1-5) at their equivalent visibilities.
    """
    colors = model_colors(list(means["model"].values))
    vis = means["visibility_m"].values
    sev_x = np.asarray(v_eq_median_m, float)
    fig, ax = plt.subplots(figsize=(4.6, 3.0))
    for model in means["model"].values:
        c = colors[str(model)]
        fog = means["mean"].sel(model=model, arm="fog", task=task, readout=readout).values
        ax.plot(vis[1:], fog[1:], "-o", color=c, ms=3, lw=1.3, label=f"{short_name(model)} (fog)")
        nom = means["mean"].sel(model=model, arm="imagenet_c", task=task, readout=readout).values[1:6]
        ok = np.isfinite(sev_x) & np.isfinite(nom)
        ax.plot(sev_x[ok], nom[ok], "^", color=c, ms=6, mec="k", mew=0.5)
        for s, x, y in zip(range(1, 6), sev_x, nom):
            if np.isfinite(x) and np.isfinite(y):
                ax.annotate(str(s), (x, y), xytext=(0, 5), textcoords="offset points", fontsize=6, ha="center")
    if chance is not None:
        ax.axhline(chance, color="0.3", ls="--", lw=1)
    ax.set_xscale("log")
    ax.set_xticks(vis[1:])
    ax.set_xticklabels([f"{v:.3g}" for v in vis[1:]], rotation=45, fontsize=7)
    ax.minorticks_off()
    ax.set_xlim(vis[1] * 1.4, vis[-1] / 1.4)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("visibility (m); ▲ ImageNet-C severity at its equivalent V")
    ax.set_ylabel(f"{READOUT_LABELS.get(readout, readout)} ({task})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, frameon=False, loc="lower left")
    fig.tight_layout()
    return fig


def plot_item_grid(tiles, row_labels, col_labels, captions=None, tile_px: float = 1.25):
    """A grid of rendered images with a caption under each (spec Figs. 2 and 9).

    Parameters
    ----------
    tiles : nested list, rows × columns of uint8 (H, W, 3) images
    row_labels, col_labels : list of str
    captions : nested list of str, optional
        Text under each tile (e.g. a model's answer and confidences).
    tile_px : float
        Width of a tile in inches.

    Returns
    -------
    matplotlib Figure
    """
    n_r, n_c = len(tiles), len(tiles[0])
    fig, axes = plt.subplots(n_r, n_c, figsize=(tile_px * n_c, tile_px * n_r * 0.95 + (0.35 * n_r if captions else 0)),
                             squeeze=False)
    for r in range(n_r):
        for c in range(n_c):
            ax = axes[r, c]
            ax.imshow(tiles[r][c])
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(col_labels[c], fontsize=7)
            if c == 0:
                ax.set_ylabel(row_labels[r], fontsize=7)
            if captions:
                ax.set_xlabel(captions[r][c], fontsize=5.5)
    fig.tight_layout(pad=0.3)
    return fig


def plot_monitor_accuracy(visibility_m, quantiles_by_arm: dict, arms=("fog", "underwater")):
    """The visibility monitor's estimate V̂ against the true visibility V.

    Parameters
    ----------
    visibility_m : (L,) float
        True visibilities of the sweep (m).
    quantiles_by_arm : dict arm -> (3, L) float
        10th, 50th and 90th percentile of V̂ over images at each level (m).

    Returns
    -------
    matplotlib Figure: median V̂ with its P10-P90 band, the identity (V̂ = V)
    and the factor-2 band, log-log axes in metres.
    """
    v = np.asarray(visibility_m, float)
    fig, axes = plt.subplots(1, len(arms), figsize=(3.4 * len(arms), 3.0), sharey=True, squeeze=False)
    for ax, arm in zip(axes[0], arms):
        q = np.asarray(quantiles_by_arm[arm], float)
        ax.fill_between(v, v / 2, v * 2, color="0.85", lw=0, label="within ×2")
        ax.plot(v, v, color="0.3", ls="--", lw=1, label="V̂ = V")
        ax.fill_between(v, q[0], q[2], color=PALETTE[0], alpha=0.25, lw=0, label="P10–P90 over images")
        ax.plot(v, q[1], "-o", color=PALETTE[0], ms=3, label="median V̂")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(v)
        ax.set_xticklabels([f"{x:.3g}" for x in v], rotation=45, fontsize=7)
        ax.minorticks_off()
        ax.set_xlim(v.max() * 1.4, v.min() / 1.4)
        ax.set_xlabel("true visibility V (m)")
        ax.set_title(ARM_TITLES.get(arm, arm), fontsize=9)
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("estimated visibility V̂ (m)")
    axes[0, 0].legend(fontsize=7, frameon=False, loc="upper right")
    fig.tight_layout()
    return fig
