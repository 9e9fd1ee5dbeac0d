"""A real vLLM server for the tests that read out through one (marker ``served``; ``make test-served``).

:class:`VllmServer` starts ``python -m murk.readout.serve`` (the project's launcher, so the tests run the
flags users run) on a model folder on a free loopback port, in its own process group, with its output in a log
file; :meth:`~VllmServer.start` returns once ``/health`` answers (at most ``timeout_s``, the log's last lines in
the error), :meth:`~VllmServer.kill` SIGKILLs the whole group (launcher and server: a crashed server, for the
fault tests), :meth:`~VllmServer.start` again restarts it on the same port, and :meth:`~VllmServer.stop` (also
run at the interpreter's exit) ends it. The session fixture ``vllm_server`` (tests/conftest.py) serves the
offline demo's Qwen3-VL checkpoint (``murk-tiny/qwen3vl``); it skips when the vLLM environment is absent
(``make vllm-env``). One server takes about 5 GB and a minute to start: run these tests with ``-n 0``.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from murk.readout.serve import START_TIMEOUT_S, vllm_python, wait_until_healthy

LIB = Path(__file__).resolve().parents[1] / "lib"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VllmServer:
    """One vLLM OpenAI-compatible server on a murk model folder, started through the launcher.

    Attributes
    ----------
    folder : Path
        The model folder served.
    name : str
        The served model name (the requests' ``model``).
    port : int
        The loopback port (kept across restarts).
    base_url : str
        ``http://127.0.0.1:PORT`` (``/health``, ``/tokenize``, ``/metrics``).
    api_url : str
        ``base_url + "/v1"`` (the OpenAI-compatible API: ``/v1/chat/completions``).
    log : Path
        The launcher's and the server's output (appended at each start).
    venv : str or None
        The vLLM environment (default: ``VLLM_VENV``, else ``.venv-vllm``).
    """

    def __init__(self, folder, name: str, log_dir, *, port: int | None = None, venv: str | None = None,
                 kv_cache_gib: float = 1.0, timeout_s: float = START_TIMEOUT_S):
        self.folder = Path(folder)
        self.name = name
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.api_url = self.base_url + "/v1"
        self.log = Path(log_dir) / f"vllm-{self.port}.log"
        self.venv = venv
        self.kv_cache_gib = kv_cache_gib
        self.timeout_s = timeout_s
        self.proc: subprocess.Popen | None = None
        self.python = vllm_python(venv)  # raises VllmEnvError (one line: run make vllm-env) before any start
        atexit.register(self.stop)

    @property
    def alive(self) -> bool:
        """Whether the launcher's process is running (it ends with the server)."""
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> "VllmServer":
        """Start the server (if not running) and wait until it answers; returns ``self``.

        Raises RuntimeError (with the log's last lines) if it ends or does not answer within ``timeout_s``.
        """
        if self.alive:
            return self
        cmd = [sys.executable, "-m", "murk.readout.serve", str(self.folder), "--name", self.name,
               "--port", str(self.port), "--kv-cache-gib", f"{self.kv_cache_gib:g}", "--timeout",
               f"{self.timeout_s:g}"]
        if self.venv:
            cmd += ["--venv", str(self.venv)]
        env = dict(os.environ, PYTHONPATH=str(LIB), PYTHONUNBUFFERED="1")
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            # its own process group: kill() ends the launcher and the server together
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        try:
            wait_until_healthy(self.base_url, self.proc, self.timeout_s, self.log)
        except BaseException:
            self.kill()
            raise
        return self

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def kill(self) -> None:
        """SIGKILL the launcher's process group (the server dies as in a crash) and reap it."""
        if self.proc is None:
            return
        self._signal_group(signal.SIGKILL)
        self.proc.wait()

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM the process group, then SIGKILL what is left after ``grace_s`` seconds."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                pass
        self.kill()  # the server's workers too, whatever the launcher did

    def log_tail(self, n: int = 40) -> str:
        """The log's last ``n`` lines (for a failing test's message)."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:]) if self.log.is_file() else ""


class SlowProxy:
    """A forwarding HTTP proxy in front of a server that holds each request ``delay_s`` before passing it on, so
    that a read-out through it takes long enough for a test to act between two of its images (the fault test kills
    the server once the first image is written: without the delay, the second image of the tiny model can be done
    before the test sees the first). A request the server does not answer (killed) gets no response either: the
    connection is closed, as the server's own would be.

    Attributes
    ----------
    url : str
        ``http://127.0.0.1:PORT``: the server's root through the proxy (add ``/v1`` for the API).
    """

    def __init__(self, target: str, delay_s: float = 0.1) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        import httpx

        client = httpx.Client(base_url=target.rstrip("/"), timeout=120.0)

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                import time

                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                time.sleep(delay_s)
                try:
                    r = client.request(self.command, self.path, content=body,
                                       headers={"Content-Type": self.headers.get("Content-Type", "application/json")})
                except httpx.TransportError:
                    self.close_connection = True   # no answer: the client sees the connection closed
                    return
                self.send_response(r.status_code)
                self.send_header("Content-Type", r.headers.get("content-type", "application/json"))
                self.send_header("Content-Length", str(len(r.content)))
                self.end_headers()
                self.wfile.write(r.content)

            do_GET = do_POST = _forward

            def log_message(self, *args) -> None:   # quiet
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._client = client
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._client.close()
