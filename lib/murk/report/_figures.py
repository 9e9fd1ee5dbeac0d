"""Figures of the study, written as files (PNG for HTML, PDF for print).

Conventions (spec Figs. 3-8): log-V axis in metres running from clear (left)
to murky (right), the clean value drawn at the left edge, bootstrap bands,
chance (dashed) and blank-image (dotted) floors, both physical arms side by
side, one colour per model fixed across all figures (Paul Tol's colour-blind
safe "muted" scheme).
"""

from __future__ import annotations


import hashlib
import unicodedata

import matplotlib

matplotlib.use("Agg")
import matplotlib.patches  # noqa: E402
import matplotlib.ticker  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

from murk.report._escape import plot_text  # noqa: E402
from murk.report._format import fmt_level  # noqa: E402
from murk.results import sweep_visibility  # noqa: E402

__all__ = ["LOW_MASS_MARK", "model_label", "display_names", "PALETTE", "model_colors", "plot_signal_vs_visibility",
           "SCENE_LEVELS_M", "level_axis", "plot_scene_levels", "plot_reliability", "plot_abstain_comparison",
           "plot_blind_spot_widths", "plot_nominal_vs_physical", "plot_item_grid", "plot_signals", "FIG3_SIGNALS",
           "example_caption", "ABSTAIN_WORDS", "model_marks", "MODEL_MARKERS"]

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


def _short_name(model: str) -> str:
    """The last path component of a model id (kept for callers that name one model alone; within a run use
    :func:`display_names`, which keeps the names unique)."""
    return str(model).rstrip("/").split("/")[-1]


def _parts(model: str) -> list[str]:
    return [p for p in str(model).replace("\\", "/").split("/") if p]


#: letters of other scripts, and dashes, that print as a Latin letter or a hyphen in the paper's fonts: the Cyrillic
#: and Greek rows of Unicode's confusables (UTS #39, ``confusables.txt``) whose prototype is one Latin letter, and
#: the hyphens and minus; with NFKC (which folds full-width and compatibility forms) they make the skeleton
#: :func:`display_names` compares names by
_CONFUSABLE = str.maketrans(
    "асеорхуіјѕһԁԛԝӏАВЕКМНОРСТХІЈЅУЬ"   # Cyrillic
    "αιορνυκτΑΒΕΖΗΙΚΜΝΟΡΤΥΧı"           # Greek, and the dotless i
    "\u2010\u2011\u2012\u2013\u2212",           # hyphens, figure and en dash, minus
    "aceopxyijshdqwlABEKMHOPCTXIJSYb"
    "aiopvuktABEZHIKMNOPTYXi"
    "-----")


def _skeleton(text: str) -> str:
    """The form two names share when they print alike: NFKC, the confusable letters mapped to their Latin
    prototype (:data:`_CONFUSABLE`), the characters that print nothing (Unicode categories Cc and Cf: controls,
    zero-width characters, bidirectional overrides) dropped.

    >>> _skeleton("smolvlm") == _skeleton("smоlvlm")    # the second "о" is Cyrillic
    True
    """
    text = unicodedata.normalize("NFKC", str(text)).translate(_CONFUSABLE)
    return "".join(c for c in text if unicodedata.category(c) not in ("Cc", "Cf"))


def _visible(text: str) -> str:
    """``text`` with each character that prints nothing or moves the text around it (categories Cc, Cf, Zl, Zp:
    a line break, a zero-width character, a bidirectional override) shown as its code point, ``<U+202E>``:
    model ids holding one are refused where they are read (:func:`murk.core.model_entries`), this shows one
    from an older store."""
    return "".join(f"<U+{ord(c):04X}>" if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") else c for c in text)


def display_names(models, marked=()) -> dict[str, str]:
    """Display names of a run's models: for each, the shortest suffix of its id that no other model shares, and
    never two names that print alike.

    The id is split into path components (``/``; a local folder's ``\\`` too), and a model
    is named by its last ``k`` components with the smallest ``k`` that tells it from every
    other model of ``models``: ``murk-tiny/smolvlm`` and ``murk-realformat/smolvlm`` keep
    their first part, ``…/run1/final`` and ``…/run2/final`` become ``run1/final`` and
    ``run2/final``, while a model whose last part is unique is named by it alone. The same
    names are used in every figure legend (:func:`model_label`), table and sentence.

    Components are compared by their skeleton (:func:`_skeleton`: NFKC, confusable letters of other scripts
    as their Latin prototype, invisible characters dropped), so that two folders whose names differ by a
    homoglyph (a Cyrillic ``о`` for a Latin ``o``), a full-width letter or a zero-width character keep as many
    components as tell them apart in print; two ids that print alike as a whole are each followed by a short
    digest of the id, `` (#1a2b3c)`` (the first six hexadecimal digits of its SHA-256). A character that prints
    nothing is shown as its code point (``<U+200B>``).

    The names are plain text: escape them for the context they land in (:func:`murk.report.markdown_text` in
    Markdown, :func:`murk.report.plot_text` in a figure; :func:`model_label` does).

    Parameters
    ----------
    models : iterable of str
        The model ids of the run (duplicates are named once).
    marked : iterable of str, optional
        Models that carry the `` †`` mark (:data:`LOW_MASS_MARK`: median clean option
        mass below the threshold).

    Returns
    -------
    dict
        Model id (str) -> display name (str), in the order of ``models``.

    Examples
    --------
    >>> names = display_names(["murk-tiny/smolvlm", "murk-realformat/smolvlm", "Qwen/Qwen3-VL-2B-Instruct"],
    ...                       marked=["murk-tiny/smolvlm"])
    >>> list(names.values())
    ['murk-tiny/smolvlm †', 'murk-realformat/smolvlm', 'Qwen3-VL-2B-Instruct']
    >>> list(display_names(["/ckpt/a/smolvlm", "/ckpt/b/smоlvlm"]).values())   # a Cyrillic "о"
    ['a/smolvlm', 'b/smоlvlm']
    >>> list(display_names(["ckpt/smolvlm", "ckpt/smоlvlm"]).values())
    ['ckpt/smolvlm (#cd7de2)', 'ckpt/smоlvlm (#92546e)']
    """
    ids = list(dict.fromkeys(str(m) for m in models))
    parts = {m: [_skeleton(p) for p in (_parts(m) or [m])] for m in ids}
    shown = {m: _parts(m) or [m] for m in ids}
    marks = {str(m) for m in marked}
    out = {}
    for m in ids:
        p = parts[m]
        for k in range(1, len(p) + 1):
            suffix = p[-k:]
            if not any(parts[o][-k:] == suffix for o in ids if o != m):
                break
        unique = not any(parts[o][-k:] == p[-k:] for o in ids if o != m)
        out[m] = "/".join(shown[m][-k:]) if unique else m      # an id that is a suffix of another: the id itself
    alike: dict[str, list[str]] = {}
    for m in ids:
        alike.setdefault(_skeleton(out[m]), []).append(m)
    for group in alike.values():
        for m in group if len(group) > 1 else ():
            out[m] += f" (#{hashlib.sha256(m.encode('utf-8', 'surrogatepass')).hexdigest()[:6]})"
    return {m: _visible(out[m]) + (f" {LOW_MASS_MARK}" if m in marks else "") for m in ids}


#: the mark of a model whose first token is not the answer (median clean option mass below
#: :data:`murk.readout.OPTION_MASS_MIN`; :func:`murk.results.low_option_mass`)
LOW_MASS_MARK = "†"


def model_label(model: str, marked=(), models=()) -> str:
    """Legend label of a model: its :func:`display_names` name among ``models`` (the models drawn; default the
    model alone, i.e. its last path part), with `` †`` (:data:`LOW_MASS_MARK`) when it is in ``marked``, escaped
    for matplotlib (:func:`murk.report.plot_text`: a ``$`` in a folder's name starts no mathtext)."""
    return plot_text(display_names([*[str(m) for m in models], str(model)], marked)[str(model)])


#: notes written into a panel where a model has no values, by read-out
EMPTY_NOTES = {"verbal_conf": "no parseable verbalized confidence"}
FONT = 8  # tick labels, legends and notes (pt)


def level_axis(ax, visibility_m, clean_x: float | None = None, reverse: bool = True) -> None:
    """Log-V axis in metres with the sweep levels as ticks (spec labels, :func:`murk.report.fmt_level`),
    clear (left) to murky (right); ``clean_x`` adds the clean image at the left edge."""
    vis = np.asarray(visibility_m, float)
    ticks = ([clean_x] if clean_x is not None else []) + list(vis)
    ax.set_xscale("log")
    ax.set_xticks(ticks)
    ax.set_xticklabels((["clean"] if clean_x is not None else []) + [fmt_level(v) for v in vis],
                       rotation=45, fontsize=FONT)
    ax.minorticks_off()
    left = (clean_x if clean_x is not None else vis.max()) * 1.4
    ax.set_xlim((left, vis.min() / 1.4) if reverse else (vis.min() / 1.4, left))


def _empty_note(ax, names: list[str], why: str) -> None:
    if names:
        ax.text(0.5, 0.5, f"{', '.join(names)}:\n{why}", transform=ax.transAxes, ha="center", va="center",
                fontsize=FONT, color="0.25", bbox=dict(facecolor="white", edgecolor="0.7", alpha=0.9))


def _legend_below(fig, handles, ncol: int | None = None, rect_bottom: float = 0.0) -> None:
    if handles:
        fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, rect_bottom), ncol=ncol or min(len(handles), 4),
                   fontsize=FONT, frameon=False)


def plot_signal_vs_visibility(means: xr.Dataset, readout: str, task: str = "t2",
                              arms=("fog", "underwater"), chance: float | None = None,
                              reference: str | None = None, title: str | None = None,
                              empty_note: str | None = None, band: bool = True, marked=()):
    """Plot one signal against visibility, one panel per arm, one line per model.

    Parameters
    ----------
    means : Dataset from :func:`murk.results.condition_means`
        (``mean``, ``lo``, ``hi`` over model, arm, level, task, readout).
    readout : str
        Signal to draw, e.g. ``"correct"``.
    task : {"t2", "t3"}
    chance : float, optional
        Chance floor drawn as a dashed grey line.
    reference : str, optional
        A second signal drawn thin and dashed in the same colour (e.g. accuracy
        behind the confidence).
    title : str, optional
    empty_note : str, optional
        Why a model can have no values (default for ``verbal_conf``: no
        parseable verbalized confidence); written into a panel where a model has
        none.
    band : bool
        Draw the bootstrap intervals (bands; bars at the clean point), only
        where the point is defined.
    marked : sequence of str, optional
        Models labelled with a † (:func:`model_label`): those whose median clean
        option mass is below the threshold (:func:`murk.results.low_option_mass`).

    Returns
    -------
    matplotlib Figure. Bands: bootstrap intervals; dotted: each model's
    blank-image value; the legend (below) names every mark drawn.
    """
    colors = model_colors(list(means["model"].values))
    why = empty_note or EMPTY_NOTES.get(readout, "no values")
    fig, axes = plt.subplots(1, len(arms), figsize=(3.6 * len(arms), 3.1), sharey=True, squeeze=False)
    drawn: set[str] = set()
    for ax, arm in zip(axes[0], arms):
        _signal_panel(ax, means, readout, task, arm, colors, drawn, chance=chance, reference=reference, band=band,
                      marked=marked, why=why)
        ax.set_title(ARM_TITLES.get(arm, arm), fontsize=9)
    axes[0, 0].set_ylabel(READOUT_LABELS.get(readout, readout) + f" ({task})", fontsize=9)
    handles = _signal_handles(means, colors, drawn, marked, reference=reference, chance=chance)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    _legend_below(fig, handles, ncol=min(len(handles), 4))
    return fig


#: markers of the models in a panel, in their drawing order (a model's marker is fixed by its place in the run)
MODEL_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h")


def model_marks(models) -> dict[str, dict]:
    """Marker style of each model in a panel of several: a distinct shape, hollow, larger for a model drawn
    earlier (beneath), so that where the curves of several models coincide (rates at 0 or 1) every model's
    marker still shows around the ones drawn over it.

    Parameters
    ----------
    models : sequence of str
        The models in drawing order.

    Returns
    -------
    dict
        model -> keyword arguments of ``Axes.plot`` (``marker``, ``ms`` in points, ``mfc``, ``mew``).
    """
    models = [str(m) for m in models]
    n = len(models)
    return {m: dict(marker=MODEL_MARKERS[j % len(MODEL_MARKERS)], ms=3.5 + 1.0 * (n - 1 - j), mfc="none", mew=1.0)
            for j, m in enumerate(models)}


def _signal_panel(ax, means: xr.Dataset, readout: str, task: str, arm: str, colors: dict, drawn: set, *,
                  chance: float | None = None, reference: str | None = None, band: bool = True, marked=(),
                  why: str = "no values", floor: float | None = None) -> None:
    """One panel: ``readout`` of every model against V in one arm (clean at the left edge), bootstrap bands,
    blank-image values dotted, the chance line dashed, an abstain rate's floor (one) dash-dotted; what is
    drawn is added to ``drawn`` (model ids, "reference", "blank", "floor") for the legend."""
    vis = sweep_visibility(means)
    x_clean = vis[1] * 2.0  # clean drawn one factor 2 left of the first level
    has_blank = "blank" in means["arm"].values
    empty = []
    marks = model_marks(means["model"].values)
    for model in means["model"].values:
        m = means.sel(model=model, arm=arm, task=task, readout=readout)
        c = colors[str(model)]
        if reference is not None:  # drawn even where the signal itself is empty: the context stays
            r = means["mean"].sel(model=model, arm=arm, task=task, readout=reference).values
            if np.isfinite(r[1:]).any():
                ax.plot(vis[1:], r[1:], "--", color=c, lw=0.9, alpha=0.8)
                drawn.update(("reference", str(model)))
        y = m["mean"].values
        if not np.isfinite(y).any():
            empty.append(model_label(model, marked, means["model"].values))
            continue
        drawn.add(str(model))
        if band:
            ok = np.isfinite(y[1:]) & np.isfinite(m["lo"].values[1:]) & np.isfinite(m["hi"].values[1:])
            ax.fill_between(vis[1:], m["lo"].values[1:], m["hi"].values[1:], where=ok, color=c, alpha=0.2,
                            lw=0)
        ax.plot(vis[1:], y[1:], "-", color=c, lw=1.5, **marks[str(model)])
        m0, lo0, hi0 = (float(m[k].values[0]) for k in ("mean", "lo", "hi"))
        if np.isfinite(m0):
            yerr = [[max(m0 - lo0, 0.0)], [max(hi0 - m0, 0.0)]] if band and np.isfinite(lo0 + hi0) else None
            ax.errorbar([x_clean], [m0], yerr=yerr, fmt="none", color=c, capsize=2)
            ax.plot([x_clean], [m0], ls="none", color=c, **marks[str(model)])   # clean, not joined
        if has_blank:
            b = float(means["mean"].sel(model=model, arm="blank", level=0, task=task, readout=readout))
            if np.isfinite(b):
                ax.axhline(b, color=c, ls=":", lw=1)
                drawn.add("blank")
    if chance is not None:
        ax.axhline(chance, color="0.3", ls="--", lw=1)
    if floor is not None:
        ax.axhline(floor, color="0.3", ls="-.", lw=1)
        drawn.add("floor")
    _empty_note(ax, empty, why)
    level_axis(ax, vis[1:], x_clean)
    ax.set_xlabel("visibility (m)", fontsize=9)
    ax.set_ylim(-0.06, 1.06)  # markers at 0 and 1 drawn whole
    ax.tick_params(axis="y", labelsize=FONT)
    ax.grid(alpha=0.3)


def _signal_handles(means, colors, drawn, marked, *, reference=None, chance=None) -> list:
    """Legend handles of :func:`_signal_panel`'s marks that were drawn (models with their †)."""
    marks = model_marks(means["model"].values)
    handles = [plt.Line2D([], [], color=colors[str(m)], lw=1.5, label=model_label(m, marked, means["model"].values),
                          **{**marks[str(m)], "ms": 5})
               for m in means["model"].values if str(m) in drawn]
    if "reference" in drawn:
        handles.append(plt.Line2D([], [], color="0.4", ls="--", lw=0.9, label=READOUT_LABELS.get(reference, reference)))
    if chance is not None:
        handles.append(plt.Line2D([], [], color="0.3", ls="--", lw=1, label="chance"))
    if "floor" in drawn:
        handles.append(plt.Line2D([], [], color="0.3", ls="-.", lw=1, label="abstain floor (one)"))
    if "blank" in drawn:
        handles.append(plt.Line2D([], [], color="0.4", ls=":", lw=1, label="blank image"))
    return handles


#: the signals of the spec's Fig. 3 (and Fig. 8 for t3), one row of panels each
FIG3_SIGNALS = ("correct", "c_int", "verbal_conf", "abstain")


def plot_signals(means: xr.Dataset, task: str = "t2", signals=FIG3_SIGNALS, arms=("fog", "underwater"),
                 chance: float | None = None, band: bool = True, marked=()):
    """The spec's Fig. 3 (t2) and Fig. 8 (t3): accuracy, internal and verbalized confidence and the abstain
    rate against visibility, one row of panels per signal and one column per arm, one line per model.

    Parameters
    ----------
    means : Dataset from :func:`murk.results.condition_means`
        (``mean``, ``lo``, ``hi`` over model, arm, level, task, readout; ``visibility_m`` over level, m).
    task : {"t2", "t3"}
    signals : sequence of str
        Read-outs, one row each (default :data:`FIG3_SIGNALS`).
    arms : sequence of str
        One column each.
    chance : float, optional
        Chance of the task, drawn dashed in the accuracy and confidence panels (0.25 for t2, 0.5 for t3:
        ``analysis.chance`` of ``data/config.yaml``); an abstain rate's panel instead marks its floor, one
        (the value its crossing is measured against).
    band : bool
        Bootstrap bands (bars at the clean point) where the point is defined.
    marked : sequence of str
        Models labelled with a † (:func:`model_label`).

    Returns
    -------
    matplotlib Figure: panels as :func:`plot_signal_vs_visibility` (bands: bootstrap intervals; dotted:
    each model's blank-image value; a panel names the models without values), one legend below.

    Raises
    ------
    KeyError
        A signal, arm or task not in ``means``.
    """
    colors = model_colors(list(means["model"].values))
    signals, arms = list(signals), list(arms)
    for what, values, dim in (("signal", signals, "readout"), ("arm", arms, "arm"), ("task", [task], "task")):
        absent = [v for v in values if v not in means[dim].values]
        if absent:
            raise KeyError(f"plot_signals: {what} {absent} not in the means (has {list(means[dim].values)})")
    fig, axes = plt.subplots(len(signals), len(arms), figsize=(3.6 * len(arms), 1.85 * len(signals) + 0.5),
                             sharey=True, squeeze=False)
    drawn: set[str] = set()
    for i, ro in enumerate(signals):
        abstain = ro.startswith("abstain")
        for j, arm in enumerate(arms):
            ax = axes[i, j]
            _signal_panel(ax, means, ro, task, arm, colors, drawn, chance=None if abstain else chance, band=band,
                          marked=marked, why=EMPTY_NOTES.get(ro, "no values"), floor=1.0 if abstain else None)
            if i == 0:
                ax.set_title(ARM_TITLES.get(arm, arm), fontsize=9)
            if i < len(signals) - 1:  # the levels are named under the bottom row only
                ax.set_xlabel("")
                ax.tick_params(axis="x", labelbottom=False)
        axes[i, 0].set_ylabel(READOUT_LABELS.get(ro, ro) + f" ({task})", fontsize=9)
    fig.tight_layout()
    _legend_below(fig, _signal_handles(means, colors, drawn, marked, chance=chance), ncol=4)
    return fig


def plot_reliability(scores: xr.Dataset, task: str = "t2", confidence: str = "c_int",
                     arms=("fog", "underwater"), marked=()):
    """Reliability diagram (spec Fig. 5 style), one panel per arm, one line per model.

    Parameters
    ----------
    scores : xarray.Dataset
        :func:`murk.results.scores_dataset` (``reliability_count``,
        ``reliability_confidence``, ``reliability_accuracy`` over model, arm,
        task, confidence, bin), pooled over the sweep levels 1-8.
    task : {"t2", "t3"}
    confidence : {"c_int", "verbal_conf"}
    arms : sequence of str
    marked : sequence of str, optional
        Models labelled with a † (:func:`model_label`): those whose median clean
        option mass is below the threshold (:func:`murk.results.low_option_mass`).

    Returns
    -------
    matplotlib Figure
        Accuracy against mean confidence per bin (markers sized by the share
        of answers in the bin), the diagonal of perfect calibration, and the
        confident region c >= 0.9 shaded; a panel without answers says so.
    """
    models = [str(m) for m in scores["model"].values]
    colors = model_colors(models)
    fig, axes = plt.subplots(1, len(arms), figsize=(3.4 * len(arms), 3.4), sharey=True, squeeze=False)
    for ax, arm in zip(axes[0], arms):
        ax.plot([0, 1], [0, 1], color="0.5", lw=0.8, ls="--")
        ax.axvspan(0.9, 1.0, color="0.9", lw=0, zorder=0)
        empty = []
        for m in models:
            sel = dict(model=m, arm=arm, task=task, confidence=confidence)
            cnt = scores["reliability_count"].sel(**sel).values
            x = scores["reliability_confidence"].sel(**sel).values
            y = scores["reliability_accuracy"].sel(**sel).values
            ok = cnt > 0
            if not ok.any():
                empty.append(model_label(m, marked, models))
                continue
            share = cnt[ok] / cnt[ok].sum()
            c = colors[m]
            ax.plot(x[ok], y[ok], "-", color=c, lw=1.2)
            ax.scatter(x[ok], y[ok], s=8 + 120 * share, color=c, edgecolor="white", lw=0.4, zorder=3)
        _empty_note(ax, empty, EMPTY_NOTES.get(confidence, "no answers"))
        ax.set_xlim(0, 1)
        ax.set_ylim(-0.02, 1.02)
        ax.set_aspect("equal")
        ax.tick_params(labelsize=FONT)
        ax.set_xlabel(f"mean {READOUT_LABELS.get(confidence, confidence)} in bin", fontsize=9)
        ax.set_title(ARM_TITLES.get(arm, arm), fontsize=9)
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel(f"accuracy in bin ({task})", fontsize=9)
    handles = [plt.Line2D([], [], color=colors[m], marker="o", ms=4, lw=1.2, label=model_label(m, marked, models))
               for m in models]
    handles += [plt.Line2D([], [], color="0.5", ls="--", lw=0.8, label="perfect calibration"),
                matplotlib.patches.Patch(color="0.9", label="confidence ≥ 0.9")]
    fig.tight_layout()
    _legend_below(fig, handles, ncol=min(len(handles), 4))
    return fig


def plot_abstain_comparison(means: xr.Dataset, task: str = "t2", arms=("fog", "underwater"),
                            chance: float | None = None, marked=()):
    """Abstain rate with the main wording, with "I don't know" and accuracy (spec Fig. 6 style).

    One row per model, one column per arm; log-V axis in metres from clear
    (left, clean at the left edge) to murky. Solid with small dots: abstain (main wording);
    wide pale dashed with large open squares: abstain₂ ("I don't know"), drawn beneath, so that
    where both rates coincide each stays visible; dotted: accuracy; bands: bootstrap
    intervals where the point is defined. The model's colour is fixed by
    :func:`model_colors`.

    Parameters
    ----------
    means : xarray.Dataset
        :func:`murk.results.condition_means` (``mean``, ``lo``, ``hi``).
    task : {"t2", "t3"}
    arms : sequence of str
    chance : float, optional
        Chance accuracy, drawn as a thin grey line.
    marked : sequence of str, optional
        Models labelled with a † (:func:`model_label`): those whose median clean
        option mass is below the threshold (:func:`murk.results.low_option_mass`).

    Returns
    -------
    matplotlib Figure
    """
    models = [str(m) for m in means["model"].values]
    colors = model_colors(models)
    vis = sweep_visibility(means)
    x_clean = vis[1] * 2.0
    fig, axes = plt.subplots(len(models), len(arms), figsize=(3.6 * len(arms), 2.0 * len(models) + 0.6),
                             sharex=True, sharey=True, squeeze=False)
    # drawn bottom to top; where two rates coincide (both 0 or 1) the lower one stays visible around the upper:
    # abstain₂ a wide pale dashed line with large open squares, the main wording a thin solid line with small dots
    styles = (("abstain2", "--", "s", "abstain₂ (“I don't know”)"),
              ("abstain", "-", "o", "abstain (main wording)"), ("correct", ":", "^", "accuracy"))
    look = {"abstain2": dict(lw=3.0, alpha=0.55, ms=5.5, mfc="none", mew=1.0, zorder=2),
            "abstain": dict(lw=1.1, ms=3.0, zorder=3), "correct": dict(lw=1.5, ms=3.0, zorder=2.5)}
    for i, m in enumerate(models):
        c = colors[m]
        for j, arm in enumerate(arms):
            ax = axes[i, j]
            empty = []
            for ro, ls, mk, lab in styles:
                d = means.sel(model=m, arm=arm, task=task, readout=ro)
                y = d["mean"].values
                if not np.isfinite(y).any():
                    empty.append(lab)
                    continue
                ok = np.isfinite(y[1:]) & np.isfinite(d["lo"].values[1:]) & np.isfinite(d["hi"].values[1:])
                ax.fill_between(vis[1:], d["lo"].values[1:], d["hi"].values[1:], where=ok, color=c, alpha=0.12, lw=0)
                ax.plot(vis[1:], y[1:], ls, color=c, marker=mk, **look[ro])
                if np.isfinite(y[0]):
                    ax.plot([x_clean], [float(y[0])], mk, color=c, **look[ro])  # clean, not joined
            if empty:
                ax.text(0.5, 0.5, "no values: " + ", ".join(empty), transform=ax.transAxes, ha="center",
                        va="center", fontsize=FONT, color="0.3")
            if chance is not None:
                ax.axhline(chance, color="0.6", lw=0.7)
            ax.axvline(np.sqrt(x_clean * vis[1]), color="0.8", lw=0.6)
            level_axis(ax, vis[1:], x_clean)
            ax.set_ylim(-0.06, 1.06)  # markers at 0 and 1 drawn whole
            ax.tick_params(axis="y", labelsize=FONT)
            ax.grid(alpha=0.3)
            if i == 0:
                ax.set_title(ARM_TITLES.get(arm, arm), fontsize=9)
            if i == len(models) - 1:
                ax.set_xlabel("visibility (m)", fontsize=9)
            if j == 0:
                ax.set_ylabel(model_label(m, marked, models), fontsize=FONT, color=c)
    handles = [plt.Line2D([], [], color="0.2", ls=ls, marker=mk, label=lab, **{k: v for k, v in look[ro].items()
                                                                           if k != "zorder"})
               for ro, ls, mk, lab in (styles[1], styles[0], styles[2])]
    if chance is not None:
        handles.append(plt.Line2D([], [], color="0.6", lw=0.7, label="chance"))
    fig.text(0.005, 0.5, f"rate ({task})", rotation=90, va="center", fontsize=9)
    fig.tight_layout(rect=(0.02, 0, 1, 1))
    _legend_below(fig, handles, ncol=len(handles))
    return fig


#: Levels of the spec's Figure 2 (m): six of the sweep's eight, clear to murky.
SCENE_LEVELS_M = (250.0, 62.5, 15.625, 7.8125, 3.90625, 1.953125)


def plot_scene_levels(image, depth_m, bbox, visibilities_m=SCENE_LEVELS_M, *, box_width_px: int = 8,
                      depth_label: str | None = None, approximate: bool = False):
    """Figure 2 of the spec: one scene at six levels, fog (top) and underwater (bottom).

    Each panel is the image as presented to the models: degraded first
    (:func:`murk.scene.fog_sweep` / :func:`murk.scene.underwater_sweep`, Eq. 1 in
    linear RGB), then the red target box drawn (:func:`murk.scene.draw_box`).

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
    from murk import scene

    levels = np.asarray(visibilities_m, dtype=np.float64)
    rows = {"fog": scene.fog_sweep(image, depth_m, levels),
            "underwater": scene.underwater_sweep(image, depth_m, levels)}
    h, w = image.shape[:2]
    n = levels.size
    panel_w = 1.6
    fig, axes = plt.subplots(2, n, figsize=(panel_w * n, 2 * panel_w * h / w + 0.8), squeeze=False)
    for r, (arm, stack) in enumerate(rows.items()):
        for c, v in enumerate(levels):
            ax = axes[r, c]
            ax.imshow(scene.draw_box(stack[c], bbox, box_width_px), interpolation="lanczos")
            ax.set_xticks([])
            ax.set_yticks([])
            for side in ax.spines.values():
                side.set_visible(False)
            sym = "V" if arm == "fog" else r"$V_\mathrm{best}$"
            ax.set_title(f"{sym} = {fmt_level(v)} m", fontsize=9)
        axes[r, 0].set_ylabel(arm, fontsize=9)
    if depth_label:
        note = " (approximate: metres rest on the assumed depth scale)" if approximate else ""
        fig.suptitle(f"depth: {plot_text(depth_label)}{note}", fontsize=9)
    fig.tight_layout()
    return fig


TASK_TITLES = {"t2": "t2 (identification)", "t3": "t3 (verification)"}
#: height of one row (a model's W for one signal) of the blind-spot figure (in)
BLIND_SPOT_ROW_IN = 0.15


def _blind_spot_panel(ax, crossings: xr.Dataset, task: str, arm: str, signals, models: list[str], colors: dict,
                      marked, kinds: set) -> None:
    """One panel of the blind-spot figure: the W of each (signal, model) of one task and arm, a row each,
    signals in groups from the top; adds the kinds of mark drawn ("point", "lower", "upper") to ``kinds``."""
    ticks, labels = [], []
    for i, sig in enumerate(signals):
        for j, model in enumerate(models):
            y = -(i * (len(models) + 1) + j)
            c = crossings.sel(model=model, arm=arm, task=task, readout=sig)
            w, lo, hi = (float(c[k]) for k in ("w", "w_lo", "w_hi"))
            bound = bool(c["w_lower_bound"])
            upper = bool(c["w_upper_bound"]) if "w_upper_bound" in c else False
            if np.isfinite(w):
                if np.isfinite(lo) and np.isfinite(hi):
                    ax.plot([lo, hi], [y, y], color=colors[model], lw=1.5)
                kind = "lower" if bound else "upper" if upper else "point"
                kinds.add(kind)
                ax.plot([w], [y], {"lower": ">", "upper": "<", "point": "o"}[kind], color=colors[model], ms=4.5)
            else:  # the note stays inside its panel (clipped: a long model name is cut, never "W undefined")
                who = f" · {model_label(model, marked, models)}" if len(models) > 1 else ""
                ax.text(0.02, y, f"W undefined{who}", transform=ax.get_yaxis_transform(), fontsize=6.5,
                        va="center", color=colors[model], clip_on=True,
                        bbox=dict(facecolor="white", edgecolor="none", pad=0.3, alpha=0.85))  # over the W = 0 line
            ticks.append(y)
            labels.append(READOUT_LABELS.get(sig, sig) if j == 0 else "")
    ax.axvline(0, color="0.3", ls="--", lw=1)
    if not any(np.isfinite(float(crossings["w"].sel(model=m, arm=arm, task=task, readout=s_)))
               for m in models for s_ in signals):
        ax.set_xlim(-1, 1)  # nothing to show: W = 0 in the middle, the notes on the left
    ax.set_yticks(ticks)
    ax.set_yticklabels(labels, fontsize=FONT)
    # a row's marks and its label stay clear of the frame: half a group's gap above the first row and below the last
    ax.set_ylim(min(ticks) - 0.9, 0.9)
    ax.tick_params(axis="x", labelsize=FONT)
    ax.set_xlabel(r"W = log$_{10}$(V$_\mathrm{acc}$ / V$_\mathrm{aware}$) (decades)", fontsize=9)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(5))  # tick labels apart at any range
    ax.set_title(ARM_TITLES.get(arm, arm), fontsize=9)
    ax.grid(alpha=0.3, axis="x")


def plot_blind_spot_widths(crossings: xr.Dataset, tasks=("t2", "t3"), arms=("fog", "underwater"),
                           signals=("c_int", "verbal_conf", "abstain", "abstain2"), marked=()):
    """Blind-spot widths W with bootstrap intervals (spec Fig. 4): one row of panels per task (t2 in the upper
    half, t3 in the lower, as the spec), one panel per arm.

    Parameters
    ----------
    crossings : Dataset from :func:`murk.results.crossing_table`
        ``w``, ``w_lo``, ``w_hi`` (decades) and ``w_lower_bound`` (and
        ``w_upper_bound``) over (model, arm, task, readout).
    tasks : str or sequence of str
        The tasks, top to bottom (default t2 then t3, spec Fig. 4); one task (a str) draws one row.
    arms : sequence of str
        The arms, left to right.
    signals : sequence of str
        The awareness signals, top to bottom within a panel (a group of one row per model each).
    marked : sequence of str, optional
        Models labelled with a † (:func:`model_label`): those whose median clean
        option mass is below the threshold (:func:`murk.results.low_option_mass`).

    Returns
    -------
    matplotlib Figure, (len(tasks) × len(arms)) axes, row-major. A crossing on both sides is a dot with its
    interval; a lower bound (censored awareness crossing) a right-pointing triangle, an upper
    bound (censored accuracy crossing) a left-pointing one; an undefined W (no
    crossing of either) is written "W undefined" with no interval. The legend
    lists the marks that occur. W = 0 (awareness falls with accuracy) is the
    dashed line.

    Raises
    ------
    KeyError
        A task, arm, signal or model not in ``crossings``.
    """
    tasks = (tasks,) if isinstance(tasks, str) else tuple(tasks)
    models = [str(m) for m in crossings["model"].values]
    colors = model_colors(models)
    n_rows = len(signals) * (len(models) + 1) + 1
    fig = plt.figure(figsize=(3.6 * len(arms), len(tasks) * (1.2 + BLIND_SPOT_ROW_IN * n_rows)), layout="constrained")
    kinds: set[str] = set()
    for sub, task in zip(np.atleast_1d(fig.subfigures(len(tasks), 1)), tasks):  # a task's half, titled
        sub.suptitle(TASK_TITLES.get(task, task), fontsize=9, fontweight="bold")
        for ax, arm in zip(sub.subplots(1, len(arms), sharey=True, squeeze=False)[0], arms):
            _blind_spot_panel(ax, crossings, task, arm, signals, models, colors, marked, kinds)
    handles = [plt.Line2D([], [], color=colors[m], lw=1.5, label=model_label(m, marked, models)) for m in models]
    names = {"point": ("o", "both cross"), "lower": (">", "lower bound (awareness never crosses)"),
             "upper": ("<", "upper bound (accuracy never crosses)")}
    handles += [plt.Line2D([], [], color="0.3", marker=names[k][0], ls="none", ms=5, label=names[k][1])
                for k in ("point", "lower", "upper") if k in kinds]
    fig.suptitle("blind-spot width W", fontsize=9)
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 3), fontsize=FONT, frameon=False)
    return fig


def plot_nominal_vs_physical(means: xr.Dataset, v_eq_median_m, task: str = "t2", readout: str = "correct",
                             chance: float | None = None, marked=()):
    """Nominal ImageNet-C severities placed on the physical axis (spec Fig. 7).

    Parameters
    ----------
    means : Dataset from :func:`murk.results.condition_means`
    v_eq_median_m : sequence of 5 floats
        Median gain-matched equivalent visibility (m) of severities 1-5
        (spec Table VII, :func:`murk.scene.table_vii`).
    task, readout : str
    chance : float, optional
    marked : sequence of str, optional
        Models labelled with a † (:func:`model_label`): those whose median clean
        option mass is below the threshold (:func:`murk.results.low_option_mass`).

    Returns
    -------
    matplotlib Figure: each model's fog curve (line) and its ImageNet-C
    severities (triangles) at their equivalent visibilities; the severities are
    named once, above the axes (staggered where they lie close), at dotted
    lines; the legend sits below the axes.
    """
    from matplotlib.transforms import blended_transform_factory

    colors = model_colors(list(means["model"].values))
    vis = sweep_visibility(means)
    sev_x = np.asarray(v_eq_median_m, float)
    fig, ax = plt.subplots(figsize=(7.0, 3.6))
    for model in means["model"].values:
        c = colors[str(model)]
        fog = means["mean"].sel(model=model, arm="fog", task=task, readout=readout).values
        ax.plot(vis[1:], fog[1:], "-o", color=c, ms=3, lw=1.3)
        nom = means["mean"].sel(model=model, arm="imagenet_c", task=task, readout=readout).values[1:6]
        ok = np.isfinite(sev_x) & np.isfinite(nom)
        ax.plot(sev_x[ok], nom[ok], "^", color=c, ms=6, mec="k", mew=0.5)
    if chance is not None:
        ax.axhline(chance, color="0.3", ls="--", lw=1)
    finite = sev_x[np.isfinite(sev_x)]
    left = max(vis[1], finite.max() if finite.size else vis[1]) * 1.4
    level_axis(ax, vis[1:])
    ax.set_xlim(left, vis[-1] / 1.4)
    trans = blended_transform_factory(ax.transData, ax.transAxes)
    prev_x, row = None, 0
    for s, x in sorted(zip(range(1, 6), sev_x), key=lambda t: -t[1] if np.isfinite(t[1]) else 0):
        if not np.isfinite(x):
            continue
        row = (1 - row) if prev_x is not None and prev_x / x < 1.25 else 0
        prev_x = x
        ax.axvline(x, color="0.75", ls=":", lw=0.8, zorder=0)
        ax.text(x, 1.02 + 0.07 * row, str(s), transform=trans, ha="center", va="bottom", fontsize=FONT)
    ax.text(0.0, 1.17, "ImageNet-C severity at its equivalent V:", transform=ax.transAxes, fontsize=FONT,
            va="bottom")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("visibility (m)", fontsize=9)
    ax.set_ylabel(f"{READOUT_LABELS.get(readout, readout)} ({task})", fontsize=9)
    ax.tick_params(axis="y", labelsize=FONT)
    ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], color=colors[str(m)], marker="o", ms=3, lw=1.3,
                          label=f"{model_label(m, marked, means['model'].values)}, fog")
               for m in means["model"].values]
    handles.append(plt.Line2D([], [], color="0.5", marker="^", mec="k", mew=0.5, ls="none", ms=6,
                              label="ImageNet-C severity"))
    if chance is not None:
        handles.append(plt.Line2D([], [], color="0.3", ls="--", lw=1, label="chance"))
    fig.tight_layout()
    _legend_below(fig, handles, ncol=2)
    return fig


#: the abstain decision as a tile of the examples figure writes it (spec Fig. 9): either way, so that "answered"
#: never reads as "not shown"
ABSTAIN_WORDS = {True: "abst.", False: "ans."}


def example_caption(answer: str, correct, c_int: float, verbal_conf: float, abstained) -> str:
    """The text under one tile of the examples figure (spec Fig. 9): the answer with ✓ (correct) or ✗,
    then the internal confidence c, the verbalized confidence v and the abstain decision, "abst." (the model
    chose the abstain option) or "ans." (it did not), "abst. n/a" where the read-out is missing.

    Parameters
    ----------
    answer : str
        The chosen option as text ("n/a" where none).
    correct : float or bool
        1 (True) where the answer is correct; anything else is written ✗.
    c_int, verbal_conf : float
        Confidences in [0, 1]; NaN is written "n/a" (:func:`murk.report.fmt`).
    abstained : float or bool
        1 (True) abstained, 0 (False) answered, NaN not read.

    Returns
    -------
    str, two lines.
    """
    from murk.report._format import fmt

    a = float(abstained) if abstained is not None else float("nan")
    decision = ABSTAIN_WORDS[a == 1] if np.isfinite(a) else "abst. n/a"
    return f"{plot_text(answer)} {'✓' if correct == 1 else '✗'}\nc={fmt(c_int)} v={fmt(verbal_conf)} {decision}"


def plot_item_grid(tiles, row_labels, col_labels, captions=None, tile_px: float = 1.6, title: str | None = None):
    """A grid of rendered images with a caption under each (spec Figs. 2 and 9).

    Parameters
    ----------
    tiles : nested list, rows × columns of uint8 (H, W, 3) images
    row_labels, col_labels : list of str
    captions : nested list of str, optional
        Text under each tile (e.g. a model's answer and confidences, :func:`example_caption`).
    tile_px : float
        Width of a tile in inches.
    title : str, optional
        Written above the grid (e.g. the model whose read-outs the captions give).

    Returns
    -------
    matplotlib Figure
    """
    n_r, n_c = len(tiles), len(tiles[0])
    fig, axes = plt.subplots(n_r, n_c, figsize=(tile_px * n_c, tile_px * n_r * 0.95 + (0.5 * n_r if captions else 0)),
                             squeeze=False)
    for r in range(n_r):
        for c in range(n_c):
            ax = axes[r, c]
            ax.imshow(tiles[r][c])
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(col_labels[c], fontsize=FONT)
            if c == 0:
                ax.set_ylabel(row_labels[r], fontsize=FONT)
            if captions:
                ax.set_xlabel(captions[r][c], fontsize=7)
    if title:   # in a strip of its own above the column titles, clear of a pipeline-check banner above the figure
        h = fig.get_figheight()
        fig.suptitle(title, fontsize=9, y=1.0 - 0.07 / h, va="top")
        fig.tight_layout(pad=0.3, rect=(0, 0, 1, 1 - 0.38 / h))
    else:
        fig.tight_layout(pad=0.3)
    return fig


