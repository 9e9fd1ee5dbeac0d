"""The read-out jobs' SLURM runtime and memory, from the measured cost of earlier jobs (murk.pipeline, issue 38 item 7).

The Snakefile's wiring (a cost record in an output root changes the dry run's requests of that model's jobs, and
only those) is tested in tests/test_slurm_profiles.py; the record a read-out writes, in
tests/scenarios/test_pipeline.py.
"""

import json

import pytest

from murk.pipeline import _slurm as slurm

REC = {"model": "org/m", "device": "cuda", "images": 100, "units": 2400, "run_s": 120.0, "s_per_image": 1.2,
       "load_s": 60.0, "peak_host_bytes": 10 << 30, "peak_device_bytes": 40 << 30, "images_per_batch": 8}


def test_request_is_the_slowest_measurement_times_the_margin():
    slow = {**REC, "s_per_image": 2.0, "load_s": 30.0, "peak_host_bytes": 12 << 30}
    r = slurm.readout_resources(1000, [REC, slow], device="cuda")
    # 1.5 x (60 s loading + 1000 x 2.0 s) = 3090 s = 51.5 min; 1.3 x 12 GiB
    assert (r["runtime"], r["mem_mb"]) == (52, 15975)
    assert "measured on 2 job(s)" in r["basis"] and "1.5" in r["basis"]
    assert slurm.readout_resources(1000, [REC, slow], device="cuda", attempt=2) == {**r, "runtime": 104,
                                                                                       "mem_mb": 31950}
    assert slurm.readout_resources(1, [REC])["runtime"] == slurm.MIN_RUNTIME_MIN  # loading alone: at least this
    # twice the images, about twice the time
    assert slurm.readout_resources(2000, [REC])["runtime"] == 62  # 1.5 x (60 + 2400) / 60 = 61.5


def test_measurements_of_another_device_are_not_used():
    cpu = {**REC, "device": "cpu", "s_per_image": 150.0}
    assert slurm.readout_resources(100, [REC, cpu], device="cuda") == slurm.readout_resources(100, [REC])
    assert slurm.readout_resources(100, [cpu], device="cuda")["runtime"] == slurm.UNMEASURED_RUNTIME_MIN


def test_unmeasured_request_from_the_weights_or_the_former_values():
    r = slurm.readout_resources(4000, [], weights=4 << 30)
    # 1.3 x (3 GiB base + twice the 4 GiB of weights), 240 min
    assert (r["runtime"], r["mem_mb"]) == (240, 14644) and "not measured" in r["basis"]
    r = slurm.readout_resources(4000, [])
    assert (r["runtime"], r["mem_mb"]) == (slurm.UNMEASURED_RUNTIME_MIN, slurm.UNMEASURED_MEM_MB)
    assert slurm.readout_resources(4000, [], attempt=2)["runtime"] == 2 * slurm.UNMEASURED_RUNTIME_MIN


def test_cost_records_of_a_model_are_found_beside_its_stores(tmp_path):
    readout = tmp_path / "readout"
    (readout / "org--m").mkdir(parents=True)
    f = slurm.write_readout_cost(readout / "org--m" / "s100-0000.zarr", model="org/m", device="cuda", images=100,
                                 units=2400, run_s=120.0, load_s=60.0, peak_host_bytes=10 << 30)
    assert f == readout / "org--m" / "s100-0000.cost.json" and json.loads(f.read_text())["s_per_image"] == 1.2
    got = slurm.model_readout_resources(readout, "org--m", "org/m", 1000, device="cuda")
    assert got == slurm.readout_resources(1000, [REC])
    # the whole store's record counts too; a slower one raises the request
    slurm.write_readout_cost(readout / "org--m.zarr", model="org/m", device="cuda", images=10, units=240,
                             run_s=30.0, load_s=60.0, peak_host_bytes=1 << 30)
    assert slurm.model_readout_resources(readout, "org--m", "org/m", 1000)["runtime"] == 77  # 3 s per image
    # unreadable records, another model's, and a job that read nothing are no measurement
    (readout / "org--m" / "s100-0001.cost.json").write_text("{")
    (readout / "org--m" / "s100-0002.cost.json").write_text(json.dumps({**REC, "model": "org/other",
                                                                        "s_per_image": 99.0}))
    assert not slurm.write_readout_cost(readout / "org--m" / "s100-0003.zarr", model="org/m", device="cuda",
                                        images=0, units=0, run_s=1.0, load_s=1.0, peak_host_bytes=1).exists()
    assert slurm.model_readout_resources(readout, "org--m", "org/m", 1000)["runtime"] == 77
    assert slurm.model_readout_resources(readout, "org--n", "org/n", 1000)["runtime"] == slurm.UNMEASURED_RUNTIME_MIN


def test_weights_of_a_folder_and_of_the_hub_cache(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"x" * 1000)
    (folder / "config.json").write_text("{}")
    assert slurm.weights_bytes(str(folder)) == 1000
    snap = tmp_path / "hub" / "models--org--m" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "model-00001-of-00002.safetensors").write_bytes(b"x" * 300)
    (snap / "model-00002-of-00002.safetensors").write_bytes(b"x" * 200)
    assert slurm.weights_bytes("org/m", hub_cache=tmp_path / "hub") == 500
    assert slurm.weights_bytes("org/none", hub_cache=tmp_path / "hub") is None


@pytest.mark.parametrize("bad", [{"images": 0}, {"peak_host_bytes": 0}, {"s_per_image": "x"}])
def test_incomplete_records_are_skipped(tmp_path, bad):
    f = tmp_path / "a.cost.json"
    f.write_text(json.dumps({**REC, **bad}))
    assert slurm.read_readout_costs([f, tmp_path / "none.cost.json"]) == []
