"""Tests of murk.readout: loading, image presentation and the four read-outs (spec Sec. III)."""

import json
import math
import time

import numpy as np
import pytest
import torch

from murk.core import load_config
from murk.core import _identity as identity
from murk.protocol import questions_for_item, render_prompt
from murk.readout import (READOUTS, TEXT_READOUTS, build_prompt_text, load_vlm, option_token_ids,
                          parse_verbal_confidence, present_image, read_question)

ROW = {
    "category": "umbrella",
    "t2_options": ["car", "umbrella", "bench", "kite"],
    "t2_answer_index": 1,
    "t3_distractor": "truck",
}
LETTERS = ("A", "B", "C", "D", "E")


# ----------------------------------------------------------------- verbal confidence
NAN = math.nan
# the parser's case table: text, value when the continuation ended at EOS, value when it hit the token limit
PARSE_CASES = [
    # integers 0-100 after the label
    ("Confidence: 85", 0.85, NAN),
    ("B\nConfidence: 85\n", 0.85, 0.85),
    ("confidence:100", 1.0, NAN),
    (" B\nCONFIDENCE : 0\n", 0.0, 0.0),
    ("Confidence: 7 because the box is clear", 0.07, 0.07),
    # optional % or /100 (or "out of 100")
    ("Confidence: 85%", 0.85, NAN),
    ("confidence:85%\n", 0.85, 0.85),
    ("Confidence: 85/100", 0.85, NAN),
    ("Confidence: 85 / 100.\n", 0.85, 0.85),
    ("Confidence: 85 out of 100\n", 0.85, 0.85),
    # Markdown emphasis around the label and the value
    ("**Confidence:** 85", 0.85, NAN),
    ("**Confidence**: 85\n", 0.85, 0.85),
    ("*Confidence:* **70**\n", 0.70, 0.70),
    ("__Confidence__: 40 (the image is foggy)", 0.40, 0.40),
    # label variants
    ("Confidence level: 85", 0.85, NAN),
    ("Confidence score: 60\n", 0.60, 0.60),
    ("Confidence (0-100): 85", 0.85, NAN),
    ("Confidence (0 to 100): 90.\n", 0.90, 0.90),
    # an echoed range or placeholder is not a value: the next label decides
    ("Confidence: 0 to 100\nConfidence: 90", 0.90, NAN),
    ("Confidence: 0 to 100\nConfidence: 90\n", 0.90, 0.90),
    ("Confidence: 0-100", NAN, NAN),
    ("Confidence: 0–100\n", NAN, NAN),
    ("Confidence: <a number from 0 to 100>\nConfidence: 40\n", 0.40, 0.40),
    ("Confidence: high\nConfidence: 20.\n", 0.20, 0.20),
    # decimals, exponents, signs, fractions other than /100, values above 100: missing, never rescaled
    ("Confidence: 0.85", NAN, NAN),
    ("B\nConfidence: 70.5", NAN, NAN),
    ("Confidence: 85,5\n", NAN, NAN),
    ("Confidence: 1e2", NAN, NAN),
    ("Confidence: -5", NAN, NAN),
    ("Confidence: 8 out of 10", NAN, NAN),
    ("Confidence: 8/10\n", NAN, NAN),
    ("8 out of 10", NAN, NAN),
    ("Confidence: 101", NAN, NAN),
    ("Confidence: 250", NAN, NAN),
    ("Confidence: 0085", NAN, NAN),
    # no label, no number
    ("garbage", NAN, NAN),
    ("Confidence: high", NAN, NAN),
    ("", NAN, NAN),
    ("I am not sure", NAN, NAN),
    ("B because the red box holds something that looks like a", NAN, NAN),
    ("My confidence is 85", NAN, NAN),
    ("Overconfidence: 85", NAN, NAN),
    # cut by the token limit: a number touching the end may have lost digits or a decimal/fraction/range part
    (" A. fire hydrant\nConfidence: 10", 0.10, NAN),
    ("Confidence: 1", 0.01, NAN),
    ("Confidence: 85.", 0.85, NAN),
    ("Confidence: 8 o", 0.08, NAN),
    ("Confidence: 8 out of 1", NAN, NAN),
    ("Confidence: 0 t", 0.0, NAN),
    ("Confidence: 85 ", 0.85, NAN),
]


@pytest.mark.parametrize("text, value, value_truncated", PARSE_CASES)
def test_parse_verbal_confidence(text, value, value_truncated):
    for truncated, want in ((False, value), (True, value_truncated)):
        got = parse_verbal_confidence(text, truncated=truncated)
        assert isinstance(got, float)
        assert (math.isnan(got) and math.isnan(want)) or got == pytest.approx(want, abs=1e-12), (text, truncated)


def test_parse_verbal_confidence_signature():
    """The public name and keyword are used from outside: keep them."""
    import inspect

    sig = inspect.signature(parse_verbal_confidence)
    assert list(sig.parameters) == ["text", "truncated"] and sig.parameters["truncated"].default is False
    assert parse_verbal_confidence(None) != parse_verbal_confidence(None)  # NaN for no text


def test_continuation_stop():
    from murk.readout import VERBAL_STOP_EOS, VERBAL_STOP_LIMIT, continuation_stop

    assert (VERBAL_STOP_EOS, VERBAL_STOP_LIMIT) == (0.0, 1.0)
    assert continuation_stop([5, 6, 2], {2}, 12) == VERBAL_STOP_EOS
    assert continuation_stop(list(range(10, 22)), {2}, 12) == VERBAL_STOP_LIMIT
    assert continuation_stop([5] * 11 + [2], [2, 3], 12) == VERBAL_STOP_EOS  # EOS as the 12th token


def test_twelve_token_ramble_has_no_number(tiny_vlms):
    """A 12-token continuation without "Confidence: <n>" is missing, not 0."""
    tok = tiny_vlms["qwen3vl"].tokenizer
    text = tok.decode(tok("The object might be a bench or a")["input_ids"][:12])
    assert len(tok(text)["input_ids"]) == 12
    assert math.isnan(parse_verbal_confidence(text))


def test_readouts_agree_with_the_cube():
    from murk.results import _cube as cube

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
        assert vlm.is_pipeline_check and vlm.revision == identity.checkpoint_revision(tiny_checkpoint_dirs[arch], None)
        # the digest murk recorded when it built the folder (its marker) is the folder's content digest
        marker = json.loads((tiny_checkpoint_dirs[arch] / "murk_tiny.json").read_text())
        assert vlm.revision == "sha256:" + marker["digest"][:16]
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
        # the option distribution (schema 4): sums to 1 over the item's options, NaN beyond, its max is c_int
        p = np.array([r[f"p_option_{i}"] for i in range(4)])
        assert np.isnan(p[k:]).all() and abs(p[:k].sum() - 1.0) < 1e-12
        assert p[:k].max() == r["c_int"] and int(np.argmax(p[:k])) == r["answer"]
        assert r["target"] == float(q.correct_index)
        for v in ("abstain", "abstain2"):   # the abstain letter's share: the decision is its argmax
            assert 0.0 <= r[f"p_{v}"] <= 1.0 and (r[v] == 1.0) <= (r[f"p_{v}"] >= 1.0 / (k + 1))
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


def test_prefill_joins_without_a_space_after_whitespace_or_a_special_token(tiny_vlms):
    from murk.readout import join_prefill

    assert join_prefill("<|im_start|>assistant\n", "Answer:") == "<|im_start|>assistant\nAnswer:"
    assert join_prefill("User: hi<end_of_utterance>\nAssistant:", "Answer:") == (
        "User: hi<end_of_utterance>\nAssistant: Answer:")
    assert join_prefill("<|turn>model\n<|channel>thought\n<channel|>", "Answer:", ["<channel|>"]) == (
        "<|turn>model\n<|channel>thought\n<channel|>Answer:")
    assert join_prefill("x", "") == "x"
    gemma = build_prompt_text(tiny_vlms["gemma"], "Hi", "Answer:")
    assert gemma.startswith("<bos><|turn>user\n")
    assert gemma.endswith("\n\n<|image|>\n\nHi<turn|>\n<|turn>model\nAnswer:")


def test_tiny_gemma_speaks_gemma4(tiny_vlms):
    """murk-tiny/gemma uses Gemma 4's tokens, not Gemma 3's."""
    vlm = tiny_vlms["gemma"]
    tok = vlm.tokenizer
    for t in ("<|turn>", "<turn|>", "<|image|>", "<|image>", "<image|>", "<|channel>", "<channel|>"):
        assert tok.convert_tokens_to_ids(t) != tok.unk_token_id
        assert len(tok(t, add_special_tokens=False)["input_ids"]) == 1
    assert vlm.model.config.image_token_id == tok.convert_tokens_to_ids("<|image|>")
    assert tok.convert_tokens_to_ids("<turn|>") in vlm.eos_token_ids
    assert "<start_of_turn>" not in tok.get_vocab() and "<image_soft_token>" not in tok.get_vocab()


# ----------------------------------------------------------------- loading safety and load errors
def _copy_checkpoint(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_broken_config_json_is_named(tiny_checkpoint_dirs, tmp_path):
    folder = _copy_checkpoint(tiny_checkpoint_dirs["smolvlm"], tmp_path / "broken")
    (folder / "config.json").write_text('{"model_type": "smolvlm", ')
    with pytest.raises(OSError) as err:
        load_vlm(str(folder), device="cpu")
    msg = str(err.value)
    assert "\n" not in msg and str(folder / "config.json") in msg and "not valid JSON" in msg and "fix:" in msg
    (folder / "config.json").unlink()
    with pytest.raises(OSError, match="config.json is missing"):
        load_vlm(str(folder), device="cpu")


def test_broken_tokenizer_json_is_named(tiny_checkpoint_dirs, tmp_path):
    folder = _copy_checkpoint(tiny_checkpoint_dirs["qwen3vl"], tmp_path / "broken-tok")
    (folder / "tokenizer.json").write_text("{not json")
    with pytest.raises(OSError) as err:
        load_vlm(str(folder), device="cpu")
    assert "\n" not in str(err.value) and str(folder / "tokenizer.json") in str(err.value)


def test_pickle_weights_refused_unless_allowed_by_name(tiny_checkpoint_dirs, tmp_path, coco_image):
    from safetensors.torch import load_file

    folder = _copy_checkpoint(tiny_checkpoint_dirs["qwen3vl"], tmp_path / "pickled")
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    with pytest.raises(OSError) as err:
        load_vlm(str(folder), device="cpu")
    msg = str(err.value)
    assert "\n" not in msg and "pytorch_model.bin" in msg and "allow_pickle=True" in msg
    vlm = load_vlm(str(folder), device="cpu", allow_pickle=True)
    cfg = load_config()
    q = questions_for_item(ROW, cfg)[0]
    ref = load_vlm(str(tiny_checkpoint_dirs["qwen3vl"]), device="cpu")
    # the same weights bit for bit, but torch.load's tensors are 64-byte aligned and safetensors' are not: the CPU
    # kernels' vector loops then round the last bit differently (measured 3.8e-9 in c_int with the text head_dim 32
    # that vLLM's CPU attention needs; identical with 16), so equal within float32's agreement bar, not bitwise
    assert read_question(vlm, coco_image, q, cfg)["c_int"] == pytest.approx(
        read_question(ref, coco_image, q, cfg)["c_int"], abs=1e-6)


def test_load_vlm_safety_keywords_are_keyword_only():
    import inspect

    params = inspect.signature(load_vlm).parameters
    for name in ("trust_remote_code", "allow_pickle"):
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY and params[name].default is False


def test_remote_code_is_refused_without_a_prompt(tmp_path, monkeypatch):
    """A checkpoint with custom code: a one-line error naming trust_remote_code; nothing runs, nothing asks."""
    import builtins
    import json as _json

    folder = tmp_path / "remote"
    folder.mkdir()
    ran = tmp_path / "code-ran"
    code = f"open({str(ran)!r}, 'w').write('x')\nfrom transformers import PretrainedConfig\n" \
           "class MurkRemoteConfig(PretrainedConfig):\n    model_type = 'murk_remote'\n"
    (folder / "configuration_murk_remote.py").write_text(code)
    (folder / "config.json").write_text(_json.dumps({
        "model_type": "murk_remote", "architectures": ["MurkRemoteModel"],
        "auto_map": {"AutoConfig": "configuration_murk_remote.MurkRemoteConfig",
                     "AutoProcessor": "configuration_murk_remote.MurkRemoteConfig",
                     "AutoModelForImageTextToText": "configuration_murk_remote.MurkRemoteConfig"}}))
    (folder / "model.safetensors").write_bytes(b"")

    def no_prompt(*args, **kwargs):
        raise AssertionError("load_vlm asked on the terminal")

    monkeypatch.setattr(builtins, "input", no_prompt)
    with pytest.raises(OSError) as err:
        load_vlm(str(folder), device="cpu")
    msg = str(err.value)
    assert "\n" not in msg and "trust_remote_code=True" in msg and "murk.readout.load_vlm" in msg
    assert str(folder) in msg and "hf.co" not in msg  # the hint points at the folder, not at the hub
    assert not ran.exists()


def test_item_readouts_option_distribution_and_abstain_scores():
    """p_option_k, target and p_abstain(2) from hand-made letter probabilities (schema 4)."""
    from murk.protocol import Question
    from murk.readout import PromptSlot, item_readouts

    q = Question(task="t3_true", stem="Is it a cat?", options=("Yes", "No"), correct_index=1)
    slots = [PromptSlot(0, "main", "v1", "", ("A", "B"), True), PromptSlot(0, "abstain", "v1", "", ("A", "B", "C"), False),
             PromptSlot(0, "abstain2", "v1", "", ("A", "B", "C"), False)]
    probs = [np.array([0.2, 0.6]), np.array([0.1, 0.1, 0.3]), np.array([0.5, 0.2, 0.1])]
    r = item_readouts([q], slots, probs, ["B", "C", "A"], ["B. Confidence: 70", None, None])["t3_true"]
    assert (r["p_option_0"], r["p_option_1"]) == (0.2 / 0.8, 0.6 / 0.8)
    assert math.isnan(r["p_option_2"]) and math.isnan(r["p_option_3"])
    assert r["c_int"] == r["p_option_1"] and r["answer"] == 1.0 and r["target"] == 1.0 and r["correct"] == 1.0
    assert r["p_abstain"] == 0.3 / 0.5 and r["abstain"] == 1.0
    assert r["p_abstain2"] == pytest.approx(0.125, rel=1e-12) and r["abstain2"] == 0.0
