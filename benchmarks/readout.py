"""CPU benchmark of the shared-prefix read-out engine (the baseline) against scoring every prompt separately.

Part 1 (float32, speed and exactness). A mid-size, randomly initialised Qwen3-VL (text hidden
768, 8 layers, 12 heads / 4 KV heads; vision hidden 384, 6 layers, patch 16, merge 2; tied
embeddings over the real 151,936-row vocabulary) reads out the same items both ways at the
study's image size (448 x 448 px, 196 visual tokens):

* ``separate``: :func:`murk.readout.read_question` per question, as evaluation
  harnesses do: each of the 9 prompts (3 questions x main / abstain / abstain2)
  is run whole, the image encoded each time, the main prompts through
  ``generate`` (12 greedy tokens).
* ``shared``: :func:`benchmarks.baseline.read_item` (the per-unit engine, the named baseline:
  not on the read-out stage's path): one vision pass and one prefill of the
  shared prefix per (image, condition), the 9 tails as one batch, the 3 verbal
  continuations as one batch.

Tokenizer and chat template: the real Qwen3-VL ones (``shared/real-model-files``, through a
real-format checkpoint, :func:`murk.offline.build_realformat_checkpoint`), so prompt tails
have their real length; without those files a byte-level BPE trained on the spec stands in
(printed).

``tokens`` counts token positions through a transformer: language-model positions
(prefill, padded tail batch, decode steps) plus vision-encoder patch tokens
(784 per 448 x 448 image before the 2 x 2 merge); ``lm_tokens_ratio`` counts the
language-model positions alone. ``max_abs_dp`` is the largest difference between the two
ways in c_int and option mass, and in any first-token probability between the shared prefix
and the whole prompt (float32).

Part 2 (bfloat16, tolerance). The study runs in bf16, where a shared prefix and a padded batch
change the rounding. A small Qwen3-VL (text hidden 128, 4 layers; vision hidden 64, 2 layers; the
trained stand-in tokenizer, whose small vocabulary keeps 500 questions affordable on a CPU)
gets *confident* heads: the rows of the option letters in its output head are set to
``gamma * r_k`` (``r_k`` random, a spread of about 4 logits between the letters) and the letters
get a logit bias of 7-12 (:data:`LETTER_BIAS`), so that, as in a real model, most first-token mass
is on the letters and c_int is high, which is where rounding moves c_int most. It is loaded in bf16 and
at least 500 questions (``--bf16-items`` images x 3 questions, COCO sample images and their
mirror images) are scored both ways: the engine (9 prompts from one prefix) and each main prompt
whole, as :func:`murk.readout.load_vlm` sets the model up (output head in float32, softmax in
float32). ``bf16_max_abs_dc_int`` is the largest |c_int difference|, ``bf16_flip_rate`` the fraction
of questions whose answer differs; ``bf16_wordings_max_abs_dc_int`` checks on a few items that
asking the wordings v2/v3 changes no main read-out (0 by construction: they are a batch of their
own). For comparison the info line gives the same difference with the head left in bf16 (logits
rounded to 8 bits) on the first ``--bf16-items / 5`` items.

Batched engine (:mod:`murk.readout`, issues 16 and 25): the 24 conditions of one item
(:func:`murk.scene.render_conditions`, constant depth 13.8 m) are read as one scheduled
batch (``read_units``, one image = 24 units) in float32 and in bfloat16 (the same
weights, loaded in bf16 with the output head and softmax in float32, as
``readout.dtype_cpu: bfloat16`` or ``auto`` loads them), and ``--engine-units`` of them
by the shared-prefix engine one at a time (``read_item``): ``--rounds`` rounds, the three
arms interleaved in alternating order (``protocol.interleave``), so that a change of load
affects them alike; each ratio is the median of the per-round ratios, with its range.
Printed: ``units_per_s_engine= units_per_s_cpu_fp32= units_per_s_cpu_bf16=
batched_ratio= cpu_bf16_ratio= mfu= mfu_bf16= padding_share= bf16_cpu_max_abs_dc_int=
bf16_cpu_flip_rate=``, with

* ``mfu``: the batched float32 engine's useful model FLOPs per second
  (``flops.model_flops``: vision tower, prefill, decode, LM head and attention over
  real tokens, without padding) over the float32 matmul peak of this CPU
  (``peak_gflops_fp32=``, :func:`murk.readout.matmul_gflops`, 2048^2, measured at the
  start and at the end of the run, the higher taken); ``mfu_bf16`` (with its range, last line)
  likewise against ``peak_gflops_bf16=``;
* ``padding_share``: padded language-model positions over all positions prefilled
  and decoded;
* ``bf16_cpu_max_abs_dc_int`` / ``bf16_cpu_flip_rate``: bf16 against float32 on the
  same units and questions (the mid model's option heads made confident as in part 2);
* ``batched_max_abs_dr``: the largest difference in any read-out between the two
  float32 engines on the common units, ``batched_whole_max_abs_dp`` the largest
  difference in any first-token probability between the batched engine and every
  prompt run whole (one unit; float32).

Every benchmark follows ``benchmarks/protocol.py``: a load line (load average, CPU
count, torch threads) at the start and the end, and a last line ending in
``load_max= cpus=``, with a warning where the load exceeded the CPU count.

The last line is ``tokens_ratio=<x> lm_tokens_ratio=<l> vision_passes_per_condition=<n>
wall_ratio=<y> wall_ratio_range=<lo>-<hi> max_abs_dp=<z> bf16_max_abs_dc_int=<d>
bf16_flip_rate=<f> bf16_wordings_max_abs_dc_int=<w>``, the fields above, the peaks, and
the load.

Run: ``.venv/bin/python benchmarks/readout.py [--items 2] [--bf16-items 167] [--rounds 3]`` (about 5 min
on 2 idle cores, 2026-12-03; over an hour on 2 cores shared with other CPU-heavy jobs).

Measured 2026-11-30 (3 items, 2 shared cores, trained stand-in tokenizer): ``tokens_ratio=5.08
vision_passes_per_condition=1 wall_ratio=3.72 max_abs_dp=1.64e-07`` (language-model tokens alone:
ratio 2.26). For the measurement with the real tokenizer, the batched engine and the bf16 fields see
benchmarks/README.md (section Measured).
"""

from __future__ import annotations

import argparse
import glob
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' shared modules

import numpy as np  # noqa: E402
import torch  # noqa: E402
from flops import model_flops  # noqa: E402
from protocol import LoadLog, fmt_ratio, interleave, ratio_summary  # noqa: E402

from murk.core import load_config  # noqa: E402
from murk.core import _paths as paths  # noqa: E402
from murk.offline import MAX_PIXELS  # noqa: E402
from murk.offline._checkpoints import _QWEN3VL_CHAT_TEMPLATE  # noqa: E402
from murk.protocol import questions_for_item, render_prompt  # noqa: E402
from murk.readout import item_prompts, load_vlm, read_question  # noqa: E402
from baseline import read_item, score_prompts  # noqa: E402
from murk.readout import float32_head, letter_probs  # noqa: E402

ROWS = [
    {"category": "umbrella", "t2_options": ["car", "umbrella", "bench", "kite"], "t2_answer_index": 1,
     "t3_distractor": "truck"},
    {"category": "dog", "t2_options": ["dog", "horse", "sheep", "cow"], "t2_answer_index": 0,
     "t3_distractor": "cat"},
    {"category": "traffic light", "t2_options": ["stop sign", "fire hydrant", "traffic light", "parking meter"],
     "t2_answer_index": 2, "t3_distractor": "bicycle"},
]


def _trained_tokenizer():
    """A byte-level BPE trained on the spec (vocabulary 2,000): the stand-in without the real files."""
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
    return fast, _QWEN3VL_CHAT_TEMPLATE


def _tokenizer(tmp: Path):
    """(tokenizer, chat template, description): the real Qwen3-VL ones if the real files are here."""
    from transformers import AutoProcessor

    from murk.offline import build_realformat_checkpoint

    try:
        folder = build_realformat_checkpoint("qwen3vl", tmp / "realformat-qwen3vl")
    except FileNotFoundError:
        tok, template = _trained_tokenizer()
        return tok, template, "byte-level BPE trained on the spec (stand-in: no shared/real-model-files)"
    proc = AutoProcessor.from_pretrained(folder)
    return proc.tokenizer, proc.chat_template, "the real Qwen3-VL tokenizer and chat template"


SIZES = {
    # text: hidden, intermediate, layers, heads, kv heads, head_dim; vision: hidden, intermediate, depth, heads
    "mid": dict(text=(768, 2048, 8, 12, 4, 64), vision=(384, 1536, 6, 6), mrope=[16, 8, 8], tie=True),
    "small": dict(text=(128, 384, 4, 4, 2, 32), vision=(64, 256, 2, 2), mrope=[8, 4, 4], tie=False),
}


def build_model(out: Path, tokenizer, template: str, size: str = "mid"):
    """A random-weight Qwen3-VL of ``SIZES[size]`` with the given tokenizer; returns (folder, model, processor)."""
    from transformers import (Qwen2VLImageProcessor, Qwen3VLConfig, Qwen3VLForConditionalGeneration,
                              Qwen3VLProcessor, Qwen3VLVideoProcessor)

    sz = SIZES[size]
    h, inter, layers, heads, kv, hd = sz["text"]
    vh, vinter, vdepth, vheads = sz["vision"]
    ip = Qwen2VLImageProcessor(patch_size=16, merge_size=2, temporal_patch_size=2,
                               size={"shortest_edge": 1024, "longest_edge": MAX_PIXELS})
    vp = Qwen3VLVideoProcessor(patch_size=16, merge_size=2, temporal_patch_size=2)
    processor = Qwen3VLProcessor(image_processor=ip, tokenizer=tokenizer, video_processor=vp, chat_template=template)
    ids = tokenizer.convert_tokens_to_ids
    vocab = max(len(tokenizer), 151_936 if len(tokenizer) > 100_000 else 0)
    config = Qwen3VLConfig(
        vision_config=dict(depth=vdepth, hidden_size=vh, intermediate_size=vinter, num_heads=vheads, patch_size=16,
                           spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=h,
                           num_position_embeddings=2304, deepstack_visual_indexes=list(range(min(3, vdepth)))),
        text_config=dict(hidden_size=h, intermediate_size=inter, num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=kv, head_dim=hd, vocab_size=vocab, max_position_embeddings=8192,
                         rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0,
                                          "mrope_section": sz["mrope"], "mrope_interleaved": True},
                         eos_token_id=ids("<|im_end|>"), pad_token_id=ids("<|endoftext|>"),
                         tie_word_embeddings=sz["tie"]),
        image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=sz["tie"],
    )
    torch.manual_seed(0)
    model = Qwen3VLForConditionalGeneration(config).eval()
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out, model, processor


def _images(n: int) -> list[np.ndarray]:
    """n images of 448 x 448: the COCO sample's, then their mirror images, then noise."""
    from PIL import Image

    files = sorted(glob.glob(str(paths.project_root().parent / "shared" / "coco-val2017-sample" / "val2017" / "*.jpg")))
    rng = np.random.default_rng(0)
    base = []
    for f in files[:n]:
        with Image.open(f) as im:
            base.append(np.asarray(im.convert("RGB").resize((448, 448), Image.Resampling.LANCZOS)))
    out = list(base)
    out += [b[:, ::-1].copy() for b in base[: max(0, n - len(out))]]
    while len(out) < n:
        out.append(rng.integers(0, 256, (448, 448, 3), dtype=np.uint8))
    return out[:n]


#: logit bias of each option letter in the confident heads: the letters shown in every task (A, B) most,
#: so that on t3 (options A, B) the unshown C-E do not take the mass
LETTER_BIAS = {"A": 12.0, "B": 12.0, "C": 10.0, "D": 10.0, "E": 7.0}


def sharpen_option_heads(folder: Path, model, processor, cfg, images, spread: float = 4.0) -> dict[int, float]:
    """Confident option letters (module docstring, part 2): spread rows saved into ``folder``, biases returned.

    The rows of the letters' tokens become ``gamma * r_k`` (``r_k`` random unit vectors, ``gamma``
    such that ``gamma * r_k . h`` is about ``spread`` logits in magnitude for the final hidden states
    ``h`` at the answer position of a few prompts); the logit bias :data:`LETTER_BIAS` (applied after
    loading, :func:`apply_letter_bias`: the architecture's head has no bias) puts most first-token
    mass on the letters.
    """
    from murk.readout import VLM, build_prompt_text, option_token_ids, present_image

    vlm = VLM(model=model, processor=processor, tokenizer=processor.tokenizer, model_id="bench", revision="local",
              is_pipeline_check=True, device="cpu", dtype=torch.float32, option_tokens={})
    letters = tuple(cfg["readout"]["option_letters"])
    opt = option_token_ids(processor.tokenizer, letters)
    hidden = []
    hook = model.lm_head.register_forward_hook(lambda m, inp, out: hidden.append(inp[0][:, -1].detach()))
    for img, row in zip(images[:4], ROWS * 2):
        for q in questions_for_item(row, cfg):
            text = build_prompt_text(vlm, render_prompt(q, "main", cfg)[0], cfg["readout"]["assistant_prefill"])
            inputs = processor(text=[text], images=[[present_image(img)]], return_tensors="pt")
            with torch.inference_mode():
                model(**inputs)
    hook.remove()
    h = torch.cat(hidden)  # (n, hidden)
    g = torch.Generator().manual_seed(1)
    bias = {}
    with torch.no_grad():
        w = model.lm_head.weight
        # a random unit direction r has r . h ~ |h| / sqrt(d) in magnitude: gamma scales that to `spread` logits
        gamma = spread * w.shape[1] ** 0.5 / float(h.norm(dim=-1).mean())
        for L in letters:
            r = torch.randn(w.shape[1], generator=g)
            r = r / r.norm()
            for i in opt[L]:
                w[i] = gamma * r
                bias[int(i)] = LETTER_BIAS.get(L, 0.0)
    model.save_pretrained(folder)
    return bias


def apply_letter_bias(vlm, bias: dict[int, float]) -> None:
    """Add the letters' logit bias to the loaded model's head (and keep murk's float32 head on top of it)."""

    head = vlm.model.get_output_embeddings()
    b = torch.zeros(head.weight.shape[0], dtype=head.weight.dtype)
    for i, v in bias.items():
        b[i] = v
    head.bias = torch.nn.Parameter(b, requires_grad=False)
    if getattr(head, "_murk_float32", False):  # re-wrap so that the float32 copy holds the bias
        del head.forward
        head._murk_float32 = False
        float32_head(vlm.model)


def bf16_tolerance(cfg, n_items: int, tmp: Path) -> dict:
    """Part 2: shared prefix vs whole prompts in bf16 on confident heads (module docstring)."""
    images = _images(n_items)
    tokenizer, template = _trained_tokenizer()  # a small vocabulary: the bf16 part measures rounding, not speed
    folder, model, processor = build_model(tmp / "qwen3vl-small", tokenizer, template, "small")
    bias = sharpen_option_heads(folder, model, processor, cfg, images)
    del model
    vlm = load_vlm(str(folder), device="cpu", dtype=torch.bfloat16)
    apply_letter_bias(vlm, bias)
    dc, flips, cints, masses = [], 0, [], []
    t0 = time.perf_counter()
    for i, img in enumerate(images):
        qs = questions_for_item(ROWS[i % len(ROWS)], cfg)
        shared = read_item(vlm, img, qs, cfg) if i < 2 else None  # with continuations on a few items
        users = [render_prompt(q, v, cfg)[0] for q in qs for v in ("main", "abstain", "abstain2")]
        s = score_prompts(vlm, img, users, None, cfg)
        mains = [render_prompt(q, "main", cfg) for q in qs]
        w = score_prompts(vlm, img, [u for u, _ in mains], None, cfg, shared_prefix=False)
        for k, (q, (_, letters)) in enumerate(zip(qs, mains)):
            ps = letter_probs(vlm, s.probs[3 * k], letters)
            pw = letter_probs(vlm, w.probs[k], letters)
            dc.append(abs(ps.max() / ps.sum() - pw.max() / pw.sum()))
            flips += int(np.argmax(ps) != np.argmax(pw))
            cints.append(ps.max() / ps.sum())
            masses.append(ps.sum())
            if shared is not None:
                assert abs(shared[q.task]["c_int"] - ps.max() / ps.sum()) < 1e-12
    # the same comparison with the output head left in bf16 (what murk does not do), on a fifth of the items
    head = vlm.model.get_output_embeddings()
    del head.forward  # the class's own bf16 forward again
    head._murk_float32 = False
    dc_bf16_head = []
    for i, img in enumerate(images[: max(1, n_items // 5)]):
        qs = questions_for_item(ROWS[i % len(ROWS)], cfg)
        users = [render_prompt(q, v, cfg)[0] for q in qs for v in ("main", "abstain", "abstain2")]
        s = score_prompts(vlm, img, users, None, cfg)
        mains = [render_prompt(q, "main", cfg) for q in qs]
        w = score_prompts(vlm, img, [u for u, _ in mains], None, cfg, shared_prefix=False)
        for k, (_, letters) in enumerate(mains):
            ps = letter_probs(vlm, s.probs[3 * k], letters)
            pw = letter_probs(vlm, w.probs[k], letters)
            dc_bf16_head.append(abs(ps.max() / ps.sum() - pw.max() / pw.sum()))

    float32_head(vlm.model)
    wordings = 0.0
    for img in images[:2]:
        qs = questions_for_item(ROWS[0], cfg)
        a = read_item(vlm, img, qs, cfg)
        b = read_item(vlm, img, qs, cfg, verbal_variants=("v1", "v2", "v3"))
        for q in qs:
            for key in ("c_int", "option_mass"):
                wordings = max(wordings, abs(a[q.task][key] - b[q.task][key]))
            assert a[q.task]["answer"] == b[q.task]["answer"] and a[q.task]["verbal_text"] == b[q.task]["verbal_text"]
    n_params = sum(p.numel() for p in vlm.model.parameters())
    return {"n": len(dc), "max_dc": max(dc), "p99_dc": float(np.quantile(dc, 0.99)), "flip_rate": flips / len(dc),
            "mean_c_int": float(np.mean(cints)), "median_mass": float(np.median(masses)), "wordings": wordings,
            "max_dc_bf16_head": max(dc_bf16_head), "n_bf16_head": len(dc_bf16_head),
            "seconds": time.perf_counter() - t0, "params": n_params}


def max_readout_diff(a: dict, b: dict) -> float:
    """Largest |difference| in any numeric read-out between two read-outs of one unit (``{task: readouts}``);
    their texts must be equal (AssertionError otherwise). NaN on both sides counts as equal."""
    import math

    dr = 0.0
    for task in a:
        for key, x in a[task].items():
            y = b[task][key]
            if isinstance(x, str):
                assert x == y, (task, key, x, y)
            elif not (math.isnan(x) and math.isnan(y)):
                dr = max(dr, abs(x - y))
    return dr


def batched_throughput(vlm, vlm_bf16, cfg, rounds: int = 3, engine_units: int = 2,
                       log: LoadLog | None = None) -> dict:
    """The batched engine in float32 and bfloat16 against the shared-prefix engine, interleaved rounds.

    The 24 conditions of one item are rendered first (not timed). Each round runs
    three arms in alternating order (:func:`protocol.interleave`): the batched engine
    in float32 reading all 24 as one scheduled batch (one image per batch, the CPU
    default of :func:`murk.readout.auto_images_per_batch`), the same in bfloat16
    (``vlm_bf16``: the same weights loaded in bf16, output head and softmax in
    float32), and the shared-prefix engine (float32) on ``engine_units`` of them (a
    different pick each round).

    Returns
    -------
    dict with the per-round ratios' summaries ``batched_ratio`` (batched float32 units
    per second over the shared-prefix engine's) and ``cpu_bf16_ratio`` (batched bf16
    over batched float32), the median rates and the per-round ones (``ups_fp32``,
    ``ups_bf16``), ``gflop_per_unit`` (useful model FLOPs per unit,
    :func:`flops.model_flops`, for the MFU), ``padding_share`` (padded language-model positions over
    all prefilled and decoded positions), ``batched_max_abs_dr`` (largest |difference|
    in any numeric read-out between the float32 engines; texts must be equal),
    ``batched_whole_max_abs_dp`` (batched float32 against every prompt run whole, one
    unit), and the bf16 agreement with float32 on the same units (``bf16_cpu_max_abs_dc_int``,
    ``bf16_cpu_flip_rate`` over every question, with the mean float32 c_int).
    """
    import math

    from murk.readout import _engine as engine
    from murk.readout import _memory
    from murk.readout import _schedule
    from murk.scene import _render as render

    images = _images(2)
    depth = np.full(images[0].shape[:2], 13.8, dtype=np.float32)
    bbox = (120.0, 140.0, 160.0, 150.0)
    conds = list(render.render_conditions(images[0], depth, bbox, images[1], seed=1, image_id=1, config=cfg))
    qs = tuple(questions_for_item(ROWS[0], cfg))
    units = [_schedule.Unit(0, arm, level, img, qs) for arm, level, img in conds]
    k = _memory.auto_images_per_batch(vlm, qs, cfg)
    batch = units[: k * _schedule.N_CONDITIONS]
    n_pick = engine_units * rounds
    picks = [round(i * (len(units) - 1) / max(n_pick - 1, 1)) for i in range(n_pick)]
    # warm-up of the three paths (allocations, first-call overheads)
    engine.read_units(vlm, units[:2], cfg)
    engine.read_units(vlm_bf16, units[:2], cfg)
    read_item(vlm, units[0].image, qs, cfg)
    ref: dict = {}
    got: dict = {}
    stats: dict = {}
    rnd = {"engine": 0}

    def run_engine():
        r = rnd["engine"]
        rnd["engine"] += 1
        for i in picks[r * engine_units:(r + 1) * engine_units]:
            ref[i] = read_item(vlm, units[i].image, qs, cfg)

    def run_batched(name, model):
        def go():
            st = _schedule.EngineStats()
            got[name] = engine.read_units(model, batch, cfg, stats=st)
            stats[name] = st
        return go

    secs = interleave({"batched_fp32": run_batched("fp32", vlm), "batched_bf16": run_batched("bf16", vlm_bf16),
                       "engine": run_engine}, rounds, log)
    n_b = len(batch)
    ups = {a: [n / t for t in secs[a]] for a, n in (("batched_fp32", n_b), ("batched_bf16", n_b),
                                                     ("engine", engine_units))}
    dr = max(max_readout_diff(ref[i], got["fp32"][i]) for i in picks)
    dc, flips, cints = [], 0, []
    for a, b in zip(got["fp32"], got["bf16"]):
        for task in a:
            if math.isnan(a[task]["c_int"]):
                continue
            dc.append(abs(a[task]["c_int"] - b[task]["c_int"]))
            flips += int(a[task]["answer"] != b[task]["answer"])
            cints.append(a[task]["c_int"])
    slots = item_prompts(qs, cfg)
    (_, probs), = engine._read_units_with_probs(vlm, [units[picks[-1]]], cfg)[0]
    whole = score_prompts(vlm, units[picks[-1]].image, [s_.user for s_ in slots], [s_.generate for s_ in slots], cfg,
                          shared_prefix=False)
    st = stats["fp32"]
    flops_unit = model_flops(vlm, st) / n_b
    real = st.prefill_tokens + st.decode_tokens
    slots_all = st.prefill_slots + st.decode_slots
    med = statistics.median
    return {"units_per_s_engine": med(ups["engine"]), "units_per_s_cpu_fp32": med(ups["batched_fp32"]),
            "units_per_s_cpu_bf16": med(ups["batched_bf16"]),
            "batched_ratio": ratio_summary(ups["batched_fp32"], ups["engine"]),
            "cpu_bf16_ratio": ratio_summary(ups["batched_bf16"], ups["batched_fp32"]),
            "ups_fp32": ups["batched_fp32"], "ups_bf16": ups["batched_bf16"],
            "gflop_per_unit": flops_unit / 1e9, "padding_share": 1.0 - real / slots_all,
            "batched_max_abs_dr": dr, "batched_whole_max_abs_dp": float(np.abs(probs - whole.probs).max()),
            "bf16_cpu_max_abs_dc_int": max(dc), "bf16_cpu_flip_rate": flips / len(dc),
            "bf16_cpu_questions": len(dc), "mean_c_int": float(np.mean(cints)),
            "units_batched": n_b, "units_engine": len(picks), "rounds": rounds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=2, help="items of part 1 (float32 speed)")
    ap.add_argument("--bf16-items", type=int, default=167, help="items of part 2 (x 3 questions; >= 167 for 500)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the engines' comparison")
    ap.add_argument("--engine-units", type=int, default=2,
                    help="units read by the shared-prefix engine per round for units_per_s_engine")
    args = ap.parse_args()
    log = LoadLog("readout")
    cfg = load_config()
    max_new = int(cfg["readout"]["verbal_max_new_tokens"])
    from murk.readout import matmul_gflops

    def measure_peaks(when):
        got = {dt: matmul_gflops(dt, 2048, seconds=1.0, repeats=3) for dt in ("float32", "bfloat16")}
        print(f"matmul peak at the {when} (2048^2, {torch.get_num_threads()} threads, best of 3): "
              f"{got['float32']:.0f} GFLOP/s float32, {got['bfloat16']:.0f} bfloat16", flush=True)
        return got

    # the peak is measured at the start and again at the end: the higher (the less disturbed) is the reference
    peaks = measure_peaks("start")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tokenizer, template, tok_desc = _tokenizer(tmp)
        folder, model, processor = build_model(tmp / "qwen3vl-mid", tokenizer, template, "mid")
        # confident option heads (as part 2), so that the bf16 agreement is measured where rounding moves c_int most
        bias = sharpen_option_heads(folder, model, processor, cfg, _images(4))
        del model
        vlm = load_vlm(str(folder), device="cpu", dtype=torch.float32)
        apply_letter_bias(vlm, bias)
        n_params = sum(p.numel() for p in vlm.model.parameters())
        images = _images(args.items)
        rows = [ROWS[i % len(ROWS)] for i in range(args.items)]
        # warm-up (allocations, first-call overheads) of both paths
        q0 = questions_for_item(rows[0], cfg)
        read_item(vlm, images[0], q0, cfg)
        read_question(vlm, images[0], q0[0], cfg)

        wall_sep, wall_sh = [], []
        tok_sep = tok_sh = lm_sep = lm_sh = 0
        max_dp = 0.0
        chars = ntok = 0
        passes = []
        for n, (img, row) in enumerate(zip(images, rows)):
            qs = questions_for_item(row, cfg)
            out = {}

            def separate():
                out["sep"] = {q.task: read_question(vlm, img, q, cfg) for q in qs}

            def shared():
                out["sh"] = read_item(vlm, img, qs, cfg)

            # one round per item, the order alternating between items
            secs = interleave({"separate": separate, "shared": shared} if n % 2 == 0
                              else {"shared": shared, "separate": separate}, 1, log)
            wall_sep += secs["separate"]
            wall_sh += secs["shared"]
            sep, sh = out["sep"], out["sh"]
            for q in qs:
                for key in ("c_int", "option_mass"):
                    max_dp = max(max_dp, abs(sep[q.task][key] - sh[q.task][key]))
                assert sep[q.task]["answer"] == sh[q.task]["answer"]
                assert sep[q.task]["verbal_text"] == sh[q.task]["verbal_text"]
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
        wall = ratio_summary(wall_sep, wall_sh)
        print(f"model: Qwen3-VL architecture, random weights, {n_params / 1e6:.1f} M parameters, confident option "
              f"heads, float32, {torch.get_num_threads()} threads; {args.items} items x 9 prompts; 448x448 px -> "
              f"{vlm.n_visual_tokens} visual tokens; tokenizer: {tok_desc}, prompts "
              f"{chars / max(ntok, 1):.2f} characters/token")
        print(f"separate: {sum(wall_sep):.2f} s, {tok_sep} tokens ({lm_sep} language-model); "
              f"shared: {sum(wall_sh):.2f} s, {tok_sh} tokens ({lm_sh} language-model); per item "
              f"{fmt_ratio('wall_ratio', wall)}", flush=True)
        vlm_bf16 = load_vlm(str(folder), device="cpu", dtype=torch.bfloat16)
        apply_letter_bias(vlm_bf16, bias)
        bt = batched_throughput(vlm, vlm_bf16, cfg, args.rounds, args.engine_units, log)
        print(f"batched engine: {bt['units_batched']} units (one image x 24 conditions) in one scheduled batch, "
              f"{bt['rounds']} rounds interleaved with the same in bf16 and the shared-prefix engine on "
              f"{args.engine_units} units; batched_max_abs_dr={bt['batched_max_abs_dr']:.2e} "
              f"batched_whole_max_abs_dp={bt['batched_whole_max_abs_dp']:.2e}; useful work "
              f"{bt['gflop_per_unit']:.1f} GFLOP per unit, padding_share={bt['padding_share']:.3f}; "
              f"bf16 vs float32 on the same "
              f"{bt['bf16_cpu_questions']} questions (mean c_int {bt['mean_c_int']:.3f}): "
              f"|dc_int| max {bt['bf16_cpu_max_abs_dc_int']:.2e}, answers flipped {bt['bf16_cpu_flip_rate']:.4f}",
              flush=True)
        del vlm, vlm_bf16
        log.sample()
        b = bf16_tolerance(cfg, args.bf16_items, tmp)
        print(f"bf16: Qwen3-VL architecture, {b['params'] / 1e6:.1f} M parameters, confident option heads "
              f"(mean c_int {b['mean_c_int']:.3f}, median option mass {b['median_mass']:.3f}); {b['n']} questions "
              f"shared prefix vs whole prompt in {b['seconds']:.0f} s: |dc_int| max {b['max_dc']:.2e}, "
              f"99th percentile {b['p99_dc']:.2e}; answers flipped {b['flip_rate']:.4f}; with the head in bf16: "
              f"|dc_int| max {b['max_dc_bf16_head']:.2e} ({b['n_bf16_head']} questions)")
    end = measure_peaks("end")
    peaks = {dt: max(peaks[dt], end[dt]) for dt in peaks}
    mfu = tuple(bt["gflop_per_unit"] * u / peaks["float32"] for u in bt["ups_fp32"])
    mfu = (statistics.median(mfu), min(mfu), max(mfu))
    mfu_bf16 = tuple(bt["gflop_per_unit"] * u / peaks["bfloat16"] for u in bt["ups_bf16"])
    mfu_bf16 = (statistics.median(mfu_bf16), min(mfu_bf16), max(mfu_bf16))
    print(f"utilisation: {bt['gflop_per_unit']:.1f} GFLOP of useful work per unit; batched engine float32 "
          f"{fmt_ratio('mfu', mfu)} of {peaks['float32']:.0f} GFLOP/s, bfloat16 {fmt_ratio('mfu_bf16', mfu_bf16)} of "
          f"{peaks['bfloat16']:.0f} GFLOP/s")
    log.end()
    print(f"tokens_ratio={tok_sep / tok_sh:.2f} lm_tokens_ratio={lm_sep / lm_sh:.2f} "
          f"vision_passes_per_condition={max(passes)} {fmt_ratio('wall_ratio', wall)} max_abs_dp={max_dp:.2e} "
          f"bf16_max_abs_dc_int={b['max_dc']:.2e} bf16_flip_rate={b['flip_rate']:.4f} "
          f"bf16_wordings_max_abs_dc_int={b['wordings']:.1e} "
          f"units_per_s_engine={bt['units_per_s_engine']:.4f} units_per_s_cpu_fp32={bt['units_per_s_cpu_fp32']:.4f} "
          f"units_per_s_cpu_bf16={bt['units_per_s_cpu_bf16']:.4f} {fmt_ratio('batched_ratio', bt['batched_ratio'])} "
          f"{fmt_ratio('cpu_bf16_ratio', bt['cpu_bf16_ratio'])} {fmt_ratio('mfu', mfu)} "
          f"{fmt_ratio('mfu_bf16', mfu_bf16)} "
          f"padding_share={bt['padding_share']:.3f} bf16_cpu_max_abs_dc_int={bt['bf16_cpu_max_abs_dc_int']:.2e} "
          f"bf16_cpu_flip_rate={bt['bf16_cpu_flip_rate']:.4f} peak_gflops_fp32={peaks['float32']:.0f} "
          f"peak_gflops_bf16={peaks['bfloat16']:.0f} {log.tail()}")


if __name__ == "__main__":
    main()
