"""murk.readout.serve, the launcher of a vLLM server for a murk model folder (issue 41), without vLLM: the flags
that keep the server's prompts murk's (the pixel budget derived from murk's presentation), the argument list (no
shell), the one-line refusals, and the launcher's life cycle against a stand-in server. The real server:
tests/scenarios/test_served_tokenize.py (marker served)."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from murk.readout import serve

LIB = Path(__file__).resolve().parents[1] / "lib"


def _fake_venv(tmp_path: Path, server_py: str | None = None, stamp: bool = True) -> Path:
    """A folder that looks like a finished vLLM environment: bin/python runs ``server_py`` (a stand-in)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    script = tmp_path / "fake_server.py"
    script.write_text(server_py or "import sys; sys.exit(3)\n")
    py = venv / "bin" / "python"
    py.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    py.chmod(0o755)
    if stamp:
        (venv / ".murk-vllm-env").write_text("x\n")
    return venv


def test_pixel_budget_comes_from_murks_presentation(tiny_checkpoint_dirs):
    """Qwen3-VL gets murk's pixel budget (max_side_px^2 as the longest edge's area) and follows max_side_px;
    SmolVLM gets one tile (no splitting): the same arguments as murk's in-process processor calls."""
    from transformers import AutoProcessor

    from murk.readout import single_tile_kwargs

    qwen = tiny_checkpoint_dirs["qwen3vl"]
    assert serve.served_image_kwargs(qwen) == {"size": {"shortest_edge": 1024, "longest_edge": 448 * 448}}
    assert serve.served_image_kwargs(qwen, 224)["size"]["longest_edge"] == 224 * 224
    assert serve.served_image_kwargs(tiny_checkpoint_dirs["smolvlm"]) == {"do_image_splitting": False}
    for arch in ("qwen3vl", "smolvlm"):
        folder = tiny_checkpoint_dirs[arch]
        want = single_tile_kwargs(AutoProcessor.from_pretrained(str(folder)), 448)
        assert serve.served_image_kwargs(folder) == json.loads(json.dumps(want))


def test_server_command_is_an_argument_list_with_murks_flags(tmp_path):
    """Every flag the agreement needs is there; a folder or name with shell characters stays one argument."""
    folder = tmp_path / "a model; rm -rf x"
    folder.mkdir()
    kwargs = {"size": {"shortest_edge": 1024, "longest_edge": 200704}}
    cmd = serve.server_command(folder, name="m $(x)", port=8123, python="/v/bin/python", image_kwargs=kwargs,
                               extra=["--tensor-parallel-size", "2"])
    assert cmd[:3] == ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    flag = {a: cmd[i + 1] for i, a in enumerate(cmd[:-1]) if a.startswith("--")}
    assert flag["--model"] == str(folder.resolve()) and flag["--served-model-name"] == "m $(x)"
    assert flag["--dtype"] == "float32" and flag["--max-model-len"] == "2048" and flag["--port"] == "8123"
    assert flag["--host"] == "127.0.0.1" and "--enforce-eager" in cmd
    assert json.loads(flag["--mm-processor-kwargs"]) == kwargs
    assert cmd[-2:] == ["--tensor-parallel-size", "2"]
    assert "--mm-processor-kwargs" not in serve.server_command(folder, name="m", port=1, python="p", image_kwargs={})


def test_server_env_sets_the_kv_cache_and_drops_murks_path():
    env = serve.server_env(2.5, base={"PYTHONPATH": "/murk/lib", "HOME": "/h"})
    assert env == {"HOME": "/h", "VLLM_CPU_KVCACHE_SPACE": "2.5"}


def test_missing_or_unfinished_vllm_env_is_one_line_naming_make_vllm_env(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_VENV", str(tmp_path / "none"))
    with pytest.raises(serve.VllmEnvError, match=r"no vLLM environment in .*none: run make vllm-env"):
        serve.vllm_python()
    unfinished = _fake_venv(tmp_path, stamp=False)
    with pytest.raises(serve.VllmEnvError, match="run make vllm-env"):
        serve.vllm_python(unfinished)
    finished = _fake_venv(tmp_path / "ok")
    assert serve.vllm_python(finished) == finished / "bin" / "python"
    monkeypatch.setenv("VLLM_VENV", str(finished))
    assert serve.vllm_python() == finished / "bin" / "python"


def _launch(args, tmp_path, env_extra=None):
    env = dict(os.environ, PYTHONPATH=str(LIB), PYTHONUNBUFFERED="1", **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "murk.readout.serve", *args], capture_output=True, text=True,
                          env=env, timeout=120, cwd=tmp_path)


def test_launcher_refuses_in_one_line_and_starts_nothing(tmp_path, tiny_checkpoint_dirs):
    """No model folder, or no vLLM environment: exit status 2, one line naming the fix, no server started."""
    r = _launch([str(tmp_path)], tmp_path, {"VLLM_VENV": str(tmp_path / "none")})
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [f"python -m murk.readout.serve: {tmp_path} is no model folder (no "
                                             "config.json): pass the folder of a checkpoint"]
    r = _launch([str(tiny_checkpoint_dirs["qwen3vl"])], tmp_path, {"VLLM_VENV": str(tmp_path / "none")})
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "run make vllm-env" in r.stderr


_STAND_IN = textwrap.dedent("""\
    # a stand-in for vLLM's server: records its arguments and environment, answers /health, ends on SIGTERM
    import http.server, json, os, signal, sys
    argv = sys.argv[1:]
    port = int(argv[argv.index("--port") + 1])
    with open(os.environ["RECORD"], "w") as f:
        json.dump({"argv": argv, "kv": os.environ.get("VLLM_CPU_KVCACHE_SPACE"),
                   "pythonpath": os.environ.get("PYTHONPATH")}, f)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404); self.end_headers()
        def log_message(self, *a):
            pass
    def bye(*_):
        open(os.environ["RECORD"] + ".ended", "w").close(); sys.exit(0)
    signal.signal(signal.SIGTERM, bye)
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
    """)


def test_launcher_prints_the_base_url_when_healthy_and_stops_the_server(tmp_path, tiny_checkpoint_dirs):
    """Against a stand-in server: the launcher passes murk's flags and the KV-cache size, prints the base URL
    once /health answers, and ends the server on SIGTERM."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    venv = _fake_venv(tmp_path, _STAND_IN)
    record = tmp_path / "record.json"
    folder = tiny_checkpoint_dirs["qwen3vl"]
    env = dict(os.environ, PYTHONPATH=str(LIB), PYTHONUNBUFFERED="1", RECORD=str(record))
    p = subprocess.Popen([sys.executable, "-m", "murk.readout.serve", str(folder), "--name", "tiny", "--port",
                          str(port), "--venv", str(venv), "--kv-cache-gib", "2", "--", "--seed", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        line = p.stdout.readline().strip()
        assert line == f"http://127.0.0.1:{port}/v1", p.stderr.read() if p.poll() is not None else line
        got = json.loads(record.read_text())
        assert got["kv"] == "2" and got["pythonpath"] is None
        assert got["argv"][got["argv"].index("--served-model-name") + 1] == "tiny"
        assert json.loads(got["argv"][got["argv"].index("--mm-processor-kwargs") + 1]) == \
            serve.served_image_kwargs(folder)
        assert got["argv"][-2:] == ["--seed", "0"]
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == 0
        assert (tmp_path / "record.json.ended").exists()
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # the launcher and a stand-in it failed to stop
        except ProcessLookupError:
            pass
        p.wait()
