"""murk.results' per-sample rows (issue 41, item 4): the cube laid flat and read back, value for value."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from murk import results, scene
from murk.core import READOUTS, TEXT_READOUTS
from murk.results import _cube as cube
from murk.results import _samples as samples

ATTRS = {"config_hash": "c" * 64, "items_hash": "i" * 64, "depth_backend": "constant-13.8m"}
ITEMS = [{"image_id": 30, "category": "car", "t2_options": ["bus", "car", "dog", "cat"], "t2_answer_index": 1,
          "t3_distractor": "umbrella"},
         {"image_id": 10, "category": "dog", "t2_options": ["dog", "kite", "car", "bench"], "t2_answer_index": 0,
          "t3_distractor": "bus"},
         {"image_id": 40, "category": "cat", "t2_options": ["bench", "bus", "kite", "cat"], "t2_answer_index": 3,
          "t3_distractor": "car"}]


def _results(rng, model_no: int) -> dict:
    """Every condition's read-outs: random float64 (exact repr matters), NaN, infinities and odd texts."""
    out = {}
    for arm, level in scene.CONDITIONS:
        for task in cube.TASKS:
            r = {k: float(rng.random()) for k in READOUTS}
            r["p_option_3"] = np.nan if task != "t2" else r["p_option_3"]
            r["verbal_conf"] = np.nan if rng.random() < 0.3 else 0.57   # k/100: the float64 nearest the decimal
            r["visibility_hat_m"] = np.inf if level == 0 else r["visibility_hat_m"]
            r.update({t: f"{t} {arm}{level}{task} m{model_no} ü \u2603\n\"Confidence: 1" for t in TEXT_READOUTS})
            r["verbal_text_v2"] = ""
            out[(arm, level, task)] = r
    return out


@pytest.fixture(scope="module")
def small_cube(tmp_path_factory):
    """A merged cube of two models: one on the three items with bad input on the second, one on the first two
    (the third "not run"); the second a pipeline check."""
    tmp = tmp_path_factory.mktemp("samples")
    rng = np.random.default_rng(7)
    ids, cats = [it["image_id"] for it in ITEMS], [it["category"] for it in ITEMS]
    stores = {}
    for no, (model, n, check) in enumerate((("org/a", 3, 0), ("murk-tiny/b", 2, 1))):
        p = tmp / f"{no}.zarr"
        cube.open_readout_store(p, ids[:n], cats[:n], {**ATTRS, "model_id": model, "pipeline_check": check,
                                                        "model_revision": f"rev{no}"})
        for i in range(n):
            if model == "org/a" and i == 1:
                cube.write_missing(p, i, "image file missing")
            else:
                cube.write_image(p, i, _results(rng, no))
        stores[model] = p
    return cube.merge_models(stores, tmp / "cube.zarr").load()


def _differences(ds: xr.Dataset, back: xr.Dataset) -> list[str]:
    """Where ``back`` differs from the cube ``ds``: read-outs (NaN equal to NaN), texts, missing reasons, the
    per-model and per-image coordinates."""
    back = back.sel(model=ds["model"].values, image=ds["image"].values, level=ds["level"].values)
    out = []
    if list(back["readout"].values) != list(ds["readout"].values):
        return [f"read-outs {list(back['readout'].values)} != {list(ds['readout'].values)}"]
    a, b = ds["value"].values, back["value"].transpose(*ds["value"].dims).values
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    out += [f"value {tuple(ds['value'][i].coords[d].item() for d in ds['value'].dims)}"
            for i in zip(*np.nonzero(~same))]
    for name in (*TEXT_READOUTS, "missing_reason"):
        x, y = np.asarray(ds[name].values, dtype=object), np.asarray(back[name].transpose(*ds[name].dims).values,
                                                                     dtype=object)
        out += [f"{name} {tuple(int(j) for j in i)}" for i in zip(*np.nonzero(x != y))]
    for name in ("model_revision", "kind", "pipeline_check", "category", "visibility_m", "severity"):
        x, y = ds[name].values, back[name].transpose(*ds[name].dims).values
        if not (np.array_equal(x, y) if x.dtype.kind not in "fc" else np.array_equal(x, y, equal_nan=True)):
            out.append(f"coordinate {name}")
    return out


def test_rows_read_back_into_the_cube_value_for_value(small_cube):
    rows = results.sample_rows(small_cube)
    assert _differences(small_cube, results.samples_to_cube(rows)) == []
    # one row per condition of the design (fog, underwater: 9 levels; imagenet_c: 6; the controls: 1 each), task
    # and image each model was run on, the not-run image without rows
    assert len(rows) == (9 + 9 + 6 + 1 + 1) * 3 * (3 + 2)
    assert {(r["model"], r["image"]) for r in rows} == {("org/a", 30), ("org/a", 10), ("org/a", 40),
                                                        ("murk-tiny/b", 30), ("murk-tiny/b", 10)}
    bad = [r for r in rows if r["model"] == "org/a" and r["image"] == 10]
    assert {r["missing_reason"] for r in bad} == {"image file missing"} and all(np.isnan(r["c_int"]) for r in bad)
    clean = next(r for r in rows if r["arm"] == "fog" and r["level"] == 0)
    assert clean["visibility_m"] == np.inf and np.isnan(clean["severity"])
    assert next(r for r in rows if r["arm"] == "imagenet_c" and r["level"] == 3)["severity"] == 3.0
    assert [r["pipeline_check"] for r in rows if r["image"] == 30 and r["arm"] == "blank" and r["task"] == "t2"] == \
        [False, True]


def test_a_perturbed_value_or_text_is_noticed(small_cube):
    """The comparison can fail: one value changed in one row (in its last bit), one text, one missing reason."""
    rows = results.sample_rows(small_cube)
    k = next(i for i, r in enumerate(rows) if r["arm"] == "underwater" and r["level"] == 4 and r["task"] == "t3_false"
             and r["model"] == "murk-tiny/b")
    rows[k]["c_int"] = float(np.nextafter(rows[k]["c_int"], 2.0))
    rows[k + 1]["verbal_text"] += " "
    got = _differences(small_cube, results.samples_to_cube(rows))
    assert got[0] == "value ('murk-tiny/b', 'underwater', 4, 't3_false', 30, 'c_int')" and len(got) == 2
    assert got[1].startswith("verbal_text")
    rows = results.sample_rows(small_cube)
    for r in rows:   # a reason the cube does not hold, in every row of that model and image
        if (r["model"], r["image"]) == ("org/a", 40):
            r["missing_reason"] = "image file missing"
    assert _differences(small_cube, results.samples_to_cube(rows)) == ["missing_reason (0, 2)"]
    rows[-1]["missing_reason"] = "depth map missing"   # in one row only: the rows disagree
    with pytest.raises(ValueError, match="murk-tiny/b, image 10 disagree on its missing_reason"):
        results.samples_to_cube(rows)
    rows = results.sample_rows(small_cube)
    rows[5]["category"] = "bus"
    with pytest.raises(ValueError, match="rows of 40 disagree: 'cat' and 'bus'"):
        results.samples_to_cube(rows)


def test_a_readout_dropped_from_one_side_is_noticed(small_cube, monkeypatch):
    """The seam: rows written by an exporter that knows one read-out less (the schema changed on one side) do not
    read back into the cube; a cube that lacks a read-out is refused by name."""
    short = tuple(r for r in READOUTS if r != "p_abstain2")
    monkeypatch.setattr(samples, "READOUTS", short)
    rows = results.sample_rows(small_cube)
    assert "p_abstain2" not in rows[0]
    monkeypatch.undo()
    with pytest.raises(KeyError, match="p_abstain2"):
        results.samples_to_cube(rows)
    with pytest.raises(ValueError, match="lacks the read-out.*verbal_stop.*run its analyse stage again"):
        results.sample_rows(small_cube.drop_sel(readout="verbal_stop"))


def test_prompts_are_those_the_readout_asked(small_cube):
    """With the items and the configuration, each row carries the option texts and the three prompts'
    texts (murk.protocol.render_prompt); an image outside the items is refused."""
    from murk import core, protocol

    cfg = core.load_config()
    rows = results.sample_rows(small_cube, ITEMS, cfg)
    r = next(r for r in rows if r["image"] == 40 and r["task"] == "t3_false")
    q = protocol.questions_for_item(ITEMS[2], cfg)[2]
    assert r["options"] == list(q.options) and "car" in r["prompt"]
    assert (r["prompt"], r["prompt_abstain"], r["prompt_abstain2"]) == tuple(
        protocol.render_prompt(q, v, cfg)[0] for v in protocol.PROMPT_VARIANTS)
    assert r["prompt"] != r["prompt_abstain"] != r["prompt_abstain2"]
    with pytest.raises(ValueError, match="not among the run's items"):
        results.sample_rows(small_cube, ITEMS[:2], cfg)


def test_json_numbers_round_trip_exactly():
    import json

    xs = [0.1, 1 / 3, 5e-324, 1.7976931348623157e308, -0.0, np.inf, -np.inf, np.nan, 0.57]
    back = [results.number_from_json(json.loads(json.dumps(results.json_number(x), allow_nan=False))) for x in xs]
    np.testing.assert_array_equal(back, xs)
    with pytest.raises(ValueError, match="only \"inf\""):
        results.number_from_json("nan")


def test_schema_accepts_the_rows_and_rejects_others(small_cube):
    import json

    import jsonschema

    schema = results.samples_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    v = jsonschema.Draft202012Validator(schema)
    rows = [{k: (results.json_number(x) if isinstance(x, float) else x) for k, x in r.items()}
            for r in results.sample_rows(small_cube)]
    for r in rows[::7]:
        v.validate(json.loads(json.dumps(r)))
    assert schema["properties"]["visibility_m"]["x-units"] == "m"
    assert list(schema["properties"]) == [f[0] for f in results.SAMPLE_FIELDS]
    assert not v.is_valid({**rows[0], "extra": 1})
    assert not v.is_valid({**rows[0], "c_int": "nan"})
    assert not v.is_valid({k: x for k, x in rows[0].items() if k != "missing_reason"})
