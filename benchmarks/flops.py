"""Model FLOPs of a batched read-out, useful and executed, from the engine's counters (:class:`murk.readout.EngineStats`).

**Useful** FLOPs (:func:`model_flops`) are counted as ``benchmarks/readout_gpu.py``'s
docstring says: ``2 x parameters`` per real token through each language-model layer
(prefill tree tokens and continuation tokens; Gemma 4's KV-sharing layers only for
the prompt-final and continuation tokens, the only queries they compute), attention
over the real (query, key) pairs of the token trees (``4 x heads x head_dim`` per pair
and layer), the LM head on the read logits, the vision encoder per patch token and its
merger / projector per image token, and the vision attention over its patch pairs.
Padding and masked pairs count as waste, so ``model FLOPs / seconds / peak`` is the
model FLOP utilisation (MFU) of the useful work. Shared by ``readout.py`` (CPU) and
``readout_gpu.py``.

**Executed** FLOPs (:func:`executed_flops`) count what the kernels compute: every
padded position through every layer (Gemma 4's KV-sharing layers on the padded
prompt-final slots, where transformers slices their inputs), every (query, key) pair
of the dense attention (masked pairs and padding included), the logits computed, and
the vision tower on every image it is given (twice for a unit whose verbal wordings had
a row of their own).

Run as a script, it reads a few units of the study mix (30 % of the items also ask
the verbal wordings v2 / v3, as ``readout_gpu.py`` assumes) on the tiny real-format
checkpoints (real processors and tokenizers, so real token counts), with the verbal
wordings as rows of their own (``before``, :data:`murk.readout._rows._BRANCHES` off) and as
branches of the core rows (``after``), and prints per family::

    <family>: units=.. useful_gflop_per_unit= executed_before= executed_after= fall= fall_on_units_with_v2v3=
              max_dp= load=..

for the tiny checkpoint and, from the same counters, for the published configuration
(``readout_gpu.ARCHS`` built on the meta device), ``fall = 1 - after / before`` on the
study mix, ``max_dp`` the largest difference of a numeric read-out between the two
(float32). Continuations run to the model's end of sequence or the token limit (random
weights: usually the limit, an upper bound on the study's decode).
"""

from __future__ import annotations

import sys
from pathlib import Path


def _params(module, skip=()) -> int:
    return sum(p.numel() for n, p in module.named_parameters() if not any(n.startswith(s) for s in skip))


def _flops(net, full_tok: float, short_tok: float, full_pairs: float, short_pairs: float, logits: float,
           vision_tokens: float, image_tokens: float, vision_pairs: float) -> float:
    """FLOPs of a read-out of ``net`` (the transformers model) from token, pair and logit counts: language-model
    layers (KV-sharing layers of Gemma 4 on ``short_*``, the others on ``full_*``), LM head, vision tower."""
    from murk.readout import _architectures as A

    base = net.model
    cfg = net.config
    text = getattr(base, "language_model", None) or getattr(base, "text_model")
    layers = list(text.layers)
    first_shared = len(layers) - A.kv_shared_layers(cfg)
    f = 0.0
    heads = int(A.text_attr(cfg, "num_attention_heads"))
    for i, (layer, hd) in enumerate(zip(layers, A.head_dims(cfg))):  # head sizes per layer (Gemma 4: 256 / 512)
        shared = i >= first_shared
        f += 2.0 * _params(layer) * (short_tok if shared else full_tok)
        f += 4.0 * heads * hd * (short_pairs if shared else full_pairs)
    other = _params(text, skip=("layers.", "embed_tokens", "embed_tokens_per_layer"))  # norms, PLE projection
    f += 2.0 * other * full_tok
    f += 2.0 * int(A.text_attr(cfg, "hidden_size")) * int(A.text_attr(cfg, "vocab_size")) * logits  # LM head, computed logits
    vision = getattr(base, "visual", None) or getattr(base, "vision_tower", None) or getattr(base, "vision_model")
    merge_names = ("merger", "deepstack_merger_list")  # Qwen: the merger runs on merged tokens
    f += 2.0 * _params(vision, skip=merge_names + ("pos_embed",)) * vision_tokens
    proj = [getattr(base, n) for n in ("multi_modal_projector", "connector", "embed_vision") if hasattr(base, n)]
    merged = _params(vision) - _params(vision, skip=merge_names) + sum(_params(m) for m in proj)
    f += 2.0 * merged * image_tokens
    vh = int(A.vision_attr(cfg, "hidden_size"))
    vl = int(A.vision_attr(cfg, "depth", "num_hidden_layers"))
    f += 4.0 * vh * vl * vision_pairs
    return f


def model_flops(vlm, st) -> float:
    """Useful FLOPs of the work counted in ``st`` (see the module docstring)."""
    return _flops(vlm.model, st.prefill_tokens + st.decode_tokens, st.end_tokens + st.decode_tokens,
                  st.attn_pairs + st.decode_attn_pairs, st.end_attn_pairs + st.decode_attn_pairs,
                  st.end_tokens + st.decode_tokens, st.vision_tokens, st.image_tokens, st.vision_attn_pairs)


def executed_flops(vlm, st) -> float:
    """Executed FLOPs of the work counted in ``st``: padding, masked pairs and repeated work included (see the
    module docstring; the vision tower as :func:`model_flops` counts it, on every image it was given). Gemma 4's
    KV-sharing layers run on the prompt-final slots of a prefill only where the installed transformers slices
    their inputs to ``logits_to_keep`` (``_maybe_slice_kv_shared_inputs``, 5.25), else on every position."""
    tok = st.prefill_slots + st.decode_slots
    pairs = st.attn_slots + st.decode_attn_slots
    base = vlm.model.model
    text = getattr(base, "language_model", None) or getattr(base, "text_model")
    if hasattr(text, "_maybe_slice_kv_shared_inputs"):
        short_tok, short_pairs = st.end_slots + st.decode_slots, st.end_attn_slots + st.decode_attn_slots
    else:
        short_tok, short_pairs = tok, pairs
    return _flops(vlm.model, tok, short_tok, pairs, short_pairs, st.end_slots + st.decode_slots, st.vision_tokens,
                  st.image_tokens, st.vision_attn_pairs)


# --------------------------------------------------------------------------- the script

#: tiny real-format family -> the study model whose published configuration it has the processor of
STUDY_MODEL = {"qwen3vl": "Qwen/Qwen3-VL-2B-Instruct", "internvl": "OpenGVLab/InternVL3_5-2B-HF",
               "smolvlm2": "HuggingFaceTB/SmolVLM2-2.2B-Instruct", "gemma4": "google/gemma-4-E2B-it"}
#: share of the study's items that also ask the verbal wordings v2 / v3 (as readout_gpu.py assumes)
VERBAL_SHARE = 0.3
ROW = {"category": "umbrella", "t2_options": ["car", "umbrella", "bench", "kite"], "t2_answer_index": 1,
       "t3_distractor": "truck"}


def _units(images, cfg, verbal: bool):
    from murk.protocol import questions_for_item
    from murk.readout import _schedule

    qs = tuple(questions_for_item(ROW, cfg))
    wordings = ("v1", "v2", "v3") if verbal else ("v1",)
    return [_schedule.Unit(i, "fog", i, im, qs, wordings) for i, im in enumerate(images)]


def _read(vlm, units, cfg, branches: bool):
    from murk.readout import _engine as engine
    from murk.readout import _rows
    from murk.readout import _schedule

    saved = _rows._BRANCHES
    _rows._BRANCHES = branches
    try:
        st = _schedule.EngineStats()
        return engine.read_units(vlm, units, cfg, stats=st), st
    finally:
        _rows._BRANCHES = saved


def _max_dp(a, b) -> float:
    import math

    worst = 0.0
    for ra, rb in zip(a, b):
        for task in ra:
            for key, x in ra[task].items():
                y = rb[task][key]
                if isinstance(x, float) and not (math.isnan(x) and math.isnan(y)):
                    worst = max(worst, abs(x - y))
                elif not isinstance(x, float) and x != y:
                    worst = math.inf  # a text read-out differs
    return worst


def main(argv=None) -> int:
    import argparse
    import os
    import tempfile

    import numpy as np
    import torch

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "lib"))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from protocol import LoadLog

    from murk.core import load_config
    from murk.offline import build_realformat_checkpoint
    from murk.readout import load_vlm

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--families", default=",".join(STUDY_MODEL), help="comma-separated real-format families")
    ap.add_argument("--units", type=int, default=4, help="units per batch (one batch with, one without v2/v3)")
    ap.add_argument("--no-published", action="store_true", help="skip the count at the published configurations")
    args = ap.parse_args(argv)
    log = LoadLog("flops")
    cfg = load_config()
    rng = np.random.default_rng(0)

    images = []
    for i in range(args.units):  # 4:3 and 3:4 scenes, as COCO's (the visual-token count follows the shape)
        h, w = (480, 640) if i % 2 == 0 else (640, 480)
        images.append(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
    with tempfile.TemporaryDirectory() as tmp:
        for fam in args.families.split(","):
            vlm = load_vlm(str(build_realformat_checkpoint(fam, Path(tmp) / fam, seed=0)), device="cpu")
            res = {}
            for verbal in (False, True):
                units = _units(images, cfg, verbal)
                res[verbal] = {b: _read(vlm, units, cfg, b) for b in (False, True)}
            dp = max(_max_dp(res[v][False][0], res[v][True][0]) for v in (False, True))

            def mix(fn, branches, net=None):
                per = [fn(net or vlm, res[v][branches][1]) / args.units for v in (False, True)]
                return (1 - VERBAL_SHARE) * per[0] + VERBAL_SHARE * per[1]

            def line(label, net=None):
                useful = mix(model_flops, True, net)
                before, after = mix(executed_flops, False, net), mix(executed_flops, True, net)
                vb, va = (executed_flops(net or vlm, res[True][b][1]) for b in (False, True))
                print(f"{label}: units={2 * args.units} useful_gflop_per_unit={useful / 1e9:.4g} "
                      f"executed_before={before / 1e9:.4g} executed_after={after / 1e9:.4g} "
                      f"fall={1 - after / before:.3f} fall_on_units_with_v2v3={1 - va / vb:.3f} "
                      f"max_dp={dp:.2g} load={os.getloadavg()[0]:.2f}", flush=True)

            line(f"{fam} (tiny real-format checkpoint)")
            if not args.no_published and fam in STUDY_MODEL:
                import readout_gpu

                class _Net:  # model_flops reads only .model
                    pass

                net = _Net()
                net.model, _ = readout_gpu.build(STUDY_MODEL[fam], "meta", torch.bfloat16)
                line(f"{fam} counted at {STUDY_MODEL[fam]}'s published configuration", net)
            del vlm
    log.end()
    print(log.tail())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
