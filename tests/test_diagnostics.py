"""Design diagnostics from the controls (murk.results; issue 26, item 2: the kernels)."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from murk.results import _bootstrap
from murk.results import _diagnostics as dg


def _floor(n_correct: int, n: int, seed: int = 0) -> tuple[float, float, float]:
    """A control's accuracy with murk's bootstrap interval (spec Sec. III: 1000 resamples, 95 %)."""
    x = np.zeros(n)
    x[:n_correct] = 1.0
    b = _bootstrap._bootstrap_mean(xr.DataArray(x, dims="image"), n_resamples=1000, seed=seed)
    return float(b["mean"]), float(b["lo"]), float(b["hi"])


@pytest.mark.parametrize("n_correct", [22, 32])  # 0.11 and 0.16 of the pilot's 200 images
def test_the_pilots_blank_floor_is_below_chance(n_correct):
    """Spec Sec. IV (a): the pilot's blank-image t2 accuracy, 0.11-0.16 on 200 images, lies below chance 0.25:
    the verdict names the distractor prior."""
    point, lo, hi = _floor(n_correct, 200)
    v = dg._floor_verdict(point, lo, hi, dg._chance_accuracy(4))
    assert v == dg.BELOW_CHANCE and dg.VERDICT_TEXT[v] == "the distractors carry a prior the model exploits against"


@pytest.mark.parametrize("n_correct, n", [(250, 1000), (240, 1000), (260, 1000)])  # spec: 0.25, 0.24, 0.26
def test_the_main_designs_blank_floor_at_chance_finds_no_confound(n_correct, n):
    assert dg._floor_verdict(*_floor(n_correct, n), dg._chance_accuracy(4)) == dg.NO_CONFOUND


def test_a_floor_above_the_prior_guesser_says_the_question_is_answerable_without_the_image():
    point, lo, hi = _floor(600, 1000)
    assert dg._floor_verdict(point, lo, hi, 0.25, guesser=0.4) == dg.ABOVE_GUESSER
    assert dg.VERDICT_TEXT[dg.ABOVE_GUESSER] == "the question is answerable without the image"
    assert dg._floor_verdict(point, lo, hi, 0.25, guesser=0.7) == dg.NO_CONFOUND  # the prior explains it
    assert dg._floor_verdict(np.nan, np.nan, np.nan, 0.25) == dg.UNDEFINED


def test_the_prior_guesser_is_at_chance_on_a_prior_matched_design_and_high_without():
    cats = ["car", "dog", "cup", "kite"]
    rng = np.random.default_rng(0)
    # prior-matched: every category is the answer equally often, options a permutation of the four
    opts, ans = [], []
    for i in range(400):
        o = list(rng.permutation(cats))
        opts.append(o)
        ans.append(o.index(cats[i % 4]))
    assert dg.prior_guesser_accuracy(opts, ans) == pytest.approx(0.25)
    # not matched: 'person' is the answer of most questions, the distractors are rare categories
    opts = [["person", "kite", "cup", "dog"]] * 8 + [["car", "person", "cup", "dog"]] * 2
    ans = [0] * 8 + [0] * 2
    assert dg.prior_guesser_accuracy(opts, ans) == pytest.approx(0.8)  # picks 'person': right 8 of 10
    # an explicit prior (e.g. COCO's category frequencies) overrides the design's own
    assert dg.prior_guesser_accuracy(opts, ans, prior={"dog": 5.0}) == 0.0
    assert np.isnan(dg.prior_guesser_accuracy([], []))
    with pytest.raises(ValueError, match="outside the options"):
        dg.prior_guesser_accuracy([["a", "b"]], [2])
    with pytest.raises(ValueError, match="2 option lists but 1 answer"):
        dg.prior_guesser_accuracy([["a", "b"], ["a", "b"]], [0])


def test_the_binary_guesser_of_t3_is_at_chance():
    assert dg.majority_guesser_accuracy(["yes", "no"] * 50) == 0.5 == dg._chance_accuracy(2)
    assert dg.majority_guesser_accuracy(["no"] * 3 + ["yes"]) == 0.75
    with pytest.raises(ValueError, match="at least 2 options"):
        dg._chance_accuracy(1)


def test_one_answer_dominating_t3_on_the_blank_image_is_found():
    """Spec Sec. IV (b): on the blank image the models answer 'No' to (almost) every t3 question."""
    no = 1
    shares = dg.answer_shares(np.full(200, float(no)), 2)
    assert shares.tolist() == [0.0, 1.0] and dg.dominant_answer(shares) == no
    mixed = np.r_[np.zeros(60), np.ones(140), np.full(5, np.nan)]  # NaN (no answer) left out
    assert dg.answer_shares(mixed, 2).tolist() == [0.3, 0.7] and dg.dominant_answer(dg.answer_shares(mixed, 2)) is None
    assert dg.dominant_answer(dg.answer_shares(np.r_[np.zeros(9), np.ones(91)], 2)) == 1
    assert dg.dominant_answer(dg.answer_shares([np.nan], 2)) is None
    with pytest.raises(ValueError, match="option indices"):
        dg.answer_shares([0, 2], 2)
    with pytest.raises(ValueError, match="threshold"):
        dg.dominant_answer([0.5, 0.5], threshold=0.5)
