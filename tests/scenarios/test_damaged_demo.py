"""Interrupted, deleted and damaged read-out stores of the study-shaped demo are re-read by the default
target (issues 14 and 49; its own module so that a pytest-xdist worker takes it beside
tests/scenarios/test_workflow_runs.py: issue 22 item 4). The helpers are tests/scenarios/test_workflow_runs.py's.
"""

from __future__ import annotations

import re
import shutil

import pytest
import xarray as xr

from murk.core import _paths as paths
from test_workflow_runs import _cube, _plan_lists_the_rerun, _tree, needs_sample


def _flip_in_chunk(shard, image: int, n: int) -> None:
    """Flip one byte in the middle of image ``image``'s chunk of a shard file of ``n`` images (its place read from
    the shard's index: zarr's sharding codec keeps (offset, length) per chunk, then a CRC-32C, at the end)."""
    import numpy as np

    data = bytearray(shard.read_bytes())
    offset, length = np.frombuffer(bytes(data[-(16 * n + 4):-4]), dtype="<u8").reshape(n, 2)[image]
    data[int(offset + length // 2)] ^= 0x5A
    shard.write_bytes(bytes(data))


@needs_sample
@pytest.mark.slow
def test_interrupted_deleted_and_damaged_stores_of_the_demo_are_re_read_by_make_demo(demo, tmp_path):
    """On a copy of the finished study-shaped demo, faults at once, each model's store its own: a read-out killed
    while it wrote (one image not done, no ``.done`` marker) that also has a byte flipped in another image's
    value chunk, a store deleted, a chunk cut short after the run (a power loss); and in the monitor's stores,
    with their markers, a byte flipped in one image's value chunk (the deployable mode's) and a value shard
    deleted (the oracle's). ``make plan`` names each and leaves the root byte-identical; the default target
    (what ``make demo`` runs) re-reads those stores, no other, the killed one only on its unfinished and its
    flipped image, the deployable monitor only on its flipped image, and re-makes the cube and the paper, with
    the cube of the uninterrupted run. (One re-run for them all: issue 22 item 4; the flips and the deletion:
    issue 49, which saw them re-approved instead of re-read.)"""
    import numpy as np

    import stages

    out = stages.copy_root(demo, tmp_path / "out")
    assert "Nothing to be done" in (r := stages.snakemake_demo(out, "-n")).stdout + r.stderr
    first = _cube(out)
    killed = paths.readout_store("murk-tiny/smolvlm", out)
    deleted = paths.readout_store("murk-tiny/qwen3vl", out)
    damaged = paths.readout_store("murk-tiny/gemma", out)
    killed_before = xr.open_zarr(killed, consolidated=False).load()
    oracle, deployable = (paths.readout_store(m, out) for m in ("murk/visibility-monitor",
                                                                 "murk/visibility-monitor-deployable"))
    monitors_before = [xr.open_zarr(m, consolidated=False).load() for m in (oracle, deployable)]
    # the state a job killed during the read-out leaves: image 1 not done, no .done marker
    xr.Dataset({"done": ("image", np.zeros(1, bool))}).to_zarr(killed, region={"image": slice(1, 2)},
                                                                consolidated=False)
    (out / "readout" / f"{paths.model_slug('murk-tiny/smolvlm')}.done").unlink()
    shutil.rmtree(deleted)
    chunk = damaged / "value" / "c" / "0" / "0" / "0" / "0" / "0"  # the shard file of all its images
    chunk.write_bytes(chunk.read_bytes()[: len(chunk.read_bytes()) // 2])
    n = stages.DEMO_N_ITEMS
    _flip_in_chunk(killed / "value" / "c" / "0" / "0" / "0" / "0" / "0", 3, n)  # found by its checksum alone
    _flip_in_chunk(deployable / "value" / "c" / "0" / "0" / "0" / "0" / "0", 2, n)  # and by its marker
    (oracle / "value" / "c" / "0" / "0" / "0" / "0" / "0").unlink()
    before = _tree(out)
    r = stages.snakemake_demo(out, "-n")
    _plan_lists_the_rerun(out, r, f"the store {deleted} is missing")
    for store in (damaged, oracle, deployable):
        assert f"the store {store} changed after its marker" in r.stderr
    # exactly the images of the changed files: the deployable monitor's flipped image, the oracle's four
    assert re.search(rf"read-out store {re.escape(str(deployable))} changed after its marker was written: the "
                     rf"images held by value/c/0/0/0/0/0 \(1 image\(s\), positions 2\) would be marked not done",
                     r.stderr), r.stderr[-3000:]
    assert re.search(rf"read-out store {re.escape(str(oracle))} changed .*positions 0, 1, 2, 3\) would be marked",
                     r.stderr)
    assert _tree(out) == before
    paper_time = (out / "paper" / "index.html").stat().st_mtime
    r = stages.snakemake_demo(out)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert len(re.findall(r"^(local)?rule readout:", r.stdout + r.stderr, re.M)) == 3  # those three, no other
    assert re.search(r"^(local)?rule monitor:", r.stdout + r.stderr, re.M)
    assert "runs again, and the cube and paper after it" in r.stderr
    # the killed read-out: the bar counts units (image x condition, 24 per image): only its unfinished image and
    # the one whose chunk failed its checksum were read out again, and greedy decoding of a deterministic model
    # gives them the same numbers
    nb = (out / "notebooks" / f"03_readout-{paths.model_slug('murk-tiny/smolvlm')}.ipynb").read_text()
    assert "48/48 [" in nb and f"{24 * n}/{24 * n} [" not in nb
    assert "image(s) had damaged or missing chunk files" in nb
    killed_after = xr.open_zarr(killed, consolidated=False).load()
    assert bool(killed_after["done"].all())
    xr.testing.assert_identical(killed_before["value"], killed_after["value"])
    for store, was in zip((oracle, deployable), monitors_before):  # re-read bit for bit, and vouched for again
        xr.testing.assert_identical(xr.open_zarr(store, consolidated=False).load(), was)
        assert (store / "value" / "c" / "0" / "0" / "0" / "0" / "0").is_file()
    xr.testing.assert_identical(_cube(out), first)
    assert (out / "paper" / "index.html").stat().st_mtime > paper_time
    assert "Nothing to be done" in (r := stages.snakemake_demo(out, "-n")).stdout + r.stderr
