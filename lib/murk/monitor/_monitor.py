"""A visibility monitor: estimate V from one degraded image and its depth (beyond the spec).

The spec (Sec. V, last paragraph) suggests that "a separate image-quality or
visibility estimate that triggers abstention before the VLM is asked" might be a
cheaper and more robust monitor than a VLM's own confidence, and leaves it
untested. This module builds that monitor from the physics of Sec. III and the
dark channel prior (He, Sun & Tang 2009), and the gate policy that uses it.

Estimator
---------
Eq. (1) of the spec, ``I_c = J_c t_c + B_c (1 - t_c)`` with ``t_c = exp(-beta_c z)``,
gives for every pixel and channel, since the clean radiance ``J_c >= 0``::

    1 - I_c / B_c = t_c (1 - J_c / B_c) <= t_c

so each channel bounds the transmission from below, and the bound is tight where
the clean scene is dark in that channel. The dark channel prior (He et al. 2009)
states that in most local patches of a haze-free outdoor image some pixel is dark
in some channel. With the spectral shape ``r_c = beta_c / beta_best`` of the arm
(fog: ``r = (1, 1, 1)``; underwater: the Pope & Fry ratios ``(28.1, 4.84, 1)``)
each channel's bound converts to one on the best-channel transmission
``t = exp(-beta_best z)``, and the estimate is the tightest bound in a window Omega::

    t_hat(x) = max_{y in Omega(x)} max_c (1 - omega * I_c(y) / B_c) ** (1 / r_c)

For fog this is exactly He et al.'s ``t = 1 - omega * min_Omega min_c (I_c / A)``
(the classic dark channel; ``window_space="transmission"``). Because the depth is
known, the default (``window_space="beta"``) takes the window extremum of the
per-pixel bound on ``beta`` instead, ``beta_hat(x) = min_{y in Omega(x)} -ln
t_pix(y) / z(y)``, with ``t_pix`` the bound above without the window: under a
homogeneous medium each pixel bounds ``beta`` from above, so the window minimum is
the tightest bound, without pairing the transmission of a near pixel with the
depth of a far one where the depth varies within the window (identical to He et
al. at constant depth; on the COCO sample both give the same shares, 0.99 fog /
0.98 underwater, but on a steep synthetic depth ramp the transmission window is
biased towards large V by ~15 %). Then, per pixel, ``beta_i = -ln t_hat_i / z_i``; the
robust estimate of ``beta`` is a low quantile (:data:`QUANTILE`, 0.3) of these over
the pixels with a usable depth (:func:`usable_depth`: sky and the far clip of the
depth map, ``z >= 79/80 max(z)``, are excluded; the cut is relative so that a
global depth factor kappa rescales V_hat by kappa exactly) that are not opaque;
clear pixels (``t_hat > t_max``) enter *censored* at their bound (an unreliable
pixel still says on which side it lies), and finally ``V_hat = 3.912 / beta``
(Koschmieder 1924; spec Sec. III). Why a low quantile and not the median: the
prior's residual ``r_i = -ln(1 - J_dark,i / B) >= 0`` only ever raises a pixel's
value, ``beta_i = beta + r_i / z_i``, so the contamination is one-sided; on the
COCO sample the median put 4 of 158 clean images below the gate's 22.1 m and the
0.3 quantile none, with the share within a factor 2 over 3.9-62.5 m unchanged
(``benchmarks/monitor.py --quantiles``). ``method="lsq"`` is a least-squares fit
of ``-ln t_hat`` against ``z`` through the origin over the uncensored pixels
instead.

The veiling light ``B_c`` (the airlight *A* in fog) is estimated as in He et al.:
the mean colour, in linear light, of the 0.1 % of pixels with the brightest dark
channel, where the dark channel for this selection is the window minimum of
``min_c I_c / s_c`` with ``s_c`` the arm's known veiling-light *shape* (grey for
fog; blue-dominated ``murk.scene.underwater_veiling_light`` under water), the
candidates being restricted to the farthest 10 % of the pixels by the known depth
(a deviation from He et al., see :func:`estimate_veiling_light`). It can also be
given (``veiling_light=``), e.g. the spec's 0.8.

Quantisation: a channel's bound counts only where it exceeds two 8-bit code steps
(relative to ``B_c``); otherwise the power ``1 / r_c`` (28 for red under water)
would turn rounding noise into a confident transmission.

``omega``: He et al. use 0.95 for *dehazing*, to keep some haze for depth
perception. For a *measurement* ``omega = 1`` is the unbiased choice under the
prior: ``omega = 0.95`` gives ``t_hat = t + 0.05 (1 - t)``, which under-estimates
``beta z`` by ``ln(1 + 0.05 (1 - t) / t)``, most in dense fog (0.67 of
``beta z = 3``), so it over-estimates V. Measured on the COCO sample (158 images,
ground-plane depth, fog): share within a factor 2 at 3.9-62.5 m 0.99 with
``omega = 1`` against 0.92 with 0.95 (median ratio V_hat / V at 3.9 m: 1.02
against 1.98). The default is 1.0.

Assumptions
-----------
* A homogeneous medium (one ``beta`` per channel over the whole scene), as in the
  renderings of the spec; the veiling light is uniform.
* The metric depth of every pixel is known. In murk's monitor stage it is the
  depth used to render the degradations: an *oracle* that a deployed monitor
  would not have. In a deployment it is an estimate; a global scale error
  ``kappa`` rescales ``V_hat`` by ``kappa`` exactly (as it rescales the spec's
  crossing visibilities), while an error in the *shape* of the depth (e.g. a
  constant depth for a ground plane) distorts V_hat level by level:
  ``benchmarks/monitor.py --sensitivity`` measures both.
* The dark channel of the clean scene is ~0 in most windows (He et al. 2009).

Failure modes
-------------
* White or bright objects filling a window (and the sky) violate the prior: their
  ``t_hat`` is too low, so ``beta`` is over-estimated and ``V_hat`` too small. The
  low quantile and the exclusion of sky/far pixels limit this; a scene that is
  bright everywhere (snow, a white wall) will be judged foggy.
* Clean or nearly clean images: ``-ln t_hat`` is then dominated by the prior's
  residual ``-ln(1 - J_dark / B)``, so ``V_hat`` is large but finite and biased low
  (hundreds of metres to kilometres, not infinity); values above ``cap_m``
  (10 km) are capped and flagged.
* Dense media: pixels below ``t_min`` (farther than about V) are opaque; under the
  prior each says only ``V < z_i`` (``-ln 0.02 = 3.912``), so they are left out of
  the quantile, which is taken over the near pixels that still see through. When
  fewer than 100 usable pixels are not opaque, V_hat is an *upper* bound
  (``censored="opaque"``, side ``"below"``, read-out
  ``visibility_hat_censored = -1``): the 0.3 quantile of the opaque pixels'
  depth. Such a V_hat does not vouch for any visibility: the gate abstains on it
  (:func:`gate_decisions`, :func:`certified_visibility`), and coverage-risk and
  crossings treat it as a bound (:func:`compare_at_equal_coverage`,
  :func:`awareness_crossing`). (Before issue 13 it was the median usable depth,
  which *rose* as the fog thickened, 39 m at V = 7.8, 3.9 and 1.95 m on a 8-70 m
  ramp, and passed the gate.) V cannot be measured much below the nearest depth in
  the image (the ground-plane test depth starts at 3.1 m, so 1.95 m is a bound).
* No pixel with a usable depth (all sky/far/NaN): ``V_hat`` is NaN.
* Under water, the red channel is a strong but usable constraint only near the
  camera; the blue channel carries most pixels and its single-channel prior is
  weaker (blue objects, sky), so accuracy is lower than in fog; see the measured
  shares in ``benchmarks/monitor.py`` and ``tests/test_monitor.py``.

References
----------
He, K., Sun, J. & Tang, X. (2009). Single image haze removal using dark channel
    prior. CVPR 2009, 1956-1963. (spec ref. [5])
Koschmieder, H. (1924). Theorie der horizontalen Sichtweite. Beitr. Phys. freien
    Atmos. 12, 33-53 and 171-181. (spec ref. [1])
Hautiere, N., Tarel, J.-P., Lavenant, J. & Aubert, D. (2006). Automatic fog
    detection and estimation of visibility distance through use of an onboard
    camera. Machine Vision and Applications 17, 8-20. (spec ref. [6])
Geifman, Y. & El-Yaniv, R. (2017). Selective classification for deep neural
    networks. NeurIPS 2017. (coverage and risk; spec refs. [20, 21])
"""

from __future__ import annotations

import warnings
from typing import Mapping

import numpy as np
from scipy.ndimage import maximum_filter, minimum_filter

from murk import core, scene

__all__ = [
    "CAP_M",
    "FAR_M",
    "FAR_FRACTION",
    "QUANTILE",
    "CENSORED_CODE",
    "T_RELIABLE",
    "CONFIDENCE_RANGE_M",
    "DEFAULT_THRESHOLD_M",
    "CONDITION_ARM",
    "spectral_shape",
    "veiling_light_shape",
    "default_window_px",
    "transmission_estimate",
    "estimate_veiling_light",
    "estimate_visibility",
    "estimate_visibility_details",
    "ground_plane_depth",
    "billboard_depth",
    "visibility_confidence",
    "gate_decisions",
    "certified_visibility",
    "SIGNAL_FLOOR",
    "signal_range",
    "awareness_crossing",
    "usable_depth",
    "split_images",
    "pick_threshold",
    "threshold_at_coverage",
    "compare_at_equal_coverage",
    "monitor_readouts",
    "MONITOR_ID",
    "MONITOR_DEPLOYABLE_ID",
    "MONITOR_IDS",
    "ARM_CODE",
    "estimate_arm",
    "deployable_readouts",
]

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

#: Largest visibility the monitor reports, metres: beyond it the prior's residual
#: dominates and V_hat carries no information (flagged ``censored="clear"``).
CAP_M: float = 10_000.0

#: Absolute far cut (m) of the spec's depth maps (clipped to [0.5, 80] m, Sec. III).
#: Kept for callers that pass ``far_m=FAR_M``; the default cut is relative
#: (:data:`FAR_FRACTION`), so that V_hat scales exactly with a global depth factor.
FAR_M: float = 79.0

#: Pixels at or beyond this fraction of the depth map's largest finite value are
#: not used (sky and the far clip of the map): 79 / 80, i.e. ``z >= 79 m`` for the
#: spec's maps clipped at 80 m, and ``z >= 79 kappa`` for the same map scaled by
#: kappa. A constant map (the offline ``constant`` backend) keeps every pixel.
FAR_FRACTION: float = 79.0 / 80.0

#: Quantile of the per-pixel extinction bounds taken as the estimate. The prior's
#: residual only ever *raises* a pixel's ``beta_i`` (``beta_i = beta + r_i / z_i``
#: with ``r_i = -ln(1 - J_dark / B) >= 0``), so the contamination is one-sided and
#: a low quantile is the robust choice; 0.3 was chosen on the COCO sample
#: (``benchmarks/monitor.py --quantiles``): clean images below the 22.1 m gate
#: 4/158 (median) -> 0/158, share within x2 at 3.9-62.5 m unchanged or higher.
QUANTILE: float = 0.3

#: Reliable range of the transmission estimate; outside it a pixel is censored.
T_RELIABLE: tuple[float, float] = (0.02, 0.98)

#: Visibilities (m) mapped to confidence 0 and 1 by :func:`visibility_confidence`:
#: the last sweep level (1.95 m) and the first (250 m) of spec Sec. III.
CONFIDENCE_RANGE_M: tuple[float, float] = (float(scene.SWEEP_M[-1]), float(scene.SWEEP_M[0]))

_ARMS = ("fog", "underwater")
_MIN_PIXELS = 100

#: Numeric code of the ``visibility_hat_censored`` read-out per ``censored`` value of
#: :func:`estimate_visibility_details`: 0 = a point estimate; -1 = *censored below*,
#: V_hat is an upper bound (``"opaque"``: the true V is at most V_hat); +1 =
#: *censored above*, V_hat is a lower bound (``"clear"`` or ``"cap"``: the true V is
#: at least V_hat); NaN = no estimate (``"no_pixels"``, V_hat NaN).
CENSORED_CODE: dict[str, float] = {"": 0.0, "opaque": -1.0, "clear": 1.0, "cap": 1.0, "no_pixels": float("nan")}


# ----------------------------------------------------------------------------- helpers


def _check_arm(arm: str, name: str) -> str:
    if arm not in _ARMS:
        raise ValueError(f"{name}: arm must be one of {_ARMS}, got {arm!r}")
    return arm


def spectral_shape(arm: str = "fog") -> np.ndarray:
    """Ratio ``r_c = beta_c / min_k beta_k`` of an arm (spec Sec. III).

    Parameters
    ----------
    arm : {"fog", "underwater"}

    Returns
    -------
    numpy.ndarray of float64, shape (3,)
        (R, G, B): ``(1, 1, 1)`` for fog; the Pope & Fry (1997) ratios, about
        ``(28.14, 4.84, 1.0)``, under water.

    Raises
    ------
    ValueError
        For an unknown arm.
    """
    _check_arm(arm, "spectral_shape")
    if arm == "fog":
        return np.ones(3)
    return scene.POPE_FRY_ABSORPTION_PER_M / scene.POPE_FRY_ABSORPTION_PER_M.min()


def veiling_light_shape(arm: str = "fog") -> np.ndarray:
    """Known colour of the veiling light of an arm, up to a scale (max = 1).

    Parameters
    ----------
    arm : {"fog", "underwater"}

    Returns
    -------
    numpy.ndarray of float64, shape (3,)
        ``(1, 1, 1)`` for fog (grey airlight); about ``(0.036, 0.207, 1)`` under
        water (``physics.underwater_veiling_light() / 0.8``).
    """
    _check_arm(arm, "veiling_light_shape")
    if arm == "fog":
        return np.ones(3)
    b = scene.underwater_veiling_light()
    return b / b.max()


def default_window_px(height: int, width: int) -> int:
    """Side of the dark-channel window for an image size, in pixels (odd).

    He et al. (2009) use 15 px for images of about 600 px; the window is scaled to
    the longer side, ``15 * max(H, W) / 600``, rounded to an odd integer >= 3 (11 px
    at the study's 448 px).
    """
    k = int(round(15 * max(height, width) / 600))
    k = max(3, k)
    return k if k % 2 == 1 else k + 1


def estimate_veiling_light(image, arm: str = "fog", window_px: int | None = None,
                           top_fraction: float = 0.001, depth_m=None, far_quantile: float = 0.9) -> np.ndarray:
    """Veiling light (airlight) from the brightest dark-channel pixels (He et al. 2009).

    The dark channel for the selection is ``min_Omega min_c I_c / s_c`` in linear
    light, with ``s_c`` = :func:`veiling_light_shape` of the arm; the estimate is
    the mean linear colour of the ``top_fraction`` of all pixels (at least one)
    where it is largest (equal values taken in row-major pixel order; with *depth_m*, at
    most all the candidates). With *depth_m* the candidates are restricted to the
    farthest pixels (depth at or above its ``far_quantile``; NaN/inf count as
    far), which are the most veiled: a deviation from He et al., who have no
    depth, that keeps near white objects from being taken for the veiling light
    (measured on the COCO sample with a ground-plane depth, underwater arm,
    3.9-62.5 m: share of V_hat within a factor 2 of V from 0.90 to 0.98; fog
    unchanged at 0.99; ``benchmarks/monitor.py``).

    Parameters
    ----------
    image : numpy.ndarray of uint8, shape (H, W, 3)
        Degraded image, 8-bit sRGB.
    arm : {"fog", "underwater"}
    window_px : int, optional
        Window side in px; default :func:`default_window_px`.
    top_fraction : float, default 0.001
        Share of pixels used (He et al.: the brightest 0.1 %).
    depth_m : array_like of float, shape (H, W), optional
        Depth in metres; restricts the candidates to the farthest pixels.
    far_quantile : float, default 0.9
        Depth quantile above which pixels are candidates (with *depth_m*).

    Returns
    -------
    numpy.ndarray of float64, shape (3,)
        ``B_c`` in linear light (R, G, B).
    """
    _check_arm(arm, "estimate_veiling_light")
    return _veiling_light(scene.srgb_to_linear(image), arm, window_px or default_window_px(*image.shape[:2]),
                          top_fraction, depth_m, far_quantile)


def _channel_min(x: np.ndarray) -> np.ndarray:
    """``x.min(axis=2)`` for an (H, W, 3) array, as two elementwise minima (the same values, NaN included;
    about 3x faster than the strided reduction on these image sizes)."""
    return np.minimum(np.minimum(x[..., 0], x[..., 1]), x[..., 2])


def _veiling_light(linear: np.ndarray, arm: str, k: int, top_fraction: float = 0.001, depth_m=None,
                   far_quantile: float = 0.9) -> np.ndarray:
    """:func:`estimate_veiling_light` on an image already decoded to linear light (shape (H, W, 3))."""
    dark = minimum_filter(_channel_min(linear / veiling_light_shape(arm)), size=k, mode="nearest").ravel()
    n = max(1, int(round(top_fraction * dark.size)))
    if depth_m is None:
        candidates = np.arange(dark.size)
    else:
        z = np.asarray(depth_m, dtype=np.float64).ravel()
        z = np.where(np.isnan(z), np.inf, z)
        candidates = np.flatnonzero(z >= np.quantile(z, far_quantile, method="higher"))
    # the n largest, ties (the window minimum makes plateaus) taken in pixel order: a stable sort, which, unlike
    # np.argpartition, does not slow down on many equal values (a saturated far region; 20x on a 640 x 426 image)
    idx = candidates[np.argsort(-dark[candidates], kind="stable")[:n]]
    return linear.reshape(-1, 3)[idx].mean(axis=0)


def usable_depth(depth_m, far_m: float | None = None, far_fraction: float = FAR_FRACTION) -> np.ndarray:
    """Pixels whose depth the estimator uses: finite, positive and nearer than the far cut.

    Parameters
    ----------
    depth_m : array_like of float, shape (H, W)
        Depth in metres.
    far_m : float, optional
        Absolute cut: pixels with ``z >= far_m`` are not used. Default None: the
        relative cut ``z >= far_fraction * max(z)`` (max over the finite
        values), which excludes the sky and the far clip of the map and scales
        with the map, so that a global depth factor kappa rescales V_hat by kappa
        exactly. When the relative cut would exclude every pixel (a constant map)
        none is excluded.
    far_fraction : float, default FAR_FRACTION (79/80)

    Returns
    -------
    numpy.ndarray of bool, shape (H, W)
    """
    z = np.asarray(depth_m, dtype=np.float64)
    finite = np.isfinite(z) & (z > 0)
    if far_m is not None:
        return finite & (z < float(far_m))
    if not finite.any():
        return finite
    near = finite & (z < float(far_fraction) * float(z[finite].max()))
    return near if near.any() else finite


def _quantization_step(linear_value: np.ndarray) -> np.ndarray:
    """Linear-light size of one 8-bit sRGB code step at a linear value (per channel)."""
    c = scene.linear_to_srgb(np.asarray(linear_value, dtype=np.float64))
    hi = scene.srgb_to_linear(np.minimum(c + 1 / 255, 1.0))
    lo = scene.srgb_to_linear(np.maximum(c - 1 / 255, 0.0))
    return (hi - lo) / 2.0


def transmission_estimate(image, arm: str = "fog", veiling_light=None, window_px: int | None = None,
                          omega: float = 1.0, t_floor: float = T_RELIABLE[0],
                          depth_m=None, window_space: str = "beta",
                          far_m: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Dark-channel estimate of the best-channel transmission map.

    ``t_hat(x) = max_{y in Omega(x)} max_c (1 - omega I_c(y) / B_c) ** (1 / r_c)``
    (see the module docstring; for fog this is He et al.'s
    ``1 - omega * dark(I / A)``).

    Parameters
    ----------
    image : numpy.ndarray of uint8, shape (H, W, 3)
        Degraded image, 8-bit sRGB.
    arm : {"fog", "underwater"}
        Selects the spectral shape ``r_c`` (:func:`spectral_shape`).
    veiling_light : float or array_like of shape (3,), optional
        ``B_c`` in linear light; default :func:`estimate_veiling_light`.
    window_px : int, optional
        Window side in px; default :func:`default_window_px`.
    omega : float, default 1.0
        He et al.'s haze-keeping factor (0.95 for dehazing; 1 for a measurement).
    t_floor : float, default 0.02
        A channel's bound ``1 - omega I_c / B_c`` counts only where it is at least
        ``max(t_floor, 2 q_c / B_c)``, with ``q_c`` one 8-bit sRGB code step in
        linear light at ``B_c``: below that it is quantisation noise, which the
        power ``1 / r_c`` would blow up (the red channel under water, ``r = 28``:
        without the floor a bound of 0.02 would certify ``t >= 0.87``). Such
        pixels give ``t_hat = 0`` from that channel (no information).
    depth_m : array_like of float, shape (H, W), optional
        Depth in metres: restricts the veiling-light candidates (see
        :func:`estimate_veiling_light`) and enables ``window_space="beta"``.
    window_space : {"beta", "transmission"}, default "beta"
        ``beta``: window minimum of the per-pixel bound ``-ln t_pix / z`` (needs
        *depth_m*; pixels outside :func:`usable_depth` do not take part), then
        ``t_hat = exp(-beta_hat z)`` (NaN where the depth is unusable);
        ``transmission``: He et al.'s window maximum of ``t_pix`` (used whenever
        *depth_m* is None).
    far_m : float, optional
        Absolute far cut of :func:`usable_depth`; default None, the relative cut.

    Returns
    -------
    t_hat : numpy.ndarray of float64, shape (H, W)
        Estimated transmission of the best (least attenuated) channel, in [0, 1].
    veiling_light : numpy.ndarray of float64, shape (3,)
        The ``B_c`` used.
    """
    _check_arm(arm, "transmission_estimate")
    linear = scene.srgb_to_linear(image)
    k = window_px or default_window_px(*image.shape[:2])
    b = (_veiling_light(linear, arm, k, depth_m=depth_m) if veiling_light is None
         else np.broadcast_to(np.asarray(veiling_light, dtype=np.float64), (3,)))
    b = np.maximum(b, 1e-6)
    r = spectral_shape(arm)
    floor = np.maximum(float(t_floor), 2.0 * _quantization_step(b) / b)
    # per channel (contiguous planes, no power where r_c = 1): the same values as the (H, W, 3) expression
    # np.where(bound >= floor, clip(bound, 0, 1), 0) ** (1 / r) followed by .max(axis=2), about twice as fast
    t_pix = None
    for c in range(3):
        bound = 1.0 - omega * linear[..., c] / b[c]  # lower bound on t_c
        t_c = np.where(bound >= floor[c], np.clip(bound, 0.0, 1.0), 0.0)
        if r[c] != 1.0:
            t_c **= 1.0 / r[c]
        t_pix = t_c if t_pix is None else np.maximum(t_pix, t_c)
    if window_space == "transmission" or depth_m is None:
        t_hat = maximum_filter(t_pix, size=k, mode="nearest")
    elif window_space == "beta":
        z = np.asarray(depth_m, dtype=np.float64)
        usable = usable_depth(z, far_m)
        with np.errstate(divide="ignore", invalid="ignore"):
            beta_pix = np.where(usable & (t_pix > 0), -np.log(t_pix) / np.where(usable, z, 1.0), np.inf)
        beta_hat = minimum_filter(beta_pix, size=k, mode="nearest")
        with np.errstate(invalid="ignore", over="ignore"):
            t_hat = np.where(usable, np.exp(-beta_hat * np.where(usable, z, 0.0)), np.nan)
    else:
        raise ValueError(f"transmission_estimate: window_space must be 'beta' or 'transmission', got {window_space!r}")
    return t_hat, np.asarray(b, dtype=np.float64)


# ----------------------------------------------------------------------------- estimator


def estimate_visibility_details(image, depth_m, arm: str = "fog", *, veiling_light=None,
                                window_px: int | None = None, omega: float = 1.0,
                                method: str = "quantile", quantile: float = QUANTILE,
                                t_reliable: tuple[float, float] = T_RELIABLE,
                                far_m: float | None = None, cap_m: float = CAP_M, mask=None,
                                window_space: str = "beta") -> dict:
    """Estimate the visibility of one degraded image, with diagnostics.

    See the module docstring for the estimator, its assumptions and failure modes.

    Parameters
    ----------
    image : numpy.ndarray of uint8, shape (H, W, 3)
        Degraded image, 8-bit sRGB, *without* the red box marker (the box is not
        part of the scene and violates the prior; pass ``mask`` otherwise).
    depth_m : array_like of float, shape (H, W)
        Metric depth *z* in metres, non-negative; NaN/inf and the far cut of
        :func:`usable_depth` are not used.
    arm : {"fog", "underwater"}, default "fog"
        Fog: meteorological visibility *V*; underwater: best-channel visibility
        ``V_best = 3.912 / min_c beta_c`` (spec Sec. III).
    veiling_light : float or array_like of shape (3,), optional
        Known veiling light in linear light (fog: the airlight *A*, 0.8 in the
        spec); default: estimated from the image, among its farthest pixels
        (:func:`estimate_veiling_light` with *depth_m*).
    window_px : int, optional
        Dark-channel window side in px; default :func:`default_window_px`.
    omega : float, default 1.0
        He et al.'s factor (1 for a measurement; see the module docstring).
    method : {"quantile", "median", "lsq"}, default "quantile"
        ``quantile``: the *quantile*-quantile of the per-pixel ``-ln t_hat / z``
        over the pixels that are not opaque (clear pixels at their bound);
        ``median``: the same with ``quantile=0.5``; ``lsq``: least squares of
        ``-ln t_hat`` on ``z`` through the origin over the uncensored pixels.
    quantile : float in (0, 1), default QUANTILE (0.3)
        See :data:`QUANTILE` (why a low quantile).
    t_reliable : (float, float), default (0.02, 0.98)
        Range of ``t_hat`` in which a pixel is uncensored.
    far_m : float, optional
        Absolute far cut (:func:`usable_depth`); default None, the relative cut
        (sky and the far clip of the map excluded, invariant to a depth scale).
    cap_m : float, default 10000.0
        Largest reported visibility, metres.
    mask : array_like of bool, shape (H, W), optional
        Pixels that may be used (e.g. False on a drawn marker).
    window_space : {"beta", "transmission"}, default "beta"
        Where the window extremum is taken (:func:`transmission_estimate`).

    Returns
    -------
    dict
        ``visibility_m`` (float, m; NaN when no pixel is usable), ``beta_per_m``
        (float, m^-1, best channel), ``veiling_light`` (tuple of 3 floats, linear),
        ``n_pixels`` (int, uncensored pixels), ``n_usable`` (int, pixels with a
        usable depth), ``share_opaque`` / ``share_clear`` (float, shares of the
        usable pixels below ``t_min`` / above ``t_max``), ``censored`` (str:
        ``""``; ``"opaque"``: fewer than 100 usable pixels are not opaque, and
        V_hat is an *upper* bound, the *quantile*-quantile of the depth of the
        opaque pixels (under the prior each of them has ``t < t_min``, i.e.
        ``V < z``); ``"clear"``: a share of at least *quantile* of the ranked
        pixels is clear, V_hat is a *lower* bound; ``"cap"``: V_hat above
        ``cap_m``, reported as ``cap_m``, a lower bound; ``"no_pixels"``),
        ``bound`` (``""``, ``"below"`` -- the true V is at most V_hat -- or
        ``"above"`` -- at least V_hat), ``censored_code`` (float,
        :data:`CENSORED_CODE`), ``method``, ``quantile``, ``arm``,
        ``window_px``, ``omega``.

    Raises
    ------
    ValueError
        For a non-uint8 or non-(H, W, 3) image, a depth of another shape or with
        negative values, an unknown arm, method or window space, an invalid
        ``t_reliable`` or a quantile outside (0, 1).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> clean = (rng.random((64, 64, 3)) * 255).astype(np.uint8)
    >>> depth = np.tile(np.linspace(2, 40, 64)[:, None], (1, 64))
    >>> foggy = scene.fog(clean, depth, 20.0)
    >>> d = estimate_visibility_details(foggy, depth, veiling_light=0.8, window_px=5)
    >>> 10 < d["visibility_m"] < 40
    True
    """
    image, depth = scene.check_image_depth(image, depth_m, "estimate_visibility")
    _check_arm(arm, "estimate_visibility")
    if method not in ("quantile", "median", "lsq"):
        raise ValueError(f"estimate_visibility: method must be 'quantile', 'median' or 'lsq', got {method!r}")
    q = 0.5 if method == "median" else float(quantile)
    if not 0 < q < 1:
        raise ValueError(f"estimate_visibility: quantile must lie in (0, 1), got {quantile}")
    t_min, t_max = (float(x) for x in t_reliable)
    if not 0 < t_min < t_max < 1:
        raise ValueError(f"estimate_visibility: need 0 < t_min < t_max < 1, got {t_reliable}")
    k = window_px or default_window_px(*image.shape[:2])
    t_hat, b = transmission_estimate(image, arm, veiling_light, k, omega, t_min, depth, window_space, far_m)
    usable = usable_depth(depth, far_m)
    if mask is not None:
        usable &= np.asarray(mask, dtype=bool)
    out = {"veiling_light": tuple(float(x) for x in b), "method": method, "quantile": q, "arm": arm,
           "window_px": int(k), "omega": float(omega), "n_usable": int(usable.sum())}
    if not usable.any():
        return {**out, "visibility_m": float("nan"), "beta_per_m": float("nan"), "n_pixels": 0,
                "share_opaque": float("nan"), "share_clear": float("nan"), "censored": "no_pixels",
                "bound": "", "censored_code": CENSORED_CODE["no_pixels"]}
    z = depth[usable]
    t = np.nan_to_num(t_hat[usable], nan=0.0)
    opaque = t < t_min
    clear = t > t_max
    ok = ~opaque & ~clear
    # per-pixel bound on beta, clear pixels at their bound (an upper bound on beta_i)
    y = -np.log(np.clip(t, t_min, t_max))
    beta_i = y / z
    ranked = ~opaque  # opaque pixels only say V < z_i under the prior: they bound V from above
    censored = ""
    if opaque.any() and (ranked.sum() < _MIN_PIXELS if method != "lsq" else ok.sum() == 0):
        # (nearly) everything is opaque: V_hat is an upper bound
        v = float(np.quantile(z[opaque], q))
        beta = scene.KOSCHMIEDER_CONSTANT / v
        censored = "opaque"
    else:
        if method == "lsq" and ok.any():
            beta = float(np.sum(z[ok] * y[ok]) / np.sum(z[ok] ** 2))
        else:
            beta = float(np.quantile(beta_i[ranked], q))
            if clear[ranked].mean() >= q:
                censored = "clear"
        v = scene.KOSCHMIEDER_CONSTANT / beta if beta > 0 else np.inf
    if v > cap_m:
        v, censored = float(cap_m), (censored or "cap")
    bound = {"opaque": "below", "clear": "above", "cap": "above"}.get(censored, "")
    return {**out, "visibility_m": float(v), "beta_per_m": float(beta), "n_pixels": int(ok.sum()),
            "share_opaque": float(opaque.mean()), "share_clear": float(clear.mean()),
            "censored": censored, "bound": bound, "censored_code": CENSORED_CODE[censored]}


def estimate_visibility(image, depth_m, arm: str = "fog", **kwargs) -> float:
    """Estimated visibility V_hat in metres of one degraded image (dark channel + Koschmieder).

    ``V_hat = 3.912 / beta_hat`` with ``beta_hat`` the robust per-pixel estimate of
    ``-ln t / z`` from the dark-channel transmission (He et al. 2009; Koschmieder
    1924; spec Sec. III). Keyword arguments and errors as
    :func:`estimate_visibility_details`, which also returns the diagnostics.

    Parameters
    ----------
    image : numpy.ndarray of uint8, shape (H, W, 3)
        Degraded image, 8-bit sRGB (without the box marker).
    depth_m : array_like of float, shape (H, W)
        Metric depth in metres.
    arm : {"fog", "underwater"}, default "fog"

    Returns
    -------
    float
        V_hat in metres (fog: *V*; underwater: ``V_best``), at most ``CAP_M``;
        NaN when no pixel has a usable depth.
    """
    return estimate_visibility_details(image, depth_m, arm, **kwargs)["visibility_m"]


# ----------------------------------------------------------------------------- validation depth


def ground_plane_depth(height: int, width: int, *, horizon: float = 0.4, camera_height_m: float = 1.6,
                       hfov_deg: float = 60.0, depth_range_m: tuple[float, float] = (0.5, 80.0)) -> np.ndarray:
    """Depth of a flat ground seen by a level pinhole camera: a plausible test depth.

    ``z(row) = h f / (row + 0.5 - horizon * H)`` below the horizon, with the focal
    length ``f = W / (2 tan(hfov / 2))`` in px, and the far end of
    ``depth_range_m`` at and above the horizon (sky); clipped to ``depth_range_m``
    like the spec's depth maps (Sec. III: [0.5, 80] m). Used to validate the
    monitor on real images where no measured depth exists: the renderings and the
    estimate use the same depth, as the issue asks.

    Parameters
    ----------
    height, width : int
        Image size in px.
    horizon : float, default 0.4
        Row of the horizon as a fraction of the height from the top.
    camera_height_m : float, default 1.6
        Camera height *h* above the ground, metres.
    hfov_deg : float, default 60
        Horizontal field of view, degrees.
    depth_range_m : (float, float), default (0.5, 80)
        Clip range, metres.

    Returns
    -------
    numpy.ndarray of float32, shape (H, W)
        Depth in metres, constant along rows (about 3.1 m at the bottom row of a
        448 x 336 image with the defaults, 80 m above the horizon).
    """
    f = width / (2.0 * np.tan(np.radians(hfov_deg) / 2.0))
    rows = np.arange(height) + 0.5 - horizon * height
    with np.errstate(divide="ignore"):
        z = np.where(rows > 0, camera_height_m * f / np.maximum(rows, 1e-9), np.inf)
    z = np.clip(z, *depth_range_m)
    return np.ascontiguousarray(np.broadcast_to(z[:, None], (height, width))).astype(np.float32)


def billboard_depth(ground_m: np.ndarray, boxes_px, far_m: float = 80.0) -> np.ndarray:
    """Stand objects on the ground: each box becomes a fronto-parallel plane.

    Every box (COCO ``x, y, w, h`` in px of the image the depth belongs to) gets
    the ground depth of the row of its bottom edge (where it touches the ground);
    boxes are painted far to near so nearer objects occlude farther ones. Gives a
    depth with discontinuities at object edges, aligned with the image content.

    Parameters
    ----------
    ground_m : numpy.ndarray of float, shape (H, W)
        Ground depth in metres, e.g. :func:`ground_plane_depth`.
    boxes_px : iterable of (x, y, w, h)
        Object boxes in px.
    far_m : float, default 80
        Depth given to boxes whose bottom edge is at or above the horizon.

    Returns
    -------
    numpy.ndarray of float32, shape (H, W)
    """
    depth = np.array(ground_m, dtype=np.float32, copy=True)
    h, w = depth.shape
    planes = []
    for x, y, bw, bh in boxes_px:
        x0, y0 = max(0, int(np.floor(x))), max(0, int(np.floor(y)))
        x1, y1 = min(w, int(np.ceil(x + bw))), min(h, int(np.ceil(y + bh)))
        if x1 <= x0 or y1 <= y0:
            continue
        planes.append((float(min(ground_m[y1 - 1, min(max(x0, 0), w - 1)], far_m)), x0, y0, x1, y1))
    for z, x0, y0, x1, y1 in sorted(planes, reverse=True):
        depth[y0:y1, x0:x1] = z
    return depth


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


#: Floor of each monitor signal for its crossing (spec Sec. III, "Crossing points"):
#: the confidence spans [0, 1] and falls towards 0; the abstain rate rises to 1.
SIGNAL_FLOOR: dict[str, float] = {"c_int": 0.0, "abstain": 1.0}


def signal_range(v_hat_m, censored, signal: str = "c_int",
                 threshold_m: float = DEFAULT_THRESHOLD_M) -> tuple[np.ndarray, np.ndarray]:
    """Range of a monitor read-out consistent with a (possibly censored) estimate.

    ``c_int``: a point estimate gives ``c(V_hat)`` (:func:`visibility_confidence`);
    an upper bound (V <= V_hat) ``[0, c(V_hat)]``; a lower bound ``[c(V_hat), 1]``.
    ``abstain``: a point estimate gives the gate's decision at V_hat; an upper
    bound ``[gate(V_hat), 1]``; a lower bound ``[0, gate(V_hat)]``. The cube's
    read-outs (:func:`monitor_readouts`) are the *conservative* end: the lowest
    confidence and the highest abstention.

    Parameters
    ----------
    v_hat_m, censored : array_like, broadcastable
        As :func:`certified_visibility`.
    signal : {"c_int", "abstain"}
    threshold_m : float, default DEFAULT_THRESHOLD_M

    Returns
    -------
    lo, hi : numpy.ndarray of float64
        The range per element; where V_hat is NaN (no usable pixel) both ends
        are the read-outs' values, ``c_int`` 0 and ``abstain`` 1.
    """
    v = np.asarray(v_hat_m, dtype=np.float64)
    code = _censored_codes(censored, v.shape)
    if signal == "c_int":
        c = visibility_confidence(v)
        lo = np.where(code < 0, 0.0, c)
        hi = np.where(code > 0, 1.0, c)
    elif signal == "abstain":
        g = gate_decisions(v, threshold_m).astype(np.float64)
        lo = np.where(code > 0, 0.0, g)
        hi = np.where(code < 0, 1.0, g)
    else:
        raise ValueError(f"signal_range: signal must be 'c_int' or 'abstain', got {signal!r}")
    return lo, hi


def awareness_crossing(visibility_m, v_hat_m, censored, signal: str = "c_int", *,
                       threshold_m: float = DEFAULT_THRESHOLD_M, present=None, counts=None,
                       ci: float = 0.95) -> dict:
    """Crossing visibility of a monitor signal, with censored estimates treated as bounds.

    The image-level signal of each (level, image) is known only within
    :func:`signal_range`. The mean curve over images is therefore bracketed by
    a *conservative* curve (the cube's read-outs: lowest confidence, highest
    abstention) and an *optimistic* one, and the crossing
    (:func:`murk.results.crossing_visibility`, floor :data:`SIGNAL_FLOOR`) by
    theirs: the conservative curve reaches its mid-way value first, so the true
    V_aware lies in ``[V_optimistic, V_conservative]``. Where the two agree the
    crossing is exact; otherwise the conservative value is reported as a bound
    from above (side ``"below"``: V_aware at most it), and W = log10(V_acc /
    V_aware) against it is a lower bound (:func:`murk.results.blind_spot_width_side`).

    Parameters
    ----------
    visibility_m : array_like of float, shape (L,)
        Sweep levels, clear to murky (level 0, the clean image, excluded).
    v_hat_m, censored : array_like, shape (1 + L, n)
        V_hat and its censoring (:data:`CENSORED_CODE`) for the clean image and
        each level, per image (NaN rows are missing images).
    signal : {"c_int", "abstain"}
    threshold_m : float, default DEFAULT_THRESHOLD_M
    present : array_like of bool, shape (1 + L, n), optional
        Cells that hold a read-out; default: V_hat not NaN. Pass the cube's
        ``c_int`` not NaN to count images without a usable pixel (V_hat NaN,
        c_int 0, abstain 1) as the cube's means do.
    counts : numpy.ndarray, shape (B, n), optional
        Bootstrap draw counts (:func:`murk.results.bootstrap_counts`); gives a
        percentile interval of the conservative crossing.
    ci : float, default 0.95

    Returns
    -------
    dict
        ``v_cross_m`` (conservative), ``v_optimistic_m``, ``censored_side``
        (``""``, ``"below"``, ``"above"`` or ``"undefined"``: the conservative
        crossing is at the first level but the optimistic one is lower),
        ``v_lo_m``, ``v_hi_m`` (NaN without *counts*), ``n_censored_below``
        (int, (level, image) cells whose V_hat is an upper bound).
    """
    from murk import results

    vis = np.asarray(visibility_m, dtype=np.float64)
    v = np.asarray(v_hat_m, dtype=np.float64)
    code = _censored_codes(censored, v.shape)
    if v.ndim != 2 or v.shape[0] != vis.size + 1:
        raise ValueError(f"awareness_crossing: v_hat_m must be (1 + {vis.size}, n), got {v.shape}")
    lo, hi = signal_range(v, code, signal, threshold_m)
    present = ~np.isnan(v) if present is None else np.broadcast_to(np.asarray(present, dtype=bool), v.shape)
    cons, opt = (hi, lo) if signal == "abstain" else (lo, hi)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mc = np.nanmean(np.where(present, cons, np.nan), axis=-1)
        mo = np.nanmean(np.where(present, opt, np.nan), axis=-1)
    fl = SIGNAL_FLOOR[signal]
    vc, _, side_c = results.crossing_visibility(vis, mc[1:], mc[0], fl, return_side=True)
    vo, _, side_o = results.crossing_visibility(vis, mo[1:], mo[0], fl, return_side=True)
    vc, vo, side = float(vc), float(vo), str(side_c)
    if np.isfinite(vc) and not (np.isfinite(vo) and np.isclose(vo, vc, rtol=1e-9) and str(side_o) == side):
        side = "below" if side in ("", "below") else "undefined"
    out = {"v_cross_m": vc, "v_optimistic_m": vo, "censored_side": side, "v_lo_m": float("nan"),
           "v_hi_m": float("nan"), "n_censored_below": int(((code < 0) & present).sum())}
    if counts is not None:
        rs = results.resampled_means(np.where(present, cons, np.nan), counts)        # (1 + L, B)
        vb, _ = results.crossing_visibility(vis, rs[1:].T, rs[0], fl)
        out["v_lo_m"], out["v_hi_m"] = (float(x) for x in results.percentile_interval(vb, ci))
    return out


def split_images(image_ids, seed: int = 0) -> np.ndarray:
    """Selection half of a set of images, reproducible per image.

    Each image goes to the selection half with probability 1/2 from a generator
    seeded by ``(seed, image id)`` (STYLE: per-item randomness, so subsets
    reproduce). Rows of the same image always fall in the same half.

    Parameters
    ----------
    image_ids : array_like of int, any shape
        COCO image ids (repeated ids allowed).
    seed : int, default 0

    Returns
    -------
    numpy.ndarray of bool, same shape
        True = selection half (thresholds are picked here), False = report half.
    """
    ids = np.asarray(image_ids, dtype=np.int64)
    uniq, inv = np.unique(ids, return_inverse=True)
    half = np.array([np.random.default_rng([int(seed), int(i)]).random() < 0.5 for i in uniq], dtype=bool)
    return half[inv].reshape(ids.shape)


def threshold_at_coverage(score, target_coverage: float) -> float:
    """Threshold reaching a target coverage: answer iff ``score >= thr``.

    Parameters
    ----------
    score : array_like of float, shape (n,)
        Higher = more willing to answer (V_hat in m, or c_int). NaN never answers.
    target_coverage : float in [0, 1]

    Returns
    -------
    float
        The ``ceil(target * n)``-th largest score (``inf`` for coverage 0), so that
        the coverage is at least the target (more with ties).
    """
    s = np.asarray(score, dtype=np.float64).ravel()
    if not 0 <= target_coverage <= 1:
        raise ValueError(f"threshold_at_coverage: target_coverage must be in [0, 1], got {target_coverage}")
    k = int(np.ceil(target_coverage * s.size - 1e-9))
    if k == 0:
        return float("inf")
    ordered = np.sort(np.where(np.isnan(s), -np.inf, s))[::-1]
    return float(ordered[k - 1])


def pick_threshold(score, correct, target_coverage: float | None = None, select=None) -> float:
    """Pick a gate threshold (answer iff ``score >= thr``) on the selection rows.

    Parameters
    ----------
    score : array_like of float, shape (n,)
        V_hat in metres for the monitor (or c_int for the VLM baseline). NaN
        never answers.
    correct : array_like of float, shape (n,)
        1/0 correctness of the VLM's answer; NaN rows are dropped.
    target_coverage : float, optional
        If given, the threshold of :func:`threshold_at_coverage`. If None, the
        threshold that maximises ``#correct - #wrong`` over the answered rows
        (answer where the VLM is right more often than wrong; +1 for a correct
        answer, -1 for a wrong one, 0 for abstaining), ties to the lower threshold.
    select : array_like of bool, shape (n,), optional
        Rows to pick on (e.g. :func:`split_images` of the image ids); default all.

    Returns
    -------
    float
        Threshold in the unit of *score*.
    """
    s = np.asarray(score, dtype=np.float64).ravel()
    c = np.asarray(correct, dtype=np.float64).ravel()
    if s.shape != c.shape:
        raise ValueError(f"pick_threshold: score {s.shape} and correct {c.shape} differ in shape")
    keep = ~np.isnan(c)
    if select is not None:
        keep &= np.asarray(select, dtype=bool).ravel()
    s, c = s[keep], c[keep]
    if s.size == 0:
        raise ValueError("pick_threshold: no rows to pick on (all correct NaN or select empty)")
    if target_coverage is not None:
        return threshold_at_coverage(s, target_coverage)
    s = np.where(np.isnan(s), -np.inf, s)
    order = np.argsort(-s, kind="stable")
    gain = np.cumsum(2.0 * c[order] - 1.0)  # answering the top-k rows
    ss = s[order]
    # only cut between distinct scores: candidate k are the last index of each tie run
    last = np.r_[ss[1:] != ss[:-1], True]
    gains = np.where(last, gain, -np.inf)
    k = int(np.argmax(gains))
    if gains[k] <= 0:
        return float("inf")
    return float(ss[k])


def _bootstrap_rows(rows: dict, image_ids, n_resamples: int, seed: int, ci: float) -> dict:
    """Percentile intervals of coverage and risk, resampling report-half images."""
    from murk.results import bootstrap_indices, coverage_risk_of_sums

    uniq, inv = np.unique(np.asarray(image_ids), return_inverse=True)
    idx = bootstrap_indices(uniq.size, n_resamples, seed)
    counts = np.zeros((n_resamples, uniq.size))
    np.add.at(counts, (np.repeat(np.arange(n_resamples), uniq.size), idx.ravel()), 1.0)
    out = {}
    q = [50 * (1 - ci), 50 * (1 + ci)]
    for name, (answered, correct) in rows.items():
        n_i = np.bincount(inv, minlength=uniq.size).astype(float)
        a_i = np.bincount(inv, weights=answered.astype(float), minlength=uniq.size)
        e_i = np.bincount(inv, weights=(answered & (correct == 0)).astype(float), minlength=uniq.size)
        cov, risk = coverage_risk_of_sums(counts @ a_i, counts @ e_i, counts @ n_i)
        out[name] = {"coverage_ci": _percentiles(cov, q), "risk_ci": _percentiles(risk, q)}
    return out


def _percentiles(x: np.ndarray, q: list[float]) -> tuple[float, ...]:
    """``np.nanpercentile(x, q)``, or NaNs where no resample defines the value (a risk where nothing was
    answered in any resample: undefined, not an All-NaN warning)."""
    if not np.isfinite(x).any():
        return tuple(np.nan for _ in q)
    return tuple(float(v) for v in np.nanpercentile(x, q))


def compare_at_equal_coverage(score_monitor, score_cint, abstain_vlm, correct, split, *, image_ids=None,
                              n_resamples: int = 0, seed: int = 0, ci: float = 0.95,
                              censored_monitor=None) -> dict:
    """Coverage-risk table of three gates, thresholds picked on one half, reported on the other.

    All inputs are flat over question-conditions (e.g. one VLM, one task, every
    level of one arm, every image); ``split`` marks the selection half by image.

    Rows (keys of the result), each evaluated on the report half (``~split``):

    ``answer_all``
        No gate (coverage 1).
    ``vlm_abstain``
        The VLM's own abstain option (``abstain_vlm`` True = abstained).
    ``monitor@vlm_abstain``, ``c_int@vlm_abstain``
        Monitor (answer iff ``V_hat >= thr``) and c_int thresholds chosen on the
        selection half to match the VLM abstain option's coverage there.
    ``monitor``
        Monitor at the threshold of :func:`pick_threshold` (max #correct - #wrong)
        on the selection half.
    ``c_int@monitor``
        c_int thresholded to the monitor's selection-half coverage.

    Parameters
    ----------
    score_monitor : array_like of float, shape (n,)
        V_hat in metres per row (NaN abstains).
    censored_monitor : array_like, shape (n,), optional
        The censoring of each V_hat (the cube's ``visibility_hat_censored``,
        :data:`CENSORED_CODE`): the monitor is scored by
        :func:`certified_visibility`, so an upper bound (opaque) never answers.
        Default: every V_hat a point estimate.
    score_cint : array_like of float, shape (n,)
        The VLM's internal confidence per row.
    abstain_vlm : array_like of float or bool, shape (n,)
        1/True where the VLM chose its abstain option (NaN rows dropped).
    correct : array_like of float, shape (n,)
        1/0 correctness of the VLM's answer on the main prompt (NaN dropped). The
        risk of ``vlm_abstain`` uses these answers on the rows it did not abstain
        on -- an approximation, as the abstain prompt is a separate prompt.
    split : array_like of bool, shape (n,)
        True = selection half (:func:`split_images`).
    image_ids : array_like of int, shape (n,), optional
        Needed for bootstrap intervals (resampling report-half images, paired
        across rows).
    n_resamples : int, default 0
        Bootstrap resamples; 0 = no intervals.
    seed : int, default 0
    ci : float, default 0.95

    Returns
    -------
    dict
        ``{row: {"coverage": float, "risk": float, "threshold": float,
        "threshold_unit": str, "n": int, "n_monitor_bound_below": int,
        ["coverage_ci", "risk_ci"]: (lo, hi)}}``; ``n_monitor_bound_below``
        counts the report-half rows whose V_hat is an upper bound (they never
        pass the monitor's gate).

    Raises
    ------
    ValueError
        If shapes differ or a half is empty.
    """
    from murk.results import selective_risk_coverage

    arrays = [np.asarray(x, dtype=np.float64).ravel() for x in (score_monitor, score_cint, abstain_vlm, correct)]
    sm, sc, av, cor = arrays
    below = np.zeros(sm.shape, dtype=bool)
    if censored_monitor is not None:
        code = _censored_codes(np.asarray(censored_monitor).ravel(), sm.shape)
        below = code < 0
        sm = certified_visibility(sm, code)
    sp = np.asarray(split, dtype=bool).ravel()
    if len({a.size for a in arrays} | {sp.size}) != 1:
        raise ValueError("compare_at_equal_coverage: all inputs must have the same length")
    keep = ~np.isnan(cor) & ~np.isnan(av)
    if image_ids is not None:
        ids = np.asarray(image_ids).ravel()
    sel, rep = keep & sp, keep & ~sp
    if not sel.any() or not rep.any():
        raise ValueError("compare_at_equal_coverage: the selection or the report half is empty")
    vlm_cov_sel = float(1.0 - av[sel].mean())
    thr = {
        "monitor@vlm_abstain": ("m", threshold_at_coverage(sm[sel], vlm_cov_sel)),
        "c_int@vlm_abstain": ("1", threshold_at_coverage(sc[sel], vlm_cov_sel)),
        "monitor": ("m", pick_threshold(sm[sel], cor[sel])),
    }
    mon_cov_sel = float((~gate_decisions(sm[sel], thr["monitor"][1])).mean())
    thr["c_int@monitor"] = ("1", threshold_at_coverage(sc[sel], mon_cov_sel))
    answered = {
        "answer_all": np.ones(rep.sum(), dtype=bool),
        "vlm_abstain": av[rep] == 0,
        "monitor@vlm_abstain": sm[rep] >= thr["monitor@vlm_abstain"][1],
        "c_int@vlm_abstain": sc[rep] >= thr["c_int@vlm_abstain"][1],
        "monitor": sm[rep] >= thr["monitor"][1],
        "c_int@monitor": sc[rep] >= thr["c_int@monitor"][1],
    }
    table = {}
    for name, ans in answered.items():
        cov, risk = (float(x) for x in selective_risk_coverage((~ans).astype(np.float64), cor[rep]))
        unit, t = thr.get(name, ("", float("nan")))
        table[name] = {"coverage": cov, "risk": risk, "threshold": float(t), "threshold_unit": unit,
                       "n": int(rep.sum()), "n_monitor_bound_below": int(below[rep].sum())}
    if n_resamples:
        if image_ids is None:
            raise ValueError("compare_at_equal_coverage: bootstrap intervals need image_ids")
        cis = _bootstrap_rows({k: (v, cor[rep]) for k, v in answered.items()}, ids[rep], n_resamples, seed, ci)
        for k in table:
            table[k].update(cis[k])
    return table


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
