"""Issue 39, item 2: verdict words that match their intervals, and verdicts over a family of tests controlled
for multiplicity (Holm), on planted truths."""

from __future__ import annotations

import math

import numpy as np
import pytest
import xarray as xr

from murk.report import _claims as claims
from murk.results import _bootstrap
from murk.results import _diagnostics as dg
from murk.results import _metrics as metrics
from murk.results import _multiplicity
from murk.scene import _physics as physics

NAN = float("nan")
STEP = metrics.level_step_decades(physics.SWEEP_M)   # one level of the study's sweep, from the design


def test_one_sweep_level_is_read_from_the_design():
    assert STEP == pytest.approx(math.log10(2), abs=1e-9)   # the sweep halves V from level to level
    assert metrics.level_step_decades([100.0, 10.0, 1.0]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="two distinct positive visibilities"):
        metrics.level_step_decades([5.0])


def test_falls_together_only_where_the_interval_excludes_a_lag_of_one_level():
    """The issue's case: W = 0.05 [-0.67, 1.10] holds 0 but admits a lag of a factor 12 in visibility: no lag can
    be established, and nothing says the signal falls together with accuracy. A narrow interval still does."""
    wide = claims.awareness_lag(0.05, -0.67, 1.10, False, False, margin=STEP)
    assert wide == claims.NO_LAG
    phrase = claims.lag_phrase(claims.lag_case(wide), "c_int")
    assert "no lag can be established" in phrase and "together" not in phrase
    assert "rising" in claims.lag_phrase(claims.NO_LAG, "abstain")   # an abstain rate keeps its direction
    assert claims.awareness_lag(0.05, -0.2, 0.25, False, False, margin=STEP) == claims.WITH
    assert claims.awareness_lag(0.05, -0.2, 0.35, False, False, margin=STEP) == claims.NO_LAG   # just over a level
    assert claims.lag_phrase(claims.WITH, "c_int").startswith("falls together with accuracy")


def test_a_bound_is_stated_only_where_its_interval_keeps_its_side():
    """"≤ -2.11 [-2.11, 0.26]": the bound's resamples reach above 0, so no lead is stated, and the sentence says
    that the bound holds nothing."""
    v = claims.awareness_lag(-2.11, -2.11, 0.26, False, True, margin=STEP)
    assert v == claims.NO_LAG and claims.lag_case(v, "", False, True) == claims.BOUNDED
    assert claims.awareness_lag(0.8, 0.75, 0.86, True, False, margin=STEP) == claims.LAGS


def _replicates(center: float, spread: float, n: int = 2000, seed: int = 0) -> np.ndarray:
    return center + spread * np.random.default_rng(seed).standard_normal(n)


@pytest.mark.parametrize("center", [0.0, 0.05, 0.09, 0.12, -0.1])
def test_bootstrap_p_values_agree_with_the_percentile_interval(center):
    """p <= alpha exactly where the percentile interval at 1 - alpha excludes the null (or lies within the
    margin): the p-value is the interval's own verdict, so adjusting it adjusts the interval's level."""
    b = _replicates(center, 0.05)
    for alpha in (0.05, 0.01):
        lo, hi = _bootstrap.percentile_interval(b, 1 - alpha)
        assert (_multiplicity.bootstrap_p_value(b, 0.0) <= alpha) == (lo > 0 or hi < 0), (center, alpha)
        assert (_multiplicity.equivalence_p_value(b, 0.2) <= alpha) == (-0.2 < lo and hi < 0.2), (center, alpha)
    assert _multiplicity.bootstrap_p_value(b, 0.0, side="greater") == pytest.approx(min(1.0, 2 * np.mean(b <= 0)))
    assert np.isnan(_multiplicity.bootstrap_p_value(np.full(5, np.nan)))
    with pytest.raises(ValueError, match="side"):
        _multiplicity.bootstrap_p_value(b, side="up")
    with pytest.raises(ValueError, match="margin"):
        _multiplicity.equivalence_p_value(b, 0.0)


def test_holm_adjusts_a_family_step_down():
    """Holm (1979) by hand: sorted p 0.01, 0.02, 0.03, 0.04 of four tests -> 0.04, 0.06, 0.06, 0.06; a NaN is no
    test (the family has three members then); the adjusted values never fall below the raw ones."""
    assert _multiplicity.holm([0.04, 0.01, 0.03, 0.02]).tolist() == pytest.approx([0.06, 0.04, 0.06, 0.06])
    assert _multiplicity.holm([0.01, np.nan, 0.2, 0.04]).tolist()[0] == pytest.approx(0.03)
    assert (np.isnan(_multiplicity.holm([0.01, np.nan])[1])
            and _multiplicity.holm([0.01, np.nan])[0] == pytest.approx(0.01))
    p = np.random.default_rng(1).uniform(size=(3, 4))
    adj = _multiplicity.holm(p)
    assert adj.shape == p.shape and np.all(adj >= p) and np.all(adj <= np.minimum(1, p.size * p) + 1e-12)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        _multiplicity.holm([1.5])


def test_a_lag_among_many_is_stated_only_after_holm():
    """Eight model-arm lags, all planted at W = 0: by chance one resample cloud lies above 0 at the 95 % level
    (W = 0.12, p = 0.02). Unadjusted it would be "lags"; within the family of eight it is not."""
    fam = [_replicates(0.0, 0.05, seed=s) for s in range(7)] + [_replicates(0.12, 0.05, seed=9)]
    p = np.array([_multiplicity.bootstrap_p_value(b, 0.0) for b in fam])
    pm = np.array([_multiplicity.equivalence_p_value(b, STEP) for b in fam])
    lo, hi = _bootstrap.percentile_interval(fam[-1])
    assert claims.awareness_lag(0.12, lo, hi, False, False, margin=STEP) == claims.LAGS   # the uncorrected verdict
    adj, adj_m = _multiplicity.holm(p), _multiplicity.holm(pm)
    v = claims.awareness_lag(0.12, lo, hi, False, False, margin=STEP, p=adj[-1], p_margin=adj_m[-1])
    assert v != claims.LAGS and v == claims.WITH   # |W| still excluded beyond one level
    assert all(claims.awareness_lag(0.0, *_bootstrap.percentile_interval(b), False, False, margin=STEP, p=a,
                                    p_margin=am)
               == claims.WITH for b, a, am in zip(fam[:7], adj[:7], adj_m[:7]))


def _floor(n_correct: int, n: int, seed: int = 0):
    """A control's accuracy, its interval and its bootstrap replicates (1000 resamples)."""
    x = np.zeros(n)
    x[:n_correct] = 1.0
    counts = _bootstrap.bootstrap_counts(n, 1000, seed)
    b = _bootstrap.resampled_means(x, counts)
    lo, hi = _bootstrap.percentile_interval(b)
    return (float(x.mean()), float(lo), float(hi)), b


def test_an_at_chance_floor_among_several_is_no_longer_declared_answerable():
    """The issue's planted case: eight control floors of two models (blank and shuffled image, t2 and t3), all
    at chance in truth; one t3 floor came out at 0.58 [0.51, 0.66] on 200 images. Alone, its interval excludes
    chance and the verdict was "answerable without the image"; over the family of eight (Holm) it is not. A
    real confound in the same family (0.11, the pilot's blank floor) is still found."""
    planted = [(_floor(50, 200, s), 0.25) for s in range(3)] + [(_floor(100, 200, s), 0.5) for s in range(3, 6)]
    planted.append((_floor(116, 200, 6), 0.5))
    (point, lo, hi), _ = planted[-1][0]
    assert lo > 0.5 and dg._floor_verdict(point, lo, hi, 0.5) == dg.ABOVE_GUESSER   # the uncorrected verdict
    estimates = [e for (e, _), _ in planted] + [_floor(22, 200, 7)[0]]
    replicates = [b for (_, b), _ in planted] + [_floor(22, 200, 7)[1]]
    chance = [c for _, c in planted] + [0.25]
    verdicts = dg.floor_verdicts(estimates, replicates, chance)
    assert verdicts[6] == dg.NO_CONFOUND, verdicts
    assert verdicts[:6] == [dg.NO_CONFOUND] * 6 and verdicts[7] == dg.BELOW_CHANCE
    # the guesser is the reference above which a floor says "answerable": a high guesser explains a high floor
    assert dg.floor_verdicts([(0.9, 0.85, 0.95)], [np.full(100, 0.9)], [0.25], guesser=[0.95]) == [dg.NO_CONFOUND]
    assert dg.floor_verdicts([(0.9, 0.85, 0.95)], [np.full(100, 0.9)], [0.25]) == [dg.ABOVE_GUESSER]
    assert dg.floor_verdicts([(NAN, NAN, NAN)], [np.full(10, NAN)], [0.25]) == [dg.UNDEFINED]


def test_the_severities_reach_the_band_only_where_accuracy_falls_there():
    """RQ4: a model whose accuracy at the severities placed in its failure band rose above clean (the spec's
    SmolVLM case) is not said to be reached by them; one whose accuracy fell there is."""
    veq = [110.0, 82.0, 67.0, 65.0, 55.0]
    rose = [(0.0, -0.02, 0.02), (0.04, 0.01, 0.07), (0.02, -0.01, 0.05), (0.01, -0.02, 0.04), (0.03, 0.0, 0.06)]
    fell = rose[:4] + [(-0.2, -0.3, -0.1)]
    assert claims.band_verdict(claims.COLLAPSE, veq, 70.0, rose) == claims.IN_BAND_NO_FALL
    assert claims.band_verdict(claims.COLLAPSE, veq, 70.0, fell) == claims.REACHES_BAND
    assert claims.band_verdict(claims.COLLAPSE, veq, 50.0, fell) == claims.PLATEAU
    assert claims.band_verdict(claims.NO_SKILL, veq, 70.0, fell) == claims.NO_COLLAPSE
    assert claims.band_verdict(claims.PARTIAL, [NAN] * 5, 70.0, fell) == claims.UNDEFINED
