"""The CPU read-out dtype chosen from measured matmul rates (murk.readout), and the benchmarks' protocol."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import pytest

from murk.core import _paths as paths
from murk.readout import _hardware as hardware

BENCH = paths.project_root() / "benchmarks"


@pytest.fixture
def rates(monkeypatch):
    """Set the 'measured' matmul rates (GFLOP/s) that cpu_dtype_choice sees; the cache is cleared around."""
    got = {}

    def fake(dtype, n=2048, device="cpu", seconds=1.0, repeats=3):
        r = got[str(dtype)]
        if isinstance(r, Exception):
            raise r
        return r

    monkeypatch.setattr(hardware, "matmul_gflops", fake)
    hardware.cpu_dtype_choice.cache_clear()
    hardware._say_once.cache_clear()
    yield got
    hardware.cpu_dtype_choice.cache_clear()
    hardware._say_once.cache_clear()


def test_matmul_rate_is_measured():
    r = hardware.matmul_gflops("float32", n=128, seconds=0.02, repeats=2)
    assert math.isfinite(r) and r > 0.1  # any CPU multiplies 128^2 matrices at more than 0.1 GFLOP/s


@pytest.mark.parametrize("fp32, bf16, want", [(373.0, 2056.0, "bfloat16"), (373.0, 746.0, "bfloat16"),
                                              (373.0, 745.0, "float32"), (400.0, 90.0, "float32")])
def test_auto_takes_bf16_only_where_it_is_clearly_faster(rates, capsys, fp32, bf16, want):
    rates.update({"float32": fp32, "bfloat16": bf16})
    assert hardware.resolve_cpu_dtype("auto") == want
    err = capsys.readouterr().err
    assert f"{bf16:.0f} GFLOP/s in bfloat16, {fp32:.0f} in float32" in err and f"reading out in {want}" in err
    assert hardware.resolve_cpu_dtype("auto") == want
    assert capsys.readouterr().err == ""  # said once per process


def test_auto_keeps_float32_where_torch_has_no_bf16_matmul(rates):
    rates.update({"float32": 300.0, "bfloat16": RuntimeError("no bf16 kernel")})
    c = hardware.cpu_dtype_choice()
    assert c.dtype == "float32" and math.isnan(c.bf16_gflops)


def test_explicit_dtypes_are_not_measured(rates):
    assert hardware.resolve_cpu_dtype("float32") == "float32"
    assert hardware.resolve_cpu_dtype("bfloat16") == "bfloat16"
    assert hardware.cpu_dtype_choice.cache_info().currsize == 0


def test_load_vlm_auto_loads_the_chosen_dtype_and_records_it(rates, tiny_checkpoint_dirs):
    import torch

    from murk.core import load_config
    from murk.readout import load_vlm

    folder = str(tiny_checkpoint_dirs["qwen3vl"])
    rates.update({"float32": 100.0, "bfloat16": 500.0})
    vlm = load_vlm(folder, device="cpu", dtype="auto")
    assert vlm.dtype == torch.bfloat16 and next(vlm.model.parameters()).dtype == torch.bfloat16
    hardware.cpu_dtype_choice.cache_clear()
    rates.update({"float32": 100.0, "bfloat16": 150.0})
    cfg = load_config()
    cfg["readout"] = {**cfg["readout"], "dtype_cpu": "auto"}
    vlm = load_vlm(folder, device="cpu", config=cfg)
    assert vlm.dtype == torch.float32
    # the shipped default stays float32, measured by nothing
    hardware.cpu_dtype_choice.cache_clear()
    assert load_vlm(folder, device="cpu").dtype == torch.float32
    assert hardware.cpu_dtype_choice.cache_info().currsize == 0


@pytest.mark.parametrize("device, dtype, setting, hint", [
    ("cuda", "auto", "readout.dtype_gpu", "auto is measured on the CPU only"),
    ("cpu", "bf16", "readout.dtype_cpu", "give float32, bfloat16 or float16")])
def test_a_dtype_that_is_no_torch_dtype_is_refused_naming_the_setting(rates, tiny_checkpoint_dirs, device, dtype,
                                                                      setting, hint):
    """readout.dtype_gpu: auto (auto measures CPU matmul only) and a misspelt name: a ValueError naming the setting
    and the dtypes to give, before anything is loaded (no GPU needed: the name is checked first)."""
    from murk.core import load_config
    from murk.readout import load_vlm

    cfg = load_config()
    cfg["readout"] = {**cfg["readout"], "dtype_gpu" if device == "cuda" else "dtype_cpu": dtype}
    with pytest.raises(ValueError, match=f"dtype '{dtype}' for {device} \\({setting} in data/config.yaml") as e:
        load_vlm(str(tiny_checkpoint_dirs["qwen3vl"]), device=device, config=cfg)
    assert hint in str(e.value)


# --------------------------------------------------------------------------- benchmarks/protocol.py

def _protocol():
    sys.path.insert(0, str(BENCH))
    try:
        import protocol
    finally:
        sys.path.remove(str(BENCH))
    return protocol


def test_interleave_alternates_the_order_and_keeps_returned_times():
    protocol = _protocol()
    calls = []
    secs = protocol.interleave({"a": lambda: calls.append("a") or 2.0, "b": lambda: calls.append("b") or 1.0,
                                "c": lambda: calls.append("c")}, 3)
    assert calls == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]
    assert secs["a"] == [2.0] * 3 and secs["b"] == [1.0] * 3
    assert len(secs["c"]) == 3 and all(0 <= t < 1 for t in secs["c"])  # timed: it returned nothing
    with pytest.raises(ValueError, match="rounds >= 1"):
        protocol.interleave({"a": lambda: 1.0}, 0)


def test_ratio_summary_is_the_median_of_per_round_ratios_with_their_range():
    protocol = _protocol()
    assert protocol.ratio_summary([2.0, 9.0, 4.0], [1.0, 3.0, 1.0]) == (3.0, 2.0, 4.0)
    assert protocol.fmt_ratio("r", (3.0, 2.0, 4.0)) == "r=3.00 r_range=2.00-4.00"
    with pytest.raises(ValueError, match="equal, non-empty"):
        protocol.ratio_summary([1.0], [1.0, 2.0])


def test_the_last_line_warns_when_the_load_exceeded_the_cpus(monkeypatch, capsys):
    protocol = _protocol()
    loads = iter([(0.5, 0.4, 0.3), (5.0, 1.0, 1.0), (0.7, 0.6, 0.5)])
    monkeypatch.setattr(protocol, "load_average", lambda: next(loads))
    monkeypatch.setattr(protocol, "cpu_count", lambda: 2)
    log = protocol.LoadLog("toy")
    assert "WARNING" not in log.tail() and log.tail() == "load_max=0.50 cpus=2"
    log.sample()
    log.end()
    out = capsys.readouterr().out.splitlines()
    assert re.match(r"toy: start \S+ load=0\.50,0\.40,0\.30 cpus=2", out[0])
    assert re.match(r"toy: end after \d+ s: \S+ load=0\.70,0\.60,0\.50 cpus=2", out[1])
    assert log.tail().startswith("load_max=5.00 cpus=2 WARNING: the load exceeded the 2 CPUs")


def test_the_physics_benchmark_prints_its_load_and_a_ratio_with_its_range():
    r = subprocess.run([sys.executable, str(BENCH / "physics.py"), "--size", "48", "--repeats", "1", "--rounds", "2"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("physics: start ") and " cpus=" in lines[0]
    assert lines[-2].startswith("physics: end after ")
    assert re.fullmatch(r"sweep_ms=[0-9.]+ naive_ms=[0-9.]+ ratio=[0-9.]+ ratio_range=[0-9.]+-[0-9.]+ "
                        r"load_max=[0-9.]+ cpus=\d+( WARNING: .*)?", lines[-1]), lines[-1]
