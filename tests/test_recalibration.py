"""Tests of murk.monitor: temperature scaling, globally, by visibility and per level (issue 24)."""

import numpy as np
import pytest

from murk.monitor import _estimator
from murk.monitor import _evaluation
from murk.monitor import _monitor as monitor
from murk.monitor import _recalibration as rc


def _softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.fixture(scope="module")
def logits():
    """Seeded logits of 4 options and targets drawn from softmax(z): the model calibrated at T = 1."""
    rng = np.random.default_rng(0)
    z = rng.normal(0.0, 2.0, (20000, 4))
    p = _softmax(z)
    y = (rng.random(len(z))[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
    return z, y


def test_apply_temperature_hand_cases():
    assert np.array_equal(rc.apply_temperature([[0.7, 0.2, 0.1]], 1.0), [[0.7, 0.2, 0.1]])
    # T = 2: square roots, renormalised
    got = rc.apply_temperature([[0.64, 0.36]], 2.0)
    assert got == pytest.approx(np.array([[0.8, 0.6]]) / 1.4, rel=1e-12)
    flat = rc.apply_temperature([[0.97, 0.02, 0.01, np.nan]], 1e6)   # towards uniform over the present options
    assert np.isnan(flat[0, 3]) and flat[0, :3] == pytest.approx([1 / 3] * 3, abs=1e-5)
    assert rc.apply_temperature([[1.0, 0.0]], 3.0).tolist() == [[1.0, 0.0]]   # a zero stays zero
    per_row = rc.apply_temperature([[0.64, 0.36], [0.64, 0.36]], np.array([1.0, 2.0]))
    assert per_row[0].tolist() == [0.64, 0.36] and per_row[1] == pytest.approx([0.8 / 1.4, 0.6 / 1.4])
    assert rc.option_confidence([[0.2, 0.8], [np.nan, np.nan]]).tolist()[0] == 0.8
    assert rc._option_answer([[0.2, 0.8], [np.nan, np.nan]]).tolist() == [1, -1]


@pytest.mark.parametrize("probs, T, match", [
    ([[0.5, 0.4]], 1.0, "sum to 1"), ([0.5, 0.5], 1.0, "shape"), ([[1.5, -0.5]], 1.0, r"\[0, 1\]"),
    ([[0.5, 0.5]], 0.0, "> 0"), ([[0.5, 0.5]], np.inf, "> 0"), ([[0.5, 0.5]], [1.0, 2.0], "shape")])
def test_apply_temperature_errors(probs, T, match):
    with pytest.raises(ValueError, match=match):
        rc.apply_temperature(probs, T)


def test_fit_temperature_recovers_a_known_temperature(logits):
    z, y = logits
    assert rc.fit_temperature(_softmax(z), y) == pytest.approx(1.0, rel=0.05)
    for t_true in (0.5, 2.5):   # the model's logits scaled by T (overconfident for T > 1): the ML temperature undoes it
        assert rc.fit_temperature(_softmax(z * t_true), y) == pytest.approx(t_true, rel=0.05)
    # the fit is the likelihood's minimum
    p = _softmax(z * 2.5)
    t = rc.fit_temperature(p, y)
    assert rc._negative_log_likelihood(p, y, t) <= min(rc._negative_log_likelihood(p, y, t * f) for f in (0.97, 1.03))


def test_fit_visibility_temperature_recovers_t_of_log_v(logits):
    rng = np.random.default_rng(1)
    z = rng.normal(0.0, 2.0, (60000, 4))             # more answers than the fixture: two parameters
    y = (rng.random(len(z))[:, None] > np.cumsum(_softmax(z), axis=1)).sum(axis=1)
    v = 10 ** rng.uniform(0.3, 3.0, len(z))          # 2 m to 1 km
    a, b = 0.3, -0.25                                # T = 1.35 at 1 m, falling by 0.25 per decade (in log T)
    t_true = np.exp(a + b * np.log10(v))
    a_hat, b_hat = rc.fit_visibility_temperature(_softmax(z * t_true[:, None]), y, v)
    assert a_hat == pytest.approx(a, rel=0.05) and b_hat == pytest.approx(b, rel=0.05)
    t_hat = rc.visibility_temperature(v, a_hat, b_hat)
    assert np.max(np.abs(t_hat / t_true - 1)) < 0.05
    # V beyond CAP_M is clipped: the same temperature as at CAP_M
    assert rc.visibility_temperature([1e6, 2e4], a_hat, b_hat) == pytest.approx(
        rc.visibility_temperature([_estimator.CAP_M] * 2, a_hat, b_hat))
    with pytest.raises(ValueError, match="visibility_m"):
        rc.visibility_temperature([0.0], a, b)


def test_fit_visibility_temperature_clips_v_at_cap_m(logits):
    """A third of the rows beyond CAP_M (10 km to 1000 km): the model's T is that of CAP_M there, and the fit is the fit
    with those V set to CAP_M, bit for bit, and still recovers (a, b)."""
    z, y = logits
    rng = np.random.default_rng(3)
    v = 10 ** rng.uniform(0.3, 6.0, len(z))
    assert 0.3 < np.mean(v > _estimator.CAP_M) < 0.4          # 2 of 5.7 decades
    a, b = 0.3, -0.25
    p = _softmax(z * np.exp(a + b * np.log10(np.minimum(v, _estimator.CAP_M)))[:, None])
    ab = rc.fit_visibility_temperature(p, y, v)
    assert ab == rc.fit_visibility_temperature(p, y, np.minimum(v, _estimator.CAP_M))
    assert ab == pytest.approx((a, b), rel=0.05)


def test_negative_log_likelihood_closed_form():
    p = [[0.5, 0.5, np.nan], [0.64, 0.36, 0.0]]
    assert rc._negative_log_likelihood(p, [0, 0]) == pytest.approx((np.log(2) - np.log(0.64)) / 2, rel=1e-12)
    # T = 2: the second row becomes (0.8, 0.6, 0) / 1.4; the first stays (0.5, 0.5)
    assert rc._negative_log_likelihood(p, [1, 1], 2.0) == pytest.approx((np.log(2) - np.log(0.6 / 1.4)) / 2,
                                                                      rel=1e-12)
    assert rc._negative_log_likelihood(p, [0, 0], [1.0, 2.0]) == pytest.approx(
        (np.log(2) - np.log(0.8 / 1.4)) / 2, rel=1e-12)
    assert rc.option_confidence(p).tolist() == [0.5, 0.64] and rc._option_answer(p).tolist() == [0, 0]


def test_visibility_fit_errors_are_named():
    p, y = np.array([[0.6, 0.4], [0.3, 0.7]]), np.array([0, 1])
    with pytest.raises(ValueError, match="visibility_m must have shape"):
        rc.fit_visibility_temperature(p, y, [10.0])
    for bad in (0.0, -5.0, np.nan, np.inf):
        with pytest.raises(ValueError, match="visibility_m must be finite and > 0"):
            rc.fit_visibility_temperature(p, y, [10.0, bad])
    with pytest.raises(ValueError, match="probability 0"):
        rc.fit_visibility_temperature([[0.6, 0.4], [1.0, 0.0]], y, [10.0, 20.0])
    with pytest.raises(ValueError, match="probability 0"):
        rc._negative_log_likelihood([[1.0, 0.0]], [1])


def test_fit_errors_are_named():
    p = np.array([[0.6, 0.4], [1.0, 0.0]])
    with pytest.raises(ValueError, match="probability 0"):
        rc.fit_temperature(p, [0, 1])
    with pytest.raises(ValueError, match="option indices"):
        rc.fit_temperature(p, [0, 2])
    with pytest.raises(ValueError, match="NaN"):
        rc.fit_temperature([[0.6, 0.4, np.nan]], [2])
    with pytest.raises(ValueError, match="n = 0"):
        rc.fit_temperature(np.zeros((0, 2)), np.zeros(0, int))


def test_recalibrate_on_a_visibility_dependent_overconfidence(logits):
    """A model whose overconfidence grows as V falls (known T(V)), two conditions of V: on the test half the
    visibility temperature and the per-level oracle bring the NLL to that of the true temperatures, the global one
    does not; rows without a read-out stay missing and a zero target probability is floored, not fatal."""
    z, y = logits
    n = len(z)
    rng = np.random.default_rng(2)
    level = rng.integers(0, 2, n)                      # 0: clear (V 200 m), 1: murky (V 5 m)
    v_true = np.where(level == 0, 200.0, 5.0)
    t_true = np.where(level == 0, 1.0, 4.0)
    p = _softmax(z * t_true[:, None])
    p[0] = [1.0, 0.0, 0.0, 0.0]
    y = y.copy()
    y[0] = 1                                           # wrong with certainty: floored
    p[1] = np.nan                                      # a missing read-out
    v_hat = v_true * np.exp(rng.normal(0, 0.1, n))     # the monitor's estimate, 10 % scatter
    image = np.arange(n) // 4
    cal = _evaluation.split_images(image, seed=0)
    conf, params = rc.recalibrate(p, np.where(np.arange(n) == 1, np.nan, y), cal, group=level, visibility_m=v_hat)
    assert set(conf) == set(rc.METHODS) and all(np.isnan(c[1]) for c in conf.values())
    assert params["per_level_T"][1] == pytest.approx(4.0, rel=0.1) and params["per_level_T"][0] == pytest.approx(1.0, rel=0.1)
    assert 1.0 < params["global_T"] < 4.0
    test = ~cal & (np.arange(n) > 1)
    truth = rc.option_confidence(_softmax(z[test]))
    for method in ("per_level", "visibility"):
        assert np.mean(np.abs(conf[method][test] - truth)) < 0.02, method
    assert np.mean(np.abs(conf["global"][test] - truth)) > 0.05
    assert np.array_equal(conf["none"][2:], rc.option_confidence(p[2:]))
    with pytest.raises(ValueError, match="no calibration row"):
        rc.recalibrate(p, y, np.zeros(n, bool))


def test_a_subset_models_halves_are_its_own_images():
    """Issue 39: a model read out on the first 6 of 10 images (NOT_RUN after; wild values planted there) is split
    over its own 6 images only, each image in the half the split of all images puts it in, whatever the values."""
    import xarray as xr

    from murk.results import _cube as cube

    ids = np.arange(500, 510)
    reason = np.full((2, 10), "", dtype=object)
    reason[1, 6:] = cube.NOT_RUN
    value = np.zeros((2, 10))
    value[1, 6:] = 1e9                              # wild values where the subset model was not run
    ds = xr.Dataset({"value": (("model", "image"), value), "missing_reason": (("model", "image"), reason)},
                    coords={"model": ["org/all", "org/subset"], "image": ids})
    own, cal = rc.model_halves(ds, "org/subset", seed=3)
    np.testing.assert_array_equal(own, np.arange(6))
    np.testing.assert_array_equal(cal, _evaluation.split_images(ids, seed=3)[:6])
    np.testing.assert_array_equal(cal, _evaluation.split_images(ids[:6], seed=3))   # the subset's store alone
    own_all, cal_all = rc.model_halves(ds, "org/all", seed=3)
    np.testing.assert_array_equal(own_all, np.arange(10))
    np.testing.assert_array_equal(cal_all, _evaluation.split_images(ids, seed=3))
    ds2 = ds.assign(value=ds["value"].where(ds["missing_reason"] != cube.NOT_RUN))   # NaN there instead: no change
    for a, b in zip(rc.model_halves(ds2, "org/subset", seed=3), (own, cal)):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(KeyError):
        rc.model_halves(ds, "org/absent")
