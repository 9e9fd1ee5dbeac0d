"""Depth backends: the named approximation, Depth Anything V2 loading (tiny checkpoint), the cache."""

import numpy as np
import pytest

from murk import checkpoints, depth


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
    assert not b.approximate and b.name == "depth-anything-v2:tiny-da" and b.revision == "local"
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
