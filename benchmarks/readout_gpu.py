"""GPU throughput of the batched read-out engine on the five study models at full size (random weights).

Weights do not change throughput, so each study model is built in memory from its
published architecture (``ARCHS`` = :data:`murk.readout.PUBLISHED`: sizes, layer
pattern, vision tower, real vocabulary size) with random bf16 weights on the GPU, and
:func:`murk.readout.read_images` reads out synthetic items exactly as the read-out
stage will: worker threads render the 24 conditions of each item (:func:`murk.scene.render_conditions`: fog and
underwater sweeps, ImageNet-C fog, blank, shuffled) and run the processor while the
model reads scheduled batches (``images_per_batch`` from
:func:`murk.readout.auto_images_per_batch`); 30 % of the items also ask the verbal
wordings v2 / v3, as the study's first 300 of 1000 items do. Each model is
time-boxed (``--seconds``, steady state after the first batch).

Printed per model (one line each)::

    <model>: units_per_s= mfu= wait_share= images_per_batch= tokens_per_unit= peak_gib= bf16_max_abs_dp= bf16_flip_rate=

* ``units_per_s``: (image, condition) units per second, all prompts of a unit
  (9, or 15 with v2 / v3) with their continuations;
* ``mfu``: model FLOPs per second over the bf16 peak this script measures with a
  large matmul (``peak_bf16_tflops=``). Model FLOPs count the useful work only:
  ``2 x parameters`` per real token through each layer (prefill tree tokens and
  continuation tokens; Gemma 4's KV-sharing layers only for the prompt-final and
  continuation tokens, the only queries they compute), attention over the real
  (query, key) pairs of the token trees, the LM head on the read logits, the vision
  encoder per patch and its projector per image token. Padding and masked pairs
  count as waste;
* ``wait_share``: the share of the model thread's time spent waiting for the
  CPU (rendering, processor, collation, or the consumer);
* ``bf16_max_abs_dp`` / ``bf16_flip_rate``: on one item's units, the largest
  difference in c_int and option mass, and the share of (unit, question, variant)
  answers (answer, abstain, abstain2) that differ, between the batched engine and
  every prompt run whole (``read_item(..., shared_prefix=False)``), both in bf16.
  Random weights spread the first-token mass almost evenly over the options, so
  near-ties are far more common than for a trained model: the flip rate is an
  upper bound.

Last line: ``study_gpu_hours=<h>`` for the whole five-model study, (1000 + 1000 +
1000 + 600 + 400) images x 24 conditions (the spec: two models on the first 600
and 400 images; taken here as Gemma-4-E2B and Qwen3-VL-4B), projected from the
measured rates, and ``study_gpu_hours_all1000=`` for all five on 1000 images (as
``data/study.yaml`` sets).

Architecture numbers: :data:`murk.readout.PUBLISHED` (each value transcribed
from the model's published ``config.json`` or model card, the source beside it).
Tokenizers: the real ones cannot be downloaded here, so each model gets a byte-level
BPE trained on this repository's text (English prose and the study's prompts, about
4 characters per token like the real BPEs) with the model's real special tokens and
chat template structure; the embedding and LM head have the real vocabulary size.

Runs in under 10 minutes on one H200 (about 80 s per model with the defaults, a
global deadline skips what does not fit). Without CUDA it prints one line and
exits 0. ``--smoke`` runs the same code on the CPU with shrunk models (a test of
the script, not a measurement).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' shared modules (also when imported)

from flops import model_flops  # noqa: E402
from murk.readout import PUBLISHED, published_config  # noqa: E402
from protocol import LoadLog  # noqa: E402

N_CONDITIONS = 24
#: images per model in the study (spec: two models on the first 600 and 400 images)
STUDY_IMAGES = {"Qwen/Qwen3-VL-2B-Instruct": 1000, "OpenGVLab/InternVL3_5-2B-HF": 1000,
                "HuggingFaceTB/SmolVLM2-2.2B-Instruct": 1000, "google/gemma-4-E2B-it": 600,
                "Qwen/Qwen3-VL-4B-Instruct": 400}

#: the study models' published architectures (murk.readout.PUBLISHED: values and sources)
ARCHS = PUBLISHED
#: Gemma 4's chat format (google/gemma-4-E2B-it; the E-series generation prompt ends with "<|turn>model\n")
_GEMMA4_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|turn>{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] | trim }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}{{ '\n\n<|image|>\n\n' }}"
    "{% elif content['type'] == 'text' %}{{ content['text'] | trim }}{% endif %}"
    "{% endfor %}{% endif %}<turn|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|turn>model\n{% endif %}"
)
SHORT = {"Qwen/Qwen3-VL-2B-Instruct": "qwen2b", "Qwen/Qwen3-VL-4B-Instruct": "qwen4b",
         "OpenGVLab/InternVL3_5-2B-HF": "intern2b", "HuggingFaceTB/SmolVLM2-2.2B-Instruct": "smol2b",
         "google/gemma-4-E2B-it": "gemma-e2b"}


# --------------------------------------------------------------------------- tokenizers and processors


def _corpus() -> list[str]:
    """English prose and the study's prompts from this repository (present on any checkout)."""
    from murk.core import load_config
    from murk.protocol import EXAMPLE_ITEM, questions_for_item, render_prompt

    texts = []
    for pattern in ("*.md", "paper/*.qmd", "notebooks/*.py", "lib/murk/**/*.py", "data/*.yaml"):
        for f in sorted(ROOT.glob(pattern)):
            texts.append(f.read_text(encoding="utf-8", errors="replace"))
    cfg = load_config()
    qs = questions_for_item(EXAMPLE_ITEM, cfg)
    texts += [render_prompt(q, v, cfg)[0] for q in qs for v in ("main", "abstain", "abstain2")] * 20
    return texts


_BPE_CACHE: dict = {}


def _tokenizer(special: dict, extra: list[str], named: dict, template: str, vocab: int = 8000):
    """A byte-level BPE trained on :func:`_corpus` with the model's special tokens (``named``: attributes)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = list(dict.fromkeys(list(special.values()) + list(named.values()) + list(extra)))
    key = (tuple(specials), vocab)
    if key not in _BPE_CACHE:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(_corpus(), trainer)
        _BPE_CACHE[key] = tok.to_str()
    fast = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(_BPE_CACHE[key]), **special,
                                   extra_special_tokens=dict(named))
    fast.add_tokens([t for t in extra if t not in set(named.values())], special_tokens=True)
    fast.chat_template = template
    return fast


def _shrink(spec: dict, smoke: bool) -> dict:
    """Smoke mode: the same architecture with tiny sizes (CPU test of the script)."""
    if not smoke:
        return spec
    t, v = dict(spec["text"]), dict(spec["vision"])
    t.update(hidden_size=64, intermediate_size=128, num_attention_heads=4, head_dim=16,
             num_key_value_heads=min(2, t.get("num_key_value_heads", 2)), vocab_size=9000)
    if spec["family"] == "gemma":
        t.update(num_hidden_layers=4, layer_types=["sliding_attention", "full_attention"] * 2, num_kv_shared_layers=2,
                 global_head_dim=32, vocab_size_per_layer_input=9000,  # full layers' heads twice as wide, as published
                 hidden_size_per_layer_input=8)
    else:
        t["num_hidden_layers"] = 2
    if spec["family"] == "qwen3vl":
        v.update(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, deepstack_visual_indexes=[0])
    else:
        v.update(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)
        if "num_key_value_heads" in v:
            v.update(num_key_value_heads=2, head_dim=16)
    return dict(spec, text=t, vision=v)


def build(name: str, device: str, dtype, smoke: bool = False):
    """(model on ``device`` in ``dtype`` with random weights, processor) of a study model at full size."""
    import torch
    import transformers as T

    from murk.offline import _checkpoints as ck

    spec = _shrink(ARCHS[name], smoke)
    fam, tx, vx = spec["family"], dict(spec["text"]), dict(spec["vision"])
    if fam == "qwen3vl":
        named = {"image_token": "<|image_pad|>", "video_token": "<|video_pad|>",
                 "vision_start_token": "<|vision_start|>", "vision_end_token": "<|vision_end|>"}
        tok = _tokenizer({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, ["<|im_start|>"], named,
                         ck._QWEN3VL_CHAT_TEMPLATE)
        ip = T.Qwen2VLImageProcessor(patch_size=16, merge_size=2, temporal_patch_size=2, image_mean=[0.5] * 3,
                                     image_std=[0.5] * 3, size={"shortest_edge": 65536, "longest_edge": 16777216})
        vp = T.Qwen3VLVideoProcessor(patch_size=16, merge_size=2, temporal_patch_size=2)
        proc = T.Qwen3VLProcessor(image_processor=ip, tokenizer=tok, video_processor=vp,
                                  chat_template=ck._QWEN3VL_CHAT_TEMPLATE)
        ids = tok.convert_tokens_to_ids
        config = published_config(
            name, spec, text_tokens=dict(bos_token_id=None, eos_token_id=tok.eos_token_id,
                                         pad_token_id=tok.pad_token_id),
            image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
            vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"))
    elif fam == "internvl":
        named = {"start_image_token": "<img>", "end_image_token": "</img>", "context_image_token": "<IMG_CONTEXT>",
                 "video_token": "<video>"}
        tok = _tokenizer({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, ["<|im_start|>"], named,
                         ck._INTERNVL_CHAT_TEMPLATE)
        side = vx["image_size"][0]
        seq = int((side // vx["patch_size"][0]) ** 2 * 0.25)
        ip = T.GotOcr2ImageProcessor(size={"height": side, "width": side}, crop_to_patches=False, min_patches=1,
                                     max_patches=12)
        vp = T.InternVLVideoProcessor(size={"height": side, "width": side})
        proc = T.InternVLProcessor(image_processor=ip, tokenizer=tok, video_processor=vp, image_seq_length=seq,
                                   chat_template=ck._INTERNVL_CHAT_TEMPLATE)
        config = published_config(
            name, spec, text_tokens=dict(bos_token_id=None, eos_token_id=tok.eos_token_id,
                                         pad_token_id=tok.pad_token_id),
            image_token_id=tok.convert_tokens_to_ids("<IMG_CONTEXT>"), image_seq_length=seq)
    elif fam == "smolvlm":
        named = {"image_token": "<image>", "fake_image_token": "<fake_token_around_image>",
                 "global_image_token": "<global-img>", "end_of_utterance_token": "<end_of_utterance>",
                 "video_token": "<video>"}
        rows_cols = [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]
        tok = _tokenizer({"bos_token": "<|im_start|>", "eos_token": "<end_of_utterance>", "pad_token": "<|im_end|>"},
                         rows_cols, named, ck._SMOLVLM_CHAT_TEMPLATE)
        side, patch, scale = vx["image_size"], vx["patch_size"], 3
        seq = (side // patch) ** 2 // scale**2
        ip = T.SmolVLMImageProcessor(do_image_splitting=False, size={"longest_edge": side},
                                     max_image_size={"longest_edge": side}, image_mean=[0.5] * 3, image_std=[0.5] * 3)
        vp = T.SmolVLMVideoProcessor(size={"longest_edge": side}, max_image_size={"longest_edge": side})
        proc = T.SmolVLMProcessor(image_processor=ip, tokenizer=tok, video_processor=vp, image_seq_len=seq,
                                  chat_template=ck._SMOLVLM_CHAT_TEMPLATE)
        config = published_config(
            name, spec, text_tokens=dict(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                         pad_token_id=tok.pad_token_id),
            image_token_id=tok.convert_tokens_to_ids("<image>"), scale_factor=scale)
    elif fam == "gemma":
        # Gemma 4's token strings (google/gemma-4-E2B-it tokenizer_config.json) and turn format
        named = {"image_token": "<|image|>", "boi_token": "<|image>", "eoi_token": "<image|>",
                 "audio_token": "<|audio|>", "boa_token": "<|audio>", "eoa_token": "<audio|>",
                 "sot_token": "<|turn>", "eot_token": "<turn|>", "soc_token": "<|channel>", "eoc_token": "<channel|>"}
        tok = _tokenizer({"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}, ["<|video|>"], named,
                         _GEMMA4_TEMPLATE)
        tpl = _GEMMA4_TEMPLATE
        patch, pooling = vx["patch_size"], vx["pooling_kernel_size"]
        soft = ck.gemma4_max_soft_tokens(ck.MAX_PIXELS, patch, pooling)
        ip = T.Gemma4ImageProcessor(patch_size=patch, pooling_kernel_size=pooling, max_soft_tokens=280)
        vp = T.Gemma4VideoProcessor(patch_size=patch, pooling_kernel_size=pooling, max_soft_tokens=soft)
        proc = T.Gemma4Processor(feature_extractor=T.Gemma4AudioFeatureExtractor(), image_processor=ip,
                                 tokenizer=tok, video_processor=vp, chat_template=tpl, image_seq_length=soft)
        ids = tok.convert_tokens_to_ids
        config = published_config(
            name, spec, text_tokens=dict(bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id,
                                         eos_token_id=[tok.eos_token_id, ids("<turn|>")]),  # E2B: <eos>, end of turn
            image_token_id=ids("<|image|>"), boi_token_id=ids("<|image>"),
            eoi_token_id=ids("<image|>"), audio_token_id=ids("<|audio|>"), boa_token_id=ids("<|audio>"),
            eoa_token_index=ids("<audio|>"), video_token_id=ids("<|video|>"))
    else:  # pragma: no cover - ARCHS is fixed
        raise ValueError(fam)
    torch.manual_seed(0)
    with torch.device(device):
        model = T.AutoModelForImageTextToText.from_config(config, dtype=dtype)
    return model.eval(), proc


# --------------------------------------------------------------------------- items


def synthetic_item(i: int):
    """A random scene (smooth colour field and rectangles), a depth ramp (2-60 m), a box, a partner image.

    Alternate items are 448 x 448 and 448 x 299 px (COCO's common aspect), so Qwen's
    and Gemma's visual-token counts vary as in the study.
    """
    import numpy as np

    rng = np.random.default_rng(i)
    h, w = (448, 448) if i % 2 == 0 else (299, 448)

    def scene(r):
        small = r.integers(0, 256, (8, 8, 3)).astype(np.float32)
        yy, xx = np.mgrid[0:h, 0:w]
        img = small[(yy * 8 // h), (xx * 8 // w)]
        for _ in range(6):
            y0, x0 = r.integers(0, h - 40), r.integers(0, w - 40)
            img[y0:y0 + r.integers(20, 120), x0:x0 + r.integers(20, 120)] = r.integers(0, 256, 3)
        return img.astype(np.uint8)

    depth = np.linspace(2.0, 60.0, h, dtype=np.float32)[::-1, None].repeat(w, 1).copy()
    bbox = (float(w * 0.3), float(h * 0.35), float(w * 0.3), float(h * 0.3))
    return scene(rng), depth, bbox, scene(np.random.default_rng(i + 10_000))


def _loader(cfg, n_conditions: int | None = None):
    from murk.protocol import EXAMPLE_ITEM, questions_for_item
    from murk.readout import _schedule
    from murk.scene import _render as render

    rows = [EXAMPLE_ITEM,
            {"category": "dog", "t2_options": ["dog", "horse", "sheep", "cow"], "t2_answer_index": 0,
             "t3_distractor": "cat"},
            {"category": "traffic light", "t2_options": ["stop sign", "fire hydrant", "traffic light",
                                                         "parking meter"], "t2_answer_index": 2,
             "t3_distractor": "bicycle"}]

    def load(i):
        img, depth, bbox, partner = synthetic_item(i)
        conds = render.render_conditions(img, depth, bbox, partner, seed=1, image_id=i, config=cfg)
        if n_conditions is not None:
            import itertools

            conds = itertools.islice(conds, n_conditions)
        verbal = ("v1", "v2", "v3") if i % 10 < 3 else ("v1",)  # the study: 300 of 1000 items
        return _schedule.ImageJob(questions_for_item(rows[i % 3], cfg), conds, verbal)

    return load


# --------------------------------------------------------------------------- FLOPs


def peak_bf16_tflops(device: str, n: int = 8192) -> float:
    """Dense bf16 matmul throughput of this device (TFLOP/s, best of three 1-s repeats), the MFU reference:
    :func:`murk.readout.matmul_gflops`, the measurement ``benchmarks/readout.py`` takes on the CPU."""
    from murk.readout import _hardware as hardware

    return hardware.matmul_gflops("bfloat16", n=n, device=device, seconds=1.0, repeats=3) / 1e3


# --------------------------------------------------------------------------- one model


def bf16_agreement(vlm, cfg, load, n_units: int) -> tuple[float, float]:
    """(max |dp| in c_int and option mass, answer flip rate): batched vs every prompt run whole."""
    import torch

    from murk.readout import _engine as engine
    from murk.readout import _schedule
    from baseline import read_item

    job = load(1)
    units = [_schedule.Unit(1, a, lv, img, tuple(job.questions)) for a, lv, img in list(job.conditions)[:n_units]]
    got = engine.read_units(vlm, units, cfg)
    dp, flips, n = 0.0, 0, 0
    for u, g in zip(units, got):
        with torch.inference_mode():
            ref = read_item(vlm, u.image, u.questions, cfg, shared_prefix=False)
        for task in g:
            for key in ("c_int", "option_mass"):
                dp = max(dp, abs(g[task][key] - ref[task][key]))
            for key in ("answer", "abstain", "abstain2"):
                flips += int(g[task][key] != ref[task][key])
                n += 1
    return dp, flips / max(n, 1)


def run_model(name: str, args, cfg, peak: float, deadline: float) -> dict | None:
    import torch

    from murk.protocol import EXAMPLE_ITEM, questions_for_item
    from murk.readout import _memory
    from murk.readout import _schedule
    from murk.readout import vlm_from_parts
    from murk.readout import _engine as engine

    device = "cpu" if args.smoke else "cuda"
    dtype = torch.float32 if args.smoke else torch.bfloat16
    t_build = time.perf_counter()
    net, proc = build(name, device, dtype, smoke=args.smoke)
    vlm = vlm_from_parts(net, proc, name, "random-weights", True, device, dtype, cfg)
    n_params = sum(p.numel() for p in net.parameters())
    load = _loader(cfg, n_conditions=3 if args.smoke else None)
    qs = questions_for_item(EXAMPLE_ITEM, cfg)
    k = args.images_per_batch or _memory.auto_images_per_batch(vlm, qs, cfg, max_images=1 if args.smoke else None)
    support = _memory.batching_support(vlm)
    job = load(0)
    warm = [_schedule.Unit(0, a, lv, img, tuple(job.questions)) for a, lv, img in list(job.conditions)[:4]]
    engine.read_units(vlm, warm, cfg)  # kernels, allocator
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    build_s = time.perf_counter() - t_build
    box = min(args.seconds, max(5.0, deadline - time.perf_counter() - 20.0))
    st = _schedule.EngineStats()
    snap = None
    t0 = time.perf_counter()
    units = 0
    n_batches = 0
    last_item_of_batch = set()
    sched = _schedule.schedule(0, 20_000, k)
    for b in sched:
        last_item_of_batch.add(b[-1])
    it = engine.read_images(vlm, sched, load, config=cfg, stats=st, progress=False)
    try:
        for res in it:
            units += len({(a, lv) for a, lv, _ in res.results}) if res.results else 0
            if res.item in last_item_of_batch:
                n_batches += 1
                now = time.perf_counter()
                if snap is None:  # steady state starts after the first batch (pipeline filled)
                    snap = (now, units, dataclass_copy(st))
                elif now - t0 > box or now > deadline - 15:
                    break
    finally:
        it.close()
    if device == "cuda":
        torch.cuda.synchronize()
    t1 = time.perf_counter()
    if snap is None or n_batches < 2:
        print(f"{name}: too few batches in the time box ({n_batches}); raise --seconds")
        return None
    d = diff_stats(st, snap[2])
    secs = t1 - snap[0]
    ups = (units - snap[1]) / secs
    flops = model_flops(vlm, d)
    mfu = flops / secs / (peak * 1e12)
    wait = d.wait_s / max(d.wait_s + d.model_s, 1e-9)
    tokens_per_unit = d.prefill_tokens / max(d.units, 1)
    bf_dp, bf_flip = bf16_agreement(vlm, cfg, load, 3 if args.smoke else args.bf16_units)
    peak_gib = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else float("nan")
    print(f"{name}: units_per_s={ups:.1f} mfu={mfu:.3f} wait_share={wait:.3f} images_per_batch={k} "
          f"tokens_per_unit={tokens_per_unit:.0f} peak_gib={peak_gib:.1f} bf16_max_abs_dp={bf_dp:.2e} "
          f"bf16_flip_rate={bf_flip:.3f}  ({n_params / 1e9:.2f} B params, {d.units} units in {secs:.1f} s, "
          f"{d.batches} batches, fallback_units={d.fallback_units}, oom_splits={d.oom_splits}, "
          f"batched={'yes' if support is None else 'no: ' + support}, build+warm-up {build_s:.0f} s)", flush=True)
    del it, vlm, net
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"units_per_s": ups, "mfu": mfu}


def dataclass_copy(st):
    import dataclasses

    return dataclasses.replace(st)


def diff_stats(a, b):
    """``a - b`` field by field (counters of an EngineStats)."""
    import dataclasses

    return dataclasses.replace(a, **{f.name: getattr(a, f.name) - getattr(b, f.name)
                                     for f in dataclasses.fields(a)})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(ARCHS), help=f"any of {list(SHORT.values())} or hub ids")
    ap.add_argument("--seconds", type=float, default=45.0, help="time box of the timed read-out per model")
    ap.add_argument("--deadline", type=float, default=560.0, help="seconds from start after which nothing new starts")
    ap.add_argument("--images-per-batch", type=int, default=None, help="default: memory-aware")
    ap.add_argument("--bf16-units", type=int, default=8, help="units compared with whole prompts in bf16")
    ap.add_argument("--smoke", action="store_true", help="shrunk models on the CPU: a test of this script")
    args = ap.parse_args()
    start = time.perf_counter()
    log = LoadLog("readout_gpu")
    names = [next((k for k, v in SHORT.items() if v == m), m) for m in args.models]
    unknown = [m for m in names if m not in ARCHS]
    if unknown:
        print(f"readout_gpu: unknown models {unknown}; choose from {list(SHORT.values())}")
        return 2
    try:
        import torch
    except ImportError:
        print("readout_gpu: torch is not installed; nothing to measure")
        return 0
    if not args.smoke and not torch.cuda.is_available():
        print("readout_gpu: no CUDA device on this machine: nothing measured (run it on a GPU machine; "
              "CPU numbers: benchmarks/readout.py; a CPU test of this script: --smoke)")
        return 0
    from murk.core import load_config

    cfg = load_config()
    if args.smoke:
        peak = 1.0
        print("readout_gpu --smoke: shrunk models on the CPU, a test of the script; the numbers mean nothing")
    else:
        peak = peak_bf16_tflops("cuda")
        print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}; peak_bf16_tflops={peak:.0f}")
    rates: dict[str, float] = {}
    failed = []
    for name in names:
        if time.perf_counter() - start > args.deadline - 40:
            print(f"{name}: skipped, the deadline of {args.deadline:.0f} s is near")
            continue
        try:
            r = run_model(name, args, cfg, peak, start + args.deadline)
        except Exception as e:  # one model's failure must not cost the others' measurements
            import traceback

            failed.append(name)
            print(f"{name}: FAILED {type(e).__name__}: {' '.join(str(e).split())[:300]}", flush=True)
            traceback.print_exc()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            continue
        if r is not None:
            rates[name] = r["units_per_s"]
    done = [n for n in ARCHS if n in rates]
    hours = sum(STUDY_IMAGES[n] * N_CONDITIONS / rates[n] for n in done) / 3600
    hours_all = sum(1000 * N_CONDITIONS / rates[n] for n in done) / 3600
    scope = "whole study" if len(done) == len(ARCHS) else f"only the {len(done)} measured models"
    log.end()
    print(f"study_gpu_hours={hours:.2f} study_gpu_hours_all1000={hours_all:.2f} ({scope}; "
          f"{' + '.join(str(STUDY_IMAGES[n]) for n in done)} images x {N_CONDITIONS} conditions; "
          f"total {time.perf_counter() - start:.0f} s) {log.tail()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
