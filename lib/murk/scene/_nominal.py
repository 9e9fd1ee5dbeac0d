"""The nominal control: ImageNet-C fog and its equivalent physical visibility.

The spec (Sec. III) adds the ImageNet-C fog corruption at severities 1-5
(Hendrycks & Dietterich 2019, spec ref. [10]), as implemented by the
``imagecorruptions`` package (Michaelis et al. 2019, spec ref. [11]), as a nominal
control, and translates each severity into a physical visibility ("Nominal
equivalence"): for each image and severity, the fog visibility :math:`V_{eq}`
whose rendering with :func:`murk.scene.fog` retains the same image contrast,
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

from murk.scene import _images as images
from murk.scene import _physics as physics
from murk.scene._images import MIN_SIDE_PX, ImageTooSmallError

__all__ = [
    "IMAGENET_C_SEVERITIES",
    "LUMA_WEIGHTS_REC601",
    "EQUIVALENCE_BRACKET_M",
    "MIN_SIDE_PX",
    "ImageTooSmallError",
    "check_imagenet_c_size",
    "imagenet_c_seed",
    "imagenet_c_fog",
    "IMAGENET_C_FOG_PARAMETERS",
    "severity_differences",
    "describe_severities",
    "luma",
    "contrast_gain",
    "luma_std_ratio",
    "EQUIVALENCE_REASONS",
    "curve_is_monotone",
    "nominal_equivalence",
    "table_vii",
]

#: ImageNet-C severities used as the nominal control (spec Sec. III).
IMAGENET_C_SEVERITIES: tuple[int, ...] = (1, 2, 3, 4, 5)

#: The constants of ImageNet-C's fog per severity, as ``imagecorruptions.corruptions.fog`` sets them
#: (``c = [(1.5, 2), (2., 2), (2.5, 1.7), (2.5, 1.5), (3., 1.4)][severity - 1]``; Hendrycks & Dietterich
#: 2019): ``amplitude`` ``c[0]`` scales the plasma fractal added to the image, ``wibbledecay`` ``c[1]`` sets
#: its roughness (the decay of the fractal's random displacements: smaller is rougher). A test checks the
#: table against the installed package.
IMAGENET_C_FOG_PARAMETERS: dict[int, dict[str, float]] = {
    1: {"amplitude": 1.5, "wibbledecay": 2.0},
    2: {"amplitude": 2.0, "wibbledecay": 2.0},
    3: {"amplitude": 2.5, "wibbledecay": 1.7},
    4: {"amplitude": 2.5, "wibbledecay": 1.5},
    5: {"amplitude": 3.0, "wibbledecay": 1.4},
}

#: how :func:`describe_severities` names each parameter
_PARAMETER_WORDS = {"amplitude": "amplitude", "wibbledecay": "roughness (wibble decay)"}

#: Rec. 601 luma weights (R', G', B') applied to sRGB-encoded values.
LUMA_WEIGHTS_REC601: np.ndarray = np.array([0.299, 0.587, 0.114], dtype=np.float64)
LUMA_WEIGHTS_REC601.setflags(write=False)

#: Default search interval (lo, hi) of V in metres for :func:`_equivalent_visibility`.
EQUIVALENCE_BRACKET_M: tuple[float, float] = (0.25, 4000.0)

_MIN_SIDE_PX = MIN_SIDE_PX


def check_imagenet_c_size(width: int, height: int, what: str = "image") -> None:
    """Raise :class:`ImageTooSmallError` if a presented side is under :data:`MIN_SIDE_PX` px.

    Parameters
    ----------
    width, height : int
        Presented size in px.
    what : str
        How to name the image in the message (e.g. ``"image 123 (000000000123.jpg)"``).
    """
    if min(int(width), int(height)) < MIN_SIDE_PX:
        raise ImageTooSmallError(
            f"{what} is {int(width)} x {int(height)} px when presented; the ImageNet-C fog "
            f"(imagecorruptions) needs at least {MIN_SIDE_PX} px on each side: the item cannot be "
            f"rendered in every condition and is recorded as missing"
        )


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


def imagenet_c_seed(seed: int, image_id: int) -> int:
    """Per-image seed of the ImageNet-C arm: ``seed * 1_000_003 + image_id``.

    The rule :func:`murk.scene.render_conditions` uses for the ``imagenet_c`` arm of
    the cube, so the nominal equivalence is measured on the images the models were
    shown (before the box is drawn). One seed per image, shared by its five
    severities (:func:`imagenet_c_fog`).

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


def severity_differences(parameters: dict | None = None) -> list[tuple[int, int, list[str]]]:
    """Which fog parameters differ between neighbouring ImageNet-C severities.

    Parameters
    ----------
    parameters : dict, optional
        Severity (int) -> {parameter name: value}; default :data:`IMAGENET_C_FOG_PARAMETERS`.

    Returns
    -------
    list of (int, int, list of str)
        For each pair of neighbouring severities ``(s, s + 1)``, the names of the parameters whose
        values differ, in the table's order.

    >>> severity_differences()[2]
    (3, 4, ['wibbledecay'])
    """
    params = IMAGENET_C_FOG_PARAMETERS if parameters is None else parameters
    sev = sorted(params)
    return [(a, b, [k for k in params[a] if params[a][k] != params[b].get(k)]) for a, b in zip(sev, sev[1:])]


def describe_severities(parameters: dict | None = None) -> str:
    """The Methods clause on what changes between neighbouring ImageNet-C fog severities, from the table.

    Parameters
    ----------
    parameters : dict, optional
        Default :data:`IMAGENET_C_FOG_PARAMETERS`.

    Returns
    -------
    str
        E.g. ``"severities 1 and 2 differ only in the fractal's amplitude (1.5, 2.0), ..., 3 and 4 only in its
        roughness (wibble decay 1.7, 1.5), and 4 and 5 in both its amplitude (2.5, 3.0) and its roughness
        (wibble decay 1.5, 1.4)"``: each pair of neighbours with the parameters that differ and their values.
    """
    params = IMAGENET_C_FOG_PARAMETERS if parameters is None else parameters
    parts = []
    for i, (a, b, diff) in enumerate(severity_differences(params)):
        pair = f"severities {a} and {b}" if i == 0 else f"{a} and {b}"
        if not diff:
            parts.append(f"{pair} do not differ" if i == 0 else f"{pair} not at all")
            continue
        vals = []
        for k in diff:
            word = _PARAMETER_WORDS.get(k, k)
            if "(" in word:   # "roughness (wibble decay)" -> "roughness (wibble decay 1.7, 1.5)"
                head, tail = word.split(" (", 1)
                vals.append(f"{head} ({tail.rstrip(')')} {params[a][k]:.1f}, {params[b][k]:.1f})")
            else:
                vals.append(f"{word} ({params[a][k]:.1f}, {params[b][k]:.1f})")
        what = (f"only in the fractal's {vals[0]}" if len(diff) == 1 else
                "in both the fractal's " + " and its ".join(vals) if len(diff) == 2 else
                "in the fractal's " + ", ".join(vals))
        parts.append(f"{pair} {'differ ' if i == 0 else ''}{what}")
    if not parts:
        return "there is a single severity"
    return parts[0] if len(parts) == 1 else "; ".join(parts[:-1]) + "; and " + parts[-1]


def _pad_to_square(image: np.ndarray) -> np.ndarray:
    side = max(image.shape[:2])
    padded = np.zeros((side, side, 3), dtype=np.uint8)
    padded[: image.shape[0], : image.shape[1]] = image
    return padded


def imagenet_c_fog(image, severity, seed):
    """ImageNet-C fog at one severity, reproducible from a seed; one fractal per seed.

    Calls ``imagecorruptions.corrupt(image, corruption_name="fog", severity=severity)``
    with NumPy's *global* legacy RNG (which the package draws from) seeded from *seed*
    alone; the caller's global RNG state is saved and restored, so the call has no side
    effect on it (not thread safe). The severity does not enter the seed: every
    severity of one seed draws the *same* random numbers, so the plasma fractal of a
    seed is the same at severities 1-5 and only the package's constants change
    (amplitude ``c[0]`` and roughness ``wibbledecay = c[1]``; severities 3 and 4 share
    the amplitude and differ only in the roughness of the fractal, as the spec
    says, Sec. IV). This is how ImageNet-C renders the severities of one image, and
    what makes the contrast of an image fall with severity: with an independent fractal
    per severity (murk before issue 13) the gain-matched V_eq of only 0.027 of the
    sample's images decreased over severities 1-5, against about half with one
    fractal (the spec: 52 %). The legacy seed is
    ``numpy.random.SeedSequence(seed).generate_state(1)[0]``: a pure function of
    *seed*, identical in every process and platform and independent of which other
    images or severities are rendered (pass a per-image seed, e.g.
    :func:`imagenet_c_seed`).

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
        ``(study_seed, image_id)``; mapped to a 32-bit legacy seed through
        ``numpy.random.SeedSequence(seed)``. The same seed gives the same fractal at
        every severity.

    Returns
    -------
    numpy.ndarray of uint8, shape (H, W, 3)
        The corrupted image. (The package truncates, rather than rounds, to uint8.)

    Raises
    ------
    ValueError
        If *image* is not a uint8 (H, W, 3) array, *severity* is not an integer in 1-5,
        or *seed* is not a non-negative int or sequence of them.
    ImageTooSmallError
        (a ValueError) If a side of *image* is under 32 px (a package requirement).
    """
    image = _check_rgb_uint8(image, "imagenet_c_fog")
    check_imagenet_c_size(image.shape[1], image.shape[0], "imagenet_c_fog: image")
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


#: Why a V_eq is NaN: the ``reason`` of :func:`_equivalent_visibility` and
#: :func:`nominal_equivalence`, in the order they are tested ("" = found).
EQUIVALENCE_REASONS: dict[str, str] = {
    "": "found: the fog curve stat(V) crosses the target exactly once in the bracket",
    "missing_input": "the item's image or depth could not be read or rendered (missing_reason)",
    "undefined": "the statistic is NaN (constant clean luma, or a NaN pixel)",
    "saturated": "the degraded image has no contrast left (its luma spans at most one 8-bit code)",
    "outside_0_1": "the gain is <= 0 or >= 1: fog retains a gain in (0, 1) only",
    "no_root": "the target is not reached by the fog curve within the bracket",
    "several_roots": "the fog curve is not monotone and crosses the target more than once: ambiguous",
}

#: Tolerance on a rise of the fog curve (going murkier) before it counts as non-monotone.
MONOTONE_TOL: float = 1e-9


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

    def curve(self, method: str, grid: np.ndarray) -> np.ndarray:
        """The statistic on the grid (clear to murky)."""
        return np.array([self(v)[method] for v in grid])


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


def curve_is_monotone(values, tol: float = MONOTONE_TOL) -> bool:
    """True if a fog curve (clear to murky) never rises by more than *tol* going murkier."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    return bool(np.all(np.diff(v) <= tol))


def _saturated(degraded: np.ndarray) -> np.ndarray:
    """Per degraded image: its luma spans at most one 8-bit code (no contrast to match)."""
    y = luma(degraded)
    return (y.max(axis=(-2, -1)) - y.min(axis=(-2, -1))) <= 1.0 / 255.0 + 1e-12


def _solve(evaluate: _FogStatistics, method: str, target: float, grid: np.ndarray,
           rtol: float, saturated: bool = False) -> tuple[float, str]:
    """(V_eq, reason): the unique root of stat(V) = target in the bracket, else NaN and why."""
    from scipy.optimize import brentq

    if not np.isfinite(target):
        return np.nan, "undefined"
    if saturated:
        return np.nan, "saturated"
    if method == "gain" and not 0.0 < target < 1.0:
        return np.nan, "outside_0_1"
    f = evaluate.curve(method, grid) - target
    sign = np.sign(f)
    zeros = np.flatnonzero(sign == 0)
    changes = np.flatnonzero(sign[:-1] * sign[1:] < 0)
    n_roots = zeros.size + changes.size
    if n_roots == 0:
        return np.nan, "no_root"
    if n_roots > 1:
        return np.nan, "several_roots"
    if zeros.size:
        return float(grid[zeros[0]]), ""
    i = int(changes[0])
    log_v = brentq(lambda x: evaluate(np.exp(x))[method] - target,
                   np.log(grid[i + 1]), np.log(grid[i]), xtol=rtol, rtol=4 * np.finfo(float).eps)
    return float(np.exp(log_v)), ""


def _equivalent_visibility(
    clean,
    degraded,
    depth_m,
    *,
    method: str = "gain",
    bracket_m=None,
    airlight: float = physics.FOG_AIRLIGHT,
    rtol: float = 1e-4,
    return_reason: bool = False,
):
    r"""Fog visibility that retains the same contrast as a degraded image (spec Sec. III).

    The spec's nominal equivalence: :math:`V_{eq}` solves
    ``stat(clean, fog(clean, depth_m, V)) = stat(clean, degraded)``, where *stat* is the
    regression gain of the degraded luma on the clean luma (:func:`contrast_gain`,
    primary) or the ratio of luma standard deviations (:func:`luma_std_ratio`, the
    check). The left side, the *fog curve*, is a continuous function of V (the fog
    rendering of Eq. (1), taken before 8-bit rounding), evaluated at visibilities a
    factor <= 2 apart across *bracket_m*.

    The fog curve need not be monotone: where the depth correlates with the clean
    luma (bright far regions, dark near ones), fog can first *raise* the gain above 1
    and only then lower it (issue 13: 22 of 79 sample images with a ground-plane
    depth; a constructed clean image, gain 1, got V_eq = 91.5 m; an image rendered
    at 1.95 m got 144.9 m, the first of two roots). So V_eq is returned only where it
    is defined, and NaN with a reason (:data:`EQUIVALENCE_REASONS`) otherwise:

    ``undefined``
        the statistic is NaN;
    ``saturated``
        the degraded image has no contrast left (luma range within one 8-bit code),
        so every murky enough V matches;
    ``outside_0_1``
        (gain) the gain is <= 0 or >= 1 (an undegraded image has exactly 1);
    ``no_root``
        the curve does not reach the target within *bracket_m*;
    ``several_roots``
        the curve crosses the target more than once (roots closer than a factor 2 in
        V are not separated).

    A unique root is bracketed by the grid and found by Brent's method
    (``scipy.optimize.brentq``) on :math:`\log V` to relative precision *rtol*: the
    result is not limited to a grid. (The curve may be non-monotone elsewhere and
    still cross a target once: :func:`curve_is_monotone` reports the curve's shape.)

    Parameters
    ----------
    clean : numpy.ndarray of uint8, shape (H, W, 3)
        Clean image, 8-bit sRGB.
    degraded : array_like, shape (..., H, W, 3)
        One or several degraded versions of *clean* (e.g. ImageNet-C severities 1-5
        stacked), uint8 or floats in [0, 1].
    depth_m : array_like of float, shape (H, W)
        Metric depth of *clean* in metres (see :func:`murk.scene.fog`).
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
    return_reason : bool, optional
        Also return the reason of each NaN.

    Returns
    -------
    v_eq : float or numpy.ndarray of float64, shape (...)
        :math:`V_{eq}` in metres; ``np.nan`` where it is not defined (see above). Like
        every fog visibility it scales with the depth scale: multiplying *depth_m* by
        kappa multiplies :math:`V_{eq}` by kappa.
    reason : str or numpy.ndarray of str, shape (...), only with *return_reason*
        ``""`` where V_eq was found, else a key of :data:`EQUIVALENCE_REASONS`.

    Raises
    ------
    ValueError
        For bad images or depth (as :func:`murk.scene.fog`), an unknown *method*, or a
        bad *bracket_m*.

    Notes
    -----
    Cost: about ``log2(hi / lo) + 1`` (15) renderings for the curve, shared by all
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
    saturated = np.broadcast_to(_saturated(degraded), target.shape)
    evaluate = _FogStatistics(clean, depth_m, airlight)
    solved = [_solve(evaluate, method, t, grid, rtol, bool(sat))
              for t, sat in zip(target.ravel(), saturated.ravel())]
    out = np.array([v for v, _ in solved]).reshape(target.shape)
    why = np.array([r for _, r in solved], dtype="<U16").reshape(target.shape)
    value = float(out) if out.ndim == 0 else out
    if return_reason:
        return value, (str(why) if why.ndim == 0 else why)
    return value


# ------------------------------------------------------ nominal equivalence, items


def nominal_equivalence(items, image_dir, depth_dir, *, max_side: int = 448, seed: int = 1,
                        severities=IMAGENET_C_SEVERITIES, bracket_m=None, attrs=None,
                        progress: bool = False):
    """Nominal equivalence of the ImageNet-C severities for every item (spec Sec. III).

    For each item the clean image is read and resized to the presented size (longer
    side at most *max_side*, as shown to the models), its cached depth map is read, the
    ImageNet-C fog is rendered at each severity with the per-image seed
    :func:`imagenet_c_seed`, shared by the severities (the images of the cube's
    ``imagenet_c`` arm, before the box is drawn) and :func:`_equivalent_visibility` is
    solved with both statistics. An item whose image or depth cannot be read (the
    image missing, undecodable, over Pillow's pixel limit or of another size than
    its annotation: :func:`murk.scene.load_image`, which also applies its EXIF
    orientation where only that makes the sizes agree), or whose presented image is under 32 px on a side (:class:`ImageTooSmallError`), is
    recorded in ``missing_reason`` and the loop goes on.

    Parameters
    ----------
    items : pandas.DataFrame
        The items table (:func:`murk.protocol.select_items`): columns ``image_id``,
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
        Search interval of :func:`_equivalent_visibility`.
    attrs : dict, optional
        Provenance added to the Dataset's attributes (e.g. the depth backend).
    progress : bool, optional
        Show a progress bar.

    Returns
    -------
    xarray.Dataset
        Dims ``image`` (COCO id) x ``severity``; float64 variables ``v_eq_gain_m`` and
        ``v_eq_std_ratio_m`` (m, NaN where not defined), ``gain`` and ``std_ratio``
        (1; the statistics of the ImageNet-C image against the clean one); str
        ``reason`` and ``reason_std_ratio`` (why ``v_eq_gain_m`` / ``v_eq_std_ratio_m``
        is NaN: a key of :data:`EQUIVALENCE_REASONS`, ``""`` where found); per image,
        bool ``curve_monotone`` (the gain fog curve never rises going murkier) and str
        ``missing_reason`` (``""`` = read and rendered).
    """
    import pandas as pd
    import xarray as xr
    from murk.core import bar as progress_bar
    from murk.scene import _depth

    table = pd.DataFrame(items)
    severities = [int(s) for s in severities]
    shape = (len(table), len(severities))
    data = {k: np.full(shape, np.nan) for k in ("v_eq_gain_m", "v_eq_std_ratio_m", "gain", "std_ratio")}
    reason = np.full(shape, "missing_input", dtype="<U16")
    reason_ratio = np.full(shape, "missing_input", dtype="<U16")
    monotone = np.zeros(len(table), dtype=bool)
    missing = np.full(len(table), "", dtype=object)
    grid = _bracket_grid(EQUIVALENCE_BRACKET_M if bracket_m is None else bracket_m)
    rows = progress_bar(table.itertuples(index=False), total=len(table), desc="depth: nominal equivalence",
                        unit="img", disable=not progress)
    for i, row in enumerate(rows):
        image_id = int(row.image_id)
        try:
            img = images.load_image(Path(image_dir) / row.file_name, (int(row.width), int(row.height)))
            z = _depth.load_depth(Path(depth_dir), image_id)
            size = images.presented_size(img.shape[1], img.shape[0], max_side,
                                         name=f"image {image_id} ({row.file_name})")
            img = images.resize_image(img, size)
            if z.shape != img.shape[:2]:
                z = images.resize_depth(z, size)
            degraded = np.stack([imagenet_c_fog(img, s, seed=imagenet_c_seed(seed, image_id))
                                 for s in severities])
        except (FileNotFoundError, ValueError) as e:  # bad input: this image stays NaN, recorded
            missing[i] = str(e)
            continue
        try:
            evaluate = _FogStatistics(img, z, physics.FOG_AIRLIGHT)  # renderings shared
            evaluate(float(grid[0]))  # a depth map the fog cannot be rendered on (e.g. negative metres) fails here
        except ValueError as e:  # bad input: this image stays NaN, recorded
            missing[i] = f"fog rendering failed: {e}"
            continue
        data["gain"][i] = contrast_gain(img, degraded)
        data["std_ratio"][i] = luma_std_ratio(img, degraded)
        saturated = _saturated(degraded)
        monotone[i] = curve_is_monotone(evaluate.curve("gain", grid))
        for j in range(len(severities)):
            data["v_eq_gain_m"][i, j], reason[i, j] = _solve(
                evaluate, "gain", data["gain"][i, j], grid, 1e-4, bool(saturated[j]))
            data["v_eq_std_ratio_m"][i, j], reason_ratio[i, j] = _solve(
                evaluate, "std_ratio", data["std_ratio"][i, j], grid, 1e-4, bool(saturated[j]))
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
    reasons_doc = "; ".join(f"{k or chr(39) * 2}: {v}" for k, v in EQUIVALENCE_REASONS.items())
    ds["reason"] = (("image", "severity"), reason,
                    {"long_name": "why v_eq_gain_m is NaN ('' = found)", "reasons": reasons_doc})
    ds["reason_std_ratio"] = (("image", "severity"), reason_ratio,
                              {"long_name": "why v_eq_std_ratio_m is NaN ('' = found)"})
    ds["curve_monotone"] = ("image", monotone,
                            {"long_name": "the gain fog curve of the image never rises going murkier"})
    ds["missing_reason"] = ("image", missing.astype(str),
                            {"long_name": "why this image has no nominal equivalence ('' = it has)"})
    lo, hi = grid[[-1, 0]]
    ds.attrs.update({"max_side_px": int(max_side), "seed": int(seed),
                     "imagenet_c_seed_rule": "legacy seed from SeedSequence(seed * 1000003 + image_id), "
                                             "shared by the severities of an image",
                     "bracket_m": [float(lo), float(hi)], "luma": "Rec. 601 of sRGB-encoded values",
                     **(attrs or {})})
    return ds


def table_vii(ds) -> "pd.DataFrame":
    """Table VII of the spec: ImageNet-C fog severities on the visibility axis.

    Parameters
    ----------
    ds : xarray.Dataset
        From :func:`nominal_equivalence` (``v_eq_gain_m``, ``v_eq_std_ratio_m`` over
        image x severity; ``reason`` and ``curve_monotone`` where present).

    Returns
    -------
    pandas.DataFrame
        One row per severity (index ``severity``) with ``median_v_eq_gain_m`` (median
        over images, NaN ignored), ``p10_v_eq_gain_m``, ``p90_v_eq_gain_m``,
        ``spread_p90_p10`` (their ratio: the spread across images),
        ``median_v_eq_std_ratio_m``, ``n_images`` (finite gain-matched V_eq) and, for
        each reason of :data:`EQUIVALENCE_REASONS` but ``""``, ``n_<reason>``: the
        (image, severity) pairs that reason removed. The share of images whose
        gain-matched V_eq decreases strictly over all severities (images with a NaN
        left out) is in ``df.attrs["monotone_share"]`` with its denominator in
        ``df.attrs["monotone_n"]``, and as the column ``monotone_share``;
        ``df.attrs["removed"]`` maps each reason to its number of pairs (all
        severities), ``df.attrs["n_pairs"]`` is the number of pairs and
        ``df.attrs["n_curve_non_monotone"]`` the number of images whose gain fog curve
        is not monotone (with ``df.attrs["n_curve_images"]`` images evaluated).
    """
    import pandas as pd

    gain = ds["v_eq_gain_m"].transpose("image", "severity").values
    ratio = ds["v_eq_std_ratio_m"].transpose("image", "severity").values
    if "reason" in ds:
        why = ds["reason"].transpose("image", "severity").values.astype(str)
    else:  # datasets written before issue 13: NaN without a reason
        why = np.where(np.isfinite(gain), "", "no_root")
    rows = []
    with warnings.catch_warnings():  # all-NaN severities give NaN, quietly
        warnings.simplefilter("ignore", RuntimeWarning)
        p10, p50, p90 = np.nanpercentile(gain, [10, 50, 90], axis=0)
        ratio_median = np.nanmedian(ratio, axis=0)
    complete = np.all(np.isfinite(gain), axis=1)
    monotone = np.all(np.diff(gain[complete], axis=1) < 0, axis=1)
    share = float(monotone.mean()) if complete.any() else np.nan
    reasons = [r for r in EQUIVALENCE_REASONS if r]
    for j, s in enumerate(ds["severity"].values):
        row = {"severity": int(s), "median_v_eq_gain_m": p50[j], "p10_v_eq_gain_m": p10[j],
               "p90_v_eq_gain_m": p90[j], "spread_p90_p10": p90[j] / p10[j],
               "median_v_eq_std_ratio_m": ratio_median[j],
               "n_images": int(np.isfinite(gain[:, j]).sum()), "monotone_share": share}
        row.update({f"n_{r}": int(np.sum(why[:, j] == r)) for r in reasons})
        rows.append(row)
    df = pd.DataFrame(rows).set_index("severity")
    has_curve = ds["missing_reason"].values.astype(str) == "" if "missing_reason" in ds else None
    curve = ds["curve_monotone"].values.astype(bool) if "curve_monotone" in ds else None
    df.attrs.update({
        "monotone_share": share, "monotone_n": int(complete.sum()),
        "removed": {r: int(np.sum(why == r)) for r in reasons}, "n_pairs": int(why.size),
        "n_curve_non_monotone": (int(np.sum(~curve[has_curve])) if curve is not None and has_curve is not None
                                 else -1),
        "n_curve_images": int(has_curve.sum()) if has_curve is not None else -1,
    })
    return df
