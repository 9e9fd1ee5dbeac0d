"""Per-sample rows of the cube: every read-out of a run, one row per model, arm, level, task and image.

The export a run is published with (``make export``, :mod:`murk.report.export`): the rows are the cube's
``value``, text read-outs and ``missing_reason`` laid flat, one row per asked question in one condition, next to
the sample's identity (model, arm, level with its visibility in m and its ImageNet-C severity, task, COCO image
id) and, where the items and configuration are given, the prompt texts asked. :func:`samples_to_cube` reads the
rows back into the cube's shape, value for value (NaN, infinities and empty texts included), which the tests
compare with the cube.

Which rows: each model's images it was run on (``missing_reason`` not :data:`murk.results.NOT_RUN`; an image
with bad input is a row with its reason and NaN read-outs) in each condition of the design: the physical arms
at every level, ImageNet-C at level 0 and its severities, the controls at level 0, and any other arm-level that
holds a value. What has no row is NaN, ``""`` and, for an image a model was not run on, ``"not run"``.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import xarray as xr

from murk import protocol
from murk.core import ARMS, DIMS, PHYSICAL_ARMS, READOUTS, TASKS, TEXT_READOUTS, VALUE_DTYPE
from murk.results._cube import NOT_RUN, level_coords

__all__ = ["SAMPLE_FIELDS", "sample_rows", "samples_to_cube", "samples_json_schema", "json_number",
           "number_from_json"]

_READOUT_TEXT = {
    "answer": ("1", "index of the chosen option (argmax of the main prompt's option probabilities)"),
    "correct": ("1", "1 = the answer is the correct option, 0 = not"),
    "c_int": ("1", "internal confidence: the largest option probability of the main prompt (first token, "
                   "renormalised over the option letters)"),
    "verbal_conf": ("1", "verbalized confidence (wording v1) as a probability, k/100; missing where the "
                         "continuation held no parseable number"),
    "abstain": ("1", "1 = the abstain prompt's answer is its extra option (\"cannot determine\"), 0 = not"),
    "abstain2": ("1", "1 = the second abstain prompt's answer is its extra option (\"I don't know\"), 0 = not"),
    "option_mass": ("1", "first-token probability mass on the option letters, before renormalisation"),
    "verbal_conf_v2": ("1", "verbalized confidence of wording v2 (spec Table VI)"),
    "verbal_conf_v3": ("1", "verbalized confidence of wording v3 (spec Table VI)"),
    "visibility_hat_m": ("m", "the visibility monitor's estimate V-hat (monitors only)"),
    "visibility_hat_censored": ("1", "0 = V-hat is a point estimate, -1 an upper bound, +1 a lower bound"),
    "verbal_stop": ("1", "how the v1 continuation ended: 0 = end-of-sequence, 1 = token limit"),
    "verbal_stop_v2": ("1", "how the v2 continuation ended: 0 = end-of-sequence, 1 = token limit"),
    "verbal_stop_v3": ("1", "how the v3 continuation ended: 0 = end-of-sequence, 1 = token limit"),
    "target": ("1", "index of the correct option"),
    "p_abstain": ("1", "the abstain prompt's probability of its extra option (renormalised over its options)"),
    "p_abstain2": ("1", "the second abstain prompt's probability of its extra option"),
    "visibility_hat_arm": ("1", "the estimator arm a monitor used: 0 fog, 1 underwater"),
    **{f"p_option_{k}": ("1", f"the main prompt's first-token probability of option {k} (letter "
                              f"{'ABCD'[k]}), renormalised over the options; missing beyond the item's options")
       for k in range(4)},
}
_TEXT_TEXT = {
    "verbal_text": "the 12-token greedy continuation of the main prompt (wording v1), as decoded",
    "top_token": "the most probable first token of the main prompt, as decoded",
    "verbal_text_v2": "the continuation of wording v2 ('' = not asked)",
    "verbal_text_v3": "the continuation of wording v3 ('' = not asked)",
}

#: every field of a sample row, in order: (name, type, units, description); type is ``"string"``,
#: ``"integer"``, ``"number"`` (float64: ``null`` in JSON is NaN, missing), ``"boolean"`` or ``"string list"``.
#: The read-outs are :data:`murk.core.READOUTS` and :data:`murk.core.TEXT_READOUTS` under their cube names
SAMPLE_FIELDS: tuple[tuple[str, str, str, str], ...] = (
    ("model", "string", "", "model id as the run names it (a hub id, a local folder, or murk's own)"),
    ("model_revision", "string", "", "the model's revision: a hub snapshot's commit, a local folder's content digest"),
    ("kind", "string", "", "vlm, or monitor (murk's visibility monitor)"),
    ("pipeline_check", "boolean", "", "a tiny random-weight checkpoint: its numbers test the pipeline and say "
                                      "nothing about any model"),
    ("arm", "string", "", "fog, underwater (the physical arms), imagenet_c (nominal control), blank, shuffled"),
    ("level", "integer", "1", "degradation level, 0 = undegraded"),
    ("visibility_m", "number", "m", "visibility of the level: meteorological visibility V (fog), best-channel "
                                    "visibility V_best (underwater); \"inf\" = clean; null = a level without one"),
    ("severity", "number", "1", "ImageNet-C fog severity (imagenet_c arm; null elsewhere)"),
    ("task", "string", "", "t2 (4-way identification), t3_true and t3_false (verification with the true "
                           "category and a distractor)"),
    ("image", "integer", "", "COCO val2017 image id"),
    ("category", "string", "", "the boxed target's COCO category"),
    ("options", "string list", "", "the option texts in the order shown (letters A, B, ...); empty without the "
                                   "run's items"),
    ("prompt", "string", "", "the main prompt's user text (options and the v1 verbalized-confidence request); "
                             "'' without the run's items"),
    ("prompt_abstain", "string", "", "the abstain prompt's user text (one more option: cannot determine)"),
    ("prompt_abstain2", "string", "", "the second abstain prompt's user text (one more option: I don't know)"),
    *((r, "number", *_READOUT_TEXT[r]) for r in READOUTS),
    *((t, "string", "", _TEXT_TEXT[t]) for t in TEXT_READOUTS),
    ("missing_reason", "string", "", "why this image has no read-outs of this model ('' = it has)"),
)
#: the fields of a row that are the model's (equal in all its rows)
_PER_MODEL = ("model_revision", "kind", "pipeline_check")


def json_number(x: float) -> float | str | None:
    """A float64 as JSON has it: itself, ``None`` for NaN, ``"inf"`` / ``"-inf"`` for the infinities.

    JSON has no NaN or infinity; :func:`number_from_json` inverts this exactly (``json`` writes the shortest
    repr, which reads back as the same float64).

    >>> json_number(float("inf")), json_number(float("nan")), json_number(0.25)
    ('inf', None, 0.25)
    """
    x = float(x)
    if math.isnan(x):
        return None
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def number_from_json(x: float | str | None) -> float:
    """The inverse of :func:`json_number`: a float64 (NaN for ``None``).

    Raises
    ------
    ValueError
        A string other than ``"inf"`` / ``"-inf"``.
    """
    if x is None:
        return math.nan
    if isinstance(x, str):
        if x not in ("inf", "-inf"):
            raise ValueError(f"a number field holds the string {x!r}: only \"inf\" and \"-inf\" are numbers")
        return float(x)
    return float(x)


def _conditions(ds: xr.Dataset, value: np.ndarray) -> np.ndarray:
    """bool (arm, level): the arm-levels of the design, and any other one that holds a value."""
    arms = [str(a) for a in ds["arm"].values]
    sev = ds["severity"].transpose("arm", "level").values
    levels = ds["level"].values
    cond = np.zeros((len(arms), levels.size), dtype=bool)
    for i, arm in enumerate(arms):
        cond[i] = (arm in PHYSICAL_ARMS) | (levels == 0) | ~np.isnan(sev[i])
    held = ~np.isnan(value).all(axis=(0, 3, 4, 5))           # (arm, level): any model, task, image or read-out
    return cond | held


def _prompts(items: Any, config: Mapping[str, Any]) -> dict[int, dict[str, tuple]]:
    """{image id: {task: (options, main, abstain, abstain2)}} from the run's items table and configuration."""
    out: dict[int, dict[str, tuple]] = {}
    rows = items.to_dict("records") if hasattr(items, "to_dict") else list(items)
    for row in rows:
        per = {}
        for q in protocol.questions_for_item(row, config):
            per[q.task] = (list(q.options), *(protocol.render_prompt(q, v, config)[0]
                                              for v in protocol.PROMPT_VARIANTS))
        out[int(row["image_id"])] = per
    return out


def sample_rows(ds: xr.Dataset, items: Any = None, config: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every read-out of the cube, one row per model, arm, level, task and image (:data:`SAMPLE_FIELDS`).

    Parameters
    ----------
    ds : xarray.Dataset
        The cube (:func:`murk.results.merge_models`, :func:`murk.results.open_cube`): ``value`` (model, arm,
        level, task, image, readout), the text read-outs, ``missing_reason`` (model, image) and the model
        coordinates.
    items : pandas.DataFrame or iterable of mapping, optional
        The run's items (:func:`murk.protocol.read_items`: ``image_id``, ``category``, ``t2_options``,
        ``t2_answer_index``, ``t3_distractor``): with ``config``, each row gets its option texts and prompt texts.
    config : mapping, optional
        The run's configuration (:func:`murk.protocol.config_of`), whose prompt templates render the prompts.

    Returns
    -------
    list of dict
        In the cube's order (model, arm, level, task, image); numbers are Python floats (NaN = missing,
        ``inf`` the clean level's visibility), ``level`` and ``image`` ints.

    Raises
    ------
    ValueError
        The cube lacks a read-out of :data:`murk.core.READOUTS` or a text read-out (a cube of another schema:
        run the analyse stage again), or an image of the cube is not among ``items``.
    """
    readouts = [str(r) for r in ds["readout"].values]
    lacking = [r for r in READOUTS if r not in readouts] + [t for t in TEXT_READOUTS if t not in ds]
    if lacking:
        raise ValueError(f"the cube lacks the read-out(s) {', '.join(lacking)} (schema version "
                         f"{ds.attrs.get('schema_version', '?')}): run its analyse stage again to rebuild it")
    value = np.asarray(ds["value"].transpose(*DIMS).sel(readout=list(READOUTS)).values, dtype=VALUE_DTYPE)
    texts = {t: np.asarray(ds[t].transpose(*DIMS[:-1]).values, dtype=object) for t in TEXT_READOUTS}
    missing = (np.asarray(ds["missing_reason"].transpose("model", "image").values, dtype=object)
               if "missing_reason" in ds else np.full((ds.sizes["model"], ds.sizes["image"]), "", dtype=object))
    models = [str(m) for m in ds["model"].values]
    arms = [str(a) for a in ds["arm"].values]
    levels = [int(v) for v in ds["level"].values]
    tasks = [str(t) for t in ds["task"].values]
    images = [int(i) for i in ds["image"].values]
    cats = [str(c) for c in ds["category"].values] if "category" in ds.coords else [""] * len(images)
    vis = ds["visibility_m"].transpose("arm", "level").values
    sev = ds["severity"].transpose("arm", "level").values

    def coord(name, default):
        return [c for c in ds[name].values] if name in ds.coords else [default] * len(models)

    revision, kind, check = coord("model_revision", ""), coord("kind", "vlm"), coord("pipeline_check", False)
    prompts = _prompts(items, config) if items is not None and config is not None else None
    if prompts is not None:
        absent = [i for i in images if i not in prompts]
        if absent:
            raise ValueError(f"{len(absent)} image(s) of the cube are not among the run's items (e.g. {absent[:3]}): "
                             f"the cube and items.json are of different runs; run the analyse stage again")
    cond = _conditions(ds, value)
    rows: list[dict[str, Any]] = []
    for m, model in enumerate(models):
        head = {"model": model, "model_revision": str(revision[m]), "kind": str(kind[m]),
                "pipeline_check": bool(check[m])}
        for a, arm in enumerate(arms):
            for li, level in enumerate(levels):
                if not cond[a, li]:
                    continue
                for t, task in enumerate(tasks):
                    for i, image in enumerate(images):
                        reason = str(missing[m, i])
                        if reason == NOT_RUN:
                            continue
                        opts, p_main, p_abs, p_abs2 = (prompts[image].get(task, ([], "", "", ""))
                                                       if prompts is not None else ([], "", "", ""))
                        row = {**head, "arm": arm, "level": level, "visibility_m": float(vis[a, li]),
                               "severity": float(sev[a, li]), "task": task, "image": image, "category": cats[i],
                               "options": opts, "prompt": p_main, "prompt_abstain": p_abs,
                               "prompt_abstain2": p_abs2}
                        row.update(zip(READOUTS, value[m, a, li, t, i].tolist()))
                        row.update({name: str(arr[m, a, li, t, i]) for name, arr in texts.items()})
                        row["missing_reason"] = reason
                        rows.append(row)
    return rows


def samples_to_cube(rows: Iterable[Mapping[str, Any]], levels: Sequence[int] | None = None) -> xr.Dataset:
    """Sample rows read back into the cube's shape: the inverse of :func:`sample_rows` on the read-outs.

    Parameters
    ----------
    rows : iterable of mapping
        Rows of :func:`sample_rows`, or read back from the JSON Lines or Parquet export (numbers as
        :func:`json_number` writes them are accepted).
    levels : sequence of int, optional
        The cube's levels (default: 0 to the largest level of a physical arm's row, else of any row).

    Returns
    -------
    xarray.Dataset
        ``value`` float64 (model, arm, level, task, image, readout), the text read-outs (model, arm, level,
        task, image), ``missing_reason`` (model, image; ``"not run"`` where a model has no row of an image),
        coordinates ``model_revision``, ``kind``, ``pipeline_check`` (model), ``category`` (image),
        ``visibility_m`` and ``severity`` (arm × level, :func:`murk.results.level_coords`). Models, arms, tasks
        and images in the order of their first row; arms and tasks of the cube's schema in its order.

    Raises
    ------
    ValueError
        Two rows of the same model, arm, level, task and image; rows of one model that disagree on its revision,
        kind or pipeline check, of one image on its category, of one model and image on its ``missing_reason``;
        or no rows.
    KeyError
        A row lacks a field of :data:`SAMPLE_FIELDS` (rows of another schema).
    """
    rows = list(rows)
    if not rows:
        raise ValueError("samples_to_cube: no rows")

    def order(name):
        seen: dict[Any, None] = {}
        for r in rows:
            seen.setdefault(r[name], None)
        return list(seen)

    models, images = order("model"), [int(i) for i in order("image")]
    arms, tasks = list(ARMS), list(TASKS)
    if levels is None:
        phys = [int(r["level"]) for r in rows if r["arm"] in PHYSICAL_ARMS] or [int(r["level"]) for r in rows]
        levels = list(range(max(phys) + 1))
    levels = [int(v) for v in levels]
    ix = {name: {k: n for n, k in enumerate(keys)} for name, keys in
          (("model", models), ("arm", arms), ("level", levels), ("task", tasks), ("image", images))}
    shape = tuple(len(ix[d]) for d in DIMS[:-1])
    value = np.full((*shape, len(READOUTS)), np.nan, dtype=VALUE_DTYPE)
    texts = {t: np.full(shape, "", dtype=object) for t in TEXT_READOUTS}
    missing = np.full((len(models), len(images)), NOT_RUN, dtype=object)
    seen = np.zeros(shape, dtype=bool)
    meta: dict[str, dict] = {}
    category: dict[int, str] = {}
    reasons: dict[tuple[int, int], str] = {}
    for r in rows:
        at = (ix["model"][r["model"]], ix["arm"][r["arm"]], ix["level"][int(r["level"])], ix["task"][r["task"]],
              ix["image"][int(r["image"])])
        if seen[at]:
            raise ValueError(f"two rows of model {r['model']}, arm {r['arm']}, level {r['level']}, task {r['task']}, "
                             f"image {r['image']}")
        seen[at] = True
        value[at] = [number_from_json(r[k]) for k in READOUTS]
        for t in TEXT_READOUTS:
            texts[t][at] = str(r[t])
        reason = str(r["missing_reason"])
        if (at[0], at[4]) in reasons and reasons[at[0], at[4]] != reason:
            raise ValueError(f"the rows of model {r['model']}, image {r['image']} disagree on its missing_reason "
                             f"({reasons[at[0], at[4]]!r}, {reason!r})")
        reasons[at[0], at[4]] = missing[at[0], at[4]] = reason
        for key, have, got in (
                (r["model"], meta.setdefault(r["model"], {k: r[k] for k in _PER_MODEL}), {k: r[k] for k in _PER_MODEL}),
                (r["image"], category.setdefault(int(r["image"]), str(r["category"])), str(r["category"]))):
            if have != got:
                raise ValueError(f"the rows of {key} disagree: {have!r} and {got!r}")
    lc = level_coords()
    coords = {
        "model": models, "arm": arms, "level": levels, "task": tasks, "image": images, "readout": list(READOUTS),
        **{k: ("model", [meta[m][k] for m in models]) for k in _PER_MODEL},
        "category": ("image", [category[i] for i in images]),
        **{k: lc[k].sel(level=levels) for k in ("visibility_m", "severity")},
    }
    data = {"value": (DIMS, value), **{t: (DIMS[:-1], a) for t, a in texts.items()},
            "missing_reason": (("model", "image"), missing)}
    return xr.Dataset(data, coords=coords)


def samples_json_schema(title: str = "murk per-sample read-outs") -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one line of the JSON Lines export: one object per :func:`sample_rows` row.

    Numbers are JSON numbers, ``null`` for missing (NaN) and the strings ``"inf"`` / ``"-inf"`` for infinities
    (:func:`json_number`); each property's ``description`` is its :data:`SAMPLE_FIELDS` text and its unit, where
    it has one, is in the ``x-units`` keyword (UDUNITS, as the cube's CF ``units``).

    Returns
    -------
    dict
        The schema; every field is required and no other is allowed.
    """
    types = {"string": {"type": "string"}, "integer": {"type": "integer"}, "boolean": {"type": "boolean"},
             "number": {"anyOf": [{"type": "number"}, {"type": "null"}, {"enum": ["inf", "-inf"]}]},
             "string list": {"type": "array", "items": {"type": "string"}}}
    props = {}
    for name, typ, units, text in SAMPLE_FIELDS:
        props[name] = {**types[typ], "description": text, **({"x-units": units} if units else {})}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title, "type": "object",
            "properties": props, "required": [f[0] for f in SAMPLE_FIELDS], "additionalProperties": False}
