"""Tests of murk.items on the shared real COCO samples."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from murk import paths
from murk.config import load_config
from murk.items import (
    COLUMNS,
    items_hash,
    load_items,
    save_items,
    select_items,
    shuffled_partner,
)

SHARED = paths.project_root().parent / "shared"
VAL_SAMPLE = SHARED / "coco-val2017-sample" / "annotations" / "instances_val2017.json"
COCO128 = SHARED / "coco128" / "annotations" / "instances_train2017.json"

needs_val = pytest.mark.skipif(not VAL_SAMPLE.is_file(), reason=f"{VAL_SAMPLE} absent")
needs_128 = pytest.mark.skipif(not COCO128.is_file(), reason=f"{COCO128} absent")


def _select(path, **kw):
    with pytest.warns(UserWarning, match="pass the selection filter"):
        return select_items(path, **kw)


@pytest.fixture(scope="module")
def coco():
    if not VAL_SAMPLE.is_file():
        pytest.skip(f"{VAL_SAMPLE} absent")
    return json.loads(VAL_SAMPLE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def items():
    if not VAL_SAMPLE.is_file():
        pytest.skip(f"{VAL_SAMPLE} absent")
    with pytest.warns(UserWarning):
        return select_items(VAL_SAMPLE, n_items=1000, seed=1)


@needs_val
def test_val_sample_gives_37_items_with_warning(items):
    assert len(items) == 37  # README of the sample: exactly 37 images pass the filter
    assert list(items.columns) == list(COLUMNS)
    assert items["image_id"].is_unique
    for col in ("image_id", "width", "height", "annotation_id", "category_id", "t2_answer_index"):
        assert items[col].dtype == np.int64
    assert all(isinstance(b, list) and len(b) == 4 and all(isinstance(v, float) for v in b)
               for b in items["bbox"])


@needs_128
def test_coco128_gives_24_items():
    assert len(_select(COCO128)) == 24


@needs_val
def test_candidates_and_targets_satisfy_the_filter(items, coco):
    cfg = load_config()["items"]
    imgs = {im["id"]: im for im in coco["images"]}
    anns = {a["id"]: a for a in coco["annotations"]}
    sup = {c["id"]: c["supercategory"] for c in coco["categories"]}
    name = {c["id"]: c["name"] for c in coco["categories"]}
    for row in items.itertuples():
        a = anns[row.annotation_id]
        im = imgs[row.image_id]
        assert a["image_id"] == row.image_id and a["category_id"] == row.category_id
        assert name[row.category_id] == row.category and sup[row.category_id] == row.supercategory
        assert row.bbox == [float(v) for v in a["bbox"]]
        assert (row.width, row.height, row.file_name) == (im["width"], im["height"], im["file_name"])
        # target boxable
        w, h = a["bbox"][2], a["bbox"][3]
        frac = w * h / (im["width"] * im["height"])
        assert a["iscrowd"] == 0
        assert cfg["min_box_area_fraction"] <= frac <= cfg["max_box_area_fraction"]
        assert min(w, h) >= cfg["min_box_side_px"]
        # the image holds a vehicle or outdoor object
        cats_here = {x["category_id"] for x in coco["annotations"] if x["image_id"] == row.image_id}
        assert any(sup[c] in cfg["supercategories"] for c in cats_here)


@needs_val
def test_options_and_distractors(items, coco):
    name_to_id = {c["name"]: c["id"] for c in coco["categories"]}
    for row in items.itertuples():
        opts = row.t2_options
        assert isinstance(opts, list) and len(opts) == 4 and len(set(opts)) == 4
        assert 0 <= row.t2_answer_index <= 3 and opts[row.t2_answer_index] == row.category
        cats_here = {a["category_id"] for a in coco["annotations"] if a["image_id"] == row.image_id}
        distractors = [o for o in opts if o != row.category]
        assert len(distractors) == 3
        for d in distractors:  # no annotation of any kind in the image
            assert name_to_id[d] not in cats_here
        assert row.t3_distractor in distractors
    # the answer position is not constant
    assert items["t2_answer_index"].nunique() > 1


@needs_val
def test_determinism_and_seed(items):
    again = _select(VAL_SAMPLE, n_items=1000, seed=1)
    pd.testing.assert_frame_equal(items, again)
    assert items_hash(items) == items_hash(again)
    other = _select(VAL_SAMPLE, n_items=1000, seed=2)
    assert items_hash(other) != items_hash(items)


@needs_val
def test_per_item_randomness_reproduces_in_subsets(items):
    sub = select_items(VAL_SAMPLE, n_items=10, seed=1)
    assert len(sub) == 10
    full = items.set_index("image_id")
    for row in sub.itertuples():
        ref = full.loc[row.image_id]
        assert row.annotation_id == ref["annotation_id"]
        assert row.t2_options == ref["t2_options"] and row.t3_distractor == ref["t3_distractor"]


@needs_val
def test_hash_stable_under_shuffled_json(items, coco, tmp_path):
    shuffled = dict(coco)
    rnd = random.Random(0)
    for key in ("images", "annotations", "categories"):
        shuffled[key] = rnd.sample(coco[key], len(coco[key]))
    f = tmp_path / "shuffled.json"
    f.write_text(json.dumps(shuffled), encoding="utf-8")
    again = _select(f, n_items=1000, seed=1)
    assert items_hash(again) == items_hash(items)
    pd.testing.assert_frame_equal(again, items)


@needs_val
def test_hash_is_the_same_in_another_process(items):
    code = (
        "import warnings; warnings.simplefilter('ignore');"
        "from murk.items import select_items, items_hash;"
        f"print(items_hash(select_items({str(VAL_SAMPLE)!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "123"})
    assert out.stdout.strip() == items_hash(items)


def test_hash_reference_value():
    table = pd.DataFrame(
        {
            "image_id": [1], "annotation_id": [2], "category": ["car"], "bbox": [[1.5, 2.0, 50.0, 60.25]],
            "t2_options": [["kite", "car", "bus", "boat"]], "t2_answer_index": [1], "t3_distractor": ["bus"],
        }
    )
    import hashlib

    text = ('{"columns":["image_id","annotation_id","category","bbox","t2_options","t2_answer_index",'
            '"t3_distractor"],"rows":[[1,2,"car",[1.5,2.0,50.0,60.25],["kite","car","bus","boat"],1,"bus"]]}')
    assert items_hash(table) == hashlib.sha256(text.encode()).hexdigest()
    swapped = table.copy()
    swapped.at[0, "t2_answer_index"] = 2
    assert items_hash(swapped) != items_hash(table)


@needs_val
def test_save_load_round_trip(items, tmp_path):
    f = save_items(items, tmp_path / "sub" / "items.json")
    assert f.is_file() and not list(f.parent.glob(".*tmp"))
    back = load_items(f)
    pd.testing.assert_frame_equal(back, items)
    assert items_hash(back) == items_hash(items)
    assert isinstance(back.at[0, "bbox"], list) and isinstance(back.at[0, "t2_options"], list)
    assert isinstance(back["image_id"].tolist()[0], int)
    records = json.loads(f.read_text(encoding="utf-8"))
    assert isinstance(records, list) and set(records[0]) == set(COLUMNS)


def test_shuffled_partner():
    j = shuffled_partner(1000)
    assert j.dtype == np.int64 and j[0] == 37 and j[999] == 36 and j[962] == 999 and j[963] == 0
    assert sorted(j.tolist()) == list(range(1000))
    assert shuffled_partner(1000, load_config()["items"]["shuffle_offset"]).tolist() == j.tolist()
    assert shuffled_partner(37).tolist() == list(range(37))  # N = offset: the identity
    with pytest.raises(ValueError):
        shuffled_partner(0)


def test_missing_file_error(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(FileNotFoundError, match="nope.json") as e:
        select_items(missing)
    assert "MURK_COCO_DIR" in str(e.value)


@pytest.mark.parametrize("key", ["images", "annotations", "categories"])
def test_missing_key_error(tmp_path, key):
    data = {"images": [], "annotations": [], "categories": []}
    del data[key]
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValueError, match=key) as e:
        select_items(f)
    assert "bad.json" in str(e.value)


def test_load_items_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="items.json"):
        load_items(tmp_path / "items.json")
