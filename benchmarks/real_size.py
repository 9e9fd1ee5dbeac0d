"""Real-size read-out on the CPU: each study family that fits this machine, full size, random weights.

Each family is built at its published configuration (``benchmarks/readout_gpu.py``'s
``ARCHS``: sizes, layer pattern, vision tower, vocabulary) with random weights, and
given the *real* tokenizer, chat template and processor (``shared/real-model-files``,
through :func:`murk.offline.build_realformat_checkpoint`: a shrunk real-format
checkpoint whose config is then set to the full-size values). It reads out a few
units (``--units``: conditions of one COCO image, 448-px presented, constant depth
13.8 m) with the batched engine (:func:`murk.readout.read_units`) and compares every
prompt's first-token distribution with the same prompt scored whole
(:func:`benchmarks.baseline.score_prompts` with ``shared_prefix=False``: the image encoded
per prompt, no shared prefix, no batch), first in float32, then with the same weights
cast to bfloat16 (output head and softmax in float32, as :func:`murk.readout.load_vlm`
loads a bf16 model).

One family runs at a time, in a child process of its own, so that its memory
high-water mark is its own: ``peak_gib`` is the child's resident-set high-water
(``VmHWM``, reset through ``/proc/self/clear_refs`` just before the engine's read-out
of the units; it includes the weights), ``estimate_gib`` the weights (plus the bf16
model's float32 head copy) plus the engine's own estimate of the rows
(``murk.readout._memory._row_bytes`` of each prepared row). Families whose weights alone exceed
``--budget-gib`` (float32; 9.5 GiB by default: 24 GiB shared by several users) are
skipped, saying so; before each child starts, the script waits (up to ``--wait`` s) for
that much available memory.

Printed, one line per family and dtype, each with the 1-minute load average it ran at::

    <family> float32: visual_tokens= prompts= max_abs_dp= renorm_max_abs_dp= renorm_bound= flips= peak_gib= estimate_gib=
    <family> bfloat16: bf16_max_abs_dc_int= bf16_flip_rate= bf16_whole_max_abs_dp= bf16_whole_flip_rate= peak_gib= estimate_gib=

* ``max_abs_dp``: the largest difference in any first-token probability (the whole
  vocabulary) between the engine and the whole prompts (float32);
* ``renorm_max_abs_dp``: the same for the option probabilities renormalised over the
  prompt's options (``p_k / sum_j p_j``, the quantity behind c_int);
* ``renorm_bound``: the bound on that difference derived from the logit differences,
  see below; the line says ``ok`` when ``renorm_max_abs_dp <= max(1e-6, renorm_bound)``;
* ``flips``: prompts whose argmax option differs (float32);
* ``bf16_max_abs_dc_int`` / ``bf16_flip_rate``: the bf16 engine against the float32
  engine on the same weights (c_int and option mass; answer, abstain and abstain2);
  ``bf16_whole_max_abs_dp`` / ``bf16_whole_flip_rate``: the bf16 engine against the bf16 whole
  prompts (renormalised option probabilities; prompts whose most probable option differs).

The float32 bound. Renormalising over the options divides by the option mass
``m = sum_j p_j``, which with random weights is about 1e-4 (the first-token mass is
spread over the whole vocabulary): an absolute difference of 1.6e-7 in the raw
probabilities can become one of ~1e-3 relative, so the renormalised difference is
governed by the *relative* differences of the option probabilities, i.e. by the logit
differences ``d_j = log p_j(engine) - log p_j(whole)`` (the log-normaliser cancels in the
renormalisation). With ``p~_k`` the renormalised probabilities,
``p~'_k = p~_k e^{d_k} / sum_j p~_j e^{d_j}``; for a spread ``R = max_j d_j - min_j d_j``
the largest possible change of any ``p~_k`` is ``tanh(R / 4)`` (two groups of options
moved apart by ``R``, at ``p~ = 1/2``), ``R / 4`` to first order. Float32 logits of two
computations that differ in batch shape, padding and prefix caching differ by a few
units in the last place of the hidden states accumulated over the layers (``R`` = 5.3e-6
for InternVL3.5-2B and 4.5e-5 for SmolVLM2-2.2B, measured 2026-12-05), so the renormalised
agreement is ``tanh(R / 4)``, up to about 1e-5, not 1e-6: that is the bound stated and checked. For a trained model, whose
option mass is near 1, the renormalised difference is about the raw one (≤ 1e-6).

Run: ``nice -n 10 .venv/bin/python benchmarks/real_size.py [--models qwen2b intern2b smol2b] [--units 2]``
(InternVL3.5-2B, one unit, float32 then bf16: 35 min on 2 CPUs at a load of 4-9, 2026-12-05; the whole
prompts take four fifths of it). ``--dtypes float32`` skips the bf16 pass; ``--dtypes bfloat16`` builds the
weights in bf16 (half the memory; no comparison with float32).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' shared modules

from protocol import LoadLog, load_average  # noqa: E402
from readout_gpu import ARCHS, SHORT  # noqa: E402

#: study model -> the real-format family whose real files (tokenizer, template, processor) it uses
REALFORMAT_FAMILY = {"Qwen/Qwen3-VL-2B-Instruct": "qwen3vl", "Qwen/Qwen3-VL-4B-Instruct": "qwen3vl",
                     "OpenGVLab/InternVL3_5-2B-HF": "internvl", "HuggingFaceTB/SmolVLM2-2.2B-Instruct": "smolvlm2",
                     "google/gemma-4-E2B-it": "gemma4"}
#: tied input/output embeddings at the published configurations (as ``readout_gpu.build`` sets them)
TIED = {"qwen3vl": True, "internvl": True, "smolvlm": False, "gemma": True}
#: the float32 agreement the engine's docstring states for every first-token probability
F32_TOL = 1e-6
GIB = 2**30


def full_size_config(name: str, realformat_folder: str | os.PathLike):
    """The real-format checkpoint's config with the published sizes of ``name`` (``ARCHS``).

    Token ids, model type and processor-facing values stay those of the real files;
    every size, the layer pattern, rotary settings and the vocabulary come from
    ``ARCHS[name]``; embeddings are tied as in the published model.
    """
    from transformers import AutoConfig

    spec = ARCHS[name]
    base = AutoConfig.from_pretrained(realformat_folder)
    d = base.to_dict()
    text, vision = dict(d["text_config"]), dict(d["vision_config"])
    text.pop("layer_types", None)  # derived from the layer count unless the spec gives it
    vision.pop("layer_types", None)
    text.update(spec["text"])
    vision.update(spec["vision"])
    if spec["family"] == "qwen3vl":
        vision["out_hidden_size"] = spec["text"]["hidden_size"]
    tie = TIED[spec["family"]]
    text["tie_word_embeddings"] = tie
    d.update(text_config=text, vision_config=vision, tie_word_embeddings=tie)
    return type(base).from_dict(d)


def params_of(name: str, config) -> int:
    """Parameters of the full-size model (``config``: :func:`full_size_config`; built on the meta device)."""
    import torch
    from transformers import AutoModelForImageTextToText

    with torch.device("meta"):
        net = AutoModelForImageTextToText.from_config(config)
    return sum(p.numel() for p in net.parameters())


def _proc_status(key: str) -> int:
    """``VmHWM`` / ``VmRSS`` of this process in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return -1


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _units(cfg, n: int):
    """``n`` conditions of one COCO image (448 px presented, constant depth 13.8 m, a central box)."""
    import glob

    import numpy as np

    from murk.protocol import EXAMPLE_ITEM, questions_for_item
    from murk.readout import _schedule
    from murk.scene import _render as render

    coco = os.environ.get("MURK_COCO_DIR") or str(ROOT.parent / "shared" / "coco-val2017-sample")
    files = sorted(glob.glob(os.path.join(coco, "val2017", "*.jpg")))
    img, (w, h) = render.load_presented(files[0])
    partner, _ = render.load_presented(files[1])
    depth = np.full((h, w), 13.8, dtype=np.float32)
    bbox = (0.3 * w, 0.3 * h, 0.35 * w, 0.35 * h)
    conds = list(render.render_conditions(img, depth, bbox, partner, seed=1, image_id=1, config=cfg))
    # clean first, then conditions spread over the sweep
    pick = [0] + [round(i * (len(conds) - 1) / max(n - 1, 1)) for i in range(1, n)]
    qs = tuple(questions_for_item(EXAMPLE_ITEM, cfg))
    return [_schedule.Unit(1, conds[i][0], conds[i][1], conds[i][2], qs) for i in pick[:n]], Path(files[0]).name


def option_probs(vlm, probs, slots) -> list:
    """Each prompt's first-token probabilities of its option letters (summed over token variants)."""
    import numpy as np

    from murk.readout import letter_probs

    return [np.asarray(letter_probs(vlm, row, s.letters), dtype=np.float64) for row, s in zip(probs, slots)]


def renormalised_difference(p, q) -> tuple[float, float]:
    """Largest difference of the renormalised option probabilities, and the spread of the logit differences.

    Parameters
    ----------
    p, q : array_like, shape (k,)
        One prompt's option probabilities, computed two ways (any positive scale: only
        their ratios matter).

    Returns
    -------
    (float, float)
        ``max_k |p_k / sum(p) - q_k / sum(q)|`` and ``R = max_k d_k - min_k d_k`` with
        ``d_k = log p_k - log q_k``; the first never exceeds ``tanh(R / 4)`` (module
        docstring), so ``tanh(R / 4)`` is the bound the logit differences imply.
    """
    import numpy as np

    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    d = np.log(p) - np.log(q)
    return float(np.abs(p / p.sum() - q / q.sum()).max()), float(d.max() - d.min())


def compare(vlm, a_probs, b_probs, slots) -> dict:
    """Raw and renormalised agreement of two sets of first-token distributions (module docstring)."""
    import numpy as np

    oa, ob = option_probs(vlm, a_probs, slots), option_probs(vlm, b_probs, slots)
    pairs = [renormalised_difference(x, y) for x, y in zip(oa, ob)]
    spread = max(r for _, r in pairs)
    return {"max_abs_dp": float(np.abs(np.asarray(a_probs, np.float64) - np.asarray(b_probs, np.float64)).max()),
            "renorm_max_abs_dp": max(d for d, _ in pairs), "logit_spread": spread,
            "renorm_bound": math.tanh(spread / 4.0),
            "flips": sum(int(np.argmax(x) != np.argmax(y)) for x, y in zip(oa, ob)), "prompts": len(oa),
            "option_mass": float(np.median([float(x.sum()) for x in oa]))}


def _readout_diff(a: list, b: list) -> tuple[float, float]:
    """(largest |difference| in c_int and option mass, answer flip rate) between two engines' read-outs."""
    dc, flips, n = 0.0, 0, 0
    for ua, ub in zip(a, b):
        for task in ua:
            for key in ("c_int", "option_mass"):
                x, y = ua[task][key], ub[task][key]
                if not (math.isnan(x) and math.isnan(y)):
                    dc = max(dc, abs(x - y))
            for key in ("answer", "abstain", "abstain2"):
                flips += int(ua[task][key] != ub[task][key])
                n += 1
    return dc, flips / max(n, 1)


def _estimate(vlm, prepared, max_new: int, weight_bytes: int) -> tuple[float, float]:
    """(weights + the engine's estimate of the rows, the rows alone) in bytes (``_memory._row_bytes``)."""
    from murk.readout import _memory

    rows = 0.0
    for pu in prepared:
        for r in pu.rows:
            if r is not None:
                rows += _memory._row_bytes(vlm, r.n, r.n_end, len(r.gen_ends), max_new, r.n_vision)
    return weight_bytes + rows, rows


def _engine_pass(vlm, units, cfg, weight_bytes: int) -> dict:
    """The engine's read-out of ``units`` with the first-token distributions, its peak memory and estimate."""
    import gc

    import torch

    from murk.readout import _engine as engine
    from murk.readout import _memory
    from murk.readout import _rows

    max_new = int(cfg["readout"]["verbal_max_new_tokens"])
    support = _memory.batching_support(vlm)
    prepared = [_rows._prepare_unit(vlm, u, cfg, support) for u in units]
    est, rows = _estimate(vlm, prepared, max_new, weight_bytes)
    gc.collect()
    rss0 = _proc_status("VmRSS")
    hwm_reset = _reset_hwm()
    t = time.perf_counter()
    with torch.inference_mode():
        got, st = engine._read_units_with_probs(vlm, units, cfg)
    secs = time.perf_counter() - t
    peak = _proc_status("VmHWM")
    return {"results": [r for r, _ in got], "probs": [p for _, p in got], "seconds": secs, "peak": peak,
            "rss_before": rss0, "hwm_reset": hwm_reset, "estimate": est, "rows_estimate": rows,
            "visual_tokens": sorted({r.n_image_tokens or r.n_vision for pu in prepared for r in pu.rows if r}),
            "fallback": st.fallback_units, "prepared": prepared}


def _whole(vlm, units, cfg) -> tuple[list, float]:
    """Every prompt of every unit scored whole (first-token distributions), and the seconds it took."""
    import torch

    from benchmarks.baseline import score_prompts
    from murk.readout import item_prompts

    t = time.perf_counter()
    out = []
    for u in units:
        slots = item_prompts(u.questions, cfg, u.verbal_variants)
        with torch.inference_mode():
            out.append(score_prompts(vlm, u.image, [s.user for s in slots], None, cfg, shared_prefix=False).probs)
    return out, time.perf_counter() - t


def read_family(name: str, n_units: int, dtypes: tuple[str, ...], budget_gib: float = 9.5, wait_s: float = 600.0,
                out=sys.stdout) -> list[dict]:
    """Read one family out at full size (in this process); one JSON line per dtype to ``out``.

    The model is first built on the meta device: a family whose float32 weights (plus
    about 1 GiB of interpreter, libraries and activations) exceed ``budget_gib`` is
    skipped (one JSON line ``{"skipped": reason}``), and otherwise the build waits up to
    ``wait_s`` seconds for that much available memory (other users of the machine).
    """
    import gc

    import numpy as np
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from murk.core import load_config
    from murk.offline import build_realformat_checkpoint
    from murk.readout import item_prompts, vlm_from_parts

    cfg = load_config()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        rf = build_realformat_checkpoint(REALFORMAT_FAMILY[name], Path(tmp) / "rf")
        processor = AutoProcessor.from_pretrained(rf)
        config = full_size_config(name, rf)
    n_params = params_of(name, config)
    # the dtype the weights are built in: float32 when it is asked (the bf16 pass casts them), else the one asked
    build = "float32" if "float32" in dtypes else dtypes[0]
    item = 4 if build == "float32" else 2
    head_rows, hidden = config.get_text_config().vocab_size, config.get_text_config().hidden_size
    # weights + murk's float32 head copy below float32 + the interpreter, libraries and activations
    need = n_params * item / GIB + (0 if item == 4 else head_rows * hidden * 4 / GIB) + 1.0
    skip = None
    if need > budget_gib:
        skip = (f"{n_params / 1e9:.3f} B parameters need about {need:.1f} GiB in {build} (over the budget of "
                f"{budget_gib:g} GiB; bf16 alone {n_params * 2 / GIB:.1f} GiB plus murk's float32 head)")
    else:
        t0 = time.time()
        while _available_bytes() < need * GIB and time.time() - t0 < wait_s:
            time.sleep(10)
        if _available_bytes() < need * GIB:
            skip = f"{_available_bytes() / GIB:.1f} GiB available after waiting {wait_s:.0f} s, {need:.1f} GiB needed"
    if skip:
        rec = {"model": name, "skipped": f"{SHORT[name]}: skipped: {skip} load={load_average()[0]:.2f}"}
        print(json.dumps(rec), file=out, flush=True)
        return [rec]
    units, image_name = _units(cfg, n_units)
    slots = [s for u in units for s in item_prompts(u.questions, cfg, u.verbal_variants)]
    t = time.perf_counter()
    torch.manual_seed(0)
    net = AutoModelForImageTextToText.from_config(config, dtype=getattr(torch, build)).eval()
    n_params = sum(p.numel() for p in net.parameters())
    build_s = time.perf_counter() - t
    f32 = None
    for dt in dtypes:
        dtype = getattr(torch, dt)
        if dt != build:
            f32_probs = f32["probs"] if f32 else None
            net.to(dtype)  # the same weights, rounded (parameter by parameter: no second copy)
            gc.collect()
        vlm = vlm_from_parts(net, processor, name, "random-weights", True, "cpu", dtype, cfg)
        head = net.get_output_embeddings()
        weight_bytes = sum(p.numel() * p.element_size() for p in net.parameters())
        if getattr(head, "_murk_float32", False):  # murk's float32 copy of the output head
            weight_bytes += head.weight.numel() * 4
        load0 = load_average()[0]
        eng = _engine_pass(vlm, units, cfg, weight_bytes)
        whole, whole_s = _whole(vlm, units, cfg)
        eng_probs = np.concatenate(eng["probs"])
        whole_probs = np.concatenate(whole)
        cmp = compare(vlm, eng_probs, whole_probs, slots)
        rec = {"model": name, "short": SHORT[name], "dtype": dt, "params": n_params, "units": len(units),
               "image": image_name, "conditions": [f"{u.arm}{u.level}" for u in units],
               "visual_tokens": eng["visual_tokens"], "n_visual_tokens_448": vlm.n_visual_tokens,
               "engine_s": eng["seconds"], "whole_s": whole_s, "build_s": build_s,
               "peak_gib": eng["peak"] / GIB, "rss_before_gib": eng["rss_before"] / GIB,
               "hwm_reset": eng["hwm_reset"], "estimate_gib": eng["estimate"] / GIB,
               "rows_estimate_gib": eng["rows_estimate"] / GIB, "weights_gib": weight_bytes / GIB,
               "fallback_units": eng["fallback"], "load": load0, "load_end": load_average()[0], **cmp}
        if dt == "float32":
            f32 = {"probs": eng_probs, "results": eng["results"]}
        elif f32 is not None:
            rec["bf16_max_abs_dc_int"], rec["bf16_flip_rate"] = _readout_diff(eng["results"], f32["results"])
            rec["bf16_vs_f32"] = compare(vlm, eng_probs, f32_probs, slots)
        print(json.dumps(rec), file=out, flush=True)
        results.append(rec)
        del vlm, eng, whole
        gc.collect()
    return results


def format_line(r: dict) -> str:
    """The printed line of one family and dtype (module docstring)."""
    common = (f"visual_tokens={'/'.join(map(str, r['visual_tokens']))} peak_gib={r['peak_gib']:.2f} "
              f"estimate_gib={r['estimate_gib']:.2f}")
    tail = (f"({r['params'] / 1e9:.3f} B params, {r['units']} units x {r['prompts'] // max(r['units'], 1)} "
            f"prompts: {r['image']} {'+'.join(r['conditions'])}; weights {r['weights_gib']:.2f} GiB + rows "
            f"estimated {r['rows_estimate_gib']:.3f} GiB, measured {r['peak_gib'] - r['rss_before_gib']:.3f} GiB "
            f"over the resident {r['rss_before_gib']:.2f}; engine {r['engine_s']:.0f} s, whole prompts "
            f"{r['whole_s']:.0f} s; option mass {r['option_mass']:.1e}; fallback_units={r['fallback_units']}) "
            f"load={r['load']:.2f}")
    if r["dtype"] == "float32":
        ok = r["renorm_max_abs_dp"] <= max(F32_TOL, r["renorm_bound"])
        return (f"{r['short']} float32: {common} prompts={r['prompts']} max_abs_dp={r['max_abs_dp']:.1e} "
                f"renorm_max_abs_dp={r['renorm_max_abs_dp']:.1e} renorm_bound={r['renorm_bound']:.1e} "
                f"({'ok' if ok else 'EXCEEDED'}; logit spread {r['logit_spread']:.1e}) flips={r['flips']} {tail}")
    return (f"{r['short']} {r['dtype']}: {common} bf16_max_abs_dc_int={r.get('bf16_max_abs_dc_int', float('nan')):.2e} "
            f"bf16_flip_rate={r.get('bf16_flip_rate', float('nan')):.3f} "
            f"bf16_whole_max_abs_dp={r['renorm_max_abs_dp']:.2e} "
            f"bf16_whole_flip_rate={r['flips'] / max(r['prompts'], 1):.3f} {tail}")


def _available_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(SHORT.values()), help=f"any of {list(SHORT.values())}")
    ap.add_argument("--units", type=int, default=2, help="conditions of one COCO image read out per family")
    ap.add_argument("--dtypes", nargs="*", default=["float32", "bfloat16"], choices=["float32", "bfloat16"],
                    help="float32 first: the bf16 pass casts its weights and compares with it; bf16 alone builds "
                         "the weights in bf16 (half the memory)")
    ap.add_argument("--budget-gib", type=float, default=9.5,
                    help="the most resident memory a family may take (its float32 weights are checked against it)")
    ap.add_argument("--wait", type=float, default=600.0, help="seconds to wait for that much available memory")
    ap.add_argument("--json", type=Path, default=None, help="also write the records here (one JSON line each)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:  # one family, in this process
        read_family(args.child, args.units, tuple(args.dtypes), args.budget_gib, args.wait)
        return 0
    names = [next((k for k, v in SHORT.items() if v == m), m) for m in args.models]
    unknown = [m for m in names if m not in ARCHS]
    if unknown:
        print(f"real_size: unknown models {unknown}; choose from {list(SHORT.values())}")
        return 2
    log = LoadLog("real_size")
    records, failed = [], []
    for n in names:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", n, "--units", str(args.units),
               "--dtypes", *args.dtypes, "--budget-gib", str(args.budget_gib), "--wait", str(args.wait)]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        got = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        for r in got:
            print(r["skipped"] if "skipped" in r else format_line(r), flush=True)
            log.sample()
        records += [r for r in got if "skipped" not in r]
        if proc.returncode != 0:
            failed.append(n)
            print(f"{SHORT[n]}: FAILED (exit {proc.returncode}; its traceback is above)", flush=True)
    if args.json:
        args.json.write_text("".join(json.dumps(r) + "\n" for r in records))
    log.end()
    print(f"real_size: {len({r['model'] for r in records})} families read out at full size, "
          f"{len(failed)} failed {log.tail()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
