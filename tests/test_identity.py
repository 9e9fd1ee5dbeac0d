"""murk.identity: a file's content digest, its fast path and cache, and the images changed since select."""

import hashlib
import json
import os

import pytest

from murk import identity


class _Hashes:
    """Counts the files murk.identity hashes (its calls of hashlib.sha256 with no data)."""

    def __init__(self, monkeypatch):
        self.n = 0
        real = hashlib.sha256

        def counting(*args, **kwargs):
            if not args and not kwargs:
                self.n += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(identity.hashlib, "sha256", counting)


def test_file_digest_is_sha256_of_the_bytes(tmp_path):
    p = tmp_path / "a.jpg"
    p.write_bytes(b"pixels")
    assert identity.file_digest(p) == hashlib.sha256(b"pixels").hexdigest()
    q = tmp_path / "b.jpg"
    q.write_bytes(b"pixels")
    assert identity.file_digest(q) == identity.file_digest(p)   # content, not name
    q.write_bytes(b"pixelz")
    assert identity.file_digest(q) != identity.file_digest(p)   # one byte changed
    with pytest.raises(FileNotFoundError):
        identity.file_digest(tmp_path / "none.jpg")
    with pytest.raises(IsADirectoryError):
        identity.file_digest(tmp_path)


def test_fast_path_and_rehash(tmp_path, monkeypatch):
    hashes = _Hashes(monkeypatch)
    p = tmp_path / "a.jpg"
    p.write_bytes(b"old pixels")
    cache = identity.DigestCache(tmp_path / identity.CACHE_NAME)
    d0 = identity.file_digest(p, cache)
    cache.save()
    assert hashes.n == 1
    # unchanged (size, times, inode), in a new process's cache: the digest comes from the cache, unread
    cache = identity.DigestCache(tmp_path / identity.CACHE_NAME)
    assert identity.file_digest(p, cache) == d0 and cache.digest(p) == d0
    assert hashes.n == 1
    # a touch (new times, same bytes) re-hashes and finds the same content
    os.utime(p, ns=(0, 10**9))
    assert identity.file_digest(p, cache) == d0 and hashes.n == 2
    # bytes rewritten with the old mtime put back (a restore, cp -p): the ctime moved, so it is re-hashed
    st = os.stat(p)
    p.write_bytes(b"new pixels")
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert identity.file_digest(p, cache) == hashlib.sha256(b"new pixels").hexdigest()
    # a file replaced by another (a new inode: an editor's save, mv) is re-hashed
    other = tmp_path / "other"
    other.write_bytes(b"third pixel")
    os.replace(other, p)
    assert identity.file_digest(p, cache) == hashlib.sha256(b"third pixel").hexdigest()
    # a link is followed: the target's content
    (tmp_path / "link.jpg").symlink_to(p)
    assert identity.file_digest(tmp_path / "link.jpg", cache) == hashlib.sha256(b"third pixel").hexdigest()


def test_cache_file_written_atomically_and_damage_ignored(tmp_path, monkeypatch):
    p = tmp_path / "a.jpg"
    p.write_bytes(b"pixels")
    f = identity.cache_file(tmp_path)
    cache = identity.DigestCache(f)
    identity.file_digest(p, cache)
    cache.save()
    data = json.loads(f.read_text())
    assert data["version"] == 1 and list(data["files"].values())[0][-1] == hashlib.sha256(b"pixels").hexdigest()
    assert [x.name for x in tmp_path.iterdir() if x.name.endswith(".tmp")] == []
    mtime = f.stat().st_mtime_ns
    cache = identity.DigestCache(f)
    identity.file_digest(p, cache)
    cache.save()   # nothing changed: not rewritten
    assert f.stat().st_mtime_ns == mtime
    hashes = _Hashes(monkeypatch)
    for n, damaged in enumerate(("{not json", "[]", json.dumps({"version": 1, "files": {str(p): ["x"]}}), ""), 1):
        f.write_text(damaged)
        cache = identity.DigestCache(f)   # read as empty: the file is hashed again
        assert identity.file_digest(p, cache) == hashlib.sha256(b"pixels").hexdigest() and hashes.n == n
    cache.save()   # and the damaged cache is replaced by a sound one
    assert list(json.loads(f.read_text())["files"].values())[0][-1] == hashlib.sha256(b"pixels").hexdigest()


def test_combined_digest_orders_and_marks_missing():
    a, b = "a" * 64, "b" * 64
    assert identity.combined_digest([a, b]) != identity.combined_digest([b, a])
    assert identity.combined_digest([a, None]) != identity.combined_digest([a, b])
    assert len(identity.combined_digest([])) == 64


def _selection(root, image_dir, files):
    root.mkdir(parents=True, exist_ok=True)
    records = [{"image_id": i, "file_name": name} for i, name in enumerate(files, 1)]
    (root / "items.json").write_text(json.dumps(records))
    digests = {}
    for r in records:
        try:
            digests[str(r["image_id"])] = identity.file_digest(image_dir / r["file_name"])
        except OSError:
            digests[str(r["image_id"])] = None
    (root / "items_meta.json").write_text(json.dumps({"image_dir": str(image_dir), "image_sha256": digests}))


def test_changed_images(tmp_path):
    images, root = tmp_path / "images", tmp_path / "out"
    images.mkdir()
    for name in ("1.jpg", "2.jpg"):
        (images / name).write_bytes(name.encode())
    assert identity.changed_images(root) == []   # select has not run
    _selection(root, images, ["1.jpg", "2.jpg", "3.jpg"])   # 3.jpg missing at select
    assert identity.changed_images(root) == []
    assert identity.cache_file(root).is_file()
    (images / "2.jpg").write_bytes(b"other pixels")
    assert identity.changed_images(root) == [images / "2.jpg"]
    (images / "1.jpg").unlink()
    (images / "3.jpg").write_bytes(b"now there")
    assert identity.changed_images(root) == [images / "1.jpg", images / "2.jpg", images / "3.jpg"]
    # a dry run's own cache is not saved
    (images / "2.jpg").write_bytes(b"2.jpg")
    before = identity.cache_file(root).read_bytes()
    cache = identity.DigestCache(identity.cache_file(root))
    assert identity.changed_images(root, cache) == [images / "1.jpg", images / "3.jpg"]
    assert identity.cache_file(root).read_bytes() == before
    # a root of an earlier murk (no image digests recorded): nothing to compare with
    (root / "items_meta.json").write_text(json.dumps({"image_dir": str(images)}))
    assert identity.changed_images(root) == []
