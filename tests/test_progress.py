"""murk.core's progress bars outside a kernel (issue 22): one tqdm bar on stderr, counted updates, silence when
disabled. In a kernel and on the terminal of a run: tests/scenarios/test_terminal.py."""

from __future__ import annotations

import re

import pytest

from murk.core import _progress as progress


def _lines(text: str) -> list[str]:
    """The lines a terminal shows: a bar's redraws (\\r) are lines of their own."""
    return [ln for ln in re.split(r"[\r\n]+", text) if ln.strip()]


def _bar_lines(text: str, desc: str) -> list[str]:
    """A bar's lines for ``desc``: its count, elapsed and left time, and rate (tqdm's format)."""
    pat = re.compile(rf"^{re.escape(desc)}: +\d+%\|.*\| (\d+)/(\d+) \[\d\d:\d\d<\d\d:\d\d, +[\d.]+(img|unit|s)")
    return [ln for ln in _lines(text) if pat.match(ln)]


def test_a_bar_outside_a_kernel_is_one_tqdm_bar_on_stderr(capsys):
    seen = list(progress.bar(range(4), desc="loop", unit="img"))
    assert seen == [0, 1, 2, 3]
    err = capsys.readouterr().err
    assert _bar_lines(err, "loop")[-1].startswith("loop: 100%")
    assert " 4/4 [" in _bar_lines(err, "loop")[-1]
    assert progress.terminal_stream() is None  # not a kernel: no second bar


def test_a_bar_without_iterable_counts_updates_and_closes_once(capsys):
    with progress.bar(desc="readout x", total=48, unit="unit") as bar:
        bar.update(24)
        bar.update(24)
        assert (bar.n, bar.total) == (48, 48)
        with pytest.raises(TypeError, match="update"):
            iter(bar).__next__()
    bar.close()
    assert " 48/48 [" in capsys.readouterr().err


def test_a_disabled_bar_writes_nothing(capsys):
    assert list(progress.bar([1, 2], desc="quiet", disable=True)) == [1, 2]
    assert capsys.readouterr().err == ""
