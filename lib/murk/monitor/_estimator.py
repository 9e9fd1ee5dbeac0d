"""A visibility monitor: estimate V from one degraded image and its depth (beyond the spec).

The spec (Sec. V, last paragraph) suggests that "a separate image-quality or
visibility estimate that triggers abstention before the VLM is asked" might be a
cheaper and more robust monitor than a VLM's own confidence, and leaves it
untested. This module builds that monitor's estimator from the physics of Sec. III and the
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

import numpy as np
from scipy.ndimage import maximum_filter, minimum_filter

from murk import scene

__all__ = ["CAP_M", "FAR_M", "FAR_FRACTION", "QUANTILE", "CENSORED_CODE", "T_RELIABLE", "spectral_shape",
           "veiling_light_shape", "default_window_px", "transmission_estimate", "estimate_veiling_light",
           "estimate_visibility", "estimate_visibility_details", "usable_depth"]


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

