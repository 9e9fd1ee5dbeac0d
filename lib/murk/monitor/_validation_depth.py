"""Depth maps of known shape for validating the monitor (``tests/test_monitor.py``, ``benchmarks/monitor.py``):
a level ground plane, and the annotated boxes stood on it as billboards.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ground_plane_depth", "billboard_depth"]


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

