"""The colophon's sentences from what each read-out store recorded: the generation settings murk ignored (decoding is
greedy whatever a checkpoint asks for), the loading options it was given and the custom code it did not run."""

from __future__ import annotations

import json
from typing import Any, Mapping

from murk.report._format import fmt_list
from murk.report._escape import markdown_text
from murk.report._markdown import verbatim


def _generation_value(v: Any) -> str:
    """A generation setting's value as the colophon prints it: JSON for a bool, None, dict or list, ``%g`` for a
    float, else its text (the settings table prints its values its own way).

    >>> _generation_value(True), _generation_value(0.7), _generation_value(None), _generation_value(50)
    ('true', '0.7', 'null', '50')
    """
    return json.dumps(v) if isinstance(v, (bool, type(None), dict, list)) else f"{v:g}" if isinstance(v, float) else str(v)


def colophon_words(store_attrs: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """What each model's read-out store recorded about its loading, in the colophon's words (Markdown: each model
    id and each name a checkpoint's files gave in a code span, :func:`murk.report.verbatim`, shown as written).

    Parameters
    ----------
    store_attrs : mapping
        Model id -> the attributes of its read-out store (its first shard): ``ignored_generation_settings`` (JSON
        text), ``trust_remote_code``, ``allow_pickle`` (0/1) and ``custom_code_not_run`` (JSON text); an attribute
        absent (an older store) is said "not recorded".

    Returns
    -------
    dict
        ``ignored_generation_settings``: ``"`m`: none (its generation configuration is greedy)"`` or the settings
        ignored, per model; ``loading_options``: the models grouped by their options, then the custom code declared
        but not run.

    Examples
    --------
    >>> w = colophon_words({"a": {"ignored_generation_settings": '{"temperature": 0.7}', "trust_remote_code": 0,
    ...                           "allow_pickle": 0}, "b": {}})
    >>> w["ignored_generation_settings"]
    '`a`: `temperature = 0.7`; `b`: not recorded'
    >>> w["loading_options"]
    '`trust_remote_code = false`, `allow_pickle = false` for `a`; not recorded (an older store) for `b`'
    """
    gen_parts, load_groups, not_run_parts = [], {}, []
    for model, a in store_attrs.items():
        m = verbatim(model)   # a code span holding the id as written, whatever backticks it holds
        raw = a.get("ignored_generation_settings")
        try:
            ignored = json.loads(raw) if isinstance(raw, str) else raw
        except json.JSONDecodeError:
            ignored = None
        if ignored is None:
            gen_parts.append(f"{m}: not recorded")
        elif not ignored:
            gen_parts.append(f"{m}: none (its generation configuration is greedy)")
        else:
            gen_parts.append(f"{m}: " + ", ".join(verbatim(f"{k} = {_generation_value(v)}")
                                                  for k, v in sorted(ignored.items())))
        opts = (", ".join(f"`{o} = {str(bool(int(a[o]))).lower()}`" for o in ("trust_remote_code", "allow_pickle"))
                if all(o in a for o in ("trust_remote_code", "allow_pickle")) else "not recorded (an older store)")
        load_groups.setdefault(opts, []).append(m)
        try:
            not_run = json.loads(a.get("custom_code_not_run") or "{}")
        except json.JSONDecodeError:
            not_run = {}
        for where, what in sorted(not_run.items()):
            custom, _, used = what.partition(" -> ")
            file, _, auto = where.partition(" ")
            not_run_parts.append(f"{m}'s {markdown_text(file)} names {verbatim(custom)} ({markdown_text(auto)}), not "
                                 f"run: " + (f"the built-in {verbatim(used)} was used instead" if used else
                                             "not used by murk"))
    return {"ignored_generation_settings": "; ".join(gen_parts),
            "loading_options": "; ".join(f"{opts} for {fmt_list(ms)}" for opts, ms in load_groups.items())
            + ("; custom code declared but not run (`trust_remote_code = false`): " + "; ".join(not_run_parts)
               if not_run_parts else "")}
