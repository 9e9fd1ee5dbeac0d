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
                    r = {k: np.nan for k in cube.READOUTS} | {k: "" for k in cube.TEXT_READOUTS}
                    # c_int: constant 0.9 on correct answers and 0.9 or 1.0 on wrong ones (a flat
                    # confidence that never crosses, and is a poor detector of errors)
                    r.update({"answer": 0.0, "correct": ok, "c_int": 0.9 if ok else float(rng.choice([0.9, 1.0])),
                              "verbal_conf": 0.9, "abstain": float(not ok and rng.random() < 0.5),
                              "abstain2": 0.0, "option_mass": 0.99, "verbal_text": "A Confidence: 90",
                              "top_token": "A"})
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


def test_scores_dataset_and_tables(analysed):
    root, out = analysed
    adir = paths.analysis_dir(root)
    sc = xr.open_dataset(adir / "scores.nc")
    assert list(sc["stat"].values) == ["point", "lo", "hi"]
    for var in ("mean", "ece", "auroc", "coverage", "risk", "v_cross_m", "w", "v_acc_blank_m", "confident_accuracy"):
        assert sc[var].dims[-1] == "stat", var
    ok = sc["mean"].sel(stat="point").notnull()
    lo, p, hi = (sc["mean"].sel(stat=k) for k in ("lo", "point", "hi"))
    assert ((lo <= p + 1e-12) & (p <= hi + 1e-12)).where(ok, True).all()
    # the flat c_int never crosses: W is a lower bound in the scores and the tables
    assert sc["w_lower_bound"].sel(arm=["fog", "underwater"], readout="c_int").all()
    # blank floor (0.25 here, the chance level) gives a V_acc close to the chance-floor one
    v = sc["v_cross_m"].sel(stat="point", arm="fog", task="t2", readout="correct")
    vb = sc["v_acc_blank_m"].sel(stat="point", arm="fog", task="t2")
    assert np.all(np.abs(np.log2(vb / v)) < 1.5)
    # confident errors: pooled over V <= 15.625 m of both arms, t2 -> 4 levels x 2 arms x 30 images
    assert (sc["confident_n"] == 4 * 2 * 30).all()
    # reliability: every answer of levels 1-8 of one arm counted once
    rel = sc["reliability_count"].sel(task="t2", confidence="c_int").sum("bin")
    assert (rel.sel(arm=["fog", "underwater"]) == 8 * 30).all() and (rel.sel(arm="blank") == 0).all()
    for name in report.TABLES:
        text = (adir / f"{name}.md").read_text(encoding="utf-8")
        assert text.startswith("|"), name
    assert "≥" in (adir / "tbl-crossings.md").read_text(encoding="utf-8")
    t4 = (adir / "tbl-end-of-sweep.md").read_text(encoding="utf-8")
    assert t4.count("\n") >= 2 + 2 * len(MODELS) - 1 and "ECE c_int" in t4
    t9 = (adir / "tbl-sweep-t2.md").read_text(encoding="utf-8")
    assert "1.953125" in t9 and "clean" in t9 and "–" in t9
    for name in report.FIGURES:
        for task in ("t2", "t3"):
            for ext in ("png", "pdf"):
                assert (paths.figures_dir(root) / f"{name}_{task}.{ext}").is_file(), (name, task, ext)


def test_new_numbers_keys(analysed):
    root, _ = analysed
    numbers = paper.load_numbers(paths.numbers_file(root))
    k = "org--synthetic-a"
    for key in (f"ece.c_int.end.fog.t2.{k}", f"ece.c_int.end.underwater.t2.{k}.ci",
                f"auroc.c_int.62.5.fog.t2.{k}", f"auroc.c_int.1.953125.underwater.t2.{k}.ci",
                f"confident.acc.{k}", f"confident.n.{k}", f"mono.correct.fog.t2.{k}",
                f"mono.abstain.fog.t3.{k}.sig", f"mono.c_int.underwater.t2.{k}.count",
                f"v.correct_blank.fog.t2.{k}", f"correct.7.8125.fog.t2.{k}", f"correct.clean.fog.t2.{k}",
                f"coverage.abstain.7.8125.fog.t2.{k}", f"risk.abstain2.clean.fog.t2.{k}.ci",
                "mono.pooled.raw", "mono.pooled.sig"):
        assert key in numbers, key
    assert numbers[f"confident.n.{k}"] == str(4 * 2 * 30)
    assert numbers[f"mono.c_int.fog.t2.{k}.count"].endswith("/8")
    assert report.level_label(float("inf")) == "clean" and report.level_label(1.953125) == "1.953125"
