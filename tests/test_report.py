"""Analyse stage and paper on a synthetic cube with known curves (no VLM needed)."""

import json

import numpy as np
import pytest
import xarray as xr

from murk import cube, items, paper, paths, physics, report

MODELS = ["org/synthetic-a", "murk-tiny/synthetic-b"]


def _curve(level: int, v_half: float) -> float:
    """Accuracy that falls from 1 (clean) to 0.25 with its midway at ``v_half`` metres."""
    if level == 0:
        return 1.0
    v = physics.SWEEP_M[level - 1]
    return 0.25 + 0.75 / (1 + (v_half / v) ** 4)


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    root = tmp_path_factory.mktemp("out")
    n = 30
    ids = list(range(100, 100 + n))
    table = items.pd.DataFrame({"image_id": ids, "category": ["car"] * n})
    (root / "items.json").write_text("[]")
    (root / "items_meta.json").write_text(json.dumps({"config_hash": "c" * 64, "items_hash": "i" * 64,
                                                      "seed": 1, "n_items_requested": n}))
    rng = np.random.default_rng(0)
    for k, model in enumerate(MODELS):
        store = paths.readout_store(model, root)
        cube.open_readout_store(store, table["image_id"], table["category"], {
            "config_hash": "c" * 64, "items_hash": "i" * 64, "model_id": model, "model_revision": "r",
            "depth_backend": "constant-13.8m", "depth_approximate": 1, "pipeline_check": k,
            "n_visual_tokens": 64})
        for i in range(n):
            res = {}
            for arm, lvl in cube.CONDITIONS:
                for task in cube.TASKS:
                    p_acc = {"clean": 1.0, "blank": 0.25, "shuffled": 0.25}.get(arm) or (
                        _curve(lvl, 12.0 if arm == "fog" else 25.0) if arm != "imagenet_c" else 0.97)
                    ok = float(rng.random() < p_acc)
                    r = {"answer": 0.0, "correct": ok, "c_int": 0.9, "verbal_conf": 0.9, "abstain": 0.0,
                         "abstain2": 0.0, "option_mass": 0.99, "verbal_text": "A Confidence: 90", "top_token": "A"}
                    res[(arm, lvl, task)] = r
            cube.write_image(store, i, res)
    out = report.stage_analyse(MODELS, output_dir=root)
    return root, out


def test_crossings_recover_the_synthetic_midway(analysed):
    _, out = analysed
    c = out["crossings"]
    v_fog = c["v_cross_m"].sel(arm="fog", task="t2", readout="correct").values
    v_uw = c["v_cross_m"].sel(arm="underwater", task="t2", readout="correct").values
    # midway of 1 and 0.25 is reached at 12 m (fog) and 25 m (underwater), up to sampling noise
    assert np.all((v_fog > 6) & (v_fog < 24)), v_fog
    assert np.all((v_uw > 12) & (v_uw < 50)), v_uw
    # a constant confidence never reaches its midway: censored, W is a lower bound
    assert c["censored"].sel(readout="c_int").all()
    assert c["w_lower_bound"].sel(readout="c_int").all()
    w = c["w"].sel(arm="fog", task="t2", readout="c_int").values
    np.testing.assert_allclose(w, np.log10(v_fog / physics.SWEEP_M[-1]))
    assert (c["v_lo_m"] <= c["v_hi_m"]).sel(readout="correct").all()


def test_means_have_intervals(analysed):
    _, out = analysed
    m = out["means"]
    ok = m["mean"].notnull()
    assert ((m["lo"] <= m["mean"] + 1e-12) & (m["mean"] <= m["hi"] + 1e-12)).where(ok, True).all()
    assert float(m["mean"].sel(model=MODELS[0], arm="fog", level=0, task="t2", readout="correct")) == 1.0


def test_numbers_figures_and_paper(analysed):
    root, out = analysed
    numbers = paper.load_numbers(paths.numbers_file(root))
    assert numbers["w.c_int.fog.t2.org--synthetic-a"].startswith("≥ ")
    assert "Pipeline check" in numbers["pipeline_check_note"]
    for files in out["figures"].values():
        assert all(f.is_file() and f.stat().st_size > 1000 for f in files)
    res = paper.render_paper(output_dir=root, pdf=True)
    html = res["html"].read_text(encoding="utf-8")
    assert "`{python}" not in html and "{{<" not in html
    assert numbers["range.v.correct.fog.t2"] in html
    assert "Figure 1" in html and "Table 1" in html and "?" not in numbers["config_hash"]
    assert res["pdf"].read_bytes()[:4] == b"%PDF"
