"""The monitor's confidence and gate: V_hat mapped to a confidence in [0, 1], the a-priori threshold, and the
abstain decisions of the gate (a bound that does not vouch for a visibility abstains).
"""

from __future__ import annotations

import numpy as np

from murk import scene
from murk.monitor._estimator import CENSORED_CODE

__all__ = ["CONFIDENCE_RANGE_M", "DEFAULT_THRESHOLD_M", "visibility_confidence", "gate_decisions",
           "certified_visibility"]


#: Visibilities (m) mapped to confidence 0 and 1 by :func:`visibility_confidence`:
#: the last sweep level (1.95 m) and the first (250 m) of spec Sec. III.
CONFIDENCE_RANGE_M: tuple[float, float] = (float(scene.SWEEP_M[-1]), float(scene.SWEEP_M[0]))


# ----------------------------------------------------------------------------- confidence, gate


def visibility_confidence(v_hat_m, v_range_m: tuple[float, float] = CONFIDENCE_RANGE_M) -> np.ndarray:
    """Monotone confidence in [0, 1] from an estimated visibility.

    ``c = clip(log10(V_hat / V0) / log10(V1 / V0), 0, 1)`` with ``(V0, V1)`` the
    ends of the sweep, 1.95 m and 250 m (spec Sec. III): 0 at the murkiest level,
    1 at the clearest and above, 0.5 at their geometric mean, 22.1 m. This is the
    monitor's ``c_int`` read-out in the cube.

    Parameters
    ----------
    v_hat_m : array_like of float, any shape
        Estimated visibility in metres; NaN (no usable pixel) gives 0.
    v_range_m : (float, float)
        ``(V0, V1)`` in metres, ``0 < V0 < V1``.

    Returns
    -------
    numpy.ndarray of float64, same shape

    Examples
    --------
    >>> visibility_confidence([1.0, 22.097, 250.0, 1e4]).round(3)
    array([0. , 0.5, 1. , 1. ])
    """
    v0, v1 = (float(x) for x in v_range_m)
    if not 0 < v0 < v1:
        raise ValueError(f"visibility_confidence: need 0 < V0 < V1, got {v_range_m}")
    v = np.asarray(v_hat_m, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.log10(v / v0) / np.log10(v1 / v0)
    return np.where(np.isnan(c), 0.0, np.clip(c, 0.0, 1.0))


#: The monitor's a-priori abstain threshold in metres: the geometric mean of the sweep
#: ends, where :func:`visibility_confidence` is 0.5 (fixed without looking at any VLM).
DEFAULT_THRESHOLD_M: float = float(np.sqrt(CONFIDENCE_RANGE_M[0] * CONFIDENCE_RANGE_M[1]))


def _censored_codes(censored, shape) -> np.ndarray:
    """Numeric codes (:data:`CENSORED_CODE`) from codes, ``censored`` strings or ``bound`` sides."""
    c = np.asarray(censored)
    if c.dtype.kind in "USO":
        table = {**CENSORED_CODE, "below": -1.0, "above": 1.0}
        c = np.vectorize(lambda x: table[str(x)], otypes=[np.float64])(c) if c.size else c.astype(np.float64)
    return np.broadcast_to(np.asarray(c, dtype=np.float64), shape)


def certified_visibility(v_hat_m, censored=None) -> np.ndarray:
    """The visibility an estimate vouches for from below: the gate's score.

    A point estimate or a lower bound (``censored`` code 0 or +1: clear, cap)
    vouches for ``V >= V_hat``; an upper bound (code -1, ``"opaque"``: the true
    V is at most V_hat) vouches for nothing but ``V >= 0``, so its score is 0:
    it never passes a positive threshold, whatever V_hat says.

    Parameters
    ----------
    v_hat_m : array_like of float, any shape
        V_hat in metres (NaN: no estimate).
    censored : array_like, optional
        Broadcastable codes of :data:`CENSORED_CODE` (the cube's
        ``visibility_hat_censored``), ``censored`` strings of
        :func:`estimate_visibility_details` or sides (``"below"``/``"above"``);
        default: every estimate is a point estimate.

    Returns
    -------
    numpy.ndarray of float64, the shape of *v_hat_m*
        V_hat, 0 where it is an upper bound, NaN where it is NaN.

    Examples
    --------
    >>> certified_visibility([30.0, 39.0, 50.0, np.nan], [0, -1, 1, np.nan]).tolist()
    [30.0, 0.0, 50.0, nan]
    """
    v = np.asarray(v_hat_m, dtype=np.float64)
    if censored is None:
        return v.copy()
    code = _censored_codes(censored, v.shape)
    return np.where(np.isnan(v), np.nan, np.where(code < 0, 0.0, v))


def gate_decisions(v_hat_m, threshold_m: float, censored=None) -> np.ndarray:
    """Abstain mask of the visibility gate: abstain unless the estimate vouches for ``V >= threshold``.

    Parameters
    ----------
    v_hat_m : array_like of float, any shape
        Estimated visibility in metres. NaN (no usable pixel) abstains: the
        monitor cannot vouch for the image.
    threshold_m : float
        Threshold in metres.
    censored : array_like, optional
        As :func:`certified_visibility`: an upper bound (opaque, code -1)
        always abstains, however large V_hat is (with most pixels opaque, V_hat
        is the depth of the opaque pixels and says only that V is below it;
        issue 13: on a 8-70 m depth ramp it was 39 m at V = 7.8, 3.9 and 1.95 m
        and the gate answered).

    Returns
    -------
    numpy.ndarray of bool, same shape
        True = abstain (do not ask the VLM).

    Examples
    --------
    >>> gate_decisions([3.0, 30.0, np.nan], 10.0)
    array([ True, False,  True])
    >>> gate_decisions([39.0, 39.0], 22.1, censored=[0, -1])
    array([False,  True])
    """
    v = certified_visibility(v_hat_m, censored)
    with np.errstate(invalid="ignore"):
        return ~(v >= float(threshold_m))

