"""Checks of a run on a SLURM cluster (snakemake-executor-plugin-slurm): will its job status be read?

The executor reads its jobs' states with ``squeue`` (``profiles/slurm``: ``slurm-status-command: squeue``,
which works with and without accounting) or ``sacct``. ``squeue`` shows a finished job only for the
cluster's ``MinJobAge`` seconds (``scontrol show config``; Slurm's default 300): a job that ends and is
forgotten between two status checks is never seen to end, and the run waits forever. The executor (2.8)
waits at most :data:`MAX_STATUS_INTERVAL_S` between checks (``max_sleep_time`` in its ``check_active_jobs``),
so ``MinJobAge`` must be at least that. ``sacct`` of plugin 2.8 reads a cancelled job
(``CANCELLED by <uid>``) as running: never retried, the run never ends.
"""

from __future__ import annotations

import re
import subprocess

__all__ = ["MAX_STATUS_INTERVAL_S", "min_job_age", "status_problem"]

#: the SLURM executor's longest wait between two status checks, s (plugin 2.8, ``max_sleep_time``)
MAX_STATUS_INTERVAL_S = 180


def min_job_age(timeout_s: float = 10.0) -> int | None:
    """The cluster's ``MinJobAge`` in seconds from ``scontrol show config``; None when it cannot be read."""
    try:
        out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"^MinJobAge\s*=\s*(\d+)\s*(\w*)", out.stdout, re.M)
    if out.returncode != 0 or m is None:
        return None
    return int(m.group(1)) * (3600 if m.group(2).lower() in ("h", "hour", "hours") else 1)


def status_problem(status_command: str | None, age_s: int | None) -> str | None:
    """Why the executor may never see a job end, as one message; None when its status will be read.

    Parameters
    ----------
    status_command : str or None
        The executor's ``status_command`` setting (``squeue`` or ``sacct``).
    age_s : int or None
        The cluster's ``MinJobAge`` (s), None when unknown (then nothing is said about it).

    Returns
    -------
    str or None
        The problem and the fix, in the words of the command line.
    """
    if status_command == "sacct":
        return ("the SLURM executor reads job states with sacct, which reports a cancelled job as 'CANCELLED by "
                "<uid>': executor 2.8 takes that for running, so a cancelled job is never retried and the run never "
                "ends. Leave the status command as profiles/slurm sets it (--slurm-status-command squeue).")
    if status_command == "squeue" and age_s is not None and age_s < MAX_STATUS_INTERVAL_S:
        return (f"this cluster's MinJobAge is {age_s} s (scontrol show config): squeue forgets a finished job "
                f"after it, and the SLURM executor may wait up to {MAX_STATUS_INTERVAL_S} s between status checks, so "
                f"a job that ends unseen is waited for forever. Ask the cluster's administrators for MinJobAge >= "
                f"{MAX_STATUS_INTERVAL_S}, or watch the run and stop it (Ctrl-C) when squeue no longer lists its jobs.")
    return None
