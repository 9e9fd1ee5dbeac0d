"""The benchmarks' shared protocol: the machine's load around a run, arms interleaved, median ratios with ranges.

A ratio of two timings taken on a busy machine measures contention as much as the
code: other jobs starve one arm more than the other. So every benchmark in
``benchmarks/``

- prints the load average and the CPU count when it starts and when it ends
  (:class:`LoadLog`; the load is also sampled between rounds);
- runs the arms it compares interleaved, several rounds, alternating their order
  (:func:`interleave`: A B, B A, A B, ...), and reports the median of the per-round
  ratios with their range (:func:`ratio_summary`);
- ends its last line with ``load_max=<1-minute load, the highest sampled> cpus=<n>``
  and, where the load exceeded the CPU count, a warning that the ratios measure
  contention (:meth:`LoadLog.tail`).

Import from a benchmark script as ``from protocol import ...`` (the script's own
folder is first on ``sys.path``).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping


def load_average() -> tuple[float, float, float]:
    """The 1-, 5- and 15-minute load averages (``os.getloadavg``; NaNs where the OS has none)."""
    try:
        return os.getloadavg()
    except OSError:  # pragma: no cover (not on Linux)
        return (float("nan"),) * 3


def cpu_count() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        return os.cpu_count() or 1


class LoadLog:
    """The load around a benchmark run: a line at its start, samples, a line at its end.

    Parameters
    ----------
    name : str
        The benchmark's name, at the start of its lines.
    stream : file, optional
        Where the load lines go (default standard output).
    """

    def __init__(self, name: str, stream=None):
        self.name = name
        self.stream = stream or sys.stdout
        self.cpus = cpu_count()
        self.samples: list[float] = []
        self.t0 = time.time()
        self._line("start")

    def _line(self, when: str) -> None:
        one, five, fifteen = load_average()
        self.samples.append(one)
        threads = ""
        if "torch" in sys.modules:
            threads = f" torch_threads={sys.modules['torch'].get_num_threads()}"
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime())
        print(f"{self.name}: {when} {stamp} load={one:.2f},{five:.2f},{fifteen:.2f} cpus={self.cpus}{threads}",
              file=self.stream, flush=True)

    def sample(self) -> float:
        """Record the 1-minute load now (between rounds); returns it."""
        one = load_average()[0]
        self.samples.append(one)
        return one

    @property
    def load_max(self) -> float:
        """The highest 1-minute load sampled so far."""
        return max(self.samples)

    def end(self) -> None:
        """Print the end line (load, CPUs, seconds since the start)."""
        self._line(f"end after {time.time() - self.t0:.0f} s:")

    def tail(self) -> str:
        """What the last line ends with: ``load_max= cpus=`` and, over the CPU count, the warning."""
        s = f"load_max={self.load_max:.2f} cpus={self.cpus}"
        if self.load_max > self.cpus:
            s += (f" WARNING: the load exceeded the {self.cpus} CPUs during this run: its ratios and rates "
                  f"measure contention, rerun on a quiet machine")
        return s


def interleave(arms: Mapping[str, Callable[[], float | None]], rounds: int,
               log: LoadLog | None = None) -> dict[str, list[float]]:
    """Run the arms in alternating order for ``rounds`` rounds; each arm's seconds per round.

    Parameters
    ----------
    arms : mapping of name to callable
        Each call runs one round of that arm. If it returns a number, that is its
        time in seconds (e.g. excluding its own set-up); otherwise the call is timed
        with ``time.perf_counter``.
    rounds : int
        At least 1. Round ``r`` runs the arms in the given order for even ``r``, in
        reverse for odd ``r``, so that a drift of the machine's load over the run
        affects the arms alike.
    log : LoadLog, optional
        Sampled after each round.

    Returns
    -------
    dict of name to list of float
        Seconds, one per round, in round order.

    Raises
    ------
    ValueError
        ``rounds`` < 1 or no arms.
    """
    if rounds < 1 or not arms:
        raise ValueError(f"interleave needs arms and rounds >= 1 (got {len(arms)} arms, {rounds} rounds)")
    names = list(arms)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for n in (names if r % 2 == 0 else names[::-1]):
            t = time.perf_counter()
            got = arms[n]()
            out[n].append(float(got) if isinstance(got, (int, float)) else time.perf_counter() - t)
        if log is not None:
            log.sample()
    return out


def ratio_summary(numerator: list[float], denominator: list[float]) -> tuple[float, float, float]:
    """Median, minimum and maximum of the per-round ratios ``numerator[r] / denominator[r]``.

    Raises
    ------
    ValueError
        The lists differ in length or are empty.
    """
    if len(numerator) != len(denominator) or not numerator:
        raise ValueError(f"ratio_summary needs two equal, non-empty lists (got {len(numerator)}, {len(denominator)})")
    r = [a / b for a, b in zip(numerator, denominator)]
    return statistics.median(r), min(r), max(r)


def fmt_ratio(name: str, summary: tuple[float, float, float], digits: int = 2) -> str:
    """``name=<median> name_range=<min>-<max>`` for a last line."""
    med, lo, hi = summary
    return f"{name}={med:.{digits}f} {name}_range={lo:.{digits}f}-{hi:.{digits}f}"
