"""The ``models`` setting's entries: a model id, or a mapping with its revision and options, from a settings file,
the command line or a notebook parameter (:func:`model_entries`).

An entry may name an OpenAI-compatible server that serves the model (``server``, its base URL; ``served_model``,
the name it serves the model under; ``max_in_flight``, requests in flight at once): the model is then read out
through that server (:mod:`murk.readout`'s served back-end, docs/served.md); ``id`` stays its identity and the
source of its tokenizer, processor and chat template. Without ``server`` an entry reads out in-process.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["MODEL_ENTRY_KEYS", "ModelEntry", "model_entries", "UNPRINTABLE_CATEGORIES", "unprintable"]


# --- the models setting: its entries (moved from the markers, which read it) ---

#: the keys a mapping entry of ``models`` may have
MODEL_ENTRY_KEYS = ("id", "n_items", "server", "served_model", "max_in_flight")


class ModelEntry(NamedTuple):
    """One model of a run: its id (hub id or folder), the number of items it is read out on and, for a served
    model, the server that serves it.

    Attributes
    ----------
    id : str
        Hub id or folder: the model's identity, and where its tokenizer, processor and chat template come from.
    n_items : int or None
        The first ``n_items`` items of the selection.
    server : str or None
        Base URL of an OpenAI-compatible server (``http://host:port/v1``); None: read out in-process.
    served_model : str or None
        The name the server serves the model under (its ``/v1/models``); None where ``server`` is None,
        else ``id`` unless given.
    max_in_flight : int or None
        Requests sent to the server at once (None: the client's default, 8).
    """

    id: str
    n_items: int
    server: str | None = None
    served_model: str | None = None
    max_in_flight: int | None = None


def _entry_form(setting: str) -> str:
    return (f"each entry of {setting} is a hub id or folder, or a mapping {{id: <hub id or folder>, n_items: N}} "
            f"(the first N items of the selection), e.g. {setting}: [HuggingFaceTB/SmolVLM-256M-Instruct, "
            f"{{id: google/gemma-4-E2B-it, n_items: 600}}]; a served model adds server: <base URL, e.g. "
            f"http://127.0.0.1:8000/v1>, optionally served_model: <its name there> and max_in_flight: N")


def _entries_from_text(text: str, setting: str) -> list:
    """A list given as text (papermill ``-p models '[...]'`` passes a string): parsed as YAML (JSON is YAML)."""
    import yaml

    hint = (f"pass it as YAML with papermill's -y, e.g. -y '{setting}: [murk-tiny/smolvlm, "
            f"{{id: murk-tiny/qwen3vl, n_items: 4}}]'")
    t = text.strip()
    if t.startswith(("[", "{")):
        try:
            parsed = yaml.safe_load(t)
        except yaml.YAMLError as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ValueError(f"{setting} arrived as the text {text!r}, which is not a YAML or JSON list ({first}): "
                             f"{hint}") from None
        return parsed if isinstance(parsed, list) else [parsed]
    if not t or "," in t or any(c.isspace() for c in t):
        raise ValueError(f"{setting} arrived as the text {text!r}, not as a list of models: {hint}")
    return [t]  # one model id


def model_entries(entries: Any, n_items: int | None = None, setting: str = "models") -> list[ModelEntry]:
    """The models of a run with the number of items each is read out on.

    Parameters
    ----------
    entries : list, or str
        The setting's value: a list whose entries are a hub id or local folder
        (str: read out on every item), or a mapping ``{id: <hub id or folder>,
        n_items: N}`` (read out on the first N items of the selection, in the
        selection's order), optionally with ``server: <base URL>``,
        ``served_model: <name>`` and ``max_in_flight: N`` (read out through an
        OpenAI-compatible server). A str is a list given as text (papermill ``-p models
        '["a", "b"]'`` passes one): YAML or JSON text of a list, or a single id.
    n_items : int, optional
        The run's number of selected items (``n_items`` of the run settings, or
        the length of ``items.json``). An entry without ``n_items`` gets it; an
        entry asking for more items than the run has is read out on all of them
        (as ``n_verbal_items``). None: entries without ``n_items`` get None.
    setting : str
        The setting's name in messages, e.g. ``"offline_models (data/workflow.yaml)"``.

    Returns
    -------
    list of ModelEntry
        ``(id, n_items, server, served_model, max_in_flight)`` per model, in the
        setting's order; ``id`` is a str, ``n_items`` an int >= 1 (or None, see
        ``n_items``); the served fields None for an in-process model.

    Raises
    ------
    ValueError
        If the list is empty or not a list, an entry is neither a str nor a
        mapping, a mapping has a key other than ``id`` and ``n_items`` or lacks
        ``id``, ``n_items`` is not an integer >= 1, a model is listed twice, or
        a text does not parse as a list, ``server`` is not an http(s) URL,
        ``served_model`` or ``max_in_flight`` is given without ``server``, or
        ``max_in_flight`` is not an integer >= 1, or the id or ``served_model``
        holds a line break or another character that prints nothing or reorders
        the text (:func:`unprintable`: it would reach the paper unlike itself).
        The message, one line, names the setting, the entry and the form to use.
    """
    if isinstance(entries, str):
        entries = _entries_from_text(entries, setting)
    if isinstance(entries, (dict, ModelEntry)) or not isinstance(entries, (list, tuple)):
        raise ValueError(f"{setting} must be a list of models, got {type(entries).__name__} {entries!r}: "
                         f"{_entry_form(setting)}")
    if not entries:
        raise ValueError(f"{setting} is empty: list at least one model; {_entry_form(setting)}")
    run_n = None if n_items is None else int(n_items)
    out: list[ModelEntry] = []
    seen: dict[str, int] = {}
    for k, e in enumerate(entries, start=1):
        where = f"{setting}, entry {k} ({e!r})"
        if isinstance(e, ModelEntry):
            e = {k: v for k, v in e._asdict().items() if v is not None or k == "id"}
        served: dict[str, Any] = {}
        if isinstance(e, str):
            mid, n = e, None
        elif isinstance(e, dict):
            unknown = [str(x) for x in e if x not in MODEL_ENTRY_KEYS]
            if unknown:
                raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}; the keys are "
                                 f"{', '.join(MODEL_ENTRY_KEYS)}: {_entry_form(setting)}")
            if "id" not in e:
                raise ValueError(f"{where} has no id: {_entry_form(setting)}")
            mid, n = e["id"], e.get("n_items")
            if not isinstance(mid, str):
                raise ValueError(f"{where}: id must be a hub id or folder (text), got {mid!r}")
            if n is not None:
                if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                    raise ValueError(f"{where}: n_items must be a whole number of items >= 1 (the first N items of "
                                     f"the selection), got {n!r}; leave it out to read the model out on every item")
            served = _served_fields(e, where, setting)
        else:
            raise ValueError(f"{where} is neither a model id nor a mapping: {_entry_form(setting)}")
        _refuse_unprintable(mid, f"{setting}, entry {k}", "the model id")
        mid = mid.strip()
        if not mid:
            raise ValueError(f"{where}: the model id is empty; {_entry_form(setting)}")
        if mid in seen:
            raise ValueError(f"{setting} lists {mid} twice (entries {seen[mid]} and {k}): list each model once, "
                             f"with one n_items")
        seen[mid] = k
        if n is None:
            n = run_n
        elif run_n is not None:
            n = min(int(n), run_n)
        if served:
            served.setdefault("served_model", mid)
        out.append(ModelEntry(mid, None if n is None else int(n), **served))
    return out


#: the Unicode categories of characters a name may not hold (:func:`unprintable`): controls (Cc: line breaks, tabs,
#: escapes), format characters (Cf: zero-width spaces and joiners, bidirectional overrides and isolates, soft
#: hyphens), line and paragraph separators (Zl, Zp), surrogates (Cs)
UNPRINTABLE_CATEGORIES = ("Cc", "Cf", "Zl", "Zp", "Cs")


def unprintable(text: str) -> list[str]:
    """The characters of ``text`` that print nothing, break its line or reorder the text around them (Unicode
    categories :data:`UNPRINTABLE_CATEGORIES`), each as its code point and name, in order of first occurrence.

    A name holding one prints unlike itself (a line break ends the paragraph or table row it is in, a
    bidirectional override reverses what follows, a zero-width space makes two names that print alike), so
    murk refuses such a model id where it is read (:func:`model_entries`).

    >>> unprintable("smol\\nvlm\\u202e"), unprintable("Qwen/Qwen3-VL-2B-Instruct")
    (['U+000A (a line break)', 'U+202E (RIGHT-TO-LEFT OVERRIDE)'], [])
    """
    import unicodedata

    out = []
    for c in dict.fromkeys(str(text)):
        if unicodedata.category(c) in UNPRINTABLE_CATEGORIES:
            what = "a line break" if c in "\n\r\v\f\x85\u2028\u2029" else (
                "a tab" if c == "\t" else unicodedata.name(c, "a control character"))
            out.append(f"U+{ord(c):04X} ({what})")
    return out


def _refuse_unprintable(value: str, where: str, what: str) -> None:
    bad = unprintable(value)
    if bad:
        raise ValueError(f"{where}: {what} {value!r} holds {', '.join(bad)}, which would print unlike the name "
                         f"(a line break ends the paper's paragraph, an invisible or reordering character hides "
                         f"which model it is): rename the folder (or give the id) without it")


def _served_fields(e: dict, where: str, setting: str) -> dict[str, Any]:
    """The served-model keys of a mapping entry, checked (data only: a URL is never run or parsed by a shell)."""
    server, name, k = e.get("server"), e.get("served_model"), e.get("max_in_flight")
    if server is None:
        given = [key for key in ("served_model", "max_in_flight") if e.get(key) is not None]
        if given:
            raise ValueError(f"{where}: {' and '.join(given)} without server: add server: <base URL of the "
                             f"OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1>, or leave "
                             f"{' and '.join(given)} out to read the model out in-process")
        return {}
    if not isinstance(server, str) or not server.strip().lower().startswith(("http://", "https://")) \
            or any(c.isspace() for c in server.strip()):
        raise ValueError(f"{where}: server must be the base URL of an OpenAI-compatible server, e.g. "
                         f"http://127.0.0.1:8000/v1, got {server!r}")
    out: dict[str, Any] = {"server": server.strip().rstrip("/")}
    if name is not None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{where}: served_model must be the name the server serves the model under (its "
                             f"/v1/models), got {name!r}; leave it out to use the id")
        _refuse_unprintable(name, where, "served_model")
        out["served_model"] = name.strip()
    if k is not None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"{where}: max_in_flight must be a whole number of requests >= 1, got {k!r}; leave it "
                             f"out for the default (8)")
        out["max_in_flight"] = int(k)
    return out

