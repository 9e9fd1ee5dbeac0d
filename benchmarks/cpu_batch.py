"""CPU benchmark: images per scheduled batch of the batched engine, and where its time goes (issue 25 item 4).

The read-out stage reads one image (its 24 conditions = 24 units) per scheduled batch on a CPU
(:func:`murk.readout.auto_images_per_batch` caps ``k`` at 1 there). A larger batch makes the decode
steps fewer and larger (the verbal continuations of 2 images in one greedy loop: each step reads
the weights once for twice the rows) and the prefills longer. This script measures whether that
pays on this CPU, with the mid-size random-weight Qwen3-VL and the real tokenizer of
``benchmarks/readout.py`` (193 M parameters, 448 x 448 px, float32):

* arms ``k1`` (item 0's 24 units as one batch) and ``k2`` (items 0 and 1, 48 units as one batch),
  interleaved for ``--rounds`` rounds in alternating order (``protocol.interleave``); each arm's
  units per second per round, and ``k2_ratio`` (k2 over k1), the median of the per-round ratios
  with its range;
* the model's forward calls are timed and split by kind: a call whose rows have at most
  ``verbal_max_new_tokens`` positions is a decode step, the others prefills (``decode_share`` of
  the model time per arm, ``decode_steps`` per batch);
* ``mfu`` per arm: useful model FLOPs per second (``flops.model_flops``, without padding) over the
  float32 matmul peak measured in the same run (``murk.readout.matmul_gflops``, 2048^2, the higher
  of start and end), and ``padding_share`` per arm;
* ``k2_max_abs_dr``: the largest difference in any numeric read-out of item 0 between the two
  batchings (the texts must be equal): batching is exact to float32 rounding.

Last line: ``units_per_s_k1= units_per_s_k2= k2_ratio= k2_ratio_range= decode_share_k1=
decode_share_k2= decode_steps_k1= decode_steps_k2= mfu_k1= mfu_k2= padding_share_k1= padding_share_k2=
k2_max_abs_dr= peak_gflops_fp32= load_max= cpus=`` (and a warning when the load exceeded the CPUs).

Run: ``python benchmarks/cpu_batch.py`` (about 4 minutes on 2 cores with the defaults).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from flops import model_flops  # noqa: E402
from protocol import LoadLog, fmt_ratio, interleave, ratio_summary  # noqa: E402
from readout import ROWS, _images, _tokenizer, build_model, max_readout_diff  # noqa: E402

from murk.core import load_config  # noqa: E402
from murk.protocol import questions_for_item  # noqa: E402
from murk.readout import _schedule
from murk.readout import load_vlm, matmul_gflops  # noqa: E402
from murk.readout import _engine as engine  # noqa: E402
from murk.scene import _render as render  # noqa: E402


class ForwardTimer:
    """Times the language model's forward calls of ``vlm``, split into decode steps and prefills.

    A call whose input has at most ``decode_max`` positions per row is a decode step.
    """

    def __init__(self, vlm, decode_max: int):
        self.decode_s = self.prefill_s = 0.0
        self.decode_calls = self.prefill_calls = 0
        model = vlm.model
        inner = model.forward
        timer = self

        def timed(*args, **kwargs):
            x = kwargs.get("input_ids")
            if x is None:
                x = kwargs.get("inputs_embeds")
            if x is None and args:
                x = args[0]
            positions = int(x.shape[1]) if x is not None and x.dim() >= 2 else 0
            t = time.perf_counter()
            out = inner(*args, **kwargs)
            dt = time.perf_counter() - t
            if 0 < positions <= decode_max:
                timer.decode_s += dt
                timer.decode_calls += 1
            else:
                timer.prefill_s += dt
                timer.prefill_calls += 1
            return out

        model.forward = timed

    def reset(self) -> None:
        self.decode_s = self.prefill_s = 0.0
        self.decode_calls = self.prefill_calls = 0

    @property
    def decode_share(self) -> float:
        total = self.decode_s + self.prefill_s
        return self.decode_s / total if total else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the two arms")
    args = ap.parse_args()
    log = LoadLog("cpu_batch")
    cfg = load_config()
    max_new = int(cfg["readout"]["verbal_max_new_tokens"])
    peak = matmul_gflops("float32", 2048, seconds=1.0, repeats=3)
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer, template, tok_desc = _tokenizer(Path(tmp))
        folder, model, _ = build_model(Path(tmp) / "qwen3vl-mid", tokenizer, template, "mid")
        del model
        vlm = load_vlm(str(folder), device="cpu", dtype=torch.float32)
        images = _images(2)
        depth = {i: np.full(images[i].shape[:2], 13.8, dtype=np.float32) for i in (0, 1)}  # as benchmarks/readout.py
        bbox = (120.0, 140.0, 160.0, 150.0)
        units = []
        for i in (0, 1):  # each item's 24 conditions, the other image as its shuffled control
            qs = tuple(questions_for_item(ROWS[i], cfg))
            for arm, level, img in render.render_conditions(images[i], depth[i], bbox, images[1 - i], seed=1,
                                                            image_id=i + 1, config=cfg):
                units.append(_schedule.Unit(i, arm, level, img, qs))
        n = _schedule.N_CONDITIONS
        batches = {"k1": units[:n], "k2": units[: 2 * n]}
        timer = ForwardTimer(vlm, max_new)
        engine.read_units(vlm, units[:2], cfg)  # warm-up (allocations, first-call overheads)
        got, stats, split = {}, {}, {}

        def arm(name):
            def go():
                st = _schedule.EngineStats()
                timer.reset()
                got[name] = engine.read_units(vlm, batches[name], cfg, stats=st)
                stats[name] = st
                split[name] = (timer.decode_share, timer.decode_calls)
            return go

        secs = interleave({"k1": arm("k1"), "k2": arm("k2")}, args.rounds, log)
    peak = max(peak, matmul_gflops("float32", 2048, seconds=1.0, repeats=3))
    ups = {a: [len(batches[a]) / t for t in secs[a]] for a in batches}
    ratio = ratio_summary(ups["k2"], ups["k1"])
    dr = max(max_readout_diff(a, b) for a, b in zip(got["k1"], got["k2"][:n]))
    out = {}
    for a in batches:
        st = stats[a]
        gflop = model_flops(vlm, st) / len(batches[a]) / 1e9
        out[a] = {"ups": statistics.median(ups[a]), "mfu": statistics.median(gflop * u / peak for u in ups[a]),
                  "pad": 1.0 - (st.prefill_tokens + st.decode_tokens) / (st.prefill_slots + st.decode_slots),
                  "decode_share": split[a][0], "decode_steps": split[a][1], "gflop": gflop}
        print(f"{a}: {len(batches[a])} units per batch, {out[a]['ups']:.4f} units/s (rounds: "
              f"{', '.join(f'{u:.4f}' for u in ups[a])}), {gflop:.1f} GFLOP per unit, mfu {out[a]['mfu']:.2f}, "
              f"padding {out[a]['pad']:.3f}, decode {100 * out[a]['decode_share']:.0f} % of the model's time in "
              f"{out[a]['decode_steps']} steps", flush=True)
    log.end()
    k1, k2 = out["k1"], out["k2"]
    print(f"units_per_s_k1={k1['ups']:.4f} units_per_s_k2={k2['ups']:.4f} {fmt_ratio('k2_ratio', ratio)} "
          f"decode_share_k1={k1['decode_share']:.3f} decode_share_k2={k2['decode_share']:.3f} "
          f"decode_steps_k1={k1['decode_steps']} decode_steps_k2={k2['decode_steps']} mfu_k1={k1['mfu']:.2f} "
          f"mfu_k2={k2['mfu']:.2f} padding_share_k1={k1['pad']:.3f} padding_share_k2={k2['pad']:.3f} "
          f"k2_max_abs_dr={dr:.2e} peak_gflops_fp32={peak:.0f} {log.tail()}")


if __name__ == "__main__":
    main()
