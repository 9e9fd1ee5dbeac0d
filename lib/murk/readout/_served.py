"""The served back-end of the read-out: a model read out through an OpenAI-compatible server (vLLM and others).

A model entry with ``server`` (:class:`murk.core.ModelEntry`) is read out by sending each prompt of each unit to
the server's chat completions, asking exactly what the in-process engine asks: the same units and prompts
(:func:`murk.readout.item_prompts`), one user turn with the presented image (:func:`murk.readout.present_image`,
sent lossless as a PNG data URL) and the question, the assistant turn prefilled with ``readout.assistant_prefill``
("Answer:", sent as a final assistant message with ``continue_final_message: true, add_generation_prompt:
false``), greedy decoding, one token for the abstain prompts and ``readout.verbal_max_new_tokens`` (12) for the
main prompts, which carry the verbal-confidence continuation. The read-outs are recorded by the one
implementation every engine shares (:func:`murk.readout.item_readouts`).

What a served read-out relies on, checked once at the start (:meth:`ServedClient.probe`) or per prompt:

- **Log-probabilities of the option letters.** vLLM's ``logprob_token_ids`` request field returns the
  log-probability of every option-letter token variant at the first generated position; ``p_k`` sums them per
  letter (as :func:`murk.readout.letter_probs` does in-process) and :func:`murk.readout.item_readouts`
  renormalises over the options. A server without that field is asked for its ``top_logprobs`` (k = 20): a
  letter none of whose variants is among the top k makes the image a recorded missing value (its reason names
  the prompt and the letter), never a silent zero; a variant of a letter that is present but itself beyond the
  top k has a probability below the k-th one and is counted as 0 (said in the store's ``served_logprobs``).
  A server that returns no log-probabilities is refused in one line.
- **The prefill.** A server that rejects ``continue_final_message`` is refused in one line.
- **The same tokens.** The server's tokenisation of each prompt (its ``/tokenize`` with the same messages, cached
  per distinct prompt text and presented image size, which fix the tokens exactly; else the prompt ids a vLLM
  response carries) must equal murk's (:func:`murk.readout.image_inputs`): a mismatch is refused in one line
  naming both counts and the first position where they differ, with both tokens.
- **The server's identity** (engine and version from ``/version``, the served model and its ``root`` from
  ``/v1/models``, the dtype and processor settings where the server tells them) goes into the store's
  attributes (:meth:`ServedClient.identity_attrs`).

Requests run in a thread pool of ``max_in_flight`` threads over one ``httpx.Client`` (at most that many in flight);
429, 5xx and connection errors are retried with exponential backoff (``Retry-After`` honoured), and after the last
try :class:`ServedError` says so in one line: the images written before stay in the store and the same command
resumes after them (:func:`read_images_served` reads only the images not yet done).
"""

from __future__ import annotations

import base64
import io
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from murk.core import load_config
from murk.readout._engine import BAD_INPUT_ERRORS, _option_ids
from murk.readout._item_readouts import PromptSlot, item_prompts, item_readouts
from murk.readout._schedule import EngineStats, ImageJob, ImageResult, N_CONDITIONS, Unit
from murk.readout._verbal import VERBAL_STOP_EOS, VERBAL_STOP_LIMIT, until_eos
from murk.readout._vlm import VLM, build_prompt_text, image_inputs, present_image

log = logging.getLogger("murk")

__all__ = ["DEFAULT_MAX_IN_FLIGHT", "TOP_LOGPROBS", "ServedModel", "ServedError", "ServedClient",
           "load_served_vlm", "read_images_served", "png_data_url", "chat_messages"]

#: requests in flight at once when a model entry gives no ``max_in_flight``
DEFAULT_MAX_IN_FLIGHT = 8

#: the number of top log-probabilities asked of a server without ``logprob_token_ids`` (OpenAI's API allows 20)
TOP_LOGPROBS = 20

#: HTTP statuses retried (too many requests, server errors)
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


class ServedError(RuntimeError):
    """A served read-out refused or stopped: one line naming the server, what is missing or wrong, and the fix."""


@dataclass(frozen=True)
class ServedModel:
    """Where a model is served: an OpenAI-compatible server's base URL and the model's name there.

    Attributes
    ----------
    url : str
        Base URL of the OpenAI-compatible API, e.g. ``http://127.0.0.1:8000/v1`` (the model entry's ``server``).
    name : str
        The name the server serves the model under (its ``/v1/models``; the entry's ``served_model``).
    max_in_flight : int
        Requests in flight at once (the entry's ``max_in_flight``, default :data:`DEFAULT_MAX_IN_FLIGHT`).
    retries : int
        Tries of one request before :class:`ServedError` (429, 5xx, connection errors).
    backoff_s : float
        Wait before the second try in seconds; doubled after each further failure (capped at 30 s).
    timeout_s : float
        Seconds one request may take.
    """

    url: str
    name: str
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    retries: int = 6
    backoff_s: float = 0.5
    timeout_s: float = 600.0

    @classmethod
    def from_entry(cls, entry: Any, **kw: Any) -> ServedModel:
        """From a model entry (:class:`murk.core.ModelEntry`, or a mapping with its keys) that names a server.

        Raises
        ------
        ValueError
            If the entry names no server.
        """
        get = entry.get if isinstance(entry, Mapping) else (lambda k: getattr(entry, k, None))
        if not get("server"):
            raise ValueError(f"model {get('id')!r} names no server: it reads out in-process")
        return cls(str(get("server")).rstrip("/"), str(get("served_model") or get("id")),
                   int(get("max_in_flight") or DEFAULT_MAX_IN_FLIGHT), **kw)

    @property
    def origin(self) -> str:
        """The server's root URL (the base URL without its ``/v1``): where vLLM answers ``/version`` and ``/tokenize``."""
        u = self.url.rstrip("/")
        return u[: -len("/v1")] if u.endswith("/v1") else u


# --------------------------------------------------------------------------- the model's files, without weights


class _Weightless:
    """What the read-out's host code reads of a model (its config and generation config), without its weights."""

    def __init__(self, config: Any, generation_config: Any) -> None:
        self.config = config
        self.generation_config = generation_config

    def eval(self) -> _Weightless:
        return self

    def get_output_embeddings(self) -> None:
        return None


def load_served_vlm(model: str, root: str | os.PathLike | None = None, config: Mapping[str, Any] | None = None, *,
                    trust_remote_code: bool = False, command: str = "python") -> VLM:
    """The processor, tokenizer, chat template and option tokens of a model, without its weights.

    A served model is read out by its server; murk builds its prompts and checks the server's tokenisation with
    the model's own files, loaded from ``model`` (hub id, folder or murk's offline id) as
    :func:`murk.readout.load_vlm` loads them (the same checks of the files, option tokens, greedy generation
    config, end-of-sequence tokens, revision), but never the weights.

    Parameters
    ----------
    model : str
        The model entry's ``id``.
    root : path, optional
        Output root holding murk's offline checkpoints.
    config : dict, optional
        Study configuration; default the project's.
    trust_remote_code : bool, keyword only
        As for :func:`murk.readout.load_vlm` (the processor's code).
    command : str, keyword only
        What runs the load (a refusal's fix in its words).

    Returns
    -------
    VLM
        With ``model`` a weightless stand-in (its ``config`` and greedy ``generation_config``), ``device``
        ``"cpu"`` and ``dtype`` torch.float32 (the processor's outputs; the server's dtype is the server's).

    Raises
    ------
    OSError
        One line naming the model, what failed and the fix (as :func:`murk.readout.load_vlm`).
    """
    import torch
    from transformers import AutoConfig, GenerationConfig

    from murk import core
    from murk.readout._load import (_LoadError, _load_processor, _not_found, _parts_error, _pretrained_kwargs,
                                    _resolve_source, _snapshot_folder, hub_revision, vlm_from_parts)

    cfg = load_config() if config is None else config
    kwargs = _pretrained_kwargs(trust_remote_code)
    source, local, built = _resolve_source(model, root)
    try:
        net_config = AutoConfig.from_pretrained(source, **kwargs)
        processor = _load_processor(model, source, kwargs)
    except Exception as err:  # noqa: BLE001 - named in one line
        if local:
            raise _LoadError(f"cannot load the tokenizer and processor of model {model!r} from {source}: "
                             f"{type(err).__name__}: {' '.join(str(err).split())}; fix: check its config.json, "
                             f"tokenizer and processor files") from err
        raise _not_found(model, err) from err
    try:
        gen = GenerationConfig.from_pretrained(source, **kwargs)
    except Exception:  # noqa: BLE001 - no generation_config.json: the model config's
        gen = GenerationConfig.from_model_config(net_config)
    revision = (core.checkpoint_revision(source) if local else hub_revision(model, kwargs) or "hub")
    try:
        return vlm_from_parts(_Weightless(net_config, gen), processor, model, str(revision), bool(built), "cpu",
                              torch.float32, cfg)
    except Exception as err:  # noqa: BLE001 - the chat template and option-token refusals are named
        folder = source if local else _snapshot_folder(model, kwargs)
        from pathlib import Path

        raise _parts_error(model, None if folder is None else Path(folder), err, command) or err


# --------------------------------------------------------------------------- requests


def png_data_url(pil: Any) -> str:
    """A PIL image as a lossless PNG ``data:`` URL (what the server decodes is exactly murk's presented image).

    >>> from PIL import Image
    >>> png_data_url(Image.new("RGB", (2, 2)))[:22]
    'data:image/png;base64,'
    """
    buf = io.BytesIO()
    pil.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def chat_messages(image_url: str, user_text: str, prefill: str) -> list[dict[str, Any]]:
    """The chat messages of one prompt: a user turn (the image, then the text) and the prefilled assistant turn.

    Sent with ``continue_final_message: true, add_generation_prompt: false``, the server's chat template renders
    them as :func:`murk.readout.build_prompt_text` renders ``user_text`` with the prefill (checked token by token
    against murk's, :meth:`ServedClient.check_tokens`).
    """
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": image_url}},
                                         {"type": "text", "text": user_text}]},
            {"role": "assistant", "content": prefill}]


def _one_line(text: Any, limit: int = 300) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _token_id(entry: Mapping[str, Any], tokenizer: Any) -> int | None:
    """The id of a log-probability entry: ``token_id:N`` (``return_tokens_as_token_ids``), else its token text."""
    tok = str(entry.get("token", ""))
    if tok.startswith("token_id:"):
        return int(tok.split(":", 1)[1])
    ids = tokenizer.convert_tokens_to_ids(tok)
    return None if ids is None or ids == getattr(tokenizer, "unk_token_id", -1) else int(ids)


@dataclass
class _Answer:
    """What the server answered to one prompt."""

    logprobs: dict[int, float]  # token id -> log-probability at the first generated position
    top: int  # the first generated token (greedy: the most probable)
    tokens: list[int]  # the generated tokens
    finish: str  # the server's finish_reason
    prompt_ids: list[int] | None = None  # the prompt's token ids, where the response carries them


@dataclass
class ServedClient:
    """Reads units through an OpenAI-compatible server (the served back-end of the read-out stage).

    Parameters
    ----------
    server : ServedModel
    vlm : VLM
        The model's files (:func:`load_served_vlm`): prompts, tokenizer, option tokens, end-of-sequence tokens.
    config : dict, optional
        Study configuration (prompts, ``readout.assistant_prefill``, ``readout.verbal_max_new_tokens``).
    transport : httpx.BaseTransport, optional
        For tests.

    Attributes
    ----------
    identity : dict
        What :meth:`probe` learnt of the server (engine, version, served model, root, dtype, ...).
    logprobs_mode : {"logprob_token_ids", "top_logprobs"} or None
        How the options' log-probabilities are asked (set by :meth:`probe`).
    tokenize : bool or None
        Whether the server offers ``/tokenize`` (set by :meth:`probe`).
    requests : int
        Requests sent (retries included).
    """

    server: ServedModel
    vlm: VLM
    config: Mapping[str, Any] | None = None
    transport: Any = None
    identity: dict[str, Any] = field(default_factory=dict)
    logprobs_mode: str | None = None
    tokenize: bool | None = None
    requests: int = 0

    def __post_init__(self) -> None:
        import httpx

        self.config = load_config() if self.config is None else self.config
        rcfg = self.config.get("readout", {})
        self.prefill = str(rcfg.get("assistant_prefill", "Answer:"))
        self.max_new = int(rcfg.get("verbal_max_new_tokens", 12))
        self.option_ids, self.where = _option_ids(self.vlm)
        n = max(1, int(self.server.max_in_flight))
        limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
        self.http = httpx.Client(timeout=self.server.timeout_s, limits=limits, transport=self.transport)
        self._checked: dict[tuple, None] = {}
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- HTTP with retries

    def _send(self, method: str, url: str, body: Mapping[str, Any] | None = None,
              retry: bool = True) -> Any:
        """One request, retried on 429, 5xx and connection errors; the response (any other status as it came)."""
        import httpx

        tries = self.server.retries if retry else 1
        wait = self.server.backoff_s
        last = ""
        for k in range(tries):
            with self._lock:
                self.requests += 1
            try:
                r = self.http.request(method, url, json=body)
            except httpx.TransportError as e:
                last = f"{type(e).__name__}: {_one_line(e, 120)}"
            else:
                if r.status_code not in RETRY_STATUSES:
                    return r
                last = f"HTTP {r.status_code} {_one_line(r.text, 120)}"
                after = r.headers.get("retry-after", "")
                if after.replace(".", "", 1).isdigit():
                    wait = max(wait, min(float(after), 30.0))
            if k + 1 < tries:
                log.info("served: %s %s failed (%s): try %d of %d in %.1f s", method, url, last, k + 2, tries, wait)
                time.sleep(wait)
                wait = min(2 * wait, 30.0)
        raise ServedError(f"server {self.server.url} did not answer {method} {url} after {tries} tries (last: "
                          f"{last}); the images written before are kept in the store: start or fix the server and "
                          f"rerun the same command to resume")

    def _json(self, r: Any, what: str) -> Any:
        if r.status_code != 200:
            raise ServedError(f"server {self.server.url} refused {what}: HTTP {r.status_code} {_one_line(r.text)}")
        try:
            return r.json()
        except ValueError:
            raise ServedError(f"server {self.server.url} answered {what} with no JSON: {_one_line(r.text)}") from None

    # ---------------------------------------------------------------- the probe

    def probe(self) -> dict[str, Any]:
        """Check once that the server can read the model out as murk does, and learn its identity.

        Asks ``/v1/models`` (the served model must be listed), ``/version`` (engine and version, where offered),
        and one text-only prompt with the assistant prefill (``continue_final_message``), one token and the
        option letters' log-probabilities (``logprob_token_ids``; else ``top_logprobs``).

        Returns
        -------
        dict
            :attr:`identity`.

        Raises
        ------
        ServedError
            One line: the server does not answer (after the retries), does not serve the model (the models it
            serves named), rejects the assistant-turn prefill, or returns no log-probabilities.
        """
        s = self.server
        models = self._json(self._send("GET", f"{s.url}/models"), "GET /v1/models")
        listed = {str(m.get("id")): m for m in models.get("data", []) if isinstance(m, Mapping)}
        if s.name not in listed:
            raise ServedError(f"server {s.url} does not serve {s.name!r} (it serves {', '.join(sorted(listed)) or 'nothing'}): "
                              f"set served_model in the model entry of {self.vlm.model_id} to the name it serves")
        m = listed[s.name]
        ident: dict[str, Any] = {"server": s.url, "served_model": s.name, "served_root": str(m.get("root") or ""),
                                 "served_owned_by": str(m.get("owned_by") or ""),
                                 "served_max_model_len": m.get("max_model_len")}
        r = self._send("GET", f"{s.origin}/version", retry=False)
        version = r.json().get("version") if r.status_code == 200 and "json" in r.headers.get("content-type", "") else None
        ident["served_engine"] = ("vllm" if version and str(m.get("owned_by")) == "vllm" else
                                  str(m.get("owned_by") or "unknown"))
        ident["served_engine_version"] = str(version or "unknown")
        for key in ("dtype", "mm_processor_kwargs", "revision"):  # where a server tells them in its model card
            if m.get(key) is not None:
                ident[f"served_{key}"] = m[key]
        # one text prompt with the prefill and the options' log-probabilities
        messages = [{"role": "user", "content": "Which letter comes first: A or B?"},
                    {"role": "assistant", "content": self.prefill}]
        body = self._body(messages, 1, "logprob_token_ids")
        r = self._send("POST", f"{s.url}/chat/completions", body)
        mode = "logprob_token_ids"
        if r.status_code == 400 and "logprob_token_ids" in r.text:
            mode = "top_logprobs"
            r = self._send("POST", f"{s.url}/chat/completions", self._body(messages, 1, mode))
        if r.status_code == 400 and ("continue_final_message" in r.text or "prefill" in r.text.lower()):
            raise ServedError(f"server {s.url} ({s.name}) cannot prefill the assistant turn "
                              f"(continue_final_message: {_one_line(r.text, 160)}): murk's read-out asks for the "
                              f"first token after {self.prefill!r}; serve the model with an OpenAI-compatible server "
                              f"that continues a final assistant message (vLLM, SGLang)")
        got = self._json(r, "a chat completion with the assistant prefill")
        ans = self._answer(got)
        if not ans.logprobs:
            raise ServedError(f"server {s.url} ({s.name}) returns no log-probabilities (logprobs: true gave none): "
                              f"murk's read-out needs the options' first-token log-probabilities; serve the model "
                              f"with a server that returns them (vLLM: logprob_token_ids or top_logprobs)")
        if mode == "logprob_token_ids" and not set(self.option_ids) <= set(ans.logprobs):
            mode = "top_logprobs"  # the field was accepted but ignored
        self.logprobs_mode = mode
        tr = self._send("POST", f"{s.origin}/tokenize", {"model": s.name, "messages": messages,
                                                         "add_generation_prompt": False,
                                                         "continue_final_message": True})
        self.tokenize = tr.status_code == 200 and "tokens" in (tr.json() if "json" in tr.headers.get(
            "content-type", "") else {})
        ident["served_logprobs"] = (mode if mode == "logprob_token_ids" else
                                    f"top_logprobs:{TOP_LOGPROBS} (a variant of a present letter beyond the top "
                                    f"{TOP_LOGPROBS} counts 0; a letter with none there: the image is missing)")
        ident["served_tokens_checked"] = ("/tokenize" if self.tokenize else
                                          "the response's prompt_token_ids, where given")
        self.identity = ident
        return ident

    def identity_attrs(self) -> dict[str, Any]:
        """The server's identity as store attributes (str or int values; :meth:`probe` first)."""
        return {k: (v if isinstance(v, (str, int)) and not isinstance(v, bool) else _json_text(v))
                for k, v in self.identity.items()}

    def _body(self, messages: list, max_tokens: int, mode: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.server.name, "messages": messages, "max_tokens": int(max_tokens), "temperature": 0.0,
            "top_p": 1.0, "n": 1, "logprobs": True, "add_generation_prompt": False, "continue_final_message": True,
            "return_tokens_as_token_ids": True, "return_token_ids": True, "skip_special_tokens": False,
            "stop_token_ids": sorted(int(i) for i in self.vlm.eos_token_ids), "seed": 0}
        if mode == "logprob_token_ids":
            body["logprob_token_ids"] = list(self.option_ids)
            body["top_logprobs"] = 1
        else:
            body["top_logprobs"] = TOP_LOGPROBS
        return body

    def _answer(self, got: Mapping[str, Any]) -> _Answer:
        try:
            ch = got["choices"][0]
        except (KeyError, IndexError, TypeError):
            raise ServedError(f"server {self.server.url} answered a chat completion without choices: "
                              f"{_one_line(got)}") from None
        content = ((ch.get("logprobs") or {}).get("content") or [])
        tok = self.vlm.tokenizer
        lp: dict[int, float] = {}
        tokens: list[int] = []
        for pos, e in enumerate(content):
            i = _token_id(e, tok)
            tokens.append(-1 if i is None else i)
            if pos == 0:
                for t in [e, *(e.get("top_logprobs") or [])]:
                    j = _token_id(t, tok)
                    if j is not None and t.get("logprob") is not None:
                        lp[j] = float(t["logprob"])
        if ch.get("token_ids"):
            tokens = [int(t) for t in ch["token_ids"]]
        top = tokens[0] if tokens else -1
        return _Answer(lp, top, tokens, str(ch.get("finish_reason") or ""),
                       [int(t) for t in got["prompt_token_ids"]] if got.get("prompt_token_ids") else None)

    # ---------------------------------------------------------------- tokens

    def check_tokens(self, server_ids: Sequence[int], murk_ids: Sequence[int], where: str) -> None:
        """Refuse a prompt the server tokenises otherwise than murk.

        Raises
        ------
        ServedError
            One line: both token counts and the first position where they differ, with both tokens.
        """
        a, b = list(map(int, server_ids)), list(map(int, murk_ids))
        if a == b:
            return
        i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        tok = self.vlm.tokenizer

        def at(ids: list[int]) -> str:
            return f"{tok.convert_ids_to_tokens(ids[i])!r} (id {ids[i]})" if i < len(ids) else "(the end)"

        raise ServedError(
            f"server {self.server.url} ({self.server.name}) tokenises {where} into {len(a)} tokens, murk "
            f"({self.vlm.model_id}) into {len(b)}; first difference at position {i}: server {at(a)}, murk {at(b)}; "
            f"fix: serve the same checkpoint with murk's image presentation (vLLM: --mm-processor-kwargs with the "
            f"model's pixel budget, docs/served.md) and the same chat template")

    def _tokens_of(self, messages: list) -> list[int] | None:
        r = self._send("POST", f"{self.server.origin}/tokenize",
                       {"model": self.server.name, "messages": messages, "add_generation_prompt": False,
                        "continue_final_message": True})
        return [int(t) for t in self._json(r, "POST /tokenize")["tokens"]]

    # ---------------------------------------------------------------- a unit

    def unit_requests(self, unit: Unit) -> tuple[list[PromptSlot], list[dict], list[list[int]], tuple]:
        """The prompts of one unit: its slots, the request bodies and murk's token ids of each prompt."""
        slots = item_prompts(unit.questions, self.config, unit.verbal_variants)
        pil = present_image(unit.image, self.vlm.max_side_px)
        url = png_data_url(pil)
        texts = [build_prompt_text(self.vlm, s.user, self.prefill) for s in slots]
        _, ids = image_inputs(self.vlm, texts, pil)
        mode = self.logprobs_mode or "logprob_token_ids"
        bodies = [self._body(chat_messages(url, s.user, self.prefill), self.max_new if s.generate else 1, mode)
                  for s in slots]
        return slots, bodies, ids, tuple(pil.size)

    def ask(self, body: dict, murk_ids: list[int], key: tuple, where: str) -> _Answer:
        """One prompt: its tokens checked (once per prompt text and image size), then its completion."""
        if self.tokenize and key not in self._checked:
            self.check_tokens(self._tokens_of(body["messages"]), murk_ids, where)
            self._checked[key] = None
        r = self._send("POST", f"{self.server.url}/chat/completions", body)
        ans = self._answer(self._json(r, f"the chat completion of {where}"))
        if not self.tokenize and ans.prompt_ids is not None:
            self.check_tokens(ans.prompt_ids, murk_ids, where)
        if not ans.logprobs:
            raise ServedError(f"server {self.server.url} ({self.server.name}) returned no log-probabilities for "
                              f"{where}: murk's read-out needs them; serve the model with a server that returns them")
        return ans

    def readouts(self, unit: Unit, slots: Sequence[PromptSlot], answers: Sequence[_Answer]) -> dict | str:
        """The unit's read-outs (:func:`murk.readout.item_readouts`) from its answers, or the reason they are
        missing (an option letter beyond the server's top log-probabilities)."""
        tok = self.vlm.tokenizer
        p, tops, conts, stops = [], [], [], []
        eos = set(self.vlm.eos_token_ids)
        for s, a in zip(slots, answers):
            pk = []
            for L_ in s.letters:
                got = [a.logprobs[i] for i in self.vlm.option_tokens[L_] if i in a.logprobs]
                if not got:
                    return (f"served: option {L_} of the prompt {unit.questions[s.question].task}/{s.variant}/"
                            f"{s.wording} at {unit.arm}/{unit.level} is not among the server's "
                            f"top {TOP_LOGPROBS} log-probabilities (the server gives no logprob_token_ids)")
                pk.append(float(sum(math.exp(v) for v in got)))
            p.append(np.array(pk, dtype=np.float64))
            tops.append(tok.decode([int(a.top)]))
            if s.generate:
                seq = until_eos(a.tokens, eos)
                conts.append(tok.decode(seq, skip_special_tokens=True))
                ended = a.finish == "stop" or any(t in eos for t in seq)
                stops.append(VERBAL_STOP_EOS if ended else VERBAL_STOP_LIMIT)
            else:
                conts.append(None)
                stops.append(float("nan"))
        return item_readouts(unit.questions, slots, p, tops, conts, stops)

    def close(self) -> None:
        """Close the HTTP connections."""
        self.http.close()


def _json_text(v: Any) -> str:
    import json

    return json.dumps(v, sort_keys=True, default=str)


# --------------------------------------------------------------------------- the stage's loop


@dataclass
class _PendingImage:
    item: int
    units: list = field(default_factory=list)  # (unit, slots, [futures])
    missing: str | None = None


def read_images_served(client: ServedClient, items: Iterable[int], load: Callable[[int], ImageJob], *,
                       done: Container[int] = (), progress: bool | str = True,
                       stats: EngineStats | None = None) -> Iterator[ImageResult]:
    """Read out images through a server, as :func:`murk.readout.read_images` does in-process.

    For each item not in ``done``, ``load(item)`` gives its questions and 24 conditions; every prompt of every
    unit goes to the server (at most ``client.server.max_in_flight`` requests in flight; the next image's
    requests are queued while the current image's are answered), and the image is yielded once all its units
    are read, for the caller to write (:func:`murk.results.write_image`). Each image is read independently
    (a server has no batches), so a resumed run reads only the images not yet written.

    Parameters
    ----------
    client : ServedClient
        Probed (:meth:`ServedClient.probe`; probed here if not yet).
    items : iterable of int
        Global item indices to read, in order.
    load : callable
        ``load(item) -> ImageJob`` (:class:`murk.readout.ItemJobs`); bad input
        (:data:`murk.readout.BAD_INPUT_ERRORS`) and a failed rendering become the image's ``missing_reason``.
    done : container of int
        Items already written: skipped.
    progress : bool or str
        A progress bar in units (:func:`murk.core.bar`).
    stats : EngineStats, optional
        ``units``, ``images``, ``prompts`` and ``model_s`` (seconds waiting for the server) are added to.

    Yields
    ------
    ImageResult
        One per item not in ``done``, in order. A unit with an option letter beyond the server's top
        log-probabilities makes its image's ``missing_reason``.

    Raises
    ------
    ServedError
        The server stopped answering (after the retries), or tokenises a prompt otherwise than murk.
    """
    from murk.core import bar as progress_bar

    if client.logprobs_mode is None:
        client.probe()
    st = stats if stats is not None else EngineStats()
    todo = [int(i) for i in items if int(i) not in done]
    pool = ThreadPoolExecutor(max_workers=max(1, int(client.server.max_in_flight)), thread_name_prefix="murk-served")
    bar = progress_bar(total=len(todo) * N_CONDITIONS, unit="unit",
                       desc=progress if isinstance(progress, str) else "readout (served)", disable=not progress)

    def submit(item: int) -> _PendingImage:
        try:
            job = load(item)
        except BAD_INPUT_ERRORS as e:
            return _PendingImage(item, missing=str(e))
        try:
            conditions = [(str(a), int(lv), im) for a, lv, im in job.conditions]
        except Exception as e:  # noqa: BLE001 - recorded, the run goes on (as in-process)
            return _PendingImage(item, missing=f"rendering failed: {type(e).__name__}: {e}")
        pend = _PendingImage(item)
        for arm, level, image in conditions:
            unit = Unit(item, arm, level, image, tuple(job.questions), tuple(job.verbal_variants))
            slots, bodies, ids, size = client.unit_requests(unit)
            futs: list[Future] = []
            for s, body, i in zip(slots, bodies, ids):
                where = (f"the prompt {job.questions[s.question].task}/{s.variant}/{s.wording} of item {item} at "
                         f"{arm}/{level}")
                futs.append(pool.submit(client.ask, body, i, (s.user, size), where))
            pend.units.append((unit, slots, futs))
        return pend

    pending: list[_PendingImage] = []
    try:
        it = iter(todo)
        for item in it:
            pending.append(submit(item))
            if len(pending) < 2:
                continue
            yield _finish(client, pending.pop(0), st, bar)
        while pending:
            yield _finish(client, pending.pop(0), st, bar)
    finally:
        bar.close()
        for p in pending:
            for _, _, futs in p.units:
                for f in futs:
                    f.cancel()
        pool.shutdown(wait=True, cancel_futures=True)


def _finish(client: ServedClient, pend: _PendingImage, st: EngineStats, bar: Any) -> ImageResult:
    """Wait for an image's answers and turn them into its result."""
    if pend.missing is not None:
        return ImageResult(pend.item, None, pend.missing)
    t0 = time.perf_counter()
    res: dict = {}
    missing = None
    for unit, slots, futs in pend.units:
        answers = [f.result() for f in futs]  # a ServedError stops the run (the images before are written)
        r = client.readouts(unit, slots, answers)
        if isinstance(r, str):
            missing = missing or r
            continue
        for task, v in r.items():
            res[(unit.arm, unit.level, task)] = v
        st.units += 1
        st.prompts += len(slots)
        bar.update(1)
    st.model_s += time.perf_counter() - t0
    st.images += 1
    return ImageResult(pend.item, None, missing) if missing else ImageResult(pend.item, res, None)
