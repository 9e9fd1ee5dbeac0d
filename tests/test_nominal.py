"""Tests of murk.nominal: the ImageNet-C fog control and its equivalent visibility."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from murk import nominal as nm
from murk import physics as ph

COCO_DIR = Path("/work/shared/coco-val2017-sample/val2017")


def _textured(height: int, width: int, seed: int = 0) -> np.ndarray:
    """A smooth, textured test image (gradients plus noise), uint8."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = 0.5 + 0.3 * np.sin(x / 9.0)[..., None] * np.cos(y / 7.0)[..., None] * [1.0, 0.8, 0.6]
    noise = rng.normal(0, 0.08, (height, width, 3))
    return np.clip((base + noise) * 255, 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def small():
    return _textured(64, 96)


@pytest.fixture(scope="module")
def coco():
    if not COCO_DIR.is_dir():
        pytest.skip(f"COCO sample folder {COCO_DIR} is absent")
    files = sorted(COCO_DIR.glob("*.jpg"))
    if not files:
        pytest.skip(f"no JPEG in {COCO_DIR}")
    from PIL import Image

    with Image.open(files[0]) as im:
        return np.asarray(im.convert("RGB"))


# ------------------------------------------------------------- imagenet_c_fog


def test_imagenet_c_fog_is_deterministic_and_restores_global_rng(small):
    np.random.seed(12345)
    expected_next = np.random.random_sample()
    np.random.seed(12345)
    a = nm.imagenet_c_fog(small, 3, seed=7)
    assert np.random.random_sample() == expected_next  # global state untouched
    b = nm.imagenet_c_fog(small, 3, seed=7)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, nm.imagenet_c_fog(small, 3, seed=8))
    # Sequences of ints, e.g. (study seed, image id), are valid seeds.
    item = nm.imagenet_c_fog(small, 2, (1, 139))
    np.testing.assert_array_equal(item, nm.imagenet_c_fog(small, 2, (1, 139)))
    assert not np.array_equal(item, nm.imagenet_c_fog(small, 2, (1, 140)))


def test_imagenet_c_fog_severity_matters(small):
    s1 = nm.imagenet_c_fog(small, 1, seed=0)
    s5 = nm.imagenet_c_fog(small, 5, seed=0)
    assert not np.array_equal(s1, s5)
    assert nm.contrast_gain(small, s5) < nm.contrast_gain(small, s1)


@pytest.mark.parametrize("shape", [(427, 640, 3), (480, 640, 3), (640, 427, 3), (33, 200, 3)])
def test_imagenet_c_fog_shape_and_dtype_non_square(shape):
    image = _textured(*shape[:2])
    out = nm.imagenet_c_fog(image, 5, seed=1)
    assert out.shape == shape and out.dtype == np.uint8
    assert out.flags.c_contiguous


def test_imagenet_c_fog_pad_fallback_is_exact(monkeypatch):
    """If the package ever returns a wrong shape, padding to a square gives the same result."""
    import imagecorruptions

    image = _textured(40, 70)
    reference = nm.imagenet_c_fog(image, 4, seed=3)
    real = imagecorruptions.corrupt
    calls = []

    def buggy(x, **kwargs):
        calls.append(x.shape)
        out = real(x, **kwargs)
        return out if x.shape[0] == x.shape[1] else out[:, : x.shape[0]]  # a shape bug

    monkeypatch.setattr(imagecorruptions, "corrupt", buggy)
    out = nm.imagenet_c_fog(image, 4, seed=3)
    assert calls == [(40, 70, 3), (70, 70, 3)]
    np.testing.assert_array_equal(out, reference)


def test_imagenet_c_fog_errors(small):
    for bad in (0, 6, 2.0, True, "3"):
        with pytest.raises(ValueError, match="severity"):
            nm.imagenet_c_fog(small, bad, seed=0)
    with pytest.raises(ValueError, match="uint8"):
        nm.imagenet_c_fog(small.astype(float), 1, seed=0)
    with pytest.raises(ValueError, match=r"\(H, W, 3\)"):
        nm.imagenet_c_fog(small[..., 0], 1, seed=0)
    with pytest.raises(ValueError, match="32"):
        nm.imagenet_c_fog(small[:20], 1, seed=0)
    for bad in (-1, 1.5, "x", True):
        with pytest.raises(ValueError, match="seed"):
            nm.imagenet_c_fog(small, 1, seed=bad)


# ------------------------------------------------------------------ statistics


def test_luma_values_ndim_nan():
    assert nm.luma(np.array([255, 255, 255], np.uint8)) == pytest.approx(1.0)
    np.testing.assert_allclose(nm.luma(np.eye(3)), [0.299, 0.587, 0.114])
    codes = np.arange(256, dtype=np.uint8)
    rgb = np.stack([codes] * 3, axis=-1)
    np.testing.assert_allclose(nm.luma(rgb), codes / 255.0)
    np.testing.assert_allclose(nm.luma(rgb), nm.luma(rgb / 255.0))
    assert nm.luma(np.zeros((2, 3, 4, 3))).shape == (2, 3, 4)
    out = nm.luma(np.array([[np.nan, 0, 0], [0.5, 0.5, 0.5]]))
    assert np.isnan(out[0]) and out[1] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="length 3"):
        nm.luma(np.zeros((4, 4)))
    with pytest.raises(ValueError, match="dtype"):
        nm.luma(np.zeros((4, 3), dtype=np.int32))


def test_contrast_gain_values(small):
    assert nm.contrast_gain(small, small) == pytest.approx(1.0)
    x = small / 255.0
    assert nm.contrast_gain(x, 0.5 * x + 0.25) == pytest.approx(0.5)
    # An additive pattern uncorrelated with the scene does not change the gain ...
    rng = np.random.default_rng(0)
    haze = rng.uniform(0, 0.2, small.shape[:2])[..., None]
    assert nm.contrast_gain(x, 0.6 * x + haze) == pytest.approx(0.6, abs=0.02)
    # ... while it raises the ratio of standard deviations.
    assert nm.luma_std_ratio(x, 0.6 * x + haze) > 0.6 + 0.02
    assert nm.luma_std_ratio(small, small) == pytest.approx(1.0)
    assert nm.luma_std_ratio(x, 0.5 * x + 0.25) == pytest.approx(0.5)


@pytest.mark.parametrize("statistic", [nm.contrast_gain, nm.luma_std_ratio])
def test_statistics_ndim_and_nan(small, statistic):
    x = small / 255.0
    stack = np.stack([x, 0.5 * x, 0.25 * x + 0.5])
    out = statistic(x, stack)
    assert out.shape == (3,)
    np.testing.assert_allclose(out, [1.0, 0.5, 0.25])
    assert isinstance(statistic(x, x), float)
    bad = x.copy()
    bad[0, 0, 0] = np.nan
    assert np.isnan(statistic(bad, x)) and np.isnan(statistic(x, bad))
    assert np.isnan(statistic(np.full_like(x, 0.3), x))  # constant clean image
    assert statistic(x, np.full_like(x, 0.7)) == 0.0  # uniform degraded image: exactly 0
    with pytest.raises(ValueError, match="same image size"):
        statistic(x, x[:-1])
    with pytest.raises(ValueError, match=r"\(\.\.\., H, W, 3\)"):
        statistic(x[..., 0], x[..., 0])


def test_contrast_gain_of_fog_decreases_over_the_sweep():
    """Over the spec's sweep the gain of physical fog falls from below 1 to about 0."""
    image = _textured(48, 48)
    depth = np.full(image.shape[:2], 13.8)
    gains = nm.contrast_gain(image, ph.fog_sweep(image, depth))
    assert 0.5 < gains[0] < 1.0
    assert np.all(np.diff(gains[:6]) < 0)
    # At V <= 7.8 m and z = 13.8 m (t < 1e-3) the 8-bit rendering is uniform: gain 0.
    np.testing.assert_array_equal(gains[5:], 0.0)


# ---------------------------------------------------------- equivalent visibility


def test_equivalent_visibility_recovers_fog_visibility(small):
    rng = np.random.default_rng(2)
    depth = rng.uniform(5.0, 25.0, small.shape[:2])
    levels = np.array([500.0, 250.0, 100.0, 40.0, 15.625])
    degraded = ph.fog_sweep(small, depth, levels)
    v_eq = nm.equivalent_visibility(small, depth, degraded)
    assert v_eq.shape == (5,)
    np.testing.assert_allclose(v_eq, levels, rtol=0.05)
    single = nm.equivalent_visibility(small, depth, degraded[3])
    assert isinstance(single, float) and single == pytest.approx(v_eq[3])
    # Stacks of any leading shape.
    stacked = degraded.reshape(5, 1, *small.shape)
    assert nm.equivalent_visibility(small, depth, stacked).shape == (5, 1)


def test_equivalent_visibility_scales_with_depth(small):
    depth = np.full(small.shape[:2], 10.0)
    degraded = ph.fog(small, depth, 40.0)
    v1 = nm.equivalent_visibility(small, depth, degraded)
    v2 = nm.equivalent_visibility(small, 2 * depth, degraded)
    assert v2 == pytest.approx(2 * v1, rel=0.02)


def test_equivalent_visibility_out_of_range_and_nan(small):
    depth = np.full(small.shape[:2], 13.8)
    assert np.isnan(nm.equivalent_visibility(small, depth, small))  # gain 1: clearer than 2000 m
    # A grid that does not reach the degradation.
    degraded = ph.fog(small, depth, 10.0)
    coarse = np.geomspace(50, 500, 8)
    assert np.isnan(nm.equivalent_visibility(small, depth, degraded, sweep_m=coarse))
    flat = np.full_like(small, 100)
    assert np.isnan(nm.equivalent_visibility(flat, depth, flat))
    out = nm.equivalent_visibility(small, depth, np.stack([small, degraded]))
    assert np.isnan(out[0]) and out[1] == pytest.approx(10.0, rel=0.05)


def test_equivalent_visibility_errors(small):
    depth = np.full(small.shape[:2], 13.8)
    with pytest.raises(ValueError, match="method"):
        nm.equivalent_visibility(small, depth, small, method="psnr")
    for grid in ([10.0], [[1.0, 2.0]], [0.0, 10.0], [1.0, np.inf]):
        with pytest.raises(ValueError, match="sweep_m"):
            nm.equivalent_visibility(small, depth, small, sweep_m=grid)
    with pytest.raises(ValueError, match="degraded"):
        nm.equivalent_visibility(small, depth, small[:-1])
    with pytest.raises(ValueError, match="shape"):
        nm.equivalent_visibility(small, depth[:-1], small)
    with pytest.raises(ValueError, match="uint8"):
        nm.equivalent_visibility(small / 255.0, depth, small)


def test_coco_nominal_severities(coco):
    """A real COCO image with the spec's median depth 13.8 m (spec Sec. III)."""
    depth = np.full(coco.shape[:2], 13.8)
    degraded = np.stack([nm.imagenet_c_fog(coco, s, seed=(1, 0)) for s in nm.IMAGENET_C_SEVERITIES])
    assert degraded.shape == (5,) + coco.shape and degraded.dtype == np.uint8
    gains = nm.contrast_gain(coco, degraded)
    assert np.all(gains < 1.0) and gains[0] > gains[-1]
    assert np.sum(np.diff(gains) < 0) >= 3  # decreasing with severity, up to noise
    v_eq = nm.equivalent_visibility(coco, depth, degraded)
    assert np.all(np.isfinite(v_eq))
    assert v_eq[0] > v_eq[-1] and np.sum(np.diff(v_eq) < 0) >= 3
    # Nominal fog sits far above the failure band of the spec (V_acc of 12-16 m).
    assert np.all((v_eq > 20.0) & (v_eq < 2000.0))
    # The check statistic runs too (the spec reports it to be non-monotone).
    assert np.all(np.isfinite(nm.equivalent_visibility(coco, depth, degraded, method="std_ratio")))
