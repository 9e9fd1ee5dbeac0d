"""murk.report._findings: the phrases the analysis notebooks build their findings from, on small inputs."""

import numpy as np
import pytest

from murk.report import _claims as claims
from murk.report import _findings as findings

NAN = float("nan")


def test_crossing_text_gives_a_bound_without_its_interval():
    assert findings.crossing_text(7.8125, 5.2, 11.4, "") == "7.8 [5.2, 11.4]"
    assert findings.crossing_text(1.953125, 1.0, 3.0, "below") == "≤ 1.95"
    assert findings.crossing_text(250.0, 100.0, 300.0, "above") == "≥ 250"
    assert findings.crossing_text(1.953125, 1.0, 3.0, True) == "≤ 1.95"   # a bool side: True = below
    assert findings.crossing_text(NAN, 1.0, 2.0, "") == "n/a"


def test_w_text_says_a_bound_and_an_undefined_w():
    assert findings.w_text(0.0749, 0.03, 0.1, False, False) == "W = 0.07 [0.03, 0.10]"
    assert findings.w_text(0.8, 0.5, 1.0, True, False) == "W ≥ 0.80"
    assert findings.w_text(-0.3, NAN, NAN, False, True) == "W ≤ -0.30"
    assert findings.w_text(NAN, 0.0, 1.0, False, False) == "W undefined"


@pytest.mark.parametrize("x, text", [(0.934, "0.93"), (0.01, "0.01"), (0.00712, "7.1×10⁻³"),
                                     (3.4e-12, "3.4×10⁻¹²"), (0.0, "0.00"), (NAN, "n/a")])
def test_fmt_mass(x, text):
    assert findings.fmt_mass(x) == text


def test_span_phrase_over_the_models():
    assert findings.span_phrase("t2 accuracy", [0.5, 0.25, NAN]) == "t2 accuracy spans 0.25–0.50"
    assert findings.span_phrase("ECE", [0.1, 0.1]) == "ECE is 0.10"
    assert findings.span_phrase("W", np.array([NAN, NAN])) == "W is undefined"
    assert findings.span_phrase("V", [7.8125], digits=1) == "V is 7.8"


def test_count_phrase():
    assert findings.count_phrase(["a", "b"], 5, "model") == "2 of 5 models (a and b)"
    assert findings.count_phrase(["a", "b", "c"], 3, "model") == "all 3 models (a, b and c)"
    assert findings.count_phrase(["a", "b"], 2, "model") == "both models (a and b)"
    assert findings.count_phrase(["a"], 2, "model") == "1 of 2 models (a)"
    assert findings.count_phrase(["a"], 1, "model") == "the model a"


def test_verdict_groups_groups_by_verdict_and_pools_undefined():
    n = {"verdict.rq2.c_int.fog.t2.m-a": claims.LAGS, "verdict.rq2.c_int.underwater.t2.m-a": claims.WITH,
         "verdict.rq2.c_int.fog.t2.m-b": "undefined: accuracy does not collapse there (RQ1)",
         "verdict.rq2.c_int.underwater.t2.m-b": claims.LAGS, "verdict.rq4.t2.m-a": "plateau"}
    got = findings.verdict_groups(n, "rq2.c_int.{arm}.t2", ["a", "b", "c"], str.upper, lambda m: f"m-{m}",
                                  ["fog", "underwater"])
    assert got == {claims.LAGS: ["A in fog", "B under water"], claims.WITH: ["A under water"],
                   claims.UNDEFINED: ["B in fog"]}
    assert list(got) == [claims.LAGS, claims.WITH, claims.UNDEFINED]   # in the order first met
    # without arms: the name alone; a model without a recorded verdict (c) is skipped
    assert findings.verdict_groups(n, "rq4.t2", ["a", "c"], str.upper, lambda m: f"m-{m}") == {"plateau": ["A"]}
    # the arm's words are the caller's
    assert findings.verdict_groups(n, "rq2.c_int.{arm}.t2", ["a"], str, lambda m: f"m-{m}", ["fog"],
                                   {"fog": "(fog)"}) == {claims.LAGS: ["a (fog)"]}


def test_option_mass_footnote_names_the_models_below_the_threshold():
    text = findings.option_mass_footnote(["A", "B"], ["B"], 0.5)
    assert text.startswith("† Median first-token probability on the option letters on clean images below 0.5 (t2 or "
                           "t3) for A and B: the answer and internal confidence of these models rest on")
    assert text.endswith("their results are not interpreted (expected of random-weight checkpoints: B).")
    assert "this model" in findings.option_mass_footnote(["A"], [], 0.5)
    assert findings.option_mass_footnote([], [], 0.5).startswith("Every model puts a median of at least 0.5")


def test_items_per_model_and_run_words():
    assert findings.items_per_model_words({"A": 2, "B": 4, "C": 3}, 4).startswith(
        "Each model is read out on the first n items of the selection: all 4 for B, 3 for C and 2 for A;")
    assert findings.items_per_model_words({"A": 4, "B": 4}, 4) == "Every model is read out on all 4 items"
    w = findings.run_words("constant", True, "", 4.0, ["`m`"])
    assert "every pixel is placed at 4 m" in w["methods.depth"] and "constant depth" in w["depth_note"]
    assert w["pipeline_check_note"].startswith("**Pipeline check.** The models `m` are tiny randomly initialised")
    w = findings.run_words("depth-anything-v2", False, "org/da", 4.0, [])
    assert w["methods.depth"] == ("Metric depth comes from `depth-anything-v2` (checkpoint `org/da`) "
                                  "[@depthanythingv2], estimated on the clean image")
    assert w["pipeline_check_note"] == "All models are real pretrained checkpoints."


def test_end_of_sweep_and_confident_findings():
    one = findings.end_of_sweep_finding(1.953125, "under water", ["A"], 0.25, [0.25], [0.9], [0.5], [0.6])
    assert one.startswith("At V = 1.95 m under water, for A, t2 accuracy is 0.25 (chance 0.25), the mean internal "
                          "confidence is 0.90,")
    text = findings.confident_finding({"A": ((0.5, 0.25, 0.75), 8), "B": ((0.9, 0.8, 1.0), 20)}, 0.9, 7.8125)
    assert "correct 0.50 [0.25, 0.75] of the time for A (n = 8) and 0.90 [0.80, 1.00] of the time for B (n = 20)." \
        in text and "gave no answer" not in text
    assert findings.confident_finding({"A": ((NAN,) * 3, 0)}, 0.9, 7.8125) == (
        "Pooled over the levels with V ≤ 7.8 m in both arms, A gave no answer with an internal confidence of at "
        "least 0.9.")
