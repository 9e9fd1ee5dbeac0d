

# --- tiny offline checkpoints (murk.checkpoints) and a COCO image: readout tests ---
import pytest as _pytest_tiny


@_pytest_tiny.fixture(scope="session")
def tiny_checkpoint_dirs(tmp_path_factory):
    """Folders of the tiny checkpoints, built once per session: {arch: Path}."""
    from murk.checkpoints import TINY_MODELS, build_tiny_checkpoint

    root = tmp_path_factory.mktemp("tiny_checkpoints")
    return {arch: build_tiny_checkpoint(arch, root / arch, seed=0) for arch in TINY_MODELS.values()}


@_pytest_tiny.fixture(scope="session")
def tiny_vlms(tiny_checkpoint_dirs):
    """Tiny VLMs loaded with murk.readout.load_vlm from their local folders: {arch: VLM}."""
    from murk.readout import load_vlm

    return {arch: load_vlm(str(d), device="cpu") for arch, d in tiny_checkpoint_dirs.items()}


@_pytest_tiny.fixture(scope="session")
def coco_image():
    """First sorted image of the shared COCO val2017 sample as H x W x 3 uint8 (skip if absent)."""
    import numpy as np
    from PIL import Image

    from murk import paths

    folder = paths.project_root().parent / "shared" / "coco-val2017-sample" / "val2017"
    files = sorted(folder.glob("*.jpg")) if folder.is_dir() else []
    if not files:
        _pytest_tiny.skip(f"no COCO sample images in {folder}")
    with Image.open(files[0]) as im:
        return np.asarray(im.convert("RGB"), dtype=np.uint8)


# --- frozen run records (murk.config.freeze_run): never written into the project's data/ ---
@_pytest_tiny.fixture(scope="session", autouse=True)
def _frozen_records_in_tmp(tmp_path_factory):
    """Point MURK_FROZEN_DIR at a session temporary folder (subprocesses inherit it)."""
    mp = _pytest_tiny.MonkeyPatch()
    mp.setenv("MURK_FROZEN_DIR", str(tmp_path_factory.mktemp("frozen")))
    yield
    mp.undo()


# --- the analyse notebook and the paper on two cubes (tests/test_notebook_analyse.py, tests/test_pipeline.py) ---
@_pytest_tiny.fixture(scope="session")
def synthetic_paper(tmp_path_factory):
    """A synthetic root (tests/synthetic.py: a collapse, a confidence lag, a wording effect) analysed by the
    analyse notebook through papermill, and its paper rendered: (root, render_paper's result)."""
    import stages
    import synthetic

    from murk import paper

    import json

    root = synthetic.write_root(tmp_path_factory.mktemp("synthetic") / "out")
    # the models as JSON text, as `papermill -p models '[...]'` passes them (issue 20): parsed, not iterated over
    stages.run("04_analyse", root, models=json.dumps(synthetic.MODELS))
    return root, paper.render_paper(output_dir=root, pdf=True)


@_pytest_tiny.fixture(scope="session")
def synthetic_bare(tmp_path_factory):
    """The synthetic design without the sections that need more than the read-outs (tests/synthetic.py ``BARE``:
    no nominal equivalence, no verbal wordings, no parseable verbal confidence, no monitor; two models whose ids
    share their last part), analysed through papermill and its paper rendered (HTML): (root, render_paper's result)."""
    import stages
    import synthetic

    from murk import paper

    root = synthetic.write_root(tmp_path_factory.mktemp("synthetic_bare") / "out", **synthetic.BARE)
    stages.run("04_analyse", root, models=synthetic.BARE["models"])
    return root, paper.render_paper(output_dir=root, pdf=False)


@_pytest_tiny.fixture(scope="session")
def demo(tmp_path_factory):
    """The offline demo, study-shaped (Snakemake; four items; three tiny checkpoints, two of them on the first
    three and the first two items, set in a configfile: tests/stages.py DEMO_MODELS; accuracy at chance) into a
    temporary root."""
    import stages

    if not stages.SAMPLE.is_dir():
        _pytest_tiny.skip("../shared/coco-val2017-sample not present")
    out = tmp_path_factory.mktemp("demo")
    r = stages.snakemake_demo(out)
    # what the terminal showed (Snakemake's stdout, then its stderr): tests/test_terminal.py reads it
    out.with_name(out.name + "-terminal.txt").write_text(r.stdout + r.stderr)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    return out


# --- real-format checkpoints (murk.checkpoints.build_realformat_checkpoint): issue 12 ---
@_pytest_tiny.fixture(scope="session")
def realformat_checkpoint_dirs(tmp_path_factory):
    """Folders of the five real-format checkpoints, built once per session: {family: Path}.

    Skipped when ``shared/real-model-files`` is absent (they are built from it).
    """
    from murk.checkpoints import REALFORMAT_MODELS, build_realformat_checkpoint, real_model_files_dir

    try:
        real_model_files_dir()
    except FileNotFoundError as err:
        _pytest_tiny.skip(str(err))
    root = tmp_path_factory.mktemp("realformat_checkpoints")
    return {fam: build_realformat_checkpoint(fam, root / fam, seed=0) for fam in REALFORMAT_MODELS.values()}


@_pytest_tiny.fixture(scope="session")
def realformat_vlms(realformat_checkpoint_dirs):
    """The real-format checkpoints loaded with murk.readout.load_vlm (CPU, float32): {family: VLM}."""
    from murk.readout import load_vlm

    return {fam: load_vlm(str(d), device="cpu") for fam, d in realformat_checkpoint_dirs.items()}

