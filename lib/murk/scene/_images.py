"""An image file in, an sRGB array at the presented size out: reading, checking and resizing images.

The lowest room of the image path: :mod:`murk.scene` (the ImageNet-C control and its
nominal equivalence over the items) and :mod:`murk.scene` (the conditions of an item)
both read images through it. :func:`load_image` decodes a COCO file to uint8 (H, W, 3)
sRGB codes (16-bit and float modes scaled, EXIF orientation applied only where the
annotation needs it), :func:`presented_size` gives the size shown to the models (spec
Sec. III: the longer side at most 448 px; an image too small for every condition raises
:class:`ImageTooSmallError`), :func:`resize_image` and :func:`resize_depth` resize.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

import numpy as np
from PIL import Image

__all__ = ["MIN_SIDE_PX", "ImageTooSmallError", "EXIF_ORIENTATION_TAG", "TRANSPOSING_ORIENTATIONS",
           "TransposedImageWarning", "ConvertedImageWarning", "to_rgb8", "inspect_image", "conversion_note", "load_image", "presented_size", "resize_image",
           "resize_depth"]

#: Smallest side (px) that ``imagecorruptions``' fog accepts: the smallest presented side every condition
#: can be rendered at (:func:`presented_size`, :func:`murk.scene.check_imagenet_c_size`)
MIN_SIDE_PX: int = 32


class ImageTooSmallError(ValueError):
    """An image is too small for the ImageNet-C fog (a side under :data:`MIN_SIDE_PX` px).

    A subclass of ValueError, so that the per-item loops of the stages, which record a
    ValueError of an item in ``missing_reason`` and go on, skip such an item instead of
    stopping (issue 13). The message names the image (when the caller knows it) and
    its presented size.
    """


_SIXTEEN_BIT_MODES = ("I;16", "I;16B", "I;16L", "I;16N")


def to_rgb8(im: Image.Image, name: str = "image") -> np.ndarray:
    """A Pillow image as uint8 (H, W, 3) sRGB codes, scaling non-8-bit modes correctly.

    8-bit modes (``1``, ``L``, ``P``, ``LA``, ``RGB``, ``RGBA``, ``CMYK``, ``YCbCr``,
    ...) go through Pillow's ``convert("RGB")``. 16-bit greyscale (``I;16*``, and
    ``I`` holding values in 0-65535, as 16-bit PNGs open) is scaled by 255 / 65535
    and rounded: ``convert("RGB")`` would clip it to 255 instead (issue 13: 99.6 %
    of the pixels of a 16-bit PNG saturated silently). Float images (``F``) with
    values in [0, 1] are scaled by 255 and rounded. (Pillow itself reduces 16-bit
    RGB PNGs to 8 bits per channel when it opens them.)

    Raises
    ------
    ValueError
        For a 32-bit integer image with values outside 0-65535 or a float image
        outside [0, 1] (no defined scale); the message names *name*.
    """
    mode = im.mode
    if mode in _SIXTEEN_BIT_MODES or mode == "I":
        a = np.asarray(im).astype(np.float64)
        if mode == "I" and a.size and (a.min() < 0 or a.max() > 65535):
            raise ValueError(f"{name}: 32-bit integer image with values {a.min():.0f}..{a.max():.0f} outside "
                             f"0-65535 has no defined 8-bit scale; convert it to 8-bit or 16-bit first")
        grey = np.round(a * (255.0 / 65535.0)).astype(np.uint8)
        return np.repeat(grey[..., None], 3, axis=-1)
    if mode == "F":
        a = np.asarray(im, dtype=np.float64)
        if a.size and not (np.isfinite(a).all() and a.min() >= 0.0 and a.max() <= 1.0):
            raise ValueError(f"{name}: float image with values outside [0, 1] has no defined 8-bit scale; "
                             f"convert it to 8-bit first")
        grey = np.round(a * 255.0).astype(np.uint8)
        return np.repeat(grey[..., None], 3, axis=-1)
    return np.asarray(im.convert("RGB"), dtype=np.uint8).copy()


#: EXIF tag of the orientation (TIFF/EXIF 2.3: 1 = as stored, 2-4 = mirrored / rotated 180 degrees,
#: 5-8 = transposed, i.e. rotated by 90 degrees, as phones write them)
EXIF_ORIENTATION_TAG = 0x0112
#: the orientations whose display frame is the stored frame transposed (width and height swapped)
TRANSPOSING_ORIENTATIONS = (5, 6, 7, 8)


class TransposedImageWarning(UserWarning):
    """An image used transposed by its EXIF orientation, because only so its size agrees with its annotation."""


def _bomb_reason(path: Path, e: Exception) -> str:
    """The missing reason of an image Pillow refuses as a decompression bomb, with its pixel size."""
    size = None
    tb = e.__traceback__
    while tb is not None:  # the header Pillow read before refusing (``_open_core``'s ``im``), if reachable
        im = tb.tb_frame.f_locals.get("im")
        if isinstance(im, Image.Image):
            size = im.size
        tb = tb.tb_next
    m = re.search(r"\((\d+) pixels\)", str(e))
    pixels = size[0] * size[1] if size else (int(m.group(1)) if m else None)
    what = (f"{size[0]} x {size[1]} px ({pixels:,} pixels)" if size else
            f"{pixels:,} pixels" if pixels else "over the limit")
    limit = 2 * Image.MAX_IMAGE_PIXELS if Image.MAX_IMAGE_PIXELS else None
    return (f"image {path} is {what}, over Pillow's decompression-bomb limit"
            + (f" of {limit:,} pixels (2 x PIL.Image.MAX_IMAGE_PIXELS)" if limit else "")
            + ": not decoded, recorded as missing; replace it with the original COCO file (at most 640 px a side)")


def _open(path: Path) -> Image.Image:
    """``Image.open`` with murk's messages (the header only; the caller loads the pixels)."""
    if path.is_dir():  # not "not found": the name is there, as a folder
        raise ValueError(f"image {path} is a folder, not an image file: recorded as missing; replace the folder "
                         f"with the COCO image file of that name (rm -r {path}, then copy the file there, or rerun "
                         f"the select stage without MURK_OFFLINE, which downloads the selected images)")
    if not path.is_file():
        raise FileNotFoundError(f"image {path} not found: check MURK_COCO_DIR / the image folder, "
                                f"or unset MURK_OFFLINE and rerun the select stage, which downloads the selected images")
    try:
        return Image.open(path)
    except Image.DecompressionBombError as e:  # not an OSError: it used to stop the stage and every rerun
        raise ValueError(_bomb_reason(path, e)) from None
    except (OSError, SyntaxError) as e:
        raise ValueError(f"image {path} cannot be decoded ({e}); re-download it") from e


class ConvertedImageWarning(UserWarning):
    """An image of which only a part is used: the first frame of an animated file, the colours without alpha."""


def _conversion_note(im: Image.Image, path: Path) -> str:
    """What :func:`load_image` leaves out of an opened image ('' when nothing): frames after the first, alpha."""
    notes = []
    n_frames = int(getattr(im, "n_frames", 1) or 1)
    if n_frames > 1:
        notes.append(f"is animated ({n_frames} frames): only its first frame is used")
    if "A" in im.getbands() or "transparency" in im.info:
        notes.append("has an alpha channel (transparency): it is dropped, every pixel is used with its stored "
                     "colour, as if opaque")
    if not notes:
        return ""
    return (f"image {path} " + " and ".join(notes) + "; if another frame or a background colour is meant, put "
            f"that as a single-frame RGB image in its place")


def conversion_note(path: str | os.PathLike) -> str:
    """Which part of an image file :func:`load_image` leaves out, from the file's header.

    Parameters
    ----------
    path : path
        The image file.

    Returns
    -------
    str
        ``""`` for a single-frame image without alpha; otherwise one line naming the
        file and what is left out: the frames after the first of an animated file
        (GIF, APNG, WebP, multi-page TIFF), the alpha channel or transparent colour
        (every pixel is used with its stored colour). :func:`load_image` warns
        with the same line (:class:`ConvertedImageWarning`); the select stage
        records it (:func:`murk.protocol.image_checks`, ``converted``).

    Raises
    ------
    FileNotFoundError, ValueError
        As :func:`load_image`.
    """
    path = Path(path)
    with _open(path) as im:
        return _conversion_note(im, path)


def _orientation(im: Image.Image) -> int:
    try:
        return int(im.getexif().get(EXIF_ORIENTATION_TAG, 1) or 1)
    except Exception:  # noqa: BLE001 - an unreadable EXIF block is no orientation
        return 1


def _frame(im: Image.Image, path: Path, expected_size: tuple[int, int] | None) -> tuple[bool, str]:
    """(transpose?, note) of an opened image against its annotation's (width, height); raises on a mismatch."""
    stored = tuple(int(v) for v in im.size)
    orientation = _orientation(im)
    if expected_size is None:
        return False, ""
    want = (int(expected_size[0]), int(expected_size[1]))
    if stored == want:  # COCO's boxes refer to the stored pixels: the EXIF orientation is not applied
        return False, ""
    if orientation in TRANSPOSING_ORIENTATIONS and stored[::-1] == want:
        return True, (f"image {path} is stored {stored[0]} x {stored[1]} px with EXIF orientation {orientation}; "
                      f"its annotation is {want[0]} x {want[1]} px: used transposed (EXIF orientation applied), "
                      f"so that the box lies on the target")
    raise ValueError(
        f"image {path} is stored {stored[0]} x {stored[1]} px (EXIF orientation {orientation}) but its annotation "
        f"says {want[0]} x {want[1]} px: its box would not lie on the target, so it is recorded as missing; "
        f"replace it with the original COCO file")


def inspect_image(path: str | os.PathLike, expected_size: tuple[int, int] | None = None) -> str:
    """Check an image against its annotation from its header only (no pixel is decoded).

    The rule of :func:`load_image`, without loading the pixels: the select stage
    records what it finds for every selected image before any other stage runs.

    Parameters
    ----------
    path : path
        The image file.
    expected_size : (width, height) px, optional
        The annotation's ``width`` and ``height`` (COCO ``images`` table).

    Returns
    -------
    str
        ``""`` when the image is used as stored; otherwise the note that it is used
        transposed (stored size, EXIF orientation, annotation size).

    Raises
    ------
    FileNotFoundError, ValueError
        As :func:`load_image` (missing, not decodable, over Pillow's pixel limit,
        size disagreeing with the annotation).
    """
    path = Path(path)
    with _open(path) as im:
        return _frame(im, path, expected_size)[1]


def load_image(path: str | os.PathLike, expected_size: tuple[int, int] | None = None) -> np.ndarray:
    """Read a COCO JPEG (or any image Pillow reads) as uint8 (H, W, 3) sRGB in its annotation's pixel frame.

    Grey, CMYK and alpha images are converted to RGB; 16-bit and float images are
    scaled to 8 bits (:func:`to_rgb8`), not clipped. An animated file gives its first
    frame; alpha is dropped; either is said by a :class:`ConvertedImageWarning`
    (:func:`conversion_note`).

    **Orientation rule.** COCO's annotations (``width``, ``height``, ``bbox``)
    refer to the stored pixels, so the image is used as stored whenever its stored
    size equals the annotation's size, whatever its EXIF orientation says (also
    for orientations 2-4, mirrors and the 180-degree turn, which keep the size,
    and for a square image). Only when the stored size is the annotation's size
    transposed *and* the EXIF orientation is one of 5-8 (the file was stored
    rotated by 90 degrees, as phones and re-downloaded originals write them) is the
    orientation applied (:func:`PIL.ImageOps.exif_transpose`): then the box lies on
    the target, and a :class:`TransposedImageWarning` says so (the select stage
    records it, :func:`inspect_image`). Any other disagreement is an error: the box
    would be drawn elsewhere than on the target. Without ``expected_size`` the
    image is returned as stored.

    Parameters
    ----------
    path : path
        The image file.
    expected_size : (width, height) px, optional
        The annotation's ``width`` and ``height``; None skips the check.

    Returns
    -------
    uint8 ndarray (H, W, 3)
        ``H, W = expected_size[::-1]`` when given.

    Raises
    ------
    FileNotFoundError
        If the file is missing (message names it and the fix).
    ValueError
        If the path is a folder (the message says so), the file cannot be decoded (truncated or not an image), has no defined
        8-bit scale, is over Pillow's decompression-bomb limit
        (``PIL.Image.MAX_IMAGE_PIXELS``; the message names the file and its pixel
        size), or its size disagrees with ``expected_size`` in a way no EXIF
        transpose explains (the message gives both sizes and the orientation).
        Each is a ValueError so that every stage records the image in
        ``missing_reason`` and goes on.
    """
    from PIL import ImageOps

    path = Path(path)
    with _open(path) as im:
        transpose, note = _frame(im, path, expected_size)
        left_out = _conversion_note(im, path)
        try:
            im.load()
            if transpose:
                im = ImageOps.exif_transpose(im)
            rgb = to_rgb8(im, f"image {path}")
        except Image.DecompressionBombError as e:
            raise ValueError(_bomb_reason(path, e)) from None
        except (OSError, SyntaxError) as e:
            raise ValueError(f"image {path} cannot be decoded ({e}); re-download it") from e
    if note:
        warnings.warn(note, TransposedImageWarning, stacklevel=2)
    if left_out:
        warnings.warn(left_out, ConvertedImageWarning, stacklevel=2)
    return rgb


def presented_size(width: int, height: int, max_side: int = 448, *, min_side: int | None = MIN_SIDE_PX,
                   name: str | None = None) -> tuple[int, int]:
    """(width, height) in px after scaling so that the longer side is at most ``max_side``.

    ``max_side`` default 448 px: spec Sec. III ("at most 448² pixels, a single tile").
    Images already small enough are not upscaled.

    Parameters
    ----------
    width, height : int
        Stored size in px.
    max_side : int, default 448
    min_side : int or None, default MIN_SIDE_PX (32)
        Smallest presented side every condition can be rendered at (the ImageNet-C
        fog needs 32 px); None disables the check.
    name : str, optional
        How to name the image in the error message.

    Raises
    ------
    ImageTooSmallError
        (a ValueError) If a presented side is under ``min_side``: raised here, before
        any rendering, so that a stage's per-item loop records the item in
        ``missing_reason`` and goes on (issue 13: the ImageNet-C fog used to raise in
        the middle of the conditions and stop the stage).
    """
    s = min(1.0, max_side / max(width, height))
    size = max(1, round(width * s)), max(1, round(height * s))
    if min_side:
        what = name or f"an image of {int(width)} x {int(height)} px"
        if min(size) < int(min_side):
            raise ImageTooSmallError(
                f"{what} would be presented at {size[0]} x {size[1]} px (longer side at most {max_side} px); "
                f"every condition needs at least {int(min_side)} px on each side (the ImageNet-C fog, "
                f"imagecorruptions): the item is recorded as missing")
    return size


def resize_image(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Resize uint8 (H, W, 3) to ``size`` = (width, height) with Lanczos filtering."""
    if (image.shape[1], image.shape[0]) == tuple(size):
        return image
    return np.asarray(Image.fromarray(image).resize(size, Image.Resampling.LANCZOS))


def resize_depth(depth_m: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Resize a float depth map (H, W) in metres to ``size`` = (width, height), bilinear."""
    if (depth_m.shape[1], depth_m.shape[0]) == tuple(size):
        return depth_m.astype(np.float32, copy=False)
    im = Image.fromarray(depth_m.astype(np.float32), mode="F")
    return np.asarray(im.resize(size, Image.Resampling.BILINEAR), dtype=np.float32)
