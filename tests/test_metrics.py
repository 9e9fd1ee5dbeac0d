"""Tests of murk.results: reference values, n-dimensional input, NaN handling."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from sklearn.calibration import calibration_curve
from sklearn.metrics import roc_auc_score

from murk.core import load_config
from murk.results._bootstrap import _bootstrap_mean
from murk.results._calibration import _abstain_rate, _mean_confidence
from murk.results._metrics import _crossing_visibility_da
from murk.results._selective import _risk_coverage
from murk.results import (
    CENSOR_M,
    accuracy,
    auroc,
    blind_spot_width,
    bootstrap_indices,
    bootstrap_resample_means,
    crossing_visibility,
    expected_calibration_error,
    bootstrap_counts,
    counts_from_indices,
    monotonicity,
    monotonicity_da,
    percentile_interval,
    reliability_bins,
    resampled_auroc,
    resampled_ece,
    resampled_means,
    selective_risk_coverage,
    coverage_risk_of_sums,
    expected_risk_coverage,
    aurc,
    excess_aurc,
    coverage_at_risk,
    resampled_aurc,
    resampled_coverage_at_risk,
)

SWEEP = np.array([250.0, 125.0, 62.5, 31.25, 15.625, 7.8125, 3.90625, 1.953125])


# ----------------------------------------------------------------------------- bootstrap


def test_bootstrap_indices_shape_and_determinism():
    idx = bootstrap_indices(7, 5, seed=0)
    assert idx.shape == (5, 7) and idx.dtype == np.int64
    assert idx.min() >= 0 and idx.max() < 7
    np.testing.assert_array_equal(idx, np.random.default_rng(0).integers(0, 7, size=(5, 7)))
    np.testing.assert_array_equal(idx, bootstrap_indices(7, 5, seed=0))
    with pytest.raises(ValueError):
        bootstrap_indices(0, 5, 0)


def test_resample_means_equal_fancy_index_nanmean():
    rng = np.random.default_rng(3)
    x = rng.random((2, 3, 20))
    x[0, 1, [2, 5, 7]] = np.nan
    x[1, 2, :] = np.nan  # an all-missing series
    da = xr.DataArray(x, dims=("model", "level", "image"), coords={"image": np.arange(100, 120)})
    idx = bootstrap_indices(20, 50, seed=1)
    res = bootstrap_resample_means(da, "image", idx)
    assert res.dims == ("model", "level", "bootstrap") and res.sizes["bootstrap"] == 50
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
        ref = np.nanmean(x[..., idx], axis=-1)
    np.testing.assert_allclose(res.values, ref, rtol=1e-12, equal_nan=True)
    assert np.isnan(res.values[1, 2]).all()


def test_bootstrap_mean_values_and_pairing():
    rng = np.random.default_rng(0)
    x = (rng.random((2, 40)) < [[0.8], [0.5]]).astype(float)
    x[0, 3] = np.nan
    da = xr.DataArray(x, dims=("task", "image"), coords={"task": ["t2", "t3"]})
    cfg = load_config()["analysis"]
    ds = _bootstrap_mean(da, "image", n_resamples=cfg["bootstrap_resamples"], seed=cfg["bootstrap_seed"],
                        ci=cfg["ci_level"])
    assert set(ds.data_vars) == {"mean", "lo", "hi"}
    np.testing.assert_allclose(ds["mean"].values, np.nanmean(x, axis=-1))
    idx = bootstrap_indices(40, 1000, 0)
    means = np.nanmean(x[..., idx], axis=-1)
    np.testing.assert_allclose(ds["lo"].values, np.percentile(means, 2.5, axis=-1))
    np.testing.assert_allclose(ds["hi"].values, np.percentile(means, 97.5, axis=-1))
    assert (ds["lo"] <= ds["mean"]).all() and (ds["mean"] <= ds["hi"]).all()
    assert list(ds["task"].values) == ["t2", "t3"]
    # explicit indices reproduce the seeded draw (paired use)
    ds2 = _bootstrap_mean(da, indices=idx)
    xr.testing.assert_allclose(ds[["lo", "hi"]], ds2[["lo", "hi"]])
    with pytest.raises(ValueError):
        _bootstrap_mean(da, ci=1.5)
    with pytest.raises(ValueError):
        bootstrap_resample_means(da, "image", bootstrap_indices(39, 10, 0))


# ----------------------------------------------------------------------------- crossing


def test_crossing_between_two_levels_is_log_interpolated():
    # a0 = 1, floor = 0.25 -> m = 0.625; crosses between 15.625 m (0.9) and 7.8125 m (0.5)
    y = np.array([1.0, 1.0, 0.98, 0.95, 0.9, 0.5, 0.3, 0.25])
    v, c = crossing_visibility(SWEEP, y, 1.0, 0.25)
    t = (0.625 - 0.9) / (0.5 - 0.9)
    expected = np.exp(np.log(15.625) + t * (np.log(7.8125) - np.log(15.625)))
    assert v.shape == () and not c
    assert float(v) == pytest.approx(expected, rel=1e-12)
    assert float(v) == pytest.approx(15.625 * 2 ** (-t), rel=1e-12)


def test_crossing_exactly_at_a_level():
    y = np.array([1.0, 0.9, 0.625, 0.3])
    v, c = crossing_visibility(SWEEP[:4], y, 1.0, 0.25)
    assert float(v) == pytest.approx(62.5) and not c


def test_never_crossing_is_censored():
    y = np.full(8, 0.95)  # a confidence that stays high
    v, c = crossing_visibility(SWEEP, y, 0.99, 0.25)
    assert float(v) == CENSOR_M == 1.953125 and bool(c)
    v, c = crossing_visibility(SWEEP, y, 0.99, 0.25, censor_m=1.0)
    assert float(v) == 1.0 and bool(c)


def test_already_reached_at_first_level():
    y = np.array([0.4, 0.3, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25])
    v, c = crossing_visibility(SWEEP, y, 0.9, 0.25)
    assert float(v) == 250.0 and not c


def test_rising_abstain_signal_with_floor_one():
    # abstain rate: a0 = 0.1, floor 1 -> m = 0.55; crosses between 31.25 (0.2) and 15.625 (0.8)
    y = np.array([0.1, 0.1, 0.15, 0.2, 0.8, 0.95, 1.0, 1.0])
    v, c = crossing_visibility(SWEEP, y, 0.1, 1.0)
    t = (0.55 - 0.2) / (0.8 - 0.2)
    assert float(v) == pytest.approx(31.25 * 2 ** (-t), rel=1e-12) and not c


def test_no_signal_gives_nan():
    v, c = crossing_visibility(SWEEP, np.full(8, 0.25), 0.25, 0.25)
    assert np.isnan(v) and not c


def test_crossing_nd_matches_1d_and_broadcasts():
    rng = np.random.default_rng(5)
    y = np.sort(rng.random((3, 4, 8)), axis=-1)[..., ::-1]  # falling curves
    a0 = rng.uniform(0.9, 1.0, size=(3, 4))
    v, c = crossing_visibility(SWEEP, y, a0, 0.25)
    assert v.shape == (3, 4) and c.shape == (3, 4) and c.dtype == bool
    for i in range(3):
        for j in range(4):
            vij, cij = crossing_visibility(SWEEP, y[i, j], a0[i, j], 0.25)
            assert v[i, j] == vij and c[i, j] == cij
    # per-task floors broadcast along a leading axis
    floors = np.array([0.25, 0.5, 0.25])[:, None]
    v2, _ = crossing_visibility(SWEEP, y, a0, floors)
    assert v2.shape == (3, 4)


def test_crossing_nan_handling():
    y = np.array(
        [
            [1.0, 1.0, np.nan, 0.9, 0.5, 0.3, 0.25, 0.25],  # NaN before: ignored
            [1.0, 1.0, 0.9, np.nan, 0.5, 0.3, 0.25, 0.25],  # NaN just before k: last valid level used
            [np.nan, np.nan, 0.5, 0.3, 0.25, 0.25, 0.25, 0.25],  # nothing before k: V[k]
            [1.0, 1.0, 1.0, 1.0, np.nan, np.nan, np.nan, np.nan],  # never reached: censored
            [1.0, 0.9, 0.5, 0.3, 0.25, 0.25, 0.25, 0.25],  # a0 NaN
        ]
    )
    a0 = np.array([1.0, 1.0, 1.0, 1.0, np.nan])
    v, c = crossing_visibility(SWEEP, y, a0, 0.25)
    t = (0.625 - 0.9) / (0.5 - 0.9)
    assert v[0] == pytest.approx(31.25 * 2 ** (-t))
    # between 62.5 (0.9) and 15.625 (0.5): two octaves
    assert v[1] == pytest.approx(62.5 * 4 ** (-t))
    assert v[2] == 62.5 and not c[2]
    assert v[3] == CENSOR_M and c[3]
    assert np.isnan(v[4]) and not c[4]


def test_crossing_input_errors():
    with pytest.raises(ValueError, match="decreasing"):
        crossing_visibility(SWEEP[::-1], np.ones(8), 1.0, 0.25)
    with pytest.raises(ValueError, match="last axis"):
        crossing_visibility(SWEEP, np.ones(7), 1.0, 0.25)


def test_crossing_xarray_wrapper():
    y = np.array([[1.0, 1.0, 0.98, 0.95, 0.9, 0.5, 0.3, 0.25], np.full(8, 0.95)])
    da = xr.DataArray(y, dims=("signal", "visibility_m"),
                      coords={"signal": ["acc", "c_int"], "visibility_m": SWEEP})
    ds = _crossing_visibility_da(da[:, ::-1], xr.DataArray([1.0, 0.99], dims="signal"), 0.25)
    ref_v, ref_c = crossing_visibility(SWEEP, y, np.array([1.0, 0.99]), 0.25)
    np.testing.assert_allclose(ds["v_cross_m"].values, ref_v)
    np.testing.assert_array_equal(ds["censored"].values, ref_c)
    assert ds["v_cross_m"].attrs["units"] == "m"


def test_blind_spot_width():
    assert float(blind_spot_width(12.4, 1.953125)) == pytest.approx(np.log10(12.4 / 1.953125))
    # spec Sec. IV: W >= 0.80 decades is a factor >= 10**0.8 = 6.3 in visibility
    w = blind_spot_width(np.array([[10.0, 1.0], [np.nan, 5.0]]), np.array([1.0, 10.0]))
    np.testing.assert_allclose(w, [[1.0, -1.0], [np.nan, np.log10(0.5)]])
    assert float(blind_spot_width(7.0, 7.0)) == 0.0
    with pytest.raises(ValueError):
        blind_spot_width(0.0, 1.0)


# ----------------------------------------------------------------------------- accuracy, ECE, AUROC


def test_accuracy():
    c = np.array([[1, 0, 1, 1], [0, 0, np.nan, 1]], dtype=float)
    np.testing.assert_allclose(accuracy(c), [0.75, 1 / 3])
    da = xr.DataArray(c, dims=("task", "image"))
    np.testing.assert_allclose(accuracy(da, "image").values, [0.75, 1 / 3])
    assert np.isnan(accuracy(np.array([np.nan, np.nan])))
    assert float(accuracy(np.array([True, False, True, True]))) == 0.75


def test_ece_hand_computation():
    conf = np.array([0.95, 0.95, 0.85, 0.3, 0.0, 1.0, 0.65])
    corr = np.array([1, 0, 1, 0, 0, 1, 1])
    # bins: 9 -> {0.95, 0.95, 1.0} acc 2/3 conf 2.9/3; 8 -> {0.85} acc 1;
    #       3 -> {0.3} acc 0; 0 -> {0.0} acc 0; 6 -> {0.65} acc 1
    expected = (abs(2 - 2.9) + abs(1 - 0.85) + abs(0 - 0.3) + 0 + abs(1 - 0.65)) / 7
    assert float(expected_calibration_error(conf, corr)) == pytest.approx(expected)
    # perfectly calibrated in every bin -> 0; one bin edge case 0.3 goes up
    assert float(expected_calibration_error([1.0, 1.0, 0.0], [1, 1, 0])) == 0.0


def test_ece_against_sklearn_calibration_curve():
    rng = np.random.default_rng(11)
    conf = rng.random(500)
    conf = conf[np.abs(conf * 10 - np.round(conf * 10)) > 1e-9]  # no inner bin edges
    corr = (rng.random(conf.size) < conf**2).astype(float)
    prob_true, prob_pred = calibration_curve(corr, conf, n_bins=10, strategy="uniform")
    counts = np.histogram(conf, bins=np.linspace(0, 1, 11))[0]
    counts = counts[counts > 0]
    ref = np.sum(counts / conf.size * np.abs(prob_true - prob_pred))
    assert float(expected_calibration_error(conf, corr)) == pytest.approx(ref, rel=1e-12)


def test_ece_nd_nan_and_xarray():
    rng = np.random.default_rng(2)
    conf = rng.random((3, 50))
    corr = (rng.random((3, 50)) < 0.6).astype(float)
    corr[1, :10] = np.nan
    conf[2, 5] = np.nan
    out = expected_calibration_error(conf, corr)
    assert out.shape == (3,)
    for i in range(3):
        keep = ~(np.isnan(conf[i]) | np.isnan(corr[i]))
        assert out[i] == pytest.approx(float(expected_calibration_error(conf[i][keep], corr[i][keep])))
    da_conf = xr.DataArray(conf.reshape(3, 10, 5), dims=("model", "image", "question"))
    da_corr = xr.DataArray(corr.reshape(3, 10, 5), dims=("model", "image", "question"))
    pooled = expected_calibration_error(da_conf, da_corr, dim=["image", "question"])
    assert pooled.dims == ("model",)
    np.testing.assert_allclose(pooled.values, out)
    assert np.isnan(expected_calibration_error([np.nan], [1.0]))
    with pytest.raises(ValueError):
        expected_calibration_error([1.2], [1])


def test_auroc_against_sklearn_with_ties():
    rng = np.random.default_rng(4)
    conf = np.round(rng.random(200), 1)  # many ties
    corr = (rng.random(200) < conf).astype(int)
    assert float(auroc(conf, corr)) == pytest.approx(roc_auc_score(corr, conf), rel=1e-12)
    assert float(auroc([0.2, 0.8, 0.5, 0.5], [0, 1, 1, 0])) == pytest.approx(0.875)


def test_auroc_nd_nan_and_single_class():
    rng = np.random.default_rng(8)
    conf = rng.random((2, 3, 60))
    corr = (rng.random((2, 3, 60)) < conf).astype(float)
    corr[0, 0, :7] = np.nan
    conf[1, 2, 10:20] = np.nan
    out = auroc(conf, corr)
    assert out.shape == (2, 3)
    for i in range(2):
        for j in range(3):
            keep = ~(np.isnan(conf[i, j]) | np.isnan(corr[i, j]))
            assert out[i, j] == pytest.approx(roc_auc_score(corr[i, j][keep], conf[i, j][keep]))
    assert np.isnan(auroc([0.1, 0.9, 0.5], [1, 1, 1]))
    da = xr.DataArray(conf, dims=("model", "level", "image"))
    dc = xr.DataArray(corr, dims=("model", "level", "image"))
    np.testing.assert_allclose(auroc(da, dc, dim="image").values, out)



# ----------------------------------------------------------------------------- spec Sec. IV, quoted crossings


def _spec_series(clean, v62, v15, v7, v3):
    """The spec's quoted series on the 8 sweep levels; a level not quoted takes the value of the
    nearest clearer quoted level (clean for 250 and 125 m, 62.5 m for 31.25 m, 3.9 m for 1.95 m)."""
    return np.array([clean, clean, v62, v62, v15, v7, v3, v3])


def test_spec_qwen2b_fog_crossing_12_4_m():
    # spec Sec. IV: Qwen-2B 0.99 clean, 0.97 at 62.5 m, 0.74 at 15.6, 0.38 at 7.8, 0.25 at 3.9 m (chance 0.25)
    v, c = crossing_visibility(SWEEP, _spec_series(0.99, 0.97, 0.74, 0.38, 0.25), 0.99, 0.25)
    assert not c and float(v) == pytest.approx(12.4, abs=0.05)


def test_spec_intern2b_fog_crossing_14_1_m():
    # spec Sec. IV: Intern-2B 0.98, 0.95, 0.67, 0.31, 0.24 -> V_acc = 14.1 m (the floor is chance, 0.25)
    v, c = crossing_visibility(SWEEP, _spec_series(0.98, 0.95, 0.67, 0.31, 0.24), 0.98, 0.25)
    assert not c and float(v) == pytest.approx(14.1, abs=0.1)


def test_spec_censored_confidence_gives_lower_bound_w():
    # a confidence that stays above its midway (spec: c_int 0.81 at 1.95 m, clean ~0.99)
    acc_v, _ = crossing_visibility(SWEEP, _spec_series(0.99, 0.97, 0.74, 0.38, 0.25), 0.99, 0.25)
    conf = np.array([0.99, 0.99, 0.98, 0.97, 0.93, 0.88, 0.83, 0.81])
    v, c = crossing_visibility(SWEEP, conf, 0.99, 0.25)
    assert bool(c) and float(v) == 1.953125
    w = blind_spot_width(acc_v, v)
    # W >= log10(12.4 / 1.953125) = 0.80, the spec's "W >= 0.80 decades in fog" for Qwen-2B
    assert float(w) == pytest.approx(0.80, abs=0.005)


# ----------------------------------------------------------------------------- paired bootstrap


def test_bootstrap_counts_match_indices_and_prefix():
    idx = bootstrap_indices(50, 200, 3)
    cnt = bootstrap_counts(50, 200, 3)
    assert cnt.shape == (200, 50) and cnt.dtype == np.float64
    np.testing.assert_array_equal(cnt.sum(axis=1), 50)
    np.testing.assert_array_equal(cnt, counts_from_indices(idx, 50))
    for b in (0, 17, 199):
        np.testing.assert_array_equal(cnt[b], np.bincount(idx[b], minlength=50))
    # the 1000 per-condition resamples are the first 1000 of the 2000 crossing resamples
    np.testing.assert_array_equal(bootstrap_counts(50, 2000, 3)[:1000], bootstrap_counts(50, 1000, 3))
    with pytest.raises(ValueError):
        counts_from_indices(np.array([[0, 5]]), 3)


def test_two_bootstrap_runs_with_one_seed_agree_exactly():
    rng = np.random.default_rng(1)
    x = rng.random((3, 4, 100))
    x[0, 1, :20] = np.nan
    a = resampled_means(x, bootstrap_counts(100, 1000, 7))
    b = resampled_means(x, bootstrap_counts(100, 1000, 7))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, resampled_means(x, bootstrap_counts(100, 1000, 8)))
    # and equal the explicit resampling loop
    idx = bootstrap_indices(100, 1000, 7)
    np.testing.assert_allclose(a, np.nanmean(x[..., idx], axis=-1), rtol=1e-12)


def test_percentile_interval():
    r = np.arange(101, dtype=float)
    lo, hi = percentile_interval(r, 0.9)
    assert lo == pytest.approx(5.0) and hi == pytest.approx(95.0)
    lo, hi = percentile_interval(np.full((2, 10), np.nan), 0.95)
    assert np.isnan(lo).all() and np.isnan(hi).all()
    with pytest.raises(ValueError):
        percentile_interval(r, 1.0)


def test_resampled_ece_equals_ece_of_each_resample():
    rng = np.random.default_rng(3)
    conf = np.round(rng.random((4, 80)), 2)
    conf[0, :4] = [0.0, 1.0, 0.3, 0.7]  # bin edges
    corr = (rng.random((4, 80)) < conf).astype(float)
    conf[1, :5] = np.nan
    corr[2, 7] = np.nan
    counts = bootstrap_counts(80, 300, 0)
    idx = bootstrap_indices(80, 300, 0)
    got = resampled_ece(conf, corr, counts)
    assert got.shape == (4, 300)
    np.testing.assert_allclose(got, expected_calibration_error(conf[:, idx], corr[:, idx]), atol=1e-12)


def test_resampled_auroc_equals_auroc_of_each_resample():
    rng = np.random.default_rng(4)
    conf = np.round(rng.random((5, 60)), 1)  # ties
    corr = (rng.random((5, 60)) < conf).astype(float)
    corr[3] = 1.0  # one class only: NaN
    conf[1, :6] = np.nan
    counts = bootstrap_counts(60, 400, 2)
    idx = bootstrap_indices(60, 400, 2)
    ref = auroc(conf[:, idx], corr[:, idx])
    for chunk in (2**23, 500):  # chunking does not change the result
        got = resampled_auroc(conf, corr, counts, max_elements=chunk)
        np.testing.assert_allclose(got, ref, atol=1e-12)
    assert np.isnan(got[3]).all()
    # against scikit-learn on one resample
    b = 5
    keep = ~np.isnan(conf[0, idx[b]])
    assert got[0, b] == pytest.approx(roc_auc_score(corr[0, idx[b]][keep], conf[0, idx[b]][keep]), abs=1e-12)


def test_auroc_matches_sklearn_to_1e12():
    rng = np.random.default_rng(9)
    for _ in range(5):
        conf = rng.random(300) ** 3
        conf[:40] = 1.0  # many ties at exactly 1
        corr = (rng.random(300) < 0.6).astype(int)
        assert abs(float(auroc(conf, corr)) - roc_auc_score(corr, conf)) < 1e-12


def test_ece_extremes_zero_and_one():
    # confidence 1.0 goes into the last bin, 0.0 into the first
    count, mean_c, acc = reliability_bins(np.array([0.0, 0.0, 1.0, 1.0, 0.95]), np.array([0, 1, 1, 1, 0]))
    np.testing.assert_array_equal(count, [2, 0, 0, 0, 0, 0, 0, 0, 0, 3])
    assert mean_c[0] == 0.0 and acc[0] == 0.5
    assert mean_c[9] == pytest.approx(2.95 / 3) and acc[9] == pytest.approx(2 / 3)
    ece = (2 * 0.5 + 3 * abs(2 / 3 - 2.95 / 3)) / 5
    assert float(expected_calibration_error([0.0, 0.0, 1.0, 1.0, 0.95], [0, 1, 1, 1, 0])) == pytest.approx(ece)
    assert float(expected_calibration_error([1.0], [1])) == 0.0
    assert float(expected_calibration_error([0.0], [1])) == 1.0


def test_reliability_bins_xarray():
    rng = np.random.default_rng(0)
    conf = xr.DataArray(rng.random((2, 3, 40)), dims=("model", "level", "image"))
    corr = xr.DataArray((rng.random((2, 3, 40)) < 0.5).astype(float), dims=("model", "level", "image"))
    ds = reliability_bins(conf, corr, dim=["level", "image"])
    assert ds["count"].dims == ("model", "bin") and (ds["count"].sum("bin") == 120).all()
    assert ds["bin_hi"].values[-1] == 1.0
    ece = (ds["count"] * np.abs(ds["accuracy"] - ds["mean_confidence"])).sum("bin") / ds["count"].sum("bin")
    np.testing.assert_allclose(ece.values, expected_calibration_error(conf, corr, dim=["level", "image"]).values)


def test_mean_confidence_and_abstain_rate():
    da = xr.DataArray([[0.5, 1.0, np.nan]], dims=("model", "image"))
    assert float(_mean_confidence(da, "image")[0]) == 0.75
    assert float(_abstain_rate(np.array([1.0, 0.0, 0.0, 1.0]))) == 0.5


# ----------------------------------------------------------------------------- selective answering


def test_risk_coverage_group_ends_against_brute_force():
    rng = np.random.default_rng(5)
    conf = np.round(rng.random(200), 2)
    corr = (rng.random(200) < conf).astype(float)
    cov, risk = _risk_coverage(conf, corr)
    t = np.unique(conf)[::-1]                  # one point per distinct confidence, from high to low
    assert cov.size == t.size and np.all(np.diff(cov) > 0) and cov[-1] == 1.0
    for tau, cv, rk in zip(t, cov, risk):
        ans = conf >= tau
        assert cv == pytest.approx(ans.mean()) and rk == pytest.approx(1 - corr[ans].mean())
    assert risk[-1] == pytest.approx(1 - corr.mean())
    with pytest.raises(ValueError):
        _risk_coverage([np.nan], [1])
    with pytest.raises(ValueError):
        expected_risk_coverage(np.ones((2, 2)), np.ones((2, 2)))


def test_risk_coverage_independent_of_order_and_ties():
    rng = np.random.default_rng(21)
    conf = np.round(rng.random(60), 1)  # many ties
    corr = (rng.random(60) < conf).astype(float)
    cov, risk = _risk_coverage(conf, corr)
    assert cov.size == np.unique(conf).size and cov[-1] == 1.0 and risk[-1] == pytest.approx(1 - corr.mean())
    for seed in range(3):  # shuffling: ties enter together, so the points are identical
        p = np.random.default_rng(seed).permutation(60)
        c2, r2 = _risk_coverage(conf[p], corr[p])
        np.testing.assert_array_equal(c2, cov)
        np.testing.assert_array_equal(r2, risk)
    # duplicating every answer keeps each point: coverage and risk are ratios of doubled counts
    c2, r2 = _risk_coverage(np.r_[conf, conf], np.r_[corr, corr])
    np.testing.assert_array_equal(c2, cov)
    np.testing.assert_array_equal(r2, risk)
    # the hand case: 0.8 (one right, one wrong) enters as one point
    cov, risk = _risk_coverage([0.3, 0.8, 0.9, 0.8], [0, 1, 1, 0])
    assert cov.tolist() == [0.25, 0.75, 1.0] and risk.tolist() == [0.0, 1 / 3, 0.5]


def test_aurc_hand_case_and_excess():
    conf = np.array([0.9, 0.8, 0.7, 0.6, 0.5])
    corr = np.array([1, 1, 0, 1, 0])
    # risks as each answer enters: 0/1, 0/2, 1/3, 1/4, 2/5 -> AURC = (1/3 + 1/4 + 2/5) / 5 = 59/300
    assert aurc(conf, corr) == pytest.approx(59 / 300, abs=1e-15)
    # optimal ranking (1,1,1,0,0): 0, 0, 0, 1/4, 2/5 -> 13/100; excess = 59/300 - 39/300 = 1/15
    assert excess_aurc(conf, corr) == pytest.approx(1 / 15, abs=1e-15)
    # the worst ranking (0,0,1,1,1): 1, 1, 2/3, 2/4, 2/5 -> 107/150 = (e + e (H_n - H_e)) / n
    worst = aurc(conf, [0, 0, 1, 1, 1])
    assert worst == pytest.approx(107 / 150, abs=1e-15)
    assert worst == pytest.approx((2 + 2 * (1 / 3 + 1 / 4 + 1 / 5)) / 5, abs=1e-15)
    # a perfect ranking has no excess; all right: AURC 0; all wrong: AURC 1 and no excess
    assert excess_aurc(conf, [1, 1, 1, 0, 0]) == 0.0
    assert aurc(conf, np.ones(5)) == 0.0 and excess_aurc(conf, np.ones(5)) == 0.0
    assert aurc(conf, np.zeros(5)) == 1.0 and excess_aurc(conf, np.zeros(5)) == 0.0
    # ties: all five tied enter at one point, each with the overall risk 2/5
    assert aurc(np.full(5, 0.5), corr) == pytest.approx(0.4, abs=1e-15)


def test_optimal_aurc_closed_form_against_brute_force():
    from itertools import permutations

    for n in range(1, 7):
        for e in range(n + 1):
            wrong = np.r_[np.zeros(n - e), np.ones(e)]
            conf = np.linspace(1.0, 0.5, n)  # distinct confidences: the ranking is the order of `corr`
            best = min(aurc(conf, 1.0 - wrong[list(p)]) for p in permutations(range(n)))
            assert aurc(conf, 1.0 - wrong) == pytest.approx(best, abs=1e-15)  # correct first is optimal
            i = np.arange(1, n + 1)
            closed = np.mean(np.maximum(0, i - (n - e)) / i)
            assert best == pytest.approx(closed, abs=1e-15)
            # any ranking's excess is its AURC minus the brute-force optimum, and >= 0 (also with ties)
            rng = np.random.default_rng(n * 10 + e)
            corr = 1.0 - wrong[rng.permutation(n)]
            assert excess_aurc(conf, corr) == pytest.approx(aurc(conf, corr) - best, abs=1e-15)
            tied = np.round(rng.random(n), 1)
            assert excess_aurc(tied, corr) >= -1e-15


def test_coverage_at_risk_hand_case():
    conf = [0.9, 0.8, 0.7, 0.6, 0.5]
    corr = [1, 0, 1, 1, 0]
    # coverage 1/5 .. 5/5, risks 0, 1/2, 1/3, 1/4, 2/5
    assert coverage_at_risk(conf, corr, 0.0) == 0.2
    assert coverage_at_risk(conf, corr, 0.25) == 0.8   # the largest, though 2/5 and 3/5 exceed it
    assert coverage_at_risk(conf, corr, 0.4) == 1.0    # a bound equal to the risk counts
    assert coverage_at_risk(conf, corr, 0.3) == 0.8
    assert coverage_at_risk([0.9, 0.8], [0, 1], 0.2) == 0.0  # no point reaches the bound
    # a tie is taken in random order: the tied pair first has expected risk 1/2 after either answer
    assert coverage_at_risk([0.9, 0.9, 0.1], [1, 0, 1], 0.4) == 1.0  # all three: risk 1/3
    assert coverage_at_risk([0.9, 0.9], [1, 0], 0.4) == 0.0


def test_risk_coverage_nan_and_errors():
    conf = np.array([0.9, np.nan, 0.8, 0.7, 0.6, 0.5])
    corr = np.array([1, 0, 1, np.nan, 0, 1])
    kept_c, kept_k = [0.9, 0.8, 0.6, 0.5], [1, 1, 0, 1]
    for got, ref in zip(_risk_coverage(conf, corr), _risk_coverage(kept_c, kept_k)):
        np.testing.assert_array_equal(got, ref)
    assert aurc(conf, corr) == aurc(kept_c, kept_k) == pytest.approx((1 / 3 + 1 / 4) / 4)
    assert excess_aurc(conf, corr) == excess_aurc(kept_c, kept_k)
    assert coverage_at_risk(conf, corr, 0.25) == coverage_at_risk(kept_c, kept_k, 0.25) == 1.0
    for f in (_risk_coverage, expected_risk_coverage, aurc, excess_aurc):
        with pytest.raises(ValueError, match="no valid"):
            f([np.nan, 0.5], [1, np.nan])
        with pytest.raises(ValueError, match="no valid"):
            f([], [])
        with pytest.raises(ValueError, match="1-D"):
            f(np.ones((2, 2)), np.ones((2, 2)))
        with pytest.raises(ValueError, match="0/1"):
            f([0.5, 0.6], [1, 2])
    with pytest.raises(ValueError, match="no valid"):
        coverage_at_risk([np.nan], [1], 0.1)
    with pytest.raises(ValueError, match="max_risk"):
        coverage_at_risk([0.5], [1], 1.5)
    with pytest.raises(ValueError, match="max_risk"):
        coverage_at_risk([0.5], [1], np.nan)


def test_resampled_aurc_and_coverage_at_risk_equal_the_plain_functions():
    rng = np.random.default_rng(8)
    n = 50
    conf = np.round(rng.random(n), 1)  # ties
    corr = (rng.random(n) < conf).astype(float)
    conf[3], corr[7] = np.nan, np.nan
    ones = np.ones((3, n))
    np.testing.assert_allclose(resampled_aurc(conf, corr, ones), aurc(conf, corr), rtol=1e-13)
    np.testing.assert_array_equal(resampled_coverage_at_risk(conf, corr, 0.2, ones), coverage_at_risk(conf, corr, 0.2))
    # a counts row is integer repetition: each resample equals the plain function on np.repeat of the data
    counts = bootstrap_counts(n, 200, 3)
    assert (counts == 0).any()  # some answers are left out
    repeated = [(np.repeat(conf, r.astype(int)), np.repeat(corr, r.astype(int))) for r in counts]
    for chunk in (2**23, 120):  # chunks of resamples do not change the result
        got = resampled_aurc(conf, corr, counts, max_elements=chunk)
        assert got.shape == (200,)
        np.testing.assert_allclose(got, [aurc(c, k) for c, k in repeated], rtol=1e-12)
        for max_risk in (0.0, 0.15, 0.3):
            got = resampled_coverage_at_risk(conf, corr, max_risk, counts, max_elements=chunk)
            np.testing.assert_array_equal(got, [coverage_at_risk(c, k, max_risk) for c, k in repeated])
    # per image: answers of one image share its count, as passing counts[:, image_index]
    image = rng.integers(0, 20, n)
    img_counts = bootstrap_counts(20, 100, 4)
    np.testing.assert_array_equal(resampled_aurc(conf, corr, img_counts, image_index=image),
                                  resampled_aurc(conf, corr, img_counts[:, image]))
    np.testing.assert_array_equal(resampled_coverage_at_risk(conf, corr, 0.2, img_counts, image_index=image),
                                  resampled_coverage_at_risk(conf, corr, 0.2, img_counts[:, image]))
    # a resample without any valid answer is NaN; no valid pair at all: every resample NaN
    zero = np.zeros((1, n))
    zero[0, [3, 7]] = 1.0  # only the NaN pairs drawn
    assert np.isnan(resampled_aurc(conf, corr, zero)).all()
    assert np.isnan(resampled_coverage_at_risk([np.nan], [1], 0.1, np.ones((2, 1)))).all()
    with pytest.raises(ValueError, match="counts"):
        resampled_aurc(conf, corr, np.ones((2, n + 1)))
    with pytest.raises(ValueError, match="image_index"):
        resampled_aurc(conf, corr, img_counts, image_index=np.full(n, 20))
    with pytest.raises(ValueError, match="image_index"):
        resampled_aurc(conf, corr, img_counts, image_index=image[:-1])
    with pytest.raises(ValueError, match="max_risk"):
        resampled_coverage_at_risk(conf, corr, -0.1, counts)


# ----------------------------------------------------------------------------- ties (issue 39)

#: planted sweep: three clear levels and three murky ones (metres)
PLANT_V = np.array([8.0, 4.0, 2.0, 0.5, 0.25, 0.125])


def planted_signals(n_images: int = 24, seed: int = 0, murky_wrong=(0.75, 0.75, 0.75)):
    """Answers of one model over the planted sweep (level-major, ``n_images`` per level) and two signals.

    Clear levels: every answer right; murky level i: a fraction ``murky_wrong[i]`` wrong, on images drawn at random
    per level. ``c_int`` is 1.0 on the clear levels and 0.25 on the murky ones; ``v_hat`` is the level's V (a
    perfect V̂). With one error rate on every murky level (the default) the two carry the same information about
    the answers; with rising rates V̂ ranks them truly better. Returns (signals dict, correct, image index).
    """
    rng = np.random.default_rng(seed)
    correct = []
    for lvl in range(PLANT_V.size):
        ok = np.ones(n_images)
        if lvl >= 3:
            ok[rng.permutation(n_images)[: int(round(murky_wrong[lvl - 3] * n_images))]] = 0.0
        correct.append(ok)
    level = np.repeat(np.arange(PLANT_V.size), n_images)
    signals = {"c_int": np.where(level < 3, 1.0, 0.25), "v_hat": PLANT_V[level]}
    return signals, np.concatenate(correct), np.tile(np.arange(n_images), PLANT_V.size)


def _expected_curve_by_enumeration(conf, corr):
    """E[E_i] / i for i = 1..n, averaged over every order within tie groups (no murk code)."""
    from itertools import permutations, product

    conf, wrong = np.asarray(conf, float), 1.0 - np.asarray(corr, float)
    levels = sorted(set(conf.tolist()), reverse=True)
    groups = [np.flatnonzero(conf == v) for v in levels]
    curves = [np.cumsum(np.concatenate([wrong[list(p)] for p in perm])) / np.arange(1, conf.size + 1)
              for perm in product(*[list(permutations(g)) for g in groups])]
    return np.mean(curves, axis=0)


def test_equally_informative_signals_of_different_granularity_get_the_same_aurc():
    """Issue 39: c_int (two values) and a perfect V̂ (six) carry the same information when every murky level has
    the same error rate; giving each tied answer its group's end risk ranked V̂ ahead (0.12 against 0.16 in the
    issue); as the expectation over tie orders both have one AURC, E-AURC and coverage at every bound."""
    signals, corr, _ = planted_signals()
    a = {s: aurc(v, corr) for s, v in signals.items()}
    assert a["c_int"] == pytest.approx(a["v_hat"], abs=1e-12)
    # the value by hand: the murky block of 3 n answers (3 n (3/4) wrong) enters after 3 n right answers, the
    # expected errors after j of them j (3/4): AURC = (1/6n) sum_j (3/4) j / (3n + j)
    n = 3 * 24
    assert a["c_int"] == pytest.approx(sum(0.75 * j / (n + j) for j in range(1, n + 1)) / (2 * n), abs=1e-12)
    assert excess_aurc(signals["c_int"], corr) == pytest.approx(excess_aurc(signals["v_hat"], corr), abs=1e-12)
    for r in (0.05, 0.1, 0.25, 0.4, 0.7):
        assert coverage_at_risk(signals["c_int"], corr, r) == coverage_at_risk(signals["v_hat"], corr, r), r
    curves = [expected_risk_coverage(v, corr) for v in signals.values()]   # the figure's curves coincide
    np.testing.assert_allclose(curves[0], curves[1], atol=1e-15)
    # where the murky error rate rises as V falls, V̂ ranks the answers truly better
    better, corr2, _ = planted_signals(murky_wrong=(0.25, 0.75, 1.0))
    assert aurc(better["v_hat"], corr2) < aurc(better["c_int"], corr2) - 0.01


def test_tie_aware_aurc_and_coverage_equal_the_average_over_all_tie_orders():
    rng = np.random.default_rng(39)
    for trial in range(100):
        n = int(rng.integers(1, 8))
        conf = rng.integers(0, int(rng.integers(1, 4)), n).astype(float)   # few values: ties
        corr = (rng.random(n) < 0.6).astype(float)
        curve = _expected_curve_by_enumeration(conf, corr)
        assert aurc(conf, corr) == pytest.approx(curve.mean(), abs=1e-14), (conf, corr)
        cov, risk = expected_risk_coverage(conf, corr)
        np.testing.assert_allclose(risk, curve, atol=1e-14)
        np.testing.assert_array_equal(cov, np.arange(1, n + 1) / n)
        ends, end_risk = _risk_coverage(conf, corr)          # the group ends lie on the expected curve, exactly
        assert set(zip(ends.tolist(), end_risk.tolist())) <= set(zip(cov.tolist(), risk.tolist()))
        e = n - corr.sum()
        i = np.arange(1, n + 1)
        assert excess_aurc(conf, corr) == pytest.approx(curve.mean() - np.mean(np.maximum(0, i - (n - e)) / i),
                                                        abs=1e-14)
        for r in (0.0, 0.2, 0.25, 1 / 3, 0.5):
            ok = np.flatnonzero(curve <= r + 1e-12)
            assert coverage_at_risk(conf, corr, r) == ((ok.max() + 1) / n if ok.size else 0.0), (conf, corr, r)
    # larger input: against many random tie orders (Monte Carlo, 4 standard errors)
    conf = np.round(rng.random(300), 1)
    corr = (rng.random(300) < conf).astype(float)
    draws = []
    for _ in range(1000):
        o = np.lexsort((rng.random(300), -conf))
        draws.append(np.mean(np.cumsum(1.0 - corr[o]) / np.arange(1, 301)))
    assert abs(aurc(conf, corr) - np.mean(draws)) < 4 * np.std(draws) / np.sqrt(len(draws))
    # the harmonic sums: the table of integer counts and the digamma form (other weights) agree
    from scipy.special import digamma

    from murk.results._selective import _harmonic_gap

    k, top = np.array([0.0, 3.0, 100.0, 5000.0]), np.array([2.0, 8.0, 107.0, 5003.0])
    exact = [sum(1 / i for i in range(int(a) + 1, int(b) + 1)) for a, b in zip(k, top)]
    np.testing.assert_allclose(_harmonic_gap(k, top), exact,
                               rtol=0, atol=1e-15)   # absolute: the sums' terms are rounded at H's scale
    np.testing.assert_allclose(_harmonic_gap(k + 0.5, top + 0.5), digamma(top + 1.5) - digamma(k + 1.5), rtol=0,
                               atol=1e-15)
    # bootstrap weights: a resample equals the tie-aware AURC of the repeated data (the copies are tied too)
    counts = bootstrap_counts(300, 20, 5)
    got = resampled_aurc(conf, corr, counts)
    for b in range(20):
        rep = np.repeat(np.arange(300), counts[b].astype(int))
        assert got[b] == pytest.approx(aurc(conf[rep], corr[rep]), abs=1e-12)


def test_untied_scores_keep_their_values_bit_for_bit():
    """Without ties the expectation over tie orders is the one order: the values are the group-end ones, computed
    the same way as before (each answer's risk E_i / i, summed, over n), bit for bit."""
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 300):
        conf = rng.permutation(n) / n          # distinct
        corr = (rng.random(n) < 0.7).astype(float)
        wrong = 1.0 - corr[np.argsort(-conf, kind="stable")]
        risk = np.cumsum(wrong) / np.arange(1.0, n + 1.0)
        assert aurc(conf, corr) == float((1.0 * risk).sum() / n)
        assert resampled_aurc(conf, corr, np.ones((2, n))).tolist() == [float(risk.sum() / n)] * 2
        for r in (0.1, 0.3):
            ok = np.flatnonzero(risk <= r)
            assert coverage_at_risk(conf, corr, r) == (float(np.arange(1.0, n + 1.0)[ok].max() / n) if ok.size
                                                       else 0.0)


def test_selective_risk_coverage_abstain():
    a = np.array([0, 0, 1, 0, 1, np.nan])
    c = np.array([1, 0, 0, 1, 1, 1])
    cov, risk = selective_risk_coverage(a, c)
    assert float(cov) == pytest.approx(3 / 5) and float(risk) == pytest.approx(1 / 3)
    cov, risk = selective_risk_coverage(np.ones(3), np.ones(3))
    assert float(cov) == 0.0 and np.isnan(risk)
    da = xr.DataArray(np.stack([a, 1 - np.nan_to_num(a)]), dims=("model", "image"))
    dc = xr.DataArray(np.stack([c, c]), dims=("model", "image"))
    cov, risk = selective_risk_coverage(da, dc, dim="image")
    assert cov.dims == ("model",) and float(cov[0]) == pytest.approx(0.6)
    # the monitor's gates (murk.monitor.compare_at_equal_coverage) go through it: a boolean gate as 0/1,
    # rows with a missing correct dropped
    assert tuple(map(float, selective_risk_coverage([0.0, 0.0, 1.0, 1.0], [1, 0, 0, 0]))) == (0.5, 0.5)
    assert tuple(map(float, selective_risk_coverage([0.0, 0.0, 1.0], [1, np.nan, 0]))) == (0.5, 0.0)


def test_coverage_risk_of_sums_is_the_ratio_every_abstainer_takes():
    """One implementation: the resampled sums of murk.analysis.selective_abstain and murk.monitor's bootstrap
    give, at draw counts of one, the point coverage and risk of selective_risk_coverage."""
    rng = np.random.default_rng(3)
    a = (rng.random((4, 30)) < 0.3).astype(float)
    c = (rng.random((4, 30)) < 0.6).astype(float)
    a[0, :3] = np.nan
    a[3] = 1.0                                        # a row that answers nothing: risk NaN
    ok = ~np.isnan(a)
    ans, wrong = np.where(ok, 1 - a, 0.0), np.where(ok, (1 - a) * (1 - c), 0.0)
    cov_s, risk_s = coverage_risk_of_sums(ans @ np.ones(30), wrong @ np.ones(30), ok @ np.ones(30))
    cov, risk = selective_risk_coverage(a, c)
    np.testing.assert_array_equal(cov_s, cov)
    np.testing.assert_array_equal(risk_s, risk)
    for r in range(3):                                # by hand: answered share, error rate among the answered
        kept = ~np.isnan(a[r])
        answered = a[r][kept] == 0
        assert cov[r] == pytest.approx(answered.mean())
        assert risk[r] == pytest.approx(1.0 - c[r][kept][answered].mean())
    assert np.isnan(risk[3]) and cov[3] == 0.0
    cov, risk = coverage_risk_of_sums(0.0, 0.0, 0)
    assert np.isnan(cov) and np.isnan(risk)


# ----------------------------------------------------------------------------- monotonicity


def test_monotonicity_raw_and_beyond_noise():
    n = 400
    # accuracy-like series on 400 images: 1 -> 0.9 -> 0.92 (a rise within noise: 20 images gain,
    # 12 lose, 2 SE = 0.028 > 0.02) -> 0.5 -> 0.8 (a rise far beyond noise)
    l0 = np.ones(n)
    l1 = l0.copy()
    l1[:40] = 0
    l2 = l1.copy()
    l2[:20] = 1
    l2[100:112] = 0
    l3 = l2.copy()
    l3[np.flatnonzero(l3)[:168]] = 0
    l4 = l3.copy()
    l4[np.flatnonzero(l4 == 0)[:120]] = 1
    x = np.stack([l0, l1, l2, l3, l4])
    np.testing.assert_allclose(x.mean(axis=1), [1.0, 0.9, 0.92, 0.5, 0.8])
    raw, sig, k = monotonicity(x, -1)
    assert int(k) == 4
    assert float(raw) == pytest.approx(2 / 4)      # both rises are wrong-way moves
    assert float(sig) == pytest.approx(1 / 4)      # only 0.5 -> 0.8 exceeds 2 SE
    # abstain-like: falling is wrong
    raw, sig, _ = monotonicity(1 - x, +1)
    assert float(raw) == pytest.approx(2 / 4) and float(sig) == pytest.approx(1 / 4)
    # a perfectly monotone series has no wrong moves; NaN levels reduce the pairs
    y = np.array([[1.0, 1.0], [0.8, 0.8], [np.nan, np.nan], [0.2, 0.3]])
    raw, sig, k = monotonicity(y, -1)
    assert float(raw) == 0.0 and int(k) == 1
    with pytest.raises(ValueError):
        monotonicity(y, 0)


def test_monotonicity_da_per_readout_direction():
    x = np.array([[1.0, 1.0], [0.5, 0.5], [0.6, 0.6]])
    da = xr.DataArray(np.stack([x, x], axis=0), dims=("readout", "level", "image"),
                      coords={"readout": ["correct", "abstain"]})
    sign = xr.DataArray([-1, 1], dims="readout", coords={"readout": ["correct", "abstain"]})
    out = monotonicity_da(da, sign)
    # correct: 0.5 -> 0.6 is wrong; abstain: 1 -> 0.5 is wrong
    np.testing.assert_allclose(out["raw"].values, [0.5, 0.5])
    np.testing.assert_array_equal(out["n_pairs"].values, [2, 2])


# ----------------------------------------------------------------------------- issue 13: edges and bounds


def _ece_floor_bins(conf, corr, n_bins=10):
    """murk's former convention, bins [k/M, (k+1)/M) with the last closed: only for the comparison."""
    conf, corr = np.asarray(conf, float), np.asarray(corr, float)
    b = np.clip(np.floor(conf * n_bins), 0, n_bins - 1).astype(int)
    return sum(abs(corr[b == k].sum() - conf[b == k].sum()) for k in range(n_bins)) / conf.size


def test_ece_uses_guo_et_al_bins_upper_closed():
    """Guo et al. (2017): bins ((m-1)/M, m/M]; a verbal 0.70 lies in (0.6, 0.7] and 0 in the first bin."""
    conf, corr = np.array([0.7, 0.75]), np.array([1.0, 0.0])
    # Guo: (0.6, 0.7] {0.7: acc 1} and (0.7, 0.8] {0.75: acc 0} -> (0.3 + 0.75) / 2; before: one bin [0.7, 0.8)
    assert float(expected_calibration_error(conf, corr)) == pytest.approx(0.525, abs=1e-15)
    assert _ece_floor_bins(conf, corr) == pytest.approx(0.225)
    count, _, _ = reliability_bins(np.array([0.0, 0.1, 0.1000001, 1.0]), np.array([0, 1, 1, 1]))
    np.testing.assert_array_equal(count, [2, 1, 0, 0, 0, 0, 0, 0, 0, 1])  # 0 and 0.1 in the first bin
    # on verbal confidences (multiples of 0.05) the two conventions differ; Guo's equals scikit-learn's
    rng = np.random.default_rng(13)
    conf = rng.integers(0, 21, 400) * 5 / 100
    corr = (rng.random(400) < conf).astype(float)
    prob_true, prob_pred = calibration_curve(corr, conf, n_bins=10, strategy="uniform")
    bins = np.searchsorted(np.linspace(0, 1, 11)[1:-1], conf)  # scikit-learn's own assignment
    n = np.bincount(bins, minlength=10)
    ref = np.sum(n[n > 0] / conf.size * np.abs(prob_true - prob_pred))
    got = float(expected_calibration_error(conf, corr))
    assert got == pytest.approx(ref, rel=1e-12)
    assert abs(got - _ece_floor_bins(conf, corr)) > 1e-3
    # the resampled kernel bins the same way
    counts = bootstrap_counts(400, 50, 1)
    idx = bootstrap_indices(400, 50, 1)
    np.testing.assert_allclose(resampled_ece(conf, corr, counts), expected_calibration_error(conf[idx], corr[idx]),
                               atol=1e-12)


def test_ece_and_auroc_are_not_rounded():
    """Issue 13: float64 throughout, no rounding: 0.9000004 stays above the edge 0.9, 0.9999999 above 0.9999996."""
    assert float(expected_calibration_error([0.9000004, 0.85], [1, 0])) == pytest.approx((0.0999996 + 0.85) / 2)
    assert float(expected_calibration_error(np.round([0.9000004, 0.85], 6), [1, 0])) == pytest.approx(0.375)
    assert float(auroc([0.9999999, 0.9999999, 0.9999996], [1, 1, 0])) == 1.0
    assert float(auroc(np.round([0.9999999, 0.9999999, 0.9999996], 6), [1, 1, 0])) == 0.5


def test_crossing_side_of_the_bound():
    # never reached: censored at the last level, a bound from above ("below": at most 1.95 m)
    v, c, side = crossing_visibility(SWEEP, np.full(8, 0.9), 1.0, 0.25, return_side=True)
    assert v == CENSOR_M and bool(c) and side == "below"
    # reached at the first level: between the clean image and 250 m, a bound from below ("above": at least 250 m)
    v, c, side = crossing_visibility(SWEEP, np.full(8, 0.3), 1.0, 0.25, return_side=True)
    assert v == 250.0 and not bool(c) and side == "above"
    # interpolated, and no signal
    y = np.array([1.0, 1.0, 0.9, 0.5, 0.3, 0.25, 0.25, 0.25])
    _, _, side = crossing_visibility(SWEEP, y, 1.0, 0.25, return_side=True)
    assert side == ""
    _, _, side = crossing_visibility(SWEEP, np.full(8, 0.25), 0.25, 0.25, return_side=True)
    assert side == ""
    # the two-value return is unchanged for existing callers; n-d input carries a side per series
    assert len(crossing_visibility(SWEEP, y, 1.0, 0.25)) == 2
    _, _, sides = crossing_visibility(SWEEP, np.stack([y, np.full(8, 0.9), np.full(8, 0.3)]), 1.0, 0.25,
                                      return_side=True)
    assert sides.tolist() == ["", "below", "above"]
    ds = _crossing_visibility_da(xr.DataArray(np.full(8, 0.3), dims="visibility_m", coords={"visibility_m": SWEEP}),
                                1.0, 0.25)
    assert str(ds["censored_side"].values) == "above"


def test_blind_spot_width_side():
    from murk.results import blind_spot_width_side

    acc = ["", "", "below", "above", "below", "above", "below", "above", ""]
    aware = ["below", "above", "", "", "below", "above", "above", "below", ""]
    assert blind_spot_width_side(acc, aware).tolist() == [
        "above",      # awareness never crosses: W >= (the spec's lower bounds)
        "below",      # awareness crossed before 250 m: W <=
        "below",      # accuracy never falls: W <=
        "above",      # accuracy fell before 250 m: W >=
        "undefined",  # both censored at the end of the sweep
        "undefined",  # both at the first level
        "below",      # V_acc <= and V_aware >=: W <= for sure
        "above",      # V_acc >= and V_aware <=: W >=
        ""]
