"""End to end: the real pipeline (Snakemake + papermill), offline, on real COCO scenes.

Runs every stage on the shared val2017 sample with murk's tiny checkpoints into a
temporary output root (a pipeline check), then checks the products and that a
second run does nothing (an interrupted read-out resumes: tests/scenarios/test_damaged_demo.py, on a copy of this root).
"""

import html as html_lib
import json
import re

import numpy as np
import pytest
import xarray as xr

from murk import report
from murk import scene
from murk.core import _paths as paths
from murk.results import _cube as cube

import stages  # tests/stages.py: Snakemake and the stage notebooks

ROOT = paths.project_root()
pytestmark = [pytest.mark.slow, stages.needs_sample]


def _plain(text: str) -> str:
    """Text as a comparison sees it: no Markdown marks, straight quotes (pandoc makes them curly), one space."""
    text = re.sub(r"[`*]", "", text).translate(str.maketrans({"‘": "'", "’": "'", "“": '"', "”": '"'}))
    return re.sub(r"\s+", " ", text)


def _text(html: str) -> str:
    """The visible text of an HTML page, as :func:`_plain`."""
    return _plain(html_lib.unescape(re.sub(r"<[^>]+>", "", html)))


def test_products(demo):
    ds = xr.open_zarr(demo / "cube.zarr")
    assert ds["value"].dims == cube.DIMS
    assert ds["visibility_m"].attrs["units"] == "m"
    # three tiny VLMs (two on subsets: stages.DEMO_MODELS) and the visibility monitor, oracle and deployable
    assert ds.sizes["image"] == stages.DEMO_N_ITEMS and ds.sizes["model"] == 5
    assert list(ds["kind"].values) == ["vlm", "vlm", "vlm", "monitor", "monitor"]
    assert dict(zip(ds["model"].values, ds["n_items"].values.tolist())) == {
        **stages.DEMO_N, "murk/visibility-monitor": stages.DEMO_N_ITEMS,
        "murk/visibility-monitor-deployable": stages.DEMO_N_ITEMS}
    for mode in ("murk/visibility-monitor", "murk/visibility-monitor-deployable"):
        vhat = ds["value"].sel(model=mode, arm="fog", task="t2", readout="visibility_hat_m")
        assert bool((vhat.isel(level=slice(1, None)) > 0).all()), mode
    # the deployable mode estimated the arm of every physical rendering from the image (the oracle is told it)
    arm_hat = ds["value"].sel(model="murk/visibility-monitor-deployable", task="t2", readout="visibility_hat_arm")
    assert bool((arm_hat.sel(arm="fog").isel(level=slice(1, None)) == 0).all())
    assert bool((arm_hat.sel(arm="underwater").isel(level=slice(1, None)) == 1).all())
    assert ds.attrs["pipeline_check"] == 1
    assert ds.attrs["depth_backend"].startswith("constant")
    v = ds["value"].load()
    # every condition that exists was read out on a model's first n items, and none after them (not run);
    # probabilities are probabilities
    reason = ds["missing_reason"].load()
    for m, n in stages.DEMO_N.items():
        for arm, lvl in scene.CONDITIONS:
            arm = "fog" if arm == "clean" else arm
            cell = v.sel(model=m, arm=arm, level=lvl,
                         readout=["answer", "correct", "c_int", "abstain", "abstain2", "option_mass"])
            assert cell.isel(image=slice(0, n)).notnull().all() and cell.isel(image=slice(n, None)).isnull().all()
        assert [str(r) for r in reason.sel(model=m).values] == [""] * n + [cube.NOT_RUN] * (stages.DEMO_N_ITEMS - n)
    c = v.sel(model=list(stages.DEMO_N), readout="c_int")
    assert float(c.min()) >= 0.25 - 1e-6 and float(c.max()) <= 1 + 1e-6
    numbers = json.loads((demo / "paper_numbers.json").read_text())
    assert numbers["n_items"] == str(stages.DEMO_N_ITEMS) and "Pipeline check" in numbers["pipeline_check_note"]
    assert len(list((demo / "figures").glob("*.png"))) >= 2
    html = (demo / "paper" / "index.html").read_text(encoding="utf-8")
    assert "Pipeline check" in html and "`{python}" not in html
    assert "not computed in this run" not in html  # the demo computes everything the paper cites
    cited = report.cited_keys((ROOT / "paper" / "index.qmd").read_text(encoding="utf-8"))
    text = _text(html)
    lost = [k for k in cited if _plain(numbers[k]) not in text]
    assert lost == [], f"cited numbers missing from the HTML: {lost}"
    for nb in ("01_select", "02_depth", *(f"03_readout-{paths.model_slug(m)}" for m in stages.DEMO_N), "04_analyse",
               "05_beyond"):
        assert (demo / "notebooks" / f"{nb}.ipynb").is_file(), nb
    # the paper's figures and tables are the executed notebooks' cell outputs, each linked to its notebook
    embedded = report.EMBED_RE.findall((ROOT / "paper" / "index.qmd").read_text(encoding="utf-8"))
    cells = {nb: report.notebook_cells(demo / "notebooks" / nb.rsplit("/", 1)[-1]) for nb, _ in embedded}
    for nb, label in embedded:
        assert label in cells[nb], (nb, label)
        assert f'id="{label}"' in html, label
        # the link below it opens the cell in the notebook's rendered view beside the paper (issue 23)
        view = nb.rsplit("/", 1)[-1].replace(".ipynb", ".html")
        assert f'href="{view}#{label}"' in html and (demo / "paper" / view).is_file(), (nb, label)
        assert f'id="{label}"' in (demo / "paper" / view).read_text(encoding="utf-8"), (nb, label)
    # the figure files carry the pipeline-check mark, and so do the notebook outputs the paper embeds
    import base64

    png = cells["../outputs/notebooks/04_analyse.ipynb"]["fig-accuracy-t2"]["outputs"][0]["data"]["image/png"]
    assert base64.b64decode(png) == (demo / "figures" / "accuracy_t2.png").read_bytes()


def test_demo_stores_are_a_few_files_and_record_their_cost(demo):
    """Each read-out store is zarr 3, sharded: one shard file per variable (the demo's images fit one shard), so
    its files do not grow with its images (the demo's models read out 4, 3 and 2 items); each VLM's read-out
    recorded its measured cost beside its store, which the next jobs' SLURM requests follow (murk.pipeline)."""
    import zarr

    from murk.pipeline import _slurm as slurm

    for m, n in stages.DEMO_N.items():
        store = paths.readout_store(m, demo)
        files = [f for f in store.rglob("*") if f.is_file()]
        assert not [f for f in files if f.name.startswith(".z")], "a zarr 2 store"
        arrays = [f.parent for f in files if f.name == "zarr.json" and f.parent != store]
        # each variable: its metadata and at most one shard file (none where every value is the fill, e.g. the
        # verbal wordings' texts of items not asked them); the group's metadata
        per_array = {a.name: sum(1 for f in a.rglob("*") if f.is_file()) for a in arrays}
        assert len(arrays) == 16 and set(per_array.values()) <= {1, 2} and per_array["value"] == 2, per_array
        assert len(files) == 1 + sum(per_array.values()) <= 33, len(files)
        assert zarr.open_array(store / "value", mode="r").shards[3] == n
        cost = json.loads(slurm.cost_file(store).read_text())
        assert cost["images"] == n and cost["units"] == 24 * n and cost["device"] == "cpu", cost
        assert cost["s_per_image"] > 0 and cost["peak_host_bytes"] > 100 << 20, cost


def test_second_run_does_nothing(demo):
    r = stages.snakemake_demo(demo, "--dry-run")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Nothing to be done" in r.stdout + r.stderr


def test_figure_pdf_false_writes_pngs_and_true_re_runs_only_the_analyses(demo):
    """The demo ran with figure_pdf=false (tests/stages.py): each analysis figure as a PNG alone. Set true, the plan
    runs the two analysis notebooks (for the PDFs) and the paper again, no stage before them."""
    figs = paths.figures_dir(demo)
    for stage in ("04_analyse", "05_beyond"):
        for name in report.analysis_figures(stage):
            assert (figs / f"{name}.png").is_file() and not (figs / f"{name}.pdf").exists(), name
    r = stages.snakemake_demo(demo, "--dry-run", figure_pdf=True)
    assert r.returncode == 0, r.stderr[-3000:]
    planned = set(re.findall(r"^(?:local)?rule (\w+):", r.stdout + r.stderr, re.M))
    assert planned - {"all"} == {"analyse", "beyond", "paper"}, (r.stdout + r.stderr)[-3000:]


#: phrases the generated sentences use to state a finding, and to say that the cube does not show it
STATES = {"collapse": "collapses to chance for", "lag": "within the sweep, so it lags accuracy",
          "wording": "there the abstention depends on the wording", "plateau": "lie above the failure band"}
DENIES = {"collapse": "so there is no collapse to place on the axis (not observed)",
          "lag": "No lag of the internal confidence (t2) can be stated",
          "wording": "no wording effect is observed", "plateau": "cannot be said"}


def _claims_follow_the_cube(name: str, numbers: dict, html: str) -> None:
    """What both papers of :func:`test_generated_claims_follow_the_synthetic_cube` and
    :func:`test_generated_claims_follow_the_demo_cube` must hold: every generated sentence reaches the paper,
    headings are neutral, and a finding is stated exactly where its cube shows it (the synthetic cube)."""
    text = _text(html)
    # every generated sentence reaches its paper
    for key in [k for k in numbers if k.startswith("finding.")]:
        assert _plain(numbers[key]).split(" (")[0] in text, (name, key)
    # headings are neutral
    for h in re.findall(r"<h[1-6][^>]*>(.*?)</h[1-6]>", html, flags=re.S):
        assert not any(w in _text(h).lower() for w in ("collapse", "lag", "depend", "plateau", "floor")), h
    # no sentence states what the cube contradicts
    for finding, phrase in STATES.items():
        cube_says = name == "synthetic"
        assert (_plain(phrase) in text) == cube_says, (name, finding)


#: the finding sentences each verdict speaks in
FINDINGS = (("collapse", "finding.rq1.fog.t2"), ("lag", "finding.rq2.c_int.t2"),
            ("wording", "finding.rq3.wording.t2"), ("plateau", "finding.rq4.t2"))


def test_generated_claims_follow_the_synthetic_cube(synthetic_paper):
    """The same paper rendered from two cubes (this test and the next): a synthetic one with a collapse, a
    confidence lag, a wording effect and nominal severities on the plateau, and the demo cube at chance. The
    generated sentences differ accordingly (each states here what the next test's paper denies), and neither
    paper states a finding its cube contradicts, in a heading or a sentence."""
    import synthetic

    syn_root, syn_res = synthetic_paper
    syn = report.load_numbers(paths.numbers_file(syn_root))
    # the verdicts behind the sentences
    for m in synthetic.MODELS:
        k = paths.model_slug(m)
        assert syn[f"verdict.rq1.fog.t2.{k}"] == "collapse" and syn[f"verdict.rq2.c_int.fog.t2.{k}"] == "lags"
        assert syn[f"verdict.rq3.wording.fog.t2.{k}"] == "above" and syn[f"verdict.rq4.t2.{k}"] == "plateau"
    # the sentences: stated here, denied in the demo's paper (so the two papers' sentences differ)
    for finding, key in FINDINGS:
        assert STATES[finding] in syn[key] and DENIES[finding] not in syn[key], (finding, syn[key])
    _claims_follow_the_cube("synthetic", syn, syn_res["html"].read_text("utf-8"))


def test_generated_claims_follow_the_demo_cube(demo):
    """The demo's half of :func:`test_generated_claims_follow_the_synthetic_cube`: its tiny checkpoints at
    chance give no skill, no defined lag and no collapse, and every finding is denied."""
    demo_n = report.load_numbers(paths.numbers_file(demo))
    for m in stages.DEMO_N:
        k = paths.model_slug(m)
        assert demo_n[f"verdict.rq1.fog.t2.{k}"] == "no skill"
        assert demo_n[f"verdict.rq2.c_int.fog.t2.{k}"].startswith("undefined")
        assert demo_n[f"verdict.rq4.t2.{k}"] == "no collapse"
    # the sentences: denied here, stated in the synthetic paper (so the two papers' sentences differ)
    for finding, key in FINDINGS:
        assert STATES[finding] not in demo_n[key] and DENIES[finding] in demo_n[key], (finding, demo_n[key])
    _claims_follow_the_cube("demo", demo_n, (demo / "paper" / "index.html").read_text("utf-8"))
    # the demo's controls are stated with their condition (at, above or below chance), never as an assumption
    assert "chance" in demo_n["finding.controls.blank.t2"] and "(" in demo_n["finding.controls.blank.t2"]


def _table_rows(root, name: str) -> list[dict]:
    """The rows of analysis/tbl-<name>.md (a pipe table) as dicts, Markdown marks removed."""
    lines = [ln for ln in (root / "analysis" / f"tbl-{name}.md").read_text(encoding="utf-8").splitlines()
             if ln.startswith("|")]
    cells = [[c.strip().replace("`", "") for c in ln.strip("|").split("|")] for ln in lines]
    return [dict(zip(cells[0], row)) for row in cells[2:]]


def test_models_on_subsets_of_the_items(demo):
    """The study's design on the demo (issue 20): three models, two on subsets of different sizes, set in the run
    settings. The models table and Methods give each n; no not-run image is listed as bad input; a subset model's
    estimates equal those of its own images analysed alone."""
    from murk.core import _config as config
    from murk.results import _analysis as analysis

    numbers = report.load_numbers(paths.numbers_file(demo))
    rows = {r["model"].removesuffix(" †"): r for r in _table_rows(demo, "models")}
    assert {m: int(rows[m]["items (n)"]) for m in stages.DEMO_N} == stages.DEMO_N
    for m, n in stages.DEMO_N.items():
        assert numbers[f"n_items.{paths.model_slug(m)}"] == str(n)
        # the Snakefile gave each read-out its item count
        nb = json.loads((demo / "notebooks" / f"03_readout-{paths.model_slug(m)}.ipynb").read_text(encoding="utf-8"))
        assert nb["metadata"]["papermill"]["parameters"]["max_items"] == n
    html = (demo / "paper" / "index.html").read_text(encoding="utf-8")
    methods = _plain(numbers["methods.n_items_per_model"])
    assert methods in _text(html)
    assert f"all {stages.DEMO_N_ITEMS} for smolvlm" in methods and "3 for qwen3vl" in methods and "2 for gemma" in methods
    # not-run images are not bad input: neither in the colophon's table nor in its count
    assert numbers["n_missing_items"] == "0"
    assert cube.NOT_RUN not in (demo / "analysis" / "tbl-missing.md").read_text(encoding="utf-8")
    assert [r["reason"] for r in _table_rows(demo, "missing")] == ["none: every item was read out"]
    # the subset models' scores equal those of their stores analysed alone (the notebook's settings)
    A = config.load_config()["analysis"]
    sc = xr.open_dataset(demo / "analysis" / "scores.nc").load()
    for m in ("murk-tiny/qwen3vl", "murk-tiny/gemma"):
        alone = cube.merge_models({m: paths.readout_store(m, demo)}, demo.parent / f"alone-{paths.model_slug(m)}.zarr")
        assert alone.sizes["image"] == stages.DEMO_N[m]
        ref = analysis.analyse(alone, A["bootstrap_resamples"], A["bootstrap_resamples_crossing"], A["bootstrap_seed"],
                               A["ci_level"], A["chance"])["scores"]
        for var in ("mean", "n", "v_cross_m", "w", "ece", "auroc", "coverage", "risk", "confident_accuracy"):
            got = sc[var].sel(model=[m]).values
            assert got.shape == ref[var].values.shape, var
            np.testing.assert_allclose(got, ref[var].values, rtol=1e-12, atol=1e-14, err_msg=f"{m} {var}")
        assert int(sc["n"].sel(model=m, arm="fog", level=0, task="t2", readout="correct")) == stages.DEMO_N[m]
    stages.check_recalibration_over_own_images(demo, numbers, stages.DEMO_N, A)
