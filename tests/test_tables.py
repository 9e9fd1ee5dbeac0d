"""murk.report._tables: the sweep table, the diagnostics' and the marker's sentences, the design comparison rows."""

import numpy as np
import xarray as xr

from murk.report import _tables as tables
from murk.results import ABOVE_GUESSER, BELOW_CHANCE, SIGNALS


def test_sweep_table_has_a_row_per_model_arm_and_level():
    shape = (1, 2, 3, 1, len(SIGNALS), 3)
    v = np.broadcast_to(np.array([0.5, 0.4, 0.6]), shape).copy()
    v[0, 1, 2, 0, 0] = [0.25, np.nan, np.nan]                      # a point without interval
    sc = xr.Dataset({"mean": (("model", "arm", "level", "task", "readout", "stat"), v)},
                    coords={"model": ["org/a"], "arm": ["fog", "underwater"], "level": [0, 1, 2], "task": ["t2"],
                            "readout": list(SIGNALS), "stat": ["point", "lo", "hi"]})
    md = tables.sweep_table(sc, ["org/a"], lambda m: "A", ["fog", "underwater"], np.array([np.inf, 7.8125, 1.953125]),
                            "t2")
    lines = md.strip().split("\n")
    assert len(lines) == 2 + 6
    assert lines[0] == "| model | arm | V (m) | accuracy | c_int | verbal | abstain | abstain₂ |"
    assert lines[2].startswith("| A | fog | clean | 0.50<br>[0.40, 0.60] |")   # the interval on its own line
    assert lines[-1].startswith("| A | underwater | 1.95 | 0.25 |")
    assert tables.sweep_table(sc, [], str, ["fog"], np.array([np.inf]), "t2") == "*(no rows)*\n"


def test_diagnostic_finding_names_each_confound():
    text = tables.diagnostic_finding({("blank", "t2", BELOW_CHANCE): ["A (0.10 [0.05, 0.15])"],
                                      ("shuffled", "t3", ABOVE_GUESSER): ["B (0.90 [0.85, 0.95])"]},
                                     {"no": ["A (0.95)", "B (0.93)"]}, ["C"])
    assert text.startswith("On the blank image the t2 floor lies below chance for A (0.10 [0.05, 0.15]):")
    assert "On the shuffled image the t3 floor lies above the prior guesser for B" in text
    assert "On the blank image A (0.95) and B (0.93) answer “no” to at least 0.90 of the t3 questions" in text
    assert text.endswith("For C the controls show no design confound: its floors are at chance or between chance "
                         "and the prior guesser, and no answer dominates t3 on the blank image.")
    assert tables.diagnostic_finding({}, {"yes": ["A (0.95)"]}, []).startswith("On the blank image A (0.95) answers")


def test_marker_finding():
    assert tables.marker_finding({"clean": np.nan}, 3, 1.953125).startswith("No item could be rendered")
    text = tables.marker_finding({"clean": 0.0, "fog": 0.0, "underwater": 1.0}, 8, 3.90625)
    assert "the 8-px box is hard to see" in text and "at 3.9 m on none of the items in fog and all under water" in text
    assert tables.marker_finding({"clean": 0.0, "fog": 0.0, "underwater": 0.0}, 3, 1.953125).endswith(
        "the marker stays visible at the murkiest level.")


def test_design_rows():
    d = {"floor.blank.t2": 0.25, "floor.shuffled.t2": 0.3, "t3_blank_top_share": 0.95, "v_acc.fog.t2": 7.8125,
         "v_acc_censored.fog.t2": False, "v_acc.underwater.t2": 1.953125, "v_acc_censored.underwater.t2": True}
    assert tables.design_v_acc(d, "fog") == "7.8 m" and tables.design_v_acc(d, "underwater", "") == "≤ 1.95"
    assert tables.design_row("A", "this design", d, 4) == {
        "VLM": "A", "design": "this design", "images": "4", "blank t2": "0.25", "shuffled t2": "0.30",
        "t3 blank top share": "0.95", "V_acc fog (m)": "7.8", "V_acc underwater (m)": "≤ 1.95"}


def test_crossings_and_auroc_tables():
    from test_rq_findings import _cross   # crossings (model, arm, task, readout) of two models, fog, t2

    cross = _cross(w={"org/a": 0.5}, w_lo={"org/a": 0.3}, w_hi={"org/a": 0.7}, censored_side={"org/b": "below"},
                   v_cross_m={"org/b": 1.953125})
    cross = cross.reindex(readout=["correct", *tables.W_COLUMNS]).fillna(np.nan)
    cross = xr.concat([cross, cross.assign_coords(task=["t3"])], "task")
    for var in ("v_acc_blank_m", "v_acc_blank_lo_m", "v_acc_blank_hi_m"):
        cross[var] = cross["v_cross_m"].isel(readout=0, drop=True)
    cross["censored_blank_side"] = cross["censored_side"].isel(readout=0, drop=True)
    md = tables.crossings_table(cross, ["org/a", "org/b"], lambda m: m[-1].upper(), ["fog"])
    lines = md.strip().split("\n")
    assert lines[0] == ("| model | arm | task | V_acc (m) | V_acc, blank (m) | W c_int | W verbal | W abstain | "
                        "W abstain₂ |")
    assert len(lines) == 2 + 2 * 2 and lines[2].startswith("| A | fog | t2 |")
    assert "| B | fog | t2 | ≤ 1.95 | ≤ 1.95 |" in md        # a censored crossing is the bound it is
    sc = xr.Dataset({"auroc": (("model", "arm", "level", "task", "confidence", "stat"),
                               np.broadcast_to([0.7, 0.6, 0.8], (2, 1, 2, 1, 1, 3)).copy())},
                    coords={"model": ["org/a", "org/b"], "arm": ["fog"], "level": [0, 1], "task": ["t2"],
                            "confidence": ["c_int"], "stat": ["point", "lo", "hi"]})
    md = tables.auroc_table(sc, ["org/a", "org/b"], lambda m: m[-1].upper(), ["fog"], np.array([np.inf, 7.8125]))
    assert md.split("\n")[0] == "| arm | V (m) | A | B |" and "| fog | 7.8 | 0.70<br>[0.60, 0.80] |" in md


def test_end_of_sweep_table_says_when_no_verbal_confidence_was_parsed():
    models, stat = ["org/a", "org/b"], ["point", "lo", "hi"]
    coords = {"model": models, "arm": ["fog"], "level": [0, 1], "task": ["t2"]}
    sc = xr.Dataset({"mean": (("model", "arm", "level", "task", "readout", "stat"),
                              np.broadcast_to([0.5, 0.4, 0.6], (2, 1, 2, 1, 3, 3)).copy()),
                     "ece": (("model", "arm", "level", "task", "confidence", "stat"),
                             np.broadcast_to([0.2, 0.1, 0.3], (2, 1, 2, 1, 1, 3)).copy())},
                    coords={**coords, "readout": ["correct", "c_int", "verbal_conf"], "confidence": ["c_int"],
                            "stat": stat})
    rates = xr.Dataset({"n_asked": (("model", "arm", "level", "task", "wording"), [[[[[10]], [[10]]]], [[[[10]], [[10]]]]]),
                        "parse_rate": (("model", "arm", "level", "task", "wording"),
                                       [[[[[1.0]], [[0.8]]]], [[[[1.0]], [[0.0]]]]]),
                        "limit_hit_rate": (("model", "arm", "level", "task", "wording"),
                                           [[[[[0.0]], [[0.1]]]], [[[[0.0]], [[1.0]]]]])},
                       coords={**coords, "wording": ["v1"]})
    md = tables.end_of_sweep_table(sc, rates, models, lambda m: m[-1].upper(), ["fog"], np.array([np.inf, 1.953125]), 1)
    lines = md.strip().split("\n")
    assert lines[0] == "| model | arm | V (m) | accuracy | mean c_int | mean verbal | verbal parsed / cut | ECE c_int |"
    assert lines[2] == ("| A | fog | 1.95 | 0.50 [0.40, 0.60] | 0.50 [0.40, 0.60] | 0.50 [0.40, 0.60] | 0.80 / 0.10 | "
                        "0.20 [0.10, 0.30] |")
    assert "| B | fog | 1.95 | 0.50 [0.40, 0.60] | 0.50 [0.40, 0.60] | no parseable confidence | 0.00 / 1.00 |" in md


def test_design_comparison_words():
    here = {"floor.blank.t2": 0.1, "floor.shuffled.t2": 0.2, "t3_blank_top_share": 0.95, "v_acc.fog.t2": 3.90625,
            "v_acc_censored.fog.t2": True}
    there = {"floor.blank.t2": 0.25, "floor.shuffled.t2": 0.25, "t3_blank_top_share": 0.55, "v_acc.fog.t2": 7.8125,
             "v_acc_censored.fog.t2": False}
    assert tables.design_comparison_words("A", 3, here, there, 0.25) == (
        "For A, on the 3 images both runs read out, the blank-image t2 accuracy is 0.10 in this design and 0.25 in "
        "the compared one (chance 0.25), the shuffled-image one 0.20 and 0.25; t3's most frequent blank-image answer "
        "takes 0.95 and 0.55 of the questions; V_acc (t2) in fog is ≤ 3.9 m and 7.8 m.")


def test_nominal_table_shows_only_the_reasons_that_removed_a_pair():
    import pandas as pd

    tab = pd.DataFrame({"median_v_eq_gain_m": [120.0, 40.0], "spread_p90_p10": [1.5, np.nan],
                        "median_v_eq_std_ratio_m": [110.0, 38.0], "n_images": [8, 7], "n_no_root": [0, 1],
                        "n_saturated": [0, 0]}, index=pd.Index([1, 2], name="severity"))
    tab.attrs.update(monotone_share=0.875, monotone_n=8)
    md = tables.nominal_table(tab, "constant", True)
    lines = md.split("\n")
    assert lines[0] == ("| ImageNet-C severity | median V_eq (gain), m | P90/P10 across images | median V_eq (std ratio), m "
                        "| images | removed: no root |")                 # saturated removed nothing: no column
    assert lines[2] == "| 1 | 120 | 1.5× | 110 | 8 | 0 |" and lines[3] == "| 2 | 40 | n/a | 38 | 7 | 1 |"
    assert lines[-1] == ("Share of images whose gain-matched V_eq decreases monotonically over severities 1–2: 88 % (of "
                         "8 images with a V_eq at every severity). Depth: constant (approximate: metres rest on the "
                         "assumed depth scale).")
    assert tables.nominal_table(tab, "depth-anything", False).endswith("Depth: depth-anything.")
