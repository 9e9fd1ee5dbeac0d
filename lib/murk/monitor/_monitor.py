"""The visibility monitor in the cube (beyond the spec): its read-outs per condition, with the depth the
renderings used (the oracle mode) or the degraded image alone (:func:`deployable_readouts`).

The estimator is :mod:`murk.monitor._estimator` (the physics, the dark channel prior, its assumptions and
failure modes), the gate :mod:`murk.monitor._gate`, the evaluation against the VLMs
:mod:`murk.monitor._evaluation`.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from murk import core, scene
from murk.monitor._estimator import (
    _ARMS,
    _check_arm,
    estimate_veiling_light,
    estimate_visibility,
    estimate_visibility_details,
    veiling_light_shape,
)
from murk.monitor._gate import DEFAULT_THRESHOLD_M, certified_visibility, gate_decisions, visibility_confidence

__all__ = ["CONDITION_ARM", "monitor_readouts", "MONITOR_ID", "MONITOR_DEPLOYABLE_ID", "MONITOR_IDS", "ARM_CODE",
           "estimate_arm", "deployable_readouts"]

#: The monitor's name as a "model" of the cube (its read-out store and ``model`` coordinate;
#: coordinate ``kind`` = "monitor").
MONITOR_ID = "murk/visibility-monitor"
#: The deployable mode (:func:`deployable_readouts`): the degraded image alone -- depth from the run's
#: depth backend on the degraded image, the arm from the veiling light's colour, no level.
MONITOR_DEPLOYABLE_ID = "murk/visibility-monitor-deployable"
#: Both modes, oracle first: the cube's ``model`` entries that are monitors, not VLMs.
MONITOR_IDS = (MONITOR_ID, MONITOR_DEPLOYABLE_ID)
#: Code of the ``visibility_hat_arm`` read-out: the estimator arm a monitor used.
ARM_CODE: dict[str, float] = {"fog": 0.0, "underwater": 1.0}


# ----------------------------------------------------------------------------- cube read-outs


#: Which estimator arm reads each condition of ``murk.scene.CONDITIONS``.
CONDITION_ARM: dict[str, str] = {"clean": "fog", "fog": "fog", "underwater": "underwater",
                                 "imagenet_c": "fog", "blank": "fog", "shuffled": "fog"}


def monitor_readouts(images_by_condition: Mapping, depth_m, *, threshold_m: float = DEFAULT_THRESHOLD_M,
                     readouts: tuple[str, ...] | None = None, **kwargs) -> dict:
    """The monitor as an awareness "model": cube-like read-outs per condition of one image.

    For each condition the monitor estimates ``V_hat`` (:func:`estimate_visibility_details`,
    with the estimator arm of :data:`CONDITION_ARM`: fog for the clean image, the
    ImageNet-C control and the image controls; underwater for the underwater arm)
    and maps it to the read-outs of the cube:

    * ``visibility_hat_m``: V_hat itself, metres;
    * ``visibility_hat_censored``: :data:`CENSORED_CODE` of the estimate (0 point
      estimate, -1 upper bound: opaque, +1 lower bound: clear or capped, NaN no
      usable pixel);
    * ``c_int`` := :func:`visibility_confidence` of :func:`certified_visibility`
      (0 at 1.95 m, 1 at >= 250 m; 0 for an upper bound, which vouches for nothing);
    * ``abstain`` := :func:`gate_decisions` (``V_hat < threshold_m``, and always
      for an upper bound or NaN);
    * ``answer``, ``correct``, ``verbal_conf``, ``abstain2``, ``option_mass``,
      ``verbal_conf_v2``, ``verbal_conf_v3``: NaN (the monitor does not answer).

    ``c_int`` and ``abstain`` are thus the conservative ends of
    :func:`signal_range`; :func:`awareness_crossing` and
    :func:`compare_at_equal_coverage` (``censored_monitor=``) treat the censored
    estimates as bounds. The values do not depend on the task: write them into
    every task.

    Parameters
    ----------
    images_by_condition : mapping
        ``{(arm, level): uint8 (H, W, 3)}`` with the keys of
        ``murk.scene.CONDITIONS`` (``("clean", 0)``, ``("fog", 1..8)``, ...): the
        degraded images *without* the box marker.
    depth_m : array_like of float, shape (H, W), or mapping
        Depth in metres of the image; a mapping ``{(arm, level): depth}`` for
        conditions whose scene differs (``("shuffled", 0)``: the partner's depth).
        Conditions missing from a mapping use its ``("clean", 0)`` entry.
    threshold_m : float, default DEFAULT_THRESHOLD_M (22.1 m)
        Abstain threshold of the ``abstain`` read-out.
    readouts : tuple of str, optional
        Names to return; default ``murk.core.READOUTS``.
    **kwargs
        Passed to :func:`estimate_visibility_details`.

    Returns
    -------
    dict
        ``{(arm, level): {readout: float}}``.
    """
    from murk import results

    names = tuple(readouts) if readouts is not None else tuple(core.READOUTS)
    out = {}
    for key, image in images_by_condition.items():
        arm, _level = key
        if arm not in CONDITION_ARM:
            raise ValueError(f"monitor_readouts: unknown condition {key!r}; expected murk.scene.CONDITIONS keys")
        if isinstance(depth_m, Mapping):
            d = depth_m.get(key, depth_m.get(("clean", 0)))
            if d is None:
                raise ValueError(f"monitor_readouts: no depth for condition {key!r} and no ('clean', 0) entry")
        else:
            d = depth_m
        est = estimate_visibility_details(image, d, CONDITION_ARM[arm], **kwargs)
        out[key] = _readout_values(est, threshold_m, names)
    return out


def _readout_values(est: dict, threshold_m: float, names) -> dict:
    """The cube read-outs of one estimate (:func:`monitor_readouts`)."""
    v, code = est["visibility_m"], est["censored_code"]
    values = dict.fromkeys(names, float("nan"))
    values.update({"c_int": float(visibility_confidence(certified_visibility(v, code))),
                   "abstain": float(gate_decisions(v, threshold_m, code)),
                   "visibility_hat_m": float(v), "visibility_hat_censored": float(code),
                   "visibility_hat_arm": ARM_CODE[est["arm"]]})
    return {k: values[k] for k in names}


def estimate_arm(image, depth_m=None, window_px: int | None = None) -> str:
    """Fog or underwater, from the colour of the image's veiling light.

    The veiling light is estimated without an arm's colour prior (the grey dark
    channel of :func:`estimate_veiling_light`, among the farthest pixels when
    *depth_m* is given); the arm is the one whose known veiling-light colour
    (:func:`veiling_light_shape`: grey for fog, the Pope & Fry blue-green under
    water) is nearer in log-chromaticity (``log B_c - mean_c log B_c``, which
    ignores the brightness). A clean image, whose brightest far pixels are
    usually sky or a white surface, reads as fog; so does a grey-blue veil whose
    red is at least about half way (in log ratio) to grey.

    Parameters
    ----------
    image : numpy.ndarray of uint8, shape (H, W, 3)
        Degraded image, 8-bit sRGB, without the box marker.
    depth_m : array_like of float, shape (H, W), optional
        Depth in metres (the deployable mode: estimated on the degraded image).
    window_px : int, optional
        Dark-channel window side; default :func:`default_window_px`.

    Returns
    -------
    {"fog", "underwater"}

    Raises
    ------
    ValueError
        For a non-uint8 or non-(H, W, 3) image (:func:`murk.scene.check_image_depth`).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> clean = (rng.random((64, 64, 3)) * 255).astype(np.uint8)
    >>> depth = np.tile(np.linspace(2, 40, 64)[:, None], (1, 64))
    >>> estimate_arm(scene.fog(clean, depth, 8.0), depth), estimate_arm(scene.underwater(clean, depth, 8.0), depth)
    ('fog', 'underwater')
    """
    image = np.asarray(image)
    if depth_m is None:
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
            raise ValueError(f"estimate_arm: expected a uint8 (H, W, 3) image, got {image.dtype} {image.shape}")
    else:
        image, depth_m = scene.check_image_depth(image, depth_m, "estimate_arm")
    b = np.maximum(estimate_veiling_light(image, "fog", window_px, depth_m=depth_m), 1e-6)
    log_b = np.log(b) - np.log(b).mean()
    dist = {}
    for arm in _ARMS:
        s = np.log(veiling_light_shape(arm))
        dist[arm] = float(np.sum((log_b - (s - s.mean())) ** 2))
    return min(_ARMS, key=lambda a: (dist[a], a))   # a tie (never seen) reads as fog


def deployable_readouts(images_by_condition: Mapping, depth_backend, image_id: int | None = None, *,
                        threshold_m: float = DEFAULT_THRESHOLD_M, readouts: tuple[str, ...] | None = None,
                        **kwargs) -> dict:
    """The deployable monitor: :func:`monitor_readouts` from the degraded image alone.

    Where :func:`monitor_readouts` (the *oracle* mode) is given the depth map the
    image was rendered with (estimated on the clean image) and the arm it was
    rendered in, this mode sees what a deployed system sees: for each condition
    the depth is the run's depth backend applied to the *degraded* image (monocular
    depth is itself weather-sensitive, spec Sec. V: that is part of what is
    measured), the arm is :func:`estimate_arm` of the image, and the veiling light
    is estimated among the farthest pixels of that depth. Nothing depends on the
    condition's key: the key only labels the output. With the offline ``constant``
    backend the depth is 13.8 m everywhere whatever the image (the paper says so);
    with the ``folder`` backend the maps are the precomputed ones, so only the arm
    is estimated.

    Parameters
    ----------
    images_by_condition : mapping
        ``{(arm, level): uint8 (H, W, 3)}``, as for :func:`monitor_readouts`.
    depth_backend : callable
        ``depth_backend(image, image_id) -> float (H, W)`` in metres, e.g. a
        :class:`murk.scene.DepthBackend`.
    image_id : int, optional
        COCO image id (the ``folder`` backend reads its map by it).
    threshold_m : float, default DEFAULT_THRESHOLD_M
    readouts : tuple of str, optional
        Names to return; default ``murk.core.READOUTS``.
    **kwargs
        Passed to :func:`estimate_visibility_details`.

    Returns
    -------
    dict
        ``{(arm, level): {readout: float}}`` with ``visibility_hat_arm`` the
        estimated arm (:data:`ARM_CODE`).

    Raises
    ------
    ValueError
        A depth map of another shape than its image, or with negative values
        (:func:`estimate_visibility_details`).
    """
    from murk import results

    names = tuple(readouts) if readouts is not None else tuple(core.READOUTS)
    out = {}
    for key, image in images_by_condition.items():
        d = np.asarray(depth_backend(image, image_id), dtype=np.float64)
        arm = estimate_arm(image, d)
        out[key] = _readout_values(estimate_visibility_details(image, d, arm, **kwargs), threshold_m, names)
    return out


def _estimate_sweep(image, depth_m, arm: str = "fog", visibilities_m=None, **kwargs) -> np.ndarray:
    """Render an arm's sweep of a clean image and estimate V_hat at every level.

    The validation of the issue: ``physics.fog_sweep`` (or ``underwater_sweep``)
    with *depth_m*, then :func:`estimate_visibility` with the same depth.

    Parameters
    ----------
    image : numpy.ndarray of uint8, shape (H, W, 3)
        Clean image, 8-bit sRGB.
    depth_m : array_like of float, shape (H, W)
        Depth in metres used both to render and to estimate.
    arm : {"fog", "underwater"}, default "fog"
    visibilities_m : array_like of float, shape (L,), optional
        Default ``physics.SWEEP_M``.
    **kwargs
        Passed to :func:`estimate_visibility_details`.

    Returns
    -------
    numpy.ndarray of float64, shape (L,)
        V_hat in metres per level (fog: V; underwater: V_best).
    """
    _check_arm(arm, "estimate_sweep")
    v = scene.SWEEP_M if visibilities_m is None else visibilities_m
    render = scene.fog_sweep if arm == "fog" else scene.underwater_sweep
    return np.array([estimate_visibility(im, depth_m, arm, **kwargs) for im in render(image, depth_m, v)])
