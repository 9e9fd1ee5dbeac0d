"""Session fixtures of the suite, and how its parallel workers share the machine."""

# --- one worker, its share of the cores (issue 22 item 4) ---
# `make test` runs pytest-xdist workers (Makefile TEST_WORKERS: 3). Left alone, torch's OpenMP pool and
# the BLAS libraries in every worker (and in every kernel and Snakemake job it starts) take all the cores each,
# and their threads spin-wait on one another: on a 2-core machine `pytest tests/test_engine_batched.py -k gemma`, run
# beside a loaded suite (load 2.6), took 44.7 s with two threads and 18.5 s with one (2026-12-02). Each worker
# therefore gets max(1, cores // workers) threads, set before numpy or torch is imported and inherited by its
# subprocesses; a value the user set is kept.
import os as _os

if _os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _cores = len(_os.sched_getaffinity(0)) if hasattr(_os, "sched_getaffinity") else (_os.cpu_count() or 1)
    _share = str(max(1, _cores // int(_os.environ["PYTEST_XDIST_WORKER_COUNT"])))
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        _os.environ.setdefault(_var, _share)

# the benchmarks' baseline engine (benchmarks/baseline.py) is tested against the reference scorer: the project
# root is importable (``from benchmarks.baseline import read_item``) whatever folder pytest was started from
import sys as _sys  # noqa: E402

_ROOT = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _ROOT not in _sys.path:
    _sys.path.append(_ROOT)


# --- what all workers share: built once per session, by the first worker that asks ---
def _once_for_all_workers(request, tmp_path_factory, name: str, build):
    """``build(folder)``'s result, built once per session into ``<session temp>/<name>`` and shared by every
    pytest-xdist worker (the first one that asks builds it under a file lock, the others wait, then unpickle
    its result); without xdist, built into the session's temporary folder. A failed build is reported to
    every worker that asks, not run again."""
    import fcntl
    import pickle
    import traceback

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if hasattr(request.config, "workerinput") else base  # xdist: <basetemp>/popen-gw<n>
    result, failed = shared / f"{name}.pickle", shared / f"{name}.failed"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process ends
        if failed.exists():
            _pytest_tiny.fail(f"the session's {name} failed on another worker:\n{failed.read_text()}")
        if not result.exists():
            try:
                value = build(shared / name)
            except BaseException:
                failed.write_text(traceback.format_exc()[-6000:])
                raise
            result.write_bytes(pickle.dumps(value))
        return pickle.loads(result.read_bytes())


# --- tiny offline checkpoints (murk.offline) and a COCO image: readout tests ---
import pytest as _pytest_tiny


@_pytest_tiny.fixture(scope="session")
def tiny_checkpoint_dirs(tmp_path_factory, request):
    """Folders of the tiny checkpoints, built once per session for all workers: {arch: Path} (read only)."""
    from murk.offline import TINY_MODELS, build_tiny_checkpoint

    return _once_for_all_workers(request, tmp_path_factory, "tiny_checkpoints", lambda root: {
        arch: build_tiny_checkpoint(arch, root / arch, seed=0) for arch in TINY_MODELS.values()})


@_pytest_tiny.fixture(scope="session")
def tiny_vlms(tiny_checkpoint_dirs):
    """Tiny VLMs loaded with murk.readout.load_vlm from their local folders: {arch: VLM}."""
    from murk.readout import load_vlm

    return {arch: load_vlm(str(d), device="cpu") for arch, d in tiny_checkpoint_dirs.items()}


@_pytest_tiny.fixture(scope="session")
def coco_sample():
    """The folder of the shared COCO val2017 sample (tests/stages.py ``coco_sample``: ``$MURK_COCO_DIR``, else
    ``../shared/coco-val2017-sample`` next to the project), in COCO's layout (``annotations/``, ``val2017/``); a
    test that takes it is skipped, with one reason that says where it was looked for, where it is absent."""
    import stages

    if stages.SAMPLE_ABSENT:
        _pytest_tiny.skip(stages.SAMPLE_ABSENT)
    return stages.SAMPLE


@_pytest_tiny.fixture(scope="session")
def coco_image(coco_sample):
    """First sorted image of the shared COCO val2017 sample as H x W x 3 uint8 (skip if absent)."""
    import numpy as np
    from PIL import Image

    files = sorted((coco_sample / "val2017").glob("*.jpg"))
    if not files:
        _pytest_tiny.skip(f"no COCO sample images in {coco_sample / 'val2017'}")
    with Image.open(files[0]) as im:
        return np.asarray(im.convert("RGB"), dtype=np.uint8)


# --- frozen run records (murk.core.freeze_run): never written into the project's data/ ---
@_pytest_tiny.fixture(scope="session", autouse=True)
def _frozen_records_in_tmp(tmp_path_factory):
    """Point MURK_FROZEN_DIR at a session temporary folder (subprocesses inherit it)."""
    mp = _pytest_tiny.MonkeyPatch()
    mp.setenv("MURK_FROZEN_DIR", str(tmp_path_factory.mktemp("frozen")))
    yield
    mp.undo()


# --- the analyse notebook and the paper on two cubes (tests/scenarios/: test_notebook_analyse.py, test_pipeline.py) ---
@_pytest_tiny.fixture(scope="session")
def synthetic_paper(tmp_path_factory, request):
    """A synthetic root (tests/synthetic.py: a collapse, a confidence lag, a wording effect) analysed by the
    two analysis notebooks (04_analyse, 05_beyond) through papermill, and its paper rendered: (root, render_paper's result); built once per
    session for all workers (two modules read it), read only."""
    import json

    def build(folder):
        import stages
        import synthetic

        from murk import report

        root = synthetic.write_root(folder / "out")
        # the models as JSON text, as `papermill -p models '[...]'` passes them (issue 20): parsed, not iterated
        stages.run("04_analyse", root, models=json.dumps(synthetic.MODELS))
        stages.run("05_beyond", root)   # the analysis beyond the spec, from the study's cube
        return root, report.render_paper(output_dir=root, pdf=True)

    return _once_for_all_workers(request, tmp_path_factory, "synthetic", build)


@_pytest_tiny.fixture(scope="session")
def synthetic_subset(tmp_path_factory):
    """Model a of the synthetic design read out on the first ``N_SUBSET`` of its images only, the monitor on all
    (tests/synthetic.py ``SUBSET``), analysed through papermill (no paper): its root."""
    import json

    import stages
    import synthetic

    root = synthetic.write_root(tmp_path_factory.mktemp("synthetic_subset") / "out", **synthetic.SUBSET)
    # the figures as PNGs only (the run setting figure_pdf): the synthetic paper's root writes the PDFs too
    stages.run("04_analyse", root, models=json.dumps(synthetic.SUBSET["models"]), figure_pdf=False)
    stages.run("05_beyond", root, figure_pdf=False)   # the analysis beyond the spec, from the study's cube
    return root


@_pytest_tiny.fixture(scope="session")
def synthetic_bare(tmp_path_factory):
    """The synthetic design without the sections that need more than the read-outs (tests/synthetic.py ``BARE``:
    no nominal equivalence, no verbal wordings, no parseable verbal confidence, no monitor; two models whose ids
    share their last part, the first named with markup: synthetic.HOSTILE_FOLDER), analysed through papermill and its
    paper rendered (HTML and PDF): (root, render_paper's result)."""
    import stages
    import synthetic

    from murk import report

    root = synthetic.write_root(tmp_path_factory.mktemp("synthetic_bare") / "out", **synthetic.BARE)
    stages.run("04_analyse", root, models=synthetic.BARE["models"], figure_pdf=False)
    stages.run("05_beyond", root, figure_pdf=False)   # the analysis beyond the spec, from the study's cube
    return root, report.render_paper(output_dir=root, pdf=True)


@_pytest_tiny.fixture(scope="session")
def demo(tmp_path_factory, request):
    """The offline demo, study-shaped (Snakemake; four items; three tiny checkpoints, two of them on the first
    three and the first two items, set in a configfile: tests/stages.py DEMO_MODELS; accuracy at chance) into a
    temporary root, run once per session: under pytest-xdist the first worker that asks runs it into the
    session's shared temporary folder and the others wait for it (a file lock), so tests that only read the
    root go to any worker; a test that changes the root changes a copy (``stages.copy_root``)."""
    import stages

    if stages.SAMPLE_ABSENT:
        _pytest_tiny.skip(stages.SAMPLE_ABSENT)

    def build(out):
        r = stages.snakemake_demo(out)
        # what the terminal showed (Snakemake's stdout, then its stderr): tests/scenarios/test_terminal.py reads it
        out.with_name(out.name + "-terminal.txt").write_text(r.stdout + r.stderr)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
        return out

    return _once_for_all_workers(request, tmp_path_factory, "demo", build)


# --- real-format checkpoints (murk.offline.build_realformat_checkpoint): issue 12 ---
@_pytest_tiny.fixture(scope="session")
def realformat_checkpoint_dirs(tmp_path_factory, request):
    """Folders of the five real-format checkpoints, built once per session for all workers: {family: Path}
    (read only).

    Skipped when ``shared/real-model-files`` is absent (they are built from it).
    """
    from murk.offline import REALFORMAT_MODELS, build_realformat_checkpoint, real_model_files_dir

    try:
        real_model_files_dir()
    except FileNotFoundError as err:
        _pytest_tiny.skip(str(err))
    return _once_for_all_workers(request, tmp_path_factory, "realformat_checkpoints", lambda root: {
        fam: build_realformat_checkpoint(fam, root / fam, seed=0) for fam in REALFORMAT_MODELS.values()})


@_pytest_tiny.fixture(scope="session")
def realformat_vlms(realformat_checkpoint_dirs):
    """The real-format checkpoints loaded with murk.readout.load_vlm (CPU, float32): {family: VLM}."""
    from murk.readout import load_vlm

    return {fam: load_vlm(str(d), device="cpu") for fam, d in realformat_checkpoint_dirs.items()}


# --- a real vLLM server (tests/_vllm.py; marker served, make test-served): issue 41 ---
@_pytest_tiny.fixture(scope="session")
def vllm_server(tiny_checkpoint_dirs, tmp_path_factory):
    """A vLLM server (tests/_vllm.py ``VllmServer``, started through ``python -m murk.readout.serve``) on the
    offline demo's Qwen3-VL checkpoint (``murk-tiny/qwen3vl``: ``tiny_checkpoint_dirs["qwen3vl"]``, seed 0),
    served as ``murk-tiny/qwen3vl``; stopped at the session's end. Skipped when the vLLM environment is absent
    (make vllm-env). A test that kills it (``.kill()``) starts it again (``.start()``) before it ends."""
    import _vllm
    from murk.readout.serve import VllmEnvError

    try:
        server = _vllm.VllmServer(tiny_checkpoint_dirs["qwen3vl"], "murk-tiny/qwen3vl",
                                  tmp_path_factory.mktemp("vllm"))
    except VllmEnvError as err:
        _pytest_tiny.skip(f"no vLLM server: {err}")
    server.start()
    yield server
    server.stop()


# --- parallel runs: `make test` runs pytest-xdist workers (`-n 3 --dist loadfile --no-loadscope-reorder`,
# pytest-xdist's documented options): each module on one worker (its module-scoped fixtures run once, its tests in
# their order), the modules handed out in the order of the collection, which the hook below sets; the demo runs once
# for all workers (``demo``)

#: the modules that take longest (`make test ARGS=--durations=0`, 2026-12-03, of the suite's 2300 s of test time:
#: about 290, 270, 200, 160, 110 and 75 s; since 2026-12-05, issue 39, test_stale_stores.py runs the stale-store,
#: re-saved-checkpoint and replaced-image tests on one root, the longest module): started first among those that
#: do not wait for the demo, so that the workers end together. A schedule hint only (what runs is unchanged); a
#: name missing here is ignored.
LONGEST_FIRST = ("test_stale_stores.py", "test_faults_snakemake.py", "test_scale.py", "test_notebook_analyse.py",
                 "test_readme.py", "test_settings_data.py", "test_workflow_runs.py")
#: the module whose worker runs the demo, of those that wait for it: the longest (about 240 s after the demo)
DEMO_FIRST = "test_demo_resume.py"


@_pytest_tiny.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """On a pytest-xdist worker (the scheduler hands out the modules in the collection's order:
    `--no-loadscope-reorder`), the modules in this order, each module's tests in theirs:

    1. of the modules with end-to-end (slow) tests whose first test needs the session's ``demo``,
       :data:`DEMO_FIRST` (else the first): its worker runs the demo (about 150 s) at once;
    2. the other modules with end-to-end tests whose first test does not need the demo, longest first
       (:data:`LONGEST_FIRST`): the other workers work meanwhile instead of waiting for the demo;
    3. the remaining modules with end-to-end tests (their first test waits for the demo, done by then);
    4. the unit tests and the library's doctests, which fill the ends;

    then a short module moved behind each long one it would otherwise queue behind (:func:`long_modules_apart`).
    Runs after `-m` and `-k` have deselected (``trylast``): the tests counted are those that run.
    """
    if not hasattr(config, "workerinput"):
        return
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    first = {}
    for item in items:
        first.setdefault(item.path, item)
    waits = {path for path, item in first.items() if "demo" in getattr(item, "fixturenames", ())}
    starters = [path for path in first if path in slow and path in waits]
    starter = next((p for p in starters if p.name == DEMO_FIRST), starters[0] if starters else None)

    def group(item):
        path = item.path
        if path not in slow:
            return (4, 0)
        if path == starter:
            return (1, 0)
        if path not in waits:
            rank = LONGEST_FIRST.index(path.name) if path.name in LONGEST_FIRST else len(LONGEST_FIRST)
            return (2, rank)
        return (3, 0)

    items.sort(key=group)  # stable: the collection's order within a group and a module
    counts = {}  # module (its test id: tests/..., lib/murk/... for doctests) -> tests
    for item in items:
        module = item.nodeid.split("::")[0]
        counts[module] = counts.get(module, 0) + 1
    workers = int(_os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    rank = {module: i for i, module in enumerate(long_modules_apart(list(counts.items()), workers))}
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])


#: the modules that run long (minutes): LONGEST_FIRST, DEMO_FIRST and the others that wait for the demo (checked
#: by tests/test_schedule.py)
LONG_MODULES = (*LONGEST_FIRST, DEMO_FIRST, "test_damaged_demo.py", "test_design_pipeline.py")


def long_modules_apart(modules, workers: int) -> list:
    """The order in which pytest-xdist's `--dist loadfile` should hand out ``modules`` so that a worker busy with a
    long module (:data:`LONG_MODULES`) is given a short module next, not the next long one.

    Parameters
    ----------
    modules : list of (str, int)
        Each module (its path as in the test ids) and its number of tests, in the order wanted otherwise.
    workers : int
        Number of pytest-xdist workers (``PYTEST_XDIST_WORKER_COUNT``).

    Returns
    -------
    list of str
        The modules, each once.

    Notes
    -----
    pytest-xdist hands a worker its next module as soon as two or fewer of its tests are left (a worker needs the
    test after the one it runs, to know which fixtures to tear down): a module with one or two long tests gets the
    next module in the queue queued behind it at once, where it waits minutes while other workers may be idle
    (2026-12-03: the last 2.5 minutes of `make test` ran on one or two of the three workers). A short module of more
    than two tests queued there costs nothing, and the worker asks again only when it is nearly done. The queue is
    handed out first one module to each worker, then one more to each worker (in the same order) with two or fewer
    tests, then to whichever worker nearly runs out; the order follows that, so two workers asking at once may still
    swap what they get. Until issue 40 (item 6) a scheduler of our own did this, a subclass of pytest-xdist's private
    ``LoadFileScheduling``; its documented `--dist loadgroup` would hand a long module and its filler out as one,
    but with pytest 9.2 and pytest-xdist 3.8 it groups nothing (it renames the test ids through ``item._nodeid``,
    which pytest 9 no longer reads: seen 2026-12-05).
    """
    counts = dict(modules)
    queue = [name for name, _ in modules]

    def long(name):
        return _os.path.basename(name) in LONG_MODULES

    fillers = [name for name in queue if not long(name) and counts[name] > 2]
    order, used = [], set()

    def take(name):
        order.append(name)
        used.add(name)
        if name in fillers:
            fillers.remove(name)

    def filler():
        return next((f for f in fillers if f not in used), None)

    def rest():
        return next((n for n in queue if n not in used), None)

    # one module to each worker, then one more to each worker that has two or fewer tests to run
    initial = queue[:workers]
    for name in initial:
        take(name)
    for name in initial:
        if counts[name] <= 2:
            nxt = filler() if long(name) else rest()
            if nxt is not None:
                take(nxt)
    # then in the queue's order, each long module of two or fewer tests followed by a filler
    while (name := rest()) is not None:
        take(name)
        if long(name) and counts[name] <= 2 and (f := filler()) is not None:
            take(f)
    return order
