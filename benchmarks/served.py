"""The served read-out through a real vLLM server on this CPU against the in-process engine, on the same units.

A vLLM server (``make vllm-env``; started by :mod:`murk.readout.serve` with murk's flags: float32, eager, murk's
pixel budget) serves a murk checkpoint (default: the offline demo's tiny Qwen3-VL, random weights: a pipeline
check of the machinery, which says nothing about a 2B model's speed). The units are ``--items`` items' 24
conditions each (:func:`murk.scene.render_conditions`, constant depth 13.8 m, as ``benchmarks/cpu_batch.py``),
read out

* ``served``: by the served back-end (``ServedClient`` of :mod:`murk.readout`): every prompt of every unit one request,
  ``--max-in-flight`` requests in flight (threads); the tokens of each prompt shape checked once by ``/tokenize``;
* ``inprocess``: by the batched engine (:func:`murk.readout.read_units`, float32) on the same folder,

interleaved for ``--rounds`` rounds in alternating order (``protocol.interleave``). Before and after each served
round the server's Prometheus counters (``/metrics``) are read: requests (``vllm:request_success``), prompt
tokens (``vllm:prompt_tokens``), the prefix cache (``vllm:prefix_cache_hits / vllm:prefix_cache_queries``, in
tokens) and the multimodal cache (``vllm:mm_cache_hits / vllm:mm_cache_queries``, in images: vLLM's cache of
processed image inputs, the "encoder cache" of issue 41). The server and the in-process engine share the
machine's cores; the idle server is not stopped during the in-process rounds.

Last line: ``requests_per_s= prompt_tokens_per_s= prefix_cache_hit= mm_cache_hit= units_per_s_served=
units_per_s_inprocess= served_ratio= served_ratio_range= max_abs_dr= requests= load_max= cpus=`` (``max_abs_dr``:
the largest difference of any numeric read-out between the two, float32; their texts must be equal).

Run: ``python benchmarks/served.py`` (needs ``make vllm-env`` or ``VLLM_VENV=``; about 5 minutes on 2 cores with
the defaults, the server's start included).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

import numpy as np  # noqa: E402
from protocol import LoadLog, fmt_ratio, interleave, ratio_summary  # noqa: E402

from murk.core import load_config  # noqa: E402
from murk.protocol import questions_for_item  # noqa: E402
from murk.readout import serve  # noqa: E402

#: the counters read from /metrics (summed over their label sets)
COUNTERS = ("vllm:request_success", "vllm:prompt_tokens", "vllm:prefix_cache_queries", "vllm:prefix_cache_hits",
            "vllm:mm_cache_queries", "vllm:mm_cache_hits")


def scrape(base_url: str) -> dict[str, float]:
    """The :data:`COUNTERS` of a vLLM server's ``/metrics`` (Prometheus text; ``prometheus_client``'s parser)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{base_url}/metrics", timeout=30).text
    out = dict.fromkeys(COUNTERS, 0.0)
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            name = s.name[: -len("_total")] if s.name.endswith("_total") else s.name
            if name in out and not s.name.endswith("_created"):
                out[name] += float(s.value)
    return out


def start_server(folder: Path, name: str, log: Path) -> tuple[subprocess.Popen, str]:
    """The vLLM server on ``folder`` with murk's flags (:mod:`murk.readout.serve`), once it answers."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = serve.server_command(folder, name=name, port=port, python=serve.vllm_python(),
                               image_kwargs=serve.served_image_kwargs(folder))
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=serve.server_env(1.0),
                                start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    serve.wait_until_healthy(base, proc, log=log)
    return proc, base


def make_units(n_items: int, cfg):
    """``n_items`` items' 24 conditions each (the other item's image as the shuffled control)."""
    from readout import ROWS, _images  # benchmarks/readout.py: its items and COCO sample images

    from murk.readout import Unit
    from murk.scene import render_conditions

    images = _images(max(2, n_items))
    units = []
    for i in range(n_items):
        depth = np.full(images[i].shape[:2], 13.8, dtype=np.float32)
        qs = tuple(questions_for_item(ROWS[i], cfg))
        for arm, level, img in render_conditions(images[i], depth, (120.0, 140.0, 160.0, 150.0),
                                                 images[(i + 1) % len(images)], seed=1, image_id=i + 1, config=cfg):
            units.append(Unit(i, arm, level, img, qs))
    return units


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folder", help="a model folder (default: the tiny Qwen3-VL checkpoint, built here)")
    ap.add_argument("--items", type=int, default=1, help="items (24 units each)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds of the two arms")
    ap.add_argument("--max-in-flight", type=int, default=20, help="the served client's requests in flight")
    args = ap.parse_args()
    from murk import readout
    from readout import max_readout_diff

    log = LoadLog("served")
    cfg = load_config()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.folder) if args.folder else None
        if folder is None:
            from murk.offline import build_tiny_checkpoint

            folder = build_tiny_checkpoint("qwen3vl", Path(tmp) / "qwen3vl", seed=0)
        units = make_units(args.items, cfg)
        t0 = time.time()
        proc, base = start_server(folder, "bench", Path(tmp) / "vllm.log")
        print(f"served: server up in {time.time() - t0:.0f} s at {base}", flush=True)
        try:
            head = readout.load_served_vlm(str(folder), config=cfg)
            client = readout.ServedClient(readout.ServedModel(f"{base}/v1", "bench", args.max_in_flight), head, cfg)
            client.probe()
            vlm = readout.load_vlm(str(folder), device="cpu", config=cfg)
            got: dict[str, list] = {}
            deltas: list[dict[str, float]] = []

            def served():
                before = scrape(base)
                with ThreadPoolExecutor(args.max_in_flight) as pool:
                    plans = [client.unit_requests(u) for u in units]
                    futs = [[pool.submit(client.ask, b, i, (s.user, size), f"unit {k}")
                             for s, b, i in zip(slots, bodies, ids)]
                            for k, (slots, bodies, ids, size) in enumerate(plans)]
                    got["served"] = [client.readouts(u, p[0], [f.result() for f in fs])
                                     for u, p, fs in zip(units, plans, futs)]
                after = scrape(base)
                deltas.append({k: after[k] - before[k] for k in COUNTERS})

            def inprocess():
                got["inprocess"] = readout.read_units(vlm, units, cfg)

            readout.read_units(vlm, units[:2], cfg)  # warm-up (allocations, first-call overheads)
            secs = interleave({"served": served, "inprocess": inprocess}, args.rounds, log)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    ups = {a: [len(units) / t for t in secs[a]] for a in secs}
    ratio = ratio_summary(ups["served"], ups["inprocess"])
    dr = max(max_readout_diff(a, b) for a, b in zip(got["served"], got["inprocess"]))
    tot = {k: sum(d[k] for d in deltas) for k in COUNTERS}
    served_s = sum(secs["served"])
    rate = lambda hits, queries: tot[hits] / tot[queries] if tot[queries] else float("nan")  # noqa: E731
    for a in secs:
        print(f"{a}: {len(units)} units, {statistics.median(ups[a]):.3f} units/s (rounds: "
              f"{', '.join(f'{u:.3f}' for u in ups[a])})", flush=True)
    log.end()
    print(f"requests_per_s={tot['vllm:request_success'] / served_s:.1f} "
          f"prompt_tokens_per_s={tot['vllm:prompt_tokens'] / served_s:.0f} "
          f"prefix_cache_hit={rate('vllm:prefix_cache_hits', 'vllm:prefix_cache_queries'):.3f} "
          f"mm_cache_hit={rate('vllm:mm_cache_hits', 'vllm:mm_cache_queries'):.3f} "
          f"units_per_s_served={statistics.median(ups['served']):.3f} "
          f"units_per_s_inprocess={statistics.median(ups['inprocess']):.3f} {fmt_ratio('served_ratio', ratio)} "
          f"max_abs_dr={dr:.2e} requests={int(tot['vllm:request_success'])} {log.tail()}")


if __name__ == "__main__":
    main()
