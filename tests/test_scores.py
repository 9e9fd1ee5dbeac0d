"""murk.report._scores: every score of a tiny scores dataset into a numbers file, by key."""

import numpy as np
import xarray as xr

from murk.report import _scores as scores
from murk import report

DIMS = {"model": ["org/m"], "arm": ["fog", "underwater", "blank", "shuffled"], "level": [0, 1, 2], "task": ["t2"],
        "readout": ["correct", "c_int"], "confidence": ["c_int"], "option": ["abstain"], "stat": ["point", "lo", "hi"]}


def _var(dims, value, dtype=float):
    shape = [len(DIMS[d]) for d in dims]
    return dims, np.full(shape, value, dtype=dtype)


def _scores():
    stat = ("model", "arm", "level", "task")
    sc = xr.Dataset({
        "mean": _var((*stat, "readout", "stat"), 0.5), "ece": _var((*stat, "confidence", "stat"), 0.1),
        "auroc": _var((*stat, "confidence", "stat"), 0.7), "coverage": _var((*stat, "option", "stat"), 0.9),
        "risk": _var((*stat, "option", "stat"), 0.2),
        "mono_pairs": _var(("model", "arm", "task", "readout"), 4, int),
        "mono_raw": _var(("model", "arm", "task", "readout"), 0.25),
        "mono_beyond_noise": _var(("model", "arm", "task", "readout"), 0.0),
        "v_acc_blank_m": _var(("model", "arm", "task", "stat"), 7.8125),
        "censored_blank_side": _var(("model", "arm", "task"), "", object),
        "confident_accuracy": _var(("model", "stat"), 0.75), "confident_n": _var(("model",), 12, int)},
        coords={**{d: v for d, v in DIMS.items()}, "visibility_m": ("level", [np.inf, 7.8125, 1.953125])})
    sc["mean"].loc[dict(stat="lo")] = 0.4
    sc["mean"].loc[dict(stat="hi")] = 0.6
    sc["mean"].loc[dict(level=2, readout="correct", stat="point")] = 0.25
    cr = xr.Dataset({
        "v_cross_m": _var(("model", "arm", "task", "readout"), 7.8125),
        "censored_side": _var(("model", "arm", "task", "readout"), "", object),
        "v_lo_m": _var(("model", "arm", "task", "readout"), 5.0), "v_hi_m": _var(("model", "arm", "task", "readout"), 11.0),
        "w": _var(("model", "arm", "task", "readout"), 0.3), "w_lo": _var(("model", "arm", "task", "readout"), 0.1),
        "w_hi": _var(("model", "arm", "task", "readout"), 0.5),
        "w_lower_bound": _var(("model", "arm", "task", "readout"), False, bool),
        "w_upper_bound": _var(("model", "arm", "task", "readout"), False, bool)},
        coords={d: DIMS[d] for d in ("model", "arm", "task", "readout")})
    cr["censored_side"].loc[dict(arm="underwater", readout="c_int")] = "below"   # never reached: the end's bound
    cr["v_cross_m"].loc[dict(arm="underwater", readout="c_int")] = 1.953125
    return sc, cr


def test_record_scores_writes_every_condition_by_key(tmp_path):
    sc, cr = _scores()
    n = report.Numbers(tmp_path / "n.json", cell="num-scores")
    scores.record_scores(n, sc, cr, ["org/m"], lambda m: m.replace("/", "--"), ["fog", "underwater"], 2)
    k = "org--m"
    assert n[f"correct.clean.fog.t2.{k}"] == "0.50" and n[f"correct.clean.fog.t2.{k}.ci"] == "[0.40, 0.60]"
    # the last level is recorded under its visibility and as "end"
    assert n[f"correct.1.953125.fog.t2.{k}"] == n[f"correct.end.fog.t2.{k}"] == "0.25"
    assert f"correct.7.8125.fog.t2.{k}" in n and f"correct.end.blank.t2.{k}" not in n   # physical arms only
    assert n[f"ece.c_int.end.underwater.t2.{k}"] == "0.10" and n[f"risk.abstain.clean.fog.t2.{k}"] == "0.20"
    assert n[f"v.correct.fog.t2.{k}"] == "7.8" and n[f"v.correct.fog.t2.{k}.ci"] == "[5, 11]"
    assert n[f"v.c_int.underwater.t2.{k}"] == "≤ 1.95" and n[f"v.c_int.underwater.t2.{k}.ci"] == ""   # a bound
    assert n[f"w.c_int.fog.t2.{k}"] == "0.30" and f"w.correct.fog.t2.{k}" not in n    # no W of accuracy itself
    assert n[f"mono.c_int.fog.t2.{k}.count"] == "1/4" and n[f"mono.c_int.fog.t2.{k}.sig.count"] == "0/4"
    assert n[f"v.correct_blank.fog.t2.{k}"] == "7.8"
    assert n[f"correct.blank.t2.{k}"] == "0.50" and n[f"correct.shuffled.t2.{k}.ci"] == "[0.40, 0.60]"
    assert n[f"confident.acc.{k}"] == "0.75" and n[f"confident.n.{k}"] == "12"
    assert set(n.provenance.values()) == {"num-scores"}
