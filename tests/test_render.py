"""Rendering of one item's conditions: sizes, box marker, controls."""

import numpy as np
import pytest
from PIL import Image

from murk import cube, render


def test_presented_size():
    assert render.presented_size(640, 480) == (448, 336)
    assert render.presented_size(480, 640) == (336, 448)
    assert render.presented_size(300, 200) == (300, 200)  # never upscaled


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


def test_draw_box_clipped_at_border():
    img = np.zeros((50, 50, 3), np.uint8)
    out = render.draw_box(img, (-10, -10, 80, 80))
    assert out.shape == img.shape and out.sum() == 0  # entirely outside the frame: nothing drawn
    out = render.draw_box(img, (40, 40, 30, 30))
    assert (out[32:40, 32:50] == [255, 0, 0]).all()


def test_load_image_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="MURK_COCO_DIR"):
        render.load_image(tmp_path / "nope.jpg")
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 truncated")
    with pytest.raises(ValueError, match="cannot be decoded"):
        render.load_image(bad)
    Image.new("L", (20, 10), 77).save(tmp_path / "grey.png")
    g = render.load_image(tmp_path / "grey.png")
    assert g.shape == (10, 20, 3) and g.dtype == np.uint8


def test_render_conditions_all_24():
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (60, 80, 3), dtype=np.uint8)
    partner = rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)
    z = np.full((60, 80), 10.0, np.float32)
    out = list(render.render_conditions(img, z, (20, 15, 30, 20), partner, image_id=3))
    assert [(a, lvl) for a, lvl, _ in out] == list(cube.CONDITIONS)
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
