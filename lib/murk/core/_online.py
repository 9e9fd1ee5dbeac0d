"""Offline or online, decided before anything runs: a short probe of the hub and COCO, the offline switches
(``MURK_OFFLINE``, ``HF_HUB_OFFLINE``), the COCO folder of a run, and the one announcement of what murk chose.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Mapping, Sequence

from murk.core.settings import RunSettings, SettingsError

__all__ = ["announce", "NETWORK_PROBE", "PROBE_TIMEOUT_S", "probe_network", "resolve_offline", "resolve_coco_dir",
           "sample_coco_dir"]


_ANNOUNCED: set[str] = set()


# ----------------------------------------------------------------------------- offline or online, before anything runs

#: what an online run needs (``host:port``): the Hugging Face hub (the weights) and COCO (annotations, images);
#: ``MURK_NETWORK_PROBE`` (blank-separated ``host:port`` items) probes others, e.g. a mirror
NETWORK_PROBE = ("huggingface.co:443", "images.cocodataset.org:80")
#: how long the probe waits for each host (s); the hosts are tried at the same time
PROBE_TIMEOUT_S = 3.0


def _truthy(text: str) -> bool:
    return str(text).strip().lower() in {"1", "true", "yes"}


def probe_network(targets: Sequence[str] | None = None, timeout_s: float = PROBE_TIMEOUT_S,
                  environ: Mapping[str, str] | None = None) -> str | None:
    """Whether the hosts an online run needs answer: a TCP connection to each, all at once.

    Parameters
    ----------
    targets : sequence of str, optional
        ``host:port`` items; default ``$MURK_NETWORK_PROBE`` (blank-separated), else :data:`NETWORK_PROBE`.
        Behind a proxy (``HTTPS_PROXY`` / ``https_proxy`` set) the proxy's host and port are probed instead.
    timeout_s : float
        Seconds to wait for each connection (they run in parallel: the probe takes at most about this long).
    environ : mapping, optional
        Default ``os.environ``.

    Returns
    -------
    str or None
        None when every host accepted a connection; else the first host that did not and why
        (``"huggingface.co:443 (timed out after 3 s)"``), for the message.
    """
    import socket
    from concurrent.futures import ThreadPoolExecutor
    from urllib.parse import urlsplit

    env = os.environ if environ is None else environ
    if targets is None:
        proxy = env.get("HTTPS_PROXY") or env.get("https_proxy") or ""
        if proxy.strip():
            u = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
            targets = [f"{u.hostname}:{u.port or 80}"]
        else:
            targets = env.get("MURK_NETWORK_PROBE", "").split() or list(NETWORK_PROBE)

    def attempt(target: str) -> str | None:
        host, _, port = target.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
                return None
        except (OSError, ValueError) as e:
            why = f"timed out after {timeout_s:g} s" if isinstance(e, (socket.timeout, TimeoutError)) else (
                e.strerror or type(e).__name__ if isinstance(e, OSError) else f"not host:port: {e}")
            return f"{target} ({why})"

    with ThreadPoolExecutor(max_workers=max(1, len(targets))) as pool:
        failed = [r for r in pool.map(attempt, targets) if r]
    return failed[0] if failed else None


def resolve_offline(environ: Mapping[str, str] | None = None, probe=probe_network) -> tuple[bool, str | None]:
    """Whether a run is offline (murk's tiny checkpoints, no download), and the line that says so when murk chose.

    Parameters
    ----------
    environ : mapping, optional
        Default ``os.environ``. ``MURK_OFFLINE`` set (``1``/``true``/``yes``, or anything else: online) or
        ``HF_HUB_OFFLINE`` set decides, without a probe (``HF_HUB_OFFLINE=1`` alone keeps the online models,
        read from the Hugging Face cache, as before).
    probe : callable
        :func:`probe_network` (tests pass another): None when the network answers, else why not.

    Returns
    -------
    (bool, str or None)
        Offline or not; the one line to print when the probe decided offline (None otherwise).
    """
    env = os.environ if environ is None else environ
    if env.get("MURK_OFFLINE", "").strip():
        return _truthy(env["MURK_OFFLINE"]), None
    if env.get("HF_HUB_OFFLINE", "").strip():
        return False, None
    why = probe()
    if why is None:
        return False, None
    return True, (f"murk: no network ({why}): this is the offline demo, as MURK_OFFLINE=1 runs it: murk's tiny "
                  f"random-weight checkpoints and COCO from a local folder, its numbers pipeline checks; "
                  f"MURK_OFFLINE=0 forces the online run, MURK_OFFLINE=1 skips this check")


def sample_coco_dir() -> Path:
    """The COCO val2017 sample next to the project (``../shared/coco-val2017-sample``), where tests and CI read it."""
    from murk.core import _paths as paths

    return paths.project_root().parent / "shared" / "coco-val2017-sample"


def resolve_coco_dir(configured: str | None, environ: Mapping[str, str] | None = None, offline: bool = False,
                     cwd: str | os.PathLike | None = None) -> tuple[str, str | None]:
    """The COCO folder of a run (absolute, or ``""``: online, fetched into ``outputs/coco``) and a line to print.

    Parameters
    ----------
    configured : str or None
        The run setting ``coco_dir``.
    environ : mapping, optional
        Default ``os.environ`` (``MURK_COCO_DIR``).
    offline : bool
        An offline run (:func:`resolve_offline`): without ``coco_dir`` and ``MURK_COCO_DIR`` it reads the sample
        next to the project (:func:`sample_coco_dir`), if there.
    cwd : path, optional
        The folder a relative path is taken from (Snakemake's working directory).

    Returns
    -------
    (str, str or None)
        The folder (``""`` online without one), and the line naming the sample when it was chosen.

    Raises
    ------
    SettingsError
        The folder given is not a folder, or an offline run has none: one line naming what to set.
    """
    env = os.environ if environ is None else environ
    given = configured or env.get("MURK_COCO_DIR") or ""
    base = Path(cwd or os.getcwd())
    if given:
        folder = base / os.path.expanduser(given)
        if not folder.is_dir():
            raise SettingsError(f"COCO folder {given!r} (MURK_COCO_DIR or coco_dir) is not a folder: point it at a "
                                f"folder in COCO's layout, e.g. ../shared/coco-val2017-sample")
        return os.path.abspath(folder), None
    if not offline:
        return "", None
    sample = sample_coco_dir()
    if sample.is_dir():
        return str(sample), f"murk: COCO from the sample {sample} (MURK_COCO_DIR is not set)"
    raise SettingsError(f"murk: an offline run needs a COCO folder and {sample} is not there: set MURK_COCO_DIR to a "
                        f"folder in COCO's layout (annotations/instances_val2017.json, val2017/), e.g. "
                        f"MURK_COCO_DIR=/path/to/coco-val2017-sample make demo; nothing was written")


def announce(run: RunSettings, file=None) -> list[str]:
    """Print the start lines of a run (:attr:`RunSettings.notes`) once per process, to stderr.

    Parameters
    ----------
    run : RunSettings
        From :func:`check_run_settings`.
    file : file, optional
        Default ``sys.stderr``.

    Returns
    -------
    list of str
        The lines printed (empty when this process printed them already).
    """
    lines = [n for n in run.notes if n not in _ANNOUNCED]
    for n in lines:
        print(n, file=file or sys.stderr)
    _ANNOUNCED.update(lines)
    return lines

