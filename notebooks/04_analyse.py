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
# # Stage 4 · analyse: the cube, the scores, and what they say
#
# This notebook is the analysis of the study. It merges the models' read-out
# stores into the cube (`cube.zarr`, dims model × arm × level × task × image ×
# readout), computes every statistic from one paired bootstrap over images
# (`murk.results.analyse`, spec Sec. III), and then answers the study's
# questions one by one:
#
# * **RQ1** over what range of visibility does accuracy collapse?
# * **RQ2** do internal and verbalized confidence follow the collapse, or lag behind it?
# * **RQ3** does an explicit abstain option expose what the stated confidence hides, and how robust is it to wording?
# * **RQ4** do the nominal ImageNet-C fog severities cover the failure band?
#
# followed by the verification task and the controls, and the abstract and
# discussion generated from the verdicts. What goes beyond the spec (the
# visibility monitor, recalibration, risk–coverage) is the next notebook,
# `notebooks/05_beyond.py`, which reads this one's cube and scores. Each
# section says what it computes and why, then
# builds its tables and figures in labelled cells (`fig-…`, `tbl-…`), which the
# paper embeds from the executed notebook (`outputs/notebooks/04_analyse.ipynb`).
#
# Every number the paper cites is recorded in the cell that computes it with
# `record(key, value, …)`, and every cell that records one is labelled (`num-…`,
# or its table's or figure's label): this notebook's numbers fragment
# (`analysis/numbers-study.json`) keeps, for each key, the label of the cell
# that recorded it (its provenance beside it; merged with the next notebook's
# into `paper_numbers.provenance.json`,
# `murk.report.load_provenance`), also for keys built with f-strings, and the HTML
# paper links each number to that cell in the rendered notebook. Every sentence
# that states a finding is generated from the numbers with its condition
# (`murk.report`): it says "not observed", or the opposite, when the cube says so.
# Nothing is typed by hand. The last cell writes the fragment and merges the
# fragments into the numbers file the paper reads (`paper_numbers.json`,
# `murk.report.merge_numbers`).

# %% tags=["parameters"]
# (one parameter a line, its comment above it: papermill reads `name = value` lines)
# models whose read-out stores form the cube: ids, or {id: ..., n_items: N} for a model read out on the first
# N items (papermill -y 'models: [...]'); None: the run settings' models (data/workflow.yaml; offline_models if
# MURK_OFFLINE=1), or, where the output root holds no read-out of them, the models the root records
models = None
# the read-outs' shard size (None: the run settings' shard_size; null: one store per model)
shard_size = None
# the output folder of another design's run, compared with this one in the diagnostics; None: the run settings'
# compare_with (data/workflow.yaml: null, none; data/pilot.yaml: outputs)
compare_with = None
# each figure also as a vector PDF, figures/<name>.pdf (None: the run settings' figure_pdf, data/workflow.yaml)
figure_pdf = None
output_dir = None

# %% [markdown]
# The libraries, this output root held for the stage (one writer at a time), the
# numbers fragment this notebook writes and the run's frozen configuration.

# %%
import json

import numpy as np
import xarray as xr
from IPython.display import Markdown, display

from murk import core, monitor, pipeline, protocol, readout, report, results, scene
from murk.report import fmt_estimate, fmt_level, fmt_list, fmt_range

# one writer per output root (murk.pipeline): refused, writing nothing, while another run holds it
ROOT_LOCK = pipeline.hold_for_stage(output_dir, stage="04_analyse")

FIG_DIR, TABLE_DIR = core.figures_dir(output_dir), core.analysis_dir(output_dir)
TABLE_DIR.mkdir(parents=True, exist_ok=True)
numbers = report.Numbers(report.fragment_file("04_analyse", output_dir))   # this notebook's numbers fragment
record = numbers.record
table, meta = protocol.read_items(output_dir)
cfg = protocol.config_of(meta)   # data/config.yaml with the run's design (murk.protocol; the study's: as it is)
A = cfg["analysis"]
CHANCE = A["chance"]

# %% [markdown]
# Two helpers show what a cell builds (`murk.report.AnalysisOutputs`): `show` saves a figure under `figures/`
# (PNG, and PDF with `figure_pdf`; with the visible pipeline-check mark when the results come from
# random-weight checkpoints) and displays that file, which is what the paper
# embeds; `show_table` displays a Markdown table (and keeps a copy under
# `analysis/`). Change a plot argument in a cell and re-run it: the file and the
# output change together.

# %%
# its pipeline_check is set with the cube, below; the PNG always (what the cells show, the paper embeds)
OUT = report.AnalysisOutputs("04_analyse", FIG_DIR, TABLE_DIR, pdf=core.run_default("figure_pdf", figure_pdf))
show, show_table = OUT.figure, OUT.table
not_computed = report.not_computed_table   # a one-row table saying that this run did not compute what


LOW_MASS: list[str] = []       # models whose first token is not the answer (option mass below the threshold)
DAGGER = "†"                   # their mark in every table, figure legend and sentence


def plain_name(m: str) -> str:
    """Display name of a model in Markdown: the shortest suffix of its id unique among the run's models
    (`murk.report.display_names`, as in every figure legend), escaped so that it shows as written
    (`murk.report.markdown_text`: a folder's name is data, never markup)."""
    return report.markdown_text(report.display_names([*VLMS, str(m)])[str(m)])


def name(m: str) -> str:
    """Display name of a model in Markdown, with the † of a model whose median clean option mass is below the
    threshold."""
    return report.markdown_text(report.display_names([*VLMS, str(m)], LOW_MASS)[str(m)])


def label(m: str) -> str:
    """Display name of a model in a figure, with its †: escaped for matplotlib (`murk.report.model_label`)."""
    return report.model_label(m, LOW_MASS, VLMS)


key = core.model_slug         # a model in numbers keys

# %% [markdown]
# ## The cube
#
# The read-out stores of the models (one per model, or one per shard) and, when
# it ran, the visibility monitor's store are merged into `cube.zarr`
# (`murk.results.merge_models`, atomic; stores written for other items, another
# config or another depth backend are refused). A model read out on the first N
# items only (its entry `{id: ..., n_items: N}`, `murk.core.model_entries`)
# has a shorter store: in the cube its other images are "not run" (NaN,
# `missing_reason` `cube.NOT_RUN`, never bad input), the coordinate `n_items`
# holds each model's n, and every statistic of the model is over its own images.
# The VLMs are analysed below; the monitor has its own section.

# %%
#| label: num-cube
# a parameter left at None takes its default from the run settings (data/workflow.yaml), as Snakemake does; models
# left at None whose read-outs this root lacks are the models the root records (in Lab after an offline run)
shard_size = core.run_default("shard_size", shard_size)
# the read-out stores merged into cube.zarr (murk.pipeline.analysis_cube): refused, writing nothing, where a store
# is missing, was written for another run or holds another number of items than its entry asks for
full, ENTRIES, N_ENTRY, stores, flat, RUN_ID, _models_note = pipeline.analysis_cube(models, shard_size, output_dir,
                                                                                   table, meta, cfg)
if _models_note:
    print(_models_note)
ds = full.sel(model=[m for m in full["model"].values if m not in monitor.MONITOR_IDS])
VLMS = [str(m) for m in ds["model"].values]
PIPELINE_CHECK = OUT.pipeline_check = bool(ds["pipeline_check"].any())   # the mark on every figure
VIS = results.sweep_visibility(ds)        # level 0 (clean, inf) and the sweep, m (the physical arms' levels)
SWEEP = np.asarray(protocol.sweep_of(cfg))  # the design's sweep (the study's: physics.SWEEP_M)
END = len(SWEEP)                           # the last, murkiest level


def level_of(v_m: float) -> int:
    """Index of the sweep level closest to ``v_m`` metres (in log V)."""
    return 1 + int(np.argmin(np.abs(np.log(VIS[1:] / v_m))))


print(full)
if PIPELINE_CHECK:
    display(Markdown("**" + full.attrs["note"] + "**"))

# %% [markdown]
# What this analysis is: the run's identity (`murk.pipeline.run_id`, the
# selection) and the analysis identity (`murk.pipeline.analysis_id`: the run, the
# models and item counts given here, the content of every store read and the
# settings). The numbers file, every figure file's metadata and the output below
# record both; the paper is rendered only from a numbers file and this executed
# notebook of one analysis identity (`python -m murk.report.paper` refuses a mix).

# %%
#| label: murk-identity
_inputs = pipeline.analysis_inputs(flat, output_dir)   # every store read and the nominal equivalence, by content
ANALYSIS_MODELS = [e.id if e.n_items is None else {"id": e.id, "n_items": e.n_items} for e in ENTRIES]
ANALYSIS_ID = pipeline.analysis_id(RUN_ID, [(e.id, N_ENTRY[e.id]) for e in ENTRIES], _inputs, {
    "shard_size": shard_size, "git_commit": full.attrs.get("git_commit", "unknown")})
report.set_identity(run_id=RUN_ID, analysis_id=ANALYSIS_ID)   # into every figure file's metadata
record("run_id", RUN_ID)
record("analysis_id", ANALYSIS_ID)
record("analysis.models", json.dumps(ANALYSIS_MODELS))   # what the analysis was given (the paper's refusal names it)
display(pipeline.identity_bundle(run_id=RUN_ID, analysis_id=ANALYSIS_ID, models=ANALYSIS_MODELS,
                                 inputs=_inputs), raw=True)

# %% [markdown]
# Is the first generated token the answer? The answer and c_int are the option
# letters' share of the first-token distribution, so a model that puts little
# of its first-token probability on the letters (a wrong template or prefill, a
# first token such as `(`, `**` or `The`, random weights) is answering from a
# sliver of its distribution. The median option mass on clean images per model
# and task (`murk.readout.median_option_mass`) goes into the models table; a
# model below `murk.readout.OPTION_MASS_MIN` is marked † wherever it appears and
# its results are not interpreted (the read-out stage warned about it).

# %%
#| label: num-option-mass
option_mass = readout.median_option_mass(ds)            # (model, task = t2, t3)
LOW_MASS[:] = results.low_option_mass(ds)


for m in VLMS:
    for t in ("t2", "t3"):
        record(f"option_mass.{key(m)}.{t}", report.fmt_mass(float(option_mass.sel(model=m, task=t))))
record("option_mass.threshold", f"{readout.OPTION_MASS_MIN:g}")
record("option_mass.low_models", ", ".join(plain_name(m) for m in LOW_MASS))
low_pc = [m for m in LOW_MASS if bool(ds["pipeline_check"].sel(model=m))]
record("option_mass.footnote", report.option_mass_footnote(
    [plain_name(m) for m in LOW_MASS], [plain_name(m) for m in low_pc], readout.OPTION_MASS_MIN))
print(option_mass.to_pandas())

# %% [markdown]
# What was run: the models, the items and the provenance the paper's colophon
# prints; the depth backend actually used, said in words for Methods.

# %%
#| label: num-run
pc = [m for m in VLMS if bool(ds["pipeline_check"].sel(model=m))]
record("n_items", int(ds.sizes["image"]))
record("n_items_requested", int(meta.get("n_items_requested", ds.sizes["image"])))
record("n_models", len(VLMS))
record("models", fmt_list(report.verbatim(m) for m in VLMS))
N_OF = {str(m): int(n) for m, n in zip(ds["model"].values, ds["n_items"].values)}   # each model's own images
for m in VLMS:
    record(f"n_items.{key(m)}", N_OF[m])
record("methods.n_items_per_model", report.items_per_model_words({name(m): N_OF[m] for m in VLMS},
                                                                  ds.sizes["image"]))
record("n_conditions", len(scene.CONDITIONS))
record("config_hash", ds.attrs["config_hash"][:12])
record("items_hash", ds.attrs["items_hash"][:12])
record("images_sha256", str(full.attrs.get("images_sha256") or "not recorded")[:12])   # the images' content
record("git_commit", str(full.attrs.get("git_commit", "unknown"))[:12])
record("depth_backend", report.verbatim(ds.attrs["depth_backend"]))
approximate = bool(int(ds.attrs.get("depth_approximate", 0)))
depth_model = str(ds.attrs.get("depth_model", "") or "")
for k, text in report.run_words(ds.attrs["depth_backend"], approximate, depth_model, scene.CONSTANT_DEPTH_M,
                                [report.verbatim(m) for m in pc]).items():   # the depth for Methods, the pipeline check
    record(k, text)

# %% [markdown]
# The models table: each model's items, revision, visual tokens and clean option
# mass (the † marks).

# %%
#| label: tbl-models
#| tbl-cap: "Models, the items each was read out on (the first n of the selection), revisions, visual tokens per image and the median first-token probability on the option letters on clean images (option mass, t2 / t3); † marks a model below the threshold (beyond the spec as a table; in the text of spec Section III)."
show_table(report.models_table(numbers, ds, LOW_MASS, DAGGER), "models")

# %% [markdown]
# Bad input (a missing or undecodable image, a missing depth map, an image over
# Pillow's pixel limit or of another size than its annotation) is recorded per
# image and stage; the colophon lists it, and the images used transposed (stored
# rotated, with an EXIF orientation that makes their size agree). An image a model was not asked about
# (beyond its `n_items`, `cube.NOT_RUN`) is not bad input and is not listed.

# %%
#| label: tbl-missing
#| tbl-cap: "Items that could not be read out (missing or undecodable image, image over the pixel limit or of another size than its annotation, missing depth), by model (beyond the spec)."
show_table(report.missing_table(numbers, full, core.items_file(output_dir).with_name("items_report.json")), "missing")

# %% [markdown]
# ## The scores
#
# One draw of image resamples serves every statistic, so differences and
# crossings are paired (`murk.results.analyse`): condition means with their
# percentile intervals, ECE and AUROC of the confidences, coverage and risk of
# the abstain options, the crossing visibilities V_acc and V_aware (mid-way
# between the clean value and the floor, linear in log V, censored at the end of
# the sweep) and W = log10(V_acc / V_aware), the blank-floor V_acc (post hoc),
# the monotonicity counts, the confident errors and the reliability data. They
# are kept in `analysis/scores.nc` (a `stat` coordinate: point, lo, hi).

# %%
#| label: num-analyse
res = results.analyse(ds, A["bootstrap_resamples"], A["bootstrap_resamples_crossing"], A["bootstrap_seed"],
                       A["ci_level"], CHANCE)
means, cross, sc = res["means"], res["crossings"], res["scores"]
sc.attrs.update({k: str(ds.attrs[k]) for k in ("config_hash", "items_hash", "depth_backend") if k in ds.attrs})
sc.attrs["git_commit"] = str(full.attrs.get("git_commit", "unknown"))
for name_, obj in (("scores", sc), ("condition_means", means), ("crossings", cross)):
    report.write_netcdf_atomic(obj, TABLE_DIR / f"{name_}.nc")
_DRAWS: dict[int, np.ndarray] = {}


def draw(n: int) -> np.ndarray:
    """The bootstrap draw over ``n`` images (resamples × images; its first rows are the per-condition draw),
    made once per sample size: a model's own images, or the images two models share (the first n)."""
    if n not in _DRAWS:
        _DRAWS[n] = results.resample_counts(n, A["bootstrap_resamples_crossing"], A["bootstrap_seed"])
    return _DRAWS[n]


counts = draw(ds.sizes["image"])
image_scores = results.image_scores(ds)   # (model, arm, level, task = t2 | t3, image, readout)


def est(var: str, **sel) -> tuple[float, float, float]:
    """(point, lo, hi) of a scores variable."""
    x = sc[var].sel(**sel)
    return tuple(float(x.sel(stat=s)) for s in results.STATS)


def paired_difference(a: xr.DataArray, b: xr.DataArray) -> tuple[float, float, float]:
    """Mean over images of a - b with its paired interval, over the images both models were run on, with the draw
    of that many images (`murk.results.paired_difference`)."""
    return results.paired_difference(a, b, ds, A["bootstrap_resamples"], A["bootstrap_seed"], A["ci_level"], draw)


sc

# %% [markdown]
# The settings the paper quotes (spec Table III), and every score of every
# condition in the numbers file, so that the paper can cite any of them. Keys:
# `<readout>.<level>.<arm>.<task>.<model>` (means, `.ci` their interval; `<level>`
# is `clean`, the exact visibility such as `1.953125`, or `end`),
# `ece|auroc.<confidence>.<level>.<arm>.<task>.<model>`,
# `coverage|risk.<option>.<level>.<arm>.<task>.<model>`,
# `v.<readout>.<arm>.<task>.<model>` (crossings), `w.<signal>.…` (W),
# `v.correct_blank.…` (blank floor), `mono.<signal>.<arm>.<task>.<model>` (raw
# share of wrong-way pairs; `.sig` beyond two standard errors; `.count`).

# %%
#| label: num-scores
report.record_settings(numbers, cfg, meta, sc, SWEEP)   # the settings (spec Table III), each from where it lives

physical = [a for a in core.PHYSICAL_ARMS if a in sc["arm"].values]
report.record_scores(numbers, sc, cross, VLMS, key, physical, END)
print(f"{len(numbers)} numbers recorded")

# %% [markdown]
# ## RQ1 · Accuracy on the visibility axis
#
# For each model, arm and task: accuracy on the clean image, along the sweep and
# at its murkiest level, and the crossing visibility V_acc where it reaches the
# mid-way value between its clean value and chance. A *collapse* is stated only
# when the cube shows one (`murk.report.accuracy_fall`): the clean accuracy is
# above chance (its interval excludes chance), V_acc is not censored, and the
# accuracy at the end of the sweep is back at chance. Where it collapses, the
# band of the fall is the range of visibility over which accuracy loses ten to
# ninety percent of its clean-to-chance range (`murk.report.fall_band`).

# %%
#| label: num-rq1
FALL_BAND: dict[tuple[str, str, str], tuple[float, float]] = {}   # (model, arm, task) -> V (m) at 10 % and 90 %


def accuracy_finding(arm: str, task: str) -> str:
    """The RQ1 sentence(s) of one arm and task, recording each model's verdict (`murk.report.accuracy_finding`)."""
    return report.accuracy_finding(numbers, sc, means, cross, VLMS, name, key, arm, task, CHANCE[task], VIS, END,
                                   FALL_BAND)

for task in ("t2", "t3"):
    for arm in physical:
        record(f"finding.rq1.{arm}.{task}", accuracy_finding(arm, task))
    report.record_accuracy_ranges(numbers, means, cross, task, END)   # over the models: V_acc, the ends, controls
display(Markdown("\n\n".join(numbers[f"finding.rq1.{arm}.t2"] for arm in physical)))

# %% [markdown]
# Accuracy against visibility, t2, per arm: where the curves fall to chance is the
# collapse the sentences above state.

# %%
#| label: fig-accuracy-t2
#| fig-cap: "t2 accuracy against visibility in the fog and underwater arms, clean image at the left edge; bands: bootstrap intervals; dashed: chance; dotted: each model's blank-image accuracy."
show(report.plot_signal_vs_visibility(means, "correct", "t2", chance=CHANCE["t2"], marked=LOW_MASS), "accuracy_t2")

# %% [markdown]
# All four signals against visibility in one figure (spec Fig. 3): accuracy, the
# two confidences and the abstain rate, one row each.

# %%
#| label: fig-signals-t2
#| fig-cap: "Accuracy, internal confidence, verbalized confidence and the abstain rate (main wording) against visibility, t2, one row per signal and one column per arm (spec Fig. 3); clean image at the left edge; bands: bootstrap intervals; dashed: chance; dash-dotted: the abstain rate's floor, one; dotted: each model's blank-image value."
show(report.plot_signals(means, "t2", chance=CHANCE["t2"], marked=LOW_MASS), "signals_t2")

# %% [markdown]
# The crossings behind those sentences (spec Table V): V_acc against chance and,
# post hoc, against the blank-image floor, and W of every awareness signal.

# %%
#| label: tbl-crossings
#| tbl-cap: "Crossing visibilities V_acc (chance floor and, post hoc, blank-image floor) and blind-spot widths W (decades) of the internal (c_int) and verbalized confidence and of the two abstain rates, with bootstrap intervals; ≥ and ≤ mark bounds from censored crossings (spec Table V)."
show_table(report.crossings_table(cross, VLMS, name, physical), "crossings")

# %% [markdown]
# ## RQ2 · Internal and verbalized confidence
#
# Does the confidence follow the collapse? For each awareness signal the crossing
# V_aware is found like V_acc, and W = log10(V_acc / V_aware) compares them: the
# signal *lags* accuracy when W > 0 (its interval above zero, or a positive lower
# bound because it never crosses, whose resamples stay above zero), moves *with*
# it only when the interval of W excludes a lag of one sweep level or more (the
# design's spacing of its levels, log10 2 for a sweep that halves V), *leads* it
# when W < 0, and otherwise no lag can be established (`murk.report.awareness_lag`).
# The lags of one signal over its model–arm pairs are one family of tests: a lag
# is stated where W's bootstrap p-value, Holm-adjusted over the family, is at
# most 1 − the interval level (`murk.results.holm`). Where accuracy itself
# does not cross, no W is defined and no lag is claimed. The end of the sweep
# (spec Table IV), the calibration (ECE, reliability diagrams), the
# discrimination (AUROC) and the accuracy of confident answers complete the
# picture.

# %% [markdown]
# Before reading the verbalized confidence, how often there is one: a
# continuation is *parsed* when the grammar of `murk.readout.parse_verbal_confidence`
# finds a confidence in it, and *cut* when it ran to the token limit instead of
# ending (its `verbal_stop`; a number touching the cut counts as missing, because
# the cut may have removed digits). The rates per model, arm, level and wording
# (`murk.results.verbal_rates`, pooled over tasks) are kept in
# `analysis/verbal_rates.nc`; the paper states them next to every verbal mean, and
# a model that never gives a parseable confidence gets no mean at all.

# %%
#| label: num-rq2-verbal-rates
rates = results.verbal_rates(ds)                        # (model, arm, level, wording): n_asked, parse_rate, limit_hit_rate
rates_t = results.verbal_rates(ds, by_task=True)        # the same per task (t2, t3_true, t3_false)
report.write_text_atomic(TABLE_DIR / "verbal_rates.csv", rates.to_dataframe().to_csv())
report.write_netcdf_atomic(rates, TABLE_DIR / "verbal_rates.nc")


# (model, wording) over the physical arms and every level; the clean image (level 0 of every arm) counted once
all_rates = report.record_verbal_rates(numbers, rates, VLMS, key, physical, END)
# the main wording (v1) per model, over both physical arms, every level and task (murk.report.verbal_rates_finding)
for k, text in report.verbal_rates_finding(
        {name(m): tuple(float(all_rates[v].sel(model=m, wording="v1")) for v in ("n_asked", "parse_rate",
                                                                                 "limit_hit_rate"))
         for m in VLMS}, cfg["readout"]["verbal_max_new_tokens"]).items():
    record(f"finding.rq2.{k}", text)
display(Markdown(numbers["finding.rq2.verbal_rates"] + " " + numbers["finding.rq2.verbal_parse"]))
rates.sel(wording="v1").to_dataframe()[["n_asked", "parse_rate", "limit_hit_rate"]].unstack("level").round(2)

# %% [markdown]
# Whether each confidence lags the collapse: W read where accuracy collapses, its
# verdict Holm-adjusted over the model–arm pairs (`murk.report.lag_finding`),
# and the end of the sweep in one sentence per arm.

# %%
#| label: num-rq2
ARM_WORDS = report.ARM_PHRASE   # an arm in a sentence: "in fog", "under water"
#: one level of the sweep in decades (the design's spacing, murk.results.level_step_decades): "with" accuracy
#: only where W's interval excludes a lag of this size or more (murk.report.awareness_lag)
W_MARGIN = float(cross.attrs.get("w_margin_decades", np.nan))
record("methods.w_margin", W_MARGIN, 2)


def lag_finding(signal: str, rq: str, task: str = "t2") -> str:
    """The sentence on W of one signal over both physical arms, recording its verdicts (`murk.report.lag_finding`)."""
    return report.lag_finding(numbers, means, cross, VLMS, name, key, physical, signal, rq, task, W_MARGIN,
                              A["ci_level"])

for signal in ("c_int", "verbal_conf"):
    record(f"finding.rq2.{signal}.t2", lag_finding(signal, "rq2"))
for arm in physical:
    end = dict(arm=arm, level=END, task="t2")
    record(f"finding.rq2.end.{arm}.t2", report.end_of_sweep_finding(
        VIS[END], ARM_WORDS[arm], [name(m) for m in VLMS], CHANCE["t2"],
        *(means["mean"].sel(**end, readout=ro).values for ro in ("correct", "c_int", "verbal_conf")),
        sc["ece"].sel(**end, confidence="c_int", stat="point").values))
    for ro in ("c_int", "verbal_conf"):
        record(f"range.{ro}.end.{arm}.t2", fmt_range(means["mean"].sel(**end, readout=ro).values))
display(Markdown("\n\n".join(numbers[k] for k in numbers if k.startswith("finding.rq2."))))

# %% [markdown]
# The internal confidence against visibility, with accuracy for reference: a
# lag is the gap between the two falls.

# %%
#| label: fig-confidence-t2
#| fig-cap: "Internal confidence (solid) against visibility with accuracy (thin dashed) for reference, t2; bands: bootstrap intervals; dashed grey: chance; dotted: blank image."
show(report.plot_signal_vs_visibility(means, "c_int", "t2", chance=CHANCE["t2"], reference="correct",
                                      marked=LOW_MASS), "confidence_t2")

# %% [markdown]
# The verbalized confidence the same way.

# %%
#| label: fig-verbal-t2
#| fig-cap: "Verbalized confidence (solid) against visibility with accuracy (thin dashed), t2; a panel names the models whose verbalized confidence could not be parsed."
show(report.plot_signal_vs_visibility(means, "verbal_conf", "t2", chance=CHANCE["t2"], reference="correct",
                                      marked=LOW_MASS), "verbal_t2")

# %% [markdown]
# W of the four signals side by side, t2 and t3 (spec Fig. 4).

# %%
#| label: fig-blind-spot
#| fig-cap: "Blind-spot widths W of the four awareness signals with bootstrap intervals, t2 (upper half) and t3 (lower half); the legend names the marks that occur (crossings, lower and upper bounds); W is undefined where accuracy does not cross (spec Fig. 4: t2 upper, t3 lower)."
show(report.plot_blind_spot_widths(cross, ("t2", "t3"), marked=LOW_MASS), "blind_spot")

# %% [markdown]
# At the murkiest level (spec Table IV): accuracy, both confidences and the
# calibration error, with how often a verbal confidence was parsed or cut.

# %%
#| label: tbl-end-of-sweep
#| tbl-cap: "At the end of the sweep: accuracy, mean internal and verbalized confidence and ECE of the internal confidence with bootstrap intervals, t2 (spec Table IV); parsed / cut: the shares of the verbal continuations with a parseable confidence and of those cut by the token limit."
show_table(report.end_of_sweep_table(sc, rates_t, VLMS, name, physical, VIS, END), "end-of-sweep")

# %% [markdown]
# Calibration of the internal confidence over the degraded levels (spec Fig. 5).

# %%
#| label: fig-reliability-t2
#| fig-cap: "Reliability diagrams of the internal confidence over the degraded levels, t2; marker area: share of the answers in the bin; grey: confidence of at least 0.9 (spec Fig. 5)."
show(report.plot_reliability(sc, "t2", marked=LOW_MASS), "reliability_t2")

# %% [markdown]
# Confident errors: pooled over the murky levels of both arms, how often an
# answer given with high internal confidence is right.

# %%
#| label: tbl-confident
#| tbl-cap: "Accuracy of t2 answers given with high internal confidence, pooled over the murky levels of both arms, with their number n (beyond the spec as a table; in the text of spec Section IV)."
record("finding.rq2.confident", report.confident_finding(
    {name(m): (est("confident_accuracy", model=m), int(sc["confident_n"].sel(model=m))) for m in VLMS},
    sc.attrs["confident_threshold"], sc.attrs["confident_max_visibility_m"]))
show_table(report.markdown_table([
    {"model": name(m), f"accuracy of answers with c_int ≥ {sc.attrs['confident_threshold']:g}":
     fmt_estimate(*est("confident_accuracy", model=m)), "n": str(int(sc["confident_n"].sel(model=m)))}
    for m in VLMS]), "confident")

# %% [markdown]
# Discrimination: how well the internal confidence separates right from wrong
# answers, level by level (AUROC).

# %%
#| label: tbl-auroc
#| tbl-cap: "AUROC of the internal confidence as a detector of correct answers, per arm and level (rows) and model (columns), t2, with bootstrap intervals (beyond the spec as a table; in the text of spec Section IV)."
show_table(report.auroc_table(sc, VLMS, name, physical, VIS), "auroc")

# %% [markdown]
# ## RQ3 · Abstention and its wording
#
# The abstain option is offered as one more choice; its rate should rise as
# accuracy falls. Its W is read like the confidences' (the floor of an abstain
# rate is one). The wording effect is the paired difference between the main
# wording ("I cannot tell, the image is too unclear to decide") and the generic
# one ("I don't know") at the middle of the murky band, with its interval: a
# difference is stated only when the interval excludes zero.

# %%
#| label: num-rq3
MID = level_of(7.8125)   # the level at which the spec reads abstention


def wording_finding(task: str = "t2") -> str:
    """The sentence on the two wordings at the middle of the murky band, both physical arms: the paired differences
    (`murk.results.paired_difference`), said by `murk.report.wording_finding`, which records the verdicts."""
    diffs = {(m, arm): paired_difference(*(image_scores.sel(model=m, arm=arm, level=MID, task=task, readout=ro)
                                           for ro in ("abstain", "abstain2"))) for m in VLMS for arm in physical}
    return report.wording_finding(numbers, sc, diffs, VLMS, name, key, physical, task, MID, VIS[MID])


for signal in ("abstain", "abstain2"):
    record(f"finding.rq3.{signal}.t2", lag_finding(signal, "rq3"))
record("finding.rq3.wording.t2", wording_finding())
for arm in physical:
    for ro in ("abstain", "abstain2"):
        record(f"range.{ro}.mid.{arm}.t2", fmt_range(means["mean"].sel(arm=arm, level=MID, task="t2", readout=ro).values))
record("cfg.mid_level_m", fmt_level(VIS[MID]))
display(Markdown("\n\n".join(numbers[k] for k in numbers if k.startswith("finding.rq3."))))

# %% [markdown]
# The abstain rate (main wording) against visibility, with accuracy.

# %%
#| label: fig-abstain-t2
#| fig-cap: "Abstain rate with the main wording (solid) against visibility with accuracy (thin dashed), t2."
show(report.plot_signal_vs_visibility(means, "abstain", "t2", reference="correct", marked=LOW_MASS), "abstain_t2")

# %% [markdown]
# Both abstain wordings per model (spec Fig. 6): the gap between them is the
# wording effect stated above.

# %%
#| label: fig-abstain2-t2
#| fig-cap: "Abstain rates with the main wording (solid) and with “I don't know” (dashed), with accuracy (dotted), one row per model, t2 (spec Fig. 6)."
show(report.plot_abstain_comparison(means, "t2", chance=CHANCE["t2"], marked=LOW_MASS), "abstain2_t2")

# %% [markdown]
# The wording of the verbalized-confidence request (spec Table VI): only the
# items asked all three wordings (the first `n_verbal_items` of the read-out
# stage) enter, for every wording, so the columns compare the same questions.

# %%
#| label: tbl-verbal-wordings
#| tbl-cap: "Verbalized confidence under the request wordings v1–v3 on the items asked all three, t2, fog (spec Table VI): mean (none: no parseable confidence), and the shares of the continuations with a parseable confidence (parsed) and cut by the token limit (cut)."
md, WORDING_MODELS = report.verbal_wordings_table(numbers, ds, VLMS, name, key, VIS)   # models asked all three
show_table(md, "verbal-wordings")
record("finding.rq3.verbal_wordings", report.verbal_wordings_finding(
    [name(m) for m in WORDING_MODELS], [name(m) for m in VLMS if m not in WORDING_MODELS]))

# %% [markdown]
# ## RQ4 · Nominal severities on the physical axis
#
# The depth stage translated each ImageNet-C fog severity into the fog
# visibility V_eq that retains the same contrast gain, per image
# (`murk.scene.nominal_equivalence`; the luma std ratio frozen before the pilot
# is the check). Here: the median V_eq and its spread across images (spec
# Table VII), each model's accuracy at the severities against its clean
# accuracy (paired differences; the largest change by magnitude is stated with
# its sign and severity), and whether the severities reach the failure band. The
# severities *sit on the plateau* for a model when every severity's median V_eq
# lies above the visibility at which the model's fog accuracy starts to fall
# (where it has lost a tenth of its clean-to-chance range, `murk.report.fall_band`;
# the upper end of the V_acc interval where that is undefined); they *reach into
# the band* where a severity lies at or below that visibility and the model's
# accuracy there has fallen below clean (the paired change's interval below 0),
# and lie in the band *without reaching the failure* where accuracy at every such
# severity holds or rises (`murk.report.band_verdict`); they cannot be placed for
# a model whose accuracy does not collapse.

# %%
#| label: tbl-nominal
#| tbl-cap: "ImageNet-C fog severities on the visibility axis: median gain-matched and std-ratio-matched equivalent visibility and spread across images (spec Table VII)."
nominal_file = TABLE_DIR / "nominal_equivalence.nc"
md, veq_median = report.nominal_results(numbers, nominal_file)   # veq_median: per severity, m
show_table(md, "nominal")

# %% [markdown]
# Where the five severities lie against each model's failure band: by position
# (their equivalent visibility against where fog accuracy starts to fall) and by
# accuracy (the paired change from clean, `murk.report.band_verdict`).

# %%
#| label: num-rq4-severities
# Methods: what changes between neighbouring severities, from the implementation's table of the fog's constants
record("methods.imagenet_c_severities", scene.describe_severities())
if nominal_file.is_file():
    record("finding.rq4.nominal", (
        f"By retained contrast gain the ImageNet-C fog severities correspond to median equivalent visibilities of "
        f"{numbers['nominal.veq_range']} m over the {numbers['nominal.n_images']} images, with a spread across images "
        f"(ninetieth over tenth percentile) of {numbers['nominal.spread_range']}; the gain-matched visibility "
        f"decreases monotonically over the five severities for {numbers['nominal.monotone_share']} % of the images. "
        f"{numbers['nominal.removed_sentence']}; {numbers['nominal.curve_non_monotone']}."))
else:
    record("finding.rq4.nominal", (
        "The nominal equivalence was not run for this output root (the depth stage wrote no "
        "analysis/nominal_equivalence.nc): the ImageNet-C severities are not placed on the visibility axis."))
acc = means["mean"].sel(readout="correct")
nom = acc.sel(arm="imagenet_c", level=slice(1, 5)).mean(["model", "task"])
fog_ = acc.sel(arm="fog").isel(level=slice(1, None)).mean(["model", "task"])
record("nominal.dyn_range_pp", 100 * float(nom.max() - nom.min()), 1)
record("physical.dyn_range_pp", 100 * float(fog_.max() - fog_.min()), 1)
# t2 accuracy at each severity minus clean, paired over the model's images
t2_correct = image_scores.sel(task="t2", readout="correct")
SEVERITY_DIFFS = {m: [paired_difference(t2_correct.sel(model=m, arm="imagenet_c", level=s_),
                                        t2_correct.sel(model=m, arm="fog", level=0)) for s_ in range(1, 6)]
                  for m in VLMS}
record("finding.rq4.t2", report.nominal_finding(numbers, VLMS, name, key, acc, cross, FALL_BAND, veq_median,
                                                SEVERITY_DIFFS, nominal_file.is_file()))
display(Markdown(numbers["finding.rq4.t2"]))

# %% [markdown]
# The severities on the fog curves (spec Fig. 7).

# %%
#| label: fig-nominal
#| fig-cap: "Nominal ImageNet-C severities placed at their median equivalent visibility on each model's fog curve, t2; the severities are numbered above the axes (spec Fig. 7)."
if np.isfinite(veq_median).any():
    fig = report.plot_nominal_vs_physical(means, veq_median, "t2", chance=CHANCE["t2"], marked=LOW_MASS)
else:
    fig = report.placeholder(f"nominal equivalence: {report.NOT_COMPUTED}")
show(fig, "nominal_t2")

# %% [markdown]
# ## The verification task and the controls
#
# t3 asks whether the boxed object is a given category, once with the true
# category and once with a distractor (chance one half). The controls test what
# can be answered without the image: the blank (uniform grey) and shuffled
# (another item's clean pixels) images should leave accuracy at chance; a floor
# above chance would mean the task can be solved from the box and the category
# prior, below chance that the distractors are not prior-matched. On the blank
# image a bias of t3 towards one answer shows as a difference between its
# true-category and distractor questions.

# %%
#| label: num-controls
for ctrl in core.CONTROL_ARMS:   # each control's accuracy against chance
    for task in ("t2", "t3"):
        record(f"finding.controls.{ctrl}.{task}", report.control_finding(
            ctrl, task, {name(m): est("mean", model=m, arm=ctrl, level=0, task=task, readout="correct") for m in VLMS},
            CHANCE[task]))
# t3's answer bias on the blank image: accuracy on the distractor minus the true-category questions, paired
raw = ds["value"].sel(arm="blank", level=0, readout="correct")
record("finding.controls.t3_bias", report.t3_bias_finding(
    {name(m): paired_difference(raw.sel(model=m, task="t3_false"), raw.sel(model=m, task="t3_true")) for m in VLMS}))
display(Markdown("\n\n".join(numbers[k] for k in numbers if k.startswith("finding.controls."))))

# %% [markdown]
# Design diagnostics. The spec's pilot found its own design confounded through
# these controls (its contribution iv): distractors without a matched prior put
# the blank-image accuracy below chance, and on the blank image t3 was answered
# "No" to almost every question. murk runs the same checks on any design, per
# model and task: each control's accuracy against chance and against a guesser
# that sees only the options and picks the category most often correct among
# this run's items (t2; estimated on the same items, so optimistic on a small
# run, a conservative reference; for t3 the guesser is the majority answer, at
# chance by construction), and on the blank image the share of t3's most frequent answer
# (`murk.results`: a floor below chance says the distractors carry a prior
# the model exploits against, a floor above the guesser that the question is
# answerable without the image, and one answer given to at least
# `diagnostics.DOMINANT_SHARE` of the questions dominates the task). The floors
# of every model, control and task are one family of tests: a floor is stated
# below chance or above the guesser only where the bootstrap p-value of its
# interval's test, Holm-adjusted over the family, is at most 1 − the interval
# level (`murk.results.floor_verdicts`). The
# numbers are recorded as `diagnostic.*`.

# %%
#| label: tbl-diagnostics
#| tbl-cap: "Design diagnostics from the controls, per model and task: blank- and shuffled-image accuracy with bootstrap intervals, chance, the prior guesser's accuracy on the model's items, the verdict of each floor, and t3's most frequent answer on the blank image with its share (beyond the spec as a table; in the text of spec Section IV)."
# the floors of every model, control and task are one family of tests (murk.results.floor_verdicts)
md, dominated = report.diagnostics_table(numbers, ds, sc, image_scores, table, VLMS, name, key, CHANCE,
                                         list(cfg["prompts"]["t3_options"]), draw, A["bootstrap_resamples"],
                                         A["ci_level"])
show_table(md, "diagnostics")

# %% [markdown]
# The diagnostics' finding, as the paper states it.

# %%
display(Markdown(numbers["finding.diagnostic"]))

# %% [markdown]
# The marker. The pilot lost its thin box (spec Sec. III "(iii)": 8 px instead
# of 3 px). murk renders each item at the design's murkiest level with and
# without the box and measures how much the box stands out as a vision encoder
# sees it: the colour difference the box makes, averaged over the encoder's
# patches that it touches (`murk.results.marker_contrast`; patch side
# `diagnostics.PATCH_PX`, the study models' `patch_size`), and counts an item as
# hard to see below `diagnostics.HARD_TO_SEE_CONTRAST` (murk's threshold). The
# clean image is the reference.

# %%
#| label: tbl-marker
#| tbl-cap: "The box marker as a vision encoder sees it: its contrast against its surround, averaged over the patches it touches, on the clean image and at the design's murkiest level of each physical arm (median over items), and the share of items whose marker is hard to see (beyond the spec)."
V_END = float(SWEEP[-1])
try:
    current = scene.current_depth(output_dir)
except FileNotFoundError:  # a cube analysed without its depth stage: no renderings
    current = None
contrast = report.marker_contrasts(table, meta.get("image_dir", ""), cfg["render"], current, V_END)
md, hard = report.marker_table(numbers, contrast, int(cfg["render"]["box_width_px"]), V_END)
show_table(md, "marker")

# %% [markdown]
# The box marker's finding, as the paper states it.

# %%
display(Markdown(numbers["finding.diagnostic_marker"]))

# %% [markdown]
# Two designs side by side. The run's design (`murk.protocol`: the study's, or a
# variant such as the spec's pilot, `data/pilot.yaml`) is stated first. When
# another design's run is given (`compare_with`: its output folder, e.g. the
# study's design next to the pilot's), the floors, t3's blank-image answer bias
# and V_acc are compared on the models and images both runs read out
# (`murk.results.design_summary`, point estimates over the shared images;
# each run restricted to its own design's sweep).

# %%
#| label: tbl-design-comparison
#| tbl-cap: "This run's design and, when another design's run is given (compare_with), that run's, on the models and images both read out: blank- and shuffled-image accuracy (t2), t3's most frequent blank-image answer share, and V_acc (t2) in fog and under water (beyond the spec)."
record("finding.design", report.describe_design(cfg))
record("methods.distractors", report.methods_text(cfg, "distractors"))   # the paper's methods: this design's rules
record("methods.binary_task", report.methods_text(cfg, "binary_task"))
compare_with = core.run_default("compare_with", compare_with)
CMP_ROWS, CMP_WHY = report.design_comparison(numbers, ds, compare_with, output_dir, VLMS, name, key, CHANCE)
show_table(report.markdown_table(CMP_ROWS) if CMP_ROWS else not_computed("this run read out no model"),
           "design-comparison")

# %% [markdown]
# Where no other design's run was given (or it shares no model and image with
# this one), the comparison says why it was not computed.

# %%
if CMP_WHY:
    print(f"WARNING design comparison not computed: {CMP_WHY}")
display(Markdown(numbers["finding.design"] + "\n\n" + numbers["finding.design_comparison"]))

# %% [markdown]
# The verification task's accuracy against visibility (t3, chance one half).

# %%
#| label: fig-accuracy-t3
#| fig-cap: "t3 (verification) accuracy against visibility; conventions as for t2."
show(report.plot_signal_vs_visibility(means, "correct", "t3", chance=CHANCE["t3"], marked=LOW_MASS), "accuracy_t3")

# %% [markdown]
# All four signals for t3 (spec Fig. 8).

# %%
#| label: fig-signals-t3
#| fig-cap: "Accuracy, internal confidence, verbalized confidence and the abstain rate against visibility, t3 (verification), with the conventions of the t2 figure (spec Fig. 8)."
show(report.plot_signals(means, "t3", chance=CHANCE["t3"], marked=LOW_MASS), "signals_t3")

# %% [markdown]
# The same views for t3 and the remaining signals are written as files for
# completeness (not in the paper).

# %%
for ro, fname in (("c_int", "confidence"), ("verbal_conf", "verbal"), ("abstain", "abstain")):
    report.save(report.plot_signal_vs_visibility(means, ro, "t3", chance=CHANCE["t3"] if ro != "abstain" else None,
                                                   reference="correct", marked=LOW_MASS), FIG_DIR, f"{fname}_t3", PIPELINE_CHECK,
                pdf=OUT.pdf)
report.save(report.plot_reliability(sc, "t3", marked=LOW_MASS), FIG_DIR, "reliability_t3", PIPELINE_CHECK, pdf=OUT.pdf)
report.save(report.plot_abstain_comparison(means, "t3", chance=CHANCE["t3"], marked=LOW_MASS), FIG_DIR,
             "abstain2_t3", PIPELINE_CHECK, pdf=OUT.pdf)

# %% [markdown]
# Monotonicity: for each series, the adjacent level pairs that move the wrong
# way going murkier (accuracy or confidence rising, abstention falling), raw
# and beyond two standard errors of the paired image-level difference. The
# pooled share pools models, tasks, the five signals and the two **physical**
# arms; the ImageNet-C series are pooled separately.

# %%
#| label: tbl-monotonicity
#| tbl-cap: "Monotonicity: adjacent level pairs moving the wrong way, raw · beyond two standard errors, per series (beyond the spec)."
show_table(report.monotonicity_table(numbers, sc, VLMS, name, physical), "monotonicity")

# %% [markdown]
# Every level of the sweep, t2 (spec Table IX): the means with their intervals.

# %%
#| label: tbl-sweep-t2
#| tbl-cap: "Means with bootstrap intervals at every level of the sweep, t2 (spec Table IX)."
def sweep_table(task: str) -> str:
    """Every level's means with intervals, per model and physical arm (`murk.report.sweep_table`)."""
    return report.sweep_table(sc, VLMS, name, physical, VIS, task)


show_table(sweep_table("t2"), "sweep-t2")

# %% [markdown]
# The same for t3 (spec Table X).

# %%
#| label: tbl-sweep-t3
#| tbl-cap: "Means with bootstrap intervals at every level of the sweep, t3 (spec Table X)."
show_table(sweep_table("t3"), "sweep-t3")

# %% [markdown]
# The prompts as the models saw them (spec Table II), from `murk.protocol`.

# %%
#| label: tbl-prompts
#| tbl-cap: "Prompt templates (spec Table II), verbatim; a placeholder in braces is filled in per item, ⏎ marks a line break."
one_line = lambda v: str(v).replace("\n", " ⏎ ")  # noqa: E731
show_table(report.markdown_table([{"prompt": r["name"], "template": report.verbatim(one_line(r["template"])),
                                  "example": report.verbatim(one_line(r["example"]))}
                                 for r in protocol.prompt_table(cfg)]), "prompts")

# %% [markdown]
# The settings of the run (spec Table III), each with the place it is read from
# (`murk.report.settings_rows`).

# %%
#| label: tbl-config
#| tbl-cap: "Settings of the run (spec Table III): the frozen configuration and, from where they live, the constants in code and the choices recorded with the run, each with its source."
show_table(report.markdown_table([{"setting": report.verbatim(r["setting"]),
                                   "value": report.markdown_text(one_line(r["value"])), "source": r["source"]}
                                  for r in report.settings_rows(cfg, meta, ds.attrs)]), "config")

# %% [markdown]
# Examples: the first items across fog and underwater levels with the first
# model's t2 answer (✓ correct, ✗ wrong), internal confidence c, verbalized
# confidence v and abstain decision (abst. / ans.), rendered again from the items and the depth cache.

# %%
#| label: fig-examples
#| fig-cap: "The first items across fog and underwater levels with one model's t2 answer (✓ correct, ✗ wrong), internal confidence c, verbalized confidence v and abstain decision (abst.: abstained, ans.: answered); the model is named above the grid (spec Fig. 9)."
example_levels, n_examples = tuple(k for k in (0, 3, 5, 6, 7, 8) if k <= END), 3   # END: the design's last level
model0 = VLMS[0]
try:
    current = scene.current_depth(output_dir)
except FileNotFoundError:  # a cube analysed without its depth stage: no examples
    current = None
tiles, captions, row_labels = report.example_tiles(ds, table, meta.get("image_dir", ""), cfg["render"], current, model0,
                                                   VIS, example_levels, n_examples)
record("examples.model", report.verbatim(model0) + (f" {DAGGER}" if model0 in LOW_MASS else ""))
record("examples.n_items", len(tiles) // 2)
if tiles:
    fig = report.plot_item_grid(tiles, row_labels, ["clean" if k_ == 0 else f"V = {fmt_level(VIS[k_])} m"
                                                     for k_ in example_levels], captions,
                                 title=f"read-outs of {label(model0)} (t2)")
else:
    fig = report.placeholder(f"examples: {report.NOT_COMPUTED} (no depth cache or no readable image)")
show(fig, "examples_t2")

# %% [markdown]
# ## Abstract and discussion
#
# The paper's abstract and its Discussion are generated here from the verdicts
# recorded above (`verdict.rq1.*` … `verdict.rq4.*`, each decided by
# `murk.report` on the bootstrap intervals): they count, per question, the models
# (and arms) for which the cube shows an effect, and say "not observed" or "cannot
# be stated" where it does not, so that they change when the cube does. A signal's
# direction is its own: accuracy and confidence fall in murkier conditions, the
# abstain rate rises.

# %%
#| label: num-abstract
PC_MODELS = [m for m in VLMS if bool(ds["pipeline_check"].sel(model=m))]   # random-weight checkpoints
for k, text in report.abstract_and_discussion(numbers, VLMS, name, key, N_OF, ds.sizes["image"], physical, PC_MODELS,
                                              approximate).items():
    record(k, text)
display(Markdown("\n\n".join(numbers[k] for k in ("abstract", "discussion.confidence", "discussion.abstention",
                                                     "discussion.nominal", "discussion.scope"))))

# %% [markdown]
# The introduction's contributions, (i)–(iv) as the spec lists its own: each
# item is written from this run (the design, the models and items run, the
# verdicts above), so that it claims what the cube shows and no more; the
# results of random-weight checkpoints are labelled as the pipeline check they are.

# %%
#| label: num-contributions
for k, text in report.contributions(numbers, VLMS, name, key, N_OF, ds.sizes["image"], physical, PC_MODELS,
                                    protocol.design_of(cfg)["distractors"], sum(len(w) for w in dominated.values()),
                                    hard.get("fog", np.nan), V_END).items():
    record(k, text)
display(Markdown("\n".join(f"- ({i}) {numbers['intro.contribution.' + k]}" for i, k in
                           zip(("i", "ii", "iii", "iv"), ("protocol", "measurement", "evidence", "diagnostics")))))

# %% [markdown]
# ## Colophon and the numbers file
#
# The environment, then this notebook's numbers fragment is written and merged
# with the beyond-the-spec notebook's into the numbers file; every key the
# paper cites that neither computed is filled in there as "not computed in this
# run" (so the paper says so instead of failing).

# %% [markdown]
# What murk ignored and how it loaded: decoding is greedy whatever a checkpoint's
# generation configuration asks for, and the read-out stage recorded what it
# asked for in each store's attributes (`ignored_generation_settings`), with the
# loading options it was given (`trust_remote_code`, `allow_pickle`; both off
# unless set by name), and any custom code a checkpoint declared that was not
# run, with the built-in class used instead (`custom_code_not_run`).

# %%
#| label: num-colophon
def store_attrs(m: str) -> dict:
    """The attributes of a model's read-out store (its first shard when sharded)."""
    p = stores[m][0] if isinstance(stores[m], list) else stores[m]
    with xr.open_zarr(p, consolidated=False) as z:
        return dict(z.attrs)


colophon = report.colophon_words({m: store_attrs(m) for m in VLMS})   # what each store recorded, in words
record("colophon.ignored_generation_settings", colophon["ignored_generation_settings"])
# the weights each model was read out with, as the cube records them: a hub snapshot's commit, a local folder's
# content digest (sha256:…, murk.core: a re-saved checkpoint is another revision)
record("colophon.model_revisions", "; ".join(f"{report.verbatim(m)}: {report.verbatim(rev or 'not recorded')}"
                                             for m, rev in zip(ds["model"].values, ds["model_revision"].values)
                                             if str(m) in VLMS))
record("colophon.loading_options", colophon["loading_options"])
print(numbers["colophon.model_revisions"], numbers["colophon.ignored_generation_settings"],
      numbers["colophon.loading_options"], sep="\n")

# %% [markdown]
# The package versions, then the fragment is written and merged.

# %%
#| label: num-numbers-file
for pkg, v in core.package_versions().items():
    record(f"version.{pkg}", v)
numbers.save()
merged = report.merge_numbers(output_dir)   # with notebooks/05_beyond.py's fragment, where it exists
print(f"{len(numbers)} numbers written to {numbers.path}, merged into {merged}")
