"""Tests of murk.readout: loading, image presentation and the four read-outs (spec Sec. III)."""

import math
import time

import numpy as np
import pytest
import torch

from murk.config import load_config
from murk.prompts import questions_for_item, render_prompt
from murk.readout import (
    READOUTS,
    TEXT_READOUTS,
    build_prompt_text,
    load_vlm,
    option_token_ids,
    parse_verbal_confidence,
    present_image,
    read_question,
)

ROW = {
    "category": "umbrella",
    "t2_options": ["car", "umbrella", "bench", "kite"],
    "t2_answer_index": 1,
    "t3_distractor": "truck",
}
LETTERS = ("A", "B", "C", "D", "E")


# ----------------------------------------------------------------- verbal confidence
@pytest.mark.parametrize(
    "text, value",
    [("Confidence: 85", 0.85), ("confidence:100", 1.0), (" B\nCONFIDENCE : 0", 0.0),
     ("B\nConfidence: 70.5", 0.70), ("Confidence: 250", math.nan), ("garbage", math.nan),
     ("Confidence: high", math.nan), ("", math.nan),
     # issue 5: the four cases named
     ("confidence:85%", 0.85), ("I am not sure", math.nan),
     ("B because the red box holds something that looks like a", math.nan)],
)
def test_parse_verbal_confidence(text, value):
    got = parse_verbal_confidence(text)
    assert (math.isnan(got) and math.isnan(value)) or got == pytest.approx(value)


def test_twelve_token_ramble_has_no_number(tiny_vlms):
    """A 12-token continuation without "Confidence: <n>" is missing, not 0."""
    tok = tiny_vlms["qwen3vl"].tokenizer
    text = tok.decode(tok("The object might be a bench or a")["input_ids"][:12])
    assert len(tok(text)["input_ids"]) == 12
    assert math.isnan(parse_verbal_confidence(text))


def test_readouts_agree_with_the_cube():
    from murk import cube

    assert READOUTS == cube.READOUTS and TEXT_READOUTS == cube.TEXT_READOUTS
    assert {"verbal_conf_v2", "verbal_conf_v3"} <= set(READOUTS)


# ----------------------------------------------------------------- images
def test_present_image():
    img = np.zeros((427, 640, 3), dtype=np.uint8)
    assert present_image(img).size == (448, 299)  # PIL size is (width, height)
    assert present_image(np.zeros((900, 300, 3), dtype=np.uint8)).size == (149, 448)
    assert present_image(np.zeros((100, 120, 3), dtype=np.uint8)).size == (120, 100)  # not enlarged
    with pytest.raises(ValueError, match="uint8"):
        present_image(np.zeros((10, 10, 3), dtype=np.float32))


# ----------------------------------------------------------------- option tokens
def test_option_token_variants_of_tiny_models(tiny_vlms):
    for vlm in tiny_vlms.values():
        ids = vlm.option_tokens
        assert tuple(ids) == LETTERS
        flat = [i for v in ids.values() for i in v]
        assert len(flat) == len(set(flat))
        for letter, variants in ids.items():
            assert variants and all(vlm.tokenizer.decode([i]).strip() == letter for i in variants)


def test_option_token_variants_with_space_tokens():
    """A byte-level BPE where " A" is one token ("ĠA"): both forms are variants."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    merges = []
    for letter in "ABC":
        vocab["Ġ" + letter] = len(vocab)
        merges.append(("Ġ", letter))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")
    ids = option_token_ids(tokenizer, ("A", "B", "C", "D"))
    for letter in "ABC":
        assert ids[letter] == sorted([vocab[letter], vocab["Ġ" + letter]])
    assert ids["D"] == [vocab["D"]]
    with pytest.raises(ValueError, match="no single-token variant"):
        option_token_ids(tokenizer, ("A", "AB"))


# ----------------------------------------------------------------- loading
def test_load_vlm_local_folders(tiny_vlms, tiny_checkpoint_dirs):
    # (384/32)^2/2^2 ; (448/16)^2/2^2 ; (448/28)^2*0.5^2 ; Gemma 4 at 70 soft tokens: 384^2 px / 16^2 / 3^2
    expected_visual = {"smolvlm": 36, "qwen3vl": 196, "internvl": 64, "gemma": 64}
    for arch, vlm in tiny_vlms.items():
        assert vlm.model_id == str(tiny_checkpoint_dirs[arch])
        assert vlm.is_pipeline_check and vlm.revision == "local"
        assert vlm.device == "cpu" and vlm.dtype == torch.float32
        assert next(vlm.model.parameters()).dtype == torch.float32
        assert not vlm.model.training
        assert vlm.n_visual_tokens == expected_visual[arch]


def test_load_vlm_tiny_id_builds_into_root(tmp_path):
    vlm = load_vlm("murk-tiny/smolvlm", device="cpu", root=tmp_path)
    assert vlm.is_pipeline_check and vlm.model_id == "murk-tiny/smolvlm"
    assert (tmp_path / "checkpoints" / "murk-tiny--smolvlm" / "murk_tiny.json").is_file()


def test_load_vlm_missing_id_offline(monkeypatch, tmp_path):
    monkeypatch.setenv("MURK_OFFLINE", "1")
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):  # load_vlm sets them; restored afterwards
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    t0 = time.perf_counter()
    with pytest.raises(OSError) as err:
        load_vlm("no-such-org/no-such-model-xyz", device="cpu")
    assert time.perf_counter() - t0 < 15
    msg = str(err.value)
    assert "no-such-org/no-such-model-xyz" in msg and "MURK_OFFLINE" in msg and "murk-tiny/" in msg
    with pytest.raises(OSError, match="no-such-folder"):
        load_vlm(str(tmp_path / "no-such-folder"), device="cpu")


# ----------------------------------------------------------------- read-outs
def test_prompt_prefill(tiny_vlms):
    smol = build_prompt_text(tiny_vlms["smolvlm"], "Hi", "Answer:")
    assert smol.endswith("<end_of_utterance>\nAssistant: Answer:") and smol.count("<image>") == 1
    qwen = build_prompt_text(tiny_vlms["qwen3vl"], "Hi", "Answer:")
    assert qwen.endswith("Hi<|im_end|>\n<|im_start|>assistant\nAnswer:") and qwen.count("<|image_pad|>") == 1


@pytest.mark.parametrize("arch", ["smolvlm", "qwen3vl"])
def test_read_question(arch, tiny_vlms, coco_image):
    vlm = tiny_vlms[arch]
    cfg = load_config()
    for q in questions_for_item(ROW, cfg):
        r = read_question(vlm, coco_image, q, cfg)
        assert set(r) == set(READOUTS) | set(TEXT_READOUTS)
        assert all(isinstance(r[k], float) for k in READOUTS)
        assert all(isinstance(r[k], str) for k in TEXT_READOUTS)
        k = len(q.options)
        assert r["answer"] in set(map(float, range(k)))
        assert r["correct"] == float(r["answer"] == q.correct_index)
        assert 1.0 / k - 1e-12 <= r["c_int"] <= 1.0
        assert 0.0 < r["option_mass"] <= 1.0
        assert r["abstain"] in (0.0, 1.0) and r["abstain2"] in (0.0, 1.0)
        assert math.isnan(r["verbal_conf"]) or 0.0 <= r["verbal_conf"] <= 1.0
        assert _same_nan(r) == _same_nan(read_question(vlm, coco_image, q, cfg))  # deterministic (greedy)


def _same_nan(d):
    """NaN != NaN: map NaN to a sentinel so that dicts compare."""
    return {k: ("nan" if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}


@pytest.mark.parametrize("arch", ["smolvlm", "qwen3vl"])
def test_read_question_matches_a_forward_pass(arch, tiny_vlms, coco_image):
    """The generate-based first-token probabilities equal a plain forward pass."""
    vlm = tiny_vlms[arch]
    cfg = load_config()
    q = questions_for_item(ROW, cfg)[0]
    r = read_question(vlm, coco_image, q, cfg)
    user, letters = render_prompt(q, "main", cfg)
    text = build_prompt_text(vlm, user, cfg["readout"]["assistant_prefill"])
    inputs = vlm.processor(text=[text], images=[[present_image(coco_image)]], return_tensors="pt", **vlm.image_kwargs)
    with torch.inference_mode():
        probs = torch.softmax(vlm.model(**inputs).logits[0, -1].float(), -1)
    p = np.array([float(probs[list(vlm.option_tokens[L])].sum()) for L in letters])
    assert r["answer"] == float(np.argmax(p))
    assert r["c_int"] == pytest.approx(p.max() / p.sum(), rel=1e-5)
    assert r["option_mass"] == pytest.approx(p.sum(), rel=1e-5)
    assert r["top_token"] == vlm.tokenizer.decode([int(torch.argmax(probs))])


@pytest.mark.parametrize("arch", ["smolvlm", "qwen3vl"])
def test_batched_equals_unbatched(arch, tiny_vlms, coco_image):
    """The left-padded batch of the three variants gives the same read-outs."""
    vlm = tiny_vlms[arch]
    cfg = load_config()
    for q in questions_for_item(ROW, cfg):
        a = read_question(vlm, coco_image, q, cfg)
        b = read_question(vlm, coco_image, q, cfg, batched=True)
        for key in ("answer", "correct", "abstain", "abstain2", "top_token", "verbal_text"):
            assert a[key] == b[key], key
        for key in ("c_int", "option_mass"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-7), key
