"""murk.report: plotting functions take data and return a figure; what the reader sees is checked here."""

import re

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import xarray as xr  # noqa: E402
from PIL import Image  # noqa: E402

from murk.report import _figure_files
from murk.report import _figures as figures  # noqa: E402
from murk.results import _cube as cube  # noqa: E402
from murk.scene import _physics as physics  # noqa: E402

MODELS = ["org/model-a", "murk-tiny/model-b"]


@pytest.fixture(autouse=True)
def _close_figures():
    """Each test's figures are closed after it (memory; matplotlib warns past 20 open figures)."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")
SIGNALS = ["correct", "c_int", "verbal_conf", "abstain", "abstain2"]


def _means(verbal_nan: bool = True) -> xr.Dataset:
    vis = np.r_[np.inf, physics.SWEEP_M]
    shape = (len(MODELS), len(cube.ARMS), vis.size, 2, len(SIGNALS))
    mean = np.broadcast_to(np.linspace(0.95, 0.25, vis.size)[None, None, :, None, None], shape).copy()
    if verbal_nan:
        mean[..., SIGNALS.index("verbal_conf")] = np.nan
    coords = {"model": MODELS, "arm": list(cube.ARMS), "level": np.arange(vis.size), "task": ["t2", "t3"],
              "readout": SIGNALS, "visibility_m": ("level", vis)}
    dims = ("model", "arm", "level", "task", "readout")
    return xr.Dataset({"mean": (dims, mean), "lo": (dims, mean - 0.05), "hi": (dims, mean + 0.05)}, coords=coords)


def _texts(fig) -> str:
    return " ".join(t.get_text() for ax in fig.axes for t in ax.texts) + " " + " ".join(
        t.get_text() for t in fig.texts)


def _legend_labels(fig) -> list[str]:
    return [t.get_text() for leg in fig.legends for t in leg.get_texts()]


def test_levels_are_written_as_the_spec(tmp_path):
    fig = figures.plot_signal_vs_visibility(_means(), "correct", chance=0.25)
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels == ["clean", "250", "125", "62.5", "31.3", "15.6", "7.8", "3.9", "1.95"]


def test_an_empty_panel_says_why_and_the_legend_names_only_what_is_drawn():
    fig = figures.plot_signal_vs_visibility(_means(), "verbal_conf", chance=0.25, reference="correct")
    assert _texts(fig).count("no parseable verbalized confidence") == 2       # one note per arm
    labels = _legend_labels(fig)
    assert "accuracy" in labels and "chance" in labels and "model-a" in labels  # the reference lines are drawn
    fig = figures.plot_signal_vs_visibility(_means(), "c_int")
    assert "accuracy" not in _legend_labels(fig) and "chance" not in _legend_labels(fig)
    # the legend sits outside the data: below every axes
    fig.canvas.draw()
    leg = fig.legends[0].get_window_extent()
    assert all(leg.y1 <= ax.get_window_extent().y0 for ax in fig.axes)


def _crossings(w, lower=False, upper=False, lo=-0.1, hi=0.3) -> xr.Dataset:
    dims = ("model", "arm", "task", "readout")
    shape = (len(MODELS), 2, 2, len(SIGNALS))
    full = lambda v: np.full(shape, v)  # noqa: E731
    coords = {"model": MODELS, "arm": ["fog", "underwater"], "task": ["t2", "t3"], "readout": SIGNALS}
    return xr.Dataset({"w": (dims, full(w)), "w_lo": (dims, full(lo)), "w_hi": (dims, full(hi)),
                       "w_lower_bound": (dims, full(lower)), "w_upper_bound": (dims, full(upper))}, coords=coords)


def test_blind_spot_marks_match_the_legend_and_undefined_points_have_no_interval():
    fig = figures.plot_blind_spot_widths(_crossings(np.nan))   # W undefined, yet the bootstrap has an interval
    segments = [ln for ax in fig.axes for ln in ax.get_lines() if len(ln.get_xdata()) == 2 and
                np.ptp(np.asarray(ln.get_ydata(), float)) == 0 and np.ptp(np.asarray(ln.get_xdata(), float)) > 0]
    assert segments == []                                      # no interval drawn for an undefined point
    assert "W undefined" in _texts(fig)
    assert not any("bound" in lab or "cross" in lab for lab in _legend_labels(fig))   # no mark, no promise
    assert "▶" not in _texts(fig) and "◀" not in _texts(fig)
    fig = figures.plot_blind_spot_widths(_crossings(0.8, lower=True))
    labels = _legend_labels(fig)
    assert any("lower bound" in lab for lab in labels) and not any("upper bound" in lab for lab in labels)


def test_nominal_figure_keeps_labels_apart_and_the_legend_off_the_data():
    fig = figures.plot_nominal_vs_physical(_means(), [110, 82, 67, 65, 55], chance=0.25)
    fig.canvas.draw()
    ax = fig.axes[0]
    sev = [t for t in ax.texts if t.get_text() in {"1", "2", "3", "4", "5"}]
    assert sorted(t.get_text() for t in sev) == ["1", "2", "3", "4", "5"]
    boxes = [t.get_window_extent() for t in sev]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])   # 67 and 65 m: staggered
    leg = fig.legends[0].get_window_extent()
    assert leg.y1 <= ax.get_window_extent().y0


def _red_share(png, rows=slice(None)) -> float:
    a = np.asarray(Image.open(png).convert("RGB"), dtype=int)[rows]
    red = (np.abs(a - np.array([0xB2, 0x18, 0x2B])).sum(-1) < 60)
    return float(red.mean())


def test_pipeline_check_mark_is_in_the_image_file(tmp_path):
    png, pdf = _figure_files.save(figures.plot_signal_vs_visibility(_means(), "correct"), tmp_path, "marked",
                            pipeline_check=True)
    plain, _ = _figure_files.save(figures.plot_signal_vs_visibility(_means(), "correct"), tmp_path, "plain")
    assert pdf.read_bytes()[:4] == b"%PDF" and b"PIPELINE" not in plain.read_bytes()
    top = slice(0, 60)
    assert _red_share(png, top) > 0.01 and _red_share(plain, top) == 0.0
    assert Image.open(png).size[1] > Image.open(plain).size[1]   # the banner adds to the image, over no data


def test_without_pdf_only_the_png_is_written_and_an_old_pdf_is_left_as_it_was(tmp_path):
    """The run setting figure_pdf false (murk.core.SCHEMA): the PNG alone, the same pixels as with the PDF."""
    both = _figure_files.save(_figure_files.placeholder("x"), tmp_path / "both", "f")
    alone = _figure_files.save(_figure_files.placeholder("x"), tmp_path / "alone", "f", pdf=False)
    assert [p.name for p in both] == ["f.png", "f.pdf"] and [p.name for p in alone] == ["f.png"]
    assert sorted(p.name for p in (tmp_path / "alone").iterdir()) == ["f.png"]   # no temporary file left either
    assert np.array_equal(np.asarray(Image.open(both[0])), np.asarray(Image.open(alone[0])))
    old = both[1].read_bytes()
    _figure_files.save(_figure_files.placeholder("y"), tmp_path / "both", "f", pdf=False)
    assert both[1].read_bytes() == old


def test_placeholder_states_its_text():
    fig = _figure_files.placeholder("examples: not computed in this run")
    assert "not computed in this run" in _texts(fig)


@pytest.mark.parametrize("n_models", [1, 3])
def test_abstain_comparison_has_one_row_per_model(n_models):
    m = _means().isel(model=[0] * n_models).assign_coords(model=[f"m{i}" for i in range(n_models)])
    fig = figures.plot_abstain_comparison(m, chance=0.25)
    assert len(fig.axes) == 2 * n_models


def test_a_model_below_the_option_mass_threshold_carries_its_dagger_in_every_legend():
    """Issue 12: a model whose median clean option mass is below the threshold is marked † wherever it is drawn."""
    marked = ["murk-tiny/model-b"]
    assert figures.model_label("murk-tiny/model-b", marked) == "model-b †"
    assert figures.model_label("org/model-a", marked) == "model-a"
    means = _means(verbal_nan=False)
    figs = {"signal": figures.plot_signal_vs_visibility(means, "correct", chance=0.25, marked=marked),
            "nominal": figures.plot_nominal_vs_physical(means, [120, 90, 70, 65, 50], marked=marked),
            "blind spot": figures.plot_blind_spot_widths(_crossings(0.2), marked=marked)}
    for what, fig in figs.items():
        labels = _legend_labels(fig)
        assert any(lab.startswith("model-b †") for lab in labels), (what, labels)
        assert not any(lab.startswith("model-a †") for lab in labels), (what, labels)
    fig = figures.plot_abstain_comparison(means, marked=marked)      # one row per model: the row label
    assert sorted(ax.get_ylabel() for ax in fig.axes if ax.get_ylabel()) == ["model-a", "model-b †"]
    # an empty panel's note names the model with its mark
    fig = figures.plot_signal_vs_visibility(_means(), "verbal_conf", marked=marked)
    assert "model-b †" in _texts(fig)
    # without marks, nothing is marked
    assert "†" not in " ".join(_legend_labels(figures.plot_signal_vs_visibility(means, "correct")))


def test_display_names_are_the_shortest_unique_suffixes():
    """Issue 20: two checkpoints with the same last part, or two local folders ``…/run1/final``, keep apart."""
    names = figures.display_names(["murk-tiny/smolvlm", "murk-realformat/smolvlm", "murk-tiny/qwen3vl"],
                                  marked=["murk-tiny/smolvlm"])
    assert names == {"murk-tiny/smolvlm": "murk-tiny/smolvlm †", "murk-realformat/smolvlm": "murk-realformat/smolvlm",
                     "murk-tiny/qwen3vl": "qwen3vl"}
    folders = figures.display_names(["/data/a/run1/final", "/data/a/run2/final", "/data/b/run1/final/"])
    assert folders == {"/data/a/run1/final": "a/run1/final", "/data/a/run2/final": "run2/final",
                       "/data/b/run1/final/": "b/run1/final"}
    assert figures.display_names(["org/m"]) == {"org/m": "m"} and figures._short_name("org/m") == "m"
    # an id that is a suffix of another is named in full, and the names stay distinct
    both = figures.display_names(["smolvlm", "murk-tiny/smolvlm"])
    assert len(set(both.values())) == 2
    # Windows folders split too
    assert figures.display_names(["C:\\runs\\x\\final", "C:\\runs\\y\\final"])["C:\\runs\\x\\final"] == "x/final"


@pytest.mark.parametrize("a, b, shown", [
    ("/ckpt/a/smolvlm", "/ckpt/b/smоlvlm", ("a/smolvlm", "b/smоlvlm")),           # Cyrillic о: the parents tell
    ("/ckpt/smolvlm", "/ckpt/smоlvlm", None),                                         # ... nothing tells: a digest
    ("runs/Qwen", "runs/Ｑwen", None),                                                 # a full-width Q (NFKC)
    ("runs/x\u200b/final", "runs/x/final", None),                                     # a zero-width space
    ("org/model-a", "org/model\u2010a", None),                                        # a Unicode hyphen
    ("org/a/m", "org/b/m", ("a/m", "b/m")),                                           # plain: unchanged
])
def test_display_names_that_would_print_alike_are_told_apart(a, b, shown):
    """Issue 49: two folders whose names differ by a homoglyph, a compatibility form or an invisible character
    keep the components that tell them apart, or carry a digest of their id; an invisible character is shown."""
    names = figures.display_names([a, b], marked=[b])
    assert names[b].endswith(" †") and len(set(names.values())) == 2
    plain = {m: n.removesuffix(" †") for m, n in names.items()}
    assert figures._skeleton(plain[a]) != figures._skeleton(plain[b])   # they print apart
    if shown:
        assert (plain[a], plain[b]) == shown
    else:
        for m in (a, b):
            assert re.fullmatch(r".* \(#[0-9a-f]{6}\)", plain[m]), plain[m]
    assert all("\u200b" not in n for n in names.values())


def test_the_skeleton_check_can_fail():
    """Without the skeleton the homoglyph pair would get two names that print alike."""
    assert figures._skeleton("smolvlm") == figures._skeleton("smоlvlm") != figures._skeleton("smolvim")


def test_legends_tell_models_with_the_same_last_part_apart():
    models = ["murk-tiny/smolvlm", "murk-realformat/smolvlm"]
    means = _means(verbal_nan=False).assign_coords(model=models)
    marked = ["murk-tiny/smolvlm"]
    assert figures.model_label(models[1], marked, models) == "murk-realformat/smolvlm"
    figs = {"signal": figures.plot_signal_vs_visibility(means, "correct", chance=0.25, marked=marked),
            "nominal": figures.plot_nominal_vs_physical(means, [120, 90, 70, 65, 50], marked=marked),
            "blind spot": figures.plot_blind_spot_widths(_crossings(0.2).assign_coords(model=models), marked=marked)}
    for what, fig in figs.items():
        labels = _legend_labels(fig)
        assert any(lab.startswith("murk-tiny/smolvlm †") for lab in labels), (what, labels)
        assert any(lab.startswith("murk-realformat/smolvlm") for lab in labels), (what, labels)
    rows = figures.plot_abstain_comparison(means, marked=marked)
    assert sorted(ax.get_ylabel() for ax in rows.axes if ax.get_ylabel()) == ["murk-realformat/smolvlm", "murk-tiny/smolvlm †"]


def test_signals_figure_is_the_spec_fig3_grid():
    """Issue 20: one figure of accuracy, internal and verbalized confidence and abstain rate against V by arm
    (spec Fig. 3; Fig. 8 for t3): a panel per signal and arm, models with their †, chance in the accuracy and
    confidence panels, the abstain floor in the abstain panels, empty panels saying why."""
    marked = ["murk-tiny/model-b"]
    fig = figures.plot_signals(_means(), "t2", chance=0.25, marked=marked)
    assert len(fig.axes) == len(figures.FIG3_SIGNALS) * 2
    rows = [ax.get_ylabel() for ax in fig.axes if ax.get_ylabel()]
    assert rows == [f"{figures.READOUT_LABELS[s]} (t2)" for s in figures.FIG3_SIGNALS]
    assert [ax.get_title() for ax in fig.axes[:2]] == [figures.ARM_TITLES["fog"], figures.ARM_TITLES["underwater"]]
    labels = _legend_labels(fig)
    assert "model-b †" in labels and "model-a" in labels and "chance" in labels and "abstain floor (one)" in labels
    assert _texts(fig).count("no parseable verbalized confidence") == 2   # the verbal row, both arms

    def hlines(ax):
        return sorted(round(float(ln.get_ydata()[0]), 3) for ln in ax.lines
                      if len(set(np.asarray(ln.get_ydata(), float))) == 1 and ln.get_linestyle() in ("--", "-."))
    acc, abstain = fig.axes[0], fig.axes[2 * figures.FIG3_SIGNALS.index("abstain")]
    assert hlines(acc) == [0.25] and hlines(abstain) == [1.0]
    # each model's curve is drawn with its band: as many lines as models in a panel with values
    assert sum(1 for ln in acc.lines if ln.get_marker() == "o") == len(MODELS)
    fig.canvas.draw()
    leg = fig.legends[0].get_window_extent()
    assert all(leg.y1 <= ax.get_window_extent().y0 for ax in fig.axes)
    with pytest.raises(KeyError, match="signal"):
        figures.plot_signals(_means(), "t2", signals=["nope"])


def test_figure_files_carry_the_identities(tmp_path):
    """Issue 21: each figure file records the run and analysis identities (PNG text chunks, PDF Subject/Keywords)."""
    ids = {"run_id": "r-111111111111", "analysis_id": "a-aaaaaaaaaaaa"}
    try:
        _figure_files.set_identity(**ids)
        png, pdf = _figure_files.save(_figure_files.placeholder("x"), tmp_path, "with")
    finally:
        _figure_files.set_identity()
    plain, _ = _figure_files.save(_figure_files.placeholder("x"), tmp_path, "without")
    assert _figure_files._file_identity(png) == ids and _figure_files._file_identity(plain) == {}
    assert b"r-111111111111" in pdf.read_bytes() and b"a-aaaaaaaaaaaa" in pdf.read_bytes()
    assert _figure_files._file_identity(_figure_files.save(_figure_files.placeholder("x"), tmp_path, "given",
                                              identity={"run_id": "r-2"})[0]) == {"run_id": "r-2"}


def _crossings_by_task(models, w_by_task: dict, undefined=()) -> xr.Dataset:
    """Crossings of ``models`` whose W is ``w_by_task[task]`` everywhere, NaN (undefined) for the models in
    ``undefined``."""
    dims = ("model", "arm", "task", "readout")
    tasks = list(w_by_task)
    w = np.broadcast_to(np.array([w_by_task[t] for t in tasks], float)[None, None, :, None],
                        (len(models), 2, len(tasks), len(SIGNALS))).copy()
    for m in undefined:
        w[models.index(m)] = np.nan
    flags = np.zeros(w.shape, bool)
    coords = {"model": models, "arm": ["fog", "underwater"], "task": tasks, "readout": SIGNALS}
    return xr.Dataset({"w": (dims, w), "w_lo": (dims, w - 0.1), "w_hi": (dims, w + 0.1),
                       "w_lower_bound": (dims, flags), "w_upper_bound": (dims, flags)}, coords=coords)


def test_blind_spot_is_one_figure_with_t2_above_t3():
    """Issue 39: spec Fig. 4 is one figure, t2 in the upper half and t3 in the lower, each half titled by its
    task and drawing that task's W (one panel per arm)."""
    fig = figures.plot_blind_spot_widths(_crossings_by_task(MODELS, {"t2": 0.2, "t3": 0.7}))
    assert len(fig.axes) == 4
    halves = [sub.get_suptitle() if hasattr(sub, "get_suptitle") else sub._suptitle.get_text() for sub in fig.subfigs]
    assert halves == ["t2 (identification)", "t3 (verification)"]
    fig.canvas.draw()
    upper, lower = fig.axes[:2], fig.axes[2:]
    assert [ax.get_title() for ax in upper] == [ax.get_title() for ax in lower] == [
        figures.ARM_TITLES["fog"], figures.ARM_TITLES["underwater"]]
    assert min(ax.get_window_extent().y0 for ax in upper) > max(ax.get_window_extent().y1 for ax in lower)

    def dots(ax):
        return {round(float(ln.get_xdata()[0]), 3) for ln in ax.lines if ln.get_marker() == "o"}
    assert all(dots(ax) == {0.2} for ax in upper) and all(dots(ax) == {0.7} for ax in lower)
    # one task still draws one half
    assert len(figures.plot_blind_spot_widths(_crossings_by_task(MODELS, {"t2": 0.2, "t3": 0.7}), "t3").axes) == 2


def test_example_tiles_state_the_abstain_decision_both_ways_and_the_figure_names_its_model():
    """Issue 39 (spec Fig. 9): "abst." where the model abstained, "ans." where it answered (never nothing, which
    reads as "not shown"), "n/a" where not read; the grid carries the title it is given (the model's name)."""
    abst = figures.example_caption("dog", 0.0, 0.81, 0.9, 1.0)
    ans = figures.example_caption("dog", 1.0, 0.81, np.nan, 0.0)
    assert abst == "dog ✗\nc=0.81 v=0.90 abst." and ans == "dog ✓\nc=0.81 v=n/a ans."
    assert figures.example_caption("n/a", np.nan, np.nan, np.nan, np.nan).endswith("abst. n/a")
    tile = np.zeros((8, 8, 3), np.uint8)
    fig = figures.plot_item_grid([[tile, tile]], ["dog · fog"], ["clean", "V = 250 m"], [[abst, ans]],
                                 title="read-outs of Qwen3-VL-2B-Instruct (t2)")
    assert fig._suptitle.get_text() == "read-outs of Qwen3-VL-2B-Instruct (t2)"
    assert [ax.get_xlabel() for ax in fig.axes] == [abst, ans]
    assert _overlaps(fig) == []          # the title is drawn over no column title, tile or caption
    banner = _figure_files.stamp_pipeline_check(fig).texts[-2]       # and it is clear of a pipeline-check banner
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    assert not banner.get_bbox_patch().get_window_extent(r).overlaps(fig._suptitle.get_window_extent(r))


#: the study's five models (data/study.yaml), one of them marked †, and the demo's two
STUDY_MODELS = ["Qwen/Qwen3-VL-2B-Instruct", "OpenGVLab/InternVL3_5-2B-HF", "HuggingFaceTB/SmolVLM2-2.2B-Instruct",
                "google/gemma-4-E2B-it", "Qwen/Qwen3-VL-4B-Instruct"]


def _overlaps(fig) -> list[str]:
    """What is drawn over what: a tick label, axis label or title over an axes (its frame and data area) or over
    another such label; a note inside an axes (``ax.texts``) reaching out of it."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    frames = [(ax, ax.get_window_extent(r)) for ax in fig.axes]
    def shown(ticks, lim, at):   # the tick labels drawn: those of ticks within the view limits
        lo, hi = sorted(lim)
        return [t for t in ticks if lo - 1e-9 * abs(hi - lo) <= t.get_position()[at] <= hi + 1e-9 * abs(hi - lo)]

    labels = []
    for ax in fig.axes:
        for t in [*shown(ax.get_xticklabels(), ax.get_xlim(), 0), *shown(ax.get_yticklabels(), ax.get_ylim(), 1),
                  ax.xaxis.label, ax.yaxis.label, ax.title]:
            if t.get_visible() and t.get_text().strip():
                labels.append((f"{t.get_text()!r} of {ax.get_title()!r}", t.get_window_extent(r)))
    for f in (fig, *getattr(fig, "subfigs", ())):        # the figure's (and its halves') titles
        if f._suptitle is not None and f._suptitle.get_text().strip():
            labels.append((f"title {f._suptitle.get_text()!r}", f._suptitle.get_window_extent(r)))
    bad = [f"{name} over the axes {ax.get_title()!r}" for name, box in labels for ax, frame in frames
           if box.overlaps(frame)]
    bad += [f"{a} over {b}" for i, (a, x) in enumerate(labels) for b, y in labels[i + 1:] if x.overlaps(y)]
    for ax, frame in frames:
        for t in ax.texts:
            box = t.get_window_extent(r)
            clipped = (t.get_clip_on() and t.get_clip_box() is not None   # a long note cut at the frame, its start in
                       and np.allclose(t.get_clip_box().extents, frame.extents))
            inside = (box.x0 >= frame.x0 - 1 and (clipped or box.x1 <= frame.x1 + 1)
                      and box.y0 >= frame.y0 - 1 and box.y1 <= frame.y1 + 1)
            if t.get_text().strip() and not inside:
                bad.append(f"note {t.get_text()!r} out of the axes {ax.get_title()!r}")
    return bad


@pytest.mark.parametrize("models, long", [(STUDY_MODELS, True), (["murk-tiny/smolvlm", "murk-tiny/qwen3vl"], False),
                                          (["murk-tiny/smolvlm"], False)], ids=["study", "demo", "one"])
def test_no_label_is_drawn_over_an_axes_in_the_blind_spot_figure(models, long):
    """Issue 39: the last row's label ("W undefined") sat on the axis, and a long one ran over the next panel;
    at the study's size (5 models x 2 arms, the last with a long name), the demo's, and one model, every row, tick
    and axis label stays off every axes and off every other label, and notes stay inside their panel."""
    last = models[-1] + ("-with-a-long-local-folder-name" if long else "")
    models = [*models[:-1], last]
    fig = figures.plot_blind_spot_widths(_crossings_by_task(models, {"t2": 0.2, "t3": -0.3}, undefined=[last]),
                                         marked=[last])
    assert _overlaps(fig) == []
    # the check can fail: a row label moved onto the frame is found
    ax = fig.axes[0]
    ax.set_ylim(min(ax.get_yticks()), max(ax.get_yticks()))
    ax.tick_params(axis="y", pad=-20)
    assert _overlaps(fig)


def test_coinciding_abstain_rates_are_both_visible():
    """Issue 39 (spec Fig. 6): where the main-wording and the "I don't know" abstain rates coincide (both 0), the
    one drawn on top is thinner, with smaller markers, than the one beneath, in another line style and marker, so
    both are seen."""
    means = _means(verbal_nan=False)
    means["mean"].loc[dict(readout=["abstain", "abstain2"])] = 0.0
    fig = figures.plot_abstain_comparison(means, chance=0.25)
    for ax in fig.axes:
        series = [ln for ln in ax.lines if len(ln.get_xdata()) > 2 and not np.ptp(np.asarray(ln.get_ydata(), float))
                  and float(ln.get_ydata()[0]) == 0.0]
        assert len(series) == 2
        below, above = sorted(series, key=lambda ln: ln.get_zorder())
        assert below.get_zorder() < above.get_zorder()
        assert below.get_linewidth() >= above.get_linewidth() + 1.0
        assert below.get_markersize() >= above.get_markersize() + 1.5
        assert below.get_linestyle() != above.get_linestyle() and below.get_marker() != above.get_marker()
    labels = _legend_labels(fig)
    assert any("main wording" in lab for lab in labels) and any("I don't know" in lab for lab in labels)


def test_coinciding_models_are_each_visible_in_the_signal_figures():
    """Issue 39 ("check the others too"): where the curves of several models coincide (here everywhere; in a
    study, rates at 0 or 1), each model keeps a marker of its own shape, and one drawn earlier is larger, so it
    shows around those drawn over it; the legend shows each model's marker."""
    models = [f"org/m{i}" for i in range(5)]
    means = _means(verbal_nan=False).isel(model=[0] * 5).assign_coords(model=models)
    for fig in (figures.plot_signals(means, "t2", chance=0.25), figures.plot_signal_vs_visibility(means, "abstain")):
        for ax in fig.axes:
            series = [ln for ln in ax.lines if len(ln.get_xdata()) > 2 and ln.get_marker() not in (None, "None", "")]
            assert len(series) == len(models)
            assert len({ln.get_marker() for ln in series}) == len(models)
            sizes = [ln.get_markersize() for ln in series]                 # drawing order
            assert all(a >= b + 0.9 for a, b in zip(sizes, sizes[1:])), sizes
        assert len({h.get_marker() for h in fig.legends[0].legend_handles if h.get_label() in
                    [figures.model_label(m, (), models) for m in models]}) == len(models)
