"""GPU throughput of the shared-prefix read-out engine on full-size, random-weight study models.

Weights do not change throughput, so each study model is built from its real
architecture's configuration with random bf16 weights (no download), and the
engine (:func:`murk.readout.score_prompts`) reads out synthetic 448 x 448 items:
9 prompts (3 questions x 3 variants) and 3 greedy 12-token continuations per
(image, condition). Reported per model: questions per second (one question = its
3 prompt variants), the share of the bf16 roofline reached
(``2 * params * tokens / s`` over the device's dense bf16 peak, default 989 TFLOP/s
for an H100/H200 SXM, ``--peak-tflops`` to change), and the projected time of the
full study (1000 images x 24 conditions x 3 questions).

Architecture numbers (``ARCHS``): from the models' published ``config.json`` files
as known to transformers 5.24 (the configuration classes' defaults for Qwen3-VL
and InternVL, and the model cards): they set sizes only; tokenizers are the
byte-level stand-ins of :mod:`murk.checkpoints`, so prompt lengths are longer in
tokens than with the real tokenizers (conservative).

Without CUDA it prints a message and exits with status 0.
"""

from __future__ import annotations

import argparse
import sys
import time

# key numbers of the real configurations (text: hidden, intermediate, layers, heads, kv heads, head_dim, vocab;
# vision: hidden, intermediate, layers, heads, patch)
ARCHS = {
    "Qwen/Qwen3-VL-2B-Instruct": dict(builder="qwen3vl", text=(2048, 6144, 28, 16, 8, 128, 151936),
                                      vision=(1024, 4096, 24, 16, 16)),
    "Qwen/Qwen3-VL-4B-Instruct": dict(builder="qwen3vl", text=(2560, 9728, 36, 32, 8, 128, 151936),
                                      vision=(1024, 4096, 24, 16, 16)),
    "OpenGVLab/InternVL3_5-2B-HF": dict(builder="internvl", text=(2048, 6144, 28, 16, 8, 128, 151936),
                                        vision=(1024, 4096, 24, 16, 14)),
    "HuggingFaceTB/SmolVLM2-2.2B-Instruct": dict(builder="smolvlm", text=(2048, 8192, 24, 32, 32, 64, 49280),
                                                 vision=(1152, 4304, 27, 16, 14)),
    "google/gemma-4-E2B-it": dict(builder="gemma", text=(1536, 6144, 35, 8, 1, 256, 262144),
                                  vision=(768, 3072, 16, 12, 16)),
}
N_IMAGES, N_CONDITIONS, N_QUESTIONS = 1000, 24, 3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(ARCHS))
    ap.add_argument("--conditions", type=int, default=8, help="(image, condition) pairs timed per model")
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("readout_gpu: torch is not installed; nothing to measure")
        return 0
    if not torch.cuda.is_available():
        print("readout_gpu: no CUDA device on this machine; run it on a GPU machine "
              "(CPU numbers: benchmarks/readout.py)")
        return 0
    import tempfile
    from pathlib import Path

    import numpy as np

    from murk import checkpoints
    from murk.config import load_config
    from murk.prompts import questions_for_item, render_prompt
    from murk.readout import load_vlm, score_prompts

    cfg = load_config()
    row = {"category": "umbrella", "t2_options": ["car", "umbrella", "bench", "kite"], "t2_answer_index": 1,
           "t3_distractor": "truck"}
    qs = questions_for_item(row, cfg)
    users = [render_prompt(q, v, cfg)[0] for q in qs for v in ("main", "abstain", "abstain2")]
    gen = [v == "main" for _ in qs for v in ("main", "abstain", "abstain2")]
    rng = np.random.default_rng(0)
    for name in args.models:
        spec = ARCHS[name]
        h, inter, layers, heads, kv, hd, vocab = spec["text"]
        vh, vinter, vlayers, vheads, patch = spec["vision"]
        # the tiny builders with the real sizes patched in
        checkpoints._TEXT.update(hidden_size=h, intermediate_size=inter, num_hidden_layers=layers,
                                 num_attention_heads=heads, num_key_value_heads=kv, head_dim=hd)
        checkpoints._VISION.update(hidden_size=vh, intermediate_size=vinter, num_hidden_layers=vlayers,
                                   num_attention_heads=vheads)
        with tempfile.TemporaryDirectory() as tmp:
            with torch.device("cuda"):
                folder = checkpoints.build_tiny_checkpoint(spec["builder"], Path(tmp) / "m")
            vlm = load_vlm(str(folder), device="cuda", dtype=torch.bfloat16, config=cfg)
        # the real vocabulary size (the byte-level test tokenizer uses only the first rows): the
        # embedding and LM head then cost what they cost in the real model
        vlm.model.resize_token_embeddings(vocab, mean_resizing=False)
        n_params = sum(p.numel() for p in vlm.model.parameters())
        imgs = [rng.integers(0, 256, (448, 448, 3), dtype=np.uint8) for _ in range(args.conditions)]
        score_prompts(vlm, imgs[0], users, gen, cfg)  # warm-up
        torch.cuda.synchronize()
        t = time.perf_counter()
        tokens = 0
        for img in imgs:
            s = score_prompts(vlm, img, users, gen, cfg)
            tokens += s.lm_tokens + s.vision_tokens
        torch.cuda.synchronize()
        dt = time.perf_counter() - t
        qps = args.conditions * N_QUESTIONS / dt
        share = 2 * n_params * tokens / dt / (args.peak_tflops * 1e12)
        study_h = N_IMAGES * N_CONDITIONS * N_QUESTIONS / qps / 3600
        print(f"{name}: {n_params / 1e9:.2f} B params, {qps:.1f} questions/s, "
              f"{100 * share:.1f}% of bf16 roofline, full study {study_h:.1f} h")
        del vlm
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
