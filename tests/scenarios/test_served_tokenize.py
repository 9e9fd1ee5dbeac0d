"""The real vLLM server the project starts (``make vllm-env``; tests/_vllm.py, fixture ``vllm_server``) sees
murk's prompts token for token: its ``/tokenize`` of one of murk's prompts, sent as chat messages with murk's
presented image and the "Answer:" prefill, equals the ids murk's in-process read-out feeds the model (issue 41).
The read-outs themselves through the server: the served back-end's tests."""

import base64
import io

import numpy as np
import pytest

pytestmark = [pytest.mark.served, pytest.mark.slow]


def _png_url(pil) -> str:
    buf = io.BytesIO()
    pil.save(buf, format="PNG")  # lossless: the server sees murk's pixels
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _server_ids(server, user_text: str, prefill: str, pil) -> list[int]:
    import httpx

    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": _png_url(pil)}},
                                             {"type": "text", "text": user_text}]},
                {"role": "assistant", "content": prefill}]
    r = httpx.post(f"{server.base_url}/tokenize", timeout=60.0,
                   json={"model": server.name, "messages": messages, "add_generation_prompt": False,
                         "continue_final_message": True})
    assert r.status_code == 200, r.text[:2000]
    return r.json()["tokens"]


def test_server_tokenizes_murks_prompt_as_murk_does(vllm_server):
    """One main prompt of murk (spec Table II, an identification question) on a 640 x 480 image: the server's
    ids equal murk's (image span included) when it gets murk's presented image (<= 448 px a side); the
    original image, resized by the server's processor instead, gives other ids (so the comparison sees the
    presentation)."""
    from PIL import Image

    from murk import core
    from murk.protocol import questions_for_item, render_prompt
    from murk.readout import build_prompt_text, encode, load_vlm, present_image

    cfg = core.load_config()
    prefill = cfg["readout"]["assistant_prefill"]
    row = {"category": "dog", "t2_options": ["cat", "dog", "horse", "sheep"], "t2_answer_index": 1,
           "t3_distractor": "cat"}
    user_text, _letters = render_prompt(questions_for_item(row, cfg)[0], "main", cfg)
    image = np.random.default_rng(0).integers(0, 256, size=(480, 640, 3), dtype=np.uint8)
    vlm = load_vlm(str(vllm_server.folder), device="cpu")
    pil = present_image(image)
    murk_ids = encode(vlm, [build_prompt_text(vlm, user_text, prefill)], pil)["input_ids"][0].tolist()

    served = _server_ids(vllm_server, user_text, prefill, pil)
    assert served == murk_ids, (len(served), len(murk_ids))
    assert _server_ids(vllm_server, user_text, prefill, Image.fromarray(image)) != murk_ids
