# ---
# jupyter:
#   jupytext:
#     notebook_metadata_filter: -jupytext.text_representation
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Stage 5 · beyond the spec: the monitor, recalibration and risk–coverage
#
# This notebook is the analysis that goes beyond the spec. The study's analysis
# (`notebooks/04_analyse.py`: the cube, RQ1–RQ4, the controls, the abstract)
# ran before it and wrote the cube (`cube.zarr`), the scores
# (`analysis/crossings.nc`) and its numbers (`analysis/numbers-study.json`);
# this one reads them and asks three questions the spec does not:
#
# * how well does a separate **visibility monitor** (stage 3b) estimate the
#   visibility, and does its gate abstain before a model's accuracy collapses?
# * can **recalibration by visibility** close the blind spot?
# * which **abstention signal** ranks the answers best (risk–coverage)?
#
# Each section says what it computes and why, then builds its tables and figures
# in labelled cells (`fig-…`, `tbl-…`), which the paper embeds from the executed
# notebook (`outputs/notebooks/05_beyond.ipynb`). Every number is recorded with
# `record(key, value, …)` in a labelled cell into this notebook's numbers
# fragment (`analysis/numbers-beyond.json`, its provenance beside it); the last
# cell merges the two fragments into the numbers file the paper reads
# (`paper_numbers.json`, `murk.report.merge_numbers`).

# %% tags=["parameters"]
# (one parameter a line, its comment above it: papermill reads `name = value` lines)
# items on which the monitor is re-run with a wrong depth (0: skip)
monitor_sensitivity_items = 20
# each figure also as a vector PDF, figures/<name>.pdf (None: the run settings' figure_pdf, data/workflow.yaml)
figure_pdf = None
output_dir = None

# %% [markdown]
# The libraries, this output root held for the stage (one writer at a time), the
# study's numbers, and the numbers fragment this notebook writes.

# %%
import json
import warnings

import numpy as np
import xarray as xr
from IPython.display import Markdown, display

from murk import core, monitor, pipeline, protocol, readout, report, results, scene
from murk.report import fmt, fmt_estimate, fmt_level, fmt_list, fmt_range, fmt_visibility, fmt_visibility_interval

# one writer per output root (murk.pipeline): refused, writing nothing, while another run holds it
ROOT_LOCK = pipeline.hold_for_stage(output_dir, stage="05_beyond")

FIG_DIR, TABLE_DIR = core.figures_dir(output_dir), core.analysis_dir(output_dir)
# the study's numbers (notebooks/04_analyse.py): its identities, settings and RQ1 verdicts are read here
STUDY = report.load_numbers(report.fragment_file("04_analyse", output_dir))
numbers = report.Numbers(report.fragment_file("05_beyond", output_dir))
record = numbers.record
table, meta = protocol.read_items(output_dir)
cfg = protocol.config_of(meta)   # data/config.yaml with the run's design (murk.protocol; the study's: as it is)
A = cfg["analysis"]
CHANCE = A["chance"]

# %% [markdown]
# Two helpers show what a cell builds, as in the study's notebook (`murk.report.AnalysisOutputs`): `show` saves a
# figure under `figures/` (PNG, and PDF with `figure_pdf`; with the visible pipeline-check mark when the results
# come from random-weight checkpoints) and displays that file, which is what the paper
# embeds; `show_table` displays a Markdown table and keeps a copy under
# `analysis/`. Both accept only the names this notebook declares
# (`murk.report.analysis_figures`, `murk.report.analysis_tables`), the outputs
# the Snakefile's `beyond` rule expects.

# %%
# its pipeline_check is set with the cube, below; the PNG always (what the cells show, the paper embeds)
OUT = report.AnalysisOutputs("05_beyond", FIG_DIR, TABLE_DIR, pdf=core.run_default("figure_pdf", figure_pdf))
show, show_table = OUT.figure, OUT.table
not_computed = report.not_computed_table   # a one-row table saying that this run did not compute what


key = core.model_slug         # a model in numbers keys

# %% [markdown]
# ## The study's cube and scores
#
# The cube the study's analysis merged (`cube.zarr`, restricted to the run's
# design as there), its crossings (`analysis/crossings.nc`) and its analysis
# identity: this notebook extends that analysis, so it records the same
# identities (`run_id`, `analysis_id`) in its numbers and its identity cell,
# and `python -m murk.report.paper` refuses a paper whose two notebooks are of
# two analyses. A cube of another run than the study's numbers is refused.

# %%
#| label: murk-identity
full = protocol.restrict_to_design(results.open_cube(core.cube_store(output_dir)).load(), cfg)
RUN_ID, ANALYSIS_ID = STUDY["run_id"], STUDY["analysis_id"]
if full.attrs.get("run_id") != RUN_ID:
    raise ValueError(f"{core.cube_store(output_dir)} is of run {full.attrs.get('run_id')}, "
                     f"{report.fragment_file('04_analyse', output_dir)} of run {RUN_ID}: run the analyse stage "
                     f"(notebooks/04_analyse.py) again before this one")
ANALYSIS_MODELS = json.loads(STUDY["analysis.models"])
report.set_identity(run_id=RUN_ID, analysis_id=ANALYSIS_ID)   # into every figure file's metadata
record("run_id", RUN_ID)
record("analysis_id", ANALYSIS_ID)
record("analysis.models", STUDY["analysis.models"])
display(pipeline.identity_bundle(run_id=RUN_ID, analysis_id=ANALYSIS_ID, models=ANALYSIS_MODELS), raw=True)

# %% [markdown]
# The models analysed (the VLMs; the monitor's modes are models of the cube
# too), their display names (with the † of a model whose first token is not
# the answer, as in the study), the sweep, and the study's crossings: V_acc of
# each VLM, and the margin of one sweep level below which W is read as "with"
# accuracy. A VLM's W is read only where the study found its accuracy to
# collapse (its RQ1 verdict).

# %%
ds = full.sel(model=[m for m in full["model"].values if m not in monitor.MONITOR_IDS])
VLMS = [str(m) for m in ds["model"].values]
PIPELINE_CHECK = OUT.pipeline_check = bool(ds["pipeline_check"].any())   # the mark on every figure
VIS = results.sweep_visibility(ds)        # level 0 (clean, inf) and the sweep, m (the physical arms' levels)
LOW_MASS = results.low_option_mass(ds)
approximate = bool(int(ds.attrs.get("depth_approximate", 0)))
with xr.open_dataset(TABLE_DIR / "crossings.nc") as f_:
    cross = f_.load()
W_MARGIN = float(cross.attrs.get("w_margin_decades", np.nan))
nominal_file = TABLE_DIR / "nominal_equivalence.nc"
if nominal_file.is_file():
    with xr.open_dataset(nominal_file) as f_:
        nds = f_.load()
ARM_WORDS = {"fog": "in fog", "underwater": "under water"}
_DRAWS: dict[int, np.ndarray] = {}


def name(m: str) -> str:
    """Display name of a model in Markdown, with the † of a model whose median clean option mass is below the
    threshold: escaped so that it shows as written (`murk.report.markdown_text`: a folder's name is data)."""
    return report.markdown_text(report.display_names([*VLMS, str(m)], LOW_MASS)[str(m)])


def label(m: str) -> str:
    """Display name of a model in a figure, with its †: escaped for matplotlib (`murk.report.model_label`)."""
    return report.model_label(m, LOW_MASS, VLMS)


def draw(n: int) -> np.ndarray:
    """The bootstrap draw over ``n`` images, made once per sample size (the study's draw: same seed and size)."""
    if n not in _DRAWS:
        _DRAWS[n] = results.resample_counts(n, A["bootstrap_resamples_crossing"], A["bootstrap_seed"])
    return _DRAWS[n]


def collapses(m: str, arm: str, task: str) -> bool:
    """Whether the study's RQ1 found the accuracy of ``m`` to fall through its mid-way value (a W is meaningful)."""
    return STUDY[f"verdict.rq1.{arm}.{task}.{key(m)}"] in (report.COLLAPSE, report.PARTIAL)


print(f"{len(VLMS)} VLMs, monitor modes: {[m for m in monitor.MONITOR_IDS if m in full['model'].values]}")

# %% [markdown]
# ## Beyond the spec: the visibility monitor
#
# The monitor's V̂ (stage 3b) is scored three ways: its accuracy against the true
# visibility; as an awareness signal, its crossing and W against each VLM's
# V_acc (paired bootstrap; read like RQ2); and as a gate, coverage and risk at
# equal coverage against the VLM's own abstain option and its internal
# confidence, with the threshold picked on one half of the images and reported
# on the other.

# %%
#| label: num-monitor
HAS_MONITOR = monitor.MONITOR_ID in full["model"].values
mid_band = (VIS[1:] >= 3.9) & (VIS[1:] <= 62.5)   # the monitor's band (issue 9's criterion)


# one mode's V̂ on the sweep per physical arm: (P10, P50, P90 over images, within ×2 of V), one definition for both
# modes and every table that states it (murk.monitor.vhat_band)
BAND = {mode: monitor.vhat_band(full["value"].sel(model=mode, task="t2", readout="visibility_hat_m"), VIS[1:],
                                core.PHYSICAL_ARMS) for mode in monitor.MONITOR_IDS if mode in full["model"].values}
if HAS_MONITOR:
    band = BAND[monitor.MONITOR_ID]
    for arm in core.PHYSICAL_ARMS:
        record(f"monitor.share_x2.{arm}", 100 * float(np.mean(band[arm][1][mid_band])), 0)
    BAND_DEPLOYABLE = BAND.get(monitor.MONITOR_DEPLOYABLE_ID, {})   # beside the oracle's, level by level
record("monitor.band", f"{fmt_level(VIS[1:][mid_band].max())}–{fmt_level(VIS[1:][mid_band].min())}" if HAS_MONITOR
       else report.NOT_COMPUTED)
OPAQUE = {}   # arm -> share of the monitor's estimates that are upper bounds (opaque), per sweep level
if HAS_MONITOR:
    mon_t2 = full["value"].sel(model=monitor.MONITOR_ID, task="t2")
    # false abstentions: the clean image is as clear as it gets, so every abstention there is a false one
    a0 = mon_t2.sel(arm="fog", level=0, readout="abstain").values
    ok0 = np.isfinite(a0)
    record("monitor.false_abstain_clean", float(np.mean(a0[ok0] == 1)) if ok0.any() else np.nan)
    record("monitor.false_abstain_clean.count", f"{int(np.sum(a0[ok0] == 1))}/{int(ok0.sum())}")
    for arm in core.PHYSICAL_ARMS:
        code = mon_t2.sel(arm=arm, readout="visibility_hat_censored").isel(level=slice(1, None)).values  # (level, image)
        with np.errstate(invalid="ignore"):
            OPAQUE[arm] = np.array([np.mean(c[np.isfinite(c)] == -1) if np.isfinite(c).any() else np.nan for c in code])
        for k_, v in enumerate(VIS[1:]):
            record(f"monitor.opaque_share.{arm}.{report.level_label(v)}", 100 * OPAQUE[arm][k_], 0)
        record(f"monitor.opaque_share.{arm}.end", 100 * OPAQUE[arm][-1], 0)
record("monitor.threshold_m", monitor.DEFAULT_THRESHOLD_M, 1)
if not HAS_MONITOR:   # one sentence each for what the paper would say about it (no per-arm findings)
    record("finding.monitor.accuracy", "The monitor stage did not run for this output root, so the monitor's "
                                       "estimate V̂ was not computed and nothing is stated about its accuracy.")
    record("finding.monitor.awareness", "Nothing is stated about the monitor as an awareness signal or as a gate: "
                                        "its stage did not run for this output root.")

# %% [markdown]
# The monitor's V̂ against the true visibility, level by level: its median and
# spread over images, against the band within a factor of two.

# %%
#| label: fig-monitor
#| fig-cap: "The monitor's estimate V̂ against the true visibility V: median and P10–P90 over images; grey: within a factor of two (beyond the spec)."
if HAS_MONITOR:
    show(report.plot_monitor_accuracy(VIS[1:], {arm: band[arm][0] for arm in core.PHYSICAL_ARMS}), "monitor_vhat",
         pipeline_check=False)
else:
    show(report.placeholder(f"visibility monitor: {report.NOT_COMPUTED}"), "monitor_vhat", pipeline_check=False)

# %% [markdown]
# The same per level as a table, with the share of estimates that only bound V
# from above (opaque), the deployable mode beside the oracle, and the ImageNet-C
# severities against their own gain-matched equivalent visibility.

# %%
#| label: tbl-monitor-accuracy
#| tbl-cap: "Accuracy of the monitor's visibility estimate per level (oracle: the rendering's depth and arm; deployable: the degraded image alone, its last two columns); upper bounds: the share of the oracle's estimates where most usable pixels are opaque, so that V̂ only bounds V from above (the monitor then abstains); on the ImageNet-C severities, the share of images whose estimate lies within a factor of two of their own gain-matched equivalent visibility (beyond the spec)."
if HAS_MONITOR:
    rows = []
    for arm in core.PHYSICAL_ARMS:
        q, within = band[arm]
        for k_, v in enumerate(VIS[1:]):
            rows.append({"arm": arm, "V (m)": fmt_level(v), "median V̂ (m)": fmt_visibility(q[1, k_]),
                         "P10–P90 (m)": fmt_visibility_interval(q[0, k_], q[2, k_]) or "n/a",
                         "within ×2 (%)": fmt(100 * float(np.nanmean(within[k_])), 0),
                         "upper bounds (%)": fmt(100 * OPAQUE[arm][k_], 0)})
            if BAND_DEPLOYABLE:   # the deployable monitor beside it, level by level
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    q_d, within_d = BAND_DEPLOYABLE[arm]
                    rows[-1].update({"deployable: median V̂ (m)": fmt_visibility(q_d[1, k_]),
                                     "deployable: within ×2 (%)": fmt(100 * float(np.mean(within_d[k_])), 0)})
    sev = full["value"].sel(model=monitor.MONITOR_ID, arm="imagenet_c", task="t2", readout="visibility_hat_m")
    veq = {}
    if nominal_file.is_file():
        veq = {int(s): nds["v_eq_gain_m"].sel(severity=s) for s in nds["severity"].values}
    medians = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for s in range(1, 6):
            v_s = sev.sel(level=s).values
            medians.append(float(np.nanmedian(v_s)) if np.isfinite(v_s).any() else np.nan)
            row = {"arm": "imagenet_c", "V (m)": f"severity {s}", "median V̂ (m)": fmt_visibility(medians[-1]),
                   "P10–P90 (m)": (fmt_visibility_interval(*np.nanpercentile(v_s, [10, 90])) if np.isfinite(v_s).any()
                                   else "n/a"),
                   "within ×2 (%)": "–", "upper bounds (%)": "–",
                   **({"deployable: median V̂ (m)": "–", "deployable: within ×2 (%)": "–"} if BAND_DEPLOYABLE else {})}
            if s in veq:
                ratio = v_s / veq[s].sel(image=full["image"].values).values
                ok = np.isfinite(ratio)
                row["within ×2 (%)"] = (f"{fmt(100 * float(np.mean(np.abs(np.log2(ratio[ok])) <= 1)), 0)} of V_eq"
                                        if ok.any() else "n/a")
            rows.append(row)
    record("monitor.imagenet_c_range", fmt_range(medians, digits=0))
    record("finding.monitor.accuracy", (
        f"At V = {STUDY['cfg.sweep_min_m']} m this is the case for {numbers['monitor.opaque_share.fog.end']} % of "
        f"the images in fog and {numbers['monitor.opaque_share.underwater.end']} % under water. Over the visibilities "
        f"of {numbers['monitor.band']} m, V̂ is within a factor of two of the true V for "
        f"{numbers['monitor.share_x2.fog']} % of the image–level pairs in fog and "
        f"{numbers['monitor.share_x2.underwater']} % under water. On the ImageNet-C severities, whose fog is additive "
        "fractal haze rather than the depth-dependent attenuation the monitor assumes, its median estimate spans "
        f"{numbers['monitor.imagenet_c_range']} m; the last rows of the monitor's accuracy table compare each "
        "image's estimate with its own gain-matched equivalent visibility."))
    md = report.markdown_table(rows)
else:
    md = not_computed("the monitor stage did not run")
show_table(md, "monitor-accuracy")

# %% [markdown]
# The monitor as an awareness signal: its abstain rate and its confidence cross
# like any signal (floors one and zero), and W against each VLM's V_acc says
# whether it abstains before the VLM's accuracy falls (W < 0). The monitor runs
# on every item; against a VLM read out on the first N items only, both
# crossings and the paired bootstrap are over the images they share
# (`murk.results.common_images`), with the draw of that VLM's own scores.

# %%
#| label: tbl-monitor-w
#| tbl-cap: "The monitor as an awareness signal: its crossing visibility and W = log10(V_acc / V_aware) against each VLM, with paired bootstrap intervals (beyond the spec)."
if HAS_MONITOR:
    MODES = [mode for mode in monitor.MONITOR_IDS if mode in full["model"].values]   # the oracle, the deployable mode
    mscores = results.image_scores(full.sel(model=[*MODES, *VLMS]))
    PAIRED = {}   # the images the monitor shares with a VLM -> (positions, draw, bootstrap means over them)
    MON_CROSS = {}   # (arm, signal, shared images) -> the monitor's crossing over them

    def paired(m: str):
        """The images the monitor and VLM ``m`` were both run on (positions), their draw, the resampled means."""
        keep = results.common_images(full, [monitor.MONITOR_ID, m])
        if keep.tobytes() not in PAIRED:
            idx = np.flatnonzero(keep)
            cnt = draw(idx.size)
            PAIRED[keep.tobytes()] = (idx, cnt, results.bootstrap_resample_means(mscores.isel(image=idx), "image",
                                                                                counts=cnt))
        return PAIRED[keep.tobytes()]

    def monitor_crossing(arm: str, signal: str, m: str, mode: str = monitor.MONITOR_ID):
        """The monitor's V_aware (``mode``: the oracle or the deployable one) over the images it shares with ``m``:
        awareness_crossing's result and the crossings of the resamples."""
        idx, cnt, boot = paired(m)
        k = (arm, signal, idx.tobytes(), mode)
        if k not in MON_CROSS:
            # its censored estimates are bounds, so its crossing may be one too
            # (murk.monitor.awareness_crossing: the cube's read-outs are the conservative curve)
            mi = full["value"].sel(model=mode, task="t2").isel(image=idx)
            ac = monitor.awareness_crossing(
                VIS[1:], mi.sel(arm=arm, readout="visibility_hat_m").transpose("level", "image").values,
                mi.sel(arm=arm, readout="visibility_hat_censored").transpose("level", "image").values, signal,
                threshold_m=float(full.attrs.get("monitor_threshold_m", monitor.DEFAULT_THRESHOLD_M)),
                present=mi.sel(arm=arm, readout="c_int").transpose("level", "image").notnull().values,
                counts=cnt, ci=A["ci_level"])
            b_m = boot.sel(model=mode, arm=arm, task="t2", readout=signal).transpose(..., "level")
            vmb, _ = results.crossing_visibility(VIS[1:], b_m.isel(level=slice(1, None)).values,
                                                 b_m.isel(level=0).values, monitor.SIGNAL_FLOOR[signal])
            MON_CROSS[k] = (ac, vmb)
        return MON_CROSS[k]

    def monitor_w(arm: str, signal: str, task: str, m: str, mode: str = monitor.MONITOR_ID):
        """W = log10(V_acc / V_aware) of the monitor (``mode``) against VLM ``m``, with its paired bootstrap
        interval: (w, lo, hi, lower, upper, (V_acc, its side), (V_aware, its side))."""
        _, _, boot = paired(m)
        ac, vmb = monitor_crossing(arm, signal, m, mode)
        vm, side_m = ac["v_cross_m"], ac["censored_side"]
        # the VLM's V_acc over its own images: the monitor runs on every item, so these are the shared ones
        cr = cross.sel(model=m, arm=arm, task=task, readout="correct")
        va, side_a = float(cr["v_cross_m"]), str(cr["censored_side"].values)
        b_a = boot.sel(model=m, arm=arm, task=task, readout="correct").transpose(..., "level")
        vab, _ = results.crossing_visibility(VIS[1:], b_a.isel(level=slice(1, None)).values,
                                             b_a.isel(level=0).values, CHANCE[task])
        # W with its paired interval and p-values (against 0, and that |W| is below one level), for the family's
        # Holm adjustment (murk.monitor.paired_w)
        w, lo, hi, lower, upper, p, p_margin = monitor.paired_w(va, side_a, vab, vm, side_m, vmb, A["ci_level"],
                                                                W_MARGIN)
        MON_P[(arm, signal, task, m, mode)] = (p, p_margin)
        return w, lo, hi, lower, upper, (va, side_a), (vm, side_m)

    MON_P: dict[tuple, tuple[float, float]] = {}

    rows, verdicts, family = [], {}, []
    for arm in core.PHYSICAL_ARMS:
        for signal in ("c_int", "abstain"):
            ac, _ = monitor_crossing(arm, signal, monitor.MONITOR_ID)   # over every image (the monitor's own)
            record(f"monitor.v.{signal}.{arm}", report.crossing_text(ac["v_cross_m"], ac["v_lo_m"], ac["v_hi_m"],
                                                              ac["censored_side"]))
            for task in ("t2", "t3"):
                for m in VLMS:
                    w, lo, hi, lower, upper, (va, side_a), (vm, side_m) = monitor_w(arm, signal, task, m)
                    record(f"monitor.w.{signal}.{arm}.{task}.{key(m)}", w, ci=(lo, hi), lower=lower, upper=upper)
                    if signal == "abstain" and task == "t2":
                        family.append((arm, m, w, lo, hi, lower, upper, side_m))
                    rows.append({"VLM": name(m), "arm": arm, "task": task, "monitor signal": signal,
                                 "V_acc (m)": report.crossing_text(va, np.nan, np.nan, side_a),
                                 "V_aware monitor (m)": report.crossing_text(vm, np.nan, np.nan, side_m),
                                 "W": report.w_text(w, lo, hi, lower, upper).removeprefix("W ").removeprefix("= ")})
    # the monitor's lags against every model and arm are one family: Holm-adjusted (murk.results.holm)
    read = [collapses(m, arm, "t2") for arm, m, *_ in family]
    p_adj = results.holm([MON_P[(arm, "abstain", "t2", m, monitor.MONITOR_ID)][0] if r else np.nan
                          for (arm, m, *_), r in zip(family, read)])
    pm_adj = results.holm([MON_P[(arm, "abstain", "t2", m, monitor.MONITOR_ID)][1] if r else np.nan
                           for (arm, m, *_), r in zip(family, read)])
    for (arm, m, w, lo, hi, lower, upper, side_m), r, pa, pma in zip(family, read, p_adj, pm_adj):
        v_ = (report.awareness_lag(w, lo, hi, lower, upper, margin=W_MARGIN, p=pa, p_margin=pma,
                                   alpha=1 - A["ci_level"]) if r else report.UNDEFINED)
        record(f"verdict.monitor.abstain.{arm}.t2.{key(m)}", v_)
        v_ = report.lag_case(v_, str(side_m), lower, upper)   # as the sentence says it
        verdicts.setdefault(arm, {}).setdefault(v_, []).append((name(m), report.w_text(w, lo, hi, lower, upper)))
    for arm, by_verdict in verdicts.items():
        where = {"fog": "in fog", "underwater": "under water"}[arm]
        groups = {v: [f"{who} ({w})" for who, w in pairs] for v, pairs in by_verdict.items()}
        out = []
        for case in (report.LEADS, report.AT_FIRST_LEVEL, report.WITH, report.LAGS, report.NOT_REACHED, report.NO_LAG,
                     report.BOUNDED):
            if case in groups:   # in the abstain rate's direction: it rises
                out.append(f"{where.capitalize()}, the monitor's abstain rate {report.lag_phrase(case, 'abstain')}, "
                           f"for {fmt_list(groups[case])}.")
        if report.UNDEFINED in groups:
            n_ = len(by_verdict[report.UNDEFINED])
            out.append(f"Against {fmt_list(who for who, _ in by_verdict[report.UNDEFINED])} nothing is stated {where}: "
                       f"{report.they(n_, 'its', 'their')} accuracy does not collapse there, or no crossing is defined.")
        record(f"finding.monitor.{arm}", " ".join(out))
    record("finding.monitor.awareness", (
        f"On the clean images it abstains on a share of {numbers['monitor.false_abstain_clean']} "
        f"({numbers['monitor.false_abstain_clean.count']}): false abstentions, since nothing is clearer; its crossing "
        f"visibility is {numbers['monitor.v.abstain.fog']} m in fog and {numbers['monitor.v.abstain.underwater']} m "
        "under water. " + " ".join(numbers[f"finding.monitor.{arm}"] for arm in core.PHYSICAL_ARMS)).strip())
    md = report.markdown_table(rows)
else:
    md = not_computed("the monitor stage did not run")
show_table(md, "monitor-w")

# %% [markdown]
# The monitor as a gate: at equal coverage, is the risk of the answers it lets
# through lower than that of the VLM's own abstain option or of its internal
# confidence? The threshold is picked on one half of the images and reported on
# the other (`murk.monitor.compare_at_equal_coverage`).

# %%
#| label: tbl-monitor-gate
#| tbl-cap: "The gate on the report half of the images (t2, all levels of one arm): coverage and risk of answering everything, of the VLM's abstain option, of the monitor (oracle and deployable) and of the internal confidence at matched coverage; n: questions in the report half, V̂ upper bounds: those whose estimate is only an upper bound (opaque), which never pass the monitor's gate (beyond the spec)."
MODE_NAME = {monitor.MONITOR_ID: "oracle", monitor.MONITOR_DEPLOYABLE_ID: "deployable"}
if HAS_MONITOR:
    rows = []
    for m in VLMS:
        sub = full.isel(image=np.flatnonzero(results.common_images(full, [monitor.MONITOR_ID, m])))  # shared images
        ids = sub["image"].values
        for arm in core.PHYSICAL_ARMS:
            v = sub["value"].sel(model=m, arm=arm, task="t2")
            flat = lambda da: da.transpose("level", "image").values.ravel()  # noqa: E731
            img = np.broadcast_to(ids, (v.sizes["level"], ids.size)).ravel()
            split = monitor.split_images(img, seed=A["bootstrap_seed"])
            for mode in MODES:
                try:
                    gate = monitor.compare_at_equal_coverage(
                        flat(sub["value"].sel(model=mode, task="t2", readout="visibility_hat_m", arm=arm)),
                        flat(v.sel(readout="c_int")), flat(v.sel(readout="abstain")), flat(v.sel(readout="correct")),
                        split, image_ids=img, n_resamples=A["bootstrap_resamples"], seed=A["bootstrap_seed"],
                        censored_monitor=flat(sub["value"].sel(model=mode, task="t2", arm=arm,
                                                                readout="visibility_hat_censored")))
                except ValueError as e:  # e.g. too few images for two halves
                    rows.append({"VLM": name(m), "arm": arm, "gate": f"n/a ({e})"})
                    continue
                prefix = "monitor" if mode == monitor.MONITOR_ID else "monitor.deployable"
                for g, r in gate.items():
                    if mode != MODES[0] and "monitor" not in g:   # the rows without the monitor once
                        continue
                    rows.append({"VLM": name(m), "arm": arm,
                                 "gate": f"{g} ({MODE_NAME[mode]})" if "monitor" in g else g,
                                 "coverage": fmt_estimate(r["coverage"], *r.get("coverage_ci", (np.nan, np.nan))),
                                 "risk": fmt_estimate(r["risk"], *r.get("risk_ci", (np.nan, np.nan))), "n": str(r["n"]),
                                 "V̂ upper bounds": str(r.get("n_monitor_bound_below", "n/a"))})
                    record(f"{prefix}.gate.{g}.coverage.{arm}.{key(m)}", r["coverage"])
                    record(f"{prefix}.gate.{g}.risk.{arm}.{key(m)}", r["risk"])
    md = report.markdown_table(rows)
else:
    md = not_computed("the monitor stage did not run")
show_table(md, "monitor-gate")

# %% [markdown]
# The monitor is given the depth map used to render the degradations: an
# oracle, which a deployed monitor would not have. How much does a wrong depth
# cost? The first `monitor_sensitivity_items` items are rendered again from the
# depth cache and estimated with the depth scaled by κ = 0.5 and 2 (a global
# scale error: V̂ should scale by κ exactly) and with a constant depth (murk's
# offline backend, an error in the depth's *shape*), against the oracle: the
# share of V̂ within a factor of two of V over the monitor's band, the median
# ratio to the oracle's V̂, how often the gate's decision changes, and the clean
# images below the gate (false abstentions).

# %%
#| label: tbl-monitor-depth
#| tbl-cap: "The monitor given a wrong depth, against the rendering depth (oracle), on the first items: share of V̂ within a factor of two of V over the monitor's band, median V̂ over the oracle's V̂, share of (image, level) cells whose gate decision changes, and clean images below the gate (beyond the spec)."
try:
    current = scene.current_depth(output_dir)
except FileNotFoundError:  # a cube analysed without its depth stage
    current = None
n_sens = min(int(monitor_sensitivity_items or 0), len(table)) if current is not None and "file_name" in table else 0
SENS = {"oracle": ("oracle (rendering depth)", lambda z: z), "kappa_0.5": ("depth × κ = 0.5", lambda z: 0.5 * z),
        "kappa_2": ("depth × κ = 2", lambda z: 2.0 * z),
        "constant": (f"constant {scene.CONSTANT_DEPTH_M:g} m", lambda z: np.full(z.shape, scene.CONSTANT_DEPTH_M,
                                                                                   np.float32))}
THR = monitor.DEFAULT_THRESHOLD_M
sens = {}   # (arm, variant) -> dict of V̂ (image, level), codes, clean V̂ and codes
partner_ = protocol.shuffled_partner(len(table), cfg["items"]["shuffle_offset"]) if n_sens else None
for i in core.bar(range(n_sens), desc="beyond: monitor depth sensitivity", unit="img") if n_sens else []:
    try:  # inputs and both renderings first: an image contributes to every row or to none
        x = scene.item_inputs(table, i, partner_[i], meta["image_dir"], current["path"], cfg)
        stacks = {arm: [x["image"]] + list(sweep(x["image"], x["depth_m"], VIS[1:]))
                  for arm, sweep in (("fog", scene.fog_sweep), ("underwater", scene.underwater_sweep))}
    except (FileNotFoundError, ValueError, OSError):  # bad input or a failed rendering, recorded as missing in the cube
        continue
    for arm, shown in stacks.items():
        for k_, (_, f) in SENS.items():
            d = [monitor.estimate_visibility_details(im, f(x["depth_m"]), arm) for im in shown]
            r = sens.setdefault((arm, k_), {"v": [], "code": []})
            r["v"].append([e["visibility_m"] for e in d])
            r["code"].append([e["censored_code"] for e in d])
rows = []
for (arm, k_), r in sens.items():
    v, code = np.asarray(r["v"], float), np.asarray(r["code"], float)         # (image, clean + levels)
    o = sens[(arm, "oracle")]
    vo, co = np.asarray(o["v"], float), np.asarray(o["code"], float)
    with np.errstate(invalid="ignore", divide="ignore"):
        within = np.abs(np.log2(v[:, 1:] / VIS[1:])) <= 1
        rel = np.nanmedian(v[:, 1:] / vo[:, 1:])
    gate, gate_o = monitor.gate_decisions(v[:, 1:], THR, code[:, 1:]), monitor.gate_decisions(vo[:, 1:], THR, co[:, 1:])
    clean_abstain = monitor.gate_decisions(v[:, 0], THR, code[:, 0])
    record(f"monitor.depth.{k_}.{arm}.share_x2", 100 * float(np.mean(within[:, mid_band])), 0)
    record(f"monitor.depth.{k_}.{arm}.ratio_to_oracle", float(rel), 2)
    record(f"monitor.depth.{k_}.{arm}.gate_changed", 100 * float(np.mean(gate != gate_o)), 0)
    record(f"monitor.depth.{k_}.{arm}.clean_abstain", f"{int(np.sum(clean_abstain))}/{len(v)}")
    rows.append({"arm": arm, "depth given to the monitor": SENS[k_][0],
                 f"within ×2, {numbers['monitor.band']} m (%)": numbers[f"monitor.depth.{k_}.{arm}.share_x2"],
                 "median V̂ / oracle V̂": numbers[f"monitor.depth.{k_}.{arm}.ratio_to_oracle"],
                 "gate changed (%)": "–" if k_ == "oracle" else numbers[f"monitor.depth.{k_}.{arm}.gate_changed"],
                 "clean images abstained on": numbers[f"monitor.depth.{k_}.{arm}.clean_abstain"]})
record("monitor.depth.n_items", len(sens.get(("fog", "oracle"), {"v": []})["v"]))
DEPTH_BACKEND = report.verbatim(ds.attrs["depth_backend"])   # as written (a code span)
record("monitor.depth.what", (
    f"the offline {DEPTH_BACKEND} backend, itself a constant depth, so that the constant-depth row "
    "equals the oracle here" if approximate else DEPTH_BACKEND))
if rows:
    parts = []
    for arm in core.PHYSICAL_ARMS:
        n_ = lambda k_, what: numbers[f"monitor.depth.{k_}.{arm}.{what}"]  # noqa: E731
        parts.append(f"{ARM_WORDS[arm]}, the median V̂ is {n_('kappa_0.5', 'ratio_to_oracle')} and "
                     f"{n_('kappa_2', 'ratio_to_oracle')} times the oracle's with κ = 0.5 and 2, and the gate's "
                     f"decision changes on {n_('kappa_0.5', 'gate_changed')} %, {n_('kappa_2', 'gate_changed')} % and "
                     f"{n_('constant', 'gate_changed')} % of the cells with κ = 0.5, κ = 2 and the constant depth")
    # a global depth factor kappa must move V̂ by kappa exactly (only beta * z enters the image formation)
    scale_exact = all(abs(float(np.nanmedian(np.asarray(sens[(a, f'kappa_{k}')]['v'], float)[:, 1:]
                                            / np.asarray(sens[(a, 'oracle')]['v'], float)[:, 1:])) / float(k) - 1) < 1e-3
                      for a in core.PHYSICAL_ARMS for k in ("0.5", "2"))
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        log_ratio = [np.log(np.asarray(sens[(a, "constant")]["v"], float)[:, 1:]
                            / np.asarray(sens[(a, "oracle")]["v"], float)[:, 1:]) for a in core.PHYSICAL_ARMS]
        shape_changes = any(float(np.nanstd(r_)) > 0.01 for r_ in log_ratio)   # not one global factor
    record("finding.monitor.depth", (
        f"on the first {numbers['monitor.depth.n_items']} items (study depth: {numbers['monitor.depth.what']}), "
        + "; ".join(parts) + ". "
        + ("A global depth scale κ moves V̂ by κ and every crossing with it, and leaves W unchanged"
           if scale_exact else "A global depth scale κ does not move V̂ by exactly κ here")
        + ("; a wrong depth shape biases V̂ by a factor that differs between images and levels."
           if shape_changes else "; the constant depth moves V̂ by one global factor at most here (the study's depth "
           "is itself constant, or a constant times it).")))
    md = report.markdown_table(rows)
else:
    record("finding.monitor.depth", f"{report.NOT_COMPUTED} (no depth cache, or monitor_sensitivity_items = 0).")
    md = not_computed("no depth cache, or monitor_sensitivity_items = 0")
show_table(md, "monitor-depth")

# %% [markdown]
# The finding on the wrong depth, as the paper states it.

# %%
display(Markdown(numbers["finding.monitor.depth"]))

# %% [markdown]
# ### The deployable monitor beside the oracle
#
# The oracle above is told the rendering's depth and arm. The deployable mode
# (stage 3b, `murk.monitor.deployable_readouts`) sees the degraded image alone:
# the run's depth backend applied to that image, the arm read from the veiling
# light's colour (`murk.monitor.estimate_arm`), no level. Side by side, per arm:
# V̂ within a factor of two over the monitor's band, upper bounds at the murkiest
# level, the share of renderings whose arm it identified, false abstentions on the
# clean images, and its gate's W against each VLM (t2, abstain rate, paired
# bootstrap as above).

# %%
#| label: tbl-monitor-modes
#| tbl-cap: "The monitor in both modes: oracle (the rendering's depth and arm) and deployable (the degraded image alone); within ×2: share of V̂ within a factor of two of V over the monitor's band; upper bounds: at the murkiest level; arm identified: share of the arm's renderings read as that arm; clean abstentions: false abstentions on the clean images; W: the abstain rate's blind-spot width against each VLM (t2) (beyond the spec)."
HAS_DEPLOYABLE = HAS_MONITOR and monitor.MONITOR_DEPLOYABLE_ID in MODES
if HAS_DEPLOYABLE:
    rows = []
    for mode in MODES:
        mv = full["value"].sel(model=mode, task="t2")
        tag = MODE_NAME[mode]
        a0 = mv.sel(arm="fog", level=0, readout="abstain").values
        ok0 = np.isfinite(a0)
        record(f"monitor.{tag}.false_abstain_clean.count", f"{int(np.sum(a0[ok0] == 1))}/{int(ok0.sum())}")
        for arm in core.PHYSICAL_ARMS:
            sweep_ = mv.sel(arm=arm).isel(level=slice(1, None)).transpose("readout", "level", "image")
            record(f"monitor.{tag}.share_x2.{arm}", 100 * float(np.mean(BAND[mode][arm][1][mid_band])), 0)
            code = sweep_.sel(readout="visibility_hat_censored").values[-1]
            record(f"monitor.{tag}.upper_end.{arm}",
                   100 * float(np.mean(code[np.isfinite(code)] == -1)) if np.isfinite(code).any() else np.nan, 0)
            arm_hat = sweep_.sel(readout="visibility_hat_arm").values
            record(f"monitor.{tag}.arm_identified.{arm}",
                   100 * float(np.mean(arm_hat[np.isfinite(arm_hat)] == monitor.ARM_CODE[arm]))
                   if np.isfinite(arm_hat).any() else np.nan, 0)
            row = {"monitor": tag, "arm": arm,
                   f"within ×2, {numbers['monitor.band']} m (%)": numbers[f"monitor.{tag}.share_x2.{arm}"],
                   f"upper bounds at {STUDY['cfg.sweep_min_m']} m (%)": numbers[f"monitor.{tag}.upper_end.{arm}"],
                   "arm identified (%)": "told" if mode == monitor.MONITOR_ID else numbers[f"monitor.{tag}.arm_identified.{arm}"],
                   "clean abstentions": numbers[f"monitor.{tag}.false_abstain_clean.count"]}
            for m in VLMS:
                w, lo, hi, lower, upper, _, _ = monitor_w(arm, "abstain", "t2", m, mode)
                record(f"monitor.{tag}.w.abstain.{arm}.t2.{key(m)}", w, ci=(lo, hi), lower=lower, upper=upper)
                row[f"W vs {name(m)}"] = report.w_text(w, lo, hi, lower, upper).removeprefix("W ").removeprefix("= ")
            rows.append(row)
    n_ = lambda what: [numbers[f"monitor.{t}.{what}"] for t in ("deployable", "oracle")]  # noqa: E731
    record("finding.monitor.deployable", (
        f"Seeing only the degraded image (depth from the {DEPTH_BACKEND} backend applied to it, "
        f"the arm from the veil's colour), the deployable monitor reads the arm correctly on "
        f"{numbers['monitor.deployable.arm_identified.fog']} % of the fog renderings and "
        f"{numbers['monitor.deployable.arm_identified.underwater']} % of the underwater ones; its V̂ is within a "
        f"factor of two of V over {numbers['monitor.band']} m on {n_('share_x2.fog')[0]} % of the image–level "
        f"pairs in fog (oracle {n_('share_x2.fog')[1]} %) and {n_('share_x2.underwater')[0]} % under water "
        f"(oracle {n_('share_x2.underwater')[1]} %), and it abstains on {n_('false_abstain_clean.count')[0]} "
        f"clean images (oracle {n_('false_abstain_clean.count')[1]})."
        + (" The offline depth backend is a constant that ignores the image, and the renderings were made with "
           "the same constant, so here the two modes differ only by the estimated arm and veiling light; this "
           "is a pipeline check of the deployable path, not a measurement of monocular depth under fog."
           if approximate else "")))
    md = report.markdown_table(rows)
else:
    record("finding.monitor.deployable", "The oracle and the deployable monitor are not both in this output root, "
                                         "so the two modes are not compared.")
    md = not_computed("the monitor stage did not write both modes")
show_table(md, "monitor-modes")

# %% [markdown]
# The finding on the two modes, as the paper states it.

# %%
display(Markdown(numbers["finding.monitor.deployable"]))

# %% [markdown]
# ## Beyond the spec: recalibration by visibility, and risk–coverage of every abstention signal
#
# Two questions a user of the study asks next. *Can the blind spot be closed?*
# One global temperature cannot calibrate across corruption levels (Tomani et
# al. 2021; Roschewitz et al. 2025), but murk has a measured visibility: the
# first-token option probabilities (read-outs `p_option_k`, whose maximum is
# `c_int`) are recalibrated by temperature scaling (Guo et al. 2017,
# `murk.monitor`) fitted on a calibration half of each model's own images
# (fixed by image id, `murk.monitor.model_halves`, seeded; a model run on
# the first N items: those N) and scored on the other half:
# no recalibration; one global temperature; an oracle temperature per level; and
# `T(V̂) = exp(a + b·log10 V̂)` of the *deployable* monitor's estimate. On the
# test half: ECE and AUROC of the recalibrated internal confidence (pooled over
# the levels of an arm) and its W, each with its bootstrap interval over the
# model's own test images. *Which abstention signal should be deployed?* Selective prediction is
# judged by risk–coverage (Geifman & El-Yaniv 2017; for VQA Whitehead et al.
# 2022): each signal ranks the answers, and the area under the risk–coverage
# curve (AURC, `murk.results.aurc`), its excess over the best possible ranking
# (E-AURC) and the coverage at a bounded risk compare the rankings; intervals
# come from paired image resamples (the same draw for every signal), and a
# signal is named the best only where it beats each other signal in the
# interval of their paired difference. Tied scores (a confidence in whole
# percent, V̂ at its cap, c_int at 1) are taken in random order: each
# statistic is its expectation over the orders within ties, in closed form,
# so a coarser signal is not ranked below an equally informative finer one.

# %%
#| label: tbl-recalibration
#| tbl-cap: "Recalibration of the internal confidence on the test half of the images (split by image id, seeded): no recalibration, one global temperature, an oracle temperature per level (the range of the fitted T over the arm's levels) and T(V̂) = exp(a + b·log10 V̂) of the deployable monitor's estimate; ECE and AUROC pooled over the arm's levels, and W, each with its bootstrap interval over the test images (beyond the spec)."
RECAL_NAMES = {"none": "none", "global": "global T", "per_level": "oracle T per level",
               "visibility": "T(V̂), deployable monitor"}
OPTS = [f"p_option_{i}" for i in range(readout.N_OPTION_READOUTS)]
HAS_OPTIONS = (all(o in ds["readout"].values for o in OPTS)
               and bool(ds["value"].sel(readout="p_option_0").notnull().any()))
V_HAT_ID = monitor.MONITOR_DEPLOYABLE_ID          # the temperature's visibility: what a deployed system sees
HAS_VHAT = V_HAT_ID in full["model"].values
RECAL_ARMS = list(core.PHYSICAL_ARMS)
record("recal.seed", int(A["bootstrap_seed"]))
# Each model's halves are drawn from its own images (a model on the first N items: those N), and its test half
# is resampled with the draw of its own test images: nothing of it comes from images it was not run on.
RECAL = {}   # (model, task) -> conf {method: (arm, level, unit)}, params, question values, unit -> own image
HALVES = {}  # model -> (its own images' cube positions, True: calibration half, test half's positions among own)
for m in VLMS if HAS_OPTIONS else []:
    own, cal = monitor.model_halves(ds, m, seed=A["bootstrap_seed"])
    HALVES[m] = (own, cal, np.flatnonzero(~cal))
    record(f"recal.n_calibration_images.{key(m)}", int(cal.sum()))
    record(f"recal.n_test_images.{key(m)}", int((~cal).sum()))
    for task in ("t2", "t3"):
        q, unit_image = results.question_scores(ds.sel(model=[m], arm=RECAL_ARMS).isel(image=own), task)
        q = q.isel(model=0).transpose("arm", "level", "unit", "readout")
        shape = q.shape[:3]
        vh = None
        if HAS_VHAT:
            v_img = full["value"].sel(model=V_HAT_ID, task="t2", readout="visibility_hat_m", arm=RECAL_ARMS)
            vh = v_img.transpose("arm", "level", "image").values[:, :, own[unit_image]].ravel()
        group = np.broadcast_to(np.arange(shape[0] * shape[1]).reshape(shape[0], shape[1], 1), shape).ravel()
        try:
            if cal.all():
                raise ValueError(f"none of its {own.size} images is in the test half")
            conf, params = monitor.recalibrate(
                q.sel(readout=OPTS).values.reshape(-1, len(OPTS)), q.sel(readout="target").values.ravel(),
                np.broadcast_to(cal[unit_image], shape).ravel(), group=group, visibility_m=vh)
        except ValueError as e:   # e.g. no calibration image with read-outs: recorded, nothing stated
            RECAL[(m, task)] = {"error": str(e)}
            continue
        RECAL[(m, task)] = {"conf": {k: v.reshape(shape) for k, v in conf.items()}, "params": params, "q": q,
                            "unit_image": unit_image, "own": own, "cal": cal, "test": HALVES[m][2],
                            "draw": draw(HALVES[m][2].size)[: A["bootstrap_resamples"]]}
        record(f"recal.global_T.{task}.{key(m)}", params["global_T"])
        if "visibility_ab" in params:
            record(f"recal.a.{task}.{key(m)}", params["visibility_ab"][0])
            record(f"recal.b.{task}.{key(m)}", params["visibility_ab"][1])
record("recal.halves", "; ".join(f"{name(m)}, {int(c.sum())} and {t.size} of its {o.size} images"
                                for m, (o, c, t) in HALVES.items()) or "none (no model has option probabilities)")


def test_rows(m: str, task: str, arm: str):
    """The test half of one model, task and arm, pooled over levels: (question values (level, unit, readout), the
    positions of the units in the test half (units of calibration images excluded), the unit -> test image
    position map, over the model's own test images)."""
    r = RECAL[(m, task)]
    keep, pos = monitor.held_out_units(r["cal"], r["unit_image"], r["test"])
    return r["q"].sel(arm=arm).isel(unit=keep), keep, pos


RECAL_SCORES = {}   # (model, task) -> image-level scores of the test half, one "model" per method (for W)
rows, RELIAB = [], {}
for (m, task), r in RECAL.items():
    if "error" in r:
        rows.append({"VLM": name(m), "task": task, "method": f"n/a ({r['error']})"})
        continue
    ai = {a: i for i, a in enumerate(RECAL_ARMS)}
    # image-level scores (t3: the mean of its two questions) of the test images, methods as models
    corr, n_own, test = r["q"].sel(readout="correct").values, r["own"].size, r["test"]
    sc_vals = np.stack([np.stack([results.per_image(corr, n_own), results.per_image(c, n_own)], axis=-1)
                        for c in r["conf"].values()])
    scores_m = xr.DataArray(sc_vals[:, :, :, None][..., test, :], dims=("model", "arm", "level", "task", "image", "readout"),
                            coords={"model": list(r["conf"]), "arm": RECAL_ARMS, "level": ds["level"].values,
                                    "visibility_m": ("level", VIS), "task": [task],
                                    "image": ds["image"].values[r["own"][test]], "readout": ["correct", "c_int"]})
    RECAL_SCORES[(m, task)] = scores_m
    cr = results.crossing_table(scores_m, A["bootstrap_resamples_crossing"], A["bootstrap_seed"], A["ci_level"],
                                 CHANCE, arms=RECAL_ARMS, counts=draw(test.size))
    for arm in RECAL_ARMS:
        qa, keep, pos = test_rows(m, task, arm)
        k_ = qa.sel(readout="correct").values.ravel()
        cnt = r["draw"][:, np.broadcast_to(pos, qa.shape[:2]).ravel()]
        for method, c in r["conf"].items():
            c_ = np.clip(c[ai[arm]][:, keep].ravel(), 0.0, 1.0)
            ece = float(results.expected_calibration_error(c_, k_))
            auc = float(results.auroc(c_, k_))
            ece_lo, ece_hi = results.percentile_interval(results.resampled_ece(c_, k_, cnt), A["ci_level"])
            auc_lo, auc_hi = results.percentile_interval(results.resampled_auroc(c_, k_, cnt), A["ci_level"])
            w_ = cr.sel(model=method, arm=arm, task=task, readout="c_int")
            w, wlo, whi = float(w_["w"]), float(w_["w_lo"]), float(w_["w_hi"])
            lower, upper = bool(w_["w_lower_bound"]), bool(w_["w_upper_bound"])
            base = f"recal.{method}.{arm}.{task}.{key(m)}"
            record(f"{base}.ece", ece, ci=(float(ece_lo), float(ece_hi)))
            record(f"{base}.auroc", auc, ci=(float(auc_lo), float(auc_hi)))
            record(f"{base}.w", w, ci=(wlo, whi), lower=lower, upper=upper)
            verdict = (report.awareness_lag(w, wlo, whi, lower, upper, margin=W_MARGIN) if collapses(m, arm, task)
                       else report.UNDEFINED)
            record(f"verdict.recal.{method}.{arm}.{task}.{key(m)}", verdict)
            if task == "t2":
                ok = np.isfinite(c_) & np.isfinite(k_)
                RELIAB.setdefault((label(m), arm), {})[RECAL_NAMES[method]] = results.reliability_bins(c_[ok], k_[ok])
            t_txt = ""
            if method == "global":
                t_txt = f"T = {fmt(r['params']['global_T'], 2)}" + (" (at a bound)" if monitor.at_temperature_bound([r["params"]["global_T"]]) else "")
            elif method == "visibility":
                a_, b_ = r["params"]["visibility_ab"]
                t_txt = f"a = {fmt(a_, 2)}, b = {fmt(b_, 2)}"
            elif method == "per_level":
                ts = [t for g, t in r["params"]["per_level_T"].items() if g // ds.sizes["level"] == ai[arm]]
                t_txt = f"T {fmt_range(ts, digits=2)}" + (" (at a bound)" if monitor.at_temperature_bound(ts) else "") if ts else ""
            rows.append({"VLM": name(m), "task": task, "arm": arm, "method": RECAL_NAMES[method], "fit": t_txt,
                         "ECE": fmt_estimate(ece, float(ece_lo), float(ece_hi)),
                         "AUROC": fmt_estimate(auc, float(auc_lo), float(auc_hi)),
                         "W": report.w_text(w, wlo, whi, lower, upper).removeprefix("W ").removeprefix("= ")})

parts_, stated_ = [], False   # a sentence per model, over its own test images; "closes" only where W was > 0 before
for (m, task), r in RECAL.items():
    if task != "t2":
        continue
    if "error" in r:
        parts_.append(f"For {name(m)} recalibration was not computed ({r['error']})")
        continue
    if "visibility" not in r["conf"]:
        continue
    arm_parts = []
    for arm in RECAL_ARMS:
        b_ = f"recal.{{}}.{arm}.t2.{key(m)}.w"
        fmt_w = lambda mt: (numbers[b_.format(mt)] + (f" {numbers[b_.format(mt) + '.ci']}"  # noqa: E731
                                                      if numbers[b_.format(mt) + ".ci"] else ""))
        if all(numbers[b_.format(mt)] == "n/a" for mt in r["conf"]):
            arm_parts.append(f"{ARM_WORDS[arm]}, W of the internal confidence is undefined with and without "
                             "recalibration (no crossing of accuracy or of the confidence is defined)")
            continue
        change = report.blind_spot_change(numbers[f"verdict.recal.none.{arm}.t2.{key(m)}"],
                                          numbers[f"verdict.recal.visibility.{arm}.t2.{key(m)}"])
        arm_parts.append(f"{ARM_WORDS[arm]}, W of the internal confidence is {fmt_w('none')} without "
                         f"recalibration, {fmt_w('global')} with one temperature, {fmt_w('per_level')} with an oracle "
                         f"temperature per level and {fmt_w('visibility')} with T(V̂): {change}")
    n_ = int(numbers[f"recal.n_test_images.{key(m)}"])
    parts_.append(f"On the {n_} test image{'' if n_ == 1 else 's'} of {name(m)} (t2), "
                  + "; ".join(arm_parts))
    stated_ = True
if not HAS_OPTIONS:
    why = "the cube holds no option probabilities (a cube of schema 3 or older)"
elif not HAS_VHAT:
    why = "the deployable monitor did not run, so T(V̂) has no V̂"
else:
    why = ""
record("finding.recal", (
    ". ".join(parts_) + "."
    if stated_ else f"Recalibration by visibility was not computed: {why or 'no model has read-outs on both halves'}."))
show_table(report.markdown_table(rows) if rows else not_computed(why or "no recalibration"), "recalibration")

# %% [markdown]
# The finding on recalibration, as the paper states it: per model, W before
# and after, and whether T(V̂) closes the blind spot.

# %%
display(Markdown(numbers["finding.recal"]))

# %% [markdown]
# Reliability of the internal confidence before and after each recalibration,
# on the test half: a recalibrated confidence lies nearer the diagonal.

# %%
#| label: fig-reliability-recal
#| fig-cap: "Reliability of the internal confidence on the test half (t2, pooled over the levels of each arm) before and after recalibration: accuracy against mean confidence per bin (marker area: answers in the bin); the dashed diagonal is perfect calibration (beyond the spec)."
if RELIAB:
    models_ = list(dict.fromkeys(r_ for r_, _ in RELIAB))
    show(report.plot_reliability_methods(RELIAB, models_, RECAL_ARMS), "reliability_recal")
else:
    show(report.placeholder(f"recalibration: {report.NOT_COMPUTED}"), "reliability_recal")

# %% [markdown]
# Risk–coverage: every abstention signal ranks the answers of the test half;
# AURC, E-AURC and the coverage at a bounded risk compare the rankings, with
# paired image resamples (`murk.results.aurc`, `murk.report.best_signal`).

# %%
#| label: tbl-risk-coverage
#| tbl-cap: "Risk–coverage of every abstention signal on the test half, all levels of one arm: AURC (the mean selective risk over the answers as each enters, lower is better) with its paired bootstrap interval, its excess over the best possible ranking (E-AURC), and the largest coverage whose risk stays within each bound (beyond the spec)."
RISKS = (0.10, 0.25)   # the bounded risks of the coverage read-off (issue 24: 10 % and 25 % of errors)
RC_NAMES = {"c_int": "internal confidence", "verbal_conf": "verbalized confidence", "abstain": "1 − p(abstain)",
            "abstain2": "1 − p(abstain₂)", "monitor_deployable": "V̂ (deployable)", "monitor_oracle": "V̂ (oracle)",
            "recalibrated": "T(V̂)-recalibrated confidence"}
for r_ in RISKS:
    record(f"rc.risk.{int(round(100 * r_))}", f"{100 * r_:g}")


def rc_signals(m: str, task: str, arm: str) -> tuple[dict, np.ndarray, np.ndarray]:
    """Each signal's score (higher = answer) on the test rows of one model, task and arm, the correctness and the
    rows' test image positions; a missing score (an unparsed verbal confidence, no V̂) ranks last (-1)."""
    qa, keep, pos = test_rows(m, task, arm)
    sig = {"c_int": qa.sel(readout="c_int").values, "verbal_conf": qa.sel(readout="verbal_conf").values,
           "abstain": 1 - qa.sel(readout="p_abstain").values, "abstain2": 1 - qa.sel(readout="p_abstain2").values}
    for mode, sname in ((monitor.MONITOR_DEPLOYABLE_ID, "monitor_deployable"), (monitor.MONITOR_ID, "monitor_oracle")):
        if mode in full["model"].values:
            mv = full["value"].sel(model=mode, task="t2", arm=arm).transpose("level", "image", "readout")
            u_img = RECAL[(m, task)]["own"][RECAL[(m, task)]["unit_image"][keep]]   # the monitor's cube positions
            sig[sname] = monitor.certified_visibility(mv.sel(readout="visibility_hat_m").values[:, u_img],
                                                      mv.sel(readout="visibility_hat_censored").values[:, u_img])
    if "visibility" in RECAL[(m, task)]["conf"]:
        sig["recalibrated"] = RECAL[(m, task)]["conf"]["visibility"][RECAL_ARMS.index(arm)][:, keep]
    corr = qa.sel(readout="correct").values.ravel()
    ok = np.isfinite(corr)
    pos_ = np.broadcast_to(pos, qa.shape[:2]).ravel()
    return ({s: np.where(np.isfinite(v.ravel()), v.ravel(), -1.0)[ok] for s, v in sig.items()}, corr[ok], pos_[ok])


rows, CURVES, best_parts = [], {}, {}
for (m, task), r in RECAL.items():
    if "error" in r:
        continue
    for arm in RECAL_ARMS:
        sig, corr, pos = rc_signals(m, task, arm)
        if corr.size == 0:
            continue
        boot = {s: results.resampled_aurc(v, corr, r["draw"], image_index=pos) for s, v in sig.items()}
        point = {s: results.aurc(v, corr) for s, v in sig.items()}
        for s, v in sig.items():
            lo, hi = results.percentile_interval(boot[s], A["ci_level"])
            base = f"rc.{s}.{arm}.{task}.{key(m)}"
            record(f"{base}.aurc", point[s], ci=(float(lo), float(hi)))
            record(f"{base}.eaurc", results.excess_aurc(v, corr))
            row = {"VLM": name(m), "task": task, "arm": arm, "signal": RC_NAMES[s],
                   "AURC": fmt_estimate(point[s], float(lo), float(hi)), "E-AURC": numbers[f"{base}.eaurc"]}
            for r_ in RISKS:
                cov = results.coverage_at_risk(v, corr, r_)
                clo, chi = results.percentile_interval(
                    results.resampled_coverage_at_risk(v, corr, r_, r["draw"], image_index=pos), A["ci_level"])
                record(f"{base}.coverage_at_{int(round(100 * r_))}", cov, ci=(float(clo), float(chi)))
                row[f"coverage at risk ≤ {100 * r_:g} %"] = fmt_estimate(cov, float(clo), float(chi))
            rows.append(row)
            if task == "t2":
                CURVES.setdefault((label(m), arm), {})[RC_NAMES[s]] = results.expected_risk_coverage(v, corr)
        # the best signal: named only where its paired resamples beat every other signal (murk.report.best_signal)
        rc_verdict = report.best_signal(point, boot, A["ci_level"])
        record(f"rc.best.{arm}.{task}.{key(m)}", RC_NAMES[rc_verdict[0]] if rc_verdict[0] else "none")
        if task == "t2":
            b_ = f"rc.{rc_verdict[1]}.{arm}.t2.{key(m)}.aurc"
            best_parts.setdefault(arm, []).append(report.best_signal_words(
                name(m), rc_verdict, RC_NAMES, f"{numbers[b_]} {numbers[b_ + '.ci']}"))
record("finding.rc", " ".join(f"{ARM_WORDS[arm].capitalize()}, " + "; ".join(p) + "." for arm, p in best_parts.items())
       or f"Risk–coverage was not computed: {why or 'no model has read-outs on the test half'}.")
show_table(report.markdown_table(rows) if rows else not_computed(why or "no risk-coverage"), "risk-coverage")

# %% [markdown]
# The finding on risk–coverage, as the paper states it: the best signal per
# model and arm, named only where it beats every other one.

# %%
display(Markdown(numbers["finding.rc"]))

# %% [markdown]
# The risk–coverage curves themselves: the error rate of the answers kept as each
# signal's threshold falls.

# %%
#| label: fig-risk-coverage
#| fig-cap: "Risk–coverage curves on the test half (t2, all levels of each arm): the error rate of the answers kept against the share kept, as each signal's threshold falls (beyond the spec)."
if CURVES:
    show(report.plot_risk_coverage(CURVES, list(dict.fromkeys(r_ for r_, _ in CURVES)), RECAL_ARMS), "risk_coverage")
else:
    show(report.placeholder(f"risk–coverage: {report.NOT_COMPUTED}"), "risk_coverage")

# %% [markdown]
# ## The numbers fragment
#
# This notebook's numbers are written to its fragment
# (`analysis/numbers-beyond.json`), then merged with the study's into the
# numbers file the paper reads (`paper_numbers.json`, `murk.report.merge_numbers`:
# every key the paper cites that neither computed is filled in as "not
# computed in this run").

# %%
#| label: num-numbers-beyond
numbers.save()
merged = report.merge_numbers(output_dir)
print(f"{len(numbers)} numbers written to {numbers.path}, merged into {merged}")
