"""The nominal control: ImageNet-C fog and its equivalent physical visibility.

The spec (Sec. III) adds the ImageNet-C fog corruption at severities 1-5
(Hendrycks & Dietterich 2019, spec ref. [10]), as implemented by the
``imagecorruptions`` package (Michaelis et al. 2019, spec ref. [11]), as a nominal
control, and translates each severity into a physical visibility ("Nominal
equivalence"): for each image and severity, the fog visibility :math:`V_{eq}`
whose rendering with :func:`murk.physics.fog` retains the same image contrast,
measured as the regression gain of the degraded luma on the clean luma
(:func:`contrast_gain`, the primary statistic). The ratio of luma standard
deviations (:func:`luma_std_ratio`), the statistic frozen before the pilot, is
available as a check (``method="std_ratio"``); the spec reports it to be
non-monotone in severity because the additive haze adds variance.

Luma convention: both statistics use the luma of the sRGB-*encoded* values with the
Rec. 601 weights ``Y' = 0.299 R' + 0.587 G' + 0.114 B'`` (ITU-R BT.601), i.e. what
an 8-bit image "looks like", not linear luminance.
"""

from __future__ import annotations

import numbers

import numpy as np

from murk import physics

__all__ = [
    "IMAGENET_C_SEVERITIES",
    "LUMA_WEIGHTS_REC601",
    "EQUIVALENCE_GRID_M",
    "imagenet_c_fog",
    "luma",
    "contrast_gain",
    "luma_std_ratio",
    "equivalent_visibility",
]

#: ImageNet-C severities used as the nominal control (spec Sec. III).
IMAGENET_C_SEVERITIES: tuple[int, ...] = (1, 2, 3, 4, 5)

#: Rec. 601 luma weights (R', G', B') applied to sRGB-encoded values.
LUMA_WEIGHTS_REC601: np.ndarray = np.array([0.299, 0.587, 0.114], dtype=np.float64)
LUMA_WEIGHTS_REC601.setflags(write=False)

#: Default visibility grid (m) of :func:`equivalent_visibility`: 64 log-spaced values
#: from 0.5 to 2000 m.
EQUIVALENCE_GRID_M: np.ndarray = np.geomspace(0.5, 2000.0, 64)
EQUIVALENCE_GRID_M.setflags(write=False)

_MIN_SIDE_PX = 32  # imagecorruptions refuses smaller images


def _check_rgb_uint8(image, name: str, what: str = "image") -> np.ndarray:
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8:
        dtype = getattr(image, "dtype", type(image).__name__)
        raise ValueError(f"{name}: {what} must be a uint8 numpy array (H, W, 3), got {dtype}")
    if image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(
            f"{name}: {what} must have shape (H, W, 3), got {image.shape}; convert to RGB first"
        )
    return image


def _legacy_seed(seed) -> int:
    """Map an int or a sequence of non-negative ints to a 32-bit legacy seed."""
    if isinstance(seed, (bool, np.bool_)):
        raise ValueError(f"seed must be a non-negative int or a sequence of them, got {seed!r}")
    try:
        sequence = np.random.SeedSequence(seed)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"seed must be a non-negative int or a sequence of them (e.g. (seed, image_id)), "
            f"got {seed!r}"
        ) from error
    return int(sequence.generate_state(1, dtype=np.uint32)[0])


def _pad_to_square(image: np.ndarray) -> np.ndarray:
    side = max(image.shape[:2])
    padded = np.zeros((side, side, 3), dtype=np.uint8)
    padded[: image.shape[0], : image.shape[1]] = image
    return padded


def imagenet_c_fog(image, severity, seed):
    """ImageNet-C fog at one severity, reproducible from a seed.

    Calls ``imagecorruptions.corrupt(image, corruption_name="fog", severity=severity)``
    with NumPy's *global* legacy RNG (which the package draws from) seeded from *seed*;
    the caller's global RNG state is saved and restored, so the call has no side
    effect on it (not thread safe). The seed does not depend on the severity: with
    one seed, the five severities share the random draws of the plasma fractal and
    differ only in its amplitude and roughness constants (common random numbers).

    The package's ``fog`` computes the fractal on a square power-of-two map and crops
    it to the image, so non-square images are supported; should it ever return a
    different shape, the image is padded with black to a square (which leaves the
    fractal crop and the image maximum, hence the result, unchanged) and cropped back.

    Parameters
    ----------
    image : numpy.ndarray of uint8, shape (H, W, 3)
        Clean image, 8-bit sRGB; H and W at least 32 px (a package requirement).
    severity : int
        ImageNet-C severity, 1-5.
    seed : int or sequence of int
        Non-negative seed, e.g. ``(study_seed, image_id)``; mapped to a 32-bit legacy
        seed through ``numpy.random.SeedSequence(seed)``.

    Returns
    -------
    numpy.ndarray of uint8, shape (H, W, 3)
        The corrupted image. (The package truncates, rather than rounds, to uint8.)

    Raises
    ------
    ValueError
        If *image* is not a uint8 (H, W, 3) array of at least 32 x 32 px, *severity* is
        not an integer in 1-5, or *seed* is not a non-negative int or sequence of them.
    """
    image = _check_rgb_uint8(image, "imagenet_c_fog")
    if min(image.shape[:2]) < _MIN_SIDE_PX:
        raise ValueError(
            f"imagenet_c_fog: image must be at least {_MIN_SIDE_PX} x {_MIN_SIDE_PX} px "
            f"(imagecorruptions), got {image.shape[:2]}"
        )
    if (
        isinstance(severity, (bool, np.bool_))
        or not isinstance(severity, numbers.Integral)
        or int(severity) not in IMAGENET_C_SEVERITIES
    ):
        raise ValueError(f"imagenet_c_fog: severity must be an integer in 1-5, got {severity!r}")
    severity = int(severity)
    legacy_seed = _legacy_seed(seed)

    from imagecorruptions import corrupt  # heavy import (cv2, numba, skimage)

    def run(x: np.ndarray) -> np.ndarray:
        state = np.random.get_state()
        try:
            np.random.seed(legacy_seed)
            return corrupt(x, corruption_name="fog", severity=severity)
        finally:
            np.random.set_state(state)

    out = run(image)
    if out.shape != image.shape:
        out = run(_pad_to_square(image))[: image.shape[0], : image.shape[1]]
    return np.ascontiguousarray(out, dtype=np.uint8)


# ------------------------------------------------------------------- contrast


def luma(image):
    """Rec. 601 luma of sRGB-encoded values, in [0, 1].

    Parameters
    ----------
    image : array_like, shape (..., 3)
        sRGB values: ``uint8`` (scaled by 1/255) or floats in [0, 1].

    Returns
    -------
    numpy.ndarray of float64, shape (...)
        ``0.299 R' + 0.587 G' + 0.114 B'``; ``NaN`` propagates.

    Raises
    ------
    ValueError
        If the last axis is not of length 3, or the dtype is neither uint8 nor float.
    """
    x = np.asarray(image)
    if x.ndim < 1 or x.shape[-1] != 3:
        raise ValueError(f"luma: expected a last (channel) axis of length 3, got shape {x.shape}")
    if x.dtype == np.uint8:
        x = x.astype(np.float64) / 255.0
    elif np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64, copy=False)
    else:
        raise ValueError(f"luma: expected uint8 or floats in [0, 1], got dtype {x.dtype}")
    return x @ LUMA_WEIGHTS_REC601


def _luma_pair(clean, degraded, name: str) -> tuple[np.ndarray, np.ndarray]:
    c, d = np.asarray(clean), np.asarray(degraded)
    for what, x in (("clean", c), ("degraded", d)):
        if x.ndim < 3 or x.shape[-1] != 3:
            raise ValueError(f"{name}: {what} must have shape (..., H, W, 3), got {x.shape}")
    if c.shape[-3:-1] != d.shape[-3:-1]:
        raise ValueError(
            f"{name}: clean and degraded must have the same image size, got "
            f"{c.shape[-3:-1]} and {d.shape[-3:-1]}"
        )
    yc, yd = luma(c), luma(d)
    return np.broadcast_arrays(yc, yd)


def _is_constant(y: np.ndarray) -> np.ndarray:
    """Per image (last two axes): all pixels equal (False if any is NaN)."""
    return y.max(axis=(-2, -1)) == y.min(axis=(-2, -1))


def contrast_gain(clean, degraded):
    """Regression gain (slope) of the degraded luma on the clean luma.

    The contrast-retention statistic of the spec's nominal equivalence:
    ``gain = cov(Y'_clean, Y'_degraded) / var(Y'_clean)`` over the pixels of each
    image, with Rec. 601 luma of the sRGB-encoded values (:func:`luma`). It is 1 for
    identical images and ``t`` for a uniform haze ``Y' = t Y'_clean + const``; an
    additive haze pattern uncorrelated with the scene does not raise it.

    Parameters
    ----------
    clean, degraded : array_like, shape (..., H, W, 3)
        sRGB images, ``uint8`` or floats in [0, 1]; leading axes broadcast (e.g. one
        clean image against a stack of L degraded ones).

    Returns
    -------
    float or numpy.ndarray of float64, shape (...)
        The gain per image; exactly 0 for a uniform degraded image; ``NaN`` if the clean
        luma is constant or any pixel is NaN.

    Raises
    ------
    ValueError
        If the inputs are not (..., H, W, 3) images of the same size.
    """
    yc, yd = _luma_pair(clean, degraded, "contrast_gain")
    clean_constant, degraded_constant = _is_constant(yc), _is_constant(yd)
    yc = yc - yc.mean(axis=(-2, -1), keepdims=True)
    yd = yd - yd.mean(axis=(-2, -1), keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        gain = np.sum(yc * yd, axis=(-2, -1)) / np.sum(yc * yc, axis=(-2, -1))
    # Exact values where rounding of the mean would leave ~1e-31 residues.
    gain = np.where(degraded_constant, 0.0, gain)
    gain = np.where(clean_constant, np.nan, gain)
    return gain[()] if gain.ndim == 0 else gain


def luma_std_ratio(clean, degraded):
    """Ratio of luma standard deviations, degraded over clean (the spec's check statistic).

    Parameters
    ----------
    clean, degraded : array_like, shape (..., H, W, 3)
        sRGB images as for :func:`contrast_gain`.

    Returns
    -------
    float or numpy.ndarray of float64, shape (...)
        ``std(Y'_degraded) / std(Y'_clean)``; exactly 0 for a uniform degraded image;
        ``NaN`` if the clean luma is constant or any pixel is NaN.

    Raises
    ------
    ValueError
        If the inputs are not (..., H, W, 3) images of the same size.
    """
    yc, yd = _luma_pair(clean, degraded, "luma_std_ratio")
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = yd.std(axis=(-2, -1)) / yc.std(axis=(-2, -1))
    ratio = np.where(_is_constant(yd), 0.0, ratio)
    ratio = np.where(_is_constant(yc), np.nan, ratio)
    return ratio[()] if ratio.ndim == 0 else ratio


_STATISTICS = {"gain": contrast_gain, "std_ratio": luma_std_ratio}


def _first_crossing(grid_m: np.ndarray, grid_stat: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Scan from clear to murky; interpolate linearly in log V at the first crossing."""
    order = np.argsort(grid_m)[::-1]  # clear -> murky
    log_v = np.log(grid_m[order])
    g = grid_stat[order]
    flat = target.reshape(-1, 1)
    lo, hi = g[:-1], g[1:]
    with np.errstate(invalid="ignore"):
        crossing = ((lo - flat) * (hi - flat) <= 0) & np.isfinite(lo) & np.isfinite(hi)
    has = crossing.any(axis=1) & np.isfinite(flat[:, 0])
    i = np.argmax(crossing, axis=1)
    g0, g1 = lo[i], hi[i]
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(g1 != g0, (flat[:, 0] - g0) / (g1 - g0), 0.0)
    out = np.exp(log_v[i] + frac * (log_v[i + 1] - log_v[i]))
    out = np.where(has, out, np.nan)
    return out.reshape(target.shape)


def equivalent_visibility(
    image,
    depth_m,
    degraded,
    sweep_m=None,
    *,
    method: str = "gain",
    airlight: float = physics.FOG_AIRLIGHT,
):
    """Fog visibility that retains the same contrast as a degraded image (spec Sec. III).

    Renders ``physics.fog(image, depth_m, V)`` for every *V* of a grid, computes the
    contrast statistic of each rendering against *image*, and returns the *V* where it
    equals the statistic of *degraded* against *image*: scanning the grid from clear to
    murky, the first crossing, linearly interpolated in :math:`\\log V` between
    adjacent grid values.

    Parameters
    ----------
    image : numpy.ndarray of uint8, shape (H, W, 3)
        Clean image, 8-bit sRGB.
    depth_m : array_like of float, shape (H, W)
        Metric depth in metres (see :func:`murk.physics.fog`).
    degraded : array_like, shape (..., H, W, 3)
        One or several degraded versions of *image* (e.g. ImageNet-C severities 1-5
        stacked), uint8 or floats in [0, 1].
    sweep_m : array_like of float, shape (G,), optional
        Visibility grid in metres (G >= 2, positive, finite); default
        ``EQUIVALENCE_GRID_M`` (64 log-spaced values from 0.5 to 2000 m).
    method : {"gain", "std_ratio"}, optional
        Contrast statistic: :func:`contrast_gain` (primary, default) or
        :func:`luma_std_ratio` (the spec's check).
    airlight : float, optional
        Fog airlight *A* of the renderings; default ``physics.FOG_AIRLIGHT``.

    Returns
    -------
    float or numpy.ndarray of float64, shape (...)
        :math:`V_{eq}` in metres. ``np.nan`` where the statistic of *degraded* is not
        reached within the grid (out of range) or is NaN (e.g. a constant clean image).
        Like every fog visibility, it scales with the depth scale.

    Raises
    ------
    ValueError
        For bad images or depth (as :func:`murk.physics.fog`), an unknown *method*, or a
        grid that is not 1-D with at least two positive finite values.

    Notes
    -----
    The gain of the 8-bit fog renderings saturates at exactly 0 once the rendering is
    uniform (t below about 1e-3 everywhere, e.g. V <= 7.8 m at a constant depth of
    13.8 m); a degraded image with gain 0 therefore maps to the clearest such grid
    value, which is only an upper bound. ImageNet-C fog is far from this regime.
    Cost: one fog rendering per grid value (64 by default, about 1.5 s for a
    640 x 480 image); pass all severities of one image as one stack.
    """
    if method not in _STATISTICS:
        raise ValueError(
            f"equivalent_visibility: method must be one of {sorted(_STATISTICS)}, got {method!r}"
        )
    statistic = _STATISTICS[method]
    image = _check_rgb_uint8(image, "equivalent_visibility")
    grid = np.asarray(EQUIVALENCE_GRID_M if sweep_m is None else sweep_m, dtype=np.float64)
    if grid.ndim != 1 or grid.size < 2 or not np.all(np.isfinite(grid)) or np.any(grid <= 0):
        raise ValueError(
            "equivalent_visibility: sweep_m must be a 1-D grid of at least two positive, "
            f"finite visibilities in metres, got {grid!r}"
        )
    degraded = np.asarray(degraded)
    if degraded.ndim < 3 or degraded.shape[-3:] != image.shape:
        raise ValueError(
            f"equivalent_visibility: degraded must have shape (..., {image.shape[0]}, "
            f"{image.shape[1]}, 3), got {degraded.shape}"
        )
    target = np.asarray(statistic(image, degraded), dtype=np.float64)
    grid_stat = np.empty(grid.size)
    chunk = 8  # bound memory: 8 renderings at a time
    for start in range(0, grid.size, chunk):
        levels = grid[start : start + chunk]
        renders = physics.fog_sweep(image, depth_m, levels, airlight=airlight)
        grid_stat[start : start + levels.size] = statistic(image, renders)
    out = _first_crossing(grid, grid_stat, target)
    return float(out) if out.ndim == 0 else out
