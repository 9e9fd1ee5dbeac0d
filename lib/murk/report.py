"""Stage *analyse*: cube → condition means, crossings, figures, tables, numbers.

Everything the paper shows is written here, under the output root:
``analysis/condition_means.nc``, ``analysis/crossings.nc``, ``analysis/*.md``
(tables), ``figures/*.png|pdf`` and ``paper_numbers.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import xarray as xr

from murk import analysis, config as _config, cube, figures, paper, paths, physics, pipeline
from murk.paper import fmt, fmt_crossing, fmt_interval

__all__ = ["stage_analyse", "build_numbers"]


def _key(model: str) -> str:
    return paths.model_slug(model)


def _range(values) -> str:
    v = np.asarray([x for x in values if np.isfinite(x)], float)
    if v.size == 0:
        return "n/a"
    return fmt(v.min()) if np.isclose(v.min(), v.max()) else f"{fmt(v.min())}–{fmt(v.max())}"


def build_numbers(ds: xr.Dataset, means: xr.Dataset, cross: xr.Dataset, meta: dict, cfg: dict) -> dict[str, str]:
    """All numbers the paper prints, formatted (key -> str).

    Keys: provenance (``config_hash``, ``items_hash``, ``git_commit``,
    ``depth_backend``, ...), configuration values (``cfg.*``), and results per
    model (``<quantity>.<arm>.<task>.<model slug>``) and aggregated over models
    (``range.*``).
    """
    n: dict[str, str] = {}
    models = [str(m) for m in ds["model"].values]
    pc = [str(m) for m, p in zip(ds["model"].values, ds["pipeline_check"].values) if bool(p)]
    n["n_items"] = str(ds.sizes["image"])
    n["n_items_requested"] = str(meta.get("n_items_requested", ds.sizes["image"]))
    n["n_models"] = str(len(models))
    n["models"] = ", ".join(f"`{m}`" for m in models)
    n["n_conditions"] = str(len(cube.CONDITIONS))
    n["config_hash"] = ds.attrs["config_hash"][:12]
    n["items_hash"] = ds.attrs["items_hash"][:12]
    n["git_commit"] = str(ds.attrs.get("git_commit", "unknown"))[:12]
    n["depth_backend"] = f"`{ds.attrs['depth_backend']}`"
    n["depth_note"] = ("an approximate constant depth (no depth weights were available), so absolute "
                       "visibilities are only as good as this assumption; W is unaffected by a global depth scale"
                       if int(ds.attrs.get("depth_approximate", 0)) else
                       "Depth Anything V2 (metric outdoor, small) on the clean image")
    n["pipeline_check_note"] = (
        f"**Pipeline check.** The models {', '.join(f'`{m}`' for m in pc)} are tiny randomly initialised "
        "checkpoints of the real architectures, built offline by murk. Their numbers test the pipeline end to "
        "end and say nothing about any real VLM." if pc else
        "All models are real pretrained checkpoints.")
    a = cfg["analysis"]
    n["n_resamples"] = str(a["bootstrap_resamples"])
    n["n_resamples_crossing"] = str(a["bootstrap_resamples_crossing"])
    n["ci_percent"] = f"{100 * a['ci_level']:.0f}"
    p = cfg["physics"]
    n["cfg.koschmieder"] = f"{p['koschmieder_constant']:g}"
    n["cfg.airlight"] = f"{p['fog_airlight']:g}"
    n["cfg.sweep"] = ", ".join(f"{v:g}" for v in physics.SWEEP_M)
    n["cfg.n_levels"] = str(len(physics.SWEEP_M))
    n["cfg.sweep_min_m"] = f"{physics.SWEEP_M.min():g}"
    n["cfg.sweep_max_m"] = f"{physics.SWEEP_M.max():g}"
    n["cfg.wavelengths_nm"] = ", ".join(str(v) for v in p["underwater_wavelengths_nm"])
    n["cfg.pope_fry"] = ", ".join(f"{v:g}" for v in p["pope_fry_absorption_per_m"])
    n["cfg.depth_min_m"] = f"{cfg['depth']['min_m']:g}"
    n["cfg.depth_max_m"] = f"{cfg['depth']['max_m']:g}"
    r = cfg["render"]
    n["cfg.max_side_px"] = str(r["max_side_px"])
    n["cfg.box_width_px"] = str(r["box_width_px"])
    n["cfg.seed"] = str(meta.get("seed", cfg["items"]["seed"]))
    n["cfg.verbal_tokens"] = str(cfg["readout"]["verbal_max_new_tokens"])
    n["cfg.chance_t2"] = f"{a['chance']['t2']:g}"
    n["cfg.chance_t3"] = f"{a['chance']['t3']:g}"

    for m in models:
        k = _key(m)
        for task in ("t2", "t3"):
            for arm in cube.PHYSICAL_ARMS:
                for lvl_name, lvl in (("clean", 0), ("end", len(physics.SWEEP_M))):
                    for ro in analysis.SIGNALS:
                        s = means.sel(model=m, arm=arm, level=lvl, task=task, readout=ro)
                        n[f"{ro}.{lvl_name}.{arm}.{task}.{k}"] = fmt(float(s["mean"]))
                        n[f"{ro}.{lvl_name}.{arm}.{task}.{k}.ci"] = fmt_interval(float(s["lo"]), float(s["hi"]))
                c = cross.sel(model=m, arm=arm, task=task)
                for ro in analysis.SIGNALS:
                    cr = c.sel(readout=ro)
                    n[f"v.{ro}.{arm}.{task}.{k}"] = fmt_crossing(float(cr["v_cross_m"]), bool(cr["censored"]), 1)
                    n[f"v.{ro}.{arm}.{task}.{k}.ci"] = fmt_interval(float(cr["v_lo_m"]), float(cr["v_hi_m"]), 1)
                    if ro != "correct":
                        n[f"w.{ro}.{arm}.{task}.{k}"] = fmt_crossing(float(cr["w"]), bool(cr["w_lower_bound"]))
                        n[f"w.{ro}.{arm}.{task}.{k}.ci"] = fmt_interval(float(cr["w_lo"]), float(cr["w_hi"]))
            for ctrl in cube.CONTROL_ARMS:
                s = means.sel(model=m, arm=ctrl, level=0, task=task, readout="correct")
                n[f"correct.{ctrl}.{task}.{k}"] = fmt(float(s["mean"]))
    for task in ("t2", "t3"):
        for arm in cube.PHYSICAL_ARMS:
            n[f"range.v.correct.{arm}.{task}"] = _range(cross["v_cross_m"].sel(arm=arm, task=task, readout="correct").values)
            n[f"range.correct.clean.{task}"] = _range(means["mean"].sel(arm="fog", level=0, task=task, readout="correct").values)
            n[f"range.correct.end.{arm}.{task}"] = _range(
                means["mean"].sel(arm=arm, level=len(physics.SWEEP_M), task=task, readout="correct").values)
            n[f"range.c_int.end.{arm}.{task}"] = _range(
                means["mean"].sel(arm=arm, level=len(physics.SWEEP_M), task=task, readout="c_int").values)
        n[f"range.correct.blank.{task}"] = _range(means["mean"].sel(arm="blank", level=0, task=task, readout="correct").values)
    return n


def _tables(ds, means, cross, cfg) -> dict[str, str]:
    t: dict[str, str] = {}
    rows = []
    for m in ds["model"].values:
        for arm in cube.PHYSICAL_ARMS:
            for task in ("t2", "t3"):
                c = cross.sel(model=m, arm=arm, task=task)
                row = {"model": figures.short_name(m), "arm": arm, "task": task,
                       "V_acc (m)": f"{fmt_crossing(float(c['v_cross_m'].sel(readout='correct')), bool(c['censored'].sel(readout='correct')), 1)} "
                                    f"{fmt_interval(float(c['v_lo_m'].sel(readout='correct')), float(c['v_hi_m'].sel(readout='correct')), 1)}"}
                for ro in analysis.AWARENESS_SIGNALS:
                    cr = c.sel(readout=ro)
                    row[f"W {figures.READOUT_LABELS[ro]}"] = (f"{fmt_crossing(float(cr['w']), bool(cr['w_lower_bound']))} "
                                                              f"{fmt_interval(float(cr['w_lo']), float(cr['w_hi']))}")
                rows.append(row)
    t["tbl-crossings"] = paper.markdown_table(rows)
    rows = []
    vis = ds["visibility_m"].values
    for m in ds["model"].values:
        for arm in cube.PHYSICAL_ARMS:
            for lvl in range(len(vis)):
                row = {"model": figures.short_name(m), "arm": arm, "V (m)": "clean" if lvl == 0 else f"{vis[lvl]:g}"}
                for task in ("t2", "t3"):
                    for ro in ("correct", "c_int", "verbal_conf", "abstain", "abstain2"):
                        row[f"{task} {ro}"] = fmt(float(means["mean"].sel(model=m, arm=arm, level=lvl, task=task, readout=ro)))
                rows.append(row)
    t["tbl-sweep"] = paper.markdown_table(rows)
    rows = [{"model": f"`{m}`", "revision": f"`{str(rev)[:12] or 'n/a'}`", "visual tokens / image": str(int(nv)),
             "pipeline check": "yes (tiny random weights)" if bool(pc) else "no"}
            for m, rev, nv, pc in zip(ds["model"].values, ds["model_revision"].values,
                                      ds["n_visual_tokens"].values, ds["pipeline_check"].values)]
    t["tbl-models"] = paper.markdown_table(rows)
    p = cfg["prompts"]
    rows = [{"prompt": k, "template": str(v).replace("\n", " ⏎ ")} for k, v in p.items()]
    t["tbl-prompts"] = paper.markdown_table(rows)
    rows = []
    for sect in ("items", "physics", "depth", "render", "readout", "analysis"):
        for k, v in cfg[sect].items():
            rows.append({"section": sect, "setting": k, "value": f"`{json.dumps(v, ensure_ascii=False)}`"})
    t["tbl-config"] = paper.markdown_table(rows)
    return t


def stage_analyse(models: list[str], output_dir=None) -> dict[str, Path | dict]:
    """Stage *analyse*: merge the models' stores into the cube, then summarise.

    Parameters
    ----------
    models : list of str
        Model ids whose read-out stores form the cube.
    output_dir : path, optional

    Returns
    -------
    dict with the cube, ``means`` and ``crossings`` datasets, the figure paths
    and the numbers.
    """
    cfg = _config.load_config()
    a = cfg["analysis"]
    _, meta = pipeline.read_items(output_dir)
    ds = pipeline.stage_cube(models, output_dir).load()
    scores = analysis.image_scores(ds)
    means = analysis.condition_means(scores, a["bootstrap_resamples"], a["bootstrap_seed"], a["ci_level"])
    cross = analysis.crossing_table(scores, a["bootstrap_resamples_crossing"], a["bootstrap_seed"],
                                    a["ci_level"], a["chance"])
    adir = paths.analysis_dir(output_dir)
    adir.mkdir(parents=True, exist_ok=True)
    means.to_netcdf(adir / "condition_means.nc")
    cross.to_netcdf(adir / "crossings.nc")
    fdir = paths.figures_dir(output_dir)
    figs = {}
    for task in ("t2", "t3"):
        chance = a["chance"][task]
        figs[f"accuracy_{task}"] = figures.save(figures.plot_signal_vs_visibility(
            means, "correct", task, chance=chance), fdir, f"accuracy_{task}")
        figs[f"confidence_{task}"] = figures.save(figures.plot_signal_vs_visibility(
            means, "c_int", task, chance=chance, reference="correct"), fdir, f"confidence_{task}")
        figs[f"verbal_{task}"] = figures.save(figures.plot_signal_vs_visibility(
            means, "verbal_conf", task, chance=chance, reference="correct"), fdir, f"verbal_{task}")
        figs[f"abstain_{task}"] = figures.save(figures.plot_signal_vs_visibility(
            means, "abstain", task, reference="correct"), fdir, f"abstain_{task}")
    for name, text in _tables(ds, means, cross, cfg).items():
        paper.write_text_atomic(adir / f"{name}.md", text)
    numbers = build_numbers(ds, means, cross, meta, cfg)
    paper.write_numbers(numbers, paths.numbers_file(output_dir))
    return {"cube": ds, "means": means, "crossings": cross, "figures": figs, "numbers": numbers}
