"""murk.report._colophon: the colophon's sentences from read-out store attributes."""

import json

from murk.report import _colophon as colophon


def test_colophon_words_say_what_each_store_recorded():
    attrs = {"org/a": {"ignored_generation_settings": json.dumps({"top_p": 0.9, "do_sample": True}),
                       "trust_remote_code": 0, "allow_pickle": 0,
                       "custom_code_not_run": json.dumps({"config.json auto_map": "AModel -> Qwen2VLModel"})},
             "org/b": {"ignored_generation_settings": "{}", "trust_remote_code": 0, "allow_pickle": 0},
             "org/c": {"ignored_generation_settings": "not json", "trust_remote_code": 1, "allow_pickle": 0}}
    w = colophon.colophon_words(attrs)
    assert w["ignored_generation_settings"] == ("`org/a`: `do_sample = true`, `top_p = 0.9`; "
                                                "`org/b`: none (its generation configuration is greedy); "
                                                "`org/c`: not recorded")
    assert w["loading_options"] == (
        "`trust_remote_code = false`, `allow_pickle = false` for `org/a` and `org/b`; "
        "`trust_remote_code = true`, `allow_pickle = false` for `org/c`; custom code declared but not run "
        "(`trust_remote_code = false`): `org/a`'s config.json names `AModel` (auto\\_map), not run: the built-in "
        "`Qwen2VLModel` was used instead")


def test_colophon_words_show_a_hostile_model_id_as_written():
    """A folder named with backticks and HTML stays one code span (its fence longer than its backticks): no raw
    HTML, no end of the span inside the name."""
    hostile = "ck`pt <img src=x onerror=alert(1)>"
    w = colophon.colophon_words({hostile: {"ignored_generation_settings": "{}", "trust_remote_code": 0,
                                           "allow_pickle": 0}})
    assert w["ignored_generation_settings"].startswith(f"``{hostile}``: none")
    assert w["loading_options"].endswith(f"for ``{hostile}``")
