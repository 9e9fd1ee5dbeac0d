"""One condition of one item: presented size, degradation, controls, box marker.

The order is fixed by the spec (Sec. III): the image is degraded first (Eq. 1 in
linear RGB, or the ImageNet-C fog), then the 8-px red box is drawn, so the
target's position stays visible at every level.

Reading and resizing image files is :mod:`murk.scene` (its names are re-exported
here: ``murk.scene.load_image``, ``presented_size``, ...); the ImageNet-C fog is
:mod:`murk.scene`'s.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from murk.scene import _nominal as nominal
from murk.scene import _physics as physics
from murk.scene._nominal import IMAGENET_C_SEVERITIES
from murk.scene._images import (EXIF_ORIENTATION_TAG, MIN_SIDE_PX, TRANSPOSING_ORIENTATIONS, ImageTooSmallError,
                                TransposedImageWarning, inspect_image, load_image, presented_size, resize_image,
                                resize_depth, to_rgb8)

__all__ = ["ImageTooSmallError", "MIN_SIDE_PX", "EXIF_ORIENTATION_TAG", "TRANSPOSING_ORIENTATIONS",
           "TransposedImageWarning", "inspect_image", "load_image", "to_rgb8", "presented_size", "resize_image",
           "resize_depth", "scale_bbox", "draw_box", "render_conditions", "load_presented", "item_inputs",
           "N_LEVELS", "CONDITIONS"]


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
                         f"scale it to the presented image first (murk.scene.scale_bbox)")
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
        One per :data:`CONDITIONS`, with ``arm == "clean"`` for the clean
        image. The ImageNet-C fog uses the seed :func:`murk.scene.imagenet_c_seed`
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
    for arm, level in CONDITIONS:
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
        The items (:func:`murk.protocol.read_items`).
    i, partner : int
        Row of the item and of its shuffled-control partner (:func:`murk.protocol.shuffled_partner`).
    image_dir, depth_folder : path
        The COCO image folder and the depth cache (:func:`murk.scene.current_depth`).
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
    from murk.scene import _depth as depth

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


#: the levels of a physical arm: 0 (clean) and one per sweep visibility (spec Sec. III)
N_LEVELS = 1 + len(physics.SWEEP_M)


def _condition_list() -> tuple[tuple[str, int], ...]:
    conds = [("clean", 0)]
    conds += [("fog", k) for k in range(1, N_LEVELS)]
    conds += [("underwater", k) for k in range(1, N_LEVELS)]
    conds += [("imagenet_c", s) for s in IMAGENET_C_SEVERITIES]
    conds += [("blank", 0), ("shuffled", 0)]
    return tuple(conds)


#: the 24 conditions read out per image (spec Sec. III: "24 conditions per model");
#: ``("clean", 0)`` is written into level 0 of every non-control arm.
CONDITIONS = _condition_list()
