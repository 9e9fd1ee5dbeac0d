"""CPU benchmark of the shared-prefix read-out engine against scoring every prompt separately.

A mid-size, randomly initialised Qwen3-VL (about 60 M parameters: text hidden 768,
8 layers, 12 heads / 4 KV heads; vision hidden 384, 6 layers, patch 16, merge 2)
reads out the same items both ways at the study's image size (448 x 448 px, 196
visual tokens):

* ``separate``: :func:`murk.readout.read_question` per question, as evaluation
  harnesses do: each of the 9 prompts (3 questions x main / abstain / abstain2)
  is run whole, the image encoded each time, the main prompts through
  ``generate`` (12 greedy tokens).
* ``shared``: :func:`murk.readout.read_item`: one vision pass and one prefill of the
  shared prefix per (image, condition), the 9 tails as one batch, the 3 verbal
  continuations as one batch.

Tokenizer: no hub access, so a byte-level BPE is trained on the text of the spec
(``shared/spec``, English prose, vocabulary 2,000) to tokenise the prompts at a
realistic rate of characters per token (printed); the byte-level tokenizer of the
tiny checkpoints would make the tails ~4x longer than a real tokenizer does.

``tokens`` counts token positions through a transformer: language-model positions
(prefill, padded tail batch, decode steps) plus vision-encoder patch tokens
(784 per 448 x 448 image before the 2 x 2 merge). The
last line is ``tokens_ratio=<x> vision_passes_per_condition=<n> wall_ratio=<y>
max_abs_dp=<z>`` with ``max_abs_dp`` the largest difference between the two
ways in c_int and option mass, and in any first-token probability between the
shared prefix and the whole prompt (float32).

Batched engine (:mod:`murk.engine`, issue 16): the 24 conditions of one item
(:func:`murk.render.render_conditions`, constant depth 13.8 m) are read once as one
scheduled batch (``read_units``, one image = 24 units) and ``--engine-units`` of them
by the shared-prefix engine one at a time (``read_item``), interleaved so that a
change of load on the machine affects both alike. Printed:
``units_per_s_engine= units_per_s_batched= batched_ratio= batched_max_abs_dr=
batched_whole_max_abs_dp=``, with ``batched_max_abs_dr`` the largest difference
in any read-out between the two engines on the common units and
``batched_whole_max_abs_dp`` the largest difference in any first-token probability
between the batched engine and every prompt run whole (one unit; float32).

Run: ``.venv/bin/python benchmarks/readout.py [--items 2] [--engine-units 4]`` (about 6-10 min on 2 busy cores).

Measured 2026-11-30 (3 items, 2 shared cores): ``tokens_ratio=5.08 vision_passes_per_condition=1
wall_ratio=3.72 max_abs_dp=1.64e-07`` (language-model tokens alone: ratio 2.26).
"""

from __future__ import annotations

import argparse
import glob
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from murk import paths
from murk.checkpoints import MAX_PIXELS, _QWEN3VL_CHAT_TEMPLATE
from murk.config import load_config
from murk.prompts import questions_for_item, render_prompt
from murk.readout import item_prompts, load_vlm, read_item, read_question, score_prompts

ROWS = [
    {"category": "umbrella", "t2_options": ["car", "umbrella", "bench", "kite"], "t2_answer_index": 1,
     "t3_distractor": "truck"},
    {"category": "dog", "t2_options": ["dog", "horse", "sheep", "cow"], "t2_answer_index": 0,
     "t3_distractor": "cat"},
    {"category": "traffic light", "t2_options": ["stop sign", "fire hydrant", "traffic light", "parking meter"],
     "t2_answer_index": 2, "t3_distractor": "bicycle"},
]


def _tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    spec = sorted((paths.project_root().parent / "shared" / "spec").glob("*.txt"))
    corpus = [p.read_text(encoding="utf-8") for p in spec] or ["the object inside the red box"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|image_pad|>", "<|video_pad|>",
               "<|vision_start|>", "<|vision_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    named = {"image_token": "<|image_pad|>", "video_token": "<|video_pad|>",
             "vision_start_token": "<|vision_start|>", "vision_end_token": "<|vision_end|>"}
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   extra_special_tokens=named)
    fast.chat_template = _QWEN3VL_CHAT_TEMPLATE
    return fast


def build_model(out: Path) -> Path:
    from transformers import (Qwen2VLImageProcessor, Qwen3VLConfig, Qwen3VLForConditionalGeneration,
                              Qwen3VLProcessor, Qwen3VLVideoProcessor)

    tokenizer = _tokenizer()
    ip = Qwen2VLImageProcessor(patch_size=16, merge_size=2, temporal_patch_size=2,
                               size={"shortest_edge": 1024, "longest_edge": MAX_PIXELS})
    vp = Qwen3VLVideoProcessor(patch_size=16, merge_size=2, temporal_patch_size=2)
    processor = Qwen3VLProcessor(image_processor=ip, tokenizer=tokenizer, video_processor=vp,
                                 chat_template=_QWEN3VL_CHAT_TEMPLATE)
    ids = tokenizer.convert_tokens_to_ids
    config = Qwen3VLConfig(
        vision_config=dict(depth=6, hidden_size=384, intermediate_size=1536, num_heads=6, patch_size=16,
                           spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=768,
                           num_position_embeddings=2304, deepstack_visual_indexes=[1, 3, 5]),
        text_config=dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=8, num_attention_heads=12,
                         num_key_value_heads=4, head_dim=64, vocab_size=len(tokenizer), max_position_embeddings=8192,
                         rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0,
                                          "mrope_section": [16, 8, 8], "mrope_interleaved": True},
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id),
        image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = Qwen3VLForConditionalGeneration(config).eval()
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def _images(n: int) -> list[np.ndarray]:
    from PIL import Image

    files = sorted(glob.glob(str(paths.project_root().parent / "shared" / "coco-val2017-sample" / "val2017" / "*.jpg")))
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        if i < len(files):
            with Image.open(files[i]) as im:
                out.append(np.asarray(im.convert("RGB").resize((448, 448), Image.Resampling.LANCZOS)))
        else:
            out.append(rng.integers(0, 256, (448, 448, 3), dtype=np.uint8))
    return out


def batched_throughput(vlm, cfg, engine_units: int = 4) -> dict:
    """Units per second of the shared-prefix engine and of the batched engine, measured in one run.

    The 24 conditions of one item are rendered first (not timed); the batched
    engine reads all of them as one scheduled batch (one image per batch, the
    CPU default of :func:`murk.engine.auto_images_per_batch`); the shared-prefix
    engine reads ``engine_units`` of them (spread over the arms), half before and
    half after the batch.

    Returns
    -------
    dict with ``units_per_s_engine``, ``units_per_s_batched``, ``batched_ratio``,
    ``batched_max_abs_dr`` (largest |difference| in any numeric read-out between the
    engines; texts must be equal) and ``batched_whole_max_abs_dp`` (largest
    |difference| in any first-token probability between the batched engine and
    every prompt run whole, on one unit).
    """
    import math

    from murk import engine, render

    images = _images(2)
    depth = np.full(images[0].shape[:2], 13.8, dtype=np.float32)
    bbox = (120.0, 140.0, 160.0, 150.0)
    conds = list(render.render_conditions(images[0], depth, bbox, images[1], seed=1, image_id=1, config=cfg))
    qs = tuple(questions_for_item(ROWS[0], cfg))
    units = [engine.Unit(0, arm, level, img, qs) for arm, level, img in conds]
    k = engine.auto_images_per_batch(vlm, qs, cfg)
    pick = [round(i * (len(units) - 1) / max(engine_units - 1, 1)) for i in range(engine_units)]
    # warm-up of both paths (allocations, first-call overheads)
    engine.read_units(vlm, units[:2], cfg)
    read_item(vlm, units[0].image, qs, cfg)
    ref: dict = {}
    t_engine = 0.0

    def run_engine(idx):
        nonlocal t_engine
        for i in idx:
            t = time.perf_counter()
            ref[i] = read_item(vlm, units[i].image, qs, cfg)
            t_engine += time.perf_counter() - t

    run_engine(pick[: len(pick) // 2])
    t = time.perf_counter()
    got = engine.read_units(vlm, units[: k * engine.N_CONDITIONS], cfg)
    t_batched = time.perf_counter() - t
    run_engine(pick[len(pick) // 2:])
    dr = 0.0
    for i in pick:
        for task in ref[i]:
            for key, a in ref[i][task].items():
                b = got[i][task][key]
                if isinstance(a, str):
                    assert a == b, (i, task, key, a, b)
                elif not (math.isnan(a) and math.isnan(b)):
                    dr = max(dr, abs(a - b))
    slots = item_prompts(qs, cfg)
    (_, probs), = engine._read_units_with_probs(vlm, [units[pick[-1]]], cfg)[0]
    whole = score_prompts(vlm, units[pick[-1]].image, [s_.user for s_ in slots], [s_.generate for s_ in slots], cfg,
                          shared_prefix=False)
    ups_e = len(pick) / t_engine
    ups_b = len(got) / t_batched
    return {"units_per_s_engine": ups_e, "units_per_s_batched": ups_b, "batched_ratio": ups_b / ups_e,
            "batched_max_abs_dr": dr, "batched_whole_max_abs_dp": float(np.abs(probs - whole.probs).max()),
            "units_batched": len(got), "units_engine": len(pick)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=2)
    ap.add_argument("--engine-units", type=int, default=4,
                    help="units read by the shared-prefix engine for units_per_s_engine")
    args = ap.parse_args()
    cfg = load_config()
    max_new = int(cfg["readout"]["verbal_max_new_tokens"])
    with tempfile.TemporaryDirectory() as tmp:
        vlm = load_vlm(str(build_model(Path(tmp) / "qwen3vl-mid")), device="cpu", dtype=torch.float32)
    n_params = sum(p.numel() for p in vlm.model.parameters())
    images = _images(args.items)
    rows = [ROWS[i % len(ROWS)] for i in range(args.items)]
    # warm-up (allocations, first-call overheads) of both paths
    q0 = questions_for_item(rows[0], cfg)
    read_item(vlm, images[0], q0, cfg)
    read_question(vlm, images[0], q0[0], cfg)

    wall_sep = wall_sh = 0.0
    tok_sep = tok_sh = lm_sep = lm_sh = 0
    max_dp = 0.0
    chars = ntok = 0
    passes = []
    for img, row in zip(images, rows):
        qs = questions_for_item(row, cfg)
        t = time.perf_counter()
        sep = {q.task: read_question(vlm, img, q, cfg) for q in qs}
        wall_sep += time.perf_counter() - t
        t = time.perf_counter()
        sh = read_item(vlm, img, qs, cfg)
        wall_sh += time.perf_counter() - t
        for q in qs:
            for key in ("c_int", "option_mass"):
                max_dp = max(max_dp, abs(sep[q.task][key] - sh[q.task][key]))
            assert sep[q.task]["answer"] == sh[q.task]["answer"] and sep[q.task]["verbal_text"] == sh[q.task]["verbal_text"]
        # token accounting and the full first-token distributions, from the engine's own statistics
        users = [render_prompt(q, v, cfg)[0] for q in qs for v in ("main", "abstain", "abstain2")]
        gen = [v == "main" for _ in qs for v in ("main", "abstain", "abstain2")]
        s = score_prompts(vlm, img, users, gen, cfg)
        if not passes:  # whole-prompt distributions on the first item (the costly reference)
            w = score_prompts(vlm, img, users, gen, cfg, shared_prefix=False)
            max_dp = max(max_dp, float(np.abs(s.probs - w.probs).max()))
        passes.append(s.vision_passes)
        vis_per_pass = s.vision_tokens
        full_lens = [s.n_prefix_tokens + t_ for t_ in s.n_tail_tokens]
        lm_sep_i = sum(full_lens) + sum(gen) * (max_new - 1)
        lm_sep += lm_sep_i
        tok_sep += lm_sep_i + len(users) * vis_per_pass
        lm_sh += s.lm_tokens
        tok_sh += s.lm_tokens + vis_per_pass
        chars += sum(len(u) for u in users)
        ntok += sum(len(vlm.tokenizer(u)["input_ids"]) for u in users)
    print(f"model: Qwen3-VL architecture, random weights, {n_params / 1e6:.1f} M parameters, float32, "
          f"{torch.get_num_threads()} threads; {args.items} items x 9 prompts; 448x448 px -> {vlm.n_visual_tokens} "
          f"visual tokens; prompts {chars / max(ntok, 1):.2f} characters/token")
    print(f"separate: {wall_sep:.2f} s, {tok_sep} tokens ({lm_sep} language-model); "
          f"shared: {wall_sh:.2f} s, {tok_sh} tokens ({lm_sh} language-model); "
          f"language-model tokens ratio {lm_sep / lm_sh:.2f}")
    print(f"tokens_ratio={tok_sep / tok_sh:.2f} vision_passes_per_condition={max(passes)} "
          f"wall_ratio={wall_sep / wall_sh:.2f} max_abs_dp={max_dp:.2e}")
    b = batched_throughput(vlm, cfg, args.engine_units)
    print(f"batched engine: {b['units_batched']} units (one image x 24 conditions) in one scheduled batch; "
          f"shared-prefix engine on {b['units_engine']} of them")
    print(f"units_per_s_engine={b['units_per_s_engine']:.4f} units_per_s_batched={b['units_per_s_batched']:.4f} "
          f"batched_ratio={b['batched_ratio']:.2f} batched_max_abs_dr={b['batched_max_abs_dr']:.2e} "
          f"batched_whole_max_abs_dp={b['batched_whole_max_abs_dp']:.2e}")


if __name__ == "__main__":
    main()
