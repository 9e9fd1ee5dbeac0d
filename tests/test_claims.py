"""murk.report: a finding is stated only when its interval excludes the null value."""

import numpy as np
import pytest

from murk.report import _claims as claims
from murk.scene import _physics as physics

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
    (-1.05, -1.2, -0.9, False, True, claims.LEADS),   # accuracy never crosses, awareness does: W <= -1.05
    (-1.05, NAN, NAN, False, True, claims.NO_LAG),    # a bound without interval: not confirmed (issue 39)
    (-2.11, -2.11, 0.26, False, True, claims.NO_LAG),  # issue 39: a bound whose interval reaches across 0
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


def test_each_signal_moves_its_own_way():
    """Issue 20: accuracy and confidence fall going murkier, an abstain rate rises; the words follow."""
    assert [claims.direction(s) for s in ("correct", "c_int", "verbal_conf")] == ["falls"] * 3
    assert [claims.direction(s) for s in ("abstain", "abstain2")] == ["rises"] * 2
    with pytest.raises(KeyError, match="known"):
        claims.direction("visibility_hat_m")
    for case in (claims.LAGS, claims.NOT_REACHED, claims.WITH, claims.LEADS, claims.AT_FIRST_LEVEL):
        rise, fall = claims.lag_phrase(case, "abstain"), claims.lag_phrase(case, "c_int")
        assert "fall" not in rise.replace("accuracy falls", ""), (case, rise)   # only accuracy falls
        assert "ris" not in fall, (case, fall)
        assert any(w in rise for w in ("rise", "rising", "risen")), (case, rise)
    with pytest.raises(ValueError, match="unknown lag case"):
        claims.lag_phrase("sideways", "c_int")


@pytest.mark.parametrize("verdict, side, lower, upper, case", [
    (claims.LAGS, "below", True, False, claims.NOT_REACHED),   # never reaches its mid-way value: W >= x
    (claims.LAGS, "", True, False, claims.LAGS),               # crosses; accuracy at the first level bounds W
    (claims.LAGS, "", False, False, claims.LAGS),
    (claims.LEADS, "above", False, True, claims.AT_FIRST_LEVEL),
    (claims.WITH, "below", True, False, claims.BOUNDED),       # W >= a negative number: nothing to state
    (claims.WITH, "", False, False, claims.WITH),
    ("undefined: x", "", False, False, "undefined: x"),
])
def test_lag_case(verdict, side, lower, upper, case):
    assert claims.lag_case(verdict, side, lower, upper) == case


def test_a_censored_signal_is_not_said_to_move():
    """A signal that never reaches its mid-way value within the sweep is said so, not to fall or rise."""
    for signal, verb in (("c_int", "fall"), ("abstain", "rise")):
        s = claims.lag_phrase(claims.NOT_REACHED, signal)
        assert s.startswith(f"does not {verb} to its mid-way value within the sweep") and "lower bound" in s


def test_largest_change_is_by_magnitude_with_its_sign():
    """Issue 20: the spec's SmolVLM case, ImageNet-C accuracy 0.85-0.89 against 0.85 clean: the largest change
    is the largest rise, not the least negative change."""
    diffs = [(0.0, -0.02, 0.02), (0.04, 0.01, 0.07), (0.02, -0.01, 0.05), (0.01, -0.02, 0.04), (0.0, -0.03, 0.03)]
    assert claims.largest_change(diffs) == 1
    assert claims.largest_change([(-0.02, -0.05, 0.0), (0.01, 0.0, 0.02), (-0.3, -0.4, -0.2)]) == 2
    assert claims.largest_change([(NAN, NAN, NAN)]) is None and claims.largest_change([]) is None
    assert claims.change_words(0.04, 0.01, 0.07) == "a rise of 0.04 [0.01, 0.07]"
    assert claims.change_words(-0.3, -0.4, -0.2) == "a fall of 0.30 [0.20, 0.40]"
    assert claims.change_words(0.02, -0.01, 0.05).endswith("its interval holding zero")
    assert claims.change_words(-0.001, -0.01, 0.01).startswith("no change (0.00")   # never "-0.00"


def test_they():
    assert claims.they(1, "its", "their") == "its" and claims.they(2, "its", "their") == "their"
    assert claims.they(3) == "they"


def test_the_blind_spot_closes_only_where_there_was_one():
    """Issue 39: "closes" needs W > 0 before recalibration (a lag) and W holding 0 after; with W holding 0 before
    and after (the planted W = 0 of 0.01 [-0.02, 0.03]) the words say there was no blind spot to close."""
    before_w0 = claims.awareness_lag(0.01, -0.02, 0.03, False, False)
    after_w0 = claims.awareness_lag(0.0, -0.04, 0.05, False, False)
    assert (before_w0, after_w0) == (claims.WITH, claims.WITH)
    words = claims.blind_spot_change(before_w0, after_w0)
    assert "closes" not in words and words.startswith("there was no blind spot to close")
    lag = claims.awareness_lag(0.8, 0.6, 1.0, False, False)
    assert claims.blind_spot_change(lag, after_w0) == "with T(V̂) the blind spot closes (its interval holds 0)"
    assert claims.blind_spot_change(claims.awareness_lag(0.7, 0.7, 0.9, True, False), lag).endswith("stays open")
    assert "reversed" in claims.blind_spot_change(lag, claims.LEADS)
    # a negative W before (the confidence falls first) is no blind spot either; T(V̂) may open one
    for after in (claims.WITH, claims.LAGS, claims.LEADS):
        assert "closes" not in claims.blind_spot_change(claims.LEADS, after)
        assert claims.blind_spot_change(claims.LEADS, after).startswith("there was no blind spot to close")
    assert "opens one" in claims.blind_spot_change(claims.WITH, claims.LAGS)
    for b, a in ((claims.UNDEFINED, claims.WITH), (claims.LAGS, claims.UNDEFINED)):
        assert "cannot be stated" in claims.blind_spot_change(b, a)
def _rc_verdict(signals, correct, image, n_resamples=1000, seed=1):
    from murk.results import _bootstrap
    from murk.results import _selective

    counts = _bootstrap.bootstrap_counts(int(image.max()) + 1, n_resamples, seed)
    point = {s: _selective.aurc(v, correct) for s, v in signals.items()}
    boot = {s: _selective.resampled_aurc(v, correct, counts, image_index=image) for s, v in signals.items()}
    return point, claims.best_signal(point, boot, 0.95)


def test_no_signal_is_named_best_where_two_equally_informative_signals_differ_only_in_granularity():
    """Issue 39: c_int (1.0 clear, 0.25 murky) and a perfect V̂ carry the same information (one error rate on every
    murky level); the sentence names no best signal. Where the murky errors rise as V falls, V̂ is truly better and
    is named, ahead of c_int and of an uninformative score."""
    from test_metrics import planted_signals

    labels = {"c_int": "internal confidence", "v_hat": "V̂ (deployable)", "noise": "noise"}
    signals, correct, image = planted_signals(n_images=40)
    point, verdict = _rc_verdict(signals, correct, image)
    assert verdict[0] is None and verdict[2], (point, verdict)
    words = claims.best_signal_words("M", verdict, labels, "0.12 [0.10, 0.14]")
    other = {"c_int": "v_hat", "v_hat": "c_int"}[verdict[1]]
    assert words == (f"for M, no signal can be named best: the lowest AURC, 0.12 [0.10, 0.14] of {labels[verdict[1]]}, "
                     f"is not below that of {labels[other]} in the interval of their paired difference")

    signals, correct, image = planted_signals(n_images=40, murky_wrong=(0.25, 0.75, 1.0))
    signals["noise"] = np.random.default_rng(2).random(correct.size)
    point, verdict = _rc_verdict(signals, correct, image)
    assert verdict == ("v_hat", "v_hat", []), (point, verdict)
    assert claims.best_signal_words("M", verdict, labels, "0.05 [0.03, 0.07]") == (
        "for M, V̂ (deployable) ranks the answers best (AURC 0.05 [0.03, 0.07]), ahead of every other signal: the "
        "interval of each paired difference excludes 0 in its favour")


def test_best_signal_needs_every_paired_difference():
    r = {"a": np.array([0.10, 0.12, 0.11, 0.13]), "b": np.array([0.20, 0.22, 0.21, 0.25]),
         "c": np.array([0.15, 0.11, 0.16, 0.12])}
    point = {"a": 0.11, "b": 0.22, "c": 0.14}
    assert claims.best_signal(point, r, 0.9) == (None, "a", ["c"])          # a beats b, not c (0.12 vs 0.11)
    assert claims.best_signal({"a": 0.11, "b": 0.22}, {"a": r["a"], "b": r["b"]}, 0.9) == ("a", "a", [])
    # higher is better (a coverage): b beats both
    assert claims.best_signal(point, r, 0.9, lower_is_better=False) == ("b", "b", [])
    # equal statistics up to rounding are not separated; a NaN point is never the leader
    same = {"a": r["a"], "b": r["a"] + 1e-15}
    assert claims.best_signal({"a": 0.11, "b": 0.11}, same, 0.9)[0] is None
    assert claims.best_signal({"a": NAN, "c": 0.14}, {"a": r["a"], "c": r["c"]}, 0.9)[1] == "c"
    with pytest.raises(ValueError, match="different signals"):
        claims.best_signal({"a": 0.1}, {"b": r["b"]})
    with pytest.raises(ValueError, match="one shape"):
        claims.best_signal({"a": 0.1, "b": 0.2}, {"a": r["a"], "b": r["b"][:2]})
