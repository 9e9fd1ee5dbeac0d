"""End to end: the real pipeline (Snakemake + papermill), offline, on real COCO scenes.

Runs every stage on the shared val2017 sample with murk's tiny checkpoints into a
temporary output root (a pipeline check), then checks the products, that a
second run does nothing, and that an interrupted read-out resumes.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from murk import cube, paper, paths

ROOT = paths.project_root()
SAMPLE = ROOT.parent / "shared" / "coco-val2017-sample"
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not SAMPLE.is_dir(), reason="../shared/coco-val2017-sample not present")]


def snakemake(out: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "MURK_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "MURK_COCO_DIR": str(SAMPLE),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "MPLBACKEND": "Agg"}
    cmd = [sys.executable, "-m", "snakemake", "--cores", "1", "--config", f"output_dir={out}", "n_items=3", "run_name=e2e-test", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    r = snakemake(out)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    return out


def test_products(demo):
    ds = xr.open_zarr(demo / "cube.zarr")
    assert ds["value"].dims == cube.DIMS
    assert ds["visibility_m"].attrs["units"] == "m"
    assert ds.sizes["image"] == 3 and ds.sizes["model"] == 3  # two tiny VLMs and the visibility monitor
    assert list(ds["kind"].values) == ["vlm", "vlm", "monitor"]
    vhat = ds["value"].sel(model="murk/visibility-monitor", arm="fog", task="t2", readout="visibility_hat_m")
    assert bool((vhat.isel(level=slice(1, None)) > 0).all())
    assert ds.attrs["pipeline_check"] == 1
    assert ds.attrs["depth_backend"].startswith("constant")
    v = ds["value"].load()
    # every condition that exists was read out; probabilities are probabilities
    for arm, lvl in cube.CONDITIONS:
        arm = "fog" if arm == "clean" else arm
        cell = v.sel(model=["murk-tiny/smolvlm", "murk-tiny/qwen3vl"], arm=arm, level=lvl,
                     readout=["answer", "correct", "c_int", "abstain", "abstain2", "option_mass"])
        assert cell.notnull().all(), (arm, lvl)
    c = v.sel(model=["murk-tiny/smolvlm", "murk-tiny/qwen3vl"], readout="c_int")
    assert float(c.min()) >= 0.25 - 1e-6 and float(c.max()) <= 1 + 1e-6
    numbers = json.loads((demo / "paper_numbers.json").read_text())
    assert numbers["n_items"] == "3" and "Pipeline check" in numbers["pipeline_check_note"]
    assert len(list((demo / "figures").glob("*.png"))) >= 2
    html = (demo / "paper" / "index.html").read_text(encoding="utf-8")
    assert "Pipeline check" in html and "`{python}" not in html
    assert "not computed in this run" not in html  # the demo computes everything the paper cites
    cited = set(paper.INLINE_RE.findall((ROOT / "paper" / "index.qmd").read_text(encoding="utf-8")))
    import html as html_lib

    import re

    squash = lambda t: re.sub(r"\s+", " ", t)  # noqa: E731
    text = squash(html_lib.unescape(re.sub(r"<[^>]+>", "", html)))
    lost = [k for k in cited if squash(re.sub(r"[`*]", "", numbers[k])) not in text]
    assert lost == [], f"cited numbers missing from the HTML: {lost}"
    for nb in ("01_select", "02_depth", "03_readout-murk-tiny--smolvlm", "03_readout-murk-tiny--qwen3vl", "04_analyse"):
        assert (demo / "notebooks" / f"{nb}.ipynb").is_file(), nb


def test_second_run_does_nothing(demo):
    r = snakemake(demo, "--dry-run")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Nothing to be done" in r.stdout + r.stderr


def test_interrupted_readout_resumes(demo):
    """A run killed during the read-out: finished images are kept, the rest is read out on the next run."""
    import shutil

    store = paths.readout_store("murk-tiny/smolvlm", demo)
    before = xr.open_zarr(store, consolidated=False).load()
    # the state a killed job leaves: image 1 not done, no .done flag, nothing downstream
    xr.Dataset({"done": ("image", np.zeros(1, bool))}).to_zarr(store, region={"image": slice(1, 2)}, consolidated=False)
    (demo / "readout" / "murk-tiny--smolvlm.done").unlink()
    shutil.rmtree(demo / "cube.zarr")
    for f in ("paper_numbers.json", "paper/index.html"):
        (demo / f).unlink()
    r = snakemake(demo)
    assert r.returncode == 0, r.stderr[-3000:]
    nb = (demo / "notebooks" / "03_readout-murk-tiny--smolvlm.ipynb").read_text()
    assert "1/1 [" in nb and "3/3 [" not in nb  # only the unfinished image was read out again
    after = xr.open_zarr(store, consolidated=False).load()
    assert bool(after["done"].all())
    # greedy decoding of a deterministic model: the re-read image gives the same numbers
    xr.testing.assert_identical(before["value"], after["value"])
    assert (demo / "paper" / "index.html").is_file()
