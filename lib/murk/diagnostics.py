"""Design diagnostics from the controls: is the question answerable, or anti-answerable, without the image?

The spec's pilot (Sec. III, "This study follows a 200-image pilot"; contribution iv)
found its design confounded through its controls: distractors drawn without a matched
prior put blank-image accuracy *below* chance (0.11–0.16, Sec. IV (a)), and on the blank
image the verification task is answered "No" to almost every question (Sec. IV (b)). The
kernels here give those verdicts for any design, from a control's accuracy with its
interval and its answers:

- :func:`floor_verdict`: the control's accuracy against chance and against a guesser
  that uses the category prior alone (:func:`prior_guesser_accuracy`; for a binary task
  :func:`majority_guesser_accuracy`);
- :func:`answer_shares` and :func:`dominant_answer`: one answer given to (almost) every
  question of a task on the blank image.

Verdicts are strings (:data:`BELOW_CHANCE`, :data:`ABOVE_GUESSER`, :data:`NO_CONFOUND`,
:data:`UNDEFINED`) with one sentence each in :data:`VERDICT_TEXT`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

#: verdicts of :func:`floor_verdict`
BELOW_CHANCE, ABOVE_GUESSER, NO_CONFOUND, UNDEFINED = "below chance", "above the guesser", "none", "undefined"
#: a design reading of each verdict (the issue's words), for generated findings
VERDICT_TEXT = {
    BELOW_CHANCE: "the distractors carry a prior the model exploits against",
    ABOVE_GUESSER: "the question is answerable without the image",
    NO_CONFOUND: "no confound is found",
    UNDEFINED: "the floor could not be estimated",
}
#: an answer given to at least this share of a task's questions on the blank image dominates it (spec Sec. IV (b):
#: "the models answer 'No' to (almost) every question"); murk's threshold, not the spec's
DOMINANT_SHARE = 0.9


def chance_accuracy(n_options: int) -> float:
    """Accuracy of a uniform guess among ``n_options`` answers (t2: 4 options, 0.25; t3: yes/no, 0.5).

    Raises
    ------
    ValueError
        ``n_options`` < 2.
    """
    if int(n_options) < 2:
        raise ValueError(f"a multiple-choice question needs at least 2 options, got {n_options}")
    return 1.0 / int(n_options)


def prior_guesser_accuracy(options: Sequence[Sequence[str]], answer_index: Sequence[int],
                           prior: Mapping[str, float] | None = None) -> float:
    """Expected accuracy of a guesser that sees the options only and picks the most probable category.

    Parameters
    ----------
    options : sequence of sequences of str, length n
        Each question's options (category names), e.g. the items' ``t2_options``.
    answer_index : sequence of int, length n
        Index of the correct option of each question.
    prior : mapping of str to float, optional
        Each category's prior weight. Default: how often each category is the
        *correct* answer among these questions (the prior a model could have learnt
        from such a design; a prior-matched design makes it useless). Estimated on
        the questions it is scored on, it is optimistic on a small set (on 8 items a
        category that is the answer twice already wins), which makes a floor "above
        the guesser" (:func:`floor_verdict`) harder to reach: a conservative reference.

    Returns
    -------
    float
        The mean over questions of ``1 / k`` where the correct option is among the
        ``k`` options of highest prior (a tie is broken uniformly at random), else 0.
        NaN for no questions.

    Raises
    ------
    ValueError
        Lengths differ, or an answer index lies outside its options.
    """
    if len(options) != len(answer_index):
        raise ValueError(f"{len(options)} option lists but {len(answer_index)} answer indices")
    if not len(options):
        return float("nan")
    for opts, a in zip(options, answer_index):
        if not 0 <= int(a) < len(opts):
            raise ValueError(f"answer index {a} outside the options {list(opts)}")
    weight = dict(prior) if prior is not None else dict(Counter(opts[int(a)] for opts, a in zip(options, answer_index)))
    acc = []
    for opts, a in zip(options, answer_index):
        w = np.array([float(weight.get(o, 0.0)) for o in opts])
        best = np.flatnonzero(w == w.max())
        acc.append(1.0 / len(best) if int(a) in best else 0.0)
    return float(np.mean(acc))


def majority_guesser_accuracy(truth: Sequence[object]) -> float:
    """Accuracy of always giving the most frequent correct answer (a binary task's prior guesser).

    Parameters
    ----------
    truth : sequence, length n
        The correct answer of each question (e.g. ``"yes"`` / ``"no"``, or 1 / 0).

    Returns
    -------
    float
        The majority answer's share; NaN for no questions. t3 asks the true and a
        distractor category once each, so its guesser scores 0.5 (= chance).
    """
    if not len(truth):
        return float("nan")
    return max(Counter(truth).values()) / len(truth)


def floor_verdict(point: float, lo: float, hi: float, chance: float, guesser: float | None = None) -> str:
    """What a control's accuracy says about the design.

    Parameters
    ----------
    point, lo, hi : float
        The control's accuracy (blank or shuffled image) and its interval.
    chance : float
        :func:`chance_accuracy`.
    guesser : float, optional
        A prior guesser's accuracy (:func:`prior_guesser_accuracy`); default ``chance``.

    Returns
    -------
    str
        :data:`BELOW_CHANCE` where the interval lies wholly below chance (the answer
        set carries a prior that works against the correct answer); else
        :data:`ABOVE_GUESSER` where it lies wholly above the guesser and above chance
        (something besides the image answers the question); else :data:`NO_CONFOUND`;
        :data:`UNDEFINED` without a finite point and interval.

    >>> floor_verdict(0.13, 0.09, 0.18, 0.25), floor_verdict(0.26, 0.23, 0.29, 0.25)
    ('below chance', 'none')
    """
    g = chance if guesser is None or not np.isfinite(guesser) else float(guesser)
    if not all(np.isfinite(x) for x in (point, lo, hi, chance)):
        return UNDEFINED
    if hi < chance:
        return BELOW_CHANCE
    if lo > max(g, chance):
        return ABOVE_GUESSER
    return NO_CONFOUND


def answer_shares(answers, n_options: int) -> np.ndarray:
    """Share of each option among the given answers.

    Parameters
    ----------
    answers : array-like of float
        Option indices (``answer`` read-out of the cube); NaN (no answer, a missing
        value) is left out.
    n_options : int
        Number of options.

    Returns
    -------
    numpy.ndarray, shape (n_options,), float64
        Shares summing to 1; all NaN where no answer is finite.

    Raises
    ------
    ValueError
        An answer is not an integer in ``[0, n_options)``.
    """
    a = np.asarray(answers, dtype=float).ravel()
    a = a[np.isfinite(a)]
    if not a.size:
        return np.full(int(n_options), np.nan)
    if np.any((a < 0) | (a >= n_options) | (a != np.round(a))):
        raise ValueError(f"answers must be option indices in [0, {n_options}), got {np.unique(a)[:8]}")
    return np.bincount(a.astype(int), minlength=int(n_options)) / a.size


def dominant_answer(shares, threshold: float = DOMINANT_SHARE) -> int | None:
    """The option given to at least ``threshold`` of the questions, or None.

    Parameters
    ----------
    shares : array-like of float, shape (n_options,)
        :func:`answer_shares`.
    threshold : float
        Default :data:`DOMINANT_SHARE` (0.9); must exceed one half, so that at most one
        option dominates.

    Raises
    ------
    ValueError
        ``threshold`` not in (0.5, 1].
    """
    if not 0.5 < threshold <= 1.0:
        raise ValueError(f"threshold must lie in (0.5, 1], got {threshold}")
    s = np.asarray(shares, dtype=float)
    if not np.isfinite(s).any():
        return None
    k = int(np.nanargmax(s))
    return k if s[k] >= threshold else None
