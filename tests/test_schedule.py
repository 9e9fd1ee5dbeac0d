"""The suite's schedule hints (tests/conftest.py) name modules that exist (issue 22 item 4): a renamed or
split module would otherwise drop out of the hint silently, and the workers would no longer end together."""

from __future__ import annotations

from pathlib import Path

import conftest

HERE = Path(__file__).resolve().parent


def test_schedule_hints_name_modules_of_the_suite():
    names = (*conftest.LONGEST_FIRST, conftest.DEMO_FIRST, *conftest.LONG_MODULES)
    assert [n for n in names if not (HERE / n).is_file()] == []
    assert len(set(conftest.LONGEST_FIRST)) == len(conftest.LONGEST_FIRST)
    # the demo's worker module waits for the demo (its first test takes the session fixture, directly or not)
    assert "demo" in (HERE / conftest.DEMO_FIRST).read_text(encoding="utf-8")
