"""Design diagnostics from the controls: is the question answerable, or anti-answerable, without the image?

The spec's pilot (Sec. III, "This study follows a 200-image pilot"; contribution iv)
found its design confounded through its controls: distractors drawn without a matched
prior put blank-image accuracy *below* chance (0.11–0.16, Sec. IV (a)), and on the blank
image the verification task is answered "No" to almost every question (Sec. IV (b)). The
kernels here give those verdicts for any design, from a control's accuracy with its
interval and its answers:

- :func:`_floor_verdict`: the control's accuracy against chance and against a guesser
  that uses the category prior alone (:func:`prior_guesser_accuracy`; for a binary task
  :func:`majority_guesser_accuracy`); :func:`floor_verdicts` the same for a family of
  floors, controlled for multiplicity (Holm);
- :func:`answer_shares` and :func:`dominant_answer`: one answer given to (almost) every
  question of a task on the blank image;
- :func:`marker_contrast`: how much the box marker stands out in a rendering, as a
  vision encoder sees it (averaged over its patches), to count the items whose box is
  hard to see at the murkiest level (the pilot's "thin box marker is lost", Sec. III
  "(iii)").

Verdicts are strings (:data:`BELOW_CHANCE`, :data:`ABOVE_GUESSER`, :data:`NO_CONFOUND`,
:data:`UNDEFINED`) with one sentence each in :data:`VERDICT_TEXT`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

#: verdicts of :func:`_floor_verdict`
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
#: side (px) of the patches a vision encoder sees: ``patch_size: 16`` in the processor configurations of
#: Qwen3-VL, Gemma 4 and SmolVLM (../shared/real-model-files)
PATCH_PX = 16
#: a marker whose patch-averaged contrast is below this is counted as hard to see; murk's threshold, not the
#: spec's (a tenth of the largest colour difference; a red 8-px box on fog grey gives about three times it)
HARD_TO_SEE_CONTRAST = 0.1


def _chance_accuracy(n_options: int) -> float:
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
        the guesser" (:func:`_floor_verdict`) harder to reach: a conservative reference.

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


def _floor_verdict(point: float, lo: float, hi: float, chance: float, guesser: float | None = None) -> str:
    """What a control's accuracy says about the design.

    Parameters
    ----------
    point, lo, hi : float
        The control's accuracy (blank or shuffled image) and its interval.
    chance : float
        :func:`_chance_accuracy`.
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

    >>> _floor_verdict(0.13, 0.09, 0.18, 0.25), _floor_verdict(0.26, 0.23, 0.29, 0.25)
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


def floor_verdicts(estimates: Sequence[tuple[float, float, float]], replicates: Sequence[np.ndarray],
                   chance: Sequence[float], guesser: Sequence[float] | None = None, alpha: float = 0.05) -> list[str]:
    """The verdicts of a family of control floors, controlled for multiplicity (Holm; issue 39).

    Each floor is tested as :func:`_floor_verdict` does (below chance, or above the prior guesser and
    chance), with the bootstrap p-value of its interval's own test (:func:`murk.results.bootstrap_p_value`,
    one side of the two-sided percentile interval: ``p <= alpha`` where the interval at ``1 - alpha``
    excludes the reference). The p-values of the family (every floor with an estimate; one between chance
    and the guesser enters with p = 1) are adjusted by Holm's step-down method
    (:func:`murk.results.holm`), and a confound is stated only where the adjusted p-value is at most
    ``alpha``: with eight floors per two models, one at-chance floor whose 95 % interval excludes chance by
    luck is no longer declared a confound.

    Parameters
    ----------
    estimates : sequence of (point, lo, hi), length k
        Each control's accuracy with its interval (what the table prints).
    replicates : sequence of numpy.ndarray, length k
        Each control's bootstrap replicates of the accuracy (NaN skipped), the draw of its interval.
    chance : sequence of float, length k
        Each floor's chance accuracy (:func:`_chance_accuracy`).
    guesser : sequence of float, optional
        Each floor's prior guesser (:func:`prior_guesser_accuracy`); default (or NaN) chance.
    alpha : float, default 0.05
        The family-wise error rate.

    Returns
    -------
    list of str, length k
        :data:`BELOW_CHANCE`, :data:`ABOVE_GUESSER`, :data:`NO_CONFOUND` or :data:`UNDEFINED`.

    Raises
    ------
    ValueError
        The sequences differ in length.
    """
    from murk.results import _multiplicity

    k = len(estimates)
    guesser = [np.nan] * k if guesser is None else list(guesser)
    if not len(replicates) == len(chance) == len(guesser) == k:
        raise ValueError(f"{k} estimates but {len(replicates)} replicate sets, {len(chance)} chance values and "
                         f"{len(guesser)} guessers")
    p = np.full(k, np.nan)
    side = [UNDEFINED] * k
    for i, ((point, lo, hi), b, c, g) in enumerate(zip(estimates, replicates, chance, guesser)):
        if not all(np.isfinite(x) for x in (point, lo, hi, c)):
            continue
        ref = max(float(g), float(c)) if g is not None and np.isfinite(g) else float(c)
        if point < c:
            side[i], p[i] = BELOW_CHANCE, float(_multiplicity.bootstrap_p_value(b, float(c), side="less"))
        elif point > ref:
            side[i], p[i] = ABOVE_GUESSER, float(_multiplicity.bootstrap_p_value(b, ref, side="greater"))
        else:
            side[i], p[i] = NO_CONFOUND, 1.0
    adj = _multiplicity.holm(p)
    return [UNDEFINED if s == UNDEFINED or not np.isfinite(a) else s if a <= alpha and s != NO_CONFOUND
            else NO_CONFOUND for s, a in zip(side, adj)]


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


def marker_contrast(with_marker: np.ndarray, without_marker: np.ndarray, patch_px: int = PATCH_PX) -> float:
    """Contrast of a box marker against its surround, averaged over the patches it touches.

    The marker's contrast at a pixel is the colour difference the marker makes there,
    ``|with - without|`` (RGB, as a fraction of 255, its Euclidean norm over the three
    channels divided by sqrt(3), so in [0, 1]). A vision encoder sees the image in
    ``patch_px`` × ``patch_px`` patches: the difference is averaged over each patch,
    and the contrast is the mean over the patches the marker touches. A line narrower
    than a patch is diluted by its share of the patch (a 3-px line about 3/16 of its
    full contrast, an 8-px line about half).

    Parameters
    ----------
    with_marker, without_marker : numpy.ndarray
        uint8 (H, W, 3): the same rendering with and without the marker
        (:func:`murk.scene.render_conditions` with ``marker`` True and False).
    patch_px : int, default :data:`PATCH_PX` (16)
        Patch side in pixels.

    Returns
    -------
    float
        In [0, 1]; NaN if the marker changes no pixel (drawn outside the image, or in
        its own colour on every pixel).

    Raises
    ------
    ValueError
        If the two images differ in shape, are not (H, W, 3), or ``patch_px`` < 1.
    """
    a = np.asarray(with_marker, dtype=np.float64)
    b = np.asarray(without_marker, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 3 or a.shape[-1] != 3:
        raise ValueError(f"two renderings of the same (H, W, 3) shape are needed, got {a.shape} and {b.shape}")
    if int(patch_px) < 1:
        raise ValueError(f"patch_px must be at least 1, got {patch_px}")
    p = int(patch_px)
    d = np.linalg.norm((a - b) / 255.0, axis=-1)
    d = d / np.sqrt(3.0)
    h, w = d.shape
    hp, wp = -(-h // p) * p, -(-w // p) * p
    pad = np.full((hp, wp), np.nan)
    pad[:h, :w] = d
    cells = pad.reshape(hp // p, p, wp // p, p)
    mean = np.nanmean(cells, axis=(1, 3))               # each patch's mean over its pixels inside the image
    touched = np.nanmax(cells, axis=(1, 3)) > 0
    return float(mean[touched].mean()) if touched.any() else float("nan")


def design_summary(ds, model: str, image_ids: Sequence[int], chance: Mapping[str, float],
                   n_binary_options: int = 2) -> dict[str, float]:
    """The numbers by which two designs are compared, for one model on given images.

    Parameters
    ----------
    ds : xarray.Dataset
        A cube (:func:`murk.results.open_cube`), restricted to its design
        (:func:`murk.protocol.restrict_to_design`): ``value`` (model, arm, level, task,
        image, readout) with the ``visibility_m`` coordinate on ``level``.
    model : str
        A model of the cube.
    image_ids : sequence of int
        COCO image ids (in both runs compared).
    chance : mapping
        ``{"t2": 0.25, "t3": 0.5}`` (config ``analysis.chance``): the floor of V_acc.
    n_binary_options : int, default 2
        Answers of the binary task (t3's Yes / No).

    Returns
    -------
    dict
        ``floor.blank.t2``, ``floor.shuffled.t2``, ``floor.blank.t3``,
        ``floor.shuffled.t3`` (mean accuracy over the images, t3 over its true- and
        false-category questions), ``t3_blank_top_share`` (the most frequent blank-image
        answer's share, :func:`answer_shares`), ``v_acc.fog.t2`` and
        ``v_acc.underwater.t2`` (m; the crossing of the mean accuracy,
        :func:`murk.results.crossing_visibility`, censored at the design's last level)
        and ``v_acc_censored.fog.t2``, ``v_acc_censored.underwater.t2`` (1.0 when
        censored, else 0.0). NaN where the cube has no value.
    """
    from murk.results import _cube as cube
    from murk.results import _metrics as metrics

    x = ds["value"].sel(model=model, image=list(map(int, image_ids)))
    out: dict[str, float] = {}
    with np.errstate(all="ignore"):
        for ctrl in ("blank", "shuffled"):
            c = x.sel(arm=ctrl, level=0, readout="correct")
            out[f"floor.{ctrl}.t2"] = float(np.nanmean(c.sel(task="t2").values)) if c.size else np.nan
            out[f"floor.{ctrl}.t3"] = float(np.nanmean(c.sel(task=["t3_true", "t3_false"]).values)) if c.size else np.nan
        try:
            shares = answer_shares(x.sel(arm="blank", level=0, task=["t3_true", "t3_false"], readout="answer").values,
                                   n_binary_options)
            out["t3_blank_top_share"] = float(np.nanmax(shares)) if np.isfinite(shares).any() else np.nan
        except ValueError:
            out["t3_blank_top_share"] = np.nan
        vis = cube.sweep_visibility(ds)[1:]
        for arm in ("fog", "underwater"):
            acc = np.nanmean(x.sel(arm=arm, task="t2", readout="correct").transpose("level", "image").values, axis=1)
            v, c = metrics.crossing_visibility(vis, acc[1:], acc[0], float(chance["t2"]))
            out[f"v_acc.{arm}.t2"], out[f"v_acc_censored.{arm}.t2"] = float(v), float(bool(c))
    return out
