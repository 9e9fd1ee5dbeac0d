"""Read-outs on real-format checkpoints (issue 12): the real tokenizer, chat template, processor and
generation config of each of the study's five model families, a shrunk config and random weights.

For each family one COCO item is read out on the CPU in float32: the shared-prefix engine equals
scoring every prompt on its own (and transformers' ``generate``) within 1e-6; the prompt ends in the
family's generation prompt plus the prefill; the image reaches the model as one tile; the option
letters map to the real vocabulary's tokens.
"""

import json
import math
import shutil

import numpy as np
import pytest
import torch

from benchmarks.baseline import read_item, score_prompts
from murk.core import load_config
from murk.core import _identity as identity
from murk.offline import MARKER_FILE, MAX_PIXELS, REALFORMAT_MODELS, build_realformat_checkpoint
from murk.protocol import questions_for_item, render_prompt
from murk.readout import (READOUTS, VERBAL_STOP_LIMIT, build_prompt_text, load_vlm, parse_verbal_confidence,
                          present_image, read_question)

FAMILIES = sorted(set(REALFORMAT_MODELS.values()))
ROW = {"category": "umbrella", "t2_options": ["car", "umbrella", "bench", "kite"], "t2_answer_index": 1,
       "t3_distractor": "truck"}
TOL = 1e-6

# what each family must look like (the published files and ids; see murk.offline)
EXPECTED = {
    "qwen3vl": dict(classes=("Qwen3VLForConditionalGeneration", "Qwen3VLProcessor", "Qwen2VLImageProcessor"),
                    vocab=151_936, image_token=("<|image_pad|>", 151_655), eos={151_645, 151_643},
                    ending="<|im_end|>\n<|im_start|>assistant\nAnswer:", letters={"A": "A", "ĠA": " A"},
                    sampling=True),
    "smolvlm": dict(classes=("Idefics3ForConditionalGeneration", "Idefics3Processor", "Idefics3ImageProcessor"),
                    vocab=49_280, image_token=("<image>", 49_190), eos={49_279},
                    ending="<end_of_utterance>\nAssistant: Answer:", letters={"A": "A", "ĠA": " A"},
                    sampling=False),
    "smolvlm2": dict(classes=("SmolVLMForConditionalGeneration", "SmolVLMProcessor", "SmolVLMImageProcessor"),
                     vocab=49_280, image_token=("<image>", 49_190), eos={49_279},
                     ending="<end_of_utterance>\nAssistant: Answer:", letters={"A": "A", "ĠA": " A"},
                     sampling=False),
    "internvl": dict(classes=("InternVLForConditionalGeneration", "InternVLProcessor", "GotOcr2ImageProcessor"),
                     vocab=151_936, image_token=("<IMG_CONTEXT>", 151_667), eos={151_645},
                     ending="<|im_end|>\n<|im_start|>assistant\nAnswer:", letters={"A": "A", "ĠA": " A"},
                     sampling=False),
    "gemma4": dict(classes=("Gemma4ForConditionalGeneration", "Gemma4Processor", "Gemma4ImageProcessor"),
                   vocab=262_144, image_token=("<|image|>", 258_880), eos={1, 106, 50},
                   ending="<turn|>\n<|turn>model\n<|channel>thought\n<channel|>Answer:",
                   letters={"A": "A", "▁A": " A"},
                   sampling=True),
}


def _close(a, b, tol=TOL):
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol


def test_every_family_has_an_id_that_says_what_it_is():
    assert set(REALFORMAT_MODELS) == {"murk-realformat/qwen3vl", "murk-realformat/smolvlm",
                                      "murk-realformat/smolvlm2", "murk-realformat/internvl",
                                      "murk-realformat/gemma4"}
    assert set(EXPECTED) == set(FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
def test_real_files_shrunk_config_random_weights(family, realformat_checkpoint_dirs, realformat_vlms):
    folder = realformat_checkpoint_dirs[family]
    vlm = realformat_vlms[family]
    exp = EXPECTED[family]
    marker = json.loads((folder / MARKER_FILE).read_text())
    assert marker["pipeline_check"] and marker["format"] == "real" and marker["arch"] == family
    assert marker["sources"] and all(len(h) == 64 for h in marker["sources"].values())  # sha256 of each real file
    assert vlm.is_pipeline_check and vlm.revision == "sha256:" + marker["digest"][:16]
    assert marker["digest"] == identity.checkpoint_digest(folder, None)
    assert (type(vlm.model).__name__, type(vlm.processor).__name__,
            type(vlm.processor.image_processor).__name__) == exp["classes"]
    text_cfg = vlm.model.config.get_text_config()
    assert text_cfg.vocab_size == exp["vocab"]  # the real vocabulary ...
    assert text_cfg.hidden_size <= 64 and text_cfg.num_hidden_layers <= 4  # ... shrunk in width and depth
    token, token_id = exp["image_token"]
    assert vlm.tokenizer.convert_tokens_to_ids(token) == token_id == vlm.model.config.image_token_id
    assert exp["eos"] <= set(vlm.eos_token_ids)
    # the real generation config was written, and murk ignores its sampling settings
    saved = json.loads((folder / "generation_config.json").read_text())
    assert bool(saved.get("do_sample")) == exp["sampling"]
    assert not vlm.model.generation_config.do_sample
    if exp["sampling"]:
        assert vlm.ignored_generation_settings["do_sample"] is True
    assert (folder / "model.safetensors").is_file() and not (folder / "pytorch_model.bin").exists()


@pytest.mark.parametrize("family", FAMILIES)
def test_prompt_ending_tile_and_option_tokens(family, realformat_vlms, coco_image):
    vlm = realformat_vlms[family]
    exp = EXPECTED[family]
    text = build_prompt_text(vlm, "What is it?", "Answer:")
    assert text.endswith(exp["ending"]), text[-80:]
    # one tile, presented at most 448 x 448
    shown = present_image(coco_image)
    assert max(shown.size) <= 448 and shown.size[0] * shown.size[1] <= MAX_PIXELS
    inputs = vlm.processor(text=[text], images=[[shown]], return_tensors="pt", **vlm.image_kwargs)
    pv = inputs["pixel_values"]
    if family == "qwen3vl":
        (t, h, w), = inputs["image_grid_thw"].tolist()
        assert t == 1 and h * w * 16 * 16 <= MAX_PIXELS
    elif family in ("smolvlm", "smolvlm2"):
        tile = vlm.processor.image_processor.max_image_size["longest_edge"]
        assert tuple(pv.shape) == (1, 1, 3, tile, tile)  # (batch, tiles, C, H, W): one tile
        # SmolVLM2's tile is 384 px; SmolVLM-256M's encoder takes a fixed 512-px tile, upsampled from the
        # <= 448 px image (no information beyond 448^2 px)
        assert tile == {"smolvlm": 512, "smolvlm2": 384}[family]
    elif family == "internvl":
        assert tuple(pv.shape) == (1, 3, 448, 448)  # one tile although the saved processor tiles
    else:
        assert pv.shape[0] == 1
        assert int((inputs["image_position_ids"][0] != -1).all(-1).sum()) * 16 * 16 <= MAX_PIXELS
    n_image = int((inputs["input_ids"][0] == vlm.model.config.image_token_id).sum())
    assert 0 < n_image <= vlm.n_visual_tokens  # n_visual_tokens: a 448 x 448 image
    # option letters: the real vocabulary's single-token letters, with and without the space marker
    vocab = vlm.tokenizer.get_vocab()
    for piece, decoded in exp["letters"].items():
        assert vocab[piece] in vlm.option_tokens["A"]
        assert vlm.tokenizer.decode([vocab[piece]]) == decoded
    flat = [i for ids in vlm.option_tokens.values() for i in ids]
    assert len(flat) == len(set(flat))


@pytest.mark.parametrize("family", FAMILIES)
def test_coco_item_shared_prefix_equals_per_prompt(family, realformat_vlms, coco_image):
    """One COCO item (three questions, 9 + 3 prompts with wording v2): engine = whole prompts = generate."""
    vlm = realformat_vlms[family]
    cfg = load_config()
    qs = questions_for_item(ROW, cfg)
    shared = read_item(vlm, coco_image, qs, cfg, verbal_variants=("v1", "v2"))
    whole = read_item(vlm, coco_image, qs, cfg, verbal_variants=("v1", "v2"), shared_prefix=False)
    for q in qs:
        for key in READOUTS:
            assert _close(shared[q.task][key], whole[q.task][key]), (family, q.task, key)
        for key in ("verbal_text", "top_token", "verbal_text_v2"):
            assert shared[q.task][key] == whole[q.task][key]
        assert shared[q.task]["verbal_stop"] in (0.0, 1.0) and shared[q.task]["verbal_stop_v2"] in (0.0, 1.0)
        assert math.isnan(shared[q.task]["verbal_stop_v3"])  # not asked
        assert 0.0 < shared[q.task]["option_mass"] < 1.0
    ref = read_question(vlm, coco_image, qs[0], cfg)  # transformers' generate
    for key in READOUTS:
        if not key.endswith(("_v2", "_v3")):
            assert _close(shared["t2"][key], ref[key]), (family, key, shared["t2"][key], ref[key])
    assert shared["t2"]["verbal_text"] == ref["verbal_text"] and shared["t2"]["top_token"] == ref["top_token"]
    # the full first-token distributions too
    users = [render_prompt(q, "main", cfg)[0] for q in qs[:2]]
    a = score_prompts(vlm, coco_image, users, None, cfg)
    b = score_prompts(vlm, coco_image, users, None, cfg, shared_prefix=False)
    assert a.shared and a.vision_passes == 1 and not b.shared
    assert np.abs(a.probs - b.probs).max() <= TOL


def test_qwen_digit_split_is_truncation_not_a_low_confidence(realformat_vlms):
    """Real BPE splits digits: a 12-token continuation of " A. fire hydrant\\nConfidence: 100" ends in "10"."""
    tok = realformat_vlms["qwen3vl"].tokenizer
    ids = tok(" A. fire hydrant\nConfidence: 100", add_special_tokens=False)["input_ids"]
    assert len(ids) == 13
    cut = tok.decode(ids[:12])
    assert cut.endswith("Confidence: 10")
    assert math.isnan(parse_verbal_confidence(cut, truncated=True))
    assert parse_verbal_confidence(cut) == 0.10  # the same text ended by the model itself is a real 10
    assert parse_verbal_confidence(tok.decode(ids)) == 1.0


def test_gemma4_sentencepiece_digits(realformat_vlms):
    tok = realformat_vlms["gemma4"].tokenizer
    ids = tok("Confidence: 100", add_special_tokens=False)["input_ids"]
    assert [tok.decode([i]) for i in ids[-3:]] == ["1", "0", "0"]
    assert math.isnan(parse_verbal_confidence(tok.decode(ids[:-2]), truncated=True))  # "Confidence: 1"


def test_gemma4_prefill_after_both_template_endings(realformat_vlms):
    """The published template ends in an empty thought channel; the E-series one in "<|turn>model\\n"."""
    vlm = realformat_vlms["gemma4"]
    real = build_prompt_text(vlm, "Hi", "Answer:")
    assert real.endswith("<|turn>model\n<|channel>thought\n<channel|>Answer:")  # no space after <channel|>
    template = vlm.processor.chat_template
    plain = template.replace("{{- '<|channel>thought\\n<channel|>' -}}", "")
    assert plain != template
    old = vlm.processor.chat_template
    try:
        vlm.processor.chat_template = plain
        text = build_prompt_text(vlm, "Hi", "Answer:")
    finally:
        vlm.processor.chat_template = old
    assert text.endswith("<turn|>\n<|turn>model\nAnswer:")
    ids = vlm.tokenizer(text, add_special_tokens=False)["input_ids"]
    turn = vlm.tokenizer.convert_tokens_to_ids("<|turn>")
    last = len(ids) - 1 - ids[::-1].index(turn)  # the turn marker is one special token
    assert vlm.tokenizer.decode(ids[last + 1:]) == "model\nAnswer:"


@pytest.fixture(scope="module")
def sampling_qwen(tmp_path_factory, realformat_checkpoint_dirs):
    """A real-format Qwen3-VL whose generation config samples with a repetition penalty of 1.3."""
    folder = tmp_path_factory.mktemp("sampling") / "qwen3vl-rp13"
    build_realformat_checkpoint("qwen3vl", folder, seed=0, generation_config={
        "do_sample": True, "temperature": 0.7, "top_k": 20, "top_p": 0.8, "repetition_penalty": 1.3})
    return folder


def test_greedy_whatever_the_generation_config_says(sampling_qwen, realformat_vlms, coco_image):
    saved = json.loads((sampling_qwen / "generation_config.json").read_text())
    assert saved["do_sample"] and saved["repetition_penalty"] == 1.3
    vlm = load_vlm(str(sampling_qwen), device="cpu")
    assert vlm.ignored_generation_settings["repetition_penalty"] == 1.3
    plain = realformat_vlms["qwen3vl"]  # same seed and files, the published (penalty 1.0) config
    cfg = load_config()
    qs = questions_for_item(ROW, cfg)
    engine = read_item(vlm, coco_image, qs, cfg)
    ref = read_question(vlm, coco_image, qs[0], cfg)
    again = read_question(vlm, coco_image, qs[0], cfg)
    base = read_question(plain, coco_image, qs[0], cfg)
    assert ref["verbal_text"] == again["verbal_text"] == engine["t2"]["verbal_text"] == base["verbal_text"]
    for key in ("answer", "c_int", "option_mass", "abstain", "abstain2", "verbal_stop"):
        assert _close(ref[key], engine["t2"][key]) and _close(ref[key], base[key]), key
    for q in qs[1:]:
        assert engine[q.task]["verbal_text"] == read_item(plain, coco_image, [q], cfg)[q.task]["verbal_text"]
    # what generate() does with the checkpoint's own settings (greedy, but its logits processors): the
    # processed scores move the option probabilities that the raw logits give
    from transformers import GenerationConfig

    from murk.protocol import render_prompt
    from murk.readout import encode, letter_probs, softmax32

    own = GenerationConfig.from_pretrained(sampling_qwen)
    own.update(do_sample=False, max_new_tokens=1, output_scores=True, output_logits=True,
               return_dict_in_generate=True)
    user, letters = render_prompt(qs[0], "main", cfg)
    inputs = encode(vlm, [build_prompt_text(vlm, user, "Answer:")], present_image(coco_image, vlm.max_side_px))
    with torch.inference_mode():
        out = vlm.model.generate(**inputs, generation_config=own)
    p_scores = letter_probs(vlm, softmax32(out.scores[0][0]), letters)
    p_logits = letter_probs(vlm, softmax32(out.logits[0][0]), letters)
    assert p_logits.max() / p_logits.sum() == pytest.approx(engine["t2"]["c_int"], abs=TOL)
    assert abs(p_scores.max() / p_scores.sum() - engine["t2"]["c_int"]) > 1e-4


def test_internvl_tokenizer_without_image_token_names(realformat_checkpoint_dirs, coco_image, tmp_path, caplog):
    """The published pitfall: no extra_special_tokens in tokenizer_config.json. murk supplies the converter's."""
    folder = tmp_path / "internvl-nonames"
    shutil.copytree(realformat_checkpoint_dirs["internvl"], folder)
    tc = folder / "tokenizer_config.json"
    cfg = json.loads(tc.read_text())
    for k in ("start_image_token", "end_image_token", "context_image_token", "video_token",
              "model_specific_special_tokens", "extra_special_tokens"):
        cfg.pop(k, None)
    tc.write_text(json.dumps(cfg))
    from transformers import AutoProcessor

    with pytest.raises(AttributeError):
        AutoProcessor.from_pretrained(folder)  # what a user meets without murk
    vlm = load_vlm(str(folder), device="cpu")
    assert vlm.processor.image_token == "<IMG_CONTEXT>" and vlm.processor.image_token_id == 151_667
    assert vlm.n_visual_tokens == 256
    assert "names no image tokens" in caplog.text
    r = read_item(vlm, coco_image, questions_for_item(ROW, load_config()))
    assert 0 < r["t2"]["option_mass"] < 1
    # without the tokens in the vocabulary: a one-line error naming the file and the fix
    tj = folder / "tokenizer.json"
    data = json.loads(tj.read_text())
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] not in ("<img>", "</img>", "<IMG_CONTEXT>")]
    tj.write_text(json.dumps(data))
    with pytest.raises(OSError) as err:
        load_vlm(str(folder), device="cpu")
    msg = str(err.value)
    assert "\n" not in msg and str(tc) in msg and "extra_special_tokens" in msg and "<IMG_CONTEXT>" in msg


def test_limit_hit_continuations_are_recorded(realformat_vlms, coco_image):
    """Random weights never say EOS within 12 tokens: every continuation is a limit hit, and its text
    (whatever it holds) is parsed as truncated."""
    vlm = realformat_vlms["smolvlm"]
    cfg = load_config()
    r = read_item(vlm, coco_image, questions_for_item(ROW, cfg))
    for q in r.values():
        assert q["verbal_stop"] == VERBAL_STOP_LIMIT
        n = len(vlm.tokenizer(q["verbal_text"], add_special_tokens=False)["input_ids"])
        assert abs(n - cfg["readout"]["verbal_max_new_tokens"]) <= 2  # 12 tokens (re-tokenising may merge)
