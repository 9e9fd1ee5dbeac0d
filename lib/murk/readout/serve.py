"""Start a vLLM OpenAI-compatible server for a murk model folder, presenting images as murk does (issue 41).

``python -m murk.readout.serve FOLDER [--name NAME] [--port 8000]`` runs the server of the project's vLLM
environment (``make vllm-env``: ``.venv-vllm``, or the folder ``VLLM_VENV`` names) in the foreground, prints
its base URL once it answers, and stops it on Ctrl-C or SIGTERM. The flags are the ones that make the server's
prompts identical to murk's in-process read-out (shared/notes/real-tools.md, docs/served.md):

- ``--dtype float32``, ``--enforce-eager`` (no graph capture) and ``--max-model-len 2048``;
- ``--mm-processor-kwargs``: the model's single-tile pixel budget as murk presents it, computed by
  :func:`murk.readout.single_tile_kwargs` from the folder's own processor and ``render.max_side_px`` of the
  configuration (never typed twice), e.g. ``{"size": {"shortest_edge": 1024, "longest_edge": 200704}}`` for
  Qwen3-VL and ``{"do_image_splitting": false}`` for SmolVLM;
- ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache on a CPU; ``--kv-cache-gib``).

The server is started from an argument list, never a shell string; its process is in the launcher's process
group, so killing the group stops both.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from murk import core

__all__ = ["VLLM_ENV_VAR", "SERVER_MODULE", "START_TIMEOUT_S", "VllmEnvError", "vllm_python", "served_image_kwargs",
           "server_command", "server_env", "wait_until_healthy", "main"]

#: the environment variable naming the vLLM virtual environment (default: ``<project>/.venv-vllm``)
VLLM_ENV_VAR = "VLLM_VENV"
#: vLLM's OpenAI-compatible server, run as a module: the ``vllm`` console script fails in the ``vllm-cpu``
#: distribution (``PackageNotFoundError: vllm``)
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
#: seconds to wait for a server to answer ``/health`` (measured start on 2 CPU cores: 45-75 s)
START_TIMEOUT_S = 240.0
#: the stamp tools/vllm-cpu-env writes when the environment is complete
_STAMP = ".murk-vllm-env"


class VllmEnvError(RuntimeError):
    """The vLLM environment is missing or incomplete (one line, naming the folder and ``make vllm-env``)."""


def vllm_python(venv: str | os.PathLike | None = None) -> Path:
    """The Python of the project's vLLM environment.

    Parameters
    ----------
    venv : path, optional
        The environment's folder; default the ``VLLM_VENV`` environment variable, else ``.venv-vllm`` in the
        project's root (:func:`murk.core.project_root`).

    Returns
    -------
    Path
        ``<venv>/bin/python``.

    Raises
    ------
    VllmEnvError
        If the folder has no Python or no stamp of a finished ``make vllm-env`` (one line, naming the fix).
    """
    folder = Path(venv or os.environ.get(VLLM_ENV_VAR) or core.project_root() / ".venv-vllm")
    py = folder / "bin" / "python"
    if not py.is_file() or not (folder / _STAMP).is_file():
        raise VllmEnvError(f"no vLLM environment in {folder}: run make vllm-env (or set {VLLM_ENV_VAR}= to the "
                           f"folder of one that make vllm-env set up)")
    return py


def served_image_kwargs(folder: str | os.PathLike, max_side_px: int | None = None) -> dict[str, Any]:
    """The image-processor arguments a server needs to present images as murk does (``--mm-processor-kwargs``).

    Parameters
    ----------
    folder : path
        A model folder (a murk tiny or real-format checkpoint, or a hub snapshot) with its processor files.
    max_side_px : int, optional
        The largest image side in pixels; default ``render.max_side_px`` of the configuration
        (data/config.yaml, 448: spec Sec. III, "at most 448^2 pixels").

    Returns
    -------
    dict
        JSON-able call-time arguments of the model's image processor (:func:`murk.readout.single_tile_kwargs`);
        empty for a processor murk passes nothing to.
    """
    from transformers import AutoProcessor

    from murk.readout._vlm import DEFAULT_MAX_SIDE_PX, single_tile_kwargs

    if max_side_px is None:
        max_side_px = int(core.load_config().get("render", {}).get("max_side_px", DEFAULT_MAX_SIDE_PX))
    processor = AutoProcessor.from_pretrained(str(folder))
    return json.loads(json.dumps(single_tile_kwargs(processor, int(max_side_px))))


def server_command(folder: str | os.PathLike, *, name: str, port: int, python: str | os.PathLike,
                   image_kwargs: Mapping[str, Any], host: str = "127.0.0.1", max_model_len: int = 2048,
                   dtype: str = "float32", extra: Sequence[str] = ()) -> list[str]:
    """The argument list that starts vLLM's OpenAI-compatible server on ``folder`` (no shell).

    Parameters
    ----------
    folder : path
        The model folder.
    name : str
        The served model name (the ``model`` field of requests).
    port : int
        The TCP port; ``host`` the address to bind (default loopback).
    python : path
        The vLLM environment's Python (:func:`vllm_python`).
    image_kwargs : mapping
        ``--mm-processor-kwargs`` (:func:`served_image_kwargs`); left out when empty.
    max_model_len, dtype : int, str
        The context length in tokens (2048: murk's prompts are ~200-300 tokens) and the weights' dtype
        (float32: the in-process read-out's CPU dtype, for agreement within 1e-6).
    extra : sequence of str
        Further server flags, passed as they are (e.g. ``--tensor-parallel-size 2``).

    Returns
    -------
    list of str
    """
    cmd = [str(python), "-m", SERVER_MODULE, "--model", str(Path(folder).resolve()), "--served-model-name", name,
           "--host", host, "--port", str(int(port)), "--dtype", dtype, "--enforce-eager",
           "--max-model-len", str(int(max_model_len))]
    if image_kwargs:
        cmd += ["--mm-processor-kwargs", json.dumps(dict(image_kwargs), sort_keys=True)]
    return cmd + [str(a) for a in extra]


def server_env(kv_cache_gib: float = 1.0, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: ``base`` (default ``os.environ``) with ``VLLM_CPU_KVCACHE_SPACE`` (GiB) set
    and murk's ``PYTHONPATH`` removed (the vLLM environment has its own transformers and torch)."""
    env = dict(os.environ if base is None else base)
    env.pop("PYTHONPATH", None)
    env["VLLM_CPU_KVCACHE_SPACE"] = f"{kv_cache_gib:g}"
    return env


def wait_until_healthy(base_url: str, proc: subprocess.Popen | None = None, timeout_s: float = START_TIMEOUT_S,
                       log: str | os.PathLike | None = None) -> None:
    """Wait until ``<base_url>/health`` answers 200.

    Parameters
    ----------
    base_url : str
        ``http://HOST:PORT`` (without ``/v1``).
    proc : subprocess.Popen, optional
        The server's process: its end stops the wait at once.
    timeout_s : float
        Seconds to wait (default :data:`START_TIMEOUT_S`).
    log : path, optional
        The server's log: its last lines go into the error.

    Raises
    ------
    RuntimeError
        The server ended or did not answer in time (naming which, with the log's last lines).
    """
    import httpx

    def tail() -> str:
        if log is None or not Path(log).is_file():
            return ""
        lines = Path(log).read_text(errors="replace").splitlines()[-25:]
        return "\n  server log (last lines):\n  " + "\n  ".join(lines)

    deadline = time.monotonic() + timeout_s
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the vLLM server at {base_url} ended (exit status {proc.returncode}) before it "
                               f"answered{tail()}")
        try:
            if httpx.get(f"{base_url}/health", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the vLLM server at {base_url} did not answer /health within {timeout_s:.0f} s"
                               f"{tail()}")
        time.sleep(1.0)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m murk.readout.serve FOLDER``: run the server in the foreground (see the module's text)."""
    ap = argparse.ArgumentParser(prog="python -m murk.readout.serve", description=__doc__.splitlines()[0])
    ap.add_argument("folder", help="the model folder (processor and weights)")
    ap.add_argument("--name", help="the served model name (default: the folder's name)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--kv-cache-gib", type=float, default=1.0, help="VLLM_CPU_KVCACHE_SPACE (default 1)")
    ap.add_argument("--max-side-px", type=int, help="the largest image side (default: render.max_side_px)")
    ap.add_argument("--timeout", type=float, default=START_TIMEOUT_S, help="seconds to wait for the server")
    ap.add_argument("--venv", help=f"the vLLM environment (default: ${VLLM_ENV_VAR}, else .venv-vllm)")
    ap.epilog = "Further vLLM server flags go after --, e.g. -- --tensor-parallel-size 2 (docs/served.md)."
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    prog = "python -m murk.readout.serve"
    folder = Path(args.folder)
    if not (folder / "config.json").is_file():
        print(f"{prog}: {folder} is no model folder (no config.json): pass the folder of a checkpoint",
              file=sys.stderr)
        return 2
    try:
        python = vllm_python(args.venv)
    except VllmEnvError as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 2
    cmd = server_command(folder, name=args.name or folder.name, port=args.port, python=python, host=args.host,
                         image_kwargs=served_image_kwargs(folder, args.max_side_px), extra=extra)
    proc = subprocess.Popen(cmd, env=server_env(args.kv_cache_gib))

    def stop(signum, _frame):
        proc.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    host = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
    base = f"http://{host}:{args.port}"
    try:
        wait_until_healthy(base, proc, args.timeout)
        print(f"{base}/v1", flush=True)
        return proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGTERM)
        return proc.wait()
    except RuntimeError as err:
        print(f"{prog}: {err}", file=sys.stderr)
        proc.kill()
        proc.wait()
        return 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
