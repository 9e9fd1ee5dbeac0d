"""Progress bars of the stages' loops: in the notebook, and on the terminal of the run.

A stage notebook that Snakemake runs (through :mod:`murk.pipeline.execute`) runs in a Jupyter
kernel: everything the kernel writes to ``sys.stdout`` and ``sys.stderr`` goes into
the executed notebook, so a plain tqdm bar is invisible on the terminal for the
minutes a loop takes. :func:`bar` draws each loop's bar twice:

- in the notebook, as before: a widget bar (``tqdm.notebook``) in JupyterLab when
  ipywidgets is installed; a text bar (``tqdm.std``) in a notebook run headless by
  :mod:`murk.pipeline.execute` (the executed notebook keeps its final line as text: images,
  time, rate, where a widget would keep only its state) or where ipywidgets is
  missing (``tqdm.auto`` would warn ``IProgress not found`` there);
- on the terminal, when :mod:`murk.pipeline.execute` runs the notebook (it sets
  :data:`ENV` to ``"terminal"`` for the kernel): a text bar written to the
  kernel process's original standard error. ipykernel (6 and 7) redirects file
  descriptors 1 and 2 into the notebook and keeps a copy of the original one, which
  ``sys.stderr.fileno()`` returns (``ipykernel.iostream.OutStream.fileno``, there
  for subprocesses that write to the terminal); where ipykernel does not redirect
  (``capture_fd_output`` off, or under pytest), descriptor 2 is the original.

Outside a kernel (plain Python) a bar is one ``tqdm.std`` bar on ``sys.stderr``,
which is the terminal. Only one terminal bar is drawn at a time: a bar opened while
another is open (an inner loop, a download inside a loop) stays in the notebook.
"""

from __future__ import annotations

import io
import os
import sys
from typing import Any, Iterable, Iterator

#: environment variable: ``"terminal"`` also draws the bars on the kernel's terminal (set by :mod:`murk.pipeline.execute`)
ENV = "MURK_PROGRESS"
#: seconds between redraws of a terminal bar on a terminal (tty) and elsewhere (a pipe, a log file: SLURM's,
#: a test's capture), and of a notebook's text bar under murk.pipeline.execute (the executed notebook keeps its last line)
TTY_INTERVAL_S, LOG_INTERVAL_S = 0.5, 10.0

_terminal: io.TextIOBase | None = None
_terminal_open = 0   # terminal bars open now


def in_kernel() -> bool:
    """Whether this process is a Jupyter kernel whose ``sys.stderr`` goes to a notebook (ipykernel)."""
    iostream = sys.modules.get("ipykernel.iostream")
    return iostream is not None and isinstance(sys.stderr, iostream.OutStream)


def terminal_requested() -> bool:
    """Whether :data:`ENV` asks for terminal bars (:mod:`murk.pipeline.execute` sets it for the kernel it starts)."""
    return os.environ.get(ENV, "").strip().lower() == "terminal"


def terminal_stream() -> io.TextIOBase | None:
    """The kernel process's original standard error, opened for text (once per process), or None.

    None outside a kernel (there ``sys.stderr`` is the terminal already) and when
    :data:`ENV` does not ask for terminal bars (JupyterLab: the kernel's terminal is
    the Jupyter server's log).
    """
    global _terminal
    if not (in_kernel() and terminal_requested()):
        return None
    if _terminal is None or _terminal.closed:
        try:
            fd = sys.stderr.fileno()   # ipykernel's copy of the original descriptor 2
        except (OSError, ValueError, io.UnsupportedOperation):
            fd = 2                     # ipykernel did not redirect: descriptor 2 is the original
        try:
            _terminal = open(os.dup(fd), "w", buffering=1, encoding="utf-8", errors="replace")
        except OSError:
            return None
    return _terminal


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _notebook_class() -> type:
    """The notebook bar's class: ``tqdm.notebook`` in an interactive kernel with ipywidgets, else ``tqdm.std``."""
    from tqdm.std import tqdm

    if in_kernel() and not terminal_requested():
        try:
            import ipywidgets  # noqa: F401
        except ImportError:
            return tqdm
        from tqdm.notebook import tqdm as notebook_tqdm

        return notebook_tqdm
    return tqdm


def _terminal_class() -> type:
    from tqdm.std import tqdm

    class TerminalBar(tqdm):
        """A tqdm bar on the terminal, with its own registry of positions (none shared with the notebook's bars)."""
        _instances: Any = None

    import weakref

    TerminalBar._instances = weakref.WeakSet()
    return TerminalBar


_TERMINAL_CLASS: type | None = None


class Progress:
    """One loop's progress: the notebook's bar and, under :mod:`murk.pipeline.execute`, the terminal's.

    Used as tqdm is: iterate over it, or call :meth:`update`; :meth:`close` (or the
    end of the iteration, or leaving its ``with`` block) closes both bars.

    Attributes
    ----------
    bars : list of tqdm.tqdm
        The notebook's (or, outside a kernel, the terminal's) bar first, then the terminal's if drawn.
    """

    def __init__(self, iterable: Iterable | None, bars: list, terminal: bool):
        self._iterable = iterable
        self.bars = bars
        self._terminal = terminal

    @property
    def n(self) -> float:
        """Units done so far."""
        return self.bars[0].n

    @property
    def total(self) -> float | None:
        """Units in all (None: unknown)."""
        return self.bars[0].total

    def __len__(self) -> int:
        return len(self.bars[0])

    def __iter__(self) -> Iterator:
        if self._iterable is None:
            raise TypeError("this progress bar was made without an iterable: call update() instead")
        try:
            for x in self._iterable:
                yield x
                self.update(1)
        finally:
            self.close()

    def update(self, n: float = 1) -> None:
        """Advance both bars by ``n`` units."""
        for b in self.bars:
            b.update(n)

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        """Text after the bar (tqdm's ``set_postfix_str``), on both bars."""
        for b in self.bars:
            b.set_postfix_str(s, refresh=refresh)

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        """The text before the bar (tqdm's ``set_description``), on both bars."""
        for b in self.bars:
            b.set_description(desc, refresh=refresh)

    def close(self) -> None:
        """Close both bars (idempotent); a bar with ``leave=True`` keeps its last line."""
        global _terminal_open
        for b in self.bars:
            b.close()
        if self._terminal:
            self._terminal = False
            _terminal_open -= 1

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def bar(iterable: Iterable | None = None, *, desc: str, total: float | None = None, unit: str = "img",
        disable: bool = False, **kwargs: Any) -> Progress:
    """A progress bar for a stage's loop, in the notebook and (under :mod:`murk.pipeline.execute`) on the terminal.

    Parameters
    ----------
    iterable : iterable, optional
        What the loop goes over; without it, advance the bar with :meth:`Progress.update`.
    desc : str
        The text before the bar; starts with the stage's name (``"depth"``,
        ``"readout <model slug>"``), which is how a stage's line is found on the terminal.
    total : float, optional
        Units in all; default ``len(iterable)`` where it has one.
    unit : str
        The unit of the count and rate: ``"img"`` (images), ``"unit"`` (the read-out's
        24 conditions per image), ``"B"`` (bytes).
    disable : bool
        No bar at all (the iteration still runs).
    **kwargs
        Further tqdm options (``leave``, ``smoothing``, ``unit_scale``, ...), for both bars.

    Returns
    -------
    Progress
        Iterable (when ``iterable`` is given) and updatable like a tqdm bar.

    Notes
    -----
    The terminal bar is redrawn at most every :data:`TTY_INTERVAL_S` seconds on a
    terminal and every :data:`LOG_INTERVAL_S` seconds into a pipe or file (a
    SLURM log stays small); it always writes its final line when it closes.
    """
    global _TERMINAL_CLASS, _terminal_open
    if total is None and iterable is not None and hasattr(iterable, "__len__"):
        total = len(iterable)
    opts = {"desc": desc, "total": total, "unit": unit, "disable": disable, **kwargs}
    cls = _notebook_class()
    nb_opts = dict(opts)
    if in_kernel() and terminal_requested() and "mininterval" not in kwargs:
        nb_opts["mininterval"] = LOG_INTERVAL_S   # a headless notebook: nobody watches it redraw
    bars = [cls(**nb_opts)]
    stream = None if disable or _terminal_open else terminal_stream()
    if stream is not None:
        if _TERMINAL_CLASS is None:
            _TERMINAL_CLASS = _terminal_class()
        tty = _isatty(stream)
        t_opts = {**opts, "file": stream, "position": 0, "dynamic_ncols": tty,
                  "mininterval": TTY_INTERVAL_S if tty else LOG_INTERVAL_S}
        if not tty:
            t_opts["ncols"] = 100
        bars.append(_TERMINAL_CLASS(**t_opts))
        _terminal_open += 1
    return Progress(iterable, bars, terminal=stream is not None)
