"""Depth backends: the named approximation, Depth Anything V2 loading (tiny checkpoint), the cache."""

import numpy as np
import pytest

from murk.core import _identity as identity
from murk.offline import _checkpoints as checkpoints
from murk.scene import _depth as depth


@pytest.fixture(scope="module")
def tiny_da(tmp_path_factory):
    return checkpoints.build_tiny_depth_checkpoint(tmp_path_factory.mktemp("da") / "tiny-da", seed=0)


def test_constant_backend_is_named_approximate():
    b = depth.get_backend("constant")
    assert b.approximate and b.name == "constant-13.8m"
    z = b(np.zeros((7, 9, 3), np.uint8))
    assert z.shape == (7, 9) and z.dtype == np.float32 and np.all(z == 13.8)
    assert b.describe()["depth_approximate"] == 1


def test_auto_follows_offline(monkeypatch):
    monkeypatch.setenv("MURK_OFFLINE", "1")
    assert depth.get_backend("auto").approximate


def test_unknown_backend():
    with pytest.raises(ValueError, match="unknown depth backend"):
        depth.get_backend("midas")


def test_depth_anything_metric_from_local_folder(tiny_da, monkeypatch):
    monkeypatch.setenv("MURK_OFFLINE", "1")
    b = depth.get_backend("depth-anything-v2", str(tiny_da))
    assert not b.approximate and b.name == "depth-anything-v2:tiny-da"
    assert b.revision == identity.checkpoint_revision(tiny_da, None) and b.revision.startswith("sha256:")
    img = np.random.default_rng(0).integers(0, 256, (90, 130, 3), dtype=np.uint8)
    z = b(img)
    # metres at the image's own size (predicted_depth post-processed, not the 8-bit picture);
    # random weights give sigmoid(0) * max_depth = 40 m everywhere
    assert z.shape == (90, 130) and z.dtype == np.float32
    np.testing.assert_allclose(z, 40.0, atol=1e-3)
    assert z.min() >= depth.DEPTH_MIN_M and z.max() <= depth.DEPTH_MAX_M


def test_missing_depth_model_offline(monkeypatch, tmp_path):
    monkeypatch.setenv("MURK_OFFLINE", "1")
    with pytest.raises(OSError, match="backend='constant'"):
        depth.get_backend("depth-anything-v2", "nobody/no-such-depth-model")


def test_cache_roundtrip(tmp_path):
    z = np.linspace(0.5, 80, 12, dtype=np.float32).reshape(3, 4)
    depth.save_depth(tmp_path, 42, z)
    np.testing.assert_array_equal(depth.load_depth(tmp_path, 42), z)
    assert not list(tmp_path.glob("*.tmp"))
    with pytest.raises(FileNotFoundError, match="run the depth stage"):
        depth.load_depth(tmp_path, 43)


# ------------------------------------------------------------- folder backend, manifest


def test_folder_backend_reads_and_resizes(tmp_path):
    maps = tmp_path / "precomputed"
    maps.mkdir()
    np.save(maps / "42.npy", np.full((6, 8), 12.5, np.float32))
    np.save(maps / "43.npy", np.full((3, 4), 200.0))  # other size, beyond 80 m
    b = depth.get_backend("folder", str(maps))
    assert b.name == "folder:precomputed" and not b.approximate and b.model_id == str(maps.resolve())
    z = b(np.zeros((6, 8, 3), np.uint8), image_id=42)
    assert z.dtype == np.float32 and np.all(z == 12.5)
    z = b(np.zeros((9, 12, 3), np.uint8), image_id=43)
    assert z.shape == (9, 12) and np.all(z == depth.DEPTH_MAX_M)  # resized and clipped
    with pytest.raises(ValueError, match="image_id"):
        b(np.zeros((6, 8, 3), np.uint8))
    with pytest.raises(FileNotFoundError, match="44.npy"):
        b(np.zeros((6, 8, 3), np.uint8), image_id=44)
    with pytest.raises(FileNotFoundError, match="depth folder"):
        depth.get_backend("folder", str(tmp_path / "nowhere"))


def test_manifest_records_provenance_and_median_scene_depth(tmp_path):
    b = depth.get_backend("constant")
    depth.save_depth(tmp_path, 1, np.full((4, 4), 10.0))
    depth.save_depth(tmp_path, 2, np.array([[1.0, 2.0], [3.0, 50.0]]))  # median 2.5
    depth.save_depth(tmp_path, 3, np.full((4, 4), 20.0))
    depth.write_manifest(tmp_path, b, [1, 2, 3])
    m = depth.read_manifest(tmp_path)
    assert m["depth_backend"] == "constant-13.8m" and m["depth_approximate"] == 1
    assert m["median_scene_depth_m"] == pytest.approx(10.0)  # median of (10, 2.5, 20)
    assert m["per_image"]["2"] == {"depth_model": "", "depth_revision": ""}
    assert depth.is_cached(tmp_path, 2, b) and not depth.is_cached(tmp_path, 4, b)
    other = depth.DepthBackend(name="x", approximate=False, model_id="m", revision="r2")
    assert not depth.is_cached(tmp_path, 2, other)  # another model/revision: recompute
    depth.write_manifest(tmp_path, other, [1, 2, 3], written=[2])
    assert depth.is_cached(tmp_path, 2, other) and not depth.is_cached(tmp_path, 1, other)


def test_a_map_records_its_image_digest_and_a_changed_image_is_recomputed(tmp_path):
    b = depth.get_backend("constant")
    for i in (1, 2):
        depth.save_depth(tmp_path, i, np.full((4, 4), 10.0))
    depth.write_manifest(tmp_path, b, [1, 2], written=[1, 2], image_sha256={"1": "a" * 64, "2": "b" * 64})
    assert depth.read_manifest(tmp_path)["per_image"]["2"]["image_sha256"] == "b" * 64
    assert depth.is_cached(tmp_path, 2, b, "b" * 64)
    assert not depth.is_cached(tmp_path, 2, b, "c" * 64)   # the image changed since: recompute
    assert depth.is_cached(tmp_path, 2, b)                  # no digest to compare (a by-hand call): cached
    # recomputed: the new digest is recorded for that map alone, the other keeps its own
    depth.write_manifest(tmp_path, b, [1, 2], written=[2], image_sha256={"1": "z" * 64, "2": "c" * 64})
    per_image = depth.read_manifest(tmp_path)["per_image"]
    assert per_image["2"]["image_sha256"] == "c" * 64 and per_image["1"]["image_sha256"] == "a" * 64
    assert depth.is_cached(tmp_path, 2, b, "c" * 64) and not depth.is_cached(tmp_path, 1, b, "z" * 64)


# ------------------------------------------------------------------- kappa-sensitivity


def _sample_images(n: int, max_side: int = 96):
    import stages  # tests/stages.py: the shared COCO sample
    from murk import scene

    if stages.SAMPLE_ABSENT:
        pytest.skip(stages.SAMPLE_ABSENT)
    folder = stages.SAMPLE / "val2017"
    files = sorted(folder.glob("*.jpg"))[:n]
    if len(files) < n:
        pytest.skip(f"COCO sample images absent in {folder}")
    out = []
    for f in files:
        img = scene.load_image(f)
        out.append(scene.resize_image(img, scene.presented_size(img.shape[1], img.shape[0], max_side)))
    return out


@pytest.mark.parametrize("kappa", [0.5, 3.0])
def test_kappa_scales_crossings_and_leaves_w_unchanged(kappa):
    """Multiplying every depth by kappa multiplies the crossing visibilities by kappa and
    leaves W unchanged, on real COCO scenes with a non-constant depth (a ramp from 2 m at
    the bottom row to 60 m at the top, the usual layout of an outdoor photo).

    Two image-statistic curves play the roles of the two signals of W: the mean contrast
    gain and the mean luma std ratio over the images, clean value 1, floor 0. The sweep
    at kappa * SWEEP_M with depth kappa * z renders the same images bit for bit (only
    beta z enters Eq. 1), so the curves are identical and the crossings scale exactly.
    """
    from murk.results import _metrics as metrics
    from murk.scene import _nominal as nominal
    from murk.scene import _physics as physics

    images = _sample_images(3)
    sweep = physics.SWEEP_M
    ramps = [np.broadcast_to(np.linspace(60.0, 2.0, img.shape[0])[:, None], img.shape[:2]) for img in images]
    crossings = {}
    fog_1 = [physics.fog_sweep(img, z, sweep) for img, z in zip(images, ramps)]
    for k in (1.0, kappa):
        fog = fog_1 if k == 1.0 else [physics.fog_sweep(img, k * z, k * sweep) for img, z in zip(images, ramps)]
        if k != 1.0:  # the renderings themselves are unchanged, in both arms
            for img, z, r, r1 in zip(images, ramps, fog, fog_1):
                np.testing.assert_array_equal(r, r1)
                np.testing.assert_array_equal(physics.underwater_sweep(img, k * z, k * sweep),
                                              physics.underwater_sweep(img, z, sweep))
        curves = np.stack([
            np.mean([nominal.contrast_gain(img, r) for img, r in zip(images, fog)], axis=0),
            np.mean([nominal.luma_std_ratio(img, r) for img, r in zip(images, fog)], axis=0),
        ])
        v, censored = metrics.crossing_visibility(k * sweep, curves, 1.0, 0.0, censor_m=k * sweep[-1])
        assert not censored.any()
        crossings[k] = v
    np.testing.assert_allclose(crossings[kappa], kappa * crossings[1.0], rtol=1e-12)
    w1 = metrics.blind_spot_width(*crossings[1.0])
    wk = metrics.blind_spot_width(*crossings[kappa])
    assert np.isfinite(w1) and wk == pytest.approx(w1, abs=1e-12)
