"""murk.claims: a finding is stated only when its interval excludes the null value."""

import numpy as np
import pytest

from murk import claims, physics

NAN = float("nan")


def test_versus_value():
    assert claims.versus_value(0.9, 0.8, 1.0, 0.25) == claims.ABOVE
    assert claims.versus_value(0.1, 0.0, 0.2, 0.25) == claims.BELOW
    assert claims.versus_value(0.26, 0.2, 0.3, 0.25) == claims.AT
    assert claims.versus_value(0.25, 0.25, 0.25, 0.25) == claims.AT      # touching is not excluding
    assert claims.versus_value(NAN, 0.2, 0.3, 0.25) == claims.UNDEFINED
    assert claims.versus_value(0.3, NAN, NAN, 0.25) == claims.UNDEFINED


@pytest.mark.parametrize("clean, end, censored, verdict", [
    ((0.99, 0.97, 1.0), (0.25, 0.2, 0.3), False, claims.COLLAPSE),    # the spec's picture
    ((0.99, 0.97, 1.0), (0.15, 0.1, 0.2), False, claims.COLLAPSE),    # ends below chance: still a collapse
    ((0.99, 0.97, 1.0), (0.55, 0.5, 0.6), False, claims.PARTIAL),     # crosses the midway, ends above chance
    ((0.99, 0.97, 1.0), (0.7, 0.65, 0.75), True, claims.NO_FALL),     # never reaches the midway
    ((0.25, 0.0, 0.5), (0.25, 0.0, 0.5), False, claims.NO_SKILL),     # the demo: chance on clean images
    ((0.0, 0.0, 0.0), (0.33, 0.0, 1.0), False, claims.NO_SKILL),      # below chance on clean images
    ((NAN, NAN, NAN), (0.25, 0.2, 0.3), False, claims.UNDEFINED),
])
def test_accuracy_fall(clean, end, censored, verdict):
    assert claims.accuracy_fall(clean, end, censored, 0.25) == verdict


@pytest.mark.parametrize("w, lo, hi, lower, upper, verdict", [
    (0.80, 0.75, 0.86, True, False, claims.LAGS),     # awareness never crosses: W >= 0.80
    (0.07, 0.03, 0.10, False, False, claims.LAGS),    # Smol-2.2B in the spec: small but excluding zero
    (-0.06, -0.2, 0.05, False, False, claims.WITH),   # interval holds zero
    (-0.21, -0.3, -0.1, False, False, claims.LEADS),
    (-1.05, NAN, NAN, False, True, claims.LEADS),     # accuracy never crosses, awareness does: W <= -1.05
    (NAN, NAN, NAN, False, False, claims.UNDEFINED),  # both censored
    (0.1, NAN, NAN, False, False, claims.UNDEFINED),  # no interval: nothing is stated
])
def test_awareness_lag(w, lo, hi, lower, upper, verdict):
    assert claims.awareness_lag(w, lo, hi, lower, upper) == verdict


def test_fall_band_of_a_known_curve():
    v = physics.SWEEP_M
    half = 12.0
    acc = 0.25 + 0.75 / (1 + (half / v) ** 4)       # logistic in log V: 10 % at half * 9**(1/4), 90 % at half / 9**(1/4)
    clean = 1.0
    hi, lo = claims.fall_band(v, acc, clean, 0.25)
    # log-linear interpolation between levels: within a factor 1.3 of the exact quantiles
    assert abs(np.log(hi / (half * 9 ** 0.25))) < np.log(1.3) and abs(np.log(lo / (half / 9 ** 0.25))) < np.log(1.3)
    assert hi > half > lo
    # a flat series has no band
    assert all(np.isnan(claims.fall_band(v, np.full(8, 0.25), 0.25, 0.25)))
    # a series that never loses 90 % of its range: the murky end is undefined
    h, l_ = claims.fall_band(v, np.linspace(0.95, 0.6, 8), 1.0, 0.25)
    assert np.isfinite(h) and np.isnan(l_)
