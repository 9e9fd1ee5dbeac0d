# murk: the stages chained. Each rule runs its notebook with papermill and keeps
# the executed notebook under <output_dir>/notebooks/ as the audit trail.
#   snakemake -n            show the plan
#   snakemake -c1           run (re-running skips finished work)
import os
import shlex

from snakemake.exceptions import WorkflowError

configfile: "data/workflow.yaml"

OUT = config["output_dir"]
OFFLINE = os.environ.get("MURK_OFFLINE", "0").lower() in {"1", "true", "yes"}
MODELS = config["offline_models"] if OFFLINE else config["models"]
# Mode-dependent settings are resolved here, so that they are params of the rules:
# switching MURK_OFFLINE or MURK_COCO_DIR re-runs the stages they affect.
COCO_DIR = config.get("coco_dir") or os.environ.get("MURK_COCO_DIR") or ""
if COCO_DIR and not os.path.isdir(COCO_DIR):
    raise WorkflowError(f"COCO folder {COCO_DIR!r} (MURK_COCO_DIR or coco_dir) is not a folder: point it at a "
                        f"folder in COCO's layout, e.g. ../shared/coco-val2017-sample")
COCO_DIR = os.path.abspath(COCO_DIR) if COCO_DIR else ""
DEPTH_BACKEND = config["depth_backend"]
if DEPTH_BACKEND == "auto":
    DEPTH_BACKEND = "constant" if OFFLINE else "depth-anything-v2"


def slug(model):
    import re
    return re.sub(r"[^A-Za-z0-9._-]+", "--", model).strip("-")


SLUG2MODEL = {slug(m): m for m in MODELS}
NB = f"{OUT}/notebooks"
COCO = f"-p coco_dir {shlex.quote(COCO_DIR)}" if COCO_DIR else ""
RUN_NAME = f"-p run_name {config['run_name']}" if config.get("run_name") else ""
DEVICE = f"-p device {config['device']}" if config.get("device") else ""


def papermill(notebook, executed, params):
    """jupytext → papermill: papermill cannot read a .py notebook itself."""
    return (f"mkdir -p {NB} && jupytext --to ipynb {notebook} -o - "
            f"| papermill - {executed} --cwd {shlex.quote(os.getcwd())} -p output_dir {OUT} {params}")


rule all:
    input:
        f"{OUT}/paper/index.html",


rule select:
    input:
        nb="notebooks/01_select.py",
        cfg="data/config.yaml",
    output:
        item_table=f"{OUT}/items.json",
        meta=f"{OUT}/items_meta.json",
    log:
        f"{NB}/01_select.ipynb",
    params:
        p=f"-p n_items {config['n_items']} -p seed {config['seed']} -p split {config['split']} {COCO} {RUN_NAME}",
    shell:
        papermill("{input.nb}", "{log}", "{params.p}")


rule depth:
    input:
        nb="notebooks/02_depth.py",
        item_table=rules.select.output.item_table,
    output:
        current=f"{OUT}/depth/current.json",
        nominal=f"{OUT}/analysis/nominal_equivalence.nc",
        table_vii=f"{OUT}/analysis/tbl-nominal.md",
        scene=f"{OUT}/figures/scene_levels.png",
    log:
        f"{NB}/02_depth.ipynb",
    params:
        p=f"-p backend {DEPTH_BACKEND} -p model {config['depth_model']}",
    shell:
        papermill("{input.nb}", "{log}", "{params.p}")


# The store itself is not a declared output: Snakemake deletes the outputs of a
# failed job, and the store must survive a killed job so the next run resumes.
rule readout:
    input:
        nb="notebooks/03_readout.py",
        item_table=rules.select.output.item_table,
        depth=rules.depth.output.current,
    output:
        touch(f"{OUT}/readout/{{slug}}.done"),
    log:
        f"{NB}/03_readout-{{slug}}.ipynb",
    params:
        model=lambda wc: SLUG2MODEL[wc.slug],
        device=DEVICE,
        n_verbal=config.get("n_verbal_items", 0),
    resources:
        gpu=1,
    shell:
        papermill("{input.nb}", "{log}", "-p model {params.model} {params.device} -p n_verbal_items {params.n_verbal}")


rule analyse:
    input:
        nb="notebooks/04_analyse.py",
        done=expand(f"{OUT}/readout/{{slug}}.done", slug=SLUG2MODEL),
    output:
        numbers=f"{OUT}/paper_numbers.json",
        figures=expand(f"{OUT}/figures/{{name}}_{{task}}.{{ext}}",
                       name=["accuracy", "confidence", "verbal", "abstain", "reliability", "abstain2",
                             "blind_spot"], task=["t2", "t3"], ext=["png", "pdf"])
        + expand(f"{OUT}/figures/{{name}}.{{ext}}", name=["nominal_t2", "examples_t2"], ext=["png", "pdf"]),
        scores=f"{OUT}/analysis/scores.nc",
        tables=expand(f"{OUT}/analysis/{{t}}.md", t=["tbl-crossings", "tbl-end-of-sweep", "tbl-sweep-t2",
                                                     "tbl-sweep-t3", "tbl-auroc", "tbl-monotonicity",
                                                     "tbl-confident", "tbl-models", "tbl-prompts", "tbl-config",
                                                     "tbl-verbal-wordings"]),
        cube=directory(f"{OUT}/cube.zarr"),
    log:
        f"{NB}/04_analyse.ipynb",
    params:
        models="[" + ", ".join(f'"{m}"' for m in MODELS) + "]",
    shell:
        papermill("{input.nb}", "{log}", "-y 'models: {params.models}'")


rule paper:
    input:
        qmd="paper/index.qmd",
        bib="paper/references.bib",
        numbers=rules.analyse.output.numbers,
        figures=rules.analyse.output.figures,
    output:
        html=f"{OUT}/paper/index.html",
    shell:
        "python -m murk.paper --output-dir {OUT}"
