"""Figures beyond the spec: the monitor's accuracy, the risk-coverage curves of the abstainers, and the reliability
of each recalibration method.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.patches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from murk.report._figures import ARM_TITLES, FONT, PALETTE, _empty_note, _legend_below, level_axis  # noqa: E402

__all__ = ["plot_monitor_accuracy", "plot_risk_coverage", "plot_reliability_methods"]


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
    and the factor-2 band, log-log axes in metres, clear (left) to murky.
    """
    v = np.asarray(visibility_m, float)
    fig, axes = plt.subplots(1, len(arms), figsize=(3.6 * len(arms), 3.2), sharey=True, squeeze=False)
    for ax, arm in zip(axes[0], arms):
        q = np.asarray(quantiles_by_arm[arm], float)
        ax.fill_between(v, v / 2, v * 2, color="0.85", lw=0)
        ax.plot(v, v, color="0.3", ls="--", lw=1)
        ok = np.isfinite(q).all(axis=0)
        ax.fill_between(v, q[0], q[2], where=ok, color=PALETTE[0], alpha=0.25, lw=0)
        ax.plot(v, q[1], "-o", color=PALETTE[0], ms=3)
        if not np.isfinite(q[1]).any():
            _empty_note(ax, ["monitor"], "no estimate")
        level_axis(ax, v)
        ax.set_yscale("log")
        ax.tick_params(axis="y", labelsize=FONT)
        ax.set_xlabel("true visibility V (m)", fontsize=9)
        ax.set_title(ARM_TITLES.get(arm, arm), fontsize=9)
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("estimated visibility V̂ (m)", fontsize=9)
    handles = [matplotlib.patches.Patch(color="0.85", label="within ×2"),
               plt.Line2D([], [], color="0.3", ls="--", lw=1, label="V̂ = V"),
               matplotlib.patches.Patch(color=PALETTE[0], alpha=0.25, label="P10–P90 over images"),
               plt.Line2D([], [], color=PALETTE[0], marker="o", ms=3, label="median V̂")]
    fig.tight_layout()
    _legend_below(fig, handles, ncol=4)
    return fig


def _unit_panel_grid(panels: dict, rows: list, cols: list, draw, xlabel: str, ylabel: str, panel_in: tuple):
    """A rows x cols grid of [0, 1] x [0, 1] panels (shared axes): ``draw(ax, panels[(row, col)])`` fills each,
    a missing panel says "no answers"; column titles are the arms, row labels the rows."""
    fig, axes = plt.subplots(len(rows) or 1, len(cols) or 1, figsize=(panel_in[0] * max(len(cols), 1),
                                                                      panel_in[1] * max(len(rows), 1)),
                             sharex=True, sharey=True, squeeze=False)
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            ax = axes[i, j]
            panel = panels.get((r, c), {})
            draw(ax, panel)
            if not panel:
                _empty_note(ax, [str(r)], "no answers")
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1)
            ax.grid(alpha=0.3)
            ax.tick_params(labelsize=FONT)
            if i == 0:
                ax.set_title(ARM_TITLES.get(c, str(c)), fontsize=9)
            if j == 0:
                ax.set_ylabel(f"{r}\n{ylabel}", fontsize=8)
            if i == len(rows) - 1:
                ax.set_xlabel(xlabel, fontsize=9)
    return fig


def plot_risk_coverage(curves: dict, row_labels, col_labels, signal_labels: dict | None = None):
    """Risk–coverage curves of several abstention signals (Geifman & El-Yaniv 2017).

    Parameters
    ----------
    curves : dict (row, col) -> dict signal -> (coverage, risk)
        Per panel, each signal's curve (:func:`murk.results.expected_risk_coverage`: 1-D
        float arrays, coverage rising to 1); a panel may be missing.
    row_labels, col_labels : sequence of str
        Panel rows (e.g. models) and columns (e.g. arms), in order.
    signal_labels : dict signal -> str, optional
        Legend labels; default the signal names.

    Returns
    -------
    matplotlib Figure: risk (error rate of the answers kept) against coverage
    (share kept), one line per signal, steps at each distinct confidence.
    """
    rows, cols = list(row_labels), list(col_labels)
    signals = list(dict.fromkeys(s for panel in curves.values() for s in panel))
    colors = {s: PALETTE[i % len(PALETTE)] for i, s in enumerate(signals)}
    styles = {s: ("-", "--", "-.", ":")[i % 4] for i, s in enumerate(signals)}   # coinciding curves stay visible
    labels = signal_labels or {}

    def draw(ax, panel):
        for s, (cov, risk) in panel.items():
            cov, risk = np.asarray(cov, float), np.asarray(risk, float)
            ax.step(np.r_[0.0, cov], np.r_[risk[:1], risk] if risk.size else risk, where="post", color=colors[s],
                    ls=styles[s], lw=1.2)

    fig = _unit_panel_grid(curves, rows, cols, draw, "coverage (share answered)", "risk (error rate)", (3.3, 2.6))
    handles = [plt.Line2D([], [], color=colors[s], ls=styles[s], lw=1.2, label=labels.get(s, s)) for s in signals]
    fig.tight_layout()
    _legend_below(fig, handles, ncol=min(4, max(len(handles), 1)))
    return fig


def plot_reliability_methods(bins: dict, row_labels, col_labels, method_labels: dict | None = None):
    """Reliability diagrams before and after recalibration.

    Parameters
    ----------
    bins : dict (row, col) -> dict method -> (count, mean_confidence, accuracy)
        Per panel and method, :func:`murk.results.reliability_bins` of the pooled
        answers (each a (n_bins,) float array, NaN in empty bins).
    row_labels, col_labels : sequence of str
    method_labels : dict method -> str, optional

    Returns
    -------
    matplotlib Figure: accuracy against mean confidence per bin (marker area by
    count), one line per method, the diagonal of perfect calibration.
    """
    rows, cols = list(row_labels), list(col_labels)
    methods = list(dict.fromkeys(mth for panel in bins.values() for mth in panel))
    colors = {mth: PALETTE[i % len(PALETTE)] for i, mth in enumerate(methods)}
    labels = method_labels or {}

    def draw(ax, panel):
        ax.plot([0, 1], [0, 1], color="0.5", ls="--", lw=1)
        for mth, (count, conf, acc) in panel.items():
            count, conf, acc = (np.asarray(x, float) for x in (count, conf, acc))
            ok = np.isfinite(conf) & np.isfinite(acc) & (count > 0)
            if not ok.any():
                continue
            size = 8 + 60 * count[ok] / count[ok].max()
            ax.plot(conf[ok], acc[ok], "-", color=colors[mth], lw=1)
            ax.scatter(conf[ok], acc[ok], s=size, color=colors[mth], zorder=3)

    fig = _unit_panel_grid(bins, rows, cols, draw, "confidence", "accuracy", (3.0, 2.7))
    handles = [plt.Line2D([], [], color=colors[m], marker="o", lw=1, label=labels.get(m, m)) for m in methods]
    fig.tight_layout()
    _legend_below(fig, handles, ncol=min(4, max(len(handles), 1)))
    return fig

