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
    assert got == {**slurm.readout_resources(1000, [REC]), "ignored": []}
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


# --- issue 49 item 3: every number of a cost record is checked; a record outside the bounds is no measurement ---
HUGE = 10 ** 400   # a whole number no float holds
BAD_VALUES = {
    "s_per_image": [float("inf"), float("-inf"), float("nan"), 0, 0.0, -1.2, 1e12, slurm.MAX_S_PER_IMAGE * 1.01, HUGE,
                    "1.2", "inf", None, [1.2], {"s": 1.2}, True],
    "load_s": [float("inf"), float("nan"), -1.0, 1e12, HUGE, "60", None, [60.0], False],
    "peak_host_bytes": [float("inf"), float("nan"), 0, -1, 1e30, 1e12, (10 << 30) + 0.5, slurm.MAX_PEAK_HOST_BYTES + 1,
                        HUGE, "10737418240", None, [1], True],
    "images": [0, -3, 2.5, float("nan"), float("inf"), "100", None, [100], True],
    "device": [None, 3, ["cuda"]],
    "model": [None, 3, ["org/m"]],
}
CASES = [(k, v) for k, vs in BAD_VALUES.items() for v in vs]


def _dumped(value) -> str:
    """As the line shows a value: JSON's words (NaN, Infinity, null, "text"), a finite float in 6 digits."""
    return f"{value:.6g}" if isinstance(value, float) and value - value == 0 else json.dumps(value)


@pytest.mark.parametrize("key,value", CASES, ids=[f"{k}={_dumped(v)[:16]}" for k, v in CASES])
def test_a_cost_record_outside_the_bounds_is_ignored_with_one_line_and_the_defaults_apply(tmp_path, key, value):
    readout = tmp_path / "readout"
    readout.mkdir()
    f = readout / "org--m.cost.json"
    f.write_text(json.dumps({**REC, key: value}))
    got = slurm.model_readout_resources(readout, "org--m", "org/m", 1000, device="cuda")
    assert (got["runtime"], got["mem_mb"]) == (slurm.UNMEASURED_RUNTIME_MIN, slurm.UNMEASURED_MEM_MB)   # the defaults
    (line,) = got["ignored"]
    assert "\n" not in line and line.startswith(f"murk: {f}: {key} ") and "is not" in line, line
    assert "it is ignored and the defaults apply (" in line and f"{slurm.UNMEASURED_RUNTIME_MIN} min" in line
    shown = _dumped(value)
    assert shown[:39] in line   # the value as the file has it (a long one cut)
    # beside a sound record of the same model: that one applies, and the line says so
    (readout / "org--m").mkdir()
    (readout / "org--m" / "s100-0000.cost.json").write_text(json.dumps(REC))
    got = slurm.model_readout_resources(readout, "org--m", "org/m", 1000, device="cuda")
    assert {k: got[k] for k in ("runtime", "mem_mb")} == {k: slurm.readout_resources(1000, [REC])[k]
                                                          for k in ("runtime", "mem_mb")}
    assert len(got["ignored"]) == 1 and "the model's other measurements apply" in got["ignored"][0]


@pytest.mark.parametrize("text,why", [('{"device": "cuda", "ima', "it is not JSON"),                  # truncated
                                       ("", "it is not JSON"),
                                       ("[1, 2]", "it holds list, not a record"),
                                       ("null", "it holds null, not a record"),
                                       ('"cost"', "it holds str, not a record"),
                                       (json.dumps({k: v for k, v in REC.items() if k != "load_s"}), "it has no load_s"),
                                       ('{"peak_host_bytes": ' + "9" * 5000 + "}", "it is not JSON"),   # > 4,300 digits
                                       (b"\xff\xfe{}", "it cannot be read")])
def test_a_cost_file_that_is_not_a_record_is_ignored_with_one_line(tmp_path, text, why):
    f = tmp_path / "org--m.cost.json"
    f.write_bytes(text if isinstance(text, bytes) else text.encode())
    got = slurm.model_readout_resources(tmp_path, "org--m", "org/m", 10)
    (line,) = got["ignored"]
    assert line.startswith(f"murk: {f}: {why}") and "\n" not in line and "the defaults apply" in line, line
    assert got["runtime"] == slurm.UNMEASURED_RUNTIME_MIN


def test_the_bounds_admit_the_measurements_they_are_drawn_from():
    """A record at each bound is a measurement (the bounds refuse only what no read-out can have cost)."""
    edge = {**REC, "s_per_image": slurm.MAX_S_PER_IMAGE, "load_s": 0.0, "peak_host_bytes": slurm.MAX_PEAK_HOST_BYTES}
    assert slurm.cost_problem(edge) is None and slurm.cost_problem(REC) is None
    # the slowest read-out measured (benchmarks/README.md: 259 s per unit, 24 units an image) is well inside
    assert slurm.cost_problem({**REC, "s_per_image": 259.0 * 24}) is None
    assert slurm.cost_problem({k: v for k, v in REC.items() if k not in ("model", "units")}) is None   # optional keys
