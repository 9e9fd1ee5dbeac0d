"""The first command works offline (issue 39 item 6): without network, `make demo` runs the offline demo.

The Snakefile decides offline or online before any stage runs (:func:`murk.core.resolve_offline`: MURK_OFFLINE
or HF_HUB_OFFLINE when set, else a short probe of the hub and COCO), says so in one line, and offline without
MURK_COCO_DIR reads the COCO sample next to the project (:func:`murk.core.resolve_coco_dir`); with neither,
one line says what to set. The probe is made to fail by pointing it at a closed local port (MURK_NETWORK_PROBE).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from murk.core import _online
from murk.core import settings
from murk.core import _paths as paths

import stages

ROOT = paths.project_root()
CLOSED = "127.0.0.1:1"   # nothing listens there: the connection is refused at once


def _no_probe():
    raise AssertionError("probed although the environment decided")


def test_a_failed_probe_means_offline_and_says_so_in_one_line():
    t0 = time.monotonic()
    offline, line = _online.resolve_offline({"MURK_NETWORK_PROBE": CLOSED},
                                            probe=lambda: _online.probe_network(environ={"MURK_NETWORK_PROBE": CLOSED}))
    assert time.monotonic() - t0 < 5
    assert offline is True and line and "\n" not in line
    assert line.startswith("murk: no network") and CLOSED in line and "offline demo" in line and "MURK_OFFLINE=0" in line
    # the environment decides without a probe: MURK_OFFLINE either way, HF_HUB_OFFLINE (the online models from the cache)
    assert _online.resolve_offline({"MURK_OFFLINE": "1"}, probe=_no_probe) == (True, None)
    assert _online.resolve_offline({"MURK_OFFLINE": "0"}, probe=_no_probe) == (False, None)
    assert _online.resolve_offline({"HF_HUB_OFFLINE": "1"}, probe=_no_probe) == (False, None)
    assert _online.resolve_offline({}, probe=lambda: None) == (False, None)   # the network answers: as before


def test_probe_reports_the_host_that_did_not_answer():
    assert _online.probe_network([CLOSED], timeout_s=1.0).startswith(CLOSED)
    assert "not host:port" in _online.probe_network(["no-port-here"], timeout_s=1.0)
    # behind a proxy, the proxy is what must answer
    assert _online.probe_network(environ={"HTTPS_PROXY": "http://127.0.0.1:1"}, timeout_s=1.0).startswith(CLOSED)


def test_offline_coco_is_the_sample_next_to_the_project_or_one_line(monkeypatch, tmp_path):
    assert _online.sample_coco_dir() == ROOT.parent / "shared" / "coco-val2017-sample"
    if _online.sample_coco_dir().is_dir():
        folder, line = _online.resolve_coco_dir(None, {}, offline=True)
        assert folder == str(_online.sample_coco_dir()) and "MURK_COCO_DIR" in line
    assert _online.resolve_coco_dir(None, {}, offline=False) == ("", None)   # online: fetched into outputs/coco
    given = tmp_path / "coco"
    given.mkdir()
    assert _online.resolve_coco_dir(None, {"MURK_COCO_DIR": str(given)}, offline=True) == (str(given), None)
    monkeypatch.setattr(_online, "sample_coco_dir", lambda: tmp_path / "no-sample")
    with pytest.raises(settings.SettingsError) as e:
        _online.resolve_coco_dir(None, {}, offline=True)
    assert "\n" not in str(e.value) and "set MURK_COCO_DIR" in str(e.value) and "nothing was written" in str(e.value)


@pytest.mark.skipif(not _online.sample_coco_dir().is_dir(),
                    reason=f"no COCO sample next to the project ({_online.sample_coco_dir()}), which the offline "
                           f"plan reads when MURK_COCO_DIR is unset, as here")
def test_the_snakefile_plans_the_offline_demo_when_the_probe_fails(tmp_path):
    """`make plan` (a dry run, about 3 s) with no MURK_OFFLINE, no MURK_COCO_DIR and no network: the one line, the
    offline models and select reading the sample; nothing is written into the output root."""
    env = {k: v for k, v in os.environ.items() if k not in ("MURK_OFFLINE", "MURK_COCO_DIR", "HF_HUB_OFFLINE",
                                                             "HTTPS_PROXY", "https_proxy")}
    env.update(MURK_NETWORK_PROBE=CLOSED, PATH=f"{stages.BIN}:{env['PATH']}")
    out = tmp_path / "outputs"
    r = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "-n", "-p", "--config", f"output_dir={out}"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    text = r.stdout + r.stderr
    assert r.returncode == 0, text[-3000:]
    lines = [ln for ln in text.splitlines() if ln.startswith("murk: no network")]
    assert len(lines) == 1 and CLOSED in lines[0], text[-3000:]
    assert "offline_models, since MURK_OFFLINE=1" in text and "murk-tiny/smolvlm" in text
    select = text[text.index("rule select:"):]
    select = select[:select.index("\n\n")]
    assert f"coco_dir {_online.sample_coco_dir()}" in text[text.index("rule select:"):], select
    assert not out.exists()
