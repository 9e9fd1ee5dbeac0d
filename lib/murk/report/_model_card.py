"""Model cards of a run: one Markdown file per model with YAML front matter in Hugging Face's ``model-index`` layout.

A run is published next to other harnesses' per-sample logs (lmms-eval's) as its per-sample export
(:func:`murk.results.sample_rows`) and one card per model. The card's front matter is the ``model-index``
evaluation-results metadata of Hugging Face model cards (hub-docs ``modelcard.md``; written and read by
``huggingface_hub``'s :class:`~huggingface_hub.ModelCardData` and :class:`~huggingface_hub.EvalResult`): one result
per arm and task, whose metrics are the crossing visibilities (m) and blind-spot widths W (decades) with their
bootstrap intervals in ``args``. Hugging Face's newer ``.eval_results/*.yaml`` format is not used: each of its
entries names a benchmark dataset registered on the Hub (``dataset_id``) whose leaderboard it feeds, and murk's
sweep is not one.

Every number comes from the run's files: the values from ``analysis/crossings.nc`` (the analyse notebook's
:func:`murk.results.crossing_table`), the printed table, the depth statement and the run identity from
``paper_numbers.json``, the conditions from the cube. Nothing is typed.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np
import xarray as xr

import murk
from murk import core
from murk.report._markdown import verbatim

__all__ = ["CARD_SIGNALS", "DEPTH_SCALE_CAVEAT", "model_card", "model_index"]

#: the read-outs a card reports, in order: accuracy's crossing V_acc, then the four awareness signals' crossings
#: and W (spec Table V)
CARD_SIGNALS = ("correct", "c_int", "verbal_conf", "abstain", "abstain2")
_SIGNAL_NAMES = {"correct": "accuracy", "c_int": "internal confidence", "verbal_conf": "verbalized confidence",
                 "abstain": "abstain rate (cannot determine)", "abstain2": "abstain rate (I don't know)"}
_TASK_NAMES = {"t2": "t2: 4-way identification of the boxed object",
               "t3": "t3: verification of the boxed object's category (yes/no)"}
_ARM_NAMES = {"fog": "fog (Koschmieder), meteorological visibility V",
              "underwater": "underwater (Pope-Fry absorption), best-channel visibility V_best"}
#: the depth-scale caveat of the spec (Sec. III, "Depth"): a global depth error rescales visibilities, not W
DEPTH_SCALE_CAVEAT = ("Only the product of the extinction coefficient and depth enters the image formation, so a "
                      "global error in depth by a factor κ rescales every crossing visibility by κ and leaves W "
                      "unchanged: visibilities in metres are conditional on the depth scale; W is not.")


def _num(x: Any) -> float | None:
    x = float(x)
    return None if math.isnan(x) else x


def _metric(name: str, mtype: str, value: float, lo: float, hi: float, side: str, ci_level: float | None,
            n_resamples: int | None) -> dict[str, Any] | None:
    v = _num(value)
    if v is None or math.isinf(v):
        return None
    args: dict[str, Any] = {}
    if side:
        args["bound"] = {"below": "upper", "above": "lower"}.get(side, side)
    elif _num(lo) is not None and _num(hi) is not None:
        args.update(ci_low=float(lo), ci_high=float(hi))
        if ci_level is not None:
            args["ci_level"] = ci_level
        if n_resamples is not None:
            args["bootstrap_resamples"] = n_resamples
    return {"type": mtype, "name": name, "value": v, **({"args": args} if args else {})}


def model_index(model: str, crossings: xr.Dataset, ci_level: float | None = None,
                n_resamples: int | None = None) -> list[dict[str, Any]]:
    """The ``model-index`` entry of one model: its crossing visibilities and blind-spot widths.

    Parameters
    ----------
    model : str
        A model of ``crossings``.
    crossings : xarray.Dataset
        :func:`murk.results.crossing_table` (``analysis/crossings.nc``): ``v_cross_m``, ``v_lo_m``, ``v_hi_m``
        (m), ``censored_side``, ``w``, ``w_lo``, ``w_hi`` (decades), ``w_censored_side`` over (model, arm, task,
        readout).
    ci_level : float, optional
        The intervals' level (0.95 for 95 %), recorded in each metric's ``args``.
    n_resamples : int, optional
        The bootstrap resamples of the intervals, recorded likewise.

    Returns
    -------
    list of dict
        ``[{"name": model, "results": [...]}]``: per arm and task a result with ``task`` (type
        ``visual-question-answering``), ``dataset`` (COCO val2017, config ``<arm>-<task>``: ``huggingface_hub``
        groups metrics by task type and dataset type, config, split and revision, so each arm and task is its own
        config; split ``validation``) and
        ``metrics``: ``crossing_visibility`` of each signal (value in m) and ``blind_spot_width`` of each
        awareness signal (decades). A censored crossing or W is a bound (``args.bound``: ``upper`` = the value is
        at most, ``lower`` = at least) without an interval; an undefined one (NaN) is left out.
    """
    c = crossings.sel(model=model)
    results = []
    for arm in [str(a) for a in c["arm"].values]:
        for task in [str(t) for t in c["task"].values]:
            metrics = []
            for ro in [r for r in CARD_SIGNALS if r in c["readout"].values]:
                x = c.sel(arm=arm, task=task, readout=ro)
                who = "acc" if ro == "correct" else ro
                m = _metric(f"V_{who} (m), crossing visibility of the {_SIGNAL_NAMES[ro]}", "crossing_visibility",
                            x["v_cross_m"], x["v_lo_m"], x["v_hi_m"], str(x["censored_side"].values), ci_level,
                            n_resamples)
                metrics += [m] if m else []
                if ro != "correct":
                    side = str(x["w_censored_side"].values)
                    m = _metric(f"W_{ro} (decades), blind-spot width log10(V_acc / V_{ro})", "blind_spot_width",
                                x["w"], x["w_lo"], x["w_hi"], "" if side == "undefined" else side, ci_level,
                                n_resamples)
                    metrics += [m] if m else []
            if metrics:
                results.append({
                    "task": {"type": "visual-question-answering", "name": _TASK_NAMES.get(task, task)},
                    "dataset": {"type": "coco", "name": f"COCO val2017, murk {_ARM_NAMES.get(arm, arm)} sweep",
                                "config": f"{arm}-{task}", "split": "validation"},
                    "metrics": metrics,
                })
    return [{"name": model, "results": results}]


def _conditions(cube: xr.Dataset, model: str) -> list[str]:
    vis = cube["visibility_m"].transpose("arm", "level")
    lines = []
    for arm in [str(a) for a in cube["arm"].values]:
        v = vis.sel(arm=arm).values
        sev = cube["severity"].sel(arm=arm).values
        if np.isfinite(v).any():
            lines.append(f"- `{arm}`: clean (level 0), then V = "
                         + ", ".join(f"{x:.4g}" for x in v[np.isfinite(v)]) + " m")
        elif (~np.isnan(sev) & (sev > 0)).any():
            lines.append(f"- `{arm}`: clean (level 0), then ImageNet-C fog severities "
                         + ", ".join(f"{int(s)}" for s in sev[~np.isnan(sev) & (sev > 0)]))
        else:
            lines.append(f"- `{arm}`: one control image (level 0)")
    tasks = ", ".join(f"`{t}`" for t in cube["task"].values)
    n = int(cube["n_items"].sel(model=model)) if "n_items" in cube.coords else cube.sizes["image"]
    lines.append(f"- tasks: {tasks} (t3 asked twice per image, true category and distractor; its score is their "
                 f"mean)")
    lines.append(f"- items: {n} COCO val2017 images read out by this model (of {cube.sizes['image']} in the run)")
    return lines


def _table(model: str, crossings: xr.Dataset, numbers: Mapping[str, str]) -> list[str]:
    slug = core.model_slug(model)
    rows = ["| arm | task | signal | crossing visibility (m) | interval | W (decades) | interval |",
            "|---|---|---|---|---|---|---|"]
    for arm in [str(a) for a in crossings["arm"].values]:
        for task in [str(t) for t in crossings["task"].values]:
            for ro in [r for r in CARD_SIGNALS if r in crossings["readout"].values]:
                k = f"{ro}.{arm}.{task}.{slug}"
                v, vci = numbers.get(f"v.{k}", "n/a"), numbers.get(f"v.{k}.ci", "")
                w, wci = ("", "") if ro == "correct" else (numbers.get(f"w.{k}", "n/a"), numbers.get(f"w.{k}.ci", ""))
                rows.append(f"| {arm} | {task} | {_SIGNAL_NAMES[ro]} | {v} | {vci} | {w} | {wci} |")
    return rows


def model_card(model: str, cube: xr.Dataset, crossings: xr.Dataset, numbers: Mapping[str, str],
               files: Mapping[str, str] | None = None) -> str:
    """The Markdown model card of one model of a run, with its ``model-index`` front matter.

    Parameters
    ----------
    model : str
        A model of the cube and of ``crossings``.
    cube : xarray.Dataset
        The run's cube (:func:`murk.results.open_cube`): its conditions (``visibility_m``, ``severity``,
        ``task``, ``n_items``), the model's ``model_revision`` and ``pipeline_check``, and the run's attributes
        (``config_hash``, ``items_hash``, ``depth_backend``).
    crossings : xarray.Dataset
        ``analysis/crossings.nc`` (:func:`murk.results.crossing_table`): the values of the front matter.
    numbers : mapping of str to str
        ``paper_numbers.json``: the table's printed values (``v.<signal>.<arm>.<task>.<model>``,
        ``w.<signal>.…`` and their ``.ci``), ``run_id``, ``analysis_id``, ``ci_percent``,
        ``n_resamples_crossing``, ``methods.depth`` and ``pipeline_check_note``, as the paper prints them.
    files : mapping of str to str, optional
        Names of the run's export files (per-sample rows) to list in the card.

    Returns
    -------
    str
        ``---``, the YAML front matter (``tags``, ``datasets``, ``metrics``, ``model-index``; built by
        :class:`huggingface_hub.ModelCardData`), ``---``, then the Markdown: the pipeline-check notice where the
        model is a random-weight checkpoint, the run identity, the conditions, the table of crossings and W with
        intervals, and the depth-scale caveat.

    Raises
    ------
    KeyError
        ``model`` is not in the cube or in ``crossings``.
    """
    from huggingface_hub import ModelCardData
    from huggingface_hub.repocard_data import model_index_to_eval_results

    if model not in [str(m) for m in crossings["model"].values]:
        raise KeyError(f"{model} has no crossings in analysis/crossings.nc (a monitor, or not analysed)")
    check = bool(cube["pipeline_check"].sel(model=model)) if "pipeline_check" in cube.coords else False
    ci, n_res = str(numbers.get("ci_percent", "")), str(numbers.get("n_resamples_crossing", ""))
    index = model_index(model, crossings, float(ci) / 100 if ci.replace(".", "", 1).isdigit() else None,
                        int(n_res) if n_res.isdigit() else None)
    _, evals = model_index_to_eval_results(index)
    tags = ["murk", "vision-language-model", "calibration", "visibility"] + (["pipeline-check"] if check else [])
    meta = ModelCardData(model_name=model, tags=tags, datasets=["coco"],
                         metrics=["crossing_visibility", "blind_spot_width"], eval_results=evals)
    revision = str(cube["model_revision"].sel(model=model).values) if "model_revision" in cube.coords else ""
    a = cube.attrs
    ident = [("run_id", numbers.get("run_id", a.get("run_id", ""))), ("analysis_id", numbers.get("analysis_id", "")),
             ("config hash", a.get("config_hash", "")), ("items hash", a.get("items_hash", "")),
             ("git commit", a.get("git_commit", "")), ("murk version", murk.__version__),
             ("model revision", revision), ("depth backend", a.get("depth_backend", ""))]
    body = [f"# murk read-outs of {verbatim(model)}", ""]   # the id as written (a folder's name is data)
    if check:
        note = str(numbers.get("pipeline_check_note", "This model is a tiny random-weight checkpoint built offline "
                                                      "by murk: its numbers test the pipeline and say nothing about "
                                                      "any model."))
        body += ["> **Pipeline check, not a result.** " + note.replace("**Pipeline check.** ", ""), ""]
    body += ["How murky must the air or water get before this model knows it cannot see? Accuracy, internal and "
             "verbalized confidence and abstention on one physical axis, the visibility V in metres; each signal's "
             "crossing visibility (where it reaches mid-way between its clean value and its floor) and the "
             "blind-spot width W = log10(V_acc / V_aware) (W > 0: the signal falls later, in murkier conditions, "
             "than accuracy).", "", "## Run", "", "| | |", "|---|---|"]
    cells = {k: verbatim(str(v)).replace("|", r"\|") for k, v in ident}   # a value as written; a | splits no cell
    body += [f"| {k} | {cells[k]} |" for k, v in ident if v != ""]
    body += ["", "## Conditions", "", *_conditions(cube, model), "", "## Crossing visibilities and blind-spot widths",
             "", f"Point estimates with {numbers.get('ci_percent', '')} % bootstrap intervals over images; ≤ and ≥ "
                 "mark bounds (a crossing not reached within the sweep); n/a: undefined.", "",
             *_table(model, crossings, numbers), "", "## Depth scale", "",
             f"{numbers.get('methods.depth', '')}. {DEPTH_SCALE_CAVEAT}".lstrip(". ")]
    if files:
        body += ["", "## Per-sample read-outs", "", *(f"- `{name}`: {what}" for name, what in files.items())]
    return f"---\n{meta.to_yaml()}\n---\n\n" + "\n".join(body) + "\n"
