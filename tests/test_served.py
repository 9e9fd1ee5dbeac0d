"""Tests of murk.readout's served back-end (murk.readout._served) against a fake OpenAI-compatible server
(tests/_fake_openai.py): what it asks and records, retries, refusals, missing options, requests in flight."""

import math
import re

import numpy as np
import pytest

from _fake_openai import FakeServer
from murk.core import load_config
from murk.protocol import questions_for_item
from murk.readout import (ImageJob, ServedClient, ServedError, ServedModel, Unit, chat_messages, item_prompts,
                          load_served_vlm, png_data_url, present_image, read_images_served, readouts_from_scores)
from murk.readout._served import _Answer

ROW = {"category": "umbrella", "t2_options": ["car", "umbrella", "bench", "kite"], "t2_answer_index": 1,
       "t3_distractor": "truck"}
CFG = load_config()


@pytest.fixture(scope="module")
def head(tiny_checkpoint_dirs):
    """The tiny SmolVLM's files without its weights (load_served_vlm)."""
    return load_served_vlm(str(tiny_checkpoint_dirs["smolvlm"]))


def _image(seed=0):
    return np.random.default_rng(seed).integers(0, 255, size=(60, 80, 3), dtype=np.uint8)


def _unit(verbal=("v1",), seed=0):
    return Unit(0, "fog", 3, _image(seed), tuple(questions_for_item(ROW, CFG)), verbal)


def _fake(head, **kw):
    opt = sorted(i for ids in head.option_tokens.values() for i in ids)
    return FakeServer(head, favour=tuple(opt), **kw).start()


def _client(head, fake, **kw):
    c = ServedClient(ServedModel(fake.url, fake.name, **kw), head, CFG)
    c.probe()
    return c


def _read(client, unit):
    slots, bodies, ids, size = client.unit_requests(unit)
    answers = [client.ask(b, i, (s.user, size), s.variant) for s, b, i in zip(slots, bodies, ids)]
    return client.readouts(unit, slots, answers)


def _expected(head, fake, unit):
    """What the made-up model's distributions give through the reference's shared path (readouts_from_scores)."""
    slots = item_prompts(unit.questions, CFG, unit.verbal_variants)
    url = png_data_url(present_image(unit.image, head.max_side_px))
    probs = np.stack([fake.probs_of(chat_messages(url, s.user, "Answer:")) for s in slots])
    conts, stops = [], []
    for j, s in enumerate(slots):
        if s.generate:
            toks = fake.continuation(int(np.argmax(probs[j])), 12)
            conts.append(head.tokenizer.decode(toks, skip_special_tokens=True))
            stops.append(0.0 if toks[-1] in head.eos_token_ids else 1.0)
        else:
            conts.append(None)
            stops.append(math.nan)
    return readouts_from_scores(head, unit.questions, slots, probs, conts, stops)


def _same(got, want, tol=1e-12):
    for task, r in want.items():
        for k, v in r.items():
            g = got[task][k]
            if isinstance(v, str):
                assert g == v, (task, k)
            else:
                assert (math.isnan(v) and math.isnan(g)) or abs(g - v) <= tol, (task, k, g, v)


def test_served_readouts_are_the_reference_readouts_of_the_same_distributions(head):
    """Every read-out (option probabilities, answer, c_int, abstain, verbal text and value) as murk's reference
    records them from the same first-token distributions; the probe learns the server's identity."""
    fake = _fake(head)
    try:
        client = _client(head, fake)
        assert client.logprobs_mode == "logprob_token_ids" and client.tokenize
        attrs = client.identity_attrs()
        assert attrs["served_engine"] == "vllm" and attrs["served_engine_version"] == "0.0.fake"
        assert attrs["served_model"] == "fake-model" and attrs["served_root"] == "/ckpt/fake"
        unit = _unit(("v1", "v2", "v3"))
        got, want = _read(client, unit), _expected(head, fake, unit)
        _same(got, want)
        assert "Conf" in got["t2"]["verbal_text"] and got["t2"]["verbal_text_v3"] and got["t2"]["verbal_stop"] == 1.0
        # the seam: another image gives other numbers (the client sends the image it presents)
        other = _read(client, _unit(seed=1))
        assert other["t2"]["p_option_0"] != got["t2"]["p_option_0"]
        # the tokens were checked once per prompt text and image size: a second unit of that size asks no /tokenize
        n_tok = fake.calls["/tokenize"]
        _read(client, _unit(seed=2))
        assert fake.calls["/tokenize"] == n_tok
    finally:
        fake.stop()


def test_429_and_503_are_retried_then_read(head):
    fake = _fake(head, fail_chat=[])
    try:
        client = _client(head, fake, backoff_s=0.01)
        fake.fail_chat[:] = [429, 503, 503]
        unit = _unit()
        _same(_read(client, unit), _expected(head, fake, unit))
        assert fake.calls["/v1/chat/completions"] == 1 + 9 + 3  # the probe, 9 prompts, 3 retried
    finally:
        fake.stop()


def test_a_server_that_keeps_failing_stops_the_run_in_one_line(head):
    fake = _fake(head)
    try:
        client = _client(head, fake, retries=3, backoff_s=0.01)
        fake.fail_chat[:] = [503] * 10
        with pytest.raises(ServedError, match=r"after 3 tries \(last: HTTP 503.*rerun the same command") as e:
            _read(client, _unit())
        assert "\n" not in str(e.value)
    finally:
        fake.stop()


@pytest.mark.parametrize("kw, match", [
    (dict(logprobs=False), r"returns no log-probabilities .*logprob_token_ids or top_logprobs"),
    (dict(prefill=False), r"cannot prefill the assistant turn \(continue_final_message"),
])
def test_a_server_without_logprobs_or_prefill_is_refused_at_the_probe(head, kw, match):
    fake = _fake(head, **kw)
    try:
        with pytest.raises(ServedError, match=match) as e:
            _client(head, fake)
        assert "\n" not in str(e.value) and fake.url in str(e.value)
        assert fake.calls.get("/tokenize", 0) == 0  # refused at the probe, before any prompt
    finally:
        fake.stop()


def test_a_model_the_server_does_not_serve_is_refused(head):
    fake = _fake(head)
    try:
        with pytest.raises(ServedError, match=r"does not serve 'other' \(it serves fake-model\): set served_model"):
            ServedClient(ServedModel(fake.url, "other"), head, CFG).probe()
    finally:
        fake.stop()


def test_a_tokenisation_mismatch_is_refused_naming_both(head):
    fake = _fake(head, tokenize_shift=True)
    try:
        client = _client(head, fake)
        with pytest.raises(ServedError, match=r"tokenises main into (\d+) tokens, murk \(.*\) into \d+; first "
                                              r"difference at position \d+: server '.*' \(id \d+\), murk") as e:
            _read(client, _unit())
        assert "\n" not in str(e.value)
        n_server, n_murk = map(int, re.findall(r"into (\d+)", str(e.value)))
        assert n_server == n_murk + 1
    finally:
        fake.stop()


def test_without_logprob_token_ids_the_top_logprobs_give_the_same_readouts(head):
    fake = _fake(head, token_ids_field=False)
    try:
        client = _client(head, fake)
        assert client.logprobs_mode == "top_logprobs"
        unit = _unit()
        _same(_read(client, unit), _expected(head, fake, unit), tol=1e-9)  # all options among the top 20
    finally:
        fake.stop()


def test_an_option_beyond_the_top_logprobs_is_a_recorded_missing_reason(head):
    """read_images_served: the image's missing reason names the option and the prompt, never a silent zero."""
    c_ids = set(head.option_tokens["C"])
    fake = _fake(head, token_ids_field=False, top_k_drop=c_ids)
    try:
        client = _client(head, fake)
        unit = _unit()
        job = ImageJob(unit.questions, [(unit.arm, unit.level, unit.image)], unit.verbal_variants)
        (res,) = list(read_images_served(client, [0], lambda i: job, progress=False))
        assert res.results is None
        # (the first of the item's prompts where C is not the sampled token, which a server always reports)
        assert re.match(r"served: option C of the prompt t\d\w*/\w+/v1 at fog/3 is not among the server's top 20 "
                        r"log-probabilities \(the server gives no logprob_token_ids\)$", res.missing_reason)
    finally:
        fake.stop()


def test_requests_in_flight_are_bounded_and_done_images_are_not_asked(head):
    fake = _fake(head, delay_s=0.05)
    try:
        client = _client(head, fake, max_in_flight=3)
        jobs = {i: ImageJob(_unit().questions, [("fog", 3, _image(i))], ("v1",)) for i in range(3)}
        before = fake.calls["/v1/chat/completions"]
        got = list(read_images_served(client, [0, 1, 2], jobs.__getitem__, done={1}, progress=False))
        assert [r.item for r in got] == [0, 2] and all(r.missing_reason is None for r in got)
        assert fake.calls["/v1/chat/completions"] - before == 2 * 9  # image 1 (done) asked nothing
        assert fake.max_seen_in_flight == 3  # concurrent, and never more than max_in_flight
    finally:
        fake.stop()


def test_the_served_head_is_the_in_process_model_without_its_weights(head, tiny_vlms):
    """The prompts' ingredients equal load_vlm's: option tokens, end-of-sequence tokens, image tokens, processor
    settings, revision (the store's identity)."""
    full = tiny_vlms["smolvlm"]
    for k in ("option_tokens", "eos_token_ids", "n_visual_tokens", "image_kwargs", "max_side_px", "revision",
              "is_pipeline_check"):
        assert getattr(head, k) == getattr(full, k), k
    assert not hasattr(head.model, "forward")  # no weights


def test_a_served_store_is_not_resumed_from_another_server_root(tmp_path):
    from murk import results

    attrs = dict(config_hash="c", items_hash="i", model_id="m", depth_backend="constant", readout_engine="served")
    results.open_readout_store(tmp_path / "s.zarr", [1], ["dog"], {**attrs, "served_root": "/ckpt/a"}, ["x"])
    with pytest.raises(ValueError, match=r"served_root: store '/ckpt/a', this run '/ckpt/b'"):
        results.open_readout_store(tmp_path / "s.zarr", [1], ["dog"], {**attrs, "served_root": "/ckpt/b"}, ["x"])


def test_answers_are_parsed_by_token_id(head):
    """A response's token_id:N entries give the ids; the first generated token is the top token."""
    client = ServedClient(ServedModel("http://127.0.0.1:9/v1", "m"), head, CFG)
    a = client._answer({"choices": [{"finish_reason": "length", "logprobs": {"content": [
        {"token": "token_id:7", "logprob": -0.5, "top_logprobs": [{"token": "token_id:9", "logprob": -2.0}]},
        {"token": "token_id:8", "logprob": -0.1, "top_logprobs": []}]}}]})
    assert a == _Answer({7: -0.5, 9: -2.0}, 7, [7, 8], "length", None)
