"""Tests of the shared-prefix engine (benchmarks.baseline.score_prompts / read_item) on all tiny architectures.

The engine must give the read-outs of scoring each full prompt on its own
(largest |dp| <= 1e-6 in float32), whatever else shares the batch (in bfloat16:
an item's main read-outs are bit-identical whether or not the verbal wordings
v2/v3 are asked). All five tiny checkpoints through the read-out stage:
tests/scenarios/test_readout_stage.py.
"""

import math

import numpy as np
import pytest

from benchmarks.baseline import read_item, score_prompts
from murk.core import load_config
from murk.offline import TINY_MODELS
from murk.protocol import questions_for_item, render_prompt
from murk.readout import READOUTS, TEXT_READOUTS, read_question

ARCHS = sorted(set(TINY_MODELS.values()))
ROW = {"category": "umbrella", "t2_options": ["car", "umbrella", "bench", "kite"], "t2_answer_index": 1,
       "t3_distractor": "truck"}
TOL = 1e-6


def _close(a, b):
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= TOL


@pytest.mark.parametrize("arch", ARCHS)
def test_read_item_equals_each_prompt_scored_alone(arch, tiny_vlms, coco_image):
    """Shared prefix = whole prompts through this engine = whole prompts through ``generate``."""
    vlm = tiny_vlms[arch]
    cfg = load_config()
    qs = questions_for_item(ROW, cfg)
    shared = read_item(vlm, coco_image, qs, cfg)
    for q in qs:
        ref = read_question(vlm, coco_image, q, cfg)  # transformers' generate, one prompt at a time
        assert set(shared[q.task]) == set(READOUTS) | set(TEXT_READOUTS)
        for got in (shared[q.task],):
            for key in READOUTS:
                assert _close(got[key], ref[key]), (arch, q.task, key, got[key], ref[key])
            for key in ("verbal_text", "top_token"):
                assert got[key] == ref[key], (arch, q.task, key)
        assert math.isnan(shared[q.task]["verbal_conf_v2"]) and shared[q.task]["verbal_text_v2"] == ""


@pytest.mark.parametrize("arch", ARCHS)
def test_prompt_alone_vs_inside_a_mixed_batch_of_8(arch, tiny_vlms, coco_image):
    """One prompt scored alone, and inside a batch of 8 prompts of mixed length: same probabilities
    (|dp| <= 1e-4) and the same greedy continuation; and the same as the whole prompt without a cache."""
    vlm = tiny_vlms[arch]
    cfg = load_config()
    qs = questions_for_item(ROW, cfg)
    users = [render_prompt(q, v, cfg)[0] for q in qs for v in ("main", "abstain")]
    users += [render_prompt(qs[0], "main", cfg, verbal="v2")[0], render_prompt(qs[2], "abstain2", cfg)[0]]
    assert len(users) == 8 and len({len(u) for u in users}) > 4
    gen = [True, False] * 4
    batch = score_prompts(vlm, coco_image, users, gen, cfg)
    for row in (5, 6):  # a scored-only row (t3_false, abstain) and a generating row (t2, main, wording v2)
        alone = score_prompts(vlm, coco_image, [users[row]], [gen[row]], cfg)
        whole = score_prompts(vlm, coco_image, [users[row]], [gen[row]], cfg, shared_prefix=False)
        assert batch.shared and batch.vision_passes == 1 and not whole.shared
        assert np.abs(batch.probs[row] - alone.probs[0]).max() <= TOL
        assert np.abs(batch.probs[row] - whole.probs[0]).max() <= TOL
        assert batch.continuations[row] == alone.continuations[0] == whole.continuations[0]
    # the batch shares one prefix that holds the whole image (else shared is False)
    assert batch.n_prefix_tokens > 0 and min(batch.n_tail_tokens) > 0


def test_verbal_variants_are_extra_readouts(tiny_vlms, coco_image):
    vlm = tiny_vlms["qwen3vl"]
    cfg = load_config()
    qs = questions_for_item(ROW, cfg)
    base = read_item(vlm, coco_image, qs, cfg)
    more = read_item(vlm, coco_image, qs, cfg, verbal_variants=("v1", "v2", "v3"))
    for q in qs:
        for key in ("answer", "c_int", "option_mass", "abstain", "abstain2"):
            assert _close(base[q.task][key], more[q.task][key])
        assert base[q.task]["verbal_text"] == more[q.task]["verbal_text"]
        assert more[q.task]["verbal_text_v2"] and more[q.task]["verbal_text_v3"]
    with pytest.raises(ValueError, match="v1"):
        read_item(vlm, coco_image, qs, cfg, verbal_variants=("v2",))
    with pytest.raises(ValueError, match="unknown"):
        read_item(vlm, coco_image, qs, cfg, verbal_variants=("v1", "v9"))


def test_continuation_that_ends_at_eos(tiny_vlms, coco_image, monkeypatch):
    """A continuation that says EOS early: verbal_stop 0, the text up to it; the engine and generate agree."""
    vlm = tiny_vlms["qwen3vl"]
    cfg = load_config()
    q = questions_for_item(ROW, cfg)[0]
    free = read_item(vlm, coco_image, [q], cfg)["t2"]
    assert free["verbal_stop"] == 1.0  # random weights: no EOS in 12 tokens
    user, _ = render_prompt(q, "main", cfg)
    seq = score_prompts(vlm, coco_image, [user], [True], cfg)
    third = vlm.tokenizer(seq.continuations[0], add_special_tokens=False)["input_ids"][2]
    eos = (*vlm.eos_token_ids, int(third))
    monkeypatch.setattr(vlm, "eos_token_ids", eos)
    monkeypatch.setattr(vlm.model.generation_config, "eos_token_id", list(eos))
    stopped = read_item(vlm, coco_image, [q], cfg)["t2"]
    ref = read_question(vlm, coco_image, q, cfg)
    assert stopped["verbal_stop"] == ref["verbal_stop"] == 0.0
    assert stopped["verbal_text"] == ref["verbal_text"]
    assert free["verbal_text"].startswith(stopped["verbal_text"])
    assert len(stopped["verbal_text"]) < len(free["verbal_text"])
    for key in ("answer", "c_int", "option_mass"):
        assert stopped[key] == free[key]


def test_bf16_main_readouts_do_not_depend_on_the_verbal_wordings(tiny_checkpoint_dirs, coco_image):
    """bfloat16: the nine main prompts form their own batch, so asking v2/v3 changes nothing in them."""
    import torch

    from murk.readout import load_vlm

    cfg = load_config()
    qs = questions_for_item(ROW, cfg)
    for arch in ("qwen3vl", "smolvlm"):
        vlm = load_vlm(str(tiny_checkpoint_dirs[arch]), device="cpu", dtype=torch.bfloat16)
        assert next(vlm.model.parameters()).dtype == torch.bfloat16
        alone = read_item(vlm, coco_image, qs, cfg)
        more = read_item(vlm, coco_image, qs, cfg, verbal_variants=("v1", "v2", "v3"))
        for q in qs:
            for key in ("answer", "c_int", "option_mass", "abstain", "abstain2", "verbal_conf", "verbal_stop"):
                a, b = alone[q.task][key], more[q.task][key]
                assert (math.isnan(a) and math.isnan(b)) or a == b, (arch, q.task, key)  # bit-identical
            assert alone[q.task]["verbal_text"] == more[q.task]["verbal_text"]
            assert more[q.task]["verbal_stop_v2"] in (0.0, 1.0)


def test_softmax_is_float32_in_bf16():
    """The vocabulary softmax of bf16 logits is taken in float32 (a bf16 softmax sums to 1 only within ~1e-2)."""
    import torch

    from murk.readout import softmax32

    logits = (torch.randn(4, 50_000) * 8).to(torch.bfloat16)
    p = softmax32(logits)
    assert p.dtype == np.float64 and np.abs(p.sum(-1) - 1).max() < 1e-5
    ref = torch.softmax(logits.float(), -1).double().numpy()
    assert np.array_equal(p, ref)


def test_groups_validate(tiny_vlms, coco_image):
    vlm = tiny_vlms["qwen3vl"]
    cfg = load_config()
    users = [render_prompt(q, "main", cfg)[0] for q in questions_for_item(ROW, cfg)]
    with pytest.raises(ValueError, match="partition"):
        score_prompts(vlm, coco_image, users, None, cfg, groups=[[0, 1]])
    one = score_prompts(vlm, coco_image, users, None, cfg)
    two = score_prompts(vlm, coco_image, users, None, cfg, groups=[[0, 1], [2]])
    assert two.vision_passes == 1 and two.shared  # the second group reuses the first group's prefix
    assert np.abs(one.probs - two.probs).max() <= TOL


def test_bf16_output_head_runs_in_float32(tiny_checkpoint_dirs, coco_image):
    """In bfloat16 the logits are not rounded to 8 bits: the head runs on a float32 copy of its weight."""
    import torch

    from murk.readout import build_prompt_text, encode, load_vlm, present_image

    vlm = load_vlm(str(tiny_checkpoint_dirs["qwen3vl"]), device="cpu", dtype="bfloat16")
    head = vlm.model.get_output_embeddings()
    assert head.weight.dtype == torch.bfloat16  # the model itself stays bf16
    inputs = encode(vlm, [build_prompt_text(vlm, "Hi", "Answer:")], present_image(coco_image))
    with torch.inference_mode():
        logits = vlm.model(**inputs, logits_to_keep=1).logits
    assert logits.dtype == torch.float32
    rounded = logits.to(torch.bfloat16).float()
    assert not torch.equal(rounded, logits)  # bf16 logits would have lost these digits
