"""A small fake OpenAI-compatible server (stdlib ``http.server`` in a thread) for the served back-end's unit tests.

It answers as vLLM does (``/v1/models``, ``/version``, ``/tokenize``, ``/v1/chat/completions`` with
``logprob_token_ids``, ``return_tokens_as_token_ids`` and ``return_token_ids``), from a made-up model: each
prompt's first-token distribution is a fixed function of its user text, prefill and image (:func:`fake_probs`), so
that a test can compute what the client must record. It can be made to misbehave: fail the first chat requests
with given statuses, return no log-probabilities, reject the assistant prefill, ignore ``logprob_token_ids``
(answering ``top_logprobs`` only), tokenise otherwise than murk, or answer slowly while counting the requests in
flight.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np


def _key(user: str, prefill: str, image_url: str) -> bytes:
    return hashlib.sha256(json.dumps([user, prefill, image_url]).encode()).digest()


def fake_probs(vocab: int, user: str, prefill: str, image_url: str, favour=()) -> np.ndarray:
    """The made-up model's first-token distribution of one prompt, float64 ``(vocab,)``: random logits seeded by the
    prompt, with the ``favour`` ids (the option letters) raised so that they hold most of the mass."""
    rng = np.random.default_rng(np.frombuffer(_key(user, prefill, image_url)[:8], dtype=np.uint64)[0])
    logits = rng.normal(0.0, 2.0, size=vocab)
    if len(favour):
        logits[list(favour)] += 12.0 + rng.normal(0.0, 1.0, size=len(favour))
    z = np.exp(logits - logits.max())
    return z / z.sum()


@dataclass
class FakeServer:
    """The fake server. ``url`` is its ``/v1`` base URL once :meth:`start` ran.

    Attributes
    ----------
    vlm : murk.readout.VLM
        Its tokenizer and processor make the tokens (as murk does, unless ``tokenize_shift``).
    name : str
        The served model's name.
    fail_chat : list of int
        Statuses answered to the first chat completions, in order (then it answers).
    logprobs, prefill, token_ids_field : bool
        False: no log-probabilities; rejects ``continue_final_message``; rejects ``logprob_token_ids``.
    tokenize_shift : bool
        ``/tokenize`` gives one token more than murk's (at position 3).
    top_k_drop : set of int
        Ids left out of the top log-probabilities (with ``token_ids_field=False``): an option beyond the top k.
    delay_s : float
        Each chat completion sleeps this long (in flight).
    """

    vlm: Any
    name: str = "fake-model"
    fail_chat: list = field(default_factory=list)
    logprobs: bool = True
    prefill: bool = True
    token_ids_field: bool = True
    tokenize_shift: bool = False
    top_k_drop: set = field(default_factory=set)
    delay_s: float = 0.0
    favour: tuple = ()
    in_flight: int = 0
    max_seen_in_flight: int = 0
    calls: dict = field(default_factory=dict)
    url: str = ""

    def start(self) -> FakeServer:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def _reply(self, status: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                fake._count(self.path)
                if self.path == "/v1/models":
                    return self._reply(200, {"object": "list", "data": [
                        {"id": fake.name, "object": "model", "owned_by": "vllm", "root": "/ckpt/fake",
                         "max_model_len": 2048}]})
                if self.path == "/version":
                    return self._reply(200, {"version": "0.0.fake"})
                return self._reply(404, {"error": "not found"})

            def do_POST(self):
                fake._count(self.path)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if self.path == "/tokenize":
                    return self._reply(200, fake._tokenize(body))
                if self.path != "/v1/chat/completions":
                    return self._reply(404, {"error": "not found"})
                with fake._lock:
                    fake.in_flight += 1
                    fake.max_seen_in_flight = max(fake.max_seen_in_flight, fake.in_flight)
                    status = fake.fail_chat.pop(0) if fake.fail_chat else 200
                try:
                    if fake.delay_s:
                        time.sleep(fake.delay_s)
                    reply = (status, {"error": f"status {status}"}) if status != 200 else fake._chat(body)
                finally:
                    # out of flight before the answer is written: the client may send its next request as soon as
                    # it has read this one, before this thread runs again (counted after the write, a loaded
                    # machine saw max_in_flight + 1: 4 of 3, with four test workers on 2 cores)
                    with fake._lock:
                        fake.in_flight -= 1
                return self._reply(*reply)

        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _count(self, path: str) -> None:
        with self._lock:
            self.calls[path] = self.calls.get(path, 0) + 1

    # ---------------------------------------------------------------- the made-up model

    @staticmethod
    def _parts(messages: list) -> tuple[str, str, str]:
        user = messages[0]["content"]
        if isinstance(user, str):
            return user, messages[-1]["content"], ""
        text = next(c["text"] for c in user if c["type"] == "text")
        url = next(c["image_url"]["url"] for c in user if c["type"] == "image_url")
        return text, messages[-1]["content"], url

    def _ids(self, messages: list) -> list[int]:
        from PIL import Image

        from murk.readout import build_prompt_text, encode

        user, prefill, url = self._parts(messages)
        if not url:
            return self.vlm.tokenizer(user + prefill)["input_ids"]
        pil = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB")
        ids = encode(self.vlm, [build_prompt_text(self.vlm, user, prefill)], pil)["input_ids"][0].tolist()
        if self.tokenize_shift:
            ids = ids[:3] + [ids[3]] + ids[3:]
        return ids

    def _tokenize(self, body: dict) -> dict:
        ids = self._ids(body["messages"])
        return {"count": len(ids), "max_model_len": 2048, "tokens": ids}

    def probs_of(self, messages: list) -> np.ndarray:
        user, prefill, url = self._parts(messages)
        return fake_probs(len(self.vlm.tokenizer), user, prefill, url, self.favour)

    def continuation(self, first: int, max_tokens: int) -> list[int]:
        """The made-up greedy continuation: the first token, then "\\nConfidence: 70" and the end of sequence."""
        rest = self.vlm.tokenizer("\nConfidence: 70", add_special_tokens=False)["input_ids"]
        return ([first] + list(rest) + [sorted(self.vlm.eos_token_ids)[0]])[:max_tokens]

    def _chat(self, body: dict) -> tuple[int, dict]:
        if body.get("continue_final_message") and not self.prefill:
            return 400, {"error": {"message": "continue_final_message is not supported by this server"}}
        if "logprob_token_ids" in body and not self.token_ids_field:
            return 400, {"error": {"message": "logprob_token_ids: extra inputs are not permitted"}}
        msgs = body["messages"]
        p = self.probs_of(msgs)
        lp = np.log(p)
        first = int(np.argmax(p))
        toks = self.continuation(first, int(body.get("max_tokens", 1)))
        eos = set(self.vlm.eos_token_ids)
        finish = "stop" if toks[-1] in eos else "length"

        def entry(i: int) -> dict:
            return {"token": f"token_id:{i}", "logprob": float(lp[i])}

        content = []
        for pos, t in enumerate(toks):
            e = entry(t)
            if pos == 0:
                if "logprob_token_ids" in body:
                    e["top_logprobs"] = [entry(i) for i in body["logprob_token_ids"]]
                else:
                    k = int(body.get("top_logprobs") or 0)
                    order = [int(i) for i in np.argsort(-p) if int(i) not in self.top_k_drop][:k]
                    e["top_logprobs"] = [entry(i) for i in order]
            else:
                e["top_logprobs"] = []
            content.append(e)
        choice = {"index": 0, "message": {"role": "assistant", "content": self.vlm.tokenizer.decode(toks)},
                  "finish_reason": finish, "logprobs": {"content": content} if self.logprobs else None,
                  "token_ids": toks}
        out = {"id": "x", "object": "chat.completion", "model": self.name, "choices": [choice]}
        if self.logprobs is False:
            choice["logprobs"] = None
        out["prompt_token_ids"] = self._ids(msgs)
        return 200, out
