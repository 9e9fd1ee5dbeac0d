"""murk.report._rq_findings: the RQ1 and RQ2/RQ3 sentences and verdicts on two models with known curves."""

import numpy as np
import xarray as xr

from murk.report import _claims as claims
from murk.report import _rq_findings as rq
from murk import report

MODELS = ["org/a", "org/b"]
VIS = np.array([np.inf, 62.5, 7.8125, 1.953125])
KEY = {"org/a": "org--a", "org/b": "org--b"}


def _means(series):
    """Condition means (model, arm, task, readout, level): ``series[model][readout]`` over the levels."""
    ro = ["correct", "c_int"]
    v = np.array([[[[series[m][r] for r in ro]]] for m in MODELS], float)        # (model, arm, task, readout, level)
    coords = {"model": MODELS, "arm": ["fog"], "task": ["t2"], "readout": ro, "level": np.arange(4)}
    return xr.Dataset({"mean": (("model", "arm", "task", "readout", "level"), v)}, coords=coords)


def _scores(means, half_width=0.05):
    m = means["mean"]
    return xr.Dataset({"mean": xr.concat([m, m - half_width, m + half_width], dim="stat").assign_coords(
        stat=["point", "lo", "hi"])})


def _cross(**per_model):
    """Crossings (model, arm, task, readout) with the given values per variable: {var: {model: value}}."""
    shape = (2, 1, 1, 2)
    coords = {"model": MODELS, "arm": ["fog"], "task": ["t2"], "readout": ["correct", "c_int"]}
    dims = tuple(coords)
    out = {}
    for var, default in (("v_cross_m", 7.8125), ("v_lo_m", 5.0), ("v_hi_m", 11.0), ("censored", False),
                         ("censored_side", ""), ("w", np.nan), ("w_lo", np.nan), ("w_hi", np.nan),
                         ("w_lower_bound", False), ("w_upper_bound", False), ("w_p", np.nan), ("w_p_margin", np.nan)):
        a = np.full(shape, default, dtype=object if var == "censored_side" else type(default) if
                    isinstance(default, bool) else float)
        for i, mdl in enumerate(MODELS):
            if mdl in per_model.get(var, {}):
                a[i] = per_model[var][mdl]
        out[var] = (dims, a)
    return xr.Dataset(out, coords=coords)


CURVES = {"org/a": {"correct": [0.9, 0.9, 0.5, 0.25], "c_int": [0.9, 0.9, 0.9, 0.6]},
          "org/b": {"correct": [0.25, 0.25, 0.25, 0.25], "c_int": [0.5, 0.5, 0.5, 0.5]}}


def test_accuracy_finding_states_a_collapse_and_no_skill(tmp_path):
    means = _means(CURVES)
    n, band = report.Numbers(tmp_path / "n.json", cell="num-rq1"), {}
    text = rq.accuracy_finding(n, _scores(means), means, _cross(), MODELS, lambda m: m[-1].upper(), KEY.get, "fog",
                               "t2", 0.25, VIS, 3, band)
    assert n["verdict.rq1.fog.t2.org--a"] == claims.COLLAPSE and n["verdict.rq1.fog.t2.org--b"] == claims.NO_SKILL
    assert text.startswith("In fog, t2 accuracy collapses to chance for A (clean 0.90, V_acc = 7.8 [5.0, 11.0] m")
    assert "the fall from ten to ninety percent of the clean-to-chance range lies between V = " in text
    assert "t2 accuracy is not above chance (0.25) even on the clean image for B" in text
    assert set(band) == {("org/a", "fog", "t2")} and n["band.fog.t2.org--a"].endswith(tuple("0123456789"))
    # the same model read as never reaching its mid-way value: no collapse is claimed
    n2 = report.Numbers(tmp_path / "n2.json", cell="num-rq1")
    text = rq.accuracy_finding(n2, _scores(means), means, _cross(censored={"org/a": True},
                                                                 censored_side={"org/a": "below"}),
                               MODELS, lambda m: m[-1].upper(), KEY.get, "fog", "t2", 0.25, VIS, 3, {})
    assert n2["verdict.rq1.fog.t2.org--a"] != claims.COLLAPSE and "collapses" not in text


def test_lag_finding_reads_w_only_where_accuracy_collapses(tmp_path):
    means = _means(CURVES)
    n = report.Numbers(tmp_path / "n.json", cell="num-rq2")
    n["verdict.rq1.fog.t2.org--a"], n["verdict.rq1.fog.t2.org--b"] = claims.COLLAPSE, claims.NO_SKILL
    cross = _cross(w={"org/a": 0.5}, w_lo={"org/a": 0.3}, w_hi={"org/a": 0.7}, w_p={"org/a": 0.001},
                   w_p_margin={"org/a": 0.9})
    text = rq.lag_finding(n, means, cross, MODELS, lambda m: m[-1].upper(), KEY.get, ["fog"], "c_int", "rq2", "t2",
                          np.log10(2), 0.95)
    assert n["verdict.rq2.c_int.fog.t2.org--a"] == claims.LAGS
    assert n["verdict.rq2.c_int.fog.t2.org--b"] == "undefined: accuracy does not collapse there (RQ1)"
    assert n["lag.family.rq2.c_int.t2"] == "1"          # only the pair whose W is read is in the family
    assert "The internal confidence (t2)" in text and "A (in fog: W = 0.50 [0.30, 0.70])" in text
    assert "No lag of the internal confidence (t2) can be stated for B (in fog): accuracy does not collapse" in text
    # W's p-value not below alpha once Holm-adjusted: no lag is stated
    n["verdict.rq1.fog.t2.org--b"] = claims.COLLAPSE
    cross = _cross(w={"org/a": 0.5, "org/b": 0.5}, w_lo={"org/a": 0.3, "org/b": 0.3}, w_hi={"org/a": 0.7, "org/b": 0.7},
                   w_p={"org/a": 0.04, "org/b": 0.04}, w_p_margin={"org/a": 0.9, "org/b": 0.9})
    rq.lag_finding(n, means, cross, MODELS, str, KEY.get, ["fog"], "c_int", "rq2", "t2", np.log10(2), 0.95)
    assert n["verdict.rq2.c_int.fog.t2.org--a"] != claims.LAGS and n["lag.family.rq2.c_int.t2"] == "2"


def test_wording_finding_says_which_wording_is_chosen_more_often(tmp_path):
    v = np.full((2, 1, 1, 1, 2, 3), 0.3)      # (model, arm, level, task, readout, stat): b at 0.30 with both
    v[0, ..., 0, :], v[0, ..., 1, :] = 0.6, 0.2   # a: the main wording 0.60, "I don't know" 0.20
    sc = xr.Dataset({"mean": (("model", "arm", "level", "task", "readout", "stat"), v)},
                    coords={"model": MODELS, "arm": ["fog"], "level": [2], "task": ["t2"],
                            "readout": ["abstain", "abstain2"], "stat": ["point", "lo", "hi"]})
    diffs = {("org/a", "fog"): (0.4, 0.2, 0.6), ("org/b", "fog"): (0.0, -0.1, 0.1)}
    n = report.Numbers(tmp_path / "n.json", cell="num-rq3")
    text = rq.wording_finding(n, sc, diffs, MODELS, lambda m: m[-1].upper(), KEY.get, ["fog"], "t2", 2, 7.8125)
    assert n["verdict.rq3.wording.fog.t2.org--a"] == claims.ABOVE and n["verdict.rq3.wording.fog.t2.org--b"] == claims.AT
    assert n["diff.abstain_abstain2.fog.t2.org--a"] == "0.40" and n["diff.abstain_abstain2.fog.t2.org--a.ci"] == "[0.20, 0.60]"
    assert text.startswith("At V = 7.8 m (t2, main wording against “I don't know”) the main wording is chosen more "
                           "often by A (in fog: 0.60 against 0.20, difference 0.40 [0.20, 0.60])")
    assert "no wording effect is observed for B (in fog: 0.30 against 0.30" in text


def test_nominal_finding_places_the_severities_against_the_band(tmp_path):
    acc = xr.DataArray(np.full((2, 2, 6, 1), 0.8), dims=("model", "arm", "level", "task"),
                       coords={"model": MODELS, "arm": ["fog", "imagenet_c"], "level": np.arange(6), "task": ["t2"]})
    cross = _cross(v_hi_m={"org/a": 20.0, "org/b": 20.0})
    veq = np.array([200.0, 150.0, 100.0, 60.0, 30.0])
    flat = [(0.0, -0.05, 0.05)] * 5                                       # no change from clean at any severity
    n = report.Numbers(tmp_path / "n.json", cell="num-rq4")
    n["verdict.rq1.fog.t2.org--a"], n["verdict.rq1.fog.t2.org--b"] = claims.COLLAPSE, claims.NO_FALL
    text = rq.nominal_finding(n, MODELS, lambda m: m[-1].upper(), KEY.get, acc, cross,
                              {("org/a", "fog", "t2"): (25.0, 3.0)}, veq, {"org/a": flat, "org/b": flat}, True)
    for m in MODELS:   # the verdict is murk.report.band_verdict's, by position and by accuracy
        edge = 25.0 if m == "org/a" else 20.0
        assert n[f"verdict.rq4.t2.{KEY[m]}"] == claims.band_verdict(n[f"verdict.rq1.fog.t2.{KEY[m]}"], veq, edge, flat)
    assert n["verdict.rq4.t2.org--a"] == claims.PLATEAU and "on the plateau of accuracy, for A (its fog accuracy" in text
    assert "starts to fall at V = 25 m" in text and "median V_eq 30–200 m" in text
    assert n["rq4.largest_change.verdict.t2.org--a"] == claims.AT
    assert "cannot be said for B" in text                               # no collapse in fog: not stated
    n2 = report.Numbers(tmp_path / "n2.json", cell="num-rq4")
    n2.update({k: v for k, v in n.items() if k.startswith("verdict.rq1")})
    text = rq.nominal_finding(n2, MODELS, str, KEY.get, acc, cross, {}, veq, {"org/a": flat, "org/b": flat}, False)
    assert n2["verdict.rq4.t2.org--a"] == "not computed" and text.endswith("the failure band is not stated.")


def test_control_and_t3_bias_findings_follow_the_intervals():
    chance = 0.5
    text = rq.control_finding("shuffled", "t3", {"A": (0.5, 0.4, 0.6), "B": (0.3, 0.2, 0.4),
                                                  "C": (np.nan, np.nan, np.nan)}, chance)
    assert text.startswith("On the shuffled image, t3 accuracy is at chance (0.50) for A (0.50 [0.40, 0.60]).")
    assert "t3 accuracy is below chance for B" in text and "no t3 accuracy could be estimated for C" in text
    assert "above chance" not in text
    # the interval, not the point, decides: a point above chance whose interval holds it is "at chance"
    assert "at chance" in rq.control_finding("blank", "t3", {"A": (0.6, 0.45, 0.75)}, chance)
    bias = rq.t3_bias_finding({"A": (0.8, 0.6, 1.0), "B": (-0.5, -0.7, -0.3), "C": (0.0, -0.1, 0.1)})
    assert "answered “no” more often than the truth warrants by A" in bias
    assert "answered “yes” more often than the truth warrants by B" in bias
    assert "no answer bias of t3 is observed for C" in bias


def test_verbal_rates_finding_says_how_often_a_confidence_was_read():
    w = rq.verbal_rates_finding({"A": (10, 0.9, 0.1), "B": (4, 0.0, np.nan), "C": (0, np.nan, np.nan)}, 48)
    assert w["verbal_rates"] == (
        "Verbalized confidence (main wording, both physical arms, every level and task; a number touching the cut "
        "counts as missing): of the 10 continuations of A, a share of 0.90 held a parseable confidence and 0.10 were "
        "cut by the 48-token limit; B: no parseable confidence in 4 continuations, of which whether they were cut by "
        "the token limit was not recorded; C was asked for none.")
    assert w["verbal_parse"].startswith("B gave no parseable confidence: its verbalized confidence has no mean")
    assert rq.verbal_rates_finding({"A": (3, 0.5, 0.0)}, 48)["verbal_parse"] == \
        "Every model produced a parseable verbalized confidence."
