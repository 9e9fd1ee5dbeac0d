"""murk.core (issue 37 item 2): a checkpoint folder and a file identified by their content, the stat-keyed
cache of their digests, and the selected images changed since select."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from murk.core import _identity as identity


def _checkpoint(folder: Path) -> Path:
    """A checkpoint-shaped folder: weights, configs, tokenizer, a template, a hidden cache and murk's marker."""
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(bytes(range(256)) * 64)
    (folder / "config.json").write_text('{"model_type": "smolvlm"}')
    (folder / "generation_config.json").write_text('{"do_sample": false}')
    (folder / "tokenizer.json").write_text('{"model": {}}')
    (folder / "chat_template.jinja").write_text("{{ messages }}")
    (folder / "README.md").write_text("not part of the model")
    (folder / ".cache").mkdir()
    (folder / ".cache" / "x.json").write_text("{}")
    (folder / "murk_tiny.json").write_text('{"pipeline_check": true}')
    return folder


def test_checkpoint_files_are_the_defining_ones(tmp_path):
    ck = _checkpoint(tmp_path / "ck")
    assert identity.checkpoint_files(ck) == ["chat_template.jinja", "config.json", "generation_config.json",
                                             "model.safetensors", "tokenizer.json"]


def test_same_content_same_digest_one_byte_another(tmp_path):
    a, b = _checkpoint(tmp_path / "a"), _checkpoint(tmp_path / "b")
    d = identity.checkpoint_digest(a, None)
    assert len(d) == 64 and identity.checkpoint_digest(b, None) == d
    assert identity.checkpoint_revision(a, None) == "sha256:" + d[:16]
    data = bytearray((b / "model.safetensors").read_bytes())
    data[1000] ^= 1
    (b / "model.safetensors").write_bytes(bytes(data))
    assert identity.checkpoint_digest(b, None) != d
    # a file that defines the model, renamed: another identity (the path is part of it)
    (a / "chat_template.jinja").rename(a / "template.jinja")
    assert identity.checkpoint_digest(a, None) != d
    # files that do not define it (a README, a hidden cache, murk's marker) change nothing
    c = _checkpoint(tmp_path / "c")
    (c / "README.md").write_text("other")
    (c / ".cache" / "x.json").write_text('{"other": 1}')
    (c / "murk_tiny.json").write_text('{"digest": "abc"}')
    assert identity.checkpoint_digest(c, None) == d


def test_the_cache_follows_changes_not_times_nor_names(tmp_path):
    cache_file = tmp_path / "cache" / "digests.json"
    ck = _checkpoint(tmp_path / "ck")
    d = identity.checkpoint_digest(ck, cache_file)
    entries = json.loads(cache_file.read_text())["files"]
    assert os.path.realpath(ck / "model.safetensors") in entries
    # touched without a change: re-hashed (the stat differs), the same digest
    os.utime(ck / "model.safetensors", ns=(1, 1))
    assert identity.checkpoint_digest(ck, cache_file) == d
    # changed in place, size and modification time put back: the change time and the hash still tell
    w = ck / "model.safetensors"
    st = w.stat()
    data = bytearray(w.read_bytes())
    data[0] ^= 0xFF
    w.write_bytes(bytes(data))
    os.utime(w, ns=(st.st_atime_ns, st.st_mtime_ns))
    d2 = identity.checkpoint_digest(ck, cache_file)
    assert d2 != d and d2 == identity.checkpoint_digest(ck, None)
    # renamed folder, same content: the same digest (the folder's name is not part of it)
    moved = Path(shutil.move(str(ck), str(tmp_path / "renamed")))
    assert identity.checkpoint_digest(moved, cache_file) == d2
    # entries of files that are gone are dropped when the cache is next written
    assert all(os.path.exists(p) for p in json.loads(cache_file.read_text())["files"])


def test_the_cache_is_used_and_a_damaged_one_ignored(tmp_path):
    cache_file = tmp_path / "digests.json"
    ck = _checkpoint(tmp_path / "ck")
    d = identity.checkpoint_digest(ck, cache_file)
    # the fast path answers from the cache: a forged entry with the file's stat is believed (the cache is used)
    rec = json.loads(cache_file.read_text())
    key = os.path.realpath(ck / "config.json")
    rec["files"][key][4] = "0" * 64
    cache_file.write_text(json.dumps(rec))
    assert identity.checkpoint_digest(ck, cache_file) != d
    for damaged in ("{not json", "[]", '{"version": 1, "files": {"x": 3}}', "", '{"version": 99, "files": {}}'):
        cache_file.write_text(damaged)
        assert identity.checkpoint_digest(ck, cache_file) == d, damaged
        assert json.loads(cache_file.read_text())["version"] == 1  # rewritten whole
    # a dry run reads the cache and writes nothing
    cache_file.unlink()
    assert identity.checkpoint_digest(ck, cache_file, update_cache=False) == d and not cache_file.exists()
    # an unwritable cache place is not an error
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert identity.checkpoint_digest(ck, blocker / "digests.json") == d


def test_file_digest_and_the_default_cache_place(tmp_path, monkeypatch):
    f = tmp_path / "x.bin"
    f.write_bytes(b"abc")
    assert identity.file_digest(f) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    monkeypatch.setenv(identity.CACHE_ENV, str(tmp_path / "c.json"))
    assert identity.default_cache_path() == tmp_path / "c.json"
    monkeypatch.delenv(identity.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert identity.default_cache_path() == tmp_path / "xdg" / "murk" / "digests.json"


# --- the Snakefile's parameter (murk.pipeline.checkpoint_identity) and the store of superseded weights (murk.results) ---

def test_checkpoint_identity_of_folders_built_checkpoints_and_hub_ids(tmp_path, monkeypatch):
    from huggingface_hub import constants

    from murk.core import _paths as paths
    from murk.pipeline import markers as workflow

    monkeypatch.setenv(identity.CACHE_ENV, str(tmp_path / "digests.json"))
    root = tmp_path / "out"
    # a checkpoint murk builds: the same identity before it is built and as built, so building it re-runs nothing
    model = "murk-tiny/smolvlm"
    assert workflow.checkpoint_identity(model, root) == ""
    built = _checkpoint(paths.checkpoints_dir(root) / paths.model_slug(model))
    (built / "murk_tiny.json").write_text(json.dumps({"digest": identity.checkpoint_digest(built, None)}))
    assert workflow.checkpoint_identity(model, root) == ""
    (built / "config.json").write_text('{"model_type": "smolvlm", "changed": 1}')  # re-saved by someone
    assert workflow.checkpoint_identity(model, root) == identity.checkpoint_revision(built, None)
    # a local folder: its content digest, whatever its name
    folder = _checkpoint(tmp_path / "ck")
    rev = workflow.checkpoint_identity(str(folder), root)
    assert rev == identity.checkpoint_revision(folder, None) and rev.startswith("sha256:")
    assert workflow.checkpoint_identity(str(built), root) == identity.checkpoint_revision(built, None)
    # a hub id: nothing online; offline, the commit the Hugging Face cache holds for main
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert workflow.checkpoint_identity("org/m", root) == "" == workflow.checkpoint_identity("org/m", root, offline=True)
    ref = tmp_path / "hub" / "models--org--m" / "refs" / "main"
    ref.parent.mkdir(parents=True)
    ref.write_text("a" * 40)
    assert workflow.checkpoint_identity("org/m", root, offline=True) == "a" * 40
    assert workflow.checkpoint_identity("org/m", root) == ""


def _store(path: Path, **attrs) -> Path:
    from murk.results import _cube as cube

    base = dict(config_hash="c", items_hash="i", model_id="/models/m", depth_backend="constant-13.8m",
                model_revision="sha256:" + "1" * 16)
    cube.open_readout_store(path, [11, 12], ["car", "bus"], cube.store_identity(**{**base, **attrs}))
    return path


def test_weights_changed_is_decided_from_what_the_store_records(tmp_path, monkeypatch):
    """Issue 49 item 5: a re-saved checkpoint is noticed from the store's recorded revision (so in a copied root
    or from a second checkout, where Snakemake's params trigger is silent), only where both sides name content."""
    from murk.core import _paths as paths
    from murk import pipeline
    from murk.pipeline import markers as workflow

    monkeypatch.setenv(identity.CACHE_ENV, str(tmp_path / "digests.json"))
    root = tmp_path / "out"
    folder = _checkpoint(tmp_path / "ck")
    rev = identity.checkpoint_revision(folder, None)
    store = _store(root / "readout" / "m.zarr", model_id=str(folder), model_revision=rev)
    now = workflow.checkpoint_identity(str(folder), root)
    assert pipeline.weights_changed(store, str(folder), root, now) is None   # the weights it was read out from
    copy = tmp_path / "copy"   # a copied root, read from anywhere: the store tells, no metadata needed
    shutil.copytree(root, copy)
    (folder / "config.json").write_text('{"model_type": "smolvlm", "resaved": 1}')
    now = workflow.checkpoint_identity(str(folder), copy)
    why = pipeline.weights_changed(copy / "readout" / "m.zarr", str(folder), copy, now)
    assert why == (f"the store {copy / 'readout' / 'm.zarr'} was read out from the weights {rev} of {folder}, which "
                   f"are {now} now (the checkpoint was re-saved since; its revision, as the store records it)")
    # not comparable: nothing said (the params trigger and the read-out's own checks stay)
    for recorded, identity_now in (("local", now), (rev, ""), (rev, "unreadable"), (rev, "a" * 40), ("b" * 40, now)):
        s = _store(tmp_path / f"s-{len(recorded)}-{len(identity_now)}.zarr", model_revision=recorded)
        assert pipeline.weights_changed(s, "org/m", root, identity_now) is None, (recorded, identity_now)
    assert pipeline.weights_changed(tmp_path / "absent.zarr", str(folder), root, now) is None
    hub = _store(tmp_path / "hub.zarr", model_revision="b" * 40)   # an offline hub id: the cached commit moved
    assert "b" * 40 in pipeline.weights_changed(hub, "org/m", root, "a" * 40)
    # a checkpoint murk builds: "" as built stands for the digest its marker records
    model = "murk-tiny/smolvlm"
    built = _checkpoint(paths.checkpoints_dir(root) / paths.model_slug(model))
    (built / "murk_tiny.json").write_text(json.dumps({"digest": identity.checkpoint_digest(built, None)}))
    as_built = identity.checkpoint_revision(built, None)
    ok = _store(tmp_path / "built.zarr", model_revision=as_built)
    assert workflow.checkpoint_identity(model, root) == "" and pipeline.weights_changed(ok, model, root, "") is None
    old = _store(tmp_path / "built-old.zarr", model_revision="sha256:" + "2" * 16)   # built again, otherwise
    assert as_built in pipeline.weights_changed(old, model, root, "")
    assert pipeline.weights_changed(old, "murk-tiny/other", root, "") is None   # not built yet: unknown


def test_a_store_of_superseded_local_weights_is_set_aside_other_differences_refused(tmp_path):
    import pytest

    from murk.pipeline import markers as workflow
    from murk.results import _cube as cube

    new = dict(config_hash="c", items_hash="i", model_id="/models/m", depth_backend="constant-13.8m",
               model_revision="sha256:" + "2" * 16)
    store = _store(tmp_path / "readout" / "m.zarr")
    assert cube.set_aside_superseded(store, cube.store_identity(**{**new, "model_revision": "sha256:" + "1" * 16})) \
        is None and store.is_dir()  # the same weights: resumed
    aside = cube.set_aside_superseded(store, cube.store_identity(**new))
    assert aside == tmp_path / "readout" / ("m.zarr.superseded-sha256-" + "1" * 16) and aside.is_dir()
    assert not store.exists()
    assert workflow.foreign_stores(tmp_path, "x", "y") == []  # no stage reads it (only *.zarr stores)
    cube.open_readout_store(store, [11, 12], ["car", "bus"], cube.store_identity(**new))  # a fresh store
    # the same old weights set aside again: kept beside the first, nothing lost
    shutil.rmtree(store)
    _store(store)
    assert cube.set_aside_superseded(store, cube.store_identity(**new)).name.endswith("-2")
    # a store of what murk recorded before digests ('local'): set aside too
    _store(store, model_revision="local")
    assert cube.set_aside_superseded(store, cube.store_identity(**new)).name == "m.zarr.superseded-local"
    # other differences keep being refused by open_readout_store: another hub commit, another setting as well
    for other in (dict(model_revision="a" * 40), dict(n_verbal_items=2)):
        s = _store(tmp_path / "readout" / f"o{len(other)}{sorted(other)[0]}.zarr", **other)
        assert cube.set_aside_superseded(s, cube.store_identity(**new)) is None and s.is_dir()
        with pytest.raises(ValueError, match="model_revision"):
            cube.open_readout_store(s, [11, 12], ["car", "bus"], cube.store_identity(**new))
    assert cube.set_aside_superseded(tmp_path / "absent.zarr", cube.store_identity(**new)) is None


class _Hashes:
    """Counts the files murk.core hashes (its calls of hashlib.sha256 with no data)."""

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
