"""Physical degradations of the spec, Section III: Eq. (1), fog and underwater.

Eq. (1) of the spec, for a scene radiance :math:`J_c` (:math:`c \\in \\{R,G,B\\}`)
at metric depth :math:`z`::

    I_c = J_c t_c + B_c (1 - t_c),        t_c = exp(-beta_c z)

with transmission :math:`t_c`, attenuation coefficient :math:`\\beta_c` (m^-1) and
veiling light :math:`B_c`. All operations are applied in linear RGB (sRGB decoded,
IEC 61966-2-1) and the result is re-encoded to 8-bit sRGB.

Two arms:

fog
    :math:`\\beta_R = \\beta_G = \\beta_B = \\beta = 3.912 / V` (Koschmieder 1924:
    the meteorological visibility *V* is the distance at which a black target
    falls to a 2 % contrast threshold, ``3.912 = -ln 0.02``) and
    :math:`B_c = A = 0.8`.
underwater
    :math:`\\beta_c = s\\,a_w(\\lambda_c)` with the pure-water absorption of Pope
    & Fry (1997) at 620, 540 and 460 nm and one common scale *s* chosen so that
    the visibility of the least attenuated channel is
    :math:`V_{best} = 3.912 / \\min_c \\beta_c`; the veiling light is
    :math:`B_c = 0.8\\,\\beta_c^{-1} / \\max_k \\beta_k^{-1}` (blue dominated).

Because only the product :math:`\\beta z = 3.912 z / V` enters Eq. (1), rendering
with depth ``kappa * z`` at visibility ``kappa * V`` gives the same image: metres
on the visibility axis are conditional on the depth scale.

Depth conventions of the renderers: depth must be non-negative; ``np.inf`` and
``NaN`` (no depth estimate) are both treated as infinitely far, i.e.
:math:`t = 0` and the pixel equals the veiling light. A visibility of ``np.inf``
means no degradation and returns the image unchanged.

References
----------
Koschmieder, H. (1924). Theorie der horizontalen Sichtweite. Beitr. Phys. freien
    Atmos. 12, 33-53 and 171-181. (spec ref. [1])
Pope, R. M. & Fry, E. S. (1997). Absorption spectrum (380-700 nm) of pure water.
    II. Integrating cavity measurements. Appl. Opt. 36, 8710-8723. (spec ref. [27])
IEC 61966-2-1:1999. Multimedia systems and equipment - Colour measurement and
    management - Part 2-1: Default RGB colour space - sRGB.
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = [
    "KOSCHMIEDER_CONSTANT",
    "FOG_AIRLIGHT",
    "SWEEP_M",
    "UNDERWATER_WAVELENGTHS_NM",
    "POPE_FRY_ABSORPTION_PER_M",
    "srgb_to_linear",
    "linear_to_srgb",
    "transmission",
    "underwater_veiling_light",
    "fog",
    "check_image_depth",
    "underwater",
    "fog_sweep",
    "underwater_sweep",
]

#: Koschmieder constant ``-ln(0.02)`` rounded as in the spec (Sec. III, 2 % contrast
#: threshold; Koschmieder 1924): ``V = 3.912 / beta``.
KOSCHMIEDER_CONSTANT: float = 3.912

#: Fog airlight *A* in linear RGB, the same for all channels (spec Sec. III).
FOG_AIRLIGHT: float = 0.8

#: The visibility sweep in metres (spec Sec. III: eight levels, factor 2, from 250 m).
SWEEP_M: np.ndarray = 250.0 / 2.0 ** np.arange(8, dtype=np.float64)
SWEEP_M.setflags(write=False)

#: Channel wavelengths (R, G, B) in nm used for the underwater arm (spec Sec. III).
UNDERWATER_WAVELENGTHS_NM: tuple[int, int, int] = (620, 540, 460)

#: Absorption of pure water a_w (m^-1) at ``UNDERWATER_WAVELENGTHS_NM``
#: (Pope & Fry 1997, as quoted in spec Sec. III).
POPE_FRY_ABSORPTION_PER_M: np.ndarray = np.array([0.2755, 0.0474, 0.00979], dtype=np.float64)
POPE_FRY_ABSORPTION_PER_M.setflags(write=False)

# beta_c / (3.912 / V_best): the (3,) spectral shape of the underwater arm.
_UNDERWATER_RELATIVE_BETA = POPE_FRY_ABSORPTION_PER_M / POPE_FRY_ABSORPTION_PER_M.min()
_UNDERWATER_RELATIVE_BETA.setflags(write=False)

# IEC 61966-2-1 transfer-function constants.
_SRGB_DECODE_THRESHOLD = 0.04045
_SRGB_ENCODE_THRESHOLD = 0.0031308
_SRGB_LINEAR_SLOPE = 12.92
_SRGB_GAMMA = 2.4
_SRGB_OFFSET = 0.055

# Exact decode of all 256 code values (used by the renderers: decode once, bit-identical
# to ``srgb_to_linear`` on uint8).
_c = np.arange(256, dtype=np.float64) / 255.0
_SRGB_DECODE_LUT = np.where(
    _c <= _SRGB_DECODE_THRESHOLD,
    _c / _SRGB_LINEAR_SLOPE,
    ((_c + _SRGB_OFFSET) / (1.0 + _SRGB_OFFSET)) ** _SRGB_GAMMA,
)
_SRGB_DECODE_LUT.setflags(write=False)
_SRGB_DECODE_LUT32 = _SRGB_DECODE_LUT.astype(np.float32)  # the renderers' working precision
_SRGB_DECODE_LUT32.setflags(write=False)
del _c


# --------------------------------------------------------------------------- sRGB


def _float_dtype(x: np.ndarray) -> type:
    return np.float32 if x.dtype == np.float32 else np.float64


def srgb_to_linear(x):
    """Decode sRGB values to linear light (IEC 61966-2-1).

    ``L = C / 12.92`` for ``C <= 0.04045``, else ``((C + 0.055) / 1.055) ** 2.4``.

    Parameters
    ----------
    x : array_like, any shape
        sRGB-encoded values: ``uint8`` code values 0-255 (scaled by 1/255) or floats
        in [0, 1]. Other integer or boolean dtypes are rejected because their scale is
        ambiguous.

    Returns
    -------
    numpy.ndarray
        Linear-light values, same shape as *x*; ``float32`` for ``float32`` input,
        ``float64`` otherwise. ``NaN`` propagates.

    Raises
    ------
    ValueError
        If *x* has an integer dtype other than ``uint8``, a boolean or a non-numeric dtype.

    Examples
    --------
    >>> float(srgb_to_linear(np.uint8(128)))  # doctest: +ELLIPSIS
    0.21586...
    """
    x = np.asarray(x)
    if x.dtype == np.uint8:
        return _SRGB_DECODE_LUT[x]
    if not np.issubdtype(x.dtype, np.floating):
        raise ValueError(
            f"srgb_to_linear: expected uint8 code values or floats in [0, 1], got dtype "
            f"{x.dtype}; convert with x.astype(np.uint8) or x / 255.0"
        )
    dtype = _float_dtype(x)
    x = x.astype(dtype, copy=False)
    with np.errstate(invalid="ignore"):
        high = ((x + dtype(_SRGB_OFFSET)) / dtype(1.0 + _SRGB_OFFSET)) ** dtype(_SRGB_GAMMA)
        return np.where(x <= dtype(_SRGB_DECODE_THRESHOLD), x / dtype(_SRGB_LINEAR_SLOPE), high)


def linear_to_srgb(x):
    """Encode linear-light values as sRGB (IEC 61966-2-1).

    The input is clipped to [0, 1] first; then ``C = 12.92 L`` for
    ``L <= 0.0031308``, else ``1.055 L ** (1 / 2.4) - 0.055``.

    Parameters
    ----------
    x : array_like of float, any shape
        Linear-light values (nominally in [0, 1]).

    Returns
    -------
    numpy.ndarray
        sRGB values in [0, 1], same shape as *x*; ``float32`` for ``float32`` input,
        ``float64`` otherwise. ``NaN`` propagates. Multiply by 255 and round to get
        8-bit code values.

    Raises
    ------
    ValueError
        If *x* is not a floating-point array (integers have no defined linear scale).

    Examples
    --------
    >>> round(float(linear_to_srgb(0.5)) * 255, 2)
    187.52
    """
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        raise ValueError(
            f"linear_to_srgb: expected floats in [0, 1] (linear light), got dtype {x.dtype}; "
            "convert with x.astype(float)"
        )
    dtype = _float_dtype(x)
    x = np.clip(x.astype(dtype, copy=False), dtype(0.0), dtype(1.0))
    high = dtype(1.0 + _SRGB_OFFSET) * x ** dtype(1.0 / _SRGB_GAMMA) - dtype(_SRGB_OFFSET)
    return np.where(x <= dtype(_SRGB_ENCODE_THRESHOLD), x * dtype(_SRGB_LINEAR_SLOPE), high)


def _encode_uint8(linear: np.ndarray) -> np.ndarray:
    """Linear light -> 8-bit sRGB, rounded to the nearest code value (half to even).

    The float64 *reference* encoder (pow per element). The renderers use the exact
    table encoder :func:`_encode_uint8_lut` instead, which gives the same code for every
    float32 input.
    """
    return np.rint(linear_to_srgb(linear) * 255.0).astype(np.uint8)


# ------------------------------------------------------- fast exact 8-bit encoder
#
# The renderers blend in float32 and encode with one table look-up instead of a pow
# per element. For a float32 linear value x in [0, 1] the reference code is
# ``rint(linear_to_srgb(float64(x)) * 255)`` (:func:`_encode_uint8`), a non-decreasing
# step function of x with 255 steps. ``_ENCODE_THRESHOLDS[k - 1]`` is the smallest
# float32 whose reference code is >= k (bisection over float32 bit patterns, which are
# ordered like the values for x >= 0), so the code of x is the number of thresholds
# <= x. The table is indexed by the upper 16 bits of x's bit pattern (16257 bins for
# [0, 1]; a bin spans at most 2**-7 of its value, less than the 0.9 % by which
# neighbouring thresholds differ near 1 and the >= 10 % near 0, so a bin holds at most
# one threshold, which is asserted). With c the code at the bin's first value and l
# the lower 16 bits of the threshold inside the bin (0x10000 if none), the entry is
# ``e = (c << 17) + (2**17 - l)``, and ``(e + (bits & 0xFFFF)) >> 17`` is c + 1 when
# ``bits & 0xFFFF >= l`` and c otherwise:
#     code(x) = (table[bits >> 16] + (bits & 0xFFFF)) >> 17.
# Integer operations only; bit-identical to the reference for every float32 in [0, 1]
# (tested around every threshold and on random values; checked exhaustively over all
# 1.07e9 float32 values in [0, 1] by ``benchmarks/physics.py --exhaustive``).


def _build_encoder() -> tuple[np.ndarray, np.ndarray]:
    def reference_code(bits: np.ndarray) -> np.ndarray:
        x = bits.astype(np.uint32).view(np.float32).astype(np.float64)
        return np.rint(linear_to_srgb(x) * 255.0)

    one = int(np.float32(1.0).view(np.uint32))
    k = np.arange(1, 256, dtype=np.float64)
    lo = np.zeros(255, dtype=np.int64)  # bit patterns with code(lo) < k <= code(hi)
    hi = np.full(255, one, dtype=np.int64)
    while np.any(hi - lo > 1):
        mid = (lo + hi) // 2
        reached = reference_code(mid) >= k
        hi = np.where(reached, mid, hi)
        lo = np.where(reached, lo, mid)
    thresholds = hi.astype(np.uint32).view(np.float32)
    n_bins = (one >> 16) + 1
    bin_start = (np.arange(n_bins, dtype=np.uint32) << 16).view(np.float32)
    bin_code = np.searchsorted(thresholds, bin_start, side="right").astype(np.uint32)
    bin_lower = np.full(n_bins, 0x10000, dtype=np.uint32)  # 0x10000: no threshold
    bits = hi.astype(np.uint32)
    inside = (bits & 0xFFFF) != 0  # a threshold at a bin start is counted in bin_code
    index = bits[inside] >> 16
    if np.unique(index).size != index.size:  # pragma: no cover - excluded by the spacing
        raise AssertionError("sRGB encoder: two thresholds in one bin")
    bin_lower[index] = bits[inside] & 0xFFFF
    table = (bin_code << 17) + (0x20000 - bin_lower)
    thresholds.setflags(write=False)
    table.setflags(write=False)
    return thresholds, table


_ENCODE_THRESHOLDS, _ENCODE_TABLE = _build_encoder()

#: Pixels per block of the renderers' kernel (work buffers of 0.2-0.4 MB each).
_RENDER_BLOCK_PX = 16384


def _encode_uint8_lut(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Exact table encoder: float32 linear values in [0, 1] -> uint8 sRGB codes.

    Bit-identical to :func:`_encode_uint8` on the same float32 values. Values above 1
    by less than 2**-7 give 255; negative values and NaN raise ``IndexError`` (the
    renderers produce neither).

    Parameters
    ----------
    x : numpy.ndarray of float32, any shape
        Linear-light values.
    out : numpy.ndarray of uint8, same shape, optional
        Receives the codes.
    """
    return _Encoder(np.shape(x))(np.asarray(x, dtype=np.float32), out)


class _Encoder:
    """Work buffers of the table encoder for one array shape (allocated once per image:
    fresh multi-megabyte temporaries at every level cost more than the arithmetic)."""

    def __init__(self, shape: tuple[int, ...]):
        self.index = np.empty(shape, dtype=np.intp)
        self.entry = np.empty(shape, dtype=np.uint32)
        self.low = np.empty(shape, dtype=np.uint32)

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
        np.right_shift(bits, 16, out=self.index, casting="unsafe")
        np.take(_ENCODE_TABLE, self.index, out=self.entry)
        np.bitwise_and(bits, np.uint32(0xFFFF), out=self.low)
        self.entry += self.low
        if out is None:
            out = np.empty(self.entry.shape, dtype=np.uint8)
        np.right_shift(self.entry, np.uint32(17), out=out, casting="unsafe")
        return out


# ----------------------------------------------------------------- coefficients


def transmission(depth_m, beta_per_m, *, per_channel: bool | None = None):
    """Transmission ``t = exp(-beta z)`` of Eq. (1) of the spec.

    Parameters
    ----------
    depth_m : array_like of float, any shape
        Metric depth *z* in metres.
    beta_per_m : array_like of float
        Attenuation coefficient :math:`\\beta` in m^-1. Either grey (a scalar or an
        array broadcastable against *depth_m*) or per channel, with a trailing
        channel axis of length 3 (R, G, B).
    per_channel : bool, optional
        Whether the last axis of *beta_per_m* is a channel axis. The default (``None``)
        treats it as one when *beta_per_m* has ``ndim >= 1`` and a last axis of length
        3; pass ``False`` for a grey per-pixel map whose last axis happens to be 3.

    Returns
    -------
    numpy.ndarray of float64
        ``exp(-beta z)``: the broadcast shape of *depth_m* and *beta_per_m* (grey) or
        ``broadcast(depth_m.shape, beta.shape[:-1]) + (3,)`` (per channel).
        ``NaN`` in either input propagates; ``z = inf`` gives 0 for ``beta > 0``.

    Examples
    --------
    >>> float(transmission(0.0, 0.5))
    1.0
    >>> transmission(np.zeros((2, 4)), _underwater_beta(10.0)).shape
    (2, 4, 3)
    """
    z = np.asarray(depth_m, dtype=np.float64)
    beta = np.asarray(beta_per_m, dtype=np.float64)
    if per_channel is None:
        per_channel = beta.ndim >= 1 and beta.shape[-1] == 3
    if per_channel:
        if beta.ndim < 1 or beta.shape[-1] != 3:
            raise ValueError(
                f"transmission: per_channel=True needs beta_per_m with a last axis of "
                f"length 3, got shape {beta.shape}"
            )
        z = z[..., np.newaxis]
    return np.exp(-beta * z)


def _check_visibility_array(visibility_m, name: str) -> np.ndarray:
    v = np.asarray(visibility_m, dtype=np.float64)
    if np.any(v <= 0):
        raise ValueError(
            f"{name}: visibility_m must be positive metres (np.inf for no degradation), "
            f"got min {np.nanmin(v)}"
        )
    return v


def _fog_beta(visibility_m):
    """Fog attenuation coefficient from the meteorological visibility (Koschmieder).

    :math:`\\beta = 3.912 / V` (spec Sec. III; Koschmieder 1924).

    Parameters
    ----------
    visibility_m : array_like of float, any shape
        Visibility *V* in metres, positive; ``np.inf`` gives ``beta = 0``.

    Returns
    -------
    numpy.ndarray of float64
        :math:`\\beta` in m^-1, same shape as *visibility_m*; ``NaN`` propagates.

    Raises
    ------
    ValueError
        If any visibility is zero or negative.

    Examples
    --------
    >>> float(_fog_beta(3.912))
    1.0
    """
    v = _check_visibility_array(visibility_m, "fog_beta")
    return KOSCHMIEDER_CONSTANT / v


def _underwater_beta(visibility_m):
    """Per-channel underwater attenuation for a best-channel visibility.

    :math:`\\beta_c = s\\,a_w(\\lambda_c)` with the Pope & Fry (1997) absorption
    ``POPE_FRY_ABSORPTION_PER_M`` and *s* chosen so that
    :math:`3.912 / \\min_c \\beta_c = V_{best}` (spec Sec. III).

    Parameters
    ----------
    visibility_m : array_like of float, any shape
        Visibility of the least attenuated (blue) channel :math:`V_{best}` in metres,
        positive; ``np.inf`` gives zero attenuation.

    Returns
    -------
    numpy.ndarray of float64, shape ``visibility_m.shape + (3,)``
        :math:`\\beta_c` in m^-1 for (R, G, B); ``NaN`` propagates.

    Raises
    ------
    ValueError
        If any visibility is zero or negative.

    Examples
    --------
    >>> np.round(_underwater_beta(3.912), 3)
    array([28.141,  4.842,  1.   ])
    """
    v = _check_visibility_array(visibility_m, "underwater_beta")
    return (KOSCHMIEDER_CONSTANT / v)[..., np.newaxis] * _UNDERWATER_RELATIVE_BETA


def underwater_veiling_light():
    """Underwater veiling light :math:`B_c` in linear RGB (spec Sec. III).

    :math:`B_c = 0.8\\,\\beta_c^{-1} / \\max_k \\beta_k^{-1}`; independent of the
    common scale *s*, hence of the visibility.

    Returns
    -------
    numpy.ndarray of float64, shape (3,)
        (R, G, B), approximately ``(0.0284, 0.165, 0.8)``.

    Examples
    --------
    >>> np.round(underwater_veiling_light(), 4)
    array([0.0284, 0.1652, 0.8   ])
    """
    inverse = 1.0 / POPE_FRY_ABSORPTION_PER_M
    return FOG_AIRLIGHT * inverse / inverse.max()


# -------------------------------------------------------------------- renderers


def check_image_depth(image, depth_m, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Check an image and its depth map before a renderer (or the monitor) uses them.

    Parameters
    ----------
    image : numpy.ndarray, shape (H, W, 3), dtype uint8
        8-bit sRGB image.
    depth_m : array-like, shape (H, W)
        Depth in metres, real-valued and non-negative (NaN or inf: infinitely far).
    name : str
        The caller, named in the error (e.g. ``"fog"``).

    Returns
    -------
    image : numpy.ndarray
        ``image`` unchanged.
    depth : numpy.ndarray, shape (H, W), dtype float64
        ``depth_m`` as float64 metres.

    Raises
    ------
    ValueError
        Naming ``name`` and the fix: an image that is not a uint8 (H, W, 3) array, a
        depth map that is not real, not of the image's shape or negative.
    """
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8:
        dtype = getattr(image, "dtype", type(image).__name__)
        raise ValueError(
            f"{name}: image must be a uint8 numpy array (8-bit sRGB, H x W x 3), got "
            f"{dtype}; convert with np.asarray(PIL_image.convert('RGB'))"
        )
    if image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(
            f"{name}: image must be a uint8 (H, W, 3) array, got shape {image.shape}; convert grey or "
            "RGBA images to RGB first"
        )
    depth = np.asarray(depth_m)
    if not (np.issubdtype(depth.dtype, np.floating) or np.issubdtype(depth.dtype, np.integer)):
        raise ValueError(f"{name}: depth_m must be a real array in metres, got dtype {depth.dtype}")
    depth = depth.astype(np.float64, copy=False)
    if depth.shape != image.shape[:2]:
        raise ValueError(
            f"{name}: depth_m must have the image's shape (H, W) = {image.shape[:2]}, got "
            f"{depth.shape}; resize the depth map to the image"
        )
    if np.any(depth < 0):
        raise ValueError(
            f"{name}: depth_m must be non-negative metres (NaN or inf for 'infinitely far'), "
            f"got min {np.nanmin(depth)}"
        )
    return image, depth


def _check_visibilities(visibilities_m, name: str) -> np.ndarray:
    v = np.asarray(visibilities_m, dtype=np.float64)
    if v.ndim != 1 or v.size == 0:
        raise ValueError(
            f"{name}: visibilities_m must be a non-empty 1-D sequence of metres, got shape "
            f"{v.shape}"
        )
    if np.any(np.isnan(v)) or np.any(v <= 0):
        raise ValueError(
            f"{name}: every visibility must be positive metres (np.inf for no degradation), "
            f"got {v.tolist()}"
        )
    return v


def _check_visibility(visibility_m, name: str) -> float:
    if isinstance(visibility_m, (bool, np.bool_)) or not isinstance(
        visibility_m, (numbers.Real, np.ndarray)
    ):
        raise ValueError(
            f"{name}: visibility_m must be a real number of metres, got {visibility_m!r}"
        )
    v = np.asarray(visibility_m, dtype=np.float64)
    if v.ndim != 0:
        raise ValueError(
            f"{name}: visibility_m must be a scalar; for several visibilities use "
            f"{name}_sweep, got shape {v.shape}"
        )
    return float(_check_visibilities(v[np.newaxis], name)[0])


def _render(
    image: np.ndarray,
    depth: np.ndarray,
    visibilities: np.ndarray,
    relative_beta: np.ndarray | None,
    veiling_light: np.ndarray,
    *,
    rounded: bool = True,
) -> np.ndarray:
    """Shared kernel of all renderers: decode once, Eq. (1) per level, encode.

    ``relative_beta`` is ``None`` for a grey medium (fog), else the (3,) ratio
    beta_c / (3.912 / V). Single calls are this kernel with one level, so sweeps and
    single calls are bit-identical by construction.

    Arithmetic (see :func:`_render_reference` for the plain float64 formulation):
    the pixels are processed in blocks of ``_RENDER_BLOCK_PX``; each block is decoded
    once through the exact 256-entry table (float32) and ``J - B`` and the path length
    ``z * beta_c / beta_best`` (float64) are formed once; per level the optical depth
    ``beta_c z`` is formed in float64 and rounded once to float32 (so that
    ``(kappa z, kappa V)`` and ``(z, V)`` give the same float32 optical depth, hence
    the same image, unless the two float64 products straddle a float32 rounding
    boundary, about one value in 1e8), ``t = exp(-beta z)`` and ``I = (J - B) t + B``
    are evaluated in float32 and encoded with the exact table encoder
    (:func:`_encode_uint8_lut`). Against the float64 reference the 8-bit result
    differs by at most one code value, and only where the exact value lies within
    float32 rounding (~1e-7) of a rounding boundary (about 1 value in 1e6; tested,
    and printed by ``benchmarks/physics.py``).

    With ``rounded=False`` the unrounded sRGB values (float32 in [0, 1]) are returned
    instead of uint8 codes (used by :mod:`murk.scene`, whose root finding needs a
    continuous statistic).
    """
    veil = np.asarray(veiling_light, dtype=np.float32)
    rb = np.ones(3) if relative_beta is None else np.asarray(relative_beta, dtype=np.float64)
    neg_beta = [None if np.isinf(v) else -(KOSCHMIEDER_CONSTANT / v) for v in visibilities]
    out = np.empty((visibilities.size,) + image.shape, dtype=np.uint8 if rounded else np.float32)
    pixels = image.reshape(-1, 3)
    flat_depth = depth.reshape(-1)
    flat_out = out.reshape(visibilities.size, -1, 3)
    # Blocks of pixels: the work buffers stay small and in cache, and are reused for
    # every block and level (fresh multi-megabyte temporaries cost more than the
    # arithmetic, mostly in page faults).
    block = min(_RENDER_BLOCK_PX, pixels.shape[0])
    z_rb = np.empty((block, 3), dtype=np.float64)
    linear = np.empty((block, 3), dtype=np.float32)
    t = np.empty((block, 3), dtype=np.float32)
    veil_block = np.broadcast_to(veil, (block, 3)).copy()  # same-shape add: no size-3 inner loop
    rb_block = np.broadcast_to(rb, (block, 3)).copy()
    encode = _Encoder((block, 3)) if rounded else None
    for start in range(0, pixels.shape[0], block):
        stop = min(start + block, pixels.shape[0])
        n = stop - start
        zb, lin, tb = z_rb[:n], linear[:n], t[:n]
        np.take(_SRGB_DECODE_LUT32, pixels[start:stop], out=lin)  # decoded once
        lin -= veil_block[:n]  # J - B
        # The per-channel path-length factor (beta_c / beta_best, 1 for fog) is folded
        # in once; NaN depth (no estimate) is treated as infinitely far: t = 0.
        zb[...] = flat_depth[start:stop, np.newaxis]
        if relative_beta is not None:
            zb *= rb_block[:n]
        zb[np.isnan(zb)] = np.inf
        if n < block:
            encode = _Encoder((n, 3)) if rounded else None
        for level, nb in enumerate(neg_beta):
            dest = flat_out[level, start:stop]
            if nb is None:  # V = inf: no degradation
                dest[...] = pixels[start:stop] if rounded else pixels[start:stop] / np.float32(255.0)
                continue
            # -beta_c z in float64, rounded once to float32, then t = exp(-beta_c z).
            np.multiply(zb, nb, out=tb, casting="same_kind")
            np.exp(tb, out=tb)
            np.multiply(lin, tb, out=tb)
            tb += veil_block[:n]  # I = (J - B) t + B, linear light
            if rounded:
                encode(tb, out=dest)
            else:
                dest[...] = linear_to_srgb(tb)
    return out


def _render_reference(
    image: np.ndarray,
    depth: np.ndarray,
    visibilities: np.ndarray,
    relative_beta: np.ndarray | None,
    veiling_light: np.ndarray,
) -> np.ndarray:
    """Eq. (1) written plainly in float64, one level at a time (tests and benchmark).

    ``I = J t + B (1 - t)`` with ``t`` from :func:`transmission`, encoded with the
    float64 reference :func:`_encode_uint8`; the image is decoded at every level.
    """
    z = np.where(np.isnan(depth), np.inf, depth)
    out = np.empty((visibilities.size,) + image.shape, dtype=np.uint8)
    for level, v in enumerate(visibilities):
        if np.isinf(v):
            out[level] = image
            continue
        linear = srgb_to_linear(image)
        beta = KOSCHMIEDER_CONSTANT / v
        if relative_beta is None:
            t = transmission(z, beta)[..., np.newaxis]
        else:
            t = transmission(z, beta * relative_beta, per_channel=True)
        out[level] = _encode_uint8(linear * t + veiling_light * (1.0 - t))
    return out


def _check_airlight(airlight, name: str) -> np.ndarray:
    a = np.asarray(airlight, dtype=np.float64)
    if a.shape not in ((), (3,)) or not np.all(np.isfinite(a)) or np.any(a < 0) or np.any(a > 1):
        raise ValueError(
            f"{name}: airlight must be a linear-light value in [0, 1] (scalar or (R, G, B)), "
            f"got {airlight!r}"
        )
    return np.broadcast_to(a, (3,))


def fog(image, depth_m, visibility_m, airlight=FOG_AIRLIGHT):
    """Render fog of visibility *V* into an 8-bit sRGB image (spec Eq. 1, Sec. III).

    ``I = J t + A (1 - t)`` in linear light with ``t = exp(-3.912 z / V)``
    (Koschmieder 1924), then re-encoded to sRGB and rounded to the nearest code value.

    Parameters
    ----------
    image : numpy.ndarray of uint8, shape (H, W, 3)
        Clean scene *J*, 8-bit sRGB.
    depth_m : array_like of float, shape (H, W)
        Metric depth *z* in metres, non-negative. ``NaN`` (no estimate) and ``inf``
        are treated as infinitely far: the pixel becomes the airlight.
    visibility_m : float
        Meteorological visibility *V* in metres, positive; ``np.inf`` returns a copy of
        *image* unchanged.
    airlight : float or array_like of shape (3,), optional
        Airlight *A* in linear light, in [0, 1]; default ``FOG_AIRLIGHT`` = 0.8 (spec).

    Returns
    -------
    numpy.ndarray of uint8, shape (H, W, 3)
        The fogged image, 8-bit sRGB.

    Raises
    ------
    ValueError
        If *image* is not a uint8 (H, W, 3) array, *depth_m* does not have shape (H, W)
        or has negative values, *visibility_m* is not a positive scalar, or *airlight*
        is outside [0, 1].

    See Also
    --------
    fog_sweep : many visibilities at once, bit-identical to repeated calls.

    Examples
    --------
    >>> img = np.full((1, 1, 3), 128, np.uint8)
    >>> fog(img, np.full((1, 1), np.log(2.0)), 3.912, airlight=1.0)[0, 0]  # t = 0.5
    array([205, 205, 205], dtype=uint8)
    """
    image, depth = check_image_depth(image, depth_m, "fog")
    v = _check_visibility(visibility_m, "fog")
    a = _check_airlight(airlight, "fog")
    return _render(image, depth, np.array([v]), None, a)[0]


def fog_sweep(image, depth_m, visibilities_m=None, airlight=FOG_AIRLIGHT, *, rounded=True):
    """Render fog at several visibilities of one image (decoding it once).

    Parameters
    ----------
    image : numpy.ndarray of uint8, shape (H, W, 3)
        Clean scene, 8-bit sRGB.
    depth_m : array_like of float, shape (H, W)
        Metric depth in metres (see :func:`fog`).
    visibilities_m : array_like of float, shape (L,), optional
        Visibilities in metres, positive (``np.inf`` allowed); default ``SWEEP_M``.
    airlight : float or array_like of shape (3,), optional
        Airlight *A* in linear light; default ``FOG_AIRLIGHT``.
    rounded : bool, optional
        ``True`` (default): 8-bit codes. ``False``: the same renderings before 8-bit
        rounding, as float32 sRGB values in [0, 1] (continuous in V; used by the
        root finding of :func:`murk.scene._nominal._equivalent_visibility`).

    Returns
    -------
    numpy.ndarray of uint8 (float32 if not *rounded*), shape (L, H, W, 3)
        ``out[i]`` is exactly ``fog(image, depth_m, visibilities_m[i], airlight)``
        (if *rounded*).

    Raises
    ------
    ValueError
        As :func:`fog`, and if *visibilities_m* is not a non-empty 1-D sequence.
    """
    image, depth = check_image_depth(image, depth_m, "fog_sweep")
    v = _check_visibilities(SWEEP_M if visibilities_m is None else visibilities_m, "fog_sweep")
    a = _check_airlight(airlight, "fog_sweep")
    return _render(image, depth, v, None, a, rounded=bool(rounded))


def underwater(image, depth_m, visibility_m):
    """Render clear-water attenuation into an 8-bit sRGB image (spec Eq. 1, Sec. III).

    ``I_c = J_c t_c + B_c (1 - t_c)`` in linear light with ``t_c = exp(-beta_c z)``,
    :math:`\\beta_c` from :func:`_underwater_beta` (Pope & Fry 1997 absorption scaled to
    the best-channel visibility) and :math:`B_c` from :func:`underwater_veiling_light`.

    Parameters
    ----------
    image : numpy.ndarray of uint8, shape (H, W, 3)
        Clean scene *J*, 8-bit sRGB.
    depth_m : array_like of float, shape (H, W)
        Metric depth (path length in water) in metres, non-negative; ``NaN`` and ``inf``
        are treated as infinitely far (pixel = veiling light).
    visibility_m : float
        Best-channel visibility :math:`V_{best} = 3.912 / \\min_c \\beta_c` in metres,
        positive; ``np.inf`` returns a copy of *image* unchanged.

    Returns
    -------
    numpy.ndarray of uint8, shape (H, W, 3)

    Raises
    ------
    ValueError
        If *image* is not a uint8 (H, W, 3) array, *depth_m* does not have shape (H, W)
        or has negative values, or *visibility_m* is not a positive scalar.

    See Also
    --------
    underwater_sweep : many visibilities at once, bit-identical to repeated calls.
    """
    image, depth = check_image_depth(image, depth_m, "underwater")
    v = _check_visibility(visibility_m, "underwater")
    veil = underwater_veiling_light()
    return _render(image, depth, np.array([v]), _UNDERWATER_RELATIVE_BETA, veil)[0]


def underwater_sweep(image, depth_m, visibilities_m=None):
    """Render the underwater arm at several best-channel visibilities of one image.

    Parameters
    ----------
    image : numpy.ndarray of uint8, shape (H, W, 3)
        Clean scene, 8-bit sRGB.
    depth_m : array_like of float, shape (H, W)
        Metric depth in metres (see :func:`underwater`).
    visibilities_m : array_like of float, shape (L,), optional
        Best-channel visibilities in metres, positive (``np.inf`` allowed); default
        ``SWEEP_M``.

    Returns
    -------
    numpy.ndarray of uint8, shape (L, H, W, 3)
        ``out[i]`` is exactly ``underwater(image, depth_m, visibilities_m[i])``.

    Raises
    ------
    ValueError
        As :func:`underwater`, and if *visibilities_m* is not a non-empty 1-D sequence.
    """
    image, depth = check_image_depth(image, depth_m, "underwater_sweep")
    v = _check_visibilities(
        SWEEP_M if visibilities_m is None else visibilities_m, "underwater_sweep"
    )
    return _render(image, depth, v, _UNDERWATER_RELATIVE_BETA, underwater_veiling_light())
