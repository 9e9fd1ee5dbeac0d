"""The suite's schedule hints (tests/conftest.py) name modules that exist (issue 22 item 4): a renamed or
split module would otherwise drop out of the hint silently, and the workers would no longer end together.
The order they give is what pytest-xdist's documented `--dist loadfile --no-loadscope-reorder` hands out
(issue 40 item 6: no private scheduler)."""

from __future__ import annotations

import re
from pathlib import Path

import conftest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _module(name: str) -> Path | None:
    found = sorted(HERE.rglob(name))
    return found[0] if found else None


def test_schedule_hints_name_modules_of_the_suite():
    names = (*conftest.LONGEST_FIRST, conftest.DEMO_FIRST, *conftest.LONG_MODULES)
    assert [n for n in names if _module(n) is None] == []
    assert len(set(conftest.LONGEST_FIRST)) == len(conftest.LONGEST_FIRST)
    # the demo's worker module waits for the demo (its first test takes the session fixture, directly or not)
    assert "demo" in _module(conftest.DEMO_FIRST).read_text(encoding="utf-8")


def test_each_long_module_of_two_or_fewer_tests_has_a_short_module_queued_behind_it():
    long1, long2, long3, long4 = (f"tests/scenarios/{n}" for n in conftest.LONG_MODULES[:4])
    modules = [(long1, 1), (long2, 2), (long3, 1), ("tests/test_a.py", 5), (long4, 1), ("tests/test_b.py", 2),
               ("tests/test_c.py", 3), ("tests/test_d.py", 4), ("lib/murk/core/__init__.py", 1)]
    order = conftest.long_modules_apart(modules, workers=2)
    # each module once; the first two go one to each worker, then each worker's second is a short module of more
    # than two tests (a worker with two or fewer tests left is given one more at once)
    assert sorted(order) == sorted(name for name, _ in modules)
    assert order[:4] == [long1, long2, "tests/test_a.py", "tests/test_c.py"]
    # then each long module of two or fewer tests is followed by a short one of more than two
    assert order[4:7] == [long3, "tests/test_d.py", long4]
    # with no short module left, the rest keep their order
    assert order[7:] == ["tests/test_b.py", "lib/murk/core/__init__.py"]
    # one worker: its second module is the first long module's filler
    assert conftest.long_modules_apart(modules, workers=1)[:2] == [long1, "tests/test_a.py"]


def test_make_test_hands_out_modules_in_the_collection_order_with_public_options_only():
    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    pytest_line = next(line for line in make.splitlines() if line.startswith("PYTEST :="))
    # loadfile: a module's tests on one worker; no reorder: the order the conftest sets is the order handed out
    assert re.search(r"--dist loadfile\b", pytest_line) and "--no-loadscope-reorder" in pytest_line
    # no scheduler of our own over pytest-xdist's private classes
    source = (HERE / "conftest.py").read_text(encoding="utf-8")
    assert "pytest_xdist_make_scheduler" not in source and "xdist.scheduler" not in source
