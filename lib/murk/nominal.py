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
import warnings
from pathlib import Path

import numpy as np

from murk import physics

__all__ = [
    "IMAGENET_C_SEVERITIES",
    "LUMA_WEIGHTS_REC601",
    "EQUIVALENCE_BRACKET_M",
    "imagenet_c_seed",
    "imagenet_c_fog",
    "luma",
    "contrast_gain",
    "luma_std_ratio",
    "equivalent_visibility",
    "nominal_equivalence",
    "table_vii",
]

#: ImageNet-C severities used as the nominal control (spec Sec. III).
IMAGENET_C_SEVERITIES: tuple[int, ...] = (1, 2, 3, 4, 5)

#: Rec. 601 luma weights (R', G', B') applied to sRGB-encoded values.
LUMA_WEIGHTS_REC601: np.ndarray = np.array([0.299, 0.587, 0.114], dtype=np.float64)
LUMA_WEIGHTS_REC601.setflags(write=False)

#: Default search interval (lo, hi) of V in metres for :func:`equivalent_visibility`.
EQUIVALENCE_BRACKET_M: tuple[float, float] = (0.25, 4000.0)

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


def _with_severity(seed, severity: int):
    """``[*seed, severity]`` for an int or a sequence of ints (validated later)."""
    if isinstance(seed, (bool, np.bool_)) or isinstance(seed, (str, bytes)):
        return seed  # rejected by _legacy_seed with the usual message
    if isinstance(seed, numbers.Integral):
        return [int(seed), severity]
    try:
        return [*seed, severity]
    except TypeError:
        return seed


def imagenet_c_seed(seed: int, image_id: int) -> int:
    """Per-image seed of the ImageNet-C arm: ``seed * 1_000_003 + image_id``.

    The same rule as :func:`murk.render.render_conditions` uses for the ``imagenet_c``
    arm of the cube, so the nominal equivalence is measured on the images the models
    were shown (before the box is drawn).

    Parameters
    ----------
    seed : int
        Study seed (``items_meta.json``).
    image_id : int
        COCO image id.

    Returns
    -------
    int
    """
    return int(seed) * 1_000_003 + int(image_id)


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
    effect on it (not thread safe). The generator is seeded per (seed, severity): the
    legacy seed is drawn from ``numpy.random.SeedSequence([*seed, severity])``, so each
    (image, severity) gets its own plasma fractal, reproducible on its own and
    independent of which other images or severities are rendered (pass a per-image
    seed, e.g. :func:`imagenet_c_seed`).

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
        Non-negative per-image seed, e.g. :func:`imagenet_c_seed` or
        ``(study_seed, image_id)``; together with the severity it is mapped to a 32-bit
        legacy seed through ``numpy.random.SeedSequence([*seed, severity])``.

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
    legacy_seed = _legacy_seed(_with_severity(seed, severity))

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


class _FogStatistics:
    """stat(clean, fog(clean, depth, V)) for the statistics of :data:`_STATISTICS`,
    memoised per V; the rendering is the unrounded sRGB of Eq. (1), so the statistic
    is a continuous function of V (8-bit rounding would make it a staircase)."""

    def __init__(self, clean: np.ndarray, depth_m, airlight: float):
        self.clean = clean
        self.depth = depth_m
        self.airlight = airlight
        self.memo: dict[float, dict[str, float]] = {}

    def __call__(self, v: float) -> dict[str, float]:
        v = float(v)
        if v not in self.memo:
            rendering = physics.fog_sweep(self.clean, self.depth, [v], airlight=self.airlight,
                                          rounded=False)[0]
            self.memo[v] = {name: float(f(self.clean, rendering)) for name, f in _STATISTICS.items()}
        return self.memo[v]


def _bracket_grid(bracket_m) -> np.ndarray:
    b = np.asarray(bracket_m, dtype=np.float64)
    lo, hi = (float(b[0]), float(b[1])) if b.shape == (2,) else (np.nan, np.nan)
    if not (np.isfinite(lo) and np.isfinite(hi) and 0 < lo < hi):
        raise ValueError(
            "equivalent_visibility: bracket_m must be two positive, finite visibilities "
            f"(lo, hi) in metres with lo < hi, got {bracket_m!r}"
        )
    n = int(np.ceil(np.log2(hi / lo))) + 1  # at most a factor 2 between neighbours
    return np.geomspace(hi, lo, max(n, 2))  # clear -> murky


def _solve(evaluate: _FogStatistics, method: str, target: float, grid: np.ndarray,
           rtol: float) -> float:
    """First root of stat(V) = target scanning the bracket from clear to murky."""
    from scipy.optimize import brentq

    if not np.isfinite(target):
        return np.nan
    values = np.array([evaluate(v)[method] for v in grid]) - target
    for i in range(grid.size - 1):
        a, b = values[i], values[i + 1]
        if a == 0.0:
            return float(grid[i])
        if np.isfinite(a) and np.isfinite(b) and a * b < 0:
            log_v = brentq(lambda x: evaluate(np.exp(x))[method] - target,
                           np.log(grid[i + 1]), np.log(grid[i]), xtol=rtol, rtol=4 * np.finfo(float).eps)
            return float(np.exp(log_v))
    if values[-1] == 0.0:
        return float(grid[-1])
    return np.nan


def equivalent_visibility(
    clean,
    degraded,
    depth_m,
    *,
    method: str = "gain",
    bracket_m=None,
    airlight: float = physics.FOG_AIRLIGHT,
    rtol: float = 1e-4,
):
    r"""Fog visibility that retains the same contrast as a degraded image (spec Sec. III).

    The spec's nominal equivalence: :math:`V_{eq}` solves
    ``stat(clean, fog(clean, depth_m, V)) = stat(clean, degraded)``, where *stat* is the
    regression gain of the degraded luma on the clean luma (:func:`contrast_gain`,
    primary) or the ratio of luma standard deviations (:func:`luma_std_ratio`, the
    check). The left side is a continuous function of V (the fog rendering of Eq. (1),
    taken before 8-bit rounding); the root is bracketed by evaluating it at visibilities
    a factor <= 2 apart across *bracket_m*, scanning from clear to murky, and then found
    by Brent's method (``scipy.optimize.brentq``) on :math:`\log V` to relative
    precision *rtol*: the result is not limited to a grid.

    For the gain, which falls monotonically from about 1 (clear) to 0 (murky) as V
    decreases, the root is unique. The standard-deviation ratio need not be monotone
    (far, dark regions brighten towards the airlight); the first root from the clear
    end is returned, and ``NaN`` where there is none.

    Parameters
    ----------
    clean : numpy.ndarray of uint8, shape (H, W, 3)
        Clean image, 8-bit sRGB.
    degraded : array_like, shape (..., H, W, 3)
        One or several degraded versions of *clean* (e.g. ImageNet-C severities 1-5
        stacked), uint8 or floats in [0, 1].
    depth_m : array_like of float, shape (H, W)
        Metric depth of *clean* in metres (see :func:`murk.physics.fog`).
    method : {"gain", "std_ratio"}, optional
        Contrast statistic: :func:`contrast_gain` (primary, default) or
        :func:`luma_std_ratio` (the spec's check).
    bracket_m : (float, float), optional
        Search interval (lo, hi) of V in metres; default ``EQUIVALENCE_BRACKET_M`` =
        (0.25, 4000) m.
    airlight : float, optional
        Fog airlight *A* of the renderings; default ``physics.FOG_AIRLIGHT``.
    rtol : float, optional
        Relative precision of :math:`V_{eq}` (absolute in :math:`\log V`); default 1e-4.

    Returns
    -------
    float or numpy.ndarray of float64, shape (...)
        :math:`V_{eq}` in metres; ``np.nan`` where the statistic of *degraded* is not
        reached within *bracket_m* (e.g. an undegraded image, gain 1) or is NaN (a
        constant clean image). Like every fog visibility it scales with the depth scale:
        multiplying *depth_m* by kappa multiplies :math:`V_{eq}` by kappa.

    Raises
    ------
    ValueError
        For bad images or depth (as :func:`murk.physics.fog`), an unknown *method*, or a
        bad *bracket_m*.

    Notes
    -----
    Cost: about ``log2(hi / lo) + 1`` (15) renderings to bracket, shared by all
    degraded images of the stack, plus about 8 per degraded image for Brent's method.
    """
    if method not in _STATISTICS:
        raise ValueError(
            f"equivalent_visibility: method must be one of {sorted(_STATISTICS)}, got {method!r}"
        )
    clean = _check_rgb_uint8(clean, "equivalent_visibility", "clean")
    grid = _bracket_grid(EQUIVALENCE_BRACKET_M if bracket_m is None else bracket_m)
    degraded = np.asarray(degraded)
    if degraded.ndim < 3 or degraded.shape[-3:] != clean.shape:
        raise ValueError(
            f"equivalent_visibility: degraded must have shape (..., {clean.shape[0]}, "
            f"{clean.shape[1]}, 3), got {degraded.shape}"
        )
    physics.fog(clean, depth_m, 1.0)  # validates the depth map with fog's messages
    target = np.asarray(_STATISTICS[method](clean, degraded), dtype=np.float64)
    evaluate = _FogStatistics(clean, depth_m, airlight)
    out = np.array([_solve(evaluate, method, t, grid, rtol) for t in target.ravel()])
    out = out.reshape(target.shape)
    return float(out) if out.ndim == 0 else out


# ------------------------------------------------------ nominal equivalence, items


def nominal_equivalence(items, image_dir, depth_dir, *, max_side: int = 448, seed: int = 1,
                        severities=IMAGENET_C_SEVERITIES, bracket_m=None, attrs=None,
                        progress: bool = False):
    """Nominal equivalence of the ImageNet-C severities for every item (spec Sec. III).

    For each item the clean image is read and resized to the presented size (longer
    side at most *max_side*, as shown to the models), its cached depth map is read, the
    ImageNet-C fog is rendered at each severity with the per-image seed
    :func:`imagenet_c_seed` (the images of the cube's ``imagenet_c`` arm, before the box
    is drawn) and :func:`equivalent_visibility` is solved with both statistics.

    Parameters
    ----------
    items : pandas.DataFrame
        The items table (:func:`murk.items.select_items`): columns ``image_id``,
        ``file_name``, ``width``, ``height`` (px).
    image_dir : path
        Folder holding the COCO images (``file_name``).
    depth_dir : path
        Depth cache folder holding ``<image_id>.npy`` (metres, at the presented size or
        resized to it).
    max_side : int, optional
        Presented size, px (spec Sec. III: 448).
    seed : int, optional
        Study seed (``items_meta.json``).
    severities : sequence of int, optional
        ImageNet-C severities; default 1-5.
    bracket_m : (float, float), optional
        Search interval of :func:`equivalent_visibility`.
    attrs : dict, optional
        Provenance added to the Dataset's attributes (e.g. the depth backend).
    progress : bool, optional
        Show a progress bar.

    Returns
    -------
    xarray.Dataset
        Dims ``image`` (COCO id) x ``severity``; float64 variables ``v_eq_gain_m`` and
        ``v_eq_std_ratio_m`` (m, NaN where no root in the bracket), ``gain`` and
        ``std_ratio`` (1; the statistics of the ImageNet-C image against the clean one).

    Raises
    ------
    FileNotFoundError
        If an image or a depth map is missing.
    """
    import pandas as pd
    import xarray as xr
    from tqdm.auto import tqdm

    from murk import depth as _depth
    from murk import render

    table = pd.DataFrame(items)
    severities = [int(s) for s in severities]
    shape = (len(table), len(severities))
    data = {k: np.full(shape, np.nan) for k in ("v_eq_gain_m", "v_eq_std_ratio_m", "gain", "std_ratio")}
    rows = tqdm(table.itertuples(index=False), total=len(table), desc="nominal", unit="img",
                disable=not progress)
    for i, row in enumerate(rows):
        image_id = int(row.image_id)
        try:
            img = render.load_image(Path(image_dir) / row.file_name)
            z = _depth.load_depth(Path(depth_dir), image_id)
        except (FileNotFoundError, ValueError):  # bad input: this image stays NaN (recorded by the readout)
            continue
        size = render.presented_size(img.shape[1], img.shape[0], max_side)
        img = render.resize_image(img, size)
        if z.shape != img.shape[:2]:
            z = render.resize_depth(z, size)
        degraded = np.stack([imagenet_c_fog(img, s, seed=imagenet_c_seed(seed, image_id))
                             for s in severities])
        data["gain"][i] = contrast_gain(img, degraded)
        data["std_ratio"][i] = luma_std_ratio(img, degraded)
        grid = _bracket_grid(EQUIVALENCE_BRACKET_M if bracket_m is None else bracket_m)
        evaluate = _FogStatistics(img, z, physics.FOG_AIRLIGHT)  # renderings shared
        for j in range(len(severities)):
            data["v_eq_gain_m"][i, j] = _solve(evaluate, "gain", data["gain"][i, j], grid, 1e-4)
            data["v_eq_std_ratio_m"][i, j] = _solve(evaluate, "std_ratio", data["std_ratio"][i, j],
                                                    grid, 1e-4)
    meta = {
        "v_eq_gain_m": ("m", "fog visibility with the same contrast gain (nominal equivalence)"),
        "v_eq_std_ratio_m": ("m", "fog visibility with the same luma std ratio (check)"),
        "gain": ("1", "contrast gain of the ImageNet-C image (slope of degraded on clean luma)"),
        "std_ratio": ("1", "luma standard deviation ratio, ImageNet-C over clean"),
    }
    ds = xr.Dataset(
        {k: (("image", "severity"), v, {"units": meta[k][0], "long_name": meta[k][1]})
         for k, v in data.items()},
        coords={"image": ("image", table["image_id"].to_numpy(dtype=np.int64),
                          {"long_name": "COCO image id"}),
                "severity": ("severity", np.array(severities, dtype=np.int64),
                             {"units": "1", "long_name": "ImageNet-C fog severity"})},
    )
    lo, hi = _bracket_grid(EQUIVALENCE_BRACKET_M if bracket_m is None else bracket_m)[[-1, 0]]
    ds.attrs.update({"max_side_px": int(max_side), "seed": int(seed),
                     "imagenet_c_seed_rule": "legacy seed from SeedSequence([seed * 1000003 + image_id, severity])",
                     "bracket_m": [float(lo), float(hi)], "luma": "Rec. 601 of sRGB-encoded values",
                     **(attrs or {})})
    return ds


def table_vii(ds) -> "pd.DataFrame":
    """Table VII of the spec: ImageNet-C fog severities on the visibility axis.

    Parameters
    ----------
    ds : xarray.Dataset
        From :func:`nominal_equivalence` (``v_eq_gain_m``, ``v_eq_std_ratio_m`` over
        image x severity).

    Returns
    -------
    pandas.DataFrame
        One row per severity (index ``severity``) with ``median_v_eq_gain_m`` (median
        over images, NaN ignored), ``p10_v_eq_gain_m``, ``p90_v_eq_gain_m``,
        ``spread_p90_p10`` (their ratio: the spread across images),
        ``median_v_eq_std_ratio_m`` and ``n_images`` (finite gain-matched V_eq). The
        share of images whose gain-matched V_eq decreases strictly over all severities
        (images with a NaN left out) is in ``df.attrs["monotone_share"]`` with its
        denominator in ``df.attrs["monotone_n"]``, and as the column ``monotone_share``.
    """
    import pandas as pd

    gain = ds["v_eq_gain_m"].transpose("image", "severity").values
    ratio = ds["v_eq_std_ratio_m"].transpose("image", "severity").values
    rows = []
    with warnings.catch_warnings():  # all-NaN severities give NaN, quietly
        warnings.simplefilter("ignore", RuntimeWarning)
        p10, p50, p90 = np.nanpercentile(gain, [10, 50, 90], axis=0)
        ratio_median = np.nanmedian(ratio, axis=0)
    complete = np.all(np.isfinite(gain), axis=1)
    monotone = np.all(np.diff(gain[complete], axis=1) < 0, axis=1)
    share = float(monotone.mean()) if complete.any() else np.nan
    for j, s in enumerate(ds["severity"].values):
        rows.append({"severity": int(s), "median_v_eq_gain_m": p50[j], "p10_v_eq_gain_m": p10[j],
                     "p90_v_eq_gain_m": p90[j], "spread_p90_p10": p90[j] / p10[j],
                     "median_v_eq_std_ratio_m": ratio_median[j],
                     "n_images": int(np.isfinite(gain[:, j]).sum()), "monotone_share": share})
    df = pd.DataFrame(rows).set_index("severity")
    df.attrs.update({"monotone_share": share, "monotone_n": int(complete.sum())})
    return df
