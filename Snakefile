# murk: the stages chained. Each rule runs its notebook with papermill and keeps
# the executed notebook under <output_dir>/notebooks/ as the audit trail (a stage
# that fails writes nothing there: its executed notebook, with the error, is the
# rule's log under .snakemake/murk-notebooks/).
#   snakemake -n            show the plan
#   snakemake -c1           run (re-running skips finished work; a killed run resumes)
# profiles/default/config.yaml (Snakemake's workflow profile, used by every run) adds
# --rerun-incomplete, so the jobs a killed run left unfinished simply run again.
import json
import os
import shlex
import sys

from snakemake.exceptions import WorkflowError

from murk import workflow as murk_workflow
from murk.paths import model_slug

configfile: "data/workflow.yaml"

OUT = config["output_dir"]

# Resuming after a killed run (SIGKILL, power loss, OOM killer): Snakemake's lock is left
# behind; it is removed here when no run of this workflow is alive (murk.workflow.hold_run_lock),
# and kept (so Snakemake refuses a second concurrent run) when one is.
if workflow.is_main_process:
    for _lock in murk_workflow.hold_run_lock(os.path.join(os.getcwd(), ".snakemake")):
        print(f"murk: removed the stale Snakemake lock {_lock} of a killed run (no run is alive)", file=sys.stderr)
    # A read-out store's marker vouches for the store's content; a store deleted, changed or
    # damaged after its marker was written drops the marker, so its read-out runs again.
    for _marker, _why in murk_workflow.drop_stale_markers(os.path.join(OUT, "readout")):
        print(f"murk: {_why}: its read-out runs again", file=sys.stderr)
OFFLINE = os.environ.get("MURK_OFFLINE", "0").lower() in {"1", "true", "yes"}
# A model entry is an id, or {id: ..., n_items: N}: read out on the first N items only
# (murk.workflow.model_entries, the one parser; its refusals name the setting and the fix).
_MODELS_KEY = "offline_models" if OFFLINE else "models"
try:
    MODEL_ENTRIES = murk_workflow.model_entries(config.get(_MODELS_KEY), int(config["n_items"]),
                                                f"{_MODELS_KEY} (data/workflow.yaml, --configfile or --config)")
except ValueError as _e:
    raise WorkflowError(str(_e)) from None
MODELS = [e.id for e in MODEL_ENTRIES]
N_OF = {e.id: e.n_items for e in MODEL_ENTRIES}   # model -> its number of items
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


# one slug function for markers, stores, notebooks and numbers keys (murk.paths.model_slug)
SLUG2MODEL = {}
for _m in MODELS:
    _s = model_slug(_m)
    if _s in SLUG2MODEL:
        raise WorkflowError(f"models {SLUG2MODEL[_s]!r} and {_m!r} would share the read-out store "
                            f"readout/{_s}.zarr: give one of them another path or name")
    SLUG2MODEL[_s] = _m
NB = f"{OUT}/notebooks"
# Each rule's log: its notebook as papermill executes it, in Snakemake's scratch folder (one per
# output root). It is moved to NB, the audit trail the paper embeds from, only when the notebook ran
# to its end: a stage that fails or refuses leaves the output root exactly as it was, and its
# executed notebook (with the error) stays here, where Snakemake's error message points.
RUNNING = str(murk_workflow.running_notebooks_dir(OUT))
COCO = f"-p coco_dir {shlex.quote(COCO_DIR)}" if COCO_DIR else ""
RUN_NAME = f"-p run_name {config['run_name']}" if config.get("run_name") else ""
DEVICE = f"-p device {config['device']}" if config.get("device") else ""


def papermill(notebook, executed, params):
    """jupytext → papermill (papermill cannot read a .py notebook itself) into ``executed`` (the rule's
    log, under RUNNING); when it ran to its end, the executed notebook moves to NB."""
    return (f"jupytext --to ipynb {notebook} -o - "
            f"| papermill - {executed} --cwd {shlex.quote(os.getcwd())} -p output_dir {OUT} {params} "
            f"&& mkdir -p {NB} && mv {executed} {NB}/")


rule all:
    input:
        f"{OUT}/paper/index.html",


rule select:
    input:
        nb="notebooks/01_select.py",
        cfg=os.environ.get("MURK_CONFIG") or "data/config.yaml",
    # update(): Snakemake keeps these files while select runs and restores them when it fails
    # (a refused selection leaves the previous one in place instead of deleting it).
    output:
        item_table=update(f"{OUT}/items.json"),
        meta=update(f"{OUT}/items_meta.json"),
    log:
        f"{RUNNING}/01_select.ipynb",
    params:
        p=f"-p n_items {config['n_items']} -p seed {config['seed']} -p split {config['split']} {COCO} {RUN_NAME}",
    shell:
        papermill("{input.nb}", "{log}", "{params.p}")


rule depth:
    input:
        nb="notebooks/02_depth.py",
        item_table=rules.select.output.item_table,
    output:
        current=update(f"{OUT}/depth/current.json"),
        nominal=update(f"{OUT}/analysis/nominal_equivalence.nc"),
        scene=update(f"{OUT}/figures/scene_levels.png"),
    log:
        f"{RUNNING}/02_depth.ipynb",
    params:
        p=f"-p backend {DEPTH_BACKEND} -p model {config['depth_model']}",
    shell:
        papermill("{input.nb}", "{log}", "{params.p}")


# The store itself is not a declared output: Snakemake deletes the outputs of a
# failed job, and the store must survive a killed job so the next run resumes. The
# declared output is a marker holding the store's content digest (murk.workflow).
MARK = "python -m murk.workflow mark {output}"
READOUT_PARAMS = dict(model=lambda wc: SLUG2MODEL[wc.slug], n=lambda wc: N_OF[SLUG2MODEL[wc.slug]], device=DEVICE, n_verbal=config.get("n_verbal_items", 0),
                      trust=bool(config.get("trust_remote_code", False)), pickle=bool(config.get("allow_pickle", False)))
READOUT_ARGS = ("-p model {params.model} -p max_items {params.n} {params.device} -p n_verbal_items {params.n_verbal}"
                " -p trust_remote_code {params.trust} -p allow_pickle {params.pickle} -p run_by snakemake")

# shard_size: null -> one read-out job per model; an integer -> one job per (model, shard),
# each writing its own store, merged by the analyse stage. Finished shards are never redone.
# A model on the first N items has ceil(N / shard_size) shards, each over its own items.
SHARD_SIZE = config.get("shard_size")


def readout_done(slug):
    if not SHARD_SIZE:
        return [f"{OUT}/readout/{slug}.done"]
    n_shards = -(-int(N_OF[SLUG2MODEL[slug]]) // int(SHARD_SIZE))
    return [f"{OUT}/readout/{slug}/s{SHARD_SIZE}-{k:04d}.done" for k in range(n_shards)]


wildcard_constraints:
    slug="[^/]+",
    shard="[0-9]+",


rule readout:
    input:
        nb="notebooks/03_readout.py",
        item_table=rules.select.output.item_table,
        depth=rules.depth.output.current,
    output:
        f"{OUT}/readout/{{slug}}.done",
    log:
        f"{RUNNING}/03_readout-{{slug}}.ipynb",
    params:
        **READOUT_PARAMS,
    resources:
        gpu=1,
    shell:
        papermill("{input.nb}", "{log}", READOUT_ARGS) + " && " + MARK


rule readout_shard:
    input:
        nb="notebooks/03_readout.py",
        item_table=rules.select.output.item_table,
        depth=rules.depth.output.current,
    output:
        f"{OUT}/readout/{{slug}}/s{{size}}-{{shard}}.done",
    log:
        f"{RUNNING}/03_readout-{{slug}}-s{{size}}-{{shard}}.ipynb",
    params:
        **READOUT_PARAMS,
        shard=lambda wc: int(wc.shard),
    resources:
        gpu=1,
    shell:
        papermill("{input.nb}", "{log}", READOUT_ARGS + " -p shard {params.shard} -p shard_size {wildcards.size}") \
            + " && " + MARK


rule monitor:
    input:
        nb="notebooks/03b_monitor.py",
        item_table=rules.select.output.item_table,
        depth=rules.depth.output.current,
    output:
        f"{OUT}/readout/murk--visibility-monitor.done",
    log:
        f"{RUNNING}/03b_monitor.ipynb",
    shell:
        papermill("{input.nb}", "{log}", "") + " && " + MARK


rule analyse:
    input:
        nb="notebooks/04_analyse.py",
        done=[f for slug in SLUG2MODEL for f in readout_done(slug)],
        monitor=rules.monitor.output,
    output:
        numbers=f"{OUT}/paper_numbers.json",
        figures=expand(f"{OUT}/figures/{{name}}_{{task}}.{{ext}}",
                       name=["accuracy", "confidence", "verbal", "abstain", "reliability", "abstain2",
                             "blind_spot", "signals"], task=["t2", "t3"], ext=["png", "pdf"])
        + expand(f"{OUT}/figures/{{name}}.{{ext}}", name=["nominal_t2", "examples_t2", "monitor_vhat"],
                 ext=["png", "pdf"]),
        scores=f"{OUT}/analysis/scores.nc",
        tables=expand(f"{OUT}/analysis/{{t}}.md", t=["tbl-crossings", "tbl-end-of-sweep", "tbl-sweep-t2",
                                                     "tbl-sweep-t3", "tbl-auroc", "tbl-monotonicity",
                                                     "tbl-confident", "tbl-models", "tbl-prompts", "tbl-config",
                                                     "tbl-verbal-wordings", "tbl-monitor-accuracy",
                                                     "tbl-monitor-w", "tbl-monitor-gate", "tbl-missing",
                                                     "tbl-nominal"]),
        cube=directory(f"{OUT}/cube.zarr"),
    log:
        f"{RUNNING}/04_analyse.ipynb",
    params:
        models=json.dumps([{"id": e.id, "n_items": e.n_items} for e in MODEL_ENTRIES]),
        shard=f"-p shard_size {SHARD_SIZE}" if SHARD_SIZE else "",
    shell:
        papermill("{input.nb}", "{log}", "-y 'models: {params.models}' {params.shard}")


# The paper embeds its figures and tables from the executed notebooks (the logs of
# the depth and analyse rules, under {OUT}/notebooks/); the numbers file, the last
# thing the analyse notebook writes, stands for them.
rule paper:
    input:
        qmd="paper/index.qmd",
        bib="paper/references.bib",
        css="paper/paper.css",
        numbers=rules.analyse.output.numbers,
        depth=rules.depth.output.current,
    output:
        html=f"{OUT}/paper/index.html",
    shell:
        "python -m murk.paper --output-dir {OUT}"
