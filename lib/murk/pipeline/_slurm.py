"""A run on a SLURM cluster (snakemake-executor-plugin-slurm): its job status, its GPUs, a killed driver's jobs.

The executor reads its jobs' states with ``squeue`` (``profiles/slurm``: ``slurm-status-command: squeue``,
which works with and without accounting) or ``sacct``. ``squeue`` shows a finished job only for the
cluster's ``MinJobAge`` seconds (``scontrol show config``; Slurm's default 300): a job that ends and is
forgotten between two status checks is never seen to end, and the run waits forever. The executor (2.8)
waits at most :data:`MAX_STATUS_INTERVAL_S` between checks (``max_sleep_time`` in its ``check_active_jobs``),
so ``MinJobAge`` must be at least that. ``sacct`` of plugin 2.8 reads a cancelled job
(``CANCELLED by <uid>``) as running: never retried, the run never ends.

The Snakefile's ``onstart`` (the Snakemake main process, SLURM executor, not a dry run) also calls
:func:`driver_start`, before the first job is submitted:

- a profile that asks GPUs on a cluster whose nodes list no ``gpu`` generic resource (``sinfo -o %G``) is
  refused (:func:`gpu_problem`), naming the CPU profile, instead of Slurm's own ``Invalid generic resource
  (gres) specification`` at the first submission;
- the live jobs of an earlier driver of the same output root that was killed (SIGKILL, a lost login node)
  are found by their job name: the executor names every job of one driver by the driver's run id, and murk
  records the run ids of each output root (:func:`runs_file`). A pending job is cancelled (this driver
  submits it again; a read-out resumes image by image), a running one is waited for (a second job on its
  store would be refused and spend its retry), one line per decision (:func:`decide`);
- the executor is told to submit without ``-A`` when no account is given, as its own guess does in effect:
  executor 2.8 guesses with ``sacct -nu USER -o Account%256 | tail -1`` split into words without a shell,
  which prints ``sacct: invalid option -- '1'`` at every start and finds no account.

The read-out jobs' runtime and memory are computed, not guessed (:func:`readout_resources`, the Snakefile's
``resources`` of ``readout`` and ``readout_shard``): every read-out job records what it cost beside its store
(:func:`write_readout_cost`: seconds per image, loading time, peak host and device memory), and the next jobs of
that model ask for the measured time of their images and the measured peak memory, times a stated margin
(:data:`RUNTIME_MARGIN`, :data:`MEMORY_MARGIN`), more at each retry. Before any job of a model has finished there
is no measurement: the request is :data:`UNMEASURED_RUNTIME_MIN` and the memory the model's weights need
(:func:`weights_bytes`), said as such.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

__all__ = ["MAX_STATUS_INTERVAL_S", "min_job_age", "status_problem", "SQUEUE_FORMAT", "SlurmJob", "Decision",
           "parse_squeue", "decide", "has_gpus", "gpu_problem", "runs_file", "read_runs", "write_runs",
           "driver_start", "RUNTIME_MARGIN", "MEMORY_MARGIN", "UNMEASURED_RUNTIME_MIN", "UNMEASURED_MEM_MB",
           "BASE_HOST_BYTES", "COST_SUFFIX", "MAX_S_PER_IMAGE", "MAX_LOAD_S", "MAX_PEAK_HOST_BYTES", "cost_file",
           "write_readout_cost", "cost_problem", "read_readout_costs",
           "weights_bytes", "readout_resources", "model_readout_resources"]

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


# --- a driver's start: GPUs, the jobs of a killed driver, the account -------------------------------------------

#: ``squeue -o`` format of :func:`parse_squeue`: job id, job name (the driver's run id), state, comment
#: (``rule_<rule>_wildcards_<wildcards>``, as the executor sets it)
SQUEUE_FORMAT = "%i|%j|%T|%k"

#: states of a job that has not started: cancelled, then submitted again by the new driver
WAITING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
#: states of a job that ended (squeue shows it for MinJobAge): nothing to do
ENDED_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                          "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED"})

#: seconds between two ``squeue`` while a driver waits for a killed driver's running jobs
WAIT_POLL_S = 10.0


class SlurmJob(NamedTuple):
    """One line of ``squeue -o`` :data:`SQUEUE_FORMAT`: a SLURM job of a Snakemake driver."""
    job_id: str
    name: str
    state: str
    comment: str

    @property
    def what(self) -> str:
        """The rule and wildcards, from the executor's comment (``readout_shard slug=…,size=1,shard=0000``)."""
        c = self.comment[len("rule_"):] if self.comment.startswith("rule_") else self.comment
        rule, _, wildcards = c.partition("_wildcards_")
        return f"{rule} {wildcards}".strip() or f"job {self.job_id}"


class Decision(NamedTuple):
    """What a new driver does with one live job of a killed driver: ``cancel`` or ``wait``, and its line."""
    job: SlurmJob
    action: str
    line: str


def parse_squeue(text: str) -> list[SlurmJob]:
    """The jobs of ``squeue -h -o '%i|%j|%T|%k'`` output, one per line (other lines ignored).

    Parameters
    ----------
    text : str
        squeue's standard output, without header (``-h``), in :data:`SQUEUE_FORMAT`.

    Returns
    -------
    list of SlurmJob
        In squeue's order; the comment may itself hold ``|`` (it is the last field).

    Examples
    --------
    >>> parse_squeue("12|run-a|PENDING|rule_select\\n")[0].what
    'select'
    """
    jobs = []
    for line in text.splitlines():
        parts = line.strip().split("|", 3)
        if len(parts) == 4 and parts[0]:
            jobs.append(SlurmJob(*(p.strip() for p in parts)))
    return jobs


def decide(jobs: Sequence[SlurmJob], old_runs: Sequence[str], root: str) -> list[Decision]:
    """What to do with each live job of a killed driver of one output root, one line each.

    Parameters
    ----------
    jobs : sequence of SlurmJob
        The jobs squeue lists (any names; those not in ``old_runs`` are left alone).
    old_runs : sequence of str
        The run ids (job names) of the earlier drivers of this output root (:func:`read_runs`). The new
        driver holds the root's lock (:mod:`murk.pipeline`), so none of them is alive.
    root : str
        The output root, for the messages.

    Returns
    -------
    list of Decision
        ``cancel`` for a job that has not started (:data:`WAITING_STATES`): this driver submits it again;
        ``wait`` for a job that runs (a second job on its outputs would be refused, or duplicate it). Ended
        jobs and other drivers' jobs get none.
    """
    names = set(old_runs)
    out = []
    for j in jobs:
        if j.name not in names or j.state in ENDED_STATES or not j.state:
            continue
        if j.state in WAITING_STATES:
            out.append(Decision(j, "cancel", f"cancelled SLURM job {j.job_id} ({j.what}, {j.state.lower()}) of a "
                                             f"killed earlier run on {root}: this run submits it again"))
        else:
            resumes = ": a read-out resumes image by image" if j.what.startswith("readout") else ""
            out.append(Decision(j, "wait", f"waiting for SLURM job {j.job_id} ({j.what}, {j.state.lower()}) of a "
                                           f"killed earlier run on {root} to end before this run submits its "
                                           f"jobs (scancel {j.job_id} to stop it instead{resumes})"))
    return out


def has_gpus(sinfo_gres: str) -> bool:
    """Whether ``sinfo -h -o %G`` output lists a ``gpu`` generic resource on any node.

    >>> has_gpus("(null)\\n"), has_gpus("gpu:a100:4(S:0-1)\\n(null)\\n"), has_gpus("gpu:2,shard:8\\n")
    (False, True, True)
    """
    return any(re.match(r"gpu(:|\(|$)", g.strip()) for line in sinfo_gres.splitlines() for g in line.split(","))


def gpu_problem(gpu_rules: Sequence[str], sinfo_gres: str | None, partition: str | None = None) -> str | None:
    """Why the cluster cannot run jobs that ask GPUs, as one line naming the fix; None when it can or is unknown.

    Parameters
    ----------
    gpu_rules : sequence of str
        The rules of the jobs to run that ask ``gpu`` > 0 (or a ``gres`` with ``gpu``).
    sinfo_gres : str or None
        ``sinfo -h -o %G`` output (of ``partition`` if given), one line per node group; None when sinfo did
        not answer.
    partition : str, optional
        The partition the jobs go to, for the message.
    """
    if not gpu_rules or not (sinfo_gres or "").strip() or has_gpus(sinfo_gres):
        return None  # no GPU asked, sinfo did not answer or listed no node (an unknown partition): nothing said
    where = f"partition {partition}" if partition else "this cluster"
    return (f"the jobs of {', '.join(sorted(set(gpu_rules)))} ask a GPU, but {where} has none (sinfo -o %G lists "
            f"no gpu generic resource): run on CPUs with --profile profiles/slurm, or give a GPU partition with "
            f"--default-resources slurm_partition=GPU_PARTITION")


def runs_file(output_dir: str | os.PathLike, snakemake_dir: str | os.PathLike = ".snakemake") -> Path:
    """Where murk keeps the SLURM run ids (job names) of an output root's drivers.

    ``<snakemake_dir>/murk-slurm/<root>.json``, ``<root>`` as in the root's lock
    (:func:`murk.pipeline.root_lock_files`).
    """
    from murk.pipeline._locks import root_lock_files

    return Path(snakemake_dir) / "murk-slurm" / (root_lock_files(output_dir, snakemake_dir)[0].stem + ".json")


def read_runs(path: Path) -> list[str]:
    """The run ids recorded in ``path`` (:func:`runs_file`); empty when there is none or it cannot be read."""
    try:
        runs = json.loads(path.read_text(encoding="utf-8")).get("runs", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [r for r in runs if isinstance(r, str) and re.fullmatch(r"[A-Za-z0-9_-]{1,100}", r)]


def write_runs(path: Path, runs: Sequence[str]) -> None:
    """Record the run ids ``runs`` in ``path`` (atomically)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"runs": list(dict.fromkeys(runs))}, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _run(cmd: Sequence[str], timeout_s: float = 30.0) -> str | None:
    try:
        r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 else None


def _say(line: str) -> None:
    print(f"murk: {line}", file=sys.stderr, flush=True)


def _gpu_rules(jobs) -> list[str]:
    rules = []
    for job in jobs:
        res = job.resources
        gpu, gres = res.get("gpu", 0), str(res.get("gres", "") or "")
        try:
            asks = int(gpu or 0) > 0
        except (TypeError, ValueError):
            asks = bool(gpu)
        if asks or re.match(r"gpu(:|$)", gres):
            rules.append(job.rule.name)
    return rules


def driver_start(workflow, output_dir: str | os.PathLike, snakemake_dir: str | os.PathLike = ".snakemake", *,
                 run: Callable[[Sequence[str]], str | None] = _run, say: Callable[[str], None] = _say,
                 poll_s: float | None = None) -> None:
    """The Snakefile's ``onstart`` for the SLURM executor: GPUs, a killed driver's jobs, the account.

    Called once, in the Snakemake main process, after the job graph is built and before the first job is
    submitted (``onstart`` runs neither in a dry run nor when there is nothing to do).

    Parameters
    ----------
    workflow : snakemake.workflow.Workflow
        The running workflow (its job graph, and its executor, ``workflow.scheduler._executor``).
    output_dir : path
        The run's output root (whose lock this process holds).
    snakemake_dir : path
        ``<working directory>/.snakemake``.
    run, say : callable
        Run a command and return its standard output (None when it failed); print one line. For tests.
    poll_s : float, optional
        Seconds between two squeue while waiting (default :data:`WAIT_POLL_S`).

    Raises
    ------
    ValueError
        The jobs ask GPUs that the cluster has not (:func:`gpu_problem`); nothing was submitted.
    """
    jobs = list(workflow.dag.needrun_jobs())
    gpu_rules = _gpu_rules(jobs)
    if gpu_rules:
        partitions = {str(j.resources.get("slurm_partition") or "") for j in jobs if j.rule.name in gpu_rules}
        partition = partitions.pop() if len(partitions) == 1 else ""
        why = gpu_problem(gpu_rules, run(["sinfo", "-h", "-o", "%G", *(["-p", partition] if partition else [])]),
                          partition or None)
        if why:
            raise ValueError(why)
    executor = getattr(getattr(workflow, "scheduler", None), "_executor", None)
    # executor 2.8 guesses a missing account with a broken sacct command (module docstring): submit without -A,
    # which is what its guess ends in, and what sbatch does (the user's default account)
    if getattr(executor, "_fallback_account_arg", "") is None:
        executor._fallback_account_arg = ""
    this_run = getattr(executor, "run_uuid", None)
    path = runs_file(output_dir, snakemake_dir)
    old = [r for r in read_runs(path) if r != this_run]
    listed = run(["squeue", "-h", "--name", ",".join(old), "-o", SQUEUE_FORMAT]) if old else ""
    root = str(Path(os.path.realpath(output_dir)))
    decisions = decide(parse_squeue(listed or ""), old, root)
    if listed is None:
        say(f"squeue did not answer: the jobs of earlier runs on {root} (squeue --name {','.join(old)}) may still "
            f"be alive and run twice; scancel them if squeue lists them")
    # recorded first: if this driver is killed while it waits, the next one still finds the old jobs (all of the
    # old runs when squeue did not answer)
    keep = old if listed is None else sorted({d.job.name for d in decisions})
    write_runs(path, keep + ([this_run] if this_run else []))
    waiting, uncancelled = {}, set()
    for d in decisions:
        if d.action == "cancel":
            if run(["scancel", d.job.job_id]) is None:
                say(f"could not cancel SLURM job {d.job.job_id} ({d.job.what}) of a killed earlier run on {root}: "
                    f"scancel {d.job.job_id} by hand if squeue still lists it")
                uncancelled.add(d.job.name)
                continue
            say(d.line)
        else:
            say(d.line)
            waiting[d.job.job_id] = d.job
    while waiting:
        time.sleep(WAIT_POLL_S if poll_s is None else poll_s)
        out = run(["squeue", "-h", "--name", ",".join(sorted({j.name for j in waiting.values()})),
                   "-o", SQUEUE_FORMAT])
        if out is None:  # squeue did not answer: ask again
            continue
        still = {j.job_id for j in parse_squeue(out) if j.state and j.state not in ENDED_STATES}
        for job_id in sorted(set(waiting) - still):
            say(f"SLURM job {job_id} ({waiting.pop(job_id).what}) of the killed earlier run has ended")
    if decisions:
        write_runs(path, sorted(uncancelled) + ([this_run] if this_run else []))


# --- the read-out jobs' runtime and memory, from measurements ---------------------------------------------------

#: runtime requested = this margin x the measured time (loading + seconds per image x images): images differ in
#: decode length and verbal rows, nodes of one partition in speed and load
RUNTIME_MARGIN = 1.5
#: memory requested = this margin x the measured peak host memory (the kernel's maximum resident set)
MEMORY_MARGIN = 1.3
#: runtime of a read-out job of a model that no finished job has measured yet, min (the profiles' former value)
UNMEASURED_RUNTIME_MIN = 240
#: memory of such a job when its weights cannot be found on this machine, MB (the CPU profile's former value)
UNMEASURED_MEM_MB = 8000
#: host memory of a read-out beside the model's weights (Python, torch, the processor, rendering, a batch), bytes
BASE_HOST_BYTES = 3 << 30
#: the shortest runtime asked, min (loading alone takes minutes on a shared filesystem)
MIN_RUNTIME_MIN = 10
#: beside a read-out store ``<name>.zarr``: its read-out's measured cost, ``<name>.cost.json``
COST_SUFFIX = ".cost.json"
#: the most seconds per image a cost record may claim, s: a day. The slowest read-out measured, InternVL 2B in float32
#: on a loaded 2-core CPU, took 259 s per unit, 24 units an image, 1.7 h per image (benchmarks/README.md, 2026-12-05);
#: a day is 14 times that (the study's 1000 items would take three years)
MAX_S_PER_IMAGE = 86_400.0
#: the most seconds of loading a cost record may claim, s: a day (reading at 100 MB/s, 8.6 TB: some 900 times the
#: largest weights of the study's models, 9.3 GiB in float32, benchmarks/README.md)
MAX_LOAD_S = 86_400.0
#: the most peak host memory a cost record may claim, bytes: 64 TiB, all the physical memory x86-64 Linux maps with
#: 4-level page tables ("direct mapping of all physical memory", 64 TB: Documentation/arch/x86/x86_64/mm.rst); no
#: node of a cluster murk runs on has more
MAX_PEAK_HOST_BYTES = 64 << 40
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def cost_file(store: str | os.PathLike) -> Path:
    """Where the cost of the read-out of ``store`` (``<name>.zarr``) is recorded: ``<name>.cost.json`` beside it."""
    store = Path(store)
    return store.with_name(store.name.removesuffix(".zarr") + COST_SUFFIX)


def write_readout_cost(store: str | os.PathLike, *, model: str, device: str, images: int, units: int,
                       run_s: float, load_s: float, peak_host_bytes: int, peak_device_bytes: int = 0,
                       images_per_batch: int = 1) -> Path:
    """Record what one read-out job cost, beside its store (atomically; read by :func:`readout_resources`).

    Parameters
    ----------
    store : path
        The read-out store (a shard's too).
    model : str
        The model id.
    device : str
        Where it ran: ``"cuda"`` or ``"cpu"`` (only measurements of one kind are combined).
    images, units : int
        Images read out by this job (not those resumed as done) and their units (image x condition).
    run_s : float
        Seconds the read-out loop took (rendering, model, writing), s.
    load_s : float
        Seconds loading the model took, s.
    peak_host_bytes, peak_device_bytes : int
        The process's peak resident memory (``ru_maxrss``) and the device's peak allocated memory, bytes.
    images_per_batch : int
        The batched engine's images per batch (the device memory depends on it).

    Returns
    -------
    Path
        The file written (:func:`cost_file`). A job that read no image writes nothing (returns the path).
    """
    path = cost_file(store)
    if int(images) < 1:
        return path
    rec = {"model": str(model), "device": str(device), "images": int(images), "units": int(units),
           "run_s": float(run_s), "load_s": float(load_s), "s_per_image": float(run_s) / int(images),
           "peak_host_bytes": int(peak_host_bytes), "peak_device_bytes": int(peak_device_bytes),
           "images_per_batch": int(images_per_batch)}
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(rec, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def _shown(value) -> str:
    """A value of a cost record in JSON's words (a finite float in 6 significant digits: ``1e+12``), cut to 40
    characters."""
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.6g}"
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _number(value, *, whole: bool = False) -> float | None:
    """``value`` as a float when it is a JSON number (a whole one with ``whole``), else None; a whole number too large
    for a float is ``inf``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (whole and not isinstance(value, int)):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf


def cost_problem(rec) -> str | None:
    """Why a cost record (:func:`write_readout_cost`) is not a measurement to size jobs by, or None.

    The fields the request rests on are checked as data: ``device`` text; ``images`` a whole number >= 1;
    ``s_per_image`` a finite number > 0 and at most :data:`MAX_S_PER_IMAGE`; ``load_s`` a finite number >= 0 and at
    most :data:`MAX_LOAD_S`; ``peak_host_bytes`` a whole number > 0 and at most :data:`MAX_PEAK_HOST_BYTES`;
    ``model``, where given, text. (JSON's ``NaN`` and ``Infinity``, which Python's reader accepts, are not finite.)

    Parameters
    ----------
    rec : object
        The record as read from its file (``json.loads``).

    Returns
    -------
    str or None
        The first problem in words: the field, its value in JSON's words, and the bounds; None for a record to use.

    Examples
    --------
    >>> cost_problem({"device": "cpu", "images": 2, "s_per_image": 1e12, "load_s": 1.0, "peak_host_bytes": 1 << 30})
    's_per_image 1e+12 is not seconds per image > 0 and at most 86400 (a day, 14 times the slowest read-out measured)'
    >>> cost_problem({"device": "cpu", "images": 2, "s_per_image": 1.5, "load_s": 1.0, "peak_host_bytes": 1 << 30})
    """
    if not isinstance(rec, dict):
        return f"it holds {type(rec).__name__ if rec is not None else 'null'}, not a record (a JSON object)"
    for key in ("device", "images", "s_per_image", "load_s", "peak_host_bytes"):
        if key not in rec:
            return f"it has no {key}"
    for key in ("device", "model"):
        if key in rec and not isinstance(rec[key], str):
            return f"{key} {_shown(rec[key])} is not text"
    checks = (("images", True, 1, None, "a whole number of images >= 1"),
              ("s_per_image", False, None, MAX_S_PER_IMAGE,
               f"seconds per image > 0 and at most {MAX_S_PER_IMAGE:.0f} (a day, 14 times the slowest read-out "
               f"measured)"),
              ("load_s", False, 0, MAX_LOAD_S, f"seconds of loading >= 0 and at most {MAX_LOAD_S:.0f} (a day)"),
              ("peak_host_bytes", True, 1, MAX_PEAK_HOST_BYTES,
               f"bytes > 0 and at most {MAX_PEAK_HOST_BYTES} (64 TiB, the most memory x86-64 Linux maps)"))
    for key, whole, low, high, form in checks:
        x = _number(rec[key], whole=whole)
        if x is None or not math.isfinite(x) or (x <= 0 if low is None else x < low) or (high is not None and x > high):
            return f"{key} {_shown(rec[key])} is not {form}"
    return None


def read_readout_costs(paths: Sequence[str | os.PathLike], problems: list | None = None) -> list[dict]:
    """The cost records among ``paths`` (:func:`write_readout_cost`) that are measurements (:func:`cost_problem`).

    Parameters
    ----------
    paths : sequence of path
        Cost record files; one that does not exist is skipped (no job wrote it).
    problems : list, optional
        Receives ``(path, why)`` for each file that exists and is skipped: not readable, not JSON (a truncated
        file, a number of more than 4,300 digits), not a record, or a field outside its bounds.

    Returns
    -------
    list of dict
        The records to size jobs by, in the order of ``paths``.
    """
    out = []
    for p in paths:
        try:
            text = Path(p).read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as e:
            why = f"it cannot be read ({getattr(e, 'strerror', None) or e})"
        else:
            try:
                rec = json.loads(text)
            except ValueError as e:
                why = f"it is not JSON ({str(e).split(':')[0]})"
            else:
                why = cost_problem(rec)
                if why is None:
                    out.append(rec)
                    continue
        if problems is not None:
            problems.append((Path(p), why))
    return out


def weights_bytes(model: str, hub_cache: str | os.PathLike | None = None) -> int | None:
    """Bytes of a model's weight files: a local folder's, or the hub cache's snapshot (None when not found).

    Parameters
    ----------
    model : str
        A local checkpoint folder or a hub id (``org/name``).
    hub_cache : path, optional
        Default ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``.
    """
    folder = Path(model)
    if not folder.is_dir():
        cache = Path(hub_cache or os.environ.get("HF_HUB_CACHE")
                     or Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub")
        snaps = sorted((cache / ("models--" + model.replace("/", "--")) / "snapshots").glob("*"),
                       key=lambda p: p.stat().st_mtime)
        if not snaps:
            return None
        folder = snaps[-1]
    sizes = [f.stat().st_size for f in folder.rglob("*") if f.is_file() and f.suffix in _WEIGHT_SUFFIXES]
    return sum(sizes) if sizes else None


def readout_resources(n_images: int, costs: Sequence[dict] = (), *, device: str | None = None, attempt: int = 1,
                      weights: int | None = None) -> dict:
    """Runtime and memory to ask for a read-out job of ``n_images`` images, from measured costs.

    With measurements (of this model, on ``device``'s kind when given), the job asks for

        runtime = RUNTIME_MARGIN x (load_s + n_images x s_per_image) / 60 min, at least MIN_RUNTIME_MIN,
        mem_mb  = MEMORY_MARGIN x peak_host_bytes / 2**20,

    the largest ``s_per_image``, ``load_s`` and ``peak_host_bytes`` measured (a job that read few images
    measures its warm-up too: the larger is kept). Without, it asks for :data:`UNMEASURED_RUNTIME_MIN` and
    ``MEMORY_MARGIN x (BASE_HOST_BYTES + 2 x weights)`` (weights as stored, held twice while loading or
    converting to float32), or :data:`UNMEASURED_MEM_MB` when the weights are unknown. A retry (``attempt``
    2, 3, ...: a job that ran out of time or memory) asks ``attempt`` times as much.

    Parameters
    ----------
    n_images : int
        Images of the job (a shard's, or the model's ``n_items``).
    costs : sequence of dict
        Cost records (:func:`read_readout_costs`) of this model's earlier jobs.
    device : {"cuda", "cpu"}, optional
        Keep only the measurements of this kind (default: all).
    attempt : int
        Snakemake's attempt (1 = first).
    weights : int, optional
        Bytes of the model's weight files (:func:`weights_bytes`).

    Returns
    -------
    dict
        ``runtime`` (min, int), ``mem_mb`` (MB, int), ``basis`` (str: what the request rests on).

    Examples
    --------
    >>> rec = {"device": "cuda", "images": 100, "s_per_image": 1.2, "load_s": 60.0, "peak_host_bytes": 10 << 30}
    >>> r = readout_resources(1000, [rec], device="cuda")
    >>> r["runtime"], r["mem_mb"]
    (32, 13312)
    """
    n, attempt = max(0, int(n_images)), max(1, int(attempt))
    costs = [c for c in costs if device is None or str(c.get("device")) == str(device)]
    if costs:
        s_img = max(float(c["s_per_image"]) for c in costs)
        load = max(float(c["load_s"]) for c in costs)
        peak = max(int(c["peak_host_bytes"]) for c in costs)
        runtime = max(MIN_RUNTIME_MIN, math.ceil(RUNTIME_MARGIN * (load + n * s_img) / 60))
        mem = math.ceil(MEMORY_MARGIN * peak / 2**20)
        basis = (f"measured on {len(costs)} job(s): {s_img:.3g} s per image, {load:.0f} s loading, peak "
                 f"{peak / 2**30:.2f} GiB; margins {RUNTIME_MARGIN} (time), {MEMORY_MARGIN} (memory)")
    else:
        runtime = UNMEASURED_RUNTIME_MIN
        if weights:
            mem = math.ceil(MEMORY_MARGIN * (BASE_HOST_BYTES + 2 * int(weights)) / 2**20)
            basis = f"not measured yet: {UNMEASURED_RUNTIME_MIN} min, memory from the weights ({weights / 2**30:.2f} GiB)"
        else:
            mem = UNMEASURED_MEM_MB
            basis = f"not measured yet, weights not found: {UNMEASURED_RUNTIME_MIN} min, {UNMEASURED_MEM_MB} MB"
    return {"runtime": int(runtime * attempt), "mem_mb": int(mem * attempt), "basis": basis}


def model_readout_resources(readout_dir: str | os.PathLike, slug: str, model: str, n_images: int, *,
                            device: str | None = None, attempt: int = 1) -> dict:
    """:func:`readout_resources` of a read-out job of one model, from the cost records of its earlier jobs.

    Parameters
    ----------
    readout_dir : path
        ``<output root>/readout``: the model's cost records are ``<slug>.cost.json`` (its whole store) and
        ``<slug>/*.cost.json`` (its shard stores), of any shard size.
    slug : str
        The model's folder name (:func:`murk.core.model_slug`).
    model : str
        The model id (its weights are looked up when nothing was measured).
    n_images : int
        Images of the job.
    device : {"cuda", "cpu"}, optional
        The device the job runs on, when known (the run's ``device`` setting).
    attempt : int
        Snakemake's attempt.

    Returns
    -------
    dict
        :func:`readout_resources`'s, and ``ignored``: one line (str) per cost record of the model that is not a
        measurement (:func:`read_readout_costs`), naming the file, the field and its value, and what applies
        instead; the Snakefile prints each once.
    """
    folder = Path(readout_dir)
    files = [folder / f"{slug}{COST_SUFFIX}", *sorted((folder / slug).glob(f"*{COST_SUFFIX}"))]
    problems: list = []
    costs = [c for c in read_readout_costs(files, problems) if c.get("model", model) == model]
    weights = None if costs else weights_bytes(model)
    got = readout_resources(n_images, costs, device=device, attempt=attempt, weights=weights)
    applies = ("the model's other measurements apply" if costs else
               f"the defaults apply ({got['basis'].removeprefix('not measured yet').lstrip(', :')})")
    got["ignored"] = [f"murk: {f}: {why}, so it is not a measurement: it is ignored and {applies}"
                      for f, why in problems]
    return got
