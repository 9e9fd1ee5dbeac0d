"""Tests of murk.scene: Eq. (1) of the spec, fog (Koschmieder) and underwater (Pope-Fry)."""

from __future__ import annotations

import numpy as np
import pytest

from murk.scene import _physics as ph

KAPPAS = (0.1, 0.37, 0.5, 2.0, 3.0, 7.3, 1000.0)


@pytest.fixture(scope="module")
def scene():
    """A random 8-bit image with a random depth map (odd size, all code values)."""
    rng = np.random.default_rng(20240611)
    image = rng.integers(0, 256, size=(37, 53, 3), dtype=np.uint8)
    depth = rng.uniform(0.5, 80.0, size=(37, 53))
    return image, depth


# ------------------------------------------------------------------ constants


def test_constants_match_spec():
    assert ph.KOSCHMIEDER_CONSTANT == 3.912
    assert ph.KOSCHMIEDER_CONSTANT == pytest.approx(-np.log(0.02), abs=5e-4)
    assert ph.FOG_AIRLIGHT == 0.8
    assert ph.SWEEP_M.dtype == np.float64
    np.testing.assert_array_equal(
        ph.SWEEP_M, [250, 125, 62.5, 31.25, 15.625, 7.8125, 3.90625, 1.953125]
    )
    np.testing.assert_array_equal(ph.SWEEP_M[:-1] / ph.SWEEP_M[1:], 2.0)
    assert ph.UNDERWATER_WAVELENGTHS_NM == (620, 540, 460)
    np.testing.assert_array_equal(ph.POPE_FRY_ABSORPTION_PER_M, [0.2755, 0.0474, 0.00979])


def test_physics_constants_have_one_home():
    """The constants live in murk.physics with their sources; the frozen configuration does not repeat them
    (the paper's settings table prints them from here: murk.paper.settings_rows, tests/test_config.py)."""
    from murk.core import load_config

    assert "physics" not in load_config()


# ----------------------------------------------------------------------- sRGB


def test_srgb_to_linear_values():
    # IEC 61966-2-1 reference points.
    assert ph.srgb_to_linear(np.uint8(0)) == 0.0
    assert ph.srgb_to_linear(np.uint8(255)) == 1.0
    assert float(ph.srgb_to_linear(np.uint8(128))) == pytest.approx(0.2158605, abs=1e-7)
    assert float(ph.srgb_to_linear(0.5)) == pytest.approx(0.2140411, abs=1e-7)
    assert float(ph.srgb_to_linear(0.04045)) == pytest.approx(0.04045 / 12.92)
    # Continuous at the threshold.
    below, above = ph.srgb_to_linear(np.array([0.04045, np.nextafter(0.04045, 1)]))
    assert above == pytest.approx(below, rel=1e-6)


def test_srgb_to_linear_uint8_equals_float_path():
    codes = np.arange(256, dtype=np.uint8)
    np.testing.assert_allclose(
        ph.srgb_to_linear(codes), ph.srgb_to_linear(codes / 255.0), rtol=0, atol=1e-15
    )


def test_srgb_to_linear_ndim_dtype_and_nan():
    x = np.linspace(0, 1, 2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    y = ph.srgb_to_linear(x)
    assert y.shape == x.shape and y.dtype == np.float64
    assert np.all(np.diff(y.ravel()) > 0)
    y32 = ph.srgb_to_linear(x.astype(np.float32))
    assert y32.dtype == np.float32
    np.testing.assert_allclose(y32, y, rtol=1e-6, atol=1e-7)
    assert ph.srgb_to_linear(np.zeros((7, 13, 3), np.uint8)).shape == (7, 13, 3)
    out = ph.srgb_to_linear(np.array([0.2, np.nan, 0.01]))
    assert np.isnan(out[1]) and np.all(np.isfinite(out[[0, 2]]))


def test_srgb_to_linear_rejects_ambiguous_integers():
    with pytest.raises(ValueError, match="uint8"):
        ph.srgb_to_linear(np.array([0, 128, 255], dtype=np.int64))
    with pytest.raises(ValueError, match="uint8"):
        ph.srgb_to_linear(np.array([True]))


def test_linear_to_srgb_values_and_round_trip():
    assert float(ph.linear_to_srgb(0.0)) == 0.0
    assert float(ph.linear_to_srgb(1.0)) == pytest.approx(1.0)
    assert float(ph.linear_to_srgb(0.2158605)) * 255 == pytest.approx(128.0, abs=1e-4)
    assert float(ph.linear_to_srgb(0.002)) == pytest.approx(0.002 * 12.92)
    # Clipped to [0, 1] first.
    np.testing.assert_allclose(ph.linear_to_srgb(np.array([-0.5, 1.5])), [0.0, 1.0], atol=1e-15)
    # Decode -> encode reproduces every 8-bit code value.
    codes = np.arange(256, dtype=np.uint8)
    back = np.rint(ph.linear_to_srgb(ph.srgb_to_linear(codes)) * 255).astype(np.uint8)
    np.testing.assert_array_equal(back, codes)


def test_linear_to_srgb_ndim_dtype_and_nan():
    x = np.linspace(0, 1, 60).reshape(3, 4, 5)
    y = ph.linear_to_srgb(x)
    assert y.shape == (3, 4, 5) and y.dtype == np.float64
    assert ph.linear_to_srgb(x.astype(np.float32)).dtype == np.float32
    out = ph.linear_to_srgb(np.array([[0.2, np.nan]]))
    assert out.shape == (1, 2) and np.isnan(out[0, 1]) and np.isfinite(out[0, 0])
    with pytest.raises(ValueError, match="float"):
        ph.linear_to_srgb(np.array([0, 1]))


# ------------------------------------------------------------- coefficients


def test_transmission_values():
    assert float(ph.transmission(0.0, 0.7)) == 1.0  # t(z = 0) = 1
    assert float(ph.transmission(2.0, 0.5)) == pytest.approx(np.exp(-1.0))
    assert float(ph.transmission(np.inf, 0.5)) == 0.0
    # Koschmieder: at z = V the transmission is the 2 % contrast threshold.
    for v in (1.0, 13.8, 250.0):
        assert float(ph.transmission(v, ph._fog_beta(v))) == pytest.approx(0.02, abs=1e-3)


def test_transmission_ndim_and_channels():
    depth = np.linspace(0, 10, 24).reshape(2, 3, 4)
    grey = ph.transmission(depth, 0.1)
    assert grey.shape == (2, 3, 4)
    np.testing.assert_allclose(grey, np.exp(-0.1 * depth))
    beta = ph._underwater_beta(20.0)
    colour = ph.transmission(depth, beta)
    assert colour.shape == (2, 3, 4, 3)
    for c in range(3):
        np.testing.assert_allclose(colour[..., c], np.exp(-beta[c] * depth))
    # Per-channel betas for several visibilities: (L, 3) against depth (L, 1) ...
    betas = ph._underwater_beta(np.array([10.0, 20.0]))
    assert ph.transmission(np.ones((2, 1)), betas[:, np.newaxis, :]).shape == (2, 1, 3)
    # ... and a grey per-pixel map whose last axis happens to be 3.
    grey_map = np.full((4, 3), 0.2)
    assert ph.transmission(np.ones((4, 3)), grey_map, per_channel=False).shape == (4, 3)
    with pytest.raises(ValueError, match="length 3"):
        ph.transmission(np.ones(4), np.ones(4), per_channel=True)


def test_transmission_nan():
    t = ph.transmission(np.array([1.0, np.nan]), 0.5)
    assert np.isfinite(t[0]) and np.isnan(t[1])
    assert np.isnan(ph.transmission(1.0, np.nan))


def test_fog_beta():
    assert float(ph._fog_beta(3.912)) == pytest.approx(1.0)
    np.testing.assert_allclose(ph._fog_beta(ph.SWEEP_M), 3.912 / ph.SWEEP_M)
    assert ph._fog_beta(np.ones((2, 3))).shape == (2, 3)
    assert float(ph._fog_beta(np.inf)) == 0.0
    assert np.isnan(ph._fog_beta(np.array([np.nan, 1.0]))[0])
    for bad in (0.0, -1.0, [1.0, -2.0]):
        with pytest.raises(ValueError, match="positive"):
            ph._fog_beta(bad)


def test_underwater_beta():
    for v in (1.953125, 13.8, 250.0):
        beta = ph._underwater_beta(v)
        assert beta.shape == (3,)
        assert 3.912 / beta.min() == pytest.approx(v)  # V_best
        assert beta.argmin() == 2  # blue is the least attenuated channel
        np.testing.assert_allclose(beta / beta[2], ph.POPE_FRY_ABSORPTION_PER_M / 0.00979)
    assert ph._underwater_beta(np.ones((4, 5))).shape == (4, 5, 3)
    out = ph._underwater_beta(np.array([np.nan, 10.0]))
    assert np.all(np.isnan(out[0])) and np.all(np.isfinite(out[1]))
    np.testing.assert_array_equal(ph._underwater_beta(np.inf), 0.0)
    with pytest.raises(ValueError, match="positive"):
        ph._underwater_beta(0.0)


def test_underwater_veiling_light():
    b = ph.underwater_veiling_light()
    assert b.shape == (3,)
    np.testing.assert_allclose(b, [0.0284, 0.165, 0.8], atol=5e-4)
    # Independent of the common scale s (hence of the visibility).
    for v in (1.0, 13.8, 250.0):
        inverse = 1.0 / ph._underwater_beta(v)
        np.testing.assert_allclose(0.8 * inverse / inverse.max(), b)


# ------------------------------------------------------------------- renderers


def test_linear_light_blending_gives_205_not_191():
    patch = np.full((4, 5, 3), 128, np.uint8)
    depth = np.full((4, 5), np.log(2.0) * 10.0 / 3.912)  # beta z = ln 2 at V = 10 m: t = 0.5
    out = ph.fog(patch, depth, 10.0, airlight=1.0)
    np.testing.assert_array_equal(out, 205)
    gamma_blend = 0.5 * 128 + 0.5 * 255  # what blending sRGB values would give
    assert abs(int(out[0, 0, 0]) - gamma_blend) > 10


@pytest.mark.parametrize("render", [ph.fog, ph.underwater])
def test_output_dtype_and_shape_odd_size(render):
    rng = np.random.default_rng(1)
    image = rng.integers(0, 256, (7, 13, 3), dtype=np.uint8)
    out = render(image, rng.uniform(0, 30, (7, 13)), 15.625)
    assert out.dtype == np.uint8 and out.shape == (7, 13, 3)


def test_zero_depth_and_infinite_visibility_leave_image(scene):
    image, depth = scene
    for render in (ph.fog, ph.underwater):
        np.testing.assert_array_equal(render(image, np.zeros(depth.shape), 1.953125), image)
        out = render(image, depth, np.inf)
        np.testing.assert_array_equal(out, image)
        assert not np.shares_memory(out, image)


def test_fog_tends_to_airlight_far_away(scene):
    image, depth = scene
    airlight_code = np.rint(ph.linear_to_srgb(0.8) * 255)
    assert airlight_code == 231
    for far in (1e4, np.inf, np.nan):  # NaN depth is treated as infinitely far
        out = ph.fog(image, np.full(depth.shape, far), 10.0)
        np.testing.assert_array_equal(out, airlight_code)
    # The approach is monotone: mean distance to A shrinks with depth.
    distances = [
        np.abs(ph.fog(image, np.full(depth.shape, z), 10.0).astype(float) - 231).mean()
        for z in (0.0, 1.0, 3.0, 6.0, 10.0)
    ]
    assert np.all(np.diff(distances) < 0)


def test_underwater_tends_to_veiling_light_far_away(scene):
    image, depth = scene
    veil_code = np.rint(ph.linear_to_srgb(ph.underwater_veiling_light()) * 255)
    for far in (1e5, np.inf, np.nan):
        out = ph.underwater(image, np.full(depth.shape, far), 10.0)
        np.testing.assert_array_equal(out, np.broadcast_to(veil_code, out.shape))


def test_nan_depth_pixels_only_are_veiled(scene):
    image, depth = scene
    depth = depth.copy()
    depth[3, 4] = np.nan
    out = ph.fog(image, depth, 31.25)
    np.testing.assert_array_equal(out[3, 4], 231)
    depth_ok = depth.copy()
    depth_ok[3, 4] = 1.0
    mask = np.ones(depth.shape, bool)
    mask[3, 4] = False
    np.testing.assert_array_equal(out[mask], ph.fog(image, depth_ok, 31.25)[mask])


def test_black_target_at_visibility_has_two_percent_contrast():
    black = np.zeros((3, 3, 3), np.uint8)
    for v in (1.953125, 13.8, 250.0):
        out = ph.fog(black, np.full((3, 3), v), v)
        linear = ph.srgb_to_linear(out)
        contrast = (ph.FOG_AIRLIGHT - linear) / ph.FOG_AIRLIGHT
        np.testing.assert_allclose(contrast, 0.02, atol=1e-3)
        # Underwater: the best (blue) channel at z = V_best.
        out = ph.underwater(black, np.full((3, 3), v), v)
        b = ph.underwater_veiling_light()
        contrast = (b - ph.srgb_to_linear(out)) / b
        np.testing.assert_allclose(contrast[..., 2], 0.02, atol=1e-3)
        assert np.all(contrast[..., :2] < 0.02)  # red and green are attenuated more


@pytest.mark.parametrize("render", [ph.fog, ph.underwater])
def test_depth_scale_invariance(scene, render):
    image, depth = scene
    for v in (250.0, 31.25, 3.90625):
        reference = render(image, depth, v)
        for kappa in KAPPAS:
            np.testing.assert_array_equal(render(image, kappa * depth, kappa * v), reference)


def test_fog_decreases_contrast_with_visibility(scene):
    image, depth = scene
    stds = [ph.fog(image, depth, v).astype(float).std() for v in (np.inf, *ph.SWEEP_M)]
    assert np.all(np.diff(stds) < 0)


def test_underwater_is_blue_dominated(scene):
    image, depth = scene
    out = ph.underwater(image, depth, 7.8125).reshape(-1, 3).astype(float).mean(axis=0)
    assert out[2] > out[1] > out[0]


@pytest.mark.parametrize(
    "sweep, single", [(ph.fog_sweep, ph.fog), (ph.underwater_sweep, ph.underwater)]
)
def test_sweep_equals_single_calls(scene, sweep, single):
    image, depth = scene
    depth = depth.copy()
    depth[0, 0] = np.nan
    before = image.copy()
    levels = [np.inf, *ph.SWEEP_M, 1000.0, 0.3]
    out = sweep(image, depth, levels)
    assert out.shape == (len(levels),) + image.shape and out.dtype == np.uint8
    for i, v in enumerate(levels):
        np.testing.assert_array_equal(out[i], single(image, depth, v))
    np.testing.assert_array_equal(image, before)  # input untouched
    # Default: the spec's sweep.
    np.testing.assert_array_equal(sweep(image, depth), out[1:9])


def test_fog_sweep_airlight_passed_through(scene):
    image, depth = scene
    out = ph.fog_sweep(image, depth, [10.0], airlight=0.5)
    np.testing.assert_array_equal(out[0], ph.fog(image, depth, 10.0, airlight=0.5))


# ---------------------------------------------------------------------- errors


@pytest.mark.parametrize("render", [ph.fog, ph.underwater])
def test_renderer_errors(render, scene):
    image, depth = scene
    with pytest.raises(ValueError, match="uint8"):
        render(image.astype(np.float64) / 255, depth, 10.0)
    with pytest.raises(ValueError, match=r"\(H, W, 3\)"):
        render(image[..., 0], depth, 10.0)
    with pytest.raises(ValueError, match=r"\(H, W, 3\)"):
        render(np.zeros((37, 53, 4), np.uint8), depth, 10.0)
    with pytest.raises(ValueError, match="shape"):
        render(image, depth.T, 10.0)
    bad = depth.copy()
    bad[1, 1] = -0.1
    with pytest.raises(ValueError, match="non-negative"):
        render(image, bad, 10.0)
    for v in (0.0, -5.0, np.nan):
        with pytest.raises(ValueError, match="positive"):
            render(image, depth, v)
    with pytest.raises(ValueError, match="scalar"):
        render(image, depth, np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="real number"):
        render(image, depth, "10")


@pytest.mark.parametrize("sweep", [ph.fog_sweep, ph.underwater_sweep])
def test_sweep_errors(sweep, scene):
    image, depth = scene
    with pytest.raises(ValueError, match="1-D"):
        sweep(image, depth, [])
    with pytest.raises(ValueError, match="1-D"):
        sweep(image, depth, [[1.0, 2.0]])
    with pytest.raises(ValueError, match="positive"):
        sweep(image, depth, [10.0, 0.0])
    with pytest.raises(ValueError, match="shape"):
        sweep(image, depth[:-1], [10.0])


def test_fog_airlight_error(scene):
    image, depth = scene
    for bad in (1.5, -0.1, np.nan, [0.5, 0.5]):
        with pytest.raises(ValueError, match="airlight"):
            ph.fog(image, depth, 10.0, airlight=bad)


# ------------------------------------------------- fast kernel vs float64 reference


def test_table_encoder_is_exact_around_every_threshold():
    thresholds = ph._ENCODE_THRESHOLDS.view(np.uint32).astype(np.int64)
    offsets = np.arange(-300, 301)
    bits = (thresholds[:, None] + offsets).ravel()
    bin_edges = (np.arange(0x3F81, dtype=np.int64) << 16)[:, None] + np.array([-1, 0, 1])
    bits = np.concatenate([bits, bin_edges.ravel()])
    bits = bits[(bits >= 0) & (bits <= 0x3F800000)].astype(np.uint32)
    rng = np.random.default_rng(3)
    x = np.concatenate([bits.view(np.float32), rng.random(200_000, dtype=np.float32),
                        np.float32([0.0, 1.0])])
    np.testing.assert_array_equal(ph._encode_uint8_lut(x), ph._encode_uint8(x.astype(np.float64)))
    # The code of each threshold is its index + 1, of the float below it the index.
    k = np.arange(1, 256)
    np.testing.assert_array_equal(ph._encode_uint8_lut(ph._ENCODE_THRESHOLDS), k)
    below = np.nextafter(ph._ENCODE_THRESHOLDS, np.float32(0))
    np.testing.assert_array_equal(ph._encode_uint8_lut(below), k - 1)


@pytest.mark.parametrize("arm", ["fog", "underwater"])
def test_kernel_matches_float64_reference_within_one_level(arm):
    """float32 blending changes a code only at rounding ties: |delta| <= 1, rarely."""
    rng = np.random.default_rng(5)
    image = rng.integers(0, 256, (160, 170, 3), dtype=np.uint8)
    depth = rng.uniform(0.5, 80.0, image.shape[:2])
    depth[0, :3] = (0.0, np.inf, np.nan)
    levels = np.array([np.inf, *ph.SWEEP_M, 4000.0])
    if arm == "fog":
        fast = ph.fog_sweep(image, depth, levels)
        ref = ph._render_reference(image, depth, levels, None, np.full(3, ph.FOG_AIRLIGHT))
    else:
        fast = ph.underwater_sweep(image, depth, levels)
        ref = ph._render_reference(image, depth, levels, ph._UNDERWATER_RELATIVE_BETA,
                                   ph.underwater_veiling_light())
    diff = np.abs(fast.astype(np.int16) - ref)
    assert diff.max() <= 1
    assert np.count_nonzero(diff) <= 1e-5 * diff.size


def test_blocks_do_not_change_the_result(scene, monkeypatch):
    image, depth = scene
    whole = ph.underwater_sweep(image, depth)
    monkeypatch.setattr(ph, "_RENDER_BLOCK_PX", 100)  # 37 x 53 px: 20 blocks, a short last one
    np.testing.assert_array_equal(ph.underwater_sweep(image, depth), whole)
    np.testing.assert_array_equal(ph.fog_sweep(image, depth), ph.fog_sweep(image, depth))


def test_unrounded_fog_sweep(scene):
    image, depth = scene
    levels = [np.inf, 250.0, 15.625]
    smooth = ph.fog_sweep(image, depth, levels, rounded=False)
    assert smooth.dtype == np.float32 and smooth.shape == (3,) + image.shape
    np.testing.assert_allclose(smooth[0], image / 255.0, atol=1e-7)
    # Rounding the unrounded rendering gives the 8-bit one (up to float32 ties).
    codes = np.rint(smooth.astype(np.float64) * 255)
    assert np.abs(codes - ph.fog_sweep(image, depth, levels)).max() <= 1
