"""Rendering of one item's conditions: sizes, box marker, controls."""

import numpy as np
import pytest
from PIL import Image

from murk import scene
from murk.scene import _render as render


def test_presented_size():
    assert scene.presented_size(640, 480) == (448, 336)
    assert scene.presented_size(480, 640) == (336, 448)
    assert scene.presented_size(300, 200) == (300, 200)  # never upscaled


def test_draw_box_width_and_colour():
    img = np.zeros((100, 120, 3), np.uint8)
    out = render.draw_box(img, (30, 20, 40, 50), width_px=8)
    assert img.sum() == 0  # input untouched
    red = (out == [255, 0, 0]).all(-1)
    # left edge: 8 px wide just outside the box, along its height
    assert red[20:70, 22:30].all() and not red[20:70, 30:70].any()
    assert red[12:20, 22:78].all()          # top band
    assert red[70:78, 22:78].all()          # bottom band
    assert red.sum() == (56 * 66 - 40 * 50)


def _red(img):
    return (img == [255, 0, 0]).all(-1)


@pytest.mark.parametrize("bbox", [(0, 0, 20, 20), (30, 30, 20, 20), (40, 40, 30, 30), (-5, 10, 20, 20),
                                  (0, 0, 50, 50), (-10, -10, 80, 80), (45.5, 0.3, 4.5, 49.7)])
def test_draw_box_kept_fully_inside_at_the_border(bbox):
    """Every band keeps all 8 px inside the image, however the box meets the border."""
    img = np.zeros((50, 50, 3), np.uint8)
    red = _red(render.draw_box(img, bbox, width_px=8))
    rows, cols = np.flatnonzero(red.any(1)), np.flatnonzero(red.any(0))
    top, bottom, left, right = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
    # the outline is a closed frame of 8-px bands around [left, right) x [top, bottom)
    assert red[top:top + 8, left:right].all() and red[bottom - 8:bottom, left:right].all()
    assert red[top:bottom, left:left + 8].all() and red[top:bottom, right - 8:right].all()
    assert red.sum() == (right - left) * (bottom - top) - max(0, right - left - 16) * max(0, bottom - top - 16)


def test_draw_box_border_rule_exact():
    img = np.zeros((50, 50, 3), np.uint8)
    # box touching the left border: the left band moves onto the box's first 8 columns
    red = _red(render.draw_box(img, (0, 20, 20, 10)))
    assert red[12:38, 0:8].all() and not red[20:30, 8:20].any() and red[12:38, 20:28].all()
    # box crossing the bottom-right corner: bands at the image border, inside the box
    red = _red(render.draw_box(img, (40, 40, 30, 30)))
    assert red[32:40, 32:50].all() and red[42:50, 32:50].all() and red[32:50, 42:50].all()
    assert not red[40:42, 40:42].any() and not red[:32].any() and not red[:, :32].any()
    # the whole image boxed: an 8-px frame along the border
    red = _red(render.draw_box(img, (-10, -10, 80, 80)))
    assert red[:8].all() and red[-8:].all() and red[:, :8].all() and red[:, -8:].all()
    assert not red[8:42, 8:42].any()


def test_draw_box_errors():
    img = np.zeros((50, 50, 3), np.uint8)
    with pytest.raises(ValueError, match="does not overlap"):
        render.draw_box(img, (60, 10, 10, 10))
    with pytest.raises(ValueError, match="width_px"):
        render.draw_box(img, (10, 10, 10, 10), width_px=0)


def test_load_image_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="MURK_COCO_DIR"):
        scene.load_image(tmp_path / "nope.jpg")
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 truncated")
    with pytest.raises(ValueError, match="cannot be decoded"):
        scene.load_image(bad)
    Image.new("L", (20, 10), 77).save(tmp_path / "grey.png")
    g = scene.load_image(tmp_path / "grey.png")
    assert g.shape == (10, 20, 3) and g.dtype == np.uint8


def test_render_conditions_all_24():
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (60, 80, 3), dtype=np.uint8)
    partner = rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)
    z = np.full((60, 80), 10.0, np.float32)
    out = list(render.render_conditions(img, z, (20, 15, 30, 20), partner, image_id=3))
    assert [(a, lvl) for a, lvl, _ in out] == list(scene.CONDITIONS)
    shown = {(a, lvl): im for a, lvl, im in out}
    for (arm, _), im in shown.items():
        assert im.dtype == np.uint8
        assert im.shape == (partner.shape if arm == "shuffled" else img.shape)
        assert (im == [255, 0, 0]).all(-1).sum() > 0, arm  # the box is drawn on every condition
    # fog gets brighter and flatter as V falls; the blank is uniform grey outside the box
    corner = (slice(0, 6), slice(0, 10))  # away from the box
    assert shown[("fog", 8)][corner].std() < shown[("fog", 1)][corner].std() < img[corner].std()
    blank = shown[("blank", 0)]
    assert (blank[:5, :5] == 128).all()
    # deterministic ImageNet-C noise
    again = dict(((a, lvl), im) for a, lvl, im in render.render_conditions(img, z, (20, 15, 30, 20), partner, image_id=3))
    np.testing.assert_array_equal(again[("imagenet_c", 3)], shown[("imagenet_c", 3)])


def test_controls_blank_and_shuffled():
    """Blank: uniform grey of the same size, box kept; shuffled: partner's clean pixels, box scaled to it."""
    rng = np.random.default_rng(1)
    img = rng.integers(0, 256, (60, 80, 3), dtype=np.uint8)
    partner = rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)
    z = np.full((60, 80), 10.0, np.float32)
    bbox = (0, 15, 30, 20)  # touches the left border
    cfg = {"render": {"box_width_px": 8, "box_color_rgb": [255, 0, 0], "blank_grey": 128}}
    shown = {(a, lvl): im for a, lvl, im in render.render_conditions(img, z, bbox, partner, image_id=3, config=cfg)}
    blank = shown[("blank", 0)]
    np.testing.assert_array_equal(blank, render.draw_box(np.full_like(img, 128), bbox))
    assert _red(blank)[7:43, :8].all()  # the box is kept on the blank, fully visible at the border
    np.testing.assert_array_equal(shown[("shuffled", 0)],
                                  render.draw_box(partner, render.scale_bbox(bbox, (80, 60), (50, 40))))
    np.testing.assert_array_equal(shown[("clean", 0)], render.draw_box(img, bbox))


# ----------------------------------------------------------------------------- issue 13: bit depth, small images


def _png16_rgb(path, rgb16: np.ndarray) -> None:
    """Write a 16-bit RGB PNG by hand (Pillow cannot write one)."""
    import struct
    import zlib

    h, w, _ = rgb16.shape
    be = rgb16.astype(">u2")
    raw = b"".join(b"\x00" + be[y].tobytes() for y in range(h))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def test_16_bit_png_is_scaled_not_saturated(tmp_path):
    """Issue 13: a 16-bit PNG saturated silently (99.6 % of the pixels at 255 through convert("RGB"))."""
    ramp = np.linspace(0, 65535, 48 * 64).reshape(48, 64).astype(np.uint16)
    Image.fromarray(ramp).save(tmp_path / "grey16.png")
    with Image.open(tmp_path / "grey16.png") as im:
        assert im.mode.startswith("I")  # Pillow's 16-bit greyscale mode
        assert (np.asarray(im.convert("RGB")) == 255).mean() > 0.99  # what the old conversion did
    g = scene.load_image(tmp_path / "grey16.png")
    assert g.shape == (48, 64, 3) and g.dtype == np.uint8
    np.testing.assert_array_equal(g[..., 0], np.round(ramp / 257.0).astype(np.uint8))
    assert (g == 255).mean() < 0.01 and (g[..., 0] == g[..., 2]).all()
    # 16-bit RGB: Pillow reduces it to 8 bits per channel itself (the high byte)
    rgb = np.stack([ramp, ramp[::-1], np.full_like(ramp, 30000)], -1)
    _png16_rgb(tmp_path / "rgb16.png", rgb)
    c = scene.load_image(tmp_path / "rgb16.png")
    assert c.dtype == np.uint8 and np.abs(c.astype(int) - rgb // 257).max() <= 1
    # 32-bit integer and float images: scaled where the scale is defined, refused otherwise
    assert scene.to_rgb8(Image.fromarray(np.full((4, 4), 65535, np.int32)))[0, 0, 0] == 255
    assert scene.to_rgb8(Image.fromarray(np.full((4, 4), 0.5, np.float32)))[0, 0, 0] == 128
    with pytest.raises(ValueError, match="outside 0-65535"):
        scene.to_rgb8(Image.fromarray(np.full((4, 4), 70000, np.int32)), "image x.tif")
    with pytest.raises(ValueError, match=r"outside \[0, 1\]"):
        scene.to_rgb8(Image.fromarray(np.full((4, 4), 3.0, np.float32)))


def test_too_small_presented_image_raises_early_and_specifically():
    with pytest.raises(scene.ImageTooSmallError, match="image 7 .* 448 x 14 px"):
        scene.presented_size(640, 20, name="image 7 (000000000007.jpg)")
    assert issubclass(scene.ImageTooSmallError, ValueError)
    assert scene.presented_size(640, 20, min_side=None) == (448, 14)
    img = np.zeros((20, 200, 3), np.uint8)
    z = np.full((20, 200), 10.0, np.float32)
    # raised when called, before any condition is rendered (not in the middle of the iteration)
    with pytest.raises(scene.ImageTooSmallError, match="image 5 is 200 x 20 px"):
        render.render_conditions(img, z, (10, 2, 30, 10), img, image_id=5)

