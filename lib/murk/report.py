"""Stage *analyse*: cube → condition means, crossings, figures, tables, numbers.

Everything the paper shows is written here, under the output root:

* ``analysis/scores.nc``: every score with a ``stat`` coordinate (point, lo,
  hi), see :func:`murk.analysis.scores_dataset`; ``analysis/condition_means.nc``
  and ``analysis/crossings.nc`` (the same means and crossings, flat);
* ``analysis/<table>.md``: :data:`TABLES` (spec Tables IV, V, IX, X and more);
* ``figures/<name>_<task>.png|pdf``: :data:`FIGURES`;
* ``paper_numbers.json``: :func:`build_numbers`.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import xarray as xr

from murk import analysis, config as _config, cube, figures, paper, paths, physics, pipeline, prompts
from murk.paper import fmt, fmt_crossing, fmt_interval

__all__ = ["stage_analyse", "build_numbers", "TABLES", "FIGURES", "level_label"]

#: Markdown tables written under ``analysis/`` (file name without ``.md`` -> content)
TABLES = {
    "tbl-end-of-sweep": "spec Table IV: t2 at V = 1.953125 m, fog and underwater: accuracy, mean c_int, "
                        "mean verbalized confidence, ECE of c_int, per model",
    "tbl-crossings": "spec Table V: V_acc (chance and blank floor) and W per awareness signal, "
                     "per model, arm and task, with intervals; ≥/≤ for bounds",
    "tbl-sweep-t2": "spec Table IX: every level, t2: accuracy, c_int, verbal, abstain, abstain2 with intervals",
    "tbl-sweep-t3": "spec Table X: the same for t3",
    "tbl-sweep": "means of both tasks at every level (compact, no intervals)",
    "tbl-auroc": "AUROC of c_int per level, t2, with intervals",
    "tbl-monotonicity": "wrong-way moves per signal series, raw and beyond 2 SE",
    "tbl-confident": "accuracy of t2 answers with c_int >= 0.9 at V <= 15.625 m (both arms), with n",
    "tbl-models": "models, revisions, visual tokens",
    "tbl-prompts": "prompt templates (spec Table II)",
    "tbl-config": "frozen configuration (spec Table III)",
}
#: figure names; each is saved as ``figures/<name>_<task>.png`` and ``.pdf`` for t2 and t3
FIGURES = ("accuracy", "confidence", "verbal", "abstain", "reliability", "abstain2")


def _key(model: str) -> str:
    return paths.model_slug(model)


def level_label(visibility_m: float) -> str:
    """Name of a sweep level in numbers keys: ``clean`` or the visibility in metres
    written out exactly (``250``, ``62.5``, ``1.953125``)."""
    v = float(visibility_m)
    return "clean" if not np.isfinite(v) else np.format_float_positional(v, trim="-")


def _ci(da) -> str:
    return fmt_interval(float(da.sel(stat="lo")), float(da.sel(stat="hi")))


def _bound(point: float, lower: bool, upper: bool, digits: int = 2) -> str:
    s = fmt(point, digits)
    if s == "n/a":
        return s
    return f"≥ {s}" if lower else f"≤ {s}" if upper else s


def _range(values) -> str:
    v = np.asarray([x for x in values if np.isfinite(x)], float)
    if v.size == 0:
        return "n/a"
    return fmt(v.min()) if np.isclose(v.min(), v.max()) else f"{fmt(v.min())}–{fmt(v.max())}"


def build_numbers(ds: xr.Dataset, means: xr.Dataset, cross: xr.Dataset, meta: dict, cfg: dict,
                  scores: xr.Dataset | None = None) -> dict[str, str]:
    """All numbers the paper prints, formatted (key -> str).

    Keys: provenance (``config_hash``, ``items_hash``, ``git_commit``,
    ``depth_backend``, ...), configuration values (``cfg.*``), and results per
    model (``<quantity>.<arm>.<task>.<model slug>``) and aggregated over models
    (``range.*``). ``<level>`` is :func:`level_label` (``clean``, ``250``, ...,
    ``1.953125``); ``end`` is the last level. A key ending in ``.ci`` is the
    bootstrap interval ``[lo, hi]`` of the key without it.

    With ``scores`` (:func:`murk.analysis.scores_dataset`) also:

    * ``<readout>.<level>.<arm>.<task>.<model>``: mean at every level;
    * ``ece.<conf>.<level|end>.<arm>.<task>.<model>``, ``auroc.<conf>.<level|end>.<arm>.<task>.<model>``
      (conf = ``c_int`` or ``verbal_conf``);
    * ``coverage.<option>.<level>.<arm>.<task>.<model>``, ``risk.<option>...``
      (option = ``abstain`` or ``abstain2``);
    * ``v.correct_blank.<arm>.<task>.<model>``: V_acc with the blank floor (post hoc);
    * ``mono.<signal>.<arm>.<task>.<model>`` (raw fraction of wrong-way pairs),
      ``.sig`` (beyond 2 SE), ``.count`` and ``.sig.count`` (``k/m``), and
      ``mono.pooled.raw`` / ``mono.pooled.sig`` over models, tasks, signals
      and the physical arms;
    * ``confident.acc.<model>`` (+ ``.ci``) and ``confident.n.<model>``.
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
    import inspect

    ce = inspect.signature(analysis.confident_errors).parameters
    n["cfg.confident_threshold"] = f"{ce['threshold'].default:g}"
    n["cfg.confident_max_v_m"] = f"{ce['max_visibility_m'].default:g}"

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
                        n[f"w.{ro}.{arm}.{task}.{k}"] = _bound(float(cr["w"]), bool(cr["w_lower_bound"]),
                                                               bool(cr.get("w_upper_bound", False)))
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
        n[f"range.correct.shuffled.{task}"] = _range(
            means["mean"].sel(arm="shuffled", level=0, task=task, readout="correct").values)
        for arm in cube.PHYSICAL_ARMS:
            end = means["mean"].sel(arm=arm, level=len(physics.SWEEP_M), task=task)
            n[f"range.verbal_conf.end.{arm}.{task}"] = _range(end.sel(readout="verbal_conf").values)
            for ro in ("abstain", "abstain2"):  # at the level where the spec reads abstention (7.8125 m)
                lvl = int(np.argmin(np.abs(means["visibility_m"].values - 7.8125)))
                n[f"range.{ro}.7.8125.{arm}.{task}"] = _range(
                    means["mean"].sel(arm=arm, level=lvl, task=task, readout=ro).values)
            for ro in analysis.AWARENESS_SIGNALS:
                c = cross.sel(arm=arm, task=task, readout=ro)
                w = c["w"].values
                lower = bool(np.any(c["w_lower_bound"].values & np.isfinite(w)))
                r = _range(w)
                n[f"range.w.{ro}.{arm}.{task}"] = f"≥ {r}" if lower and r != "n/a" and bool(
                    np.all(c["w_lower_bound"].values[np.isfinite(w)])) else r
    if scores is not None:
        n.update(_score_numbers(scores))
    return n


def _score_numbers(sc: xr.Dataset) -> dict[str, str]:
    n: dict[str, str] = {}
    last = int(sc["level"].values[-1])
    physical = [a for a in cube.PHYSICAL_ARMS if a in sc["arm"].values]
    for m in sc["model"].values:
        k = _key(str(m))
        for arm in physical:
            for task in sc["task"].values:
                for lvl in sc["level"].values:
                    names = [level_label(sc["visibility_m"].sel(level=lvl))] + (["end"] if lvl == last else [])
                    cell = dict(model=m, arm=arm, level=lvl, task=task)
                    for lab in names:
                        if lab != "end":
                            for ro in sc["readout"].values:
                                x = sc["mean"].sel(**cell, readout=ro)
                                n[f"{ro}.{lab}.{arm}.{task}.{k}"] = fmt(float(x.sel(stat="point")))
                                n[f"{ro}.{lab}.{arm}.{task}.{k}.ci"] = _ci(x)
                            for opt in sc["option"].values:
                                for var in ("coverage", "risk"):
                                    x = sc[var].sel(**cell, option=opt)
                                    n[f"{var}.{opt}.{lab}.{arm}.{task}.{k}"] = fmt(float(x.sel(stat="point")))
                                    n[f"{var}.{opt}.{lab}.{arm}.{task}.{k}.ci"] = _ci(x)
                        for conf in sc["confidence"].values:
                            for var in ("ece", "auroc"):
                                x = sc[var].sel(**cell, confidence=conf)
                                n[f"{var}.{conf}.{lab}.{arm}.{task}.{k}"] = fmt(float(x.sel(stat="point")))
                                n[f"{var}.{conf}.{lab}.{arm}.{task}.{k}.ci"] = _ci(x)
                c = dict(model=m, arm=arm, task=task)
                x = sc["v_acc_blank_m"].sel(**c)
                n[f"v.correct_blank.{arm}.{task}.{k}"] = fmt_crossing(
                    float(x.sel(stat="point")), bool(sc["censored_blank"].sel(**c)), 1)
                n[f"v.correct_blank.{arm}.{task}.{k}.ci"] = fmt_interval(
                    float(x.sel(stat="lo")), float(x.sel(stat="hi")), 1)
                for ro in sc["readout"].values:
                    pairs = int(sc["mono_pairs"].sel(**c, readout=ro))
                    raw = float(sc["mono_raw"].sel(**c, readout=ro))
                    sig = float(sc["mono_beyond_noise"].sel(**c, readout=ro))
                    n[f"mono.{ro}.{arm}.{task}.{k}"] = fmt(raw)
                    n[f"mono.{ro}.{arm}.{task}.{k}.sig"] = fmt(sig)
                    n[f"mono.{ro}.{arm}.{task}.{k}.count"] = f"{round(raw * pairs) if pairs else 0}/{pairs}"
                    n[f"mono.{ro}.{arm}.{task}.{k}.sig.count"] = f"{round(sig * pairs) if pairs else 0}/{pairs}"
        x = sc["confident_accuracy"].sel(model=m)
        n[f"confident.acc.{k}"] = fmt(float(x.sel(stat="point")))
        n[f"confident.acc.{k}.ci"] = _ci(x)
        n[f"confident.n.{k}"] = str(int(sc["confident_n"].sel(model=m)))
    mono = sc[["mono_raw", "mono_beyond_noise", "mono_pairs"]].sel(arm=physical)
    pairs = float(mono["mono_pairs"].sum())
    for key, var in (("raw", "mono_raw"), ("sig", "mono_beyond_noise")):
        wrong = float((mono[var].fillna(0) * mono["mono_pairs"]).sum())
        n[f"mono.pooled.{key}"] = fmt(wrong / pairs) if pairs else "n/a"
        n[f"mono.pooled.{key}.count"] = f"{round(wrong)}/{int(pairs)}"
    return n


def _pm(x: xr.DataArray, digits: int = 2) -> str:
    """A point with its interval, compactly: ``0.97 (0.95–0.98)``."""
    p, lo, hi = (float(x.sel(stat=k)) for k in ("point", "lo", "hi"))
    if not np.isfinite(p):
        return "n/a"
    return f"{fmt(p, digits)} ({fmt(lo, digits)}–{fmt(hi, digits)})"


def _tables(ds, means, cross, cfg, scores: xr.Dataset | None = None) -> dict[str, str]:
    t: dict[str, str] = {}
    rows = []
    for m in ds["model"].values:
        for arm in cube.PHYSICAL_ARMS:
            for task in ("t2", "t3"):
                c = cross.sel(model=m, arm=arm, task=task)
                acc = c.sel(readout="correct")
                row = {"model": figures.short_name(m), "arm": arm, "task": task,
                       "V_acc (m)": f"{fmt_crossing(float(acc['v_cross_m']), bool(acc['censored']), 1)} "
                                    f"{fmt_interval(float(acc['v_lo_m']), float(acc['v_hi_m']), 1)}"}
                if "v_acc_blank_m" in c:
                    row["V_acc, blank floor (m)†"] = (
                        f"{fmt_crossing(float(c['v_acc_blank_m']), bool(c['censored_blank']), 1)} "
                        f"{fmt_interval(float(c['v_acc_blank_lo_m']), float(c['v_acc_blank_hi_m']), 1)}")
                for ro in analysis.AWARENESS_SIGNALS:
                    cr = c.sel(readout=ro)
                    w = _bound(float(cr["w"]), bool(cr["w_lower_bound"]), bool(cr.get("w_upper_bound", False)))
                    row[f"W {figures.READOUT_LABELS[ro]}"] = f"{w} {fmt_interval(float(cr['w_lo']), float(cr['w_hi']))}"
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
    if scores is not None:
        t.update(_score_tables(scores))
    rows = [{"model": f"`{m}`", "revision": f"`{str(rev)[:12] or 'n/a'}`", "visual tokens / image": str(int(nv)),
             "pipeline check": "yes (tiny random weights)" if bool(pc) else "no"}
            for m, rev, nv, pc in zip(ds["model"].values, ds["model_revision"].values,
                                      ds["n_visual_tokens"].values, ds["pipeline_check"].values)]
    t["tbl-models"] = paper.markdown_table(rows)
    one_line = lambda v: str(v).replace("\n", " ⏎ ")  # noqa: E731
    rows = [{"prompt": r["name"], "template": one_line(r["template"]), "example": one_line(r["example"])}
            for r in prompts.prompt_table(cfg)]
    t["tbl-prompts"] = paper.markdown_table(rows)
    rows = [{"setting": f"`{r['setting']}`", "value": one_line(r["value"])} for r in _config.settings_table(cfg)]
    t["tbl-config"] = paper.markdown_table(rows)
    return t


def _score_tables(sc: xr.Dataset) -> dict[str, str]:
    t: dict[str, str] = {}
    models = sc["model"].values
    last = int(sc["level"].values[-1])
    short = {"correct": "accuracy", "c_int": "c_int", "verbal_conf": "verbal", "abstain": "abstain",
             "abstain2": "abstain₂"}
    # Table IV: the end of the sweep, t2
    rows = []
    for m in models:
        for arm in cube.PHYSICAL_ARMS:
            cell = dict(model=m, arm=arm, level=last, task="t2")
            rows.append({"model": figures.short_name(m), "arm": arm,
                         "accuracy": _pm(sc["mean"].sel(**cell, readout="correct")),
                         "mean c_int": _pm(sc["mean"].sel(**cell, readout="c_int")),
                         "mean verbal": _pm(sc["mean"].sel(**cell, readout="verbal_conf")),
                         "ECE c_int": _pm(sc["ece"].sel(**cell, confidence="c_int"))})
    t["tbl-end-of-sweep"] = paper.markdown_table(rows)
    # Tables IX and X: the sweep per task
    for task in ("t2", "t3"):
        rows = []
        for m in models:
            for arm in cube.PHYSICAL_ARMS:
                for lvl in sc["level"].values:
                    row = {"model": figures.short_name(m), "arm": arm,
                           "V (m)": level_label(sc["visibility_m"].sel(level=lvl))}
                    for ro in analysis.SIGNALS:
                        row[short[ro]] = _pm(sc["mean"].sel(model=m, arm=arm, level=lvl, task=task, readout=ro))
                    rows.append(row)
        t[f"tbl-sweep-{task}"] = paper.markdown_table(rows)
    # AUROC of c_int per level, t2
    rows = []
    for m in models:
        for arm in cube.PHYSICAL_ARMS:
            row = {"model": figures.short_name(m), "arm": arm}
            for lvl in sc["level"].values:
                row[level_label(sc["visibility_m"].sel(level=lvl))] = _pm(
                    sc["auroc"].sel(model=m, arm=arm, level=lvl, task="t2", confidence="c_int"))
            rows.append(row)
    t["tbl-auroc"] = paper.markdown_table(rows)
    # monotonicity: wrong-way pairs, raw / beyond 2 SE
    rows = []
    arms = [a for a in (*cube.PHYSICAL_ARMS, "imagenet_c") if a in sc["arm"].values]
    for m in models:
        for arm in arms:
            for task in sc["task"].values:
                row = {"model": figures.short_name(m), "arm": arm, "task": str(task)}
                for ro in analysis.SIGNALS:
                    c = dict(model=m, arm=arm, task=task, readout=ro)
                    k = int(sc["mono_pairs"].sel(**c))
                    raw = float(sc["mono_raw"].sel(**c))
                    sig = float(sc["mono_beyond_noise"].sel(**c))
                    row[short[ro]] = (f"{round(raw * k)}/{k} · {round(sig * k)}/{k}" if k else "n/a")
                rows.append(row)
    t["tbl-monotonicity"] = paper.markdown_table(rows)
    # confident errors
    rows = [{"model": figures.short_name(m),
             "accuracy of answers with c_int ≥ 0.9": _pm(sc["confident_accuracy"].sel(model=m)),
             "n": str(int(sc["confident_n"].sel(model=m)))} for m in models]
    t["tbl-confident"] = paper.markdown_table(rows)
    return t


def stage_analyse(models: list[str], output_dir=None, shard_size: int | None = None) -> dict[str, Path | dict]:
    """Stage *analyse*: merge the models' stores into the cube, then summarise.

    Parameters
    ----------
    models : list of str
        Model ids whose read-out stores form the cube.
    output_dir : path, optional
    shard_size : int, optional
        Shard size of the read-outs (None: unsharded), see :func:`murk.pipeline.stage_cube`.

    Returns
    -------
    dict
        ``cube``; ``means`` and ``crossings`` (flat datasets); ``scores`` (the
        dataset with a ``stat`` coordinate, :func:`murk.analysis.scores_dataset`);
        ``analysis`` (every component of :func:`murk.analysis.analyse`);
        ``figures`` (name -> [png, pdf] paths); ``numbers`` (key -> str).

    Files written under the output root: ``analysis/scores.nc``,
    ``analysis/condition_means.nc``, ``analysis/crossings.nc``,
    ``analysis/<t>.md`` for every ``t`` in :data:`TABLES`,
    ``figures/<f>_<task>.png|pdf`` for ``f`` in :data:`FIGURES` and task in
    (t2, t3), and ``paper_numbers.json``.
    """
    cfg = _config.load_config()
    a = cfg["analysis"]
    _, meta = pipeline.read_items(output_dir)
    full = pipeline.stage_cube(models, output_dir, shard_size).load()
    ds = full.sel(model=[m for m in full["model"].values if m != pipeline.MONITOR_ID])
    res = analysis.analyse(ds, a["bootstrap_resamples"], a["bootstrap_resamples_crossing"], a["bootstrap_seed"],
                           a["ci_level"], a["chance"])
    means, cross, scores = res["means"], res["crossings"], res["scores"]
    scores.attrs.update({k: str(ds.attrs[k]) for k in ("config_hash", "items_hash", "git_commit", "depth_backend")
                         if k in ds.attrs})
    adir = paths.analysis_dir(output_dir)
    adir.mkdir(parents=True, exist_ok=True)
    means.to_netcdf(adir / "condition_means.nc")
    cross.to_netcdf(adir / "crossings.nc")
    _write_netcdf(scores, adir / "scores.nc")
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
        figs[f"reliability_{task}"] = figures.save(figures.plot_reliability(
            scores, task), fdir, f"reliability_{task}")
        figs[f"abstain2_{task}"] = figures.save(figures.plot_abstain_comparison(
            means, task, chance=chance), fdir, f"abstain2_{task}")
    for task in ("t2", "t3"):
        figs[f"blind_spot_{task}"] = figures.save(figures.plot_blind_spot_widths(cross, task), fdir,
                                                  f"blind_spot_{task}")
    tables = _tables(ds, means, cross, cfg, scores)
    tables["tbl-verbal-wordings"] = _table_vi(ds)
    for name, text in tables.items():
        paper.write_text_atomic(adir / f"{name}.md", text)
    numbers = build_numbers(ds, means, cross, meta, cfg, scores)
    numbers.update(_nominal_products(means, output_dir, cfg, figs))
    numbers.update(_example_products(ds, output_dir, cfg, figs))
    numbers.update(_environment_numbers())
    numbers.update(_missing_products(full, output_dir))
    if pipeline.MONITOR_ID in full["model"].values:
        counts = analysis.resample_counts(full.sizes["image"], a["bootstrap_resamples_crossing"], a["bootstrap_seed"])
        numbers.update(_monitor_products(full, [str(m) for m in ds["model"].values], output_dir, cfg, figs, counts))
    _fill_missing_paper_inputs(numbers, output_dir)
    paper.write_numbers(numbers, paths.numbers_file(output_dir))
    return {"cube": full, "means": means, "crossings": cross, "scores": scores, "analysis": res,
            "figures": figs, "numbers": numbers}


def _monitor_products(ds: xr.Dataset, vlms: list[str], output_dir, cfg: dict, figs: dict,
                      counts: np.ndarray) -> dict[str, str]:
    """Section "A visibility monitor" (beyond the spec): V̂ accuracy, W against each VLM, the gate.

    ``ds`` is the full cube holding :data:`murk.pipeline.MONITOR_ID`; ``vlms``
    the VLMs. Files: ``analysis/tbl-monitor-accuracy.md``,
    ``analysis/tbl-monitor-w.md``, ``analysis/tbl-monitor-gate.md``,
    ``figures/monitor_vhat.png|pdf``.
    """
    from murk import metrics, monitor

    mid = pipeline.MONITOR_ID
    n: dict[str, str] = {}
    adir = paths.analysis_dir(output_dir)
    vis = ds["visibility_m"].values
    vhat = ds["value"].sel(model=mid, task="t2", readout="visibility_hat_m")      # (arm, level, image)
    # 1. accuracy of V̂ against the true V
    rows, band = [], {}
    for arm in cube.PHYSICAL_ARMS:
        ratio = (vhat.sel(arm=arm).isel(level=slice(1, None)) / xr.DataArray(vis[1:], dims="level")).values
        within = np.abs(np.log2(ratio)) <= 1
        mid_band = (vis[1:] >= 3.9) & (vis[1:] <= 62.5)
        n[f"monitor.share_x2.{arm}"] = fmt(100 * float(np.nanmean(within[mid_band])), 0)
        q = np.nanpercentile(vhat.sel(arm=arm).isel(level=slice(1, None)).values, [10, 50, 90], axis=-1)
        band[arm] = q
        for k, v in enumerate(vis[1:]):
            rows.append({"arm": arm, "V (m)": level_label(v), "median V̂ (m)": fmt(q[1, k], 1),
                         "P10–P90 (m)": f"{fmt(q[0, k], 1)}–{fmt(q[2, k], 1)}",
                         "within ×2 (%)": fmt(100 * float(np.nanmean(within[k])), 0)})
    sev = ds["value"].sel(model=mid, arm="imagenet_c", task="t2", readout="visibility_hat_m")
    # the nominal control: the monitor's V̂ per ImageNet-C severity beside the gain-matched V_eq (Table VII)
    veq = {}
    nf = adir / "nominal_equivalence.nc"
    if nf.is_file():
        with xr.open_dataset(nf) as nds:
            g = nds["v_eq_gain_m"].load()
        veq = {int(s): g.sel(severity=s) for s in g["severity"].values}
    for s in range(1, 6):
        v_s = sev.sel(level=s).values
        row = {"arm": "imagenet_c", "V (m)": f"severity {s}", "median V̂ (m)": fmt(float(np.nanmedian(v_s)), 1)
               if np.isfinite(v_s).any() else "n/a",
               "P10–P90 (m)": (f"{fmt(float(np.nanpercentile(v_s, 10)), 1)}–{fmt(float(np.nanpercentile(v_s, 90)), 1)}"
                               if np.isfinite(v_s).any() else "n/a"), "within ×2 (%)": "–"}
        if s in veq:  # agreement with the image's own gain-matched equivalent visibility
            ratio = v_s / veq[s].sel(image=ds["image"].values).values
            ok = np.isfinite(ratio)
            row["within ×2 (%)"] = (f"{fmt(100 * float(np.mean(np.abs(np.log2(ratio[ok])) <= 1)), 0)} of V_eq"
                                    if ok.any() else "n/a")
        rows.append(row)
    paper.write_text_atomic(adir / "tbl-monitor-accuracy.md", paper.markdown_table(rows))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        med = np.array([np.nanmedian(sev.sel(level=s).values) for s in range(1, 6)])
    n["monitor.imagenet_c_range"] = (f"{np.nanmin(med):.0f}–{np.nanmax(med):.0f}" if np.isfinite(med).any() else "n/a")
    figs["monitor_vhat"] = figures.save(figures.plot_monitor_accuracy(vis[1:], band), paths.figures_dir(output_dir),
                                        "monitor_vhat")
    # 2. crossing of the monitor's awareness and W against each VLM's V_acc (paired bootstrap)
    scores = analysis.image_scores(ds.sel(model=[mid, *vlms]))
    a = cfg["analysis"]
    means = scores.mean("image", skipna=True)
    boot = metrics.bootstrap_resample_means(scores, "image", counts=counts)
    floors = {"c_int": 0.0, "abstain": 1.0}  # the monitor's confidence spans [0, 1]; abstain rises to 1

    def cross(m, signal, floor):
        m = m.sel(readout=signal).transpose(..., "level")
        v, c = metrics.crossing_visibility(vis[1:], m.isel(level=slice(1, None)).values, m.isel(level=0).values, floor)
        return np.asarray(v, float), np.asarray(c, bool)

    rows = []
    lo_q, hi_q = (1 - a["ci_level"]) / 2, 1 - (1 - a["ci_level"]) / 2
    for arm in cube.PHYSICAL_ARMS:
        for signal, floor in floors.items():
            vm, cm = cross(means.sel(model=mid, arm=arm, task="t2"), signal, floor)
            vmb, _ = cross(boot.sel(model=mid, arm=arm, task="t2"), signal, floor)
            n[f"monitor.v.{signal}.{arm}"] = fmt_crossing(float(vm), bool(cm), 1)
            for task in ("t2", "t3"):
                chance = a["chance"][task]
                for m in vlms:
                    va, ca = cross(means.sel(model=m, arm=arm, task=task), "correct", chance)
                    vab, _ = cross(boot.sel(model=m, arm=arm, task=task), "correct", chance)
                    w = float(metrics.blind_spot_width(va, vm)) if np.isfinite(va) and np.isfinite(vm) else np.nan
                    with np.errstate(invalid="ignore", divide="ignore"):
                        wb = np.log10(vab / vmb)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", RuntimeWarning)
                        lo, hi = (np.nanquantile(wb, [lo_q, hi_q]) if np.isfinite(wb).any() else (np.nan, np.nan))
                    s = _bound(w, bool(cm) and not bool(ca), bool(ca) and not bool(cm))
                    n[f"monitor.w.{signal}.{arm}.{task}.{_key(m)}"] = s
                    rows.append({"VLM": figures.short_name(m), "arm": arm, "task": task, "monitor signal": signal,
                                 "V_acc (m)": fmt_crossing(float(va), bool(ca), 1),
                                 "V_aware monitor (m)": fmt_crossing(float(vm), bool(cm), 1),
                                 "W": f"{s} {fmt_interval(lo, hi)}"})
    paper.write_text_atomic(adir / "tbl-monitor-w.md", paper.markdown_table(rows))
    # 3. the gate: coverage and risk at equal coverage, threshold picked on one half of the images
    rows = []
    ids = ds["image"].values
    for m in vlms:
        for arm in cube.PHYSICAL_ARMS:
            v = ds["value"].sel(model=m, arm=arm, task="t2")                  # (level, image, readout)
            flat = lambda da: da.transpose("level", "image").values.ravel()  # noqa: E731
            img = np.broadcast_to(ids, (v.sizes["level"], ids.size)).ravel()
            split = monitor.split_images(img, seed=a["bootstrap_seed"])
            try:
                res = monitor.compare_at_equal_coverage(
                    flat(vhat.sel(arm=arm)), flat(v.sel(readout="c_int")), flat(v.sel(readout="abstain")),
                    flat(v.sel(readout="correct")), split, image_ids=img, n_resamples=a["bootstrap_resamples"],
                    seed=a["bootstrap_seed"])
            except ValueError as e:  # e.g. too few images for two halves
                rows.append({"VLM": figures.short_name(m), "arm": arm, "gate": f"n/a ({e})"})
                continue
            for gate, r in res.items():
                cov_ci = r.get("coverage_ci", (np.nan, np.nan))
                risk_ci = r.get("risk_ci", (np.nan, np.nan))
                rows.append({"VLM": figures.short_name(m), "arm": arm, "gate": gate,
                             "coverage": f"{fmt(r['coverage'])} {fmt_interval(*cov_ci)}",
                             "risk": f"{fmt(r['risk'])} {fmt_interval(*risk_ci)}", "n": str(r["n"])})
                n[f"monitor.gate.{gate}.coverage.{arm}.{_key(m)}"] = fmt(r["coverage"])
                n[f"monitor.gate.{gate}.risk.{arm}.{_key(m)}"] = fmt(r["risk"])
    paper.write_text_atomic(adir / "tbl-monitor-gate.md", paper.markdown_table(rows))
    n["monitor.threshold_m"] = fmt(monitor.DEFAULT_THRESHOLD_M, 1)
    return n


def _table_vi(ds: xr.Dataset, levels_m=(np.inf, 62.5, 15.625, 7.8125, 3.90625, 1.953125)) -> str:
    """Spec Table VI: the verbalized confidence under wordings v1-v3 (t2, fog).

    Only the items asked all three wordings (``n_verbal_items`` of the readout
    stage: those with a non-empty ``verbal_text_v2``) enter, for every wording,
    so the three columns compare the same questions.
    """
    if "verbal_conf_v2" not in ds["readout"].values:
        return "*(this cube has no verbal wording variants)*\n"
    rows = []
    vis = ds["visibility_m"].values
    for m in ds["model"].values:
        asked = (ds["verbal_text_v2"].sel(model=m, arm="fog", level=0, task="t2") != "").values
        if not asked.any():
            rows.append({"model": figures.short_name(m), "V (m)": "–", "items": "0", "t2 accuracy": "–",
                         "v1": "–", "v2": "–", "v3": "–"})
            continue
        for v in levels_m:
            lvl = int(np.argmin(np.abs(np.where(np.isfinite(vis), vis, 1e9) - (1e9 if not np.isfinite(v) else v))))
            cell = ds["value"].sel(model=m, arm="fog", level=lvl, task="t2").isel(image=np.flatnonzero(asked))
            mean = lambda ro: fmt(float(cell.sel(readout=ro).mean(skipna=True)))  # noqa: E731
            rows.append({"model": figures.short_name(m), "V (m)": level_label(vis[lvl]), "items": str(int(asked.sum())),
                         "t2 accuracy": mean("correct"), "v1": mean("verbal_conf"), "v2": mean("verbal_conf_v2"),
                         "v3": mean("verbal_conf_v3")})
    return paper.markdown_table(rows)


def _nominal_products(means: xr.Dataset, output_dir, cfg: dict, figs: dict) -> dict[str, str]:
    """Fig. 7 and the Table VII numbers from the depth stage's nominal equivalence (spec Sec. IV).

    The nominal equivalence is computed by the depth stage
    (:func:`murk.pipeline.stage_nominal`); without it, nothing is added.
    """
    from murk import nominal

    f = paths.analysis_dir(output_dir) / "nominal_equivalence.nc"
    if not f.is_file():
        return {}
    with xr.open_dataset(f) as nds:
        tab = nominal.table_vii(nds.load())
    n: dict[str, str] = {}
    for sev, row in tab.iterrows():
        n[f"nominal.veq.{sev}"] = fmt(row["median_v_eq_gain_m"], 0)
        n[f"nominal.veq_std.{sev}"] = fmt(row["median_v_eq_std_ratio_m"], 0)
        n[f"nominal.spread.{sev}"] = fmt(row["spread_p90_p10"], 1)
    v = tab["median_v_eq_gain_m"].to_numpy(float)
    n["nominal.veq_range"] = f"{fmt(np.nanmin(v), 0)}–{fmt(np.nanmax(v), 0)}" if np.isfinite(v).any() else "n/a"
    sp = tab["spread_p90_p10"].to_numpy(float)
    n["nominal.spread_range"] = f"{fmt(np.nanmin(sp), 1)}–{fmt(np.nanmax(sp), 1)}" if np.isfinite(sp).any() else "n/a"
    n["nominal.monotone_share"] = fmt(100 * tab.attrs["monotone_share"], 0)
    n["nominal.n_images"] = str(int(nds.sizes["image"]))
    # dynamic range of accuracy (percentage points, pooled over models and tasks): nominal vs physical fog
    acc = means["mean"].sel(readout="correct")
    nom = acc.sel(arm="imagenet_c", level=slice(1, 5)).mean(["model", "task"])
    fog = acc.sel(arm="fog").isel(level=slice(1, None)).mean(["model", "task"])
    n["nominal.dyn_range_pp"] = fmt(100 * float(nom.max() - nom.min()), 1)
    n["physical.dyn_range_pp"] = fmt(100 * float(fog.max() - fog.min()), 1)
    fdir = paths.figures_dir(output_dir)
    figs["nominal_t2"] = figures.save(figures.plot_nominal_vs_physical(
        means, v, "t2", chance=cfg["analysis"]["chance"]["t2"]), fdir, "nominal_t2")
    return n


def _example_products(ds: xr.Dataset, output_dir, cfg: dict, figs: dict, n_items: int = 3,
                      levels=(0, 3, 5, 6, 7, 8)) -> dict[str, str]:
    """Fig. 9: the first items across fog and underwater levels with the first model's read-outs."""
    from murk import depth, render

    table, meta = pipeline.read_items(output_dir)
    try:
        current = pipeline.current_depth(output_dir)
    except FileNotFoundError:  # a cube analysed without its depth stage (e.g. merged elsewhere): no examples
        return {}
    if len(table) == 0 or "file_name" not in table:
        return {}
    model = str(ds["model"].values[0])
    max_side = cfg["render"]["max_side_px"]
    tiles, captions, rows = [], [], []
    vis = ds["visibility_m"].values
    for i in range(min(n_items, len(table))):
        row = table.iloc[i]
        try:
            img = render.load_image(Path(meta["image_dir"]) / row["file_name"])
        except (FileNotFoundError, ValueError):  # bad input, recorded as missing in the cube
            continue
        size = render.presented_size(img.shape[1], img.shape[0], max_side)
        img = render.resize_image(img, size)
        z = depth.load_depth(current["path"], int(row["image_id"]))
        bbox = render.scale_bbox(row["bbox"], (int(row["width"]), int(row["height"])), size)
        for arm, sweep in (("fog", physics.fog_sweep), ("underwater", physics.underwater_sweep)):
            vs = [vis[k] for k in levels if k > 0]
            stack = sweep(img, z, np.asarray(vs))
            shown = [img] + [stack[j] for j in range(len(vs))]
            tiles.append([render.draw_box(x, bbox, cfg["render"]["box_width_px"]) for x in shown])
            v = ds["value"].sel(model=model, arm=arm, task="t2", image=int(row["image_id"]))
            opts = row["t2_options"]
            cap = []
            for k in levels:
                c = v.sel(level=k)
                ans = c.sel(readout="answer").item()
                name = opts[int(ans)] if np.isfinite(ans) else "n/a"
                cap.append(f"{name} {'✓' if c.sel(readout='correct').item() == 1 else '✗'}\n"
                           f"c={fmt(c.sel(readout='c_int').item())} v={fmt(c.sel(readout='verbal_conf').item())}"
                           f"{' abst.' if c.sel(readout='abstain').item() == 1 else ''}")
            captions.append(cap)
            rows.append(f"{row['category']} · {arm}")
    if not tiles:
        return {}
    cols = ["clean" if k == 0 else f"V = {vis[k]:.3g} m" for k in levels]
    fig = figures.plot_item_grid(tiles, rows, cols, captions)
    figs["examples_t2"] = figures.save(fig, paths.figures_dir(output_dir), "examples_t2")
    return {"examples.model": f"`{model}`", "examples.n_items": str(min(n_items, len(table)))}


def _missing_products(ds: xr.Dataset, output_dir) -> dict[str, str]:
    """The items a stage could not process (bad input), for the colophon: ``analysis/tbl-missing.md``."""
    rows = []
    if "missing_reason" in ds:
        r = ds["missing_reason"].transpose("model", "image").values
        for mi, m in enumerate(ds["model"].values):
            for ii, img in enumerate(ds["image"].values):
                if str(r[mi, ii]):
                    rows.append({"model": f"`{m}`", "image": str(int(img)), "reason": str(r[mi, ii])})
    images = {row["image"] for row in rows}
    table = paper.markdown_table(rows) if rows else paper.markdown_table(
        [{"model": "all", "image": "–", "reason": "none: every item was read out"}])
    paper.write_text_atomic(paths.analysis_dir(output_dir) / "tbl-missing.md", table)
    return {"n_missing_items": str(len(images))}


def _environment_numbers() -> dict[str, str]:
    """Package versions for the colophon."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("torch", "transformers", "numpy", "xarray", "zarr", "snakemake"):
        try:
            out[f"version.{pkg}"] = version(pkg)
        except PackageNotFoundError:
            out[f"version.{pkg}"] = "n/a"
    import platform

    out["version.python"] = platform.python_version()
    return out


NOT_COMPUTED = "not computed in this run"


def _fill_missing_paper_inputs(numbers: dict[str, str], output_dir) -> list[str]:
    """Say so, in the paper, for what this run did not compute.

    A cube analysed without an earlier product (e.g. the depth stage's nominal
    equivalence, or the visibility monitor) still yields a complete paper:
    each number, table or figure that ``paper/index.qmd`` cites and that is
    missing becomes an explicit "not computed in this run" (a placeholder
    figure states it in its image). Returns the names filled in.
    """
    import re

    qmd = (paths.project_root() / "paper" / "index.qmd").read_text(encoding="utf-8")
    root = paths.output_dir(output_dir)
    filled = []
    for key in sorted(set(paper.INLINE_RE.findall(qmd))):
        if key not in numbers:
            numbers[key] = f"n/a ({NOT_COMPUTED})"
            filled.append(key)
    for inc in paper.INCLUDE_RE.findall(qmd):
        f = root / inc.replace("../outputs/", "")
        if inc.startswith("../outputs/") and not f.is_file():
            paper.write_text_atomic(f, paper.markdown_table(  # a table, so that its caption and label hold
                [{"note": f"{NOT_COMPUTED}: the stage that writes `{f.name}` did not run"}]))
            filled.append(f.name)
    for fig in re.findall(r"\]\((\.\./outputs/figures/[^)]+\.png)\)", qmd):
        f = root / fig.replace("../outputs/", "")
        if not f.is_file():
            import matplotlib.pyplot as plt

            fg, ax = plt.subplots(figsize=(4, 1.2))
            ax.axis("off")
            ax.text(0.5, 0.5, f"{f.stem}: {NOT_COMPUTED}", ha="center", va="center", fontsize=9)
            figures.save(fg, f.parent, f.stem)
            filled.append(f.name)
    return filled


def _write_netcdf(ds: xr.Dataset, path: Path) -> None:
    """Write atomically (temporary sibling, then replace)."""
    tmp = path.with_name(path.name + ".tmp")
    ds.to_netcdf(tmp)
    tmp.replace(path)
