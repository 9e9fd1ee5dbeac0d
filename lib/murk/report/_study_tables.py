"""The study notebook's remaining tables and records: the models and missing items, the settings the paper quotes,
the accuracy ranges over models, the verbal parse and cut rates, the verbal request wordings (spec Table VI), the
nominal severities (spec Table VII), monotonicity and the examples figure's tiles (spec Fig. 9)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np
import xarray as xr

from murk import core, monitor, readout, results, scene
from murk.report._format import NOT_COMPUTED, fmt, fmt_level, fmt_list, fmt_range
from murk.report._escape import markdown_text, plot_text
from murk.report._markdown import markdown_table, verbatim
from murk.report._tables import SIGNAL_COLUMNS, nominal_table

if TYPE_CHECKING:
    import pandas as pd

#: why the equivalent visibility of an image–severity pair is undefined, in words (``removed`` of scene.table_vii)
REMOVED_WORDS = {"several_roots": "several roots (a non-monotone fog curve crosses the target more than once)",
                 "outside_0_1": "a gain outside (0, 1)", "no_root": "no root within the bracket",
                 "saturated": "a saturated rendering", "undefined": "an undefined statistic",
                 "missing_input": "no input (bad image or depth)"}


def not_computed_table(what: str) -> str:
    """A one-row Markdown table saying that this run did not compute ``what`` (a cell keeps its caption and label).

    >>> print(not_computed_table("no cube"))
    | note |
    |---------------------------------|
    | not computed in this run: no cube |
    <BLANKLINE>
    """
    return markdown_table([{"note": f"{NOT_COMPUTED}: {what}"}])


def record_settings(numbers, cfg: Mapping[str, Any], meta: Mapping[str, Any], sc: xr.Dataset,
                    sweep: np.ndarray) -> None:
    """Record the settings the paper quotes (spec Table III, Methods): ``n_resamples``, ``ci_percent``, ``cfg.*``
    and ``methods.verbal_grammar``, each from where it lives (the frozen configuration, the constants in code, the
    scores' attributes).

    Parameters
    ----------
    numbers : murk.report.Numbers
        Where the numbers are recorded.
    cfg : mapping
        The run's frozen configuration (``analysis``, ``render``, ``readout`` sections).
    meta : mapping
        The items' metadata (``seed``).
    sc : xarray.Dataset
        The scores (attrs ``confident_threshold``, ``confident_max_visibility_m``).
    sweep : numpy.ndarray
        The design's sweep, metres.
    """
    record, a, chance = numbers.record, cfg["analysis"], cfg["analysis"]["chance"]
    record("n_resamples", int(a["bootstrap_resamples"]))
    record("n_resamples_crossing", int(a["bootstrap_resamples_crossing"]))
    record("ci_percent", f"{100 * a['ci_level']:.0f}")
    record("cfg.koschmieder", f"{scene.KOSCHMIEDER_CONSTANT:g}")
    record("cfg.airlight", f"{scene.FOG_AIRLIGHT:g}")
    record("cfg.sweep", ", ".join(fmt_level(v) for v in sweep))
    record("cfg.n_levels", len(sweep))
    record("cfg.sweep_min_m", fmt_level(sweep.min()))
    record("cfg.sweep_max_m", fmt_level(sweep.max()))
    record("cfg.wavelengths_nm", ", ".join(str(v) for v in scene.UNDERWATER_WAVELENGTHS_NM))
    record("cfg.pope_fry", ", ".join(f"{v:g}" for v in scene.POPE_FRY_ABSORPTION_PER_M))
    record("cfg.depth_min_m", f"{scene.DEPTH_MIN_M:g}")
    record("cfg.depth_max_m", f"{scene.DEPTH_MAX_M:g}")
    record("cfg.max_side_px", int(cfg["render"]["max_side_px"]))
    record("cfg.box_width_px", int(cfg["render"]["box_width_px"]))
    record("cfg.seed", int(meta["seed"]))
    record("cfg.verbal_tokens", int(cfg["readout"]["verbal_max_new_tokens"]))
    record("cfg.chance_t2", f"{chance['t2']:g}")
    record("cfg.chance_t3", f"{chance['t3']:g}")
    record("cfg.confident_threshold", f"{sc.attrs['confident_threshold']:g}")
    record("cfg.confident_max_v_m", fmt_level(sc.attrs["confident_max_visibility_m"]))
    record("cfg.ece_bins", int(inspect.signature(results.confidence_scores).parameters["n_bins"].default))
    record("cfg.value_dtype", f"`{np.dtype(core.VALUE_DTYPE).name}`")
    record("cfg.option_mass_min", f"{readout.OPTION_MASS_MIN:g}")
    record("cfg.monitor_quantile", f"{monitor.QUANTILE:g}")
    record("cfg.monitor_far_fraction", f"{monitor.FAR_FRACTION:.4g}")
    record("cfg.monitor_t_min", f"{monitor.T_RELIABLE[0]:g}")
    record("methods.verbal_grammar", (
        "The verbalized confidence is the integer from 0 to 100 after “Confidence:” (label variants such as "
        "“Confidence level:”, Markdown emphasis, a “%” or “/100” allowed; decimals, fractions and values out of range "
        "are missing; an echoed “0 to 100” is skipped), divided by 100 (`murk.readout.parse_verbal_confidence`); a "
        f"continuation that reaches the {cfg['readout']['verbal_max_new_tokens']}-token limit with its number at the "
        "very end counts as missing, because the cut may have removed digits"))


def record_verbal_rates(numbers, rates: xr.Dataset, models: Sequence[str], key: Callable[[str], str],
                        physical: Sequence[str], end: int) -> xr.Dataset:
    """Record the verbal parse and cut rates (``verbal.parse_rate|limit_hit_rate|n_asked.*``) per model, wording and
    physical arm on the clean image and at the end of the sweep, and over every level of the physical arms.

    Parameters
    ----------
    numbers : murk.report.Numbers
        Where the numbers are recorded.
    rates : xarray.Dataset
        :func:`murk.results.verbal_rates` (model, arm, level, wording): ``n_asked``, ``parse_rate``,
        ``limit_hit_rate``.
    models, key
        The VLMs and their slugs in numbers keys.
    physical : sequence of str
        The physical arms (non-empty).
    end : int
        The index of the sweep's last level.

    Returns
    -------
    xarray.Dataset
        The rates per (model, wording) over the physical arms and every level, the clean image (level 0 of every
        arm) counted once (:func:`murk.results.pooled_rates`).
    """
    record = numbers.record
    all_rates = results.pooled_rates([rates.sel(arm=physical[0])] + [rates.sel(arm=a).isel(level=slice(1, None))
                                                                     for a in physical[1:]], ["level"])
    for m in models:
        k = key(m)
        for w in rates["wording"].values:
            for arm in physical:
                for lab, lvl in (("clean", 0), ("end", end)):
                    cell = rates.sel(model=m, arm=arm, level=lvl, wording=w)
                    record(f"verbal.parse_rate.{k}.{arm}.{w}.{lab}", float(cell["parse_rate"]))
                    record(f"verbal.limit_hit_rate.{k}.{arm}.{w}.{lab}", float(cell["limit_hit_rate"]))
                    record(f"verbal.n_asked.{k}.{arm}.{w}.{lab}", int(cell["n_asked"]))
            a = all_rates.sel(model=m, wording=w)
            record(f"verbal.parse_rate.{k}.{w}.all", float(a["parse_rate"]))
            record(f"verbal.limit_hit_rate.{k}.{w}.all", float(a["limit_hit_rate"]))
            record(f"verbal.n_asked.{k}.{w}.all", int(a["n_asked"]))
    return all_rates


def _level_of(vis: np.ndarray, v_m: float) -> int:
    """Index of the sweep level closest to ``v_m`` metres (in log V); ``vis[0]`` is the clean image."""
    return 1 + int(np.argmin(np.abs(np.log(vis[1:] / v_m))))


def verbal_wordings_table(numbers, ds: xr.Dataset, models: Sequence[str], name: Callable[[str], str],
                          key: Callable[[str], str], vis: np.ndarray) -> tuple[str, list[str]]:
    """The verbalized confidence under the request wordings on the items asked all three, t2, fog (spec Table VI),
    recording each wording's clean parse and cut rates (``verbal.wording.*``).

    Parameters
    ----------
    numbers : murk.report.Numbers
        Where the numbers are recorded.
    ds : xarray.Dataset
        The VLMs' cube (``value``, ``verbal_text_v2``; readouts ``verbal_conf_v2`` … where the variants ran).
    models, name, key
        The VLMs, their display names and their slugs in numbers keys.
    vis : numpy.ndarray
        The visibility of each level, metres (level 0: clean, inf).

    Returns
    -------
    md : str
        The Markdown table: rows per model at 62.5 … 1.953125 m (those in the sweep), columns mean, parsed, cut per
        wording; a note where the cube has no wording variants.
    asked : list of str
        The models asked all three wordings on some items.
    """
    wordings = [w for w in results.VERBAL_WORDING_READOUTS
                if results.VERBAL_WORDING_READOUTS[w][0] in ds["readout"].values]
    asked_models: list[str] = []
    if "verbal_conf_v2" not in ds["readout"].values:
        return not_computed_table("this cube has no verbal wording variants"), asked_models
    rows = []
    for m in models:
        asked = (ds["verbal_text_v2"].sel(model=m, arm="fog", level=0, task="t2") != "").values
        asked_models += [m] if asked.any() else []
        if not asked.any():
            rows.append({"model": name(m), "V (m)": "–", "items": "0", "t2 accuracy": "–"}
                        | {f"{w}{c}": "–" for w in wordings for c in ("", " parsed", " cut")})
            continue
        sub = ds.sel(model=[m]).isel(image=np.flatnonzero(asked))
        r_sub = results.verbal_rates(sub, by_task=True).sel(model=m, arm="fog", task="t2")
        for v in [v for v in (np.inf, 62.5, 15.625, 7.8125, 3.90625, 1.953125) if np.isclose(vis, v).any()]:
            lvl = 0 if not np.isfinite(v) else _level_of(vis, v)
            cell = sub["value"].sel(model=m, arm="fog", level=lvl, task="t2")
            mean = lambda ro: float(cell.sel(readout=ro).mean(skipna=True))  # noqa: E731
            row = {"model": name(m), "V (m)": fmt_level(vis[lvl]), "items": str(int(asked.sum())),
                   "t2 accuracy": fmt(mean("correct"))}
            for w in wordings:
                r_ = r_sub.sel(level=lvl, wording=w)
                row[w] = ("none" if float(r_["n_asked"]) and float(r_["parse_rate"]) == 0
                          else fmt(mean(results.VERBAL_WORDING_READOUTS[w][0])))
                row[f"{w} parsed"] = fmt(float(r_["parse_rate"]))
                row[f"{w} cut"] = fmt(float(r_["limit_hit_rate"]))
                if lvl == 0:
                    numbers.record(f"verbal.wording.parse_rate.{key(m)}.{w}.clean", float(r_["parse_rate"]))
                    numbers.record(f"verbal.wording.limit_hit_rate.{key(m)}.{w}.clean", float(r_["limit_hit_rate"]))
            rows.append(row)
    return markdown_table(rows), asked_models


def verbal_wordings_finding(asked: Sequence[str], unasked: Sequence[str]) -> str:
    """The sentence on the verbal request wordings: which models were compared, which were not asked.

    Parameters
    ----------
    asked, unasked : sequence of str
        The display names of the models asked all three wordings on some items, and of the others.

    >>> verbal_wordings_finding(["A"], ["B"])
    'The verbalized confidence under the three request wordings, with the shares of parsed and cut continuations, is compared for A (B was not asked the other wordings).'
    """
    return ((
        "No model was asked the verbalized-confidence request in the other wordings in this run (the read-out's "
        "n_verbal_items was 0), so the wordings are not compared" if not asked else
        f"The verbalized confidence under the three request wordings, with the shares of parsed and cut continuations, "
        f"is compared for {fmt_list(asked)}"
        + (f" ({fmt_list(unasked)} {'was' if len(unasked) == 1 else 'were'} not asked the other "
           "wordings)" if unasked else "")) + ".")


def nominal_results(numbers, nominal_file: str | Path) -> tuple[str, np.ndarray]:
    """The ImageNet-C severities on the visibility axis (spec Table VII) from the depth stage's nominal equivalence,
    recording ``nominal.*`` (medians, spreads, the pairs removed and why).

    Parameters
    ----------
    numbers : murk.report.Numbers
        Where the numbers are recorded.
    nominal_file : path
        ``analysis/nominal_equivalence.nc`` (:func:`murk.scene.nominal_equivalence`); absent: not computed, nothing
        recorded.

    Returns
    -------
    md : str
        The Markdown table with its notes, or a note that it was not computed.
    veq_median : numpy.ndarray, shape (5,)
        The median gain-matched equivalent visibility per severity, metres (NaN where not computed).
    """
    record, nominal_file = numbers.record, Path(nominal_file)
    if not nominal_file.is_file():
        return (not_computed_table("the depth stage wrote no nominal equivalence (analysis/nominal_equivalence.nc)"),
                np.full(5, np.nan))
    with xr.open_dataset(nominal_file) as f:
        nds = f.load()
    tab = scene.table_vii(nds)
    veq_median = tab["median_v_eq_gain_m"].to_numpy(float)
    for sev, r in tab.iterrows():
        record(f"nominal.veq.{sev}", r["median_v_eq_gain_m"], 0)
        record(f"nominal.veq_std.{sev}", r["median_v_eq_std_ratio_m"], 0)
        record(f"nominal.spread.{sev}", r["spread_p90_p10"], 1)
    record("nominal.veq_range", fmt_range(veq_median, digits=0))
    record("nominal.spread_range", fmt_range(tab["spread_p90_p10"], digits=1))
    record("nominal.monotone_share", 100 * tab.attrs["monotone_share"], 0)
    record("nominal.n_images", int(nds.sizes["image"]))
    md = nominal_table(tab, nds.attrs.get("depth_backend"), bool(int(nds.attrs.get("depth_approximate", 0))))
    all_removed = {k: int(v) for k, v in tab.attrs.get("removed", {}).items()}
    for k, v in all_removed.items():
        record(f"nominal.removed.{k}", v)
    removed = {k: v for k, v in all_removed.items() if v}
    record("nominal.removed.total", sum(all_removed.values()))
    record("nominal.n_pairs", int(tab.attrs.get("n_pairs", nds["v_eq_gain_m"].size)))
    record("nominal.removed", (fmt_list(f"{v} for {REMOVED_WORDS.get(k, k.replace('_', ' '))}"
                                        for k, v in removed.items()) if removed else "none"))
    record("nominal.removed_sentence", (
        f"Of the {numbers['nominal.n_pairs']} image–severity pairs, the equivalent visibility is undefined, and left "
        f"out of the medians, for {numbers['nominal.removed']}" if removed else
        f"The equivalent visibility is defined for every one of the {numbers['nominal.n_pairs']} image–severity pairs"))
    n_curve = int(tab.attrs.get("n_curve_images", -1))
    record("nominal.curve_non_monotone", (
        f"{tab.attrs['n_curve_non_monotone']} of {n_curve} images have a gain fog curve that rises somewhere going "
        "murkier" if n_curve >= 0 else "whether the gain fog curves are monotone was not recorded"))
    md += f" {numbers['nominal.removed_sentence']}; {numbers['nominal.curve_non_monotone']}."
    return md + "\n", veq_median


def monotonicity_table(numbers, sc: xr.Dataset, models: Sequence[str], name: Callable[[str], str],
                       physical: Sequence[str]) -> str:
    """The adjacent level pairs that move the wrong way going murkier, raw and beyond two standard errors, per model,
    arm, task and signal, recording the pooled shares (``mono.pooled[.imagenet_c].raw|sig[.count]``: models, tasks,
    the five signals and the physical arms; the ImageNet-C arm apart).

    Parameters
    ----------
    numbers : murk.report.Numbers
        Where the numbers are recorded.
    sc : xarray.Dataset
        The scores (``mono_raw``, ``mono_beyond_noise``: shares of the ``mono_pairs`` pairs; model, arm, task,
        readout).
    models, name
        The VLMs and their display names.
    physical : sequence of str
        The physical arms in the scores.

    Returns
    -------
    str
        The Markdown table; a cell reads "wrong raw/pairs · wrong beyond noise/pairs" ("n/a": no pair).
    """
    mono_arms = [a for a in (*core.PHYSICAL_ARMS, "imagenet_c") if a in sc["arm"].values]
    rows = []
    for m in models:
        for arm in mono_arms:
            for task in sc["task"].values:
                row = {"model": name(m), "arm": arm, "task": str(task)}
                for ro in results.SIGNALS:
                    c = dict(model=m, arm=arm, task=task, readout=ro)
                    k_ = int(sc["mono_pairs"].sel(**c))
                    r_, s_ = float(sc["mono_raw"].sel(**c)), float(sc["mono_beyond_noise"].sel(**c))
                    row[SIGNAL_COLUMNS[ro]] = f"{round(r_ * k_)}/{k_} · {round(s_ * k_)}/{k_}" if k_ else "n/a"
                rows.append(row)
    for label, arms in (("", physical), (".imagenet_c", ["imagenet_c"] if "imagenet_c" in sc["arm"].values else [])):
        mono = sc[["mono_raw", "mono_beyond_noise", "mono_pairs"]].sel(model=list(models), arm=arms)
        pairs = float(mono["mono_pairs"].sum())
        for k_, var in (("raw", "mono_raw"), ("sig", "mono_beyond_noise")):
            wrong = float((mono[var].fillna(0) * mono["mono_pairs"]).sum())
            numbers.record(f"mono.pooled{label}.{k_}", wrong / pairs if pairs else float("nan"))
            numbers.record(f"mono.pooled{label}.{k_}.count", f"{round(wrong)}/{int(pairs)}")
    numbers.record("mono.pooled.what", "models, tasks, the five signals and the two physical arms (fog and underwater)")
    return markdown_table(rows)


def example_tiles(ds: xr.Dataset, table: "pd.DataFrame", image_dir: str | Path, render: Mapping[str, Any],
                  depth: Mapping | None, model: str, vis: np.ndarray, levels: Sequence[int],
                  n_examples: int = 3) -> tuple[list, list, list]:
    """The first ``n_examples`` items with usable input, rendered in fog and under water at ``levels``, with the
    marker drawn, and ``model``'s t2 read-outs as captions (spec Fig. 9's grid).

    Parameters
    ----------
    ds : xarray.Dataset
        The VLMs' cube (``value``: readouts answer, correct, c_int, verbal_conf, abstain).
    table : pandas.DataFrame
        The selected items (``file_name``, ``width``, ``height``, ``image_id``, ``bbox``, ``category``,
        ``t2_options``).
    image_dir : path
        The folder of the images.
    render : mapping
        The configuration's ``render`` section (``max_side_px``, ``box_width_px``).
    depth : mapping or None
        :func:`murk.scene.current_depth` of the output root; None: no tiles.
    model : str
        The model whose read-outs caption the tiles.
    vis : numpy.ndarray
        The visibility of each level, metres (level 0: clean).
    levels : sequence of int
        The levels shown (0: the clean image).
    n_examples : int
        The number of items.

    Returns
    -------
    tiles : list of list of numpy.ndarray
        Two rows per item (fog, underwater), one H × W × 3 uint8 tile per level.
    captions : list of list of str
        :func:`murk.report.example_caption` per tile.
    row_labels : list of str
        "category · arm" per row.
    """
    from murk.report._figures import example_caption

    tiles, captions, row_labels = [], [], []
    for i in range(len(table)) if depth is not None and "file_name" in table else []:
        if len(tiles) >= 2 * n_examples:  # the first n_examples items with usable input
            break
        row = table.iloc[i]
        try:  # inputs and both renderings first: bad input or a failed rendering skips the item (recorded in the cube)
            img, size = scene.load_presented(Path(image_dir) / row["file_name"], render["max_side_px"],
                                             expected_size=(int(row["width"]), int(row["height"])))
            z = scene.load_depth(depth["path"], int(row["image_id"]), shape=img.shape[:2])
            stacks = {arm: list(sweep(img, z, np.asarray([vis[k] for k in levels if k > 0])))
                      for arm, sweep in (("fog", scene.fog_sweep), ("underwater", scene.underwater_sweep))}
        except (FileNotFoundError, ValueError, OSError):
            continue
        bbox = scene.scale_bbox(row["bbox"], (int(row["width"]), int(row["height"])), size)
        for arm, stack in stacks.items():
            shown = [img] + stack
            tiles.append([scene.draw_box(x, bbox, render["box_width_px"]) for x in shown])
            v = ds["value"].sel(model=model, arm=arm, task="t2", image=int(row["image_id"]))
            cap = []
            for k_ in levels:
                c = v.sel(level=k_)
                ans = c.sel(readout="answer").item()
                answer = row["t2_options"][int(ans)] if np.isfinite(ans) else "n/a"
                cap.append(example_caption(answer, c.sel(readout="correct").item(), c.sel(readout="c_int").item(),
                                           c.sel(readout="verbal_conf").item(), c.sel(readout="abstain").item()))
            captions.append(cap)
            row_labels.append(plot_text(f"{row['category']} · {arm}"))
    return tiles, captions, row_labels


def missing_table(numbers, full: xr.Dataset, items_report: str | Path) -> str:
    """The items that could not be read out (bad input recorded per model and image; an image beyond a model's
    ``n_items``, :data:`murk.results.NOT_RUN`, is not listed), recording ``n_missing_items`` and the images the
    select stage used transposed (``colophon.transposed_images``).

    Parameters
    ----------
    numbers : murk.report.Numbers
        Where the numbers are recorded.
    full : xarray.Dataset
        The cube (optional ``missing_reason``, dims model × image: "" where read out).
    items_report : path
        The select stage's ``items_report.json`` (its ``image_checks.transposed``: image -> why); absent: none.

    Returns
    -------
    str
        The Markdown table, one row per model and image (one "none" row where every item was read out).
    """
    rows = []
    if "missing_reason" in full:
        reasons = full["missing_reason"].transpose("model", "image").values
        for mi, m in enumerate(full["model"].values):
            for ii, img in enumerate(full["image"].values):
                if str(reasons[mi, ii]) and str(reasons[mi, ii]) != results.NOT_RUN:
                    rows.append({"model": verbatim(m), "image": str(int(img)),
                                 "reason": markdown_text(" ".join(str(reasons[mi, ii]).split()))})
    numbers.record("n_missing_items", len({r["image"] for r in rows}))
    # images stored rotated that every stage used transposed (the select stage's record, murk.protocol.image_checks)
    items_report = Path(items_report)
    transposed = (json.loads(items_report.read_text()).get("image_checks", {}).get("transposed", {})
                  if items_report.is_file() else {})
    numbers.record("colophon.transposed_images", "; ".join(
        f"image {k} (stored {v.split(' is stored ', 1)[-1].split(':', 1)[0]})" for k, v in transposed.items())
        or "none")
    return markdown_table(rows or [{"model": "all", "image": "–", "reason": "none: every item was read out"}])


def models_table(numbers, ds: xr.Dataset, low_mass: Sequence[str], mark: str = "†") -> str:
    """The models table: each model's items, revision, visual tokens per image, clean option mass (t2 / t3, read
    from ``numbers``: ``option_mass.<slug>.t2|t3``) and whether it is a pipeline check, with the option mass
    footnote (``option_mass.footnote``) below.

    Parameters
    ----------
    numbers : murk.report.Numbers
        The numbers recorded so far (the option masses and their footnote).
    ds : xarray.Dataset
        The VLMs' cube (coordinates ``model``, ``model_revision``, ``n_visual_tokens``, ``pipeline_check``,
        ``n_items``).
    low_mass : sequence of str
        The models whose median clean option mass is below the threshold (marked with ``mark``).
    mark : str
        Their mark.

    Returns
    -------
    str
        The Markdown table and its footnote.
    """
    key = core.model_slug
    return markdown_table([
        {"model": verbatim(m) + (f" {mark}" if str(m) in low_mass else ""), "items (n)": str(int(n)),
         "revision": verbatim(str(rev)[:23 if str(rev).startswith('sha256:') else 12] or 'n/a'),
         "visual tokens / image": str(int(nv)),
         "option mass (clean, t2 / t3)": f"{numbers[f'option_mass.{key(m)}.t2']} / {numbers[f'option_mass.{key(m)}.t3']}",
         "pipeline check": "yes (tiny random weights)" if bool(p) else "no"}
        for m, n, rev, nv, p in zip(ds["model"].values, ds["n_items"].values, ds["model_revision"].values,
                                    ds["n_visual_tokens"].values, ds["pipeline_check"].values)]
    ) + f"\n{numbers['option_mass.footnote']}\n"


def record_accuracy_ranges(numbers, means: xr.Dataset, cross: xr.Dataset, task: str, end: int) -> None:
    """Record the ranges over models of V_acc in fog (``range.v.correct.fog.<task>``) and of accuracy on the clean
    image, at the end of each physical arm and on the two controls (``range.correct.<where>.<task>``).

    Parameters
    ----------
    numbers : murk.report.Numbers
        Where the numbers are recorded.
    means : xarray.Dataset
        The condition means (``mean``: model, arm, level, task, readout).
    cross : xarray.Dataset
        The crossings (``v_cross_m`` in metres and ``censored_side``: model, arm, task, readout).
    task : str
        ``"t2"`` or ``"t3"``.
    end : int
        The index of the sweep's last level.
    """
    c_ = cross.sel(arm="fog", task=task, readout="correct")
    numbers.record(f"range.v.correct.fog.{task}", fmt_range(c_["v_cross_m"].values, c_["censored_side"].values,
                                                            digits=1))
    for where, (arm, lvl) in {"clean": ("fog", 0), "end.fog": ("fog", end), "end.underwater": ("underwater", end),
                              "blank": ("blank", 0), "shuffled": ("shuffled", 0)}.items():
        numbers.record(f"range.correct.{where}.{task}",
                       fmt_range(means["mean"].sel(arm=arm, level=lvl, task=task, readout="correct").values))
