"""Post-hoc temperature scaling of first-token option probabilities, globally and by visibility.

A model's internal confidence (``c_int``, the largest first-token option
probability renormalised over the options, :mod:`murk.readout`) lags its accuracy
under degradation (spec Sec. IV). Temperature scaling (Guo et al. 2017, "On
calibration of modern neural networks") divides the log-probabilities by a
temperature ``T`` fitted by maximum likelihood on held-out answers; one global
``T`` cannot be right across corruption levels (Tomani et al. 2021; Roschewitz
et al. 2025), so murk also fits a temperature that is a function of the
measured visibility, ``T(V) = exp(a + b log10 V)``, with V the visibility
monitor's estimate (:mod:`murk.monitor`), and an oracle temperature per level.

=============================  ==================================================
:func:`apply_temperature`      ``p ** (1/T)`` renormalised, in log space
:func:`fit_temperature`        maximum-likelihood T of the correct options
:func:`fit_visibility_temperature`  maximum-likelihood (a, b) of T(V)
:func:`visibility_temperature` T(V) = exp(a + b log10 V), V clipped at CAP_M
:func:`_negative_log_likelihood`  mean NLL of the correct options, nats
:func:`option_confidence`      max over options (c_int)
:func:`_option_answer`          argmax over options
:func:`recalibrate`            the four methods fitted on one half, applied to all
:func:`model_halves`           one model's own images and its calibration half of them
=============================  ==================================================

References
----------
Guo, C., Pleiss, G., Sun, Y. & Weinberger, K. Q. (2017). On calibration of modern
    neural networks. ICML 2017, PMLR 70, 1321-1330. (temperature scaling)
Tomani, C., Gruber, S., Erdem, M. E., Cremers, D. & Buettner, F. (2021). Post-hoc
    uncertainty calibration for domain drift scenarios. CVPR 2021.
Roschewitz, M., Mehta, R., De Sousa Ribeiro, F. & Glocker, B. (2025). Where are we
    with calibration under dataset shift in image classification? arXiv:2507.07780.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize, minimize_scalar

from murk import results
from murk.monitor._estimator import CAP_M
from murk.monitor._evaluation import split_images

__all__ = ["SUM_TOL", "T_BOUNDS", "P_FLOOR", "METHODS", "apply_temperature", "fit_temperature",
           "fit_visibility_temperature", "visibility_temperature",
           "option_confidence", "recalibrate", "model_halves"]

#: Tolerance on a row's sum of option probabilities (they are renormalised read-outs, so
#: they sum to 1 up to float64 rounding of a few ulp; 1e-6 also admits float32 stores).
SUM_TOL = 1e-6
#: Bounds of a fitted temperature: 0.05 sharpens a 0.6/0.4 split to 0.9997 (1.5 ** 20 = 3325 to 1), 20 flattens a
#: 0.999/0.001 split to 0.59/0.41; beyond them the likelihood is flat to many digits (all answers right, or
#: all confidences at the floor) and the optimum is a bound, not an estimate.
T_BOUNDS = (0.05, 20.0)


def _log_probs(probs) -> np.ndarray:
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2:
        raise ValueError(f"option probabilities must have shape (n, k), got {p.shape}")
    fin = ~np.isnan(p)
    if np.any(p[fin] < 0) or np.any(p[fin] > 1 + SUM_TOL):
        raise ValueError("option probabilities must lie in [0, 1] (NaN: an option the item does not have)")
    s = np.where(fin, p, 0.0).sum(axis=1)
    bad = np.flatnonzero(np.abs(s - 1.0) > SUM_TOL)
    if bad.size:
        raise ValueError(f"option probabilities must sum to 1 over each row's options (tolerance {SUM_TOL:g}); "
                         f"row {bad[0]} sums to {s[bad[0]]:.9g}")
    with np.errstate(divide="ignore"):
        return np.where(fin, np.log(np.where(fin, p, 1.0)), np.nan)


def _check_temperature(T, n: int) -> np.ndarray:
    t = np.asarray(T, dtype=np.float64)
    if t.ndim > 1 or (t.ndim == 1 and t.size != n):
        raise ValueError(f"temperature must be a scalar or have shape ({n},), got {t.shape}")
    if not np.all(np.isfinite(t)) or np.any(t <= 0):
        raise ValueError(f"temperature must be finite and > 0, got {T!r}")
    return np.broadcast_to(t, (n,))


def _tempered_log(logp: np.ndarray, t: np.ndarray) -> np.ndarray:
    """log of ``p ** (1/T)`` renormalised per row; NaN options stay NaN, zeros stay -inf."""
    z = logp / t[:, None]
    z = z - np.nanmax(np.where(np.isneginf(z), np.nan, z), axis=1, keepdims=True) if z.size else z
    with np.errstate(invalid="ignore"):
        lse = np.log(np.nansum(np.exp(z), axis=1, keepdims=True))
    return z - lse


def apply_temperature(probs, T) -> np.ndarray:
    """Temperature-scaled option probabilities, ``p ** (1/T) / sum_j p_j ** (1/T)``.

    Computed in log space (``log p / T`` minus the row maximum, exponentiated,
    normalised), so that large ``1/T`` neither overflows nor underflows the top
    option.

    Parameters
    ----------
    probs : array_like of float, shape (n, k)
        Option probabilities, each row summing to 1 (within :data:`SUM_TOL`) over
        its non-NaN entries; NaN marks an option the item does not have (t3 has two
        of t2's four) and stays NaN. Zeros stay zero.
    T : float or array_like of float, shape (n,)
        Temperature (> 0): one for all rows or one per row. ``T = 1`` is the identity,
        ``T > 1`` flattens, ``T < 1`` sharpens.

    Returns
    -------
    numpy.ndarray of float64, shape (n, k)

    Raises
    ------
    ValueError
        ``probs`` not 2-D, outside [0, 1] or rows not summing to 1; ``T`` not finite,
        not > 0 or of another length.

    Examples
    --------
    >>> apply_temperature([[0.64, 0.36]], 2.0).round(3).tolist()
    [[0.571, 0.429]]
    """
    logp = _log_probs(probs)
    t = _check_temperature(T, logp.shape[0])
    if logp.shape[0] == 0:
        return np.exp(logp)
    out = np.exp(_tempered_log(logp, t))
    same = t == 1.0
    out[same] = np.asarray(probs, dtype=np.float64)[same]   # T = 1 is the identity exactly (no log/exp rounding)
    return out


def _check_target(target, logp: np.ndarray) -> np.ndarray:
    y = np.asarray(target)
    n, k = logp.shape
    if y.shape != (n,):
        raise ValueError(f"target must have shape ({n},), got {y.shape}")
    if n == 0:
        raise ValueError("no answers to fit (n = 0)")
    yf = y.astype(np.float64)
    if not np.all(np.isfinite(yf)) or np.any(yf != np.round(yf)) or np.any(yf < 0) or np.any(yf >= k):
        raise ValueError(f"target must hold option indices in 0..{k - 1}")
    y = yf.astype(np.int64)
    lt = logp[np.arange(n), y]
    if np.any(np.isnan(lt)):
        raise ValueError(f"target names an absent (NaN) option in row {int(np.flatnonzero(np.isnan(lt))[0])}")
    if np.any(np.isneginf(lt)):
        raise ValueError(f"the correct option has probability 0 in row {int(np.flatnonzero(np.isneginf(lt))[0])}: "
                         "its negative log-likelihood is infinite at every temperature (floor the "
                         "probabilities first, as recalibrate does with P_FLOOR)")
    return y


def _nll(logp: np.ndarray, y: np.ndarray, t: np.ndarray) -> float:
    lq = _tempered_log(logp, t)
    return float(-np.mean(lq[np.arange(y.size), y]))


def _negative_log_likelihood(probs, target, T=1.0) -> float:
    """Mean negative log-likelihood of the correct options after temperature ``T``, in nats.

    Parameters
    ----------
    probs : array_like of float, shape (n, k)
        As :func:`apply_temperature`.
    target : array_like of int, shape (n,)
        Index of the correct option per row.
    T : float or array_like, shape (n,), default 1.0

    Returns
    -------
    float

    Raises
    ------
    ValueError
        As :func:`apply_temperature`; a target out of range, on a NaN option or on
        a probability of 0 (infinite NLL); n = 0.
    """
    logp = _log_probs(probs)
    y = _check_target(target, logp)
    return _nll(logp, y, _check_temperature(T, y.size))


def fit_temperature(probs, target) -> float:
    """Maximum-likelihood temperature of the correct options (Guo et al. 2017).

    Minimises :func:`_negative_log_likelihood` over ``log T`` within
    :data:`T_BOUNDS` (bounded Brent search, ``scipy.optimize.minimize_scalar``);
    the NLL of one temperature is unimodal in ``log T`` in practice. The search is
    on ``log T`` because the scaling is multiplicative (halving and doubling T are
    equally far from 1). The bounds, 0.05 to 20: at 0.05 a 0.6/0.4 split is
    already 0.9997/0.0003 and at 20 a 0.999/0.001 split is 0.59/0.41, so beyond
    them the NLL is flat to many digits; its minimum lies there only in degenerate
    data (every answer right: T -> 0; the correct option no more likely than the
    others: T -> infinity), where the returned bound says "beyond the range", not
    an estimate.

    Parameters
    ----------
    probs : array_like of float, shape (n, k)
        Option probabilities, rows summing to 1 (NaN: absent options).
    target : array_like of int, shape (n,)
        Index of the correct option.

    Returns
    -------
    float
        T in :data:`T_BOUNDS` (a bound when the optimum lies beyond it).

    Raises
    ------
    ValueError
        As :func:`_negative_log_likelihood` (n = 0, a target out of range, on a NaN
        option or with probability 0).
    """
    logp = _log_probs(probs)
    y = _check_target(target, logp)
    lo, hi = np.log(T_BOUNDS[0]), np.log(T_BOUNDS[1])
    res = minimize_scalar(lambda u: _nll(logp, y, np.full(y.size, np.exp(u))), bounds=(lo, hi), method="bounded",
                          options={"xatol": 1e-6})
    return float(np.exp(res.x))


def visibility_temperature(visibility_m, a: float, b: float) -> np.ndarray:
    """``T(V) = exp(a + b log10 V)``, with V clipped to at most :data:`murk.monitor.CAP_M`.

    The clip: the monitor reports V̂ = CAP_M (10 km) for clear images, a lower bound
    rather than an estimate, so every visibility beyond it takes the same temperature;
    and the temperature is clipped to :data:`T_BOUNDS`, the range the fits search.

    Parameters
    ----------
    visibility_m : array_like of float, any shape
        Visibility in metres, > 0.
    a, b : float
        Intercept and slope per decade of V.

    Returns
    -------
    numpy.ndarray of float64, the shape of *visibility_m*

    Raises
    ------
    ValueError
        A visibility that is not finite and > 0.
    """
    v = np.asarray(visibility_m, dtype=np.float64)
    if not np.all(np.isfinite(v)) or np.any(v <= 0):
        raise ValueError("visibility_m must be finite and > 0 (metres)")
    return np.clip(np.exp(a + b * np.log10(np.minimum(v, CAP_M))), *T_BOUNDS)


def fit_visibility_temperature(probs, target, visibility_m) -> tuple[float, float]:
    """Maximum-likelihood ``(a, b)`` of ``T(V) = exp(a + b log10 V)``.

    Minimises the mean NLL of the correct options under per-row temperatures
    :func:`visibility_temperature` (L-BFGS-B from the global fit, ``a = log T``,
    ``b = 0``, finite-difference gradient); V is clipped at
    :data:`murk.monitor.CAP_M` before the log: the monitor reports CAP_M for a
    clear image (a lower bound, flagged ``censored="clear"``), so V beyond it
    carries no information and must not pull the slope ``b``; the fit with such
    V is the fit with V = CAP_M.

    Parameters
    ----------
    probs : array_like of float, shape (n, k)
    target : array_like of int, shape (n,)
    visibility_m : array_like of float, shape (n,)
        Visibility per row in metres (e.g. the monitor's V̂), finite and > 0.

    Returns
    -------
    (a, b) : tuple of float
        Intercept (log T at V = 1 m) and slope per decade of V.

    Raises
    ------
    ValueError
        As :func:`fit_temperature`; a visibility of another length, not finite or
        not > 0.
    """
    logp = _log_probs(probs)
    y = _check_target(target, logp)
    v = np.asarray(visibility_m, dtype=np.float64)
    if v.shape != y.shape:
        raise ValueError(f"visibility_m must have shape {y.shape}, got {v.shape}")
    visibility_temperature(v, 0.0, 0.0)   # validates
    x = np.log10(np.minimum(v, CAP_M))
    a0 = np.log(fit_temperature(probs, y))
    lo, hi = np.log(T_BOUNDS[0]), np.log(T_BOUNDS[1])

    def nll(ab):
        return _nll(logp, y, np.exp(np.clip(ab[0] + ab[1] * x, lo, hi)))

    res = minimize(nll, x0=np.array([a0, 0.0]), method="L-BFGS-B")
    return float(res.x[0]), float(res.x[1])


def option_confidence(probs) -> np.ndarray:
    """Largest option probability per row (``c_int`` of renormalised probabilities); NaN for an all-NaN row.

    Parameters
    ----------
    probs : array_like of float, shape (n, k)

    Returns
    -------
    numpy.ndarray of float64, shape (n,)
    """
    p = np.asarray(probs, dtype=np.float64)
    out = np.full(p.shape[0], np.nan)
    ok = ~np.all(np.isnan(p), axis=1)
    out[ok] = np.nanmax(p[ok], axis=1)
    return out


def _option_answer(probs) -> np.ndarray:
    """Index of the largest option probability per row (the answer); -1 for an all-NaN row.

    Parameters
    ----------
    probs : array_like of float, shape (n, k)

    Returns
    -------
    numpy.ndarray of int64, shape (n,)
    """
    p = np.asarray(probs, dtype=np.float64)
    out = np.full(p.shape[0], -1, dtype=np.int64)
    ok = ~np.all(np.isnan(p), axis=1)
    out[ok] = np.nanargmax(p[ok], axis=1)
    return out


#: The recalibration methods of :func:`recalibrate`, in the order the paper reports them.
METHODS = ("none", "global", "per_level", "visibility")

#: Probability floor of :func:`recalibrate`: option probabilities below it are raised to it (and the rows
#: renormalised) before fitting and applying. A first-token probability is the float32 softmax of the
#: read-out (murk.readout), whose smallest relative value is about 1e-38, and a letter whose logit lies more than
#: about 104 below the top one is exactly 0; a target at exactly 0 would make the likelihood infinite for
#: every temperature. 1e-12 (27.6 nats below 1) keeps it finite and moves no confidence by more than 3e-12.
P_FLOOR = 1e-12


def _floored(probs: np.ndarray) -> np.ndarray:
    p = np.where(np.isnan(probs), np.nan, np.maximum(probs, P_FLOOR))
    return p / np.nansum(p, axis=1, keepdims=True)


def recalibrate(probs, target, calibrate, *, group=None, visibility_m=None) -> tuple[dict, dict]:
    """Fit the four recalibrations on one half of the rows and apply them to every row.

    ``none`` leaves the probabilities as they are; ``global`` fits one temperature
    (:func:`fit_temperature`); ``per_level`` one temperature per ``group`` (the
    oracle: the condition, arm and level, each row was rendered at); ``visibility``
    the temperature ``T(V) = exp(a + b log10 V)`` of a visibility estimate
    (:func:`fit_visibility_temperature`; rows without an estimate take the global
    temperature). Every fit uses only the rows where ``calibrate`` is True and that
    have probabilities and a target; the probabilities are floored at
    :data:`P_FLOOR` first.

    Parameters
    ----------
    probs : array_like of float, shape (n, k)
        Option probabilities, rows summing to 1 over their non-NaN options (NaN:
        an option the item does not have; a row of NaN: a missing read-out).
    target : array_like, shape (n,)
        Index of the correct option (float with NaN for a missing read-out, or int).
    calibrate : array_like of bool, shape (n,)
        The calibration half (e.g. :func:`murk.monitor.split_images` of the rows'
        image ids); the other rows are the test half.
    group : array_like of int, shape (n,), optional
        Condition of each row for ``per_level``; without it that method is absent.
        A group without calibration rows takes the global temperature.
    visibility_m : array_like of float, shape (n,), optional
        Visibility estimate per row, metres (NaN: none); without it ``visibility``
        is absent.

    Returns
    -------
    confidence : dict of str -> numpy.ndarray of float64, shape (n,)
        Per method, the recalibrated confidence (maximum option probability; NaN
        for a missing row).
    params : dict
        ``global_T`` (float), ``per_level_T`` ({group: T}), ``visibility_ab``
        ((a, b)), ``n_calibration`` (rows fitted), ``n_no_visibility`` (rows that
        took the global T for want of an estimate).

    Raises
    ------
    ValueError
        No calibration row with probabilities and a target; shapes that do not match.
    """
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2:
        raise ValueError(f"recalibrate: probs must have shape (n, k), got {p.shape}")
    n = p.shape[0]
    t = np.asarray(target, dtype=np.float64).reshape(-1)
    cal = np.asarray(calibrate, dtype=bool).reshape(-1)
    if t.size != n or cal.size != n:
        raise ValueError(f"recalibrate: target and calibrate must have {n} rows, got {t.size} and {cal.size}")
    ok = ~np.all(np.isnan(p), axis=1) & np.isfinite(t)
    fit = ok & cal
    if not fit.any():
        raise ValueError("recalibrate: no calibration row with option probabilities and a target")
    pf = np.full_like(p, np.nan)
    pf[ok] = _floored(p[ok])
    tt = np.where(ok, t, 0).astype(np.int64)
    t_global = fit_temperature(pf[fit], tt[fit])
    conf = {"none": np.where(ok, option_confidence(np.where(ok[:, None], p, 0.0)), np.nan)}
    params: dict = {"global_T": float(t_global), "n_calibration": int(fit.sum())}

    def apply(temps: np.ndarray) -> np.ndarray:
        out = np.full(n, np.nan)
        out[ok] = option_confidence(apply_temperature(pf[ok], temps[ok]))
        return out

    conf["global"] = apply(np.full(n, t_global))
    if group is not None:
        g = np.asarray(group).reshape(-1)
        temps, per = np.full(n, t_global), {}
        for gv in np.unique(g[ok]):
            rows = fit & (g == gv)
            per[gv.item()] = float(fit_temperature(pf[rows], tt[rows])) if rows.any() else float(t_global)
            temps[g == gv] = per[gv.item()]
        conf["per_level"], params["per_level_T"] = apply(temps), per
    if visibility_m is not None:
        v = np.asarray(visibility_m, dtype=np.float64).reshape(-1)
        has_v = np.isfinite(v) & (v > 0)
        rows = fit & has_v
        if not rows.any():
            raise ValueError("recalibrate: no calibration row has a visibility estimate")
        a, b = fit_visibility_temperature(pf[rows], tt[rows], v[rows])
        temps = np.where(has_v, visibility_temperature(np.where(has_v, v, 1.0), a, b), t_global)
        conf["visibility"] = apply(temps)
        params["visibility_ab"] = (float(a), float(b))
        params["n_no_visibility"] = int((ok & ~has_v).sum())
    return conf, params


def model_halves(ds, model: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """One model's own images and the calibration half of them: its recalibration's sample.

    A model read out on the first N items only (its entry's ``n_items``) is
    fitted and scored on those N images: the halves are drawn from them
    (:func:`murk.monitor.split_images` of their image ids, so an image falls in
    the same half for every model that was run on it), and its test half and its
    bootstrap are over its own test images, never over images it was not run on
    (:data:`murk.results.NOT_RUN`).

    Parameters
    ----------
    ds : xarray.Dataset
        The cube (:func:`murk.results.merge_models`), with a ``model`` and an ``image`` dim.
    model : str
        A model id of the cube.
    seed : int, default 0
        Seed of the split (config ``analysis.bootstrap_seed``).

    Returns
    -------
    own : numpy.ndarray of int64, shape (n_own,)
        Positions of the model's own images on the cube's ``image`` dim, in cube order.
    calibrate : numpy.ndarray of bool, shape (n_own,)
        True where the image is in the calibration half; ``own[~calibrate]`` is the test half.

    Raises
    ------
    KeyError
        ``model`` is not in the cube.
    """
    run = np.asarray(results.images_run(ds.sel(model=[model])).transpose("model", "image").values[0], dtype=bool)
    own = np.flatnonzero(run)
    return own, split_images(np.asarray(ds["image"].values)[own], seed=seed)
