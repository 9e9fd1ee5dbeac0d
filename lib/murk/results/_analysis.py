"""From the cube to the study's summaries: every statistic of spec Sec. III/IV.

Every statistic is an image-level quantity with a percentile bootstrap interval
over images (spec Sec. III), *paired*: one matrix of draw counts
(:func:`murk.results.bootstrap_counts`, resamples × images) serves every
model, arm, level, task and read-out, so differences and crossings are
consistent. Per-condition values use its first 1000 rows, crossing points all
2000 (NumPy fills the draw row by row, so these are the same resamples).
A model read out on fewer images (the first N of the selection) is analysed
on its own images with its own draw (:func:`image_groups`); where models are
compared, the paired sample is their common images (:func:`common_images`).
Resampled statistics are products of the data with that matrix: there is no
Python loop over resamples.

Contents
--------
image_scores        cube -> image-level scores (t3 = mean of its two questions)
question_scores     cube -> question-level values for pooled statistics (ECE, AUROC)
condition_means     mean, interval and n per model × arm × level × task × read-out
crossing_table      V_acc, V_aware, W (+ blank-floor V_acc) with intervals
confidence_scores   ECE and AUROC of c_int and verbal confidence per condition
selective_abstain   coverage and risk of answering through the abstain options
monotonicity_table  wrong-way moves per signal series, raw and > 2 SE
confident_errors    accuracy of answers with c_int >= 0.9 in the murky levels
reliability_table   reliability-diagram data per model, arm and task
analyse             all of the above from one draw per set of images, plus the ``scores`` dataset
image_groups        the models grouped by the images they were read out on (per-model item counts)
common_images       the images a set of models shares (the paired sample where models are compared)
median_option_mass  median first-token option mass on clean images per model and task (the guard; from murk.readout)
verbal_rates        parse rate and token-limit-hit rate of the verbal confidence per wording
"""

from __future__ import annotations

import warnings

import numpy as np
import xarray as xr

from murk.readout import OPTION_MASS_MIN, median_option_mass
from murk.results import _bootstrap
from murk.results import _calibration
from murk.results import _cube as cube
from murk.results import _metrics as metrics
from murk.results import _multiplicity
from murk.results import _selective

__all__ = ["SIGNALS", "AWARENESS_SIGNALS", "CONFIDENCES", "DIRECTION", "STATS", "image_scores",
           "question_scores", "resample_counts", "condition_means", "floor_of", "crossing_table",
           "confidence_scores", "selective_abstain", "monotonicity_table", "confident_errors",
           "reliability_table", "scores_dataset", "analyse", "low_option_mass",
           "verbal_rates", "VERBAL_WORDING_READOUTS", "image_groups", "common_images"]

#: read-outs summarised per condition
SIGNALS = ("correct", "c_int", "verbal_conf", "abstain", "abstain2")
#: awareness signals whose crossing is compared with accuracy's (spec Sec. III)
AWARENESS_SIGNALS = ("c_int", "verbal_conf", "abstain", "abstain2")
#: confidences scored as detectors of correct answers (ECE, AUROC, reliability)
CONFIDENCES = ("c_int", "verbal_conf")
#: expected direction of each signal going murkier (spec Sec. III, "Monotonicity")
DIRECTION = {"correct": -1, "c_int": -1, "verbal_conf": -1, "abstain": 1, "abstain2": 1}
#: the ``stat`` coordinate of the scores dataset
STATS = ("point", "lo", "hi")


def _values(ds: xr.Dataset) -> xr.DataArray:
    """The cube's ``value`` as float64, unrounded.

    The cube stores float64 (:mod:`murk.results`), so every read-out is the number
    the read-out produced: a verbalized ``k / 100`` is the float64 nearest to the
    decimal by construction (``int / 100.0`` in
    :func:`murk.readout.parse_verbal_confidence`), and compares equal to the ECE
    bin edge ``m / 10`` computed the same way; an internal confidence such as
    0.8999996 or 0.9999999 is kept as is (rounding to 6 decimals, as murk did
    with float32 stores, moved it across a bin edge or tied it with 0.9999996).
    Stores written as float32 by older versions are widened, not rounded.
    """
    return ds["value"].astype(np.float64)


def image_scores(ds: xr.Dataset) -> xr.DataArray:
    """Image-level scores with ``task`` in (t2, t3) and ``readout`` in :data:`SIGNALS`.

    Parameters
    ----------
    ds : xarray.Dataset
        The cube (:mod:`murk.results`).

    Returns
    -------
    xarray.DataArray
        float64 (model, arm, level, task, image, readout), unrounded (see
        :func:`_values`); t3 is the mean of its two questions
        (:func:`murk.results.t3_image_scores`).
    """
    value = _values(ds).sel(readout=list(SIGNALS))
    return cube.t3_image_scores(value).transpose("model", "arm", "level", "task", "image", "readout")


def question_scores(ds: xr.Dataset, task: str) -> tuple[xr.DataArray, np.ndarray]:
    """Question-level values of one task, for statistics pooled over questions.

    ECE, AUROC and reliability bins need a 0/1 correctness per question; t3
    has two questions per image, which are pooled and resampled together with
    their image.

    Parameters
    ----------
    ds : xarray.Dataset
        The cube.
    task : {"t2", "t3"}

    Returns
    -------
    values : xarray.DataArray
        float64 (model, arm, level, unit, readout); ``unit`` = the n images
        (t2) or the n true-category then the n distractor questions (t3).
    image_of_unit : numpy.ndarray
        Shape (units,), int64: the image position of each unit, to expand a
        (B, n) count matrix to ``counts[:, image_of_unit]``.

    Raises
    ------
    ValueError
        If ``task`` is not t2 or t3.
    """
    v = _values(ds)
    n = ds.sizes["image"]
    if task == "t2":
        parts = [v.sel(task="t2", drop=True)]
    elif task == "t3":
        parts = [v.sel(task="t3_true", drop=True), v.sel(task="t3_false", drop=True)]
    else:
        raise ValueError(f"task must be 't2' or 't3', got {task!r}")
    parts = [p.drop_vars([c for c in p.coords if "image" in p[c].dims]).rename(image="unit") for p in parts]
    out = xr.concat(parts, dim="unit").transpose("model", "arm", "level", "unit", "readout")
    return out, np.tile(np.arange(n), len(parts))


def resample_counts(n_images: int, n_resamples: int, seed: int) -> np.ndarray:
    """How often each image is drawn in each bootstrap resample.

    The one implementation is :func:`murk.results.bootstrap_counts`; this
    name is kept for callers of the analysis module.

    Returns
    -------
    numpy.ndarray
        float64 (n_resamples, n_images); each row sums to ``n_images``.
    """
    return _bootstrap.bootstrap_counts(n_images, n_resamples, seed)


def _boot(scores: xr.DataArray, counts: np.ndarray) -> xr.DataArray:
    """Resampled means over ``image``, a trailing ``bootstrap`` dim."""
    return _bootstrap.bootstrap_resample_means(scores, "image", counts=counts)


def _interval(boot: xr.DataArray, ci_level: float, dim: str = "bootstrap") -> tuple[xr.DataArray, xr.DataArray]:
    b = boot.transpose(..., dim)
    lo, hi = _bootstrap.percentile_interval(b.values, ci_level, axis=-1)
    like = b.isel({dim: 0}, drop=True)
    return like.copy(data=lo), like.copy(data=hi)


def _counts(counts: np.ndarray | None, n: int, n_resamples: int, seed: int) -> np.ndarray:
    if counts is None:
        return _bootstrap.bootstrap_counts(n, n_resamples, seed)
    if counts.shape[0] < n_resamples:
        raise ValueError(f"counts has {counts.shape[0]} resamples, {n_resamples} needed")
    return counts[:n_resamples]


def condition_means(scores: xr.DataArray, n_resamples: int = 1000, seed: int = 0,
                    ci_level: float = 0.95, counts: np.ndarray | None = None) -> xr.Dataset:
    """Mean over images per condition with a paired percentile bootstrap interval.

    Parameters
    ----------
    scores : xarray.DataArray
        Values with an ``image`` dim (e.g. :func:`image_scores`); NaN missing.
    n_resamples : int, default 1000
        Per-condition values (spec Sec. III).
    seed : int, default 0
    ci_level : float, default 0.95
        Central interval mass.
    counts : numpy.ndarray, optional
        (B, n_images) draw counts to reuse (paired with other statistics);
        its first ``n_resamples`` rows are used.

    Returns
    -------
    xarray.Dataset
        ``mean``, ``lo``, ``hi`` (float64) and ``n`` (images with a value),
        dims of ``scores`` without ``image``.
    """
    counts = _counts(counts, scores.sizes["image"], n_resamples, seed)
    lo, hi = _interval(_boot(scores, counts), ci_level)
    with warnings.catch_warnings():  # cells that do not exist (e.g. blank at level 3) are all-NaN: NaN is right
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = scores.mean("image", skipna=True)
    return xr.Dataset({"mean": mean, "lo": lo.transpose(*mean.dims), "hi": hi.transpose(*mean.dims),
                       "n": scores.notnull().sum("image")})


def floor_of(task: str, signal: str, chance: dict | None = None) -> float:
    """Reference floor of a signal (spec Sec. III, "Crossing points").

    Chance (0.25 for t2, 0.5 for t3) for accuracy and confidences; 1 for the
    abstain rates, which rise towards it.
    """
    chance = chance or {"t2": 0.25, "t3": 0.5}
    return 1.0 if signal.startswith("abstain") else float(chance[task])


def crossing_table(scores: xr.DataArray, n_resamples: int = 2000, seed: int = 0,
                   ci_level: float = 0.95, chance: dict | None = None,
                   arms=cube.PHYSICAL_ARMS, counts: np.ndarray | None = None) -> xr.Dataset:
    """Crossing visibilities and blind-spot widths with bootstrap intervals.

    For each model, physical arm, task and signal: the crossing visibility
    (:func:`murk.results.crossing_visibility`, levels 1-8 against the clean
    value at level 0, floors from :func:`floor_of`), and for each awareness
    signal W = log10(V_acc / V_aware) (:func:`murk.results.blind_spot_width`).
    Intervals come from 2000 paired image resamples (spec Sec. III); in each
    resample the clean value, the series and (for the blank floor) the
    blank-image accuracy are resampled together.

    Post-hoc variant (spec Sec. III, "Post-hoc additions"): ``v_acc_blank_m``
    is V_acc with the model's blank-image accuracy (arm ``blank``) as the
    floor instead of chance; NaN when the cube has no blank arm.

    Returns
    -------
    xarray.Dataset
        (model, arm, task, readout): ``v_cross_m``, ``v_lo_m``, ``v_hi_m`` (m),
        ``censored`` (bool: never reached within the sweep) and
        ``censored_side`` (str: ``""``; ``"below"``, never reached, the true
        crossing is at most ``v_cross_m`` = 1.95 m, printed "≤ 1.95";
        ``"above"``, reached at the first level, at least 250 m, printed
        "≥ 250"); ``w``, ``w_lo``, ``w_hi`` (decades; NaN for ``correct``,
        and where the two crossings bound W from opposite sides, e.g. both
        censored at the end of the sweep), ``w_censored_side`` (str, from
        :func:`murk.results.blind_spot_width_side`: ``""``, ``"above"`` W is
        "≥", ``"below"`` W is "≤", ``"undefined"``), ``w_lower_bound`` and
        ``w_upper_bound`` (bool: ``w_censored_side`` is "above" / "below");
        ``w_p`` (the bootstrap p-value of W = 0, :func:`murk.results.bootstrap_p_value`) and
        ``w_p_margin`` (that |W| is below one sweep level, the dataset's attribute
        ``w_margin_decades`` = :func:`murk.results.level_step_decades`;
        :func:`murk.results.equivalence_p_value`), NaN where W is.
        (model, arm, task): ``v_acc_blank_m``, ``v_acc_blank_lo_m``,
        ``v_acc_blank_hi_m``, ``censored_blank``, ``censored_blank_side``.
    """
    x = scores.sel(arm=list(arms))
    vis = cube.sweep_visibility(x)[1:]
    counts = _counts(counts, x.sizes["image"], n_resamples, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        point = x.mean("image", skipna=True)                       # (model, arm, level, task, readout)
    boot = _boot(x, counts)                                        # (..., bootstrap)
    floors = xr.DataArray(
        [[floor_of(t, s, chance) for s in x["readout"].values] for t in x["task"].values],
        dims=("task", "readout"), coords={"task": x["task"], "readout": x["readout"]})

    def cross(m: xr.DataArray, fl: xr.DataArray):
        m = m.transpose(..., "level")
        like = m.isel(level=0, drop=True)
        fl = fl.broadcast_like(like).transpose(*like.dims)
        v, c, side = metrics.crossing_visibility(vis, m.isel(level=slice(1, None)).values, like.values, fl.values,
                                                 return_side=True)
        return (like.copy(data=np.asarray(v, float)), like.copy(data=np.asarray(c, bool)),
                like.copy(data=np.asarray(side, dtype="<U5")))

    v, cens, side = cross(point, floors)
    vb, censb, sideb = cross(boot, floors)
    out = _crossing_dataset(x, v, side, vb, sideb, ci_level)

    # post-hoc: V_acc against the model's blank-image accuracy as the floor
    acc_p, acc_b = point.sel(readout="correct", drop=True), boot.sel(readout="correct", drop=True)
    if "blank" in scores["arm"].values:
        blank = scores.sel(arm="blank", level=0, readout="correct", drop=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            fl_p = blank.mean("image", skipna=True)
        fl_b = _boot(blank, counts)
    else:
        fl_p = xr.full_like(acc_p.isel(level=0, drop=True), np.nan)
        fl_b = xr.full_like(acc_b.isel(level=0, drop=True), np.nan)
    vbl, cbl, sbl = cross(acc_p, fl_p)
    vblb, _, _ = cross(acc_b, fl_b)
    lo, hi = _interval(vblb, ci_level)
    out["v_acc_blank_m"] = vbl.transpose(*out["w"].dims[:-1])
    out["v_acc_blank_lo_m"] = lo.transpose(*out["w"].dims[:-1])
    out["v_acc_blank_hi_m"] = hi.transpose(*out["w"].dims[:-1])
    out["censored_blank"] = cbl.transpose(*out["w"].dims[:-1])
    out["censored_blank_side"] = sbl.transpose(*out["w"].dims[:-1])
    out["v_acc_blank_m"].attrs.update(units="m", long_name="V_acc with the blank-image accuracy as floor (post hoc)")
    return out


def _crossing_dataset(x, v, side, vb, sideb, ci_level):
    dims = ("model", "arm", "task", "readout")
    v, side = v.transpose(*dims), side.transpose(*dims)
    vb, sideb = vb.transpose(*dims, "bootstrap"), sideb.transpose(*dims, "bootstrap")
    v_lo, v_hi = _interval(vb, ci_level)
    cens = side == "below"
    out = xr.Dataset({"v_cross_m": v, "censored": cens, "censored_side": side, "v_lo_m": v_lo, "v_hi_m": v_hi})

    def width(vv, ss):
        acc_v, acc_s = vv.sel(readout="correct"), ss.sel(readout="correct")
        w = xr.DataArray(metrics.blind_spot_width(acc_v.values[..., None, :] if "bootstrap" in vv.dims
                                                  else acc_v.values[..., None], vv.values),
                         dims=vv.dims, coords=vv.coords)
        wside = xr.DataArray(metrics.blind_spot_width_side(acc_s.values[..., None, :] if "bootstrap" in vv.dims
                                                           else acc_s.values[..., None], ss.values),
                             dims=vv.dims, coords=vv.coords)
        return w.where(wside != "undefined"), wside

    w, wside = width(v, side)
    wb, _ = width(vb, sideb)
    not_acc = x["readout"] != "correct"
    w_lo, w_hi = _interval(wb, ci_level)
    defined = wside != "undefined"
    out["w"] = w.where(not_acc)
    # an undefined point prints no interval either
    out["w_lo"] = w_lo.where(not_acc & defined)
    out["w_hi"] = w_hi.where(not_acc & defined)
    out["w_censored_side"] = wside.where(not_acc, "")
    out["w_lower_bound"] = (wside == "above") & not_acc
    out["w_upper_bound"] = (wside == "below") & not_acc
    # multiplicity and equivalence (issue 39): W's bootstrap p-value against 0, and that |W| is below one sweep level
    try:
        step = metrics.level_step_decades(cube.sweep_visibility(x)[1:])
    except ValueError:   # a design of one level has no step: no lag can be bounded by one
        step = float("nan")
    wbv = wb.transpose(*dims, "bootstrap").values
    out["w_p"] = w.copy(data=_multiplicity.bootstrap_p_value(wbv, 0.0)).where(not_acc & defined)
    p_margin = _multiplicity.equivalence_p_value(wbv, step) if np.isfinite(step) else np.full(w.shape, np.nan)
    out["w_p_margin"] = w.copy(data=p_margin).where(not_acc & defined)
    out["w_p"].attrs.update(long_name="bootstrap p-value of W = 0 (two-sided; murk.results.bootstrap_p_value)")
    out["w_p_margin"].attrs.update(long_name="bootstrap p-value that |W| < one sweep level (two one-sided tests; "
                                             "murk.results.equivalence_p_value)", margin_decades=step)
    out.attrs["w_margin_decades"] = step
    out["v_cross_m"].attrs.update(units="m", long_name="crossing visibility")
    out["censored_side"].attrs.update(long_name="side of a bound on v_cross_m: '' exact, 'below' (never reached: "
                                                "at most v_cross_m, printed <=), 'above' (reached at the first level: "
                                                "at least v_cross_m, printed >=)")
    out["w"].attrs.update(units="decades", long_name="blind-spot width W = log10(V_acc / V_aware)")
    out["w_censored_side"].attrs.update(long_name="side of a bound on W: '' exact, 'above' (W >=), 'below' (W <=), "
                                                  "'undefined' (opposite bounds; W is NaN)")
    return out


def confidence_scores(ds: xr.Dataset, counts: np.ndarray | None = None, n_resamples: int = 1000,
                      seed: int = 0, ci_level: float = 0.95, n_bins: int = 10,
                      confidences=CONFIDENCES, tasks=("t2", "t3")) -> xr.Dataset:
    """ECE and AUROC of each confidence per condition, with paired intervals.

    ECE: :func:`murk.results.expected_calibration_error` (10 equal-width bins);
    AUROC: :func:`murk.results.auroc` of the confidence as a detector of
    correct answers (spec Sec. III). t3 pools its two questions per image;
    the interval resamples images (both questions together).

    Parameters
    ----------
    ds : xarray.Dataset
        The cube.
    counts : numpy.ndarray, optional
        (B, n_images) draw counts; its first ``n_resamples`` rows are used.
    n_resamples, seed, ci_level, n_bins
        As :func:`condition_means`; ten bins (spec).
    confidences : sequence of str, default ("c_int", "verbal_conf")
    tasks : sequence of str, default ("t2", "t3")

    Returns
    -------
    xarray.Dataset
        (model, arm, level, task, confidence): ``ece``, ``ece_lo``, ``ece_hi``,
        ``auroc``, ``auroc_lo``, ``auroc_hi`` (float64), ``n_answers``
        (questions with both a confidence and a correctness).
    """
    counts = _counts(counts, ds.sizes["image"], n_resamples, seed)
    per_task = []
    for task in tasks:
        q, unit_image = question_scores(ds, task)
        cq = counts[:, unit_image]
        corr = q.sel(readout="correct", drop=True)
        parts = []
        for conf_name in confidences:
            conf = q.sel(readout=conf_name, drop=True)
            # a probability may exceed 1 by an ulp of the renormalisation: clip (NaN kept)
            c = np.clip(conf.transpose(..., "unit").values, 0.0, 1.0)
            k = corr.transpose(..., "unit").values
            like = conf.isel(unit=0, drop=True)
            ece = _calibration.expected_calibration_error(c, k, n_bins)
            auc = _selective.auroc(c, k)
            ece_lo, ece_hi = _bootstrap.percentile_interval(_calibration.resampled_ece(c, k, cq, n_bins), ci_level)
            auc_lo, auc_hi = _bootstrap.percentile_interval(_selective.resampled_auroc(c, k, cq), ci_level)
            n_ans = (~(np.isnan(c) | np.isnan(k))).sum(axis=-1)
            parts.append(xr.Dataset({name: like.copy(data=val) for name, val in (
                ("ece", ece), ("ece_lo", ece_lo), ("ece_hi", ece_hi),
                ("auroc", auc), ("auroc_lo", auc_lo), ("auroc_hi", auc_hi), ("n_answers", n_ans))}))
        per_task.append(xr.concat(parts, dim=xr.DataArray(list(confidences), dims="confidence", name="confidence")))
    out = xr.concat(per_task, dim=xr.DataArray(list(tasks), dims="task", name="task"))
    out = out.transpose("model", "arm", "level", "task", "confidence")
    out["ece"].attrs.update(units="1", long_name=f"expected calibration error ({n_bins} equal-width bins)")
    out["auroc"].attrs.update(units="1", long_name="AUROC of the confidence as a detector of correct answers")
    return out


def selective_abstain(ds: xr.Dataset, counts: np.ndarray | None = None, n_resamples: int = 1000,
                      seed: int = 0, ci_level: float = 0.95) -> xr.Dataset:
    """Coverage and risk of selective answering through each abstain option.

    :func:`murk.results.selective_risk_coverage` per condition: coverage =
    share of questions not abstained on, risk = error rate (main prompt)
    among them (both ratios :func:`murk.results.coverage_risk_of_sums`, of
    the image-level shares, t3's two questions averaged per image). The interval is a paired bootstrap of the ratio of
    resampled sums (``risk_b = sum_i w_i E_i / sum_i w_i A_i`` with ``A`` the
    image's share of answered questions and ``E`` its share of answered and
    wrong ones).

    Parameters
    ----------
    ds : xarray.Dataset
        The cube.
    counts, n_resamples, seed, ci_level
        As :func:`condition_means`.

    Returns
    -------
    xarray.Dataset
        (model, arm, level, task, option) with option in (abstain, abstain2):
        ``coverage``, ``coverage_lo``, ``coverage_hi``, ``risk``, ``risk_lo``,
        ``risk_hi`` (float64 in [0, 1]).
    """
    v = _values(ds)
    counts = _counts(counts, ds.sizes["image"], n_resamples, seed)
    corr = v.sel(readout="correct", drop=True)
    parts = []
    for option in ("abstain", "abstain2"):
        a = v.sel(readout=option, drop=True)
        ok = a.notnull() & corr.notnull()
        answered = (1.0 - a).where(ok)
        wrong = ((1.0 - a) * (1.0 - corr)).where(ok)
        A = cube.t3_image_scores(answered)
        E = cube.t3_image_scores(wrong)
        sa, na = _bootstrap.resampled_sums(A.transpose(..., "image").values, counts)
        se, _ = _bootstrap.resampled_sums(E.transpose(..., "image").values, counts)
        like = A.isel(image=0, drop=True).transpose(*[d for d in A.dims if d != "image"])
        cov_b, risk_b = _selective.coverage_risk_of_sums(sa, se, na)
        cov, risk = (like.copy(data=x) for x in _selective.coverage_risk_of_sums(
            A.sum("image", skipna=True).transpose(*like.dims).values,
            E.sum("image", skipna=True).transpose(*like.dims).values, A.count("image").transpose(*like.dims).values))
        cov_lo, cov_hi = _bootstrap.percentile_interval(cov_b, ci_level)
        r_lo, r_hi = _bootstrap.percentile_interval(risk_b, ci_level)
        parts.append(xr.Dataset({
            "coverage": cov.transpose(*like.dims), "coverage_lo": like.copy(data=cov_lo),
            "coverage_hi": like.copy(data=cov_hi),
            "risk": risk.transpose(*like.dims), "risk_lo": like.copy(data=r_lo), "risk_hi": like.copy(data=r_hi)}))
    out = xr.concat(parts, dim=xr.DataArray(["abstain", "abstain2"], dims="option", name="option"))
    out = out.transpose("model", "arm", "level", "task", "option")
    out["coverage"].attrs.update(units="1", long_name="share of questions answered (not abstained)")
    out["risk"].attrs.update(units="1", long_name="error rate among the answered questions")
    return out


def _arm_levels(scores: xr.DataArray, arm: str) -> np.ndarray:
    """Levels of ``arm`` that hold data (physical: 0-8, imagenet_c: 0-5)."""
    has = scores.sel(arm=arm).notnull().any([d for d in scores.dims if d not in ("arm", "level")])
    return scores["level"].values[has.values]


def monotonicity_table(scores: xr.DataArray, arms=(*cube.PHYSICAL_ARMS, "imagenet_c"),
                       n_se: float = 2.0) -> xr.Dataset:
    """Wrong-way moves of each signal series (spec Sec. III, "Monotonicity").

    Series: the clean image, then the levels of the arm from clear to murky
    (8 adjacent pairs for fog and underwater, 5 for the ImageNet-C
    severities). Wrong way: accuracy or confidence rising, abstention falling
    (:data:`DIRECTION`). Raw fraction and the fraction beyond ``n_se``
    standard errors of the paired image-level difference (post hoc).

    Returns
    -------
    xarray.Dataset
        (model, arm, task, readout): ``raw``, ``beyond_noise`` (fractions),
        ``n_pairs`` (int), ``n_wrong``, ``n_wrong_beyond_noise`` (int counts).
    """
    sign = xr.DataArray([DIRECTION[str(r)] for r in scores["readout"].values], dims="readout",
                        coords={"readout": scores["readout"]})
    parts = []
    arms = [a for a in arms if a in scores["arm"].values]
    for arm in arms:
        levels = _arm_levels(scores, arm)
        x = scores.sel(arm=arm, drop=True).sel(level=levels)
        parts.append(metrics.monotonicity_da(x, sign, "level", "image", n_se))
    out = xr.concat(parts, dim=xr.DataArray(arms, dims="arm", name="arm"))
    out = out.transpose("model", "arm", "task", "readout")
    out["n_wrong"] = np.round(out["raw"] * out["n_pairs"]).fillna(0).astype(np.int64)
    out["n_wrong_beyond_noise"] = np.round(out["beyond_noise"] * out["n_pairs"]).fillna(0).astype(np.int64)
    return out


def confident_errors(ds: xr.Dataset, counts: np.ndarray | None = None, threshold: float = 0.9,
                     max_visibility_m: float = 15.625, task: str = "t2", arms=cube.PHYSICAL_ARMS,
                     n_resamples: int = 1000, seed: int = 0, ci_level: float = 0.95) -> xr.Dataset:
    """Accuracy of confident answers in the murky levels (spec Sec. IV, Fig. 5).

    Pooled over both physical arms and the levels with ``V <= 15.625 m``
    (15.625, 7.8125, 3.90625 and 1.953125 m), the answers of ``task`` whose
    internal confidence is at least ``threshold`` (0.9): their accuracy and
    number n. The interval resamples images (all their answers together).

    Returns
    -------
    xarray.Dataset
        (model,): ``accuracy``, ``accuracy_lo``, ``accuracy_hi`` (float64)
        and ``n`` (int64, answers with ``c_int >= threshold``).
    """
    counts = _counts(counts, ds.sizes["image"], n_resamples, seed)
    q, unit_image = question_scores(ds, task)
    vis = q["visibility_m"]
    q = q.sel(arm=list(arms)).where((vis <= max_visibility_m * (1 + 1e-9)) & (q["level"] > 0), drop=True)
    conf, corr = q.sel(readout="c_int", drop=True), q.sel(readout="correct", drop=True)
    mask = ((conf >= threshold) & corr.notnull()).astype(np.float64)
    hit = mask * corr.fillna(0.0)
    # per image: sums over arms, levels and (t3) both questions
    n_img = ds.sizes["image"]
    def per_image(a: xr.DataArray) -> np.ndarray:
        s = a.sum(["arm", "level"]).transpose("model", "unit").values
        return np.stack([np.bincount(unit_image, weights=row, minlength=n_img) for row in s])
    M, K = per_image(mask), per_image(hit)
    sm, _ = _bootstrap.resampled_sums(M, counts)
    sk, _ = _bootstrap.resampled_sums(K, counts)
    with np.errstate(invalid="ignore", divide="ignore"):
        acc_b = np.where(sm > 0, sk / sm, np.nan)
        acc = np.where(M.sum(-1) > 0, K.sum(-1) / M.sum(-1), np.nan)
    lo, hi = _bootstrap.percentile_interval(acc_b, ci_level)
    model = ds["model"]
    out = xr.Dataset({"accuracy": ("model", acc), "accuracy_lo": ("model", lo), "accuracy_hi": ("model", hi),
                      "n": ("model", M.sum(-1).round().astype(np.int64))}, coords={"model": model.values})
    out.attrs.update(threshold=threshold, max_visibility_m=max_visibility_m, task=task, arms=",".join(arms))
    return out


def reliability_table(ds: xr.Dataset, confidences=CONFIDENCES, tasks=("t2", "t3"), arms=cube.PHYSICAL_ARMS,
                      n_bins: int = 10) -> xr.Dataset:
    """Reliability-diagram data per model, arm and task, pooled over the sweep levels.

    :func:`murk.results.reliability_bins` over all answers of the degraded
    levels 1-8 (250 ... 1.953125 m) of each physical arm (the clean image,
    shared by the arms, is left out); a post-hoc addition of the spec (Fig. 5).

    Returns
    -------
    xarray.Dataset
        (model, arm, task, confidence, bin): ``count``, ``mean_confidence``,
        ``accuracy``; ``bin_lo``/``bin_hi`` edges on ``bin``.
    """
    per_task = []
    for task in tasks:
        q, _ = question_scores(ds, task)
        q = q.sel(arm=list(arms)).isel(level=np.flatnonzero(q["level"].values > 0))
        corr = q.sel(readout="correct", drop=True)
        parts = [_calibration.reliability_bins(q.sel(readout=c, drop=True).clip(0.0, 1.0), corr, n_bins,
                                          dim=["level", "unit"])
                 for c in confidences]
        per_task.append(xr.concat(parts, dim=xr.DataArray(list(confidences), dims="confidence", name="confidence")))
    out = xr.concat(per_task, dim=xr.DataArray(list(tasks), dims="task", name="task"))
    return out.transpose("model", "arm", "task", "confidence", "bin")


def _stat(point: xr.DataArray, lo: xr.DataArray, hi: xr.DataArray) -> xr.DataArray:
    out = xr.concat([point, lo.transpose(*point.dims), hi.transpose(*point.dims)],
                    dim=xr.DataArray(list(STATS), dims="stat", name="stat")).transpose(..., "stat")
    out.attrs = dict(point.attrs)
    return out


def scores_dataset(means: xr.Dataset, crossings: xr.Dataset, confidence: xr.Dataset, selective: xr.Dataset,
                   monotonic: xr.Dataset, confident: xr.Dataset, reliability: xr.Dataset,
                   attrs: dict | None = None) -> xr.Dataset:
    """One dataset of every score, with a ``stat`` coordinate (point, lo, hi).

    Variables (dims before ``stat``):

    * ``mean`` (model, arm, level, task, readout, stat), ``n``;
    * ``ece``, ``auroc`` (model, arm, level, task, confidence, stat), ``n_answers``;
    * ``coverage``, ``risk`` (model, arm, level, task, option, stat);
    * ``v_cross_m``, ``w`` (model, arm, task, readout, stat), ``censored``,
      ``censored_side``, ``w_censored_side``, ``w_lower_bound``,
      ``w_upper_bound``; ``v_acc_blank_m`` (model, arm, task, stat),
      ``censored_blank``, ``censored_blank_side``;
    * ``mono_raw``, ``mono_beyond_noise``, ``mono_pairs`` (model, arm, task, readout);
    * ``confident_accuracy`` (model, stat), ``confident_n``;
    * ``reliability_count``, ``reliability_confidence``, ``reliability_accuracy``
      (model, arm, task, confidence, bin).

    Arms missing from a statistic are NaN (False for flags, 0 for counts).
    """
    arms = list(means["arm"].values)

    level_coords = {k: means[k] for k in ("visibility_m", "severity") if k in means.coords}

    def bare(ds):   # the level's per-arm coordinates are set once, from the condition means, below
        return ds.drop_vars(list(level_coords), errors="ignore")

    means, confidence, selective, confident = bare(means), bare(confidence), bare(selective), bare(confident)
    crossings, monotonic, reliability = bare(crossings), bare(monotonic), bare(reliability)

    def full(ds: xr.Dataset) -> xr.Dataset:
        fill = {k: (False if v.dtype == bool else 0 if np.issubdtype(v.dtype, np.integer)
                    else "" if v.dtype.kind in "US" else np.nan)
                for k, v in ds.data_vars.items()}
        return ds.reindex(arm=arms, fill_value=fill)

    crossings, monotonic, reliability = full(crossings), full(monotonic), full(reliability)
    out = xr.Dataset({
        "mean": _stat(means["mean"], means["lo"], means["hi"]),
        "n": means["n"],
        "ece": _stat(confidence["ece"], confidence["ece_lo"], confidence["ece_hi"]),
        "auroc": _stat(confidence["auroc"], confidence["auroc_lo"], confidence["auroc_hi"]),
        "n_answers": confidence["n_answers"],
        "coverage": _stat(selective["coverage"], selective["coverage_lo"], selective["coverage_hi"]),
        "risk": _stat(selective["risk"], selective["risk_lo"], selective["risk_hi"]),
        "v_cross_m": _stat(crossings["v_cross_m"], crossings["v_lo_m"], crossings["v_hi_m"]),
        "censored": crossings["censored"],
        "censored_side": crossings["censored_side"],
        "w_censored_side": crossings["w_censored_side"],
        "w": _stat(crossings["w"], crossings["w_lo"], crossings["w_hi"]),
        "w_lower_bound": crossings["w_lower_bound"],
        "w_upper_bound": crossings["w_upper_bound"],
        "v_acc_blank_m": _stat(crossings["v_acc_blank_m"], crossings["v_acc_blank_lo_m"],
                               crossings["v_acc_blank_hi_m"]),
        "censored_blank": crossings["censored_blank"],
        "censored_blank_side": crossings["censored_blank_side"],
        "mono_raw": monotonic["raw"],
        "mono_beyond_noise": monotonic["beyond_noise"],
        "mono_pairs": monotonic["n_pairs"],
        "confident_accuracy": _stat(confident["accuracy"], confident["accuracy_lo"], confident["accuracy_hi"]),
        "confident_n": confident["n"],
        "reliability_count": reliability["count"],
        "reliability_confidence": reliability["mean_confidence"],
        "reliability_accuracy": reliability["accuracy"],
    }).assign_coords(level_coords)
    out["v_cross_m"].attrs.update(units="m", long_name="crossing visibility")
    out["v_acc_blank_m"].attrs.update(units="m", long_name="V_acc with the blank-image accuracy as floor (post hoc)")
    out["w"].attrs.update(units="decades", long_name="blind-spot width W = log10(V_acc / V_aware)")
    out["stat"].attrs.update(long_name="point estimate and percentile bootstrap interval (lo, hi)")
    out.attrs.update({k: v for k, v in (attrs or {}).items()})
    out.attrs.update(confident_threshold=float(confident.attrs.get("threshold", 0.9)),
                     confident_max_visibility_m=float(confident.attrs.get("max_visibility_m", 15.625)),
                     confident_task=str(confident.attrs.get("task", "t2")))
    return out


def image_groups(ds: xr.Dataset) -> list[tuple[list[str], np.ndarray]]:
    """The models of a cube grouped by the images they were read out on.

    Parameters
    ----------
    ds : xarray.Dataset
        The cube (:func:`murk.results.merge_models`).

    Returns
    -------
    list of (models, images)
        One entry per distinct set of images, in the order of the cube's models:
        the model ids (str, cube order) and a bool mask over ``image`` (shape
        (n_images,)) of the images they were run on (:func:`murk.results.images_run`:
        all but those with ``missing_reason`` :data:`murk.results.NOT_RUN`). A cube
        whose models all ran on every image gives one group with an all-True mask.
    """
    run = cube.images_run(ds).transpose("model", "image").values
    groups: dict[bytes, tuple[list[str], np.ndarray]] = {}
    for m, mask in zip(ds["model"].values, run):
        groups.setdefault(mask.tobytes(), ([], mask.copy()))[0].append(str(m))
    return list(groups.values())


def common_images(ds: xr.Dataset, models) -> np.ndarray:
    """The images every one of ``models`` was read out on: where models are compared, the paired sample.

    Parameters
    ----------
    ds : xarray.Dataset
        The cube.
    models : str or sequence of str
        Model ids of the cube.

    Returns
    -------
    numpy.ndarray
        bool, shape (n_images,): True where no model of ``models`` has
        ``missing_reason`` :data:`murk.results.NOT_RUN`.
    """
    models = [models] if isinstance(models, str) else list(models)
    run = cube.images_run(ds.sel(model=models)).transpose("model", "image").values
    return run.all(axis=0)


def analyse(ds: xr.Dataset, n_resamples: int = 1000, n_resamples_crossing: int = 2000, seed: int = 0,
            ci_level: float = 0.95, chance: dict | None = None) -> dict[str, xr.Dataset]:
    """Every statistic of the study from one paired bootstrap draw per set of images.

    Parameters
    ----------
    ds : xarray.Dataset
        The cube (loaded).
    n_resamples : int, default 1000
        Resamples for per-condition values (means, ECE, AUROC, coverage/risk,
        confident errors).
    n_resamples_crossing : int, default 2000
        Resamples for crossing points and W.
    seed : int, default 0
        Seed of the one draw (config ``analysis.bootstrap_seed``).
    ci_level : float, default 0.95
    chance : dict, optional
        ``{"t2": 0.25, "t3": 0.5}`` (config ``analysis.chance``).

    Returns
    -------
    dict of xarray.Dataset
        ``means``, ``crossings``, ``confidence``, ``selective``,
        ``monotonicity``, ``confident``, ``reliability`` and ``scores``
        (:func:`scores_dataset`).

    Notes
    -----
    Every statistic of a model is over the images it was read out on
    (:func:`image_groups`): a model on the first N items of the selection (its
    entry's ``n_items``) is analysed on those N images with its own draw,
    ``bootstrap_counts(N, B, seed)``, so its point estimates and intervals equal
    those of its store analysed alone. Models run on the same images share one
    draw (paired, as before); the results are in the cube's model order.
    """
    groups = image_groups(ds)
    if len(groups) > 1 or not groups[0][1].all():
        per_group = [analyse(ds.sel(model=models) if mask.all() else
                             ds.sel(model=models).isel(image=np.flatnonzero(mask)), n_resamples,
                             n_resamples_crossing, seed, ci_level, chance) for models, mask in groups]
        order = [str(m) for m in ds["model"].values]
        return {k: xr.concat([r[k] for r in per_group], dim="model", combine_attrs="override").sel(model=order)
                for k in per_group[0]}
    counts = _bootstrap.bootstrap_counts(ds.sizes["image"], max(n_resamples, n_resamples_crossing), seed)
    scores = image_scores(ds)
    res = {
        "means": condition_means(scores, n_resamples, seed, ci_level, counts=counts),
        "crossings": crossing_table(scores, n_resamples_crossing, seed, ci_level, chance, counts=counts),
        "confidence": confidence_scores(ds, counts, n_resamples, seed, ci_level),
        "selective": selective_abstain(ds, counts=counts, n_resamples=n_resamples, ci_level=ci_level),
        "monotonicity": monotonicity_table(scores),
        "confident": confident_errors(ds, counts, n_resamples=n_resamples, ci_level=ci_level),
        "reliability": reliability_table(ds),
    }
    res["scores"] = scores_dataset(**{k: res[k] for k in ("means", "crossings", "confidence", "selective")},
                                   monotonic=res["monotonicity"], confident=res["confident"],
                                   reliability=res["reliability"],
                                   attrs={"n_resamples": n_resamples, "n_resamples_crossing": n_resamples_crossing,
                                          "bootstrap_seed": seed, "ci_level": ci_level})
    return res


# --------------------------------------------------------------------------- read-out health checks


def low_option_mass(ds: xr.Dataset, threshold: float | None = None) -> list[str]:
    """Models of the cube whose median clean option mass is below ``threshold`` for a task.

    Parameters
    ----------
    ds : xarray.Dataset
        The cube.
    threshold : float, optional
        Default :data:`murk.readout.OPTION_MASS_MIN` (0.5).

    Returns
    -------
    list of str
        Model ids, in cube order (models without option mass, e.g. the monitor, never).
    """
    thr = OPTION_MASS_MIN if threshold is None else float(threshold)
    med = median_option_mass(ds)
    low = (med < thr).any("task")
    return [str(m) for m in med["model"].values if bool(low.sel(model=m))]


#: wording -> (verbal_conf read-out, verbal_stop read-out, verbal_text variable)
VERBAL_WORDING_READOUTS = {
    "v1": ("verbal_conf", "verbal_stop", "verbal_text"),
    "v2": ("verbal_conf_v2", "verbal_stop_v2", "verbal_text_v2"),
    "v3": ("verbal_conf_v3", "verbal_stop_v3", "verbal_text_v3"),
}


def verbal_rates(ds: xr.Dataset, by_task: bool = False) -> xr.Dataset:
    """Parse rate and token-limit-hit rate of the verbalized confidence per model, arm, level and wording.

    A continuation counts as *asked* where its ``verbal_stop`` is recorded (0 =
    ended at end-of-sequence, 1 = ran to the token limit; NaN = not asked); it
    is *parsed* where its ``verbal_conf`` is not NaN
    (:func:`murk.readout.parse_verbal_confidence`). A high limit-hit rate with a
    low parse rate says the 12-token budget cut the confidence off; a low parse
    rate with few limit hits says the model did not state one.

    Parameters
    ----------
    ds : xarray.Dataset
        The cube (:mod:`murk.results`), or one model's store (no ``model`` dim).
    by_task : bool
        Keep the ``task`` dim (t2, t3_true, t3_false); default pooled over tasks.

    Returns
    -------
    xarray.Dataset
        Dims (model,) arm, level, (task,) wording (v1, v2, v3) with ``n_asked``
        (int64, continuations asked over images and pooled tasks), ``parse_rate``
        and ``limit_hit_rate`` (float64 in [0, 1], NaN where nothing was asked).
        Cubes written before ``verbal_stop`` existed count a continuation as
        asked where its text is not empty and have NaN limit-hit rates.
    """
    readouts = list(ds["readout"].values)
    value = ds["value"].astype(np.float64)
    pool = ["image"] if by_task else ["task", "image"]
    parts = []
    for wording, (conf_name, stop_name, text_name) in VERBAL_WORDING_READOUTS.items():
        if conf_name not in readouts:
            continue
        conf = value.sel(readout=conf_name, drop=True)
        if stop_name in readouts:
            stop = value.sel(readout=stop_name, drop=True)
            asked = stop.notnull()
        else:
            stop = xr.full_like(conf, np.nan)
            asked = (ds[text_name] != "") if text_name in ds else conf.notnull()
        n = asked.sum(pool)
        parsed = (conf.notnull() & asked).sum(pool)
        hits = (stop == 1.0).where(asked).sum(pool, min_count=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            part = xr.Dataset({
                "n_asked": n.astype(np.int64),
                "parse_rate": (parsed / n).where(n > 0),
                "limit_hit_rate": (hits / n).where(n > 0),
            })
        parts.append(part.expand_dims(wording=[wording]))
    out = xr.concat(parts, dim="wording")
    out["parse_rate"].attrs = {"long_name": "fraction of asked continuations with a parsed confidence", "units": "1"}
    out["limit_hit_rate"].attrs = {"long_name": "fraction of asked continuations cut by the token limit",
                                   "units": "1"}
    order = [d for d in ("model", "arm", "level", "task", "wording") if d in out.dims]
    return out.transpose(*order)
