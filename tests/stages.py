"""Run the stage notebooks as users and Snakemake do: jupytext → papermill, into an output root.

The stages live in ``notebooks/*.py`` (jupytext percent); tests run them through
papermill (a real kernel, the notebook's own parameters cell), never through
a library shortcut.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from murk.core import _paths as paths

ROOT = paths.project_root()
BIN = Path(sys.executable).parent


#: Debian's Chromium and its driver (apt-get install chromium chromium-driver; .ci/run installs them)
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")


def browser():
    """Headless Chromium driven by selenium (shared/notes/real-tools.md: Debian's chromium + chromium-driver);
    the test is skipped where either is not installed."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed: pip install -e '.[test]'")
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("Chromium is not installed: apt-get install chromium chromium-driver (.ci/run installs them)")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        opts.add_argument(a)
    return webdriver.Chrome(options=opts, service=Service(CHROMEDRIVER))


def executed_path(stage: str, output_dir: str | os.PathLike, suffix: str = "") -> Path:
    """Where the executed notebook goes: ``<output_dir>/notebooks/<stage><suffix>.ipynb``."""
    return Path(output_dir) / "notebooks" / f"{stage}{suffix}.ipynb"


def run(stage: str, output_dir: str | os.PathLike, suffix: str = "", **params) -> Path:
    """Execute ``notebooks/<stage>.py`` with papermill (parameters ``params``; None keeps the default), through
    murk's engine (:func:`murk.pipeline.register_engine`: the kernel manager and stream handling of the Snakefile's
    rules).

    Raises
    ------
    papermill.PapermillExecutionError
        A cell raised; its message carries the exception's name and text.
    """
    import jupytext
    import nbformat
    import papermill

    from murk.pipeline import execute

    out = executed_path(stage, output_dir, suffix)
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.with_suffix(".input.ipynb")
    nbformat.write(jupytext.read(ROOT / "notebooks" / f"{stage}.py"), src)
    params = {"output_dir": str(output_dir), **{k: v for k, v in params.items() if v is not None}}
    try:
        papermill.execute_notebook(str(src), str(out), parameters=params, cwd=str(ROOT), kernel_name="python3",
                                   progress_bar=False, engine_name=execute.register_engine())
    finally:
        src.unlink(missing_ok=True)
    return out


def command(stage: str, output_dir: str | os.PathLike, suffix: str = "", **params) -> list[str]:
    """The command of :func:`run`, for a subprocess (e.g. to kill it): papermill through ``murk.pipeline.execute``, as
    the Snakefile's rules run it (the .py notebook converted to a file beside the executed one, no pipe)."""
    out = executed_path(stage, output_dir, suffix)
    out.parent.mkdir(parents=True, exist_ok=True)
    args = [a for k, v in {"output_dir": output_dir, **params}.items() if v is not None for a in ("-p", k, str(v))]
    return [sys.executable, "-m", "murk.pipeline.execute", f"notebooks/{stage}.py", str(out), "--cwd", str(ROOT), *args]


def coco_sample() -> Path:
    """The shared COCO val2017 sample the tests read (37 items; the suite's one place that says where it is):
    ``$MURK_COCO_DIR`` where set (``.ci/run`` sets it), unless that holds a full val2017 split (over 1000 images:
    ``tests/test_items.py`` reads that one apart), else the sample next to the project
    (:func:`murk.core.sample_coco_dir`, ``../shared/coco-val2017-sample``)."""
    from murk.core import sample_coco_dir

    given = os.environ.get("MURK_COCO_DIR")
    if given:
        images = Path(given) / "val2017"
        if not images.is_dir() or sum(1 for _ in zip(range(1001), images.iterdir())) <= 1000:
            return Path(given).resolve()
    return sample_coco_dir()


#: the COCO sample (:func:`coco_sample`); tests take it from the session fixture ``coco_sample``
#: (tests/conftest.py), module-level marks and helpers from here
SAMPLE = coco_sample()
#: why a test that needs the sample is skipped, or "" where it is there (its annotations and its images)
SAMPLE_ABSENT = ("" if (SAMPLE / "annotations" / "instances_val2017.json").is_file() and (SAMPLE / "val2017").is_dir()
                 else f"the COCO val2017 sample is not at {SAMPLE}: set MURK_COCO_DIR to it, or put it at "
                      f"../shared/coco-val2017-sample next to the project")


#: skip where the sample is absent (:data:`SAMPLE_ABSENT`): for modules (``pytestmark``) and tests that use
#: :data:`SAMPLE` outside their arguments
needs_sample = pytest.mark.skipif(bool(SAMPLE_ABSENT), reason=SAMPLE_ABSENT or "the COCO sample is there")


def snakemake(out: str | os.PathLike, *args: str, n_items: int = 3, run_name: str = "e2e-test",
              targets: tuple[str, ...] = (), figure_pdf: bool = False):
    """The real pipeline, offline on the shared COCO sample, into the output root ``out``; ``targets`` (rules or
    files, default the default target) go before the options, whose lists would take them as values. The analysis
    figures as PNGs only unless ``figure_pdf`` (the run setting; its default, true, is what ``make demo`` runs in
    tests/test_settings_data.py, and the PDFs' content tests/test_figures.py): about 3.6 s of CPU less a run."""
    import subprocess

    env = {**os.environ, "MURK_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "MURK_COCO_DIR": str(SAMPLE),
           "PATH": f"{BIN}:{os.environ['PATH']}", "MPLBACKEND": "Agg"}
    cmd = [sys.executable, "-m", "snakemake", *targets, "--cores", "1", "--config", f"output_dir={out}", f"n_items={n_items}",
           f"run_name={run_name}", f"figure_pdf={str(bool(figure_pdf)).lower()}", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)


#: the study-shaped demo of the session fixture ``demo`` (tests/conftest.py): three models, two of them on
#: subsets of different sizes (the spec runs two of its five models on the first 600 and 400 items), set in
#: the run settings as a configfile would (``murk.core.model_entries``)
DEMO_N_ITEMS = 4
DEMO_MODELS = [{"id": "murk-tiny/smolvlm"}, {"id": "murk-tiny/qwen3vl", "n_items": 3},
               {"id": "murk-tiny/gemma", "n_items": 2}]
#: model -> its number of items in the demo
DEMO_N = {m["id"]: m.get("n_items", DEMO_N_ITEMS) for m in DEMO_MODELS}


def demo_configfile(out: str | os.PathLike) -> Path:
    """Write the demo's run settings (``offline_models`` with item counts) beside the output root ``out``."""
    import yaml

    path = Path(out).with_name(Path(out).name + "-workflow.yaml")
    path.write_text(yaml.safe_dump({"offline_models": DEMO_MODELS}, sort_keys=False))
    return path


def snakemake_demo(out: str | os.PathLike, *args: str, targets: tuple[str, ...] = (), figure_pdf: bool = False):
    """:func:`snakemake` with the study-shaped demo's settings (:data:`DEMO_MODELS`, :data:`DEMO_N_ITEMS`)."""
    return snakemake(out, "--configfile", str(demo_configfile(out)), *args, n_items=DEMO_N_ITEMS, targets=targets,
                     figure_pdf=figure_pdf)


def copy_root(src: str | os.PathLike, dst: str | os.PathLike) -> Path:
    """A copy at ``dst`` of the finished output root ``src`` (the session's ``demo``), for a test that changes it.

    The files keep their modification times (``shutil.copytree``), so Snakemake, planning the copy by them,
    finds nothing to do (``.snakemake/metadata`` holds no record of the new path, and without one the params,
    code and input triggers do not fire: ``tests/scenarios/test_damaged_demo.py`` checks it on a copy of the demo);
    the run settings of :func:`snakemake_demo` are written beside the copy when it runs.
    """
    import shutil

    return Path(shutil.copytree(src, dst, symlinks=True))


def check_recalibration_over_own_images(root, numbers: dict, n_of: dict, A: dict) -> None:
    """Issue 39, on an analysed ``root`` whose models ``n_of`` ({model id: N}) were read out on the first N images:
    a subset model's recalibration halves are drawn from its own images, the finding states its own
    n, and its intervals resample only its own test images: ECE of the uncalibrated confidence recomputed here
    from its own test images and their draw (``bootstrap_counts(n_test, B, seed)``) is the one printed."""
    import re

    import numpy as np
    import xarray as xr

    from murk import report
    from murk.core import _paths as paths
    from murk.monitor import _evaluation
    from murk.readout import _item_readouts as unit
    from murk.results import _bootstrap
    from murk.results import _calibration
    from murk.results import _selective

    ds = xr.open_zarr(Path(root) / "cube.zarr").load()
    ids = ds["image"].values
    finding = numbers["finding.recal"]
    for m, n in n_of.items():
        k = paths.model_slug(m)
        test = ~_evaluation.split_images(ids[:n], seed=A["bootstrap_seed"])   # its own images: the first n
        assert numbers[f"recal.n_test_images.{k}"] == str(int(test.sum())), m
        assert numbers[f"recal.n_calibration_images.{k}"] == str(int((~test).sum())), m
        if not test.any():
            assert f"recalibration was not computed (none of its {n} images is in the test half)" in finding
            continue
        assert re.search(rf"On the {int(test.sum())} test images? of {re.escape(m.split('/')[-1])}\b", finding), m
        if numbers[f"recal.none.fog.t2.{k}.ece"] == "n/a":
            continue
        v = ds["value"].sel(model=m, arm="fog", task="t2").isel(image=np.flatnonzero(test))   # (level, image, readout)
        opts = [f"p_option_{j}" for j in range(unit.N_OPTION_READOUTS)]
        p = v.sel(readout=opts).transpose("level", "image", "readout").values
        ok = ~np.all(np.isnan(p), axis=-1)
        c = np.where(ok, np.nanmax(np.where(ok[..., None], p, 0.0), axis=-1), np.nan).ravel()
        y = v.sel(readout="correct").transpose("level", "image").values.ravel()
        draw = _bootstrap.bootstrap_counts(int(test.sum()), A["bootstrap_resamples_crossing"], A["bootstrap_seed"])
        cnt = draw[: A["bootstrap_resamples"], np.tile(np.arange(int(test.sum())), ds.sizes["level"])]
        lo, hi = _bootstrap.percentile_interval(_calibration.resampled_ece(np.clip(c, 0, 1), y, cnt), A["ci_level"])
        assert numbers[f"recal.none.fog.t2.{k}.ece"] == report.fmt(float(_calibration.expected_calibration_error(c, y)))
        assert numbers[f"recal.none.fog.t2.{k}.ece.ci"] == report.fmt_interval(float(lo), float(hi)), m
        lo, hi = _bootstrap.percentile_interval(_selective.resampled_auroc(np.clip(c, 0, 1), y, cnt), A["ci_level"])
        assert numbers[f"recal.none.fog.t2.{k}.auroc.ci"] in ("", report.fmt_interval(float(lo), float(hi))), m
#: the one warning the demo's executed notebooks show by design: murk's random-weight checkpoints put almost no
#: first-token mass on the option letters, which the read-out notebook says (notebooks/03_readout.py,
#: murk.readout.check_option_mass: "Random-weight pipeline checks always trip it: that is expected")
EXPECTED_WARNINGS = {"03_readout": ("LowOptionMassWarning",)}
#: a Python warning as a notebook's stderr shows it (``file.py:12: RuntimeWarning: …``), or a logged one
_WARNING = re.compile(r"\b(\w*Warning): |^WARNING\b|\bWARNING:", re.M)


def text_problems(text: str, allowed: tuple[str, ...] = ()) -> list[str]:
    """The errors and warnings in a cell's stderr or output text, less the ``allowed`` warning classes."""
    return [m.group(0) + text[m.end():m.end() + 160].split("\n")[0] for m in _WARNING.finditer(text)
            if m.group(1) not in allowed]


def notebook_problems(notebook: str | os.PathLike) -> list[str]:
    """Every error and warning an executed notebook shows (error outputs, warnings on stderr), each as
    ``<notebook> [<cell label or number>]: <text>``; the warnings of :data:`EXPECTED_WARNINGS` left out."""
    import json

    path = Path(notebook)
    allowed = next((w for stem, w in EXPECTED_WARNINGS.items() if path.stem.startswith(stem)), ())
    out = []
    for k, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        src = "".join(cell.get("source", ""))
        label = next((ln.split(":", 1)[1].strip() for ln in src.splitlines() if ln.startswith("#| label:")), f"cell {k}")
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                out.append(f"{path.name} [{label}]: {o.get('ename')}: {o.get('evalue', '')[:200]}")
            elif o.get("output_type") == "stream":
                out += [f"{path.name} [{label}]: {p}" for p in text_problems("".join(o.get("text", "")), allowed)]
    return out
