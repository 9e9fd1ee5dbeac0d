"""Tests of murk.results on small synthetic cubes: pairing, determinism, hand-checked statistics."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from murk.results import _analysis as analysis
from murk.results import _bootstrap
from murk.results import _calibration
from murk.results import _cube as cube
from murk.results import _metrics as metrics
from murk.results import _selective

N = 40


def _cube(n_models: int = 2, n: int = N, seed: int = 0) -> xr.Dataset:
    """A cube with accuracy falling at ~12 m, varied confidences and a rising abstain rate."""
    rng = np.random.default_rng(seed)
    one = cube.empty_model_dataset(np.arange(1000, 1000 + n), ["car"] * n)
    ds = xr.concat([one] * n_models, dim="model").assign_coords(model=[f"org/m{k}" for k in range(n_models)])
    shape = ds["value"].shape[:-1]
    vis = ds["visibility_m"].sel(arm="fog").values
    p = np.broadcast_to(np.where(np.isinf(vis), 0.95, 0.25 + 0.7 / (1 + (12.0 / vis) ** 3))[None, None, :, None, None],
                        shape)
    val = np.full(ds["value"].shape, np.nan, dtype=np.float64)
    ro = list(ds["readout"].values)
    val[..., ro.index("correct")] = rng.random(shape) < p
    val[..., ro.index("c_int")] = np.round(np.clip(rng.normal(0.8, 0.15, shape), 0.25, 1.0), 2)
    val[..., ro.index("verbal_conf")] = np.round(np.clip(rng.normal(0.9, 0.1, shape), 0, 1), 1)
    val[..., ro.index("abstain")] = rng.random(shape) < 1 - p
    val[..., ro.index("abstain2")] = rng.random(shape) < 0.3
    arms = list(ds["arm"].values)
    for a in ("blank", "shuffled"):
        val[:, arms.index(a), 1:] = np.nan
        val[:, arms.index(a), 0, :, :, ro.index("correct")] = rng.random((n_models, *shape[3:])) < 0.3
    val[:, arms.index("imagenet_c"), 6:] = np.nan
    return ds.assign(value=(ds["value"].dims, val))


@pytest.fixture(scope="module")
def ds():
    return _cube()


@pytest.fixture(scope="module")
def res(ds):
    return analysis.analyse(ds, 200, 400, seed=3)


def test_question_scores_layout(ds):
    q, img = analysis.question_scores(ds, "t3")
    assert q.dims == ("model", "arm", "level", "unit", "readout") and q.sizes["unit"] == 2 * N
    np.testing.assert_array_equal(img, np.r_[np.arange(N), np.arange(N)])
    np.testing.assert_array_equal(q.isel(unit=N + 3).values,
                                  ds["value"].sel(task="t3_false").isel(image=3).values)
    with pytest.raises(ValueError):
        analysis.question_scores(ds, "t4")


def test_values_are_float64_and_unrounded(ds):
    s = analysis.image_scores(ds)
    assert s.dtype == np.float64
    v = s.sel(task="t2", readout="verbal_conf").values
    v = v[~np.isnan(v)]
    # k / 10 as built: exactly the float64 of the decimal, no rounding needed or done
    assert np.any(v == 0.7) and np.all(v[np.isclose(v, 0.7)] == 0.7)
    tiny = ds.copy(deep=True)
    tiny["value"][0, 0, 0, 0, 0, list(ds["readout"].values).index("c_int")] = 0.8999996
    got = float(analysis.image_scores(tiny).sel(model="org/m0", arm="fog", level=0, task="t2",
                                                readout="c_int").isel(image=0))
    assert got == 0.8999996


def test_two_runs_with_one_seed_agree_exactly(ds, res):
    again = analysis.analyse(ds, 200, 400, seed=3)
    xr.testing.assert_identical(res["scores"], again["scores"])
    other = analysis.analyse(ds, 200, 400, seed=4)
    assert not other["scores"]["mean"].sel(stat="lo").equals(res["scores"]["mean"].sel(stat="lo"))


def test_condition_means_match_explicit_resampling(ds, res):
    s = analysis.image_scores(ds)
    idx = _bootstrap.bootstrap_indices(N, 200, 3)
    x = s.sel(model="org/m0", arm="fog", level=5, task="t2", readout="correct").values
    boot = np.nanmean(x[idx], axis=-1)
    m = res["means"].sel(model="org/m0", arm="fog", level=5, task="t2", readout="correct")
    assert float(m["mean"]) == pytest.approx(np.nanmean(x))
    assert float(m["lo"]) == pytest.approx(np.percentile(boot, 2.5))
    assert float(m["hi"]) == pytest.approx(np.percentile(boot, 97.5))
    assert int(m["n"]) == N


def test_paired_resamples_shared_by_means_and_crossings(ds):
    # the crossing's 400 resamples start with the means' 200: one draw for everything
    c = _bootstrap.bootstrap_counts(N, 400, 3)
    np.testing.assert_array_equal(analysis.resample_counts(N, 200, 3), c[:200])


def test_crossings_against_kernel_and_w_bounds(ds, res):
    s = analysis.image_scores(ds)
    cr = res["crossings"]
    point = s.mean("image")
    for m in ds["model"].values:
        y = point.sel(model=m, arm="fog", task="t2", readout="correct").values
        v, c = metrics.crossing_visibility(ds["visibility_m"].sel(arm="fog").values[1:], y[1:], y[0], 0.25)
        assert float(cr["v_cross_m"].sel(model=m, arm="fog", task="t2", readout="correct")) == pytest.approx(float(v))
        # blank floor: the model's own blank-image accuracy
        fl = float(s.sel(model=m, arm="blank", level=0, task="t2", readout="correct").mean())
        vb, _ = metrics.crossing_visibility(ds["visibility_m"].sel(arm="fog").values[1:], y[1:], y[0], fl)
        assert float(cr["v_acc_blank_m"].sel(model=m, arm="fog", task="t2")) == pytest.approx(float(vb))
    # verbal confidence is flat: censored, W a lower bound with an interval
    w = cr.sel(arm="fog", task="t2", readout="verbal_conf")
    assert w["censored"].all() and w["w_lower_bound"].all() and not w["w_upper_bound"].any()
    np.testing.assert_allclose(w["w"], np.log10(cr["v_cross_m"].sel(arm="fog", task="t2", readout="correct")
                                                / metrics.CENSOR_M))
    assert (w["w_lo"] <= w["w"] + 1e-12).all() and (w["w"] <= w["w_hi"] + 1e-12).all()


def test_w_upper_bound_and_both_censored():
    s = analysis.image_scores(_cube(1, 20, seed=1))
    # accuracy that never falls: V_acc censored -> W of a crossing awareness signal is an upper bound
    s.loc[dict(readout="correct")] = xr.where(s.sel(readout="correct").notnull(), 1.0, np.nan)
    s.loc[dict(level=0, readout="correct")] = 1.0
    ab = s.sel(readout="abstain").copy()
    ab[:] = np.nan
    ab.loc[dict(arm=["fog", "underwater"])] = (s["level"] >= 4).astype(float)
    s.loc[dict(readout="abstain")] = ab
    s.loc[dict(arm=["fog", "underwater"], level=0, readout="correct")] = 1.0
    s.loc[dict(arm=["fog", "underwater"], readout="correct")] = 0.99
    s.loc[dict(arm=["fog", "underwater"], level=0, readout="correct")] = 1.0
    cr = analysis.crossing_table(s, 50, 0)
    c = cr.sel(model="org/m0", arm="fog", task="t2")
    assert bool(c["censored"].sel(readout="correct"))
    assert bool(c["w_upper_bound"].sel(readout="abstain")) and not bool(c["w_lower_bound"].sel(readout="abstain"))
    # abstain2 random around 0.3, c_int flat: both censored with accuracy -> W undefined
    assert np.isnan(float(c["w"].sel(readout="c_int")))


def test_confidence_scores_match_kernels(ds, res):
    q, img = analysis.question_scores(ds, "t3")
    conf = q.sel(model="org/m1", arm="underwater", level=6, readout="c_int").values
    corr = q.sel(model="org/m1", arm="underwater", level=6, readout="correct").values
    cs = res["confidence"].sel(model="org/m1", arm="underwater", level=6, task="t3", confidence="c_int")
    assert float(cs["ece"]) == pytest.approx(float(_calibration.expected_calibration_error(conf, corr)))
    assert float(cs["auroc"]) == pytest.approx(float(_selective.auroc(conf, corr)))
    assert int(cs["n_answers"]) == 2 * N
    # the interval resamples images: both questions of an image together
    counts = _bootstrap.bootstrap_counts(N, 200, 3)[:, img]
    lo, hi = _bootstrap.percentile_interval(_selective.resampled_auroc(conf, corr, counts), 0.95)
    assert float(cs["auroc_lo"]) == pytest.approx(float(lo)) and float(cs["auroc_hi"]) == pytest.approx(float(hi))


def test_selective_abstain_matches_kernel(ds, res):
    v = ds["value"].sel(model="org/m0", arm="fog", level=7, task="t2")
    cov, risk = _selective.selective_risk_coverage(v.sel(readout="abstain").values, v.sel(readout="correct").values)
    sel = res["selective"].sel(model="org/m0", arm="fog", level=7, task="t2", option="abstain")
    assert float(sel["coverage"]) == pytest.approx(float(cov)) and float(sel["risk"]) == pytest.approx(float(risk))
    assert float(sel["risk_lo"]) <= float(sel["risk"]) <= float(sel["risk_hi"])


def test_confident_errors_hand_count(ds, res):
    v = ds["value"].sel(model="org/m0", arm=["fog", "underwater"], level=[5, 6, 7, 8], task="t2")
    c, k = v.sel(readout="c_int").values, v.sel(readout="correct").values
    mask = c >= 0.9
    ce = res["confident"].sel(model="org/m0")
    assert int(ce["n"]) == mask.sum()
    assert float(ce["accuracy"]) == pytest.approx(k[mask].mean())
    assert float(ce["accuracy_lo"]) <= float(ce["accuracy"]) <= float(ce["accuracy_hi"])


def test_monotonicity_table(ds, res):
    mono = res["monotonicity"]
    assert list(mono["arm"].values) == ["fog", "underwater", "imagenet_c"]
    assert (mono["n_pairs"].sel(arm="fog") == 8).all() and (mono["n_pairs"].sel(arm="imagenet_c") == 5).all()
    s = analysis.image_scores(ds).sel(model="org/m1", arm="fog", task="t3", readout="abstain")
    raw, sig, k = metrics.monotonicity(s.transpose("level", "image").values, +1)
    m = mono.sel(model="org/m1", arm="fog", task="t3", readout="abstain")
    assert float(m["raw"]) == float(raw) and float(m["beyond_noise"]) == float(sig)
    assert int(m["n_wrong"]) == round(float(raw) * 8)


def test_reliability_table(ds, res):
    rel = res["reliability"]
    assert rel.sizes["bin"] == 10
    cnt = rel["count"].sel(task="t3", confidence="c_int").sum("bin")
    assert (cnt == 8 * 2 * N).all()


def test_scores_dataset_stat_layout(res):
    sc = res["scores"]
    assert list(sc["stat"].values) == list(analysis.STATS)
    assert sc["mean"].dims == ("model", "arm", "level", "task", "readout", "stat")
    assert sc["w"].dims == ("model", "arm", "task", "readout", "stat")
    # arms without crossings are NaN / False
    assert sc["v_cross_m"].sel(arm="blank").isnull().all() and not sc["censored"].sel(arm="blank").any()
    xr.testing.assert_equal(sc["ece"].sel(stat="point", drop=True), res["confidence"]["ece"])


# ----------------------------------------------------------------------------- issue 13: precision, bounds


def _cube_through_the_store(tmp_path, c_int, correct):
    """A one-model cube written image by image with murk.results and merged: c_int/correct at fog level 1, t2."""
    n = len(c_int)
    store = tmp_path / "m.zarr"
    attrs = {"config_hash": "c", "items_hash": "i", "model_id": "m", "depth_backend": "constant-13.8m"}
    cube.open_readout_store(store, list(range(1, n + 1)), ["car"] * n, attrs)
    for i in range(n):
        r = {k: np.nan for k in cube.READOUTS} | {k: "" for k in cube.TEXT_READOUTS}
        results = {("clean", 0, t): dict(r) for t in cube.TASKS}
        results[("fog", 1, "t2")] = r | {"c_int": float(c_int[i]), "correct": float(correct[i])}
        cube.write_image(store, i, results)
    return cube.merge_models({"m": store}, tmp_path / "cube.zarr")


def test_the_cube_keeps_float64_and_the_analysis_does_not_round(tmp_path):
    """Issue 13: float32 plus rounding to 6 decimals moved 0.9000004 onto the ECE edge 0.9 (ECE 0.475 -> 0.375) and
    tied 0.9999999 with 0.9999996 (AUROC 1.0 -> 0.5). Written through the store, both survive exactly."""
    c = np.array([0.9000004, 0.85, 0.9999999, 0.9999996])
    k = np.array([1.0, 0.0, 1.0, 0.0])
    ds = _cube_through_the_store(tmp_path, c, k)
    assert ds["value"].dtype == np.float64
    stored = cube.open_cube(tmp_path / "cube.zarr")["value"].sel(model="m", arm="fog", level=1, task="t2",
                                                                readout="c_int").values
    np.testing.assert_array_equal(stored, c)  # bit-exact
    q, _ = analysis.question_scores(ds, "t2")
    np.testing.assert_array_equal(q.sel(arm="fog", level=1, readout="c_int").values[0], c)
    cs = analysis.confidence_scores(ds, n_resamples=20).sel(model="m", arm="fog", level=1, task="t2",
                                                            confidence="c_int")
    exact = float(_calibration.expected_calibration_error(c, k))
    assert float(cs["ece"]) == exact
    # the ECE case: bins (0.8, 0.9] {0.85: wrong} and (0.9, 1.0] {0.9000004, 0.9999999 right; 0.9999996 wrong}
    assert exact == pytest.approx((0.85 + abs(2 - (0.9000004 + 0.9999999 + 0.9999996))) / 4)
    two = analysis.confidence_scores(_cube_through_the_store(tmp_path / "b", c[:2], k[:2]), n_resamples=20)
    assert float(two["ece"].sel(model="m", arm="fog", level=1, task="t2", confidence="c_int")) == pytest.approx(
        (0.0999996 + 0.85) / 2)  # 0.475
    assert float(_calibration.expected_calibration_error(np.round(c[:2].astype(np.float32), 6), k[:2])) == 0.375
    sat = analysis.confidence_scores(_cube_through_the_store(tmp_path / "c", c[2:], k[2:]), n_resamples=20)
    assert float(sat["auroc"].sel(model="m", arm="fog", level=1, task="t2", confidence="c_int")) == 1.0  # was 0.5


def test_crossing_at_the_first_level_is_a_bound_from_below():
    s = analysis.image_scores(_cube(1, 20, seed=2))
    # accuracy already at chance at 250 m: V_acc >= 250 m; abstain crosses in the sweep -> W >= log10(250 / V)
    s.loc[dict(arm=["fog", "underwater"], readout="correct")] = 0.25
    s.loc[dict(arm=["fog", "underwater"], level=0, readout="correct")] = 1.0
    ab = s.sel(readout="abstain").copy()
    ab.loc[dict(arm=["fog", "underwater"])] = (s["level"] >= 5).astype(float)
    s.loc[dict(readout="abstain")] = ab
    cr = analysis.crossing_table(s, 50, 0).sel(model="org/m0", arm="fog", task="t2")
    assert str(cr["censored_side"].sel(readout="correct").values) == "above"
    assert float(cr["v_cross_m"].sel(readout="correct")) == 250.0 and not bool(cr["censored"].sel(readout="correct"))
    assert str(cr["w_censored_side"].sel(readout="abstain").values) == "above"
    assert bool(cr["w_lower_bound"].sel(readout="abstain")) and not bool(cr["w_upper_bound"].sel(readout="abstain"))
    from murk import report
    assert report.fmt_crossing(float(cr["v_cross_m"].sel(readout="correct")),
                              str(cr["censored_side"].sel(readout="correct").values), 1) == "≥ 250"


def test_both_censored_w_prints_no_interval():
    s = analysis.image_scores(_cube(1, 20, seed=1))
    s.loc[dict(arm=["fog", "underwater"], readout="correct")] = 0.99
    s.loc[dict(arm=["fog", "underwater"], level=0, readout="correct")] = 1.0
    cr = analysis.crossing_table(s, 50, 0).sel(model="org/m0", arm="fog", task="t2", readout="c_int")
    assert str(cr["w_censored_side"].values) == "undefined"
    assert np.isnan(float(cr["w"])) and np.isnan(float(cr["w_lo"])) and np.isnan(float(cr["w_hi"]))
    from murk import report
    assert report.fmt_estimate(float(cr["w"]), float(cr["w_lo"]), float(cr["w_hi"]),
                              str(cr["w_censored_side"].values)) == "n/a"


def _subset_cube(n_sub: int = 25) -> tuple[xr.Dataset, xr.Dataset]:
    """A three-model cube whose last model was run on the first ``n_sub`` images only (``NOT_RUN`` after),
    and that model's images alone (the cube of its store)."""
    full = _cube(n_models=3, seed=5)
    m = str(full["model"].values[-1])
    run = np.arange(full.sizes["image"]) < n_sub
    value = full["value"].copy()
    value.loc[dict(model=m)] = value.sel(model=m).where(xr.DataArray(run, dims="image"))
    reason = xr.DataArray(np.full((3, full.sizes["image"]), "", dtype=object), dims=("model", "image"))
    reason[-1, ~run] = cube.NOT_RUN
    merged = full.assign(value=value, missing_reason=reason)
    alone = full.sel(model=[m]).isel(image=slice(0, n_sub)).assign(
        missing_reason=(("model", "image"), np.full((1, n_sub), "", dtype=object)))
    return merged, alone


def test_image_groups_and_common_images():
    merged, _ = _subset_cube(25)
    groups = analysis.image_groups(merged)
    assert [g[0] for g in groups] == [["org/m0", "org/m1"], ["org/m2"]]
    assert groups[0][1].all() and groups[1][1].sum() == 25 and groups[1][1][:25].all()
    np.testing.assert_array_equal(analysis.common_images(merged, ["org/m0", "org/m2"]), groups[1][1])
    assert analysis.common_images(merged, "org/m1").all()


def test_a_subset_model_is_analysed_on_its_own_images():
    """Point estimates and intervals of a model run on the first 25 of 40 images equal those of its 25 images
    analysed alone; the models run on all images are unchanged by its presence."""
    merged, alone = _subset_cube(25)
    res = analysis.analyse(merged, 200, 400, seed=3)["scores"]
    ref = analysis.analyse(alone, 200, 400, seed=3)["scores"]
    whole = analysis.analyse(merged.sel(model=["org/m0", "org/m1"]), 200, 400, seed=3)["scores"]
    assert list(res["model"].values) == ["org/m0", "org/m1", "org/m2"]
    for var in ("mean", "n", "v_cross_m", "w", "ece", "auroc", "coverage", "risk", "confident_accuracy",
                "mono_raw", "reliability_count", "censored_side", "w_censored_side"):
        own, other = res[var].sel(model=["org/m2"]), res[var].sel(model=["org/m0", "org/m1"])
        assert own.dims == ref[var].dims and other.dims == whole[var].dims
        if own.dtype.kind in "fc":   # equal up to the rounding of another memory layout
            np.testing.assert_allclose(own.values, ref[var].values, rtol=1e-12, atol=1e-14)
        else:
            np.testing.assert_array_equal(own.values, ref[var].values)
        xr.testing.assert_identical(other, whole[var])
    # n counts the model's own images, and its intervals are not those of a 40-image draw
    assert int(res["n"].sel(model="org/m2", arm="fog", level=1, task="t2", readout="correct")) == 25
    assert np.isfinite(res["mean"].sel(model="org/m2", stat="lo")).any()
