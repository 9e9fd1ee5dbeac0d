"""One condition of one item: presented size, degradation, controls, box marker.

The order is fixed by the spec (Sec. III): the image is degraded first (Eq. 1 in
linear RGB, or the ImageNet-C fog), then the 8-px red box is drawn, so the
target's position stays visible at every level.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
from PIL import Image

from murk import cube, nominal, physics

__all__ = ["ImageTooSmallError", "MIN_SIDE_PX", "EXIF_ORIENTATION_TAG", "TRANSPOSING_ORIENTATIONS",
           "TransposedImageWarning", "inspect_image", "load_image", "to_rgb8", "presented_size", "resize_image",
           "resize_depth", "scale_bbox", "draw_box", "render_conditions", "load_presented", "item_inputs"]

#: The error raised for a presented image under :data:`MIN_SIDE_PX` px on a side (a
#: ValueError, so the stages record the item in ``missing_reason`` and go on).
ImageTooSmallError = nominal.ImageTooSmallError
#: Smallest presented side (px) every condition can be rendered at (the ImageNet-C fog).
MIN_SIDE_PX = nominal.MIN_SIDE_PX

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
    if not path.is_file():
        raise FileNotFoundError(f"image {path} not found: check MURK_COCO_DIR / the image folder, "
                                f"or unset MURK_OFFLINE and rerun the select stage, which downloads the selected images")
    try:
        return Image.open(path)
    except Image.DecompressionBombError as e:  # not an OSError: it used to stop the stage and every rerun
        raise ValueError(_bomb_reason(path, e)) from None
    except (OSError, SyntaxError) as e:
        raise ValueError(f"image {path} cannot be decoded ({e}); re-download it") from e


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
    scaled to 8 bits (:func:`to_rgb8`), not clipped.

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
        If the file cannot be decoded (truncated or not an image), has no defined
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


def scale_bbox(bbox: Sequence[float], src_size: tuple[int, int], dst_size: tuple[int, int]) -> tuple[float, ...]:
    """Scale a COCO box (x, y, w, h in px) from ``src_size`` to ``dst_size`` (width, height)."""
    sx, sy = dst_size[0] / src_size[0], dst_size[1] / src_size[1]
    x, y, w, h = bbox
    return (x * sx, y * sy, w * sx, h * sy)


def draw_box(image: np.ndarray, bbox: Sequence[float], width_px: int = 8,
             color: Sequence[int] = (255, 0, 0)) -> np.ndarray:
    """Draw the target marker: a red rectangle outline around the box (spec Sec. III).

    The outline is ``width_px`` wide and lies just *outside* the box, so that
    it does not cover the target: with the box edges rounded outwards to whole
    pixels, ``x0 = floor(x)``, ``x1 = ceil(x + w)`` (likewise y), the bands are
    ``[x0 - width_px, x0)`` (left), ``[x1, x1 + width_px)`` (right) and the
    same in y, spanning the outer rectangle. **Border rule**: where a band
    would leave the image (the box touches or crosses the border), that band
    is shifted inwards until its outer edge lies on the image border, i.e. it
    becomes ``[0, width_px)`` or ``[W - width_px, W)`` and covers the outermost
    ``width_px`` pixels of the box instead. All ``width_px`` pixels of every
    band are therefore visible in every case, and the marker is fully inside
    the image. (The box itself is first clipped to the image.)

    The pipeline draws it after the degradation, on every condition,
    including the blank control (:func:`render_conditions`).

    Parameters
    ----------
    image : uint8 ndarray (H, W, 3)
        The (degraded) image; not modified.
    bbox : (x, y, w, h)
        Target box in px, COCO convention, in ``image``'s pixel frame.
    width_px : int, default 8
        Line width in px (spec Sec. III: "an 8-px red box"; config
        ``render.box_width_px``).
    color : (r, g, b), default (255, 0, 0)
        uint8 colour, pure red (config ``render.box_color_rgb``).

    Returns
    -------
    uint8 ndarray (H, W, 3)
        A new array with the outline drawn.

    Raises
    ------
    ValueError
        If ``width_px < 1``, or if the box does not overlap the image (a
        marker outside the frame would be invisible).

    Examples
    --------
    >>> img = np.zeros((40, 40, 3), np.uint8)
    >>> red = (draw_box(img, (0, 10, 20, 20)) == (255, 0, 0)).all(-1)
    >>> [bool(v) for v in (red[20, :8].all(), red[20, 8:20].any(), red[20, 20:28].all())]
    [True, False, True]
    """
    width_px = int(width_px)
    if width_px < 1:
        raise ValueError(f"width_px must be at least 1, got {width_px}")
    out = image.copy()
    H, W = out.shape[:2]
    x, y, w, h = (float(v) for v in bbox)
    x0, y0 = max(0, int(np.floor(x))), max(0, int(np.floor(y)))
    x1, y1 = min(W, int(np.ceil(x + w))), min(H, int(np.ceil(y + h)))
    if x1 <= x0 or y1 <= y0:
        raise ValueError(f"box {tuple(bbox)} (x, y, w, h px) does not overlap the {W}x{H} px image; "
                         f"scale it to the presented image first (murk.render.scale_bbox)")
    c = np.asarray(color, dtype=np.uint8)
    # outer edges of the outline, moved inwards to the image border where needed
    left = max(0, x0 - width_px)
    right = min(W, x1 + width_px)
    top = max(0, y0 - width_px)
    bottom = min(H, y1 + width_px)
    out[top:top + width_px, left:right] = c            # top band
    out[max(top, bottom - width_px):bottom, left:right] = c  # bottom band
    out[top:bottom, left:left + width_px] = c          # left band
    out[top:bottom, max(left, right - width_px):right] = c  # right band
    return out


def render_conditions(image: np.ndarray, depth_m: np.ndarray, bbox: Sequence[float],
                      partner_image: np.ndarray,
                      *, seed: int = 1, image_id: int = 0, config: dict | None = None,
                      marker: bool = True) -> Iterator[tuple[str, int, np.ndarray]]:
    """Every condition of one item, as presented to the VLM (an iterator).

    The inputs are checked when this function is *called*, before any condition is
    rendered: an image under 32 px on a side raises :class:`ImageTooSmallError` (a
    ValueError naming the image) at once, instead of after the physical conditions,
    inside the ImageNet-C fog.

    Parameters
    ----------
    image : uint8 (H, W, 3)
        The item's clean image at the presented size (:func:`presented_size`).
    depth_m : float32 (H, W)
        Metric depth z in metres at the same size.
    bbox : (x, y, w, h) px
        The target's box in ``image``'s pixel frame.
    partner_image : uint8 (H', W', 3)
        Clean image of the shuffled partner item j = (i + 37) mod N at its
        presented size; the box of item i is scaled to it.
    seed, image_id : int
        Seed the ImageNet-C noise per (seed, image id) so subsets reproduce.
    config : dict, optional
        Study configuration (``render`` section: box width and colour, grey
        level of the blank control).
    marker : bool
        Draw the red box (default). ``False`` yields the degraded images without
        it, for image statistics such as the visibility monitor.

    Returns
    -------
    iterator of (arm, level, uint8 image)
        One per :data:`murk.cube.CONDITIONS`, with ``arm == "clean"`` for the clean
        image. The ImageNet-C fog uses the seed :func:`murk.nominal.imagenet_c_seed`
        (seed, image id), one fractal per image shared by its severities.

    Raises
    ------
    ImageTooSmallError
        (a ValueError) If ``image`` has a side under :data:`MIN_SIDE_PX` px.
    """
    nominal.check_imagenet_c_size(image.shape[1], image.shape[0], f"image {int(image_id)}")
    return _conditions(image, depth_m, bbox, partner_image, seed, image_id, config, marker)


def _conditions(image, depth_m, bbox, partner_image, seed, image_id, config, marker):
    r = (config or {}).get("render", {})
    width = int(r.get("box_width_px", 8))
    color = tuple(r.get("box_color_rgb", (255, 0, 0)))
    grey = int(r.get("blank_grey", 128))
    size = (image.shape[1], image.shape[0])
    box = lambda im, b=bbox: draw_box(im, b, width, color)  # noqa: E731

    fog = physics.fog_sweep(image, depth_m, physics.SWEEP_M)
    uw = physics.underwater_sweep(image, depth_m, physics.SWEEP_M)
    for arm, level in cube.CONDITIONS:
        if arm == "clean":
            out = image
        elif arm == "fog":
            out = fog[level - 1]
        elif arm == "underwater":
            out = uw[level - 1]
        elif arm == "imagenet_c":
            out = nominal.imagenet_c_fog(image, level, seed=nominal.imagenet_c_seed(seed, image_id))
        elif arm == "blank":
            out = np.full_like(image, grey)
        elif arm == "shuffled":
            psize = (partner_image.shape[1], partner_image.shape[0])
            yield arm, level, (draw_box(partner_image, scale_bbox(bbox, size, psize), width, color)
                               if marker else partner_image)
            continue
        else:  # pragma: no cover - CONDITIONS is fixed
            raise ValueError(arm)
        yield arm, level, box(out) if marker else out


def load_presented(path: str | os.PathLike, max_side: int = 448, name: str | None = None,
                   expected_size: tuple[int, int] | None = None) -> tuple[np.ndarray, tuple[int, int]]:
    """Read an image and scale it to the size presented to the models.

    ``expected_size`` (the annotation's width and height, px) applies the
    orientation rule of :func:`load_image`; pass it wherever the item's box is drawn.

    Returns
    -------
    (uint8 (H, W, 3), (width, height))
        The resized image and its size (:func:`presented_size`).

    Raises
    ------
    FileNotFoundError, ValueError
        See :func:`load_image`; :class:`ImageTooSmallError` (a ValueError, naming
        ``name`` or the file) for a presented side under :data:`MIN_SIDE_PX`.
    """
    img = load_image(path, expected_size)
    size = presented_size(img.shape[1], img.shape[0], max_side, name=name or Path(path).name)
    return resize_image(img, size), size


def item_inputs(table, i: int, partner: int, image_dir: str | os.PathLike, depth_folder: str | os.PathLike,
                config: dict) -> dict:
    """What the readout and monitor stages need of item ``i``, at the presented size.

    Parameters
    ----------
    table : pandas.DataFrame
        The items (:func:`murk.items.read_items`).
    i, partner : int
        Row of the item and of its shuffled-control partner (:func:`murk.items.shuffled_partner`).
    image_dir, depth_folder : path
        The COCO image folder and the depth cache (:func:`murk.depth.current_depth`).
    config : dict
        Study configuration (``render``: ``max_side_px``, ``blank_grey``).

    Returns
    -------
    dict with ``image`` (uint8 (H, W, 3)), ``depth_m`` (float32 (H, W), metres),
    ``bbox`` (x, y, w, h in the presented image's pixels), ``partner_image`` and
    ``partner_depth_m`` (the shuffled control's item; a grey image with the
    item's depth when the partner's own image or depth is bad).

    Raises
    ------
    FileNotFoundError, ValueError
        The item's own image or depth map is missing or cannot be decoded, the
        image is over Pillow's pixel limit or disagrees with its annotation's size
        (:func:`load_image`; the caller records it as missing and goes on).
    """
    from murk import depth

    max_side = int(config["render"]["max_side_px"])
    row = table.iloc[i]
    img, size = load_presented(Path(image_dir) / row["file_name"], max_side,
                               name=f"image {int(row['image_id'])} ({row['file_name']})",
                               expected_size=(int(row["width"]), int(row["height"])))
    z = depth.load_depth(Path(depth_folder), int(row["image_id"]), shape=img.shape[:2])
    prow = table.iloc[int(partner)]
    try:
        pimg, _ = load_presented(Path(image_dir) / prow["file_name"], max_side,
                                 expected_size=(int(prow["width"]), int(prow["height"])))
        pz = depth.load_depth(Path(depth_folder), int(prow["image_id"]), shape=pimg.shape[:2])
    except (FileNotFoundError, ValueError):  # the shuffled control falls back to a grey image
        pimg, pz = np.full_like(img, int(config["render"].get("blank_grey", 128))), z
    return {"image": img, "depth_m": z, "partner_image": pimg, "partner_depth_m": pz,
            "bbox": scale_bbox(row["bbox"], (int(row["width"]), int(row["height"])), size)}
