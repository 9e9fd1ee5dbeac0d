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
import sys

from snakemake.exceptions import WorkflowError

from murk import core as murk_core
from murk import pipeline as murk_pipeline
from murk import protocol as murk_protocol
from murk import report as murk_report
from murk.core import model_slug

configfile: "data/workflow.yaml"

# Offline or not (murk.core.resolve_offline): MURK_OFFLINE (or HF_HUB_OFFLINE) decides when set; else a short
# probe of the hub and COCO (3 s at most): without network the run is the offline demo, said in one line, and its
# jobs inherit MURK_OFFLINE=1.
OFFLINE, _OFFLINE_NOTE = murk_core.resolve_offline()
if OFFLINE:
    os.environ["MURK_OFFLINE"] = "1"
# The run settings are checked before anything runs, also in a dry run (murk.core.SCHEMA, the keys,
# types and ranges data/workflow.yaml documents): an unknown key, a wrong type or range, an empty model
# list or an output_dir that is a file is refused here, naming it as it was typed (--config n_items=abc).
try:
    _RUN = murk_core.check_run_settings(
        config, murk_core.setting_origins(list(config), workflow.config_settings.config,
                                              workflow.config_settings.configfiles), OFFLINE, os.getcwd())
except ValueError as _e:
    raise WorkflowError(str(_e)) from None
config.update(_RUN.settings)   # normalised: trust_remote_code=true is True, shard_size=null is None
# the COCO folder: coco_dir, else MURK_COCO_DIR, else (offline) the sample next to the project; offline without
# any, one line says what to set, before anything is written (murk.core.resolve_coco_dir)
try:
    COCO_DIR, _COCO_NOTE = murk_core.resolve_coco_dir(config.get("coco_dir"), offline=OFFLINE)
except ValueError as _e:
    raise WorkflowError(str(_e)) from None
# OUT: Snakemake's paths (relative to its working directory, as given); OUT_ABS: the same folder, absolute,
# given to the notebooks and murk.report.paper (murk.core.output_dir takes a relative path from the project root).
OUT, OUT_ABS = _RUN.output_dir, _RUN.output_root
if workflow.is_main_process:
    # why offline and where COCO comes from (when murk chose), the output root and the models (once, on stderr)
    murk_core.announce(_RUN._replace(notes=[n for n in (_OFFLINE_NOTE, _COCO_NOTE) if n] + list(_RUN.notes)))

# One run per output root (murk.pipeline): this run holds its root's lock for its lifetime; a second
# run on a root in use is refused, naming the live run. The Snakemake locks a killed run left behind
# (SIGKILL, power loss, OOM killer) are removed whatever runs on other roots are alive; a live run's
# are kept. A dry run (make plan) takes no lock and removes nothing; --unlock is refused while a run is alive.
if workflow.is_main_process:
    try:
        for _note in murk_pipeline.snakefile_run_lock(OUT, os.path.join(os.getcwd(), ".snakemake"),
                                                      dry_run=workflow.output_settings.dryrun, argv=sys.argv):
            print(f"murk: {_note}", file=sys.stderr)
    except murk_pipeline.RootInUse as _e:
        raise WorkflowError(str(_e)) from None
# A model entry is an id, or {id: ..., n_items: N}: read out on the first N items only
# (murk.core.model_entries, the one parser, applied by murk.core.check_run_settings above).
MODEL_ENTRIES = _RUN.model_entries
MODELS = [e.id for e in MODEL_ENTRIES]
N_OF = {e.id: e.n_items for e in MODEL_ENTRIES}   # model -> its number of items
# Mode-dependent settings are resolved here, so that they are params of the rules:
# switching MURK_OFFLINE or MURK_COCO_DIR re-runs the stages they affect.
# (COCO_DIR: resolved above, before the output root's lock)
DEPTH_BACKEND = config["depth_backend"]
if DEPTH_BACKEND == "auto":
    DEPTH_BACKEND = "constant" if OFFLINE else "depth-anything-v2"


# one slug function for markers, stores, notebooks and numbers keys (murk.core.model_slug)
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
RUNNING = str(murk_pipeline.running_notebooks_dir(OUT))
CWD = os.getcwd()


# Settings are data: no value of a setting, a parameter or a model folder is ever parsed by a shell. Each rule's
# command is a fixed template whose only fields are quoted by Snakemake (`{...:q}`: shlex.quote, each item of a list
# on its own): the files of the rule and `params.argv`, the stage's arguments as a list, one item per argument.
# Text reaches the notebook as papermill's raw text (-r: never read as a number, a boolean or None), numbers and
# booleans with -p, a mapping as JSON with -y (papermill reads it with YAML's safe loader).
def stage_argv(*args):
    """murk.pipeline.execute's arguments after NOTEBOOK and OUTPUT, as a list of str: the working folder, the output root
    and ``args``. An empty argument would vanish from the command (Snakemake's :q leaves empty text unquoted)."""
    argv = ["--cwd", CWD, "-r", "output_dir", OUT_ABS, *(str(a) for a in args)]
    empty = [argv[k - 1] for k, a in enumerate(argv) if a == ""]
    if empty:
        raise WorkflowError(f"murk: an empty value for {', '.join(empty)} cannot be passed to the stage: set it, "
                            f"or leave the setting null")
    return argv


def as_data(value):
    """``value`` as a rule's param that Snakemake passes on as it is: a param given as text (or a list of text) is
    read by Snakemake as a pattern of wildcards (``{name}``), a param given by a function is not."""
    return lambda wildcards: value


COCO = ["-r", "coco_dir", COCO_DIR] if COCO_DIR else []
RUN_NAME = ["-r", "run_name", config["run_name"]] if config.get("run_name") else []
DEVICE = ["-r", "device", config["device"]] if config.get("device") else []
# the design (murk.protocol): given to select, which records it in items_meta.json for every later stage
DESIGN = ["-y", json.dumps({"design": murk_protocol.design_from_settings(config)}, sort_keys=True)]
# another design's run compared with this one in the paper's diagnostics (its folder, absolute)
COMPARE = (["-r", "compare_with", os.path.abspath(os.path.expanduser(config["compare_with"]))]
           if config.get("compare_with") else [])
# the analysis figures' files: the PNG the paper embeds, and a vector PDF with figure_pdf (each notebook writes both
# or the PNG alone; a changed setting runs the analysis notebooks again, not the stages before them)
FIGURE_PDF = bool(config["figure_pdf"])


def figure_files(name):
    """The files of the figures ``name`` (an analysis notebook's: murk.report.analysis_figures), as the run settings
    ask."""
    return expand(f"{OUT}/figures/{{name}}.{{ext}}", name=name, ext=["png", "pdf"] if FIGURE_PDF else ["png"])

# papermill, through murk.pipeline.execute, into the rule's log (under RUNNING); when the notebook ran to its end, the
# executed notebook moves to NB. murk.pipeline.execute converts the .py notebook beside the log, draws the stage's progress
# bars on the terminal (murk.core) and, for a cell that raised, prints the error, the cell and the log's path.
STAGE = ("python -m murk.pipeline.execute {input.nb:q} {log:q} {params.argv:q} "
         "&& mkdir -p {params.done_dir:q} && mv {log:q} {params.done_dir:q}/")


# A failed job's update() outputs are restored by Snakemake with a new modification time, which would
# make the next run redo everything after them; their recorded times are put back on error
# (murk.pipeline.file_states, restore_times): a refusal changes nothing, its time stamps included.
_UPDATED = [f"{OUT}/{f}" for f in ("items.json", "items_meta.json", "depth/current.json",
                                    "analysis/nominal_equivalence.nc", "figures/scene_levels.png", "paper/index.html")]
_STATES = murk_pipeline.file_states(_UPDATED) if workflow.is_main_process else {}


_RECORDS = {}   # Snakemake's metadata of the update() outputs when the jobs start (murk.pipeline.metadata_records)


onerror:
    murk_pipeline.restore_times(_STATES)
    # a failed job's params are recorded by Snakemake too: put back the records of the outputs it left unchanged,
    # so that a refused or failed run does not make the next run (with the old settings) re-run the chain
    murk_pipeline.restore_metadata(workflow.persistence, _RECORDS, _STATES)


# On a SLURM cluster: say so at once when the executor may never see a job end (murk.pipeline.status_problem:
# sacct reads a cancelled job as running; squeue forgets finished jobs after the cluster's MinJobAge).
# Settings are data there too: the SLURM executor re-creates each job's command line from --config through a shell
# (murk.core.remote_job_problems), so a value it cannot carry literally is refused before the first submission.
# Before the first submission (murk.pipeline.driver_start): GPU jobs on a cluster without GPUs are refused; the
# live jobs of a killed earlier driver of this output root are cancelled (pending) or waited for (running).
onstart:
    _RECORDS.update(murk_pipeline.metadata_records(workflow.persistence, _UPDATED))
    if getattr(workflow.executor_plugin, "name", "").endswith("slurm"):
        _unsafe = murk_core.remote_job_problems(workflow.config_settings.config_args,
                                                    workflow.config_settings.configfiles)
        if _unsafe:
            raise WorkflowError("murk: refused before any job was submitted (nothing was written):\n"
                                + "\n".join(f"  - {p}" for p in _unsafe))
        _why = murk_pipeline.status_problem(getattr(workflow.executor_settings, "status_command", None),
                                         murk_pipeline.min_job_age())
        if _why:
            print(f"murk: WARNING {_why}", file=sys.stderr)
        try:
            murk_pipeline.driver_start(workflow, OUT, os.path.join(os.getcwd(), ".snakemake"))
        except ValueError as _e:
            raise WorkflowError(f"murk: {_e}") from None


# The default target: the paper, and the analysis notebooks' figure files (Snakemake runs a job again for a missing
# output only where something asks for it: a PDF missing after figure_pdf=true on a finished root, or a figure
# deleted, runs its notebook again)
rule all:
    input:
        f"{OUT}/paper/index.html",
        figure_files(name=murk_report.analysis_figures("04_analyse")),
        figure_files(name=murk_report.analysis_figures("05_beyond")),


# A selected image is identified by its content: select records each image file's digest
# (items_meta.json: image_sha256). A file whose content differs now (murk.core.changed_images,
# through the root's digest cache; a dry run writes nothing) forces select, as the stale read-out
# stores are forced (murk.pipeline.force_rerun): its new digest is recorded, the depth stage
# recomputes that image's map, each read-out store re-reads the images made from it (their recorded
# input_sha256 differs) and the cube and paper are made again.
_IMAGES_CHECKED = []


def rerun_if_images_changed(wildcards):
    """An input function (no inputs) of the select rule: forces it when a selected image file changed."""
    if not workflow.is_main_process or _IMAGES_CHECKED:
        return []
    _IMAGES_CHECKED.append(True)
    cache = murk_core.DigestCache(murk_core.cache_file(OUT))
    changed = murk_core.changed_images(OUT, cache)
    if not workflow.dryrun:
        cache.save()
    if not changed:
        return []
    items_json = f"{OUT}/items.json"
    if not murk_pipeline.force_rerun(workflow, items_json):  # a Snakemake whose DAG murk cannot force
        raise WorkflowError(f"murk: {changed[0]} changed since select recorded it; re-make what follows with "
                            f"make demo ARGS='--forcerun {items_json}' (snakemake --forcerun {items_json})")
    for f in changed:
        print(f"murk: {f} changed since select recorded it: its depth map and read-outs "
              f"{'would run' if workflow.dryrun else 'run'} again, and the cube and paper after them", file=sys.stderr)
    return []


# The configuration is identified by its content too: items_meta.json records the config hash select used. Another
# hash now (the configuration file or the run's design settings changed: murk.pipeline.configuration_changed) forces
# select, also in a copied root or from a second checkout, where Snakemake's file times and params are silent.
# select then re-selects, or refuses a root holding read-out stores of the other configuration, naming the fixes.
_CONFIGURATION_CHECKED = []


def rerun_if_configuration_changed(wildcards):
    """An input function (no inputs) of the select rule: forces it when the configuration's hash changed."""
    if not workflow.is_main_process or _CONFIGURATION_CHECKED:
        return []
    _CONFIGURATION_CHECKED.append(True)
    try:
        now = murk_core.config_hash(murk_protocol.design_config(murk_core.load_config(),
                                                                murk_protocol.design_from_settings(config)))
    except Exception:  # noqa: BLE001 - an unreadable configuration: select itself names the problem
        return []
    why = murk_pipeline.configuration_changed(OUT, now)
    if why is None:
        return []
    items_json = f"{OUT}/items.json"
    if not murk_pipeline.force_rerun(workflow, items_json):  # a Snakemake whose DAG murk cannot force
        raise WorkflowError(f"murk: {why}; select again with make demo ARGS='--forcerun {items_json}' "
                            f"(snakemake --forcerun {items_json})")
    print(f"murk: {why}: select {'would run' if workflow.dryrun else 'runs'} again (refusing an output root that "
          f"holds read-out stores of the other configuration), and what follows it", file=sys.stderr)
    return []


rule select:
    input:
        nb="notebooks/01_select.py",
        cfg=os.environ.get("MURK_CONFIG") or "data/config.yaml",
        images=rerun_if_images_changed,
        configuration=rerun_if_configuration_changed,
    # update(): Snakemake keeps these files while select runs and restores them when it fails
    # (a refused selection leaves the previous one in place instead of deleting it).
    output:
        item_table=update(f"{OUT}/items.json"),
        meta=update(f"{OUT}/items_meta.json"),
    log:
        f"{RUNNING}/01_select.ipynb",
    params:
        argv=as_data(stage_argv("-p", "n_items", config["n_items"], "-p", "seed", config["seed"], "-r", "split",
                        config["split"], *COCO, *RUN_NAME, *DESIGN)),
        done_dir=NB,
    shell:
        STAGE


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
        argv=as_data(stage_argv("-r", "backend", DEPTH_BACKEND, "-r", "model", config["depth_model"])),
        done_dir=NB,
    shell:
        STAGE


# The store itself is not a declared output: Snakemake deletes the outputs of a
# failed job, and the store must survive a killed job so the next run resumes. The
# declared output is a marker holding the store's content digest (murk.pipeline.markers).
MARK = "python -m murk.pipeline.markers mark {output:q}"

# A marker vouches for its store's content. A store deleted, changed or damaged after its marker
# was written, or a marker deleted (docs/recovery.md's repair step), forces that read-out while
# Snakemake builds its job graph (murk.pipeline.rerun_reason, force_rerun): the store is re-read
# (only what is missing or damaged) and the cube and paper after it are made again, also when
# they are newer. A dry run (make plan) lists those jobs and changes nothing on disk.
# What is made from the stores: the cube, the two analyses' numbers fragments and the merged numbers file (a marker
# missing while one of them exists is forced: Snakemake asks only for the files a job's dependents read, so with the
# fragments the paper reads present it would not re-make the cube, nor the read-out before it)
DOWNSTREAM = [f"{OUT}/cube.zarr", *(str(murk_core.numbers_fragment(s_, OUT)) for s_ in murk_core.NUMBERS_FRAGMENTS),
              f"{OUT}/paper_numbers.json"]
_FORCED = set()


def rerun_if_stale(marker_of):
    """An input function (no inputs) of a rule whose output is a marker: forces the job when the
    marker no longer vouches for its store."""
    def check(wildcards):
        marker = marker_of(wildcards)
        if not workflow.is_main_process or marker in _FORCED:
            return []
        why = murk_pipeline.rerun_reason(marker, DOWNSTREAM)
        if why is None:
            return []
        _FORCED.add(marker)
        if not murk_pipeline.force_rerun(workflow, marker):  # a Snakemake whose DAG murk cannot force
            raise WorkflowError(f"murk: {why}; re-read it and re-make what follows with "
                                f"make demo ARGS='--forcerun {marker}' (snakemake --forcerun {marker})")
        print(f"murk: {why}: {murk_pipeline.rerun_words(marker, workflow.dryrun)}", file=sys.stderr)
        # the images of the files that changed after the marker are marked not done now (Snakemake deletes the
        # marker before the job runs), so the read-out re-reads them, also where codecs cannot see the change
        try:
            _forgot = murk_pipeline.forget_changed(marker, dry_run=workflow.dryrun)
        except ValueError as _e:
            raise WorkflowError(f"murk: {_e}") from None
        except OSError as _e:  # e.g. a read-only store: nothing is vouched for, the next run tries again
            raise WorkflowError(f"murk: cannot mark the changed images of {marker}'s store not done ({_e}); make "
                                f"the store writable again and run the same command") from None
        if _forgot:
            print(f"murk: {_forgot}", file=sys.stderr)
        return []
    return check


# A store records the weights it was read out from (model_revision). Weights re-saved since, as the store tells
# (murk.pipeline.weights_changed), force its read-out as a stale store does: also in a copied root or from a second
# checkout, where Snakemake's params trigger (the weights param below, kept in this checkout's .snakemake/) is
# silent. The read-out sets the old store aside (murk.results.set_aside_superseded); a dry run changes nothing.
def rerun_if_weights_changed(marker_of):
    """An input function (no inputs) of the read-out rules: forces the job when its store records other weights."""
    def check(wildcards):
        marker = marker_of(wildcards)
        if not workflow.is_main_process or marker in _FORCED:
            return []
        model = SLUG2MODEL.get(wildcards.slug)
        if model is None:   # not a model's read-out (the monitor's marker, which its own rule makes): Snakemake asks
            return []       # every rule whose output pattern matches, and reports an input function that raises
        why = murk_pipeline.weights_changed(murk_pipeline.store_of(marker), model, OUT_ABS, weights_identity(model))
        if why is None:
            return []
        _FORCED.add(marker)
        if not murk_pipeline.force_rerun(workflow, marker):  # a Snakemake whose DAG murk cannot force
            raise WorkflowError(f"murk: {why}; re-read it with make demo ARGS='--forcerun {marker}' "
                                f"(snakemake --forcerun {marker})")
        print(f"murk: {why}: {murk_pipeline.rerun_words(marker, workflow.dryrun)}", file=sys.stderr)
        return []
    return check


_WEIGHTS = {}


def weights_identity(model):
    """murk.pipeline.checkpoint_identity of a model, once per process (the read-out rules' param and the check
    above ask for it; a dry run saves no digest, so a second call would read a re-saved checkpoint again)."""
    if model not in _WEIGHTS:
        _WEIGHTS[model] = murk_pipeline.checkpoint_identity(model, OUT_ABS, offline=OFFLINE,
                                                            update_cache=not workflow.dryrun)
    return _WEIGHTS[model]

SERVED_OF = {e.id: {"server": e.server, "served_model": e.served_model, "max_in_flight": e.max_in_flight}
             for e in MODEL_ENTRIES if e.server}   # model -> its server (an entry with server: read out through it)


def readout_argv(wc, shard=None):
    """The read-out stage's arguments for the model of ``wc.slug`` (and one shard of it)."""
    model = SLUG2MODEL[wc.slug]
    served = ["-y", json.dumps({"served": SERVED_OF[model]})] if model in SERVED_OF else []
    return stage_argv("-r", "model", model, "-p", "max_items", N_OF[model], *DEVICE, *served,
                      "-p", "n_verbal_items", config.get("n_verbal_items", 0),
                      "-p", "trust_remote_code", bool(config.get("trust_remote_code", False)),
                      "-p", "allow_pickle", bool(config.get("allow_pickle", False)), "-r", "run_by", "snakemake",
                      *([] if shard is None else ["-p", "shard", int(wc.shard), "-p", "shard_size", int(wc.size)]))


READOUT_PARAMS = dict(model=lambda wc: SLUG2MODEL[wc.slug], n=lambda wc: N_OF[SLUG2MODEL[wc.slug]], device=as_data(DEVICE),
                      n_verbal=config.get("n_verbal_items", 0), trust=bool(config.get("trust_remote_code", False)),
                      pickle=bool(config.get("allow_pickle", False)), done_dir=NB,
                      # the weights' identity (a local folder's content digest: murk.pipeline.checkpoint_identity), not
                      # passed on: Snakemake's params trigger re-runs the read-out of a re-saved checkpoint, and all after it
                      weights=lambda wc: weights_identity(SLUG2MODEL[wc.slug]))

# shard_size: null -> one read-out job per model; an integer -> one job per (model, shard),
# each writing its own store, merged by the analyse stage. Finished shards are never redone.
# A model on the first N items has ceil(N / shard_size) shards, each over its own items.
SHARD_SIZE = config.get("shard_size")


_COST_NOTES = set()   # the cost records said to be ignored (each once, on stderr)


def readout_resource(key, shard=False):
    """A read-out job's ``runtime`` (min) or ``mem_mb`` from the measured cost of its model's earlier jobs
    (murk.pipeline.model_readout_resources: measured time and peak memory times a margin; more at each retry).
    A cost record that is not a measurement (not JSON, a wrong type, NaN, infinite, or outside the bounds of
    murk.pipeline.cost_problem) is ignored, said in one line, and the defaults apply."""

    device = str(config.get("device") or "").split(":")[0] or None

    def get(wildcards, attempt):
        model = SLUG2MODEL[wildcards.slug]
        n = int(N_OF[model])
        if shard:  # the shard's own images
            n = max(0, min(int(wildcards.size), n - int(wildcards.shard) * int(wildcards.size)))
        got = murk_pipeline.model_readout_resources(os.path.join(OUT_ABS, "readout"), wildcards.slug, model, n,
                                                    device=device, attempt=attempt)
        for note in got["ignored"]:
            if workflow.is_main_process and note not in _COST_NOTES:
                _COST_NOTES.add(note)
                print(note, file=sys.stderr)
        return got[key]
    return get


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
        stale=rerun_if_stale(lambda wc: f"{OUT}/readout/{wc.slug}.done"),
        weights=rerun_if_weights_changed(lambda wc: f"{OUT}/readout/{wc.slug}.done"),
    output:
        f"{OUT}/readout/{{slug}}.done",
    log:
        f"{RUNNING}/03_readout-{{slug}}.ipynb",
    params:
        **READOUT_PARAMS,
        argv=readout_argv,
    resources:
        gpu=1,
        runtime=readout_resource("runtime"),
        mem_mb=readout_resource("mem_mb"),
    shell:
        STAGE + " && " + MARK


rule readout_shard:
    input:
        nb="notebooks/03_readout.py",
        item_table=rules.select.output.item_table,
        depth=rules.depth.output.current,
        stale=rerun_if_stale(lambda wc: f"{OUT}/readout/{wc.slug}/s{wc.size}-{wc.shard}.done"),
        weights=rerun_if_weights_changed(lambda wc: f"{OUT}/readout/{wc.slug}/s{wc.size}-{wc.shard}.done"),
    output:
        f"{OUT}/readout/{{slug}}/s{{size}}-{{shard}}.done",
    log:
        f"{RUNNING}/03_readout-{{slug}}-s{{size}}-{{shard}}.ipynb",
    params:
        **READOUT_PARAMS,
        shard=lambda wc: int(wc.shard),
        argv=lambda wc: readout_argv(wc, shard=True),
    resources:
        gpu=1,
        runtime=readout_resource("runtime", shard=True),
        mem_mb=readout_resource("mem_mb", shard=True),
    shell:
        STAGE + " && " + MARK


rule monitor:
    input:
        nb="notebooks/03b_monitor.py",
        item_table=rules.select.output.item_table,
        depth=rules.depth.output.current,
        stale=rerun_if_stale(lambda wc: f"{OUT}/readout/murk--visibility-monitor.done"),
        stale_deployable=rerun_if_stale(lambda wc: f"{OUT}/readout/murk--visibility-monitor-deployable.done"),
    output:
        oracle=f"{OUT}/readout/murk--visibility-monitor.done",
        deployable=f"{OUT}/readout/murk--visibility-monitor-deployable.done",
    log:
        f"{RUNNING}/03b_monitor.ipynb",
    params:
        argv=as_data(stage_argv()),
        done_dir=NB,
    shell:
        STAGE + " && " + MARK.replace("{output:q}", "{output.oracle:q}") \
            + " && " + MARK.replace("{output:q}", "{output.deployable:q}")


# An analysis output deleted from an analysed root (docs/stages.md's fix for a mixed paper: rm the two numbers
# fragments, then make paper), or the numbers file both analysis notebooks merge their fragments into (no rule's
# declared output): Snakemake alone does not make a missing file again while what is made from it (the paper, the
# export) is present ("Nothing to be done"). The analysis job that writes it is forced while Snakemake builds its job
# graph, as a stale store's read-out is (murk.pipeline.force_rerun), and the jobs after it run again; a dry run (make
# plan) lists them. A root never analysed is left to Snakemake (its jobs run anyway).
ANALYSED = [f"{OUT}/paper_numbers.json", f"{OUT}/paper/index.html"]


def rerun_if_missing(rule_name, merged=()):
    """An input function (no inputs) of an analysis rule: forces its job when one of its outputs (or ``merged``) is
    missing from a root that was analysed (one of its outputs, the numbers file or the paper exists)."""
    def check(wildcards):
        outputs = [str(f) for f in getattr(rules, rule_name).output]
        forced = str(getattr(rules, rule_name).output.numbers)
        if not workflow.is_main_process or forced in _FORCED:
            return []
        files = [*outputs, *merged]
        gone = [f for f in files if not os.path.exists(f)]
        if not gone or not any(os.path.exists(f) for f in [*files, *ANALYSED]):
            return []
        _FORCED.add(forced)
        if not murk_pipeline.force_rerun(workflow, forced):  # a Snakemake whose DAG murk cannot force
            raise WorkflowError(f"murk: {gone[0]} is missing; make it again with "
                                f"make demo ARGS='--forcerun {rule_name}' (snakemake --forcerun {rule_name})")
        more = f" (and {len(gone) - 1} more of its files)" if len(gone) > 1 else ""
        print(f"murk: {gone[0]} is missing{more}: the {rule_name} stage {'would run' if workflow.dryrun else 'runs'} "
              f"again, and what is made from it after it", file=sys.stderr)
        return []
    return check


rule analyse:
    input:
        nb="notebooks/04_analyse.py",
        done=[f for slug in SLUG2MODEL for f in readout_done(slug)],
        monitor=rules.monitor.output,
        missing=rerun_if_missing("analyse"),
    # what the notebook writes is declared in the library (murk.report.analysis_tables / analysis_figures: the
    # tables its cells are labelled with, the figures its show() accepts), not listed here
    output:
        numbers=f"{OUT}/analysis/numbers-study.json",
        figures=figure_files(name=murk_report.analysis_figures("04_analyse")),
        scores=f"{OUT}/analysis/scores.nc",
        crossings=f"{OUT}/analysis/crossings.nc",
        tables=expand(f"{OUT}/analysis/{{t}}.md", t=murk_report.analysis_tables("04_analyse")),
        cube=directory(f"{OUT}/cube.zarr"),
    log:
        f"{RUNNING}/04_analyse.ipynb",
    params:
        argv=as_data(stage_argv("-y", json.dumps({"models": [{"id": e.id, "n_items": e.n_items} for e in MODEL_ENTRIES]}),
                                *(["-p", "shard_size", SHARD_SIZE] if SHARD_SIZE else []), *COMPARE,
                                "-p", "figure_pdf", FIGURE_PDF)),
        done_dir=NB,
    shell:
        STAGE


# The analysis beyond the spec (the monitor, recalibration, risk-coverage) reads the study's cube, crossings and
# numbers fragment (made by the same job as the cube). The cube and crossings are ancient(): the study's notebook
# edited and run again leaves this job as it is (each notebook merges the two numbers fragments into the numbers
# file, murk.report.merge_numbers); new read-outs (its other inputs) run both again. The study's numbers fragment is
# not declared here: an ancient() flag on it would also keep the paper, which depends on it, from running again.
rule beyond:
    input:
        nb="notebooks/05_beyond.py",
        done=[f for slug in SLUG2MODEL for f in readout_done(slug)],
        monitor=rules.monitor.output,
        cube=ancient(rules.analyse.output.cube),
        crossings=ancient(rules.analyse.output.crossings),
        missing=rerun_if_missing("beyond", merged=[f"{OUT}/paper_numbers.json"]),
    output:
        numbers=f"{OUT}/analysis/numbers-beyond.json",
        figures=figure_files(name=murk_report.analysis_figures("05_beyond")),
        tables=expand(f"{OUT}/analysis/{{t}}.md", t=murk_report.analysis_tables("05_beyond")),
    log:
        f"{RUNNING}/05_beyond.ipynb",
    params:
        argv=as_data(stage_argv("-p", "figure_pdf", FIGURE_PDF)),
        done_dir=NB,
    shell:
        STAGE


# The paper embeds its figures and tables from the executed notebooks (the logs of
# the depth, analyse and beyond rules, under {OUT}/notebooks/); the two numbers
# fragments, the last thing each analysis notebook writes, stand for them (each
# notebook merges them into paper_numbers.json, the file the paper reads).
rule paper:
    input:
        qmd="paper/index.qmd",
        bib="paper/references.bib",
        css="paper/paper.css",
        numbers=[rules.analyse.output.numbers, rules.beyond.output.numbers],
        depth=rules.depth.output.current,
    # update(): a refused render (a numbers file and notebooks of two analyses, murk.report.paper) keeps the
    # previous paper in place instead of Snakemake deleting it
    output:
        html=update(f"{OUT}/paper/index.html"),
    params:
        root=as_data(OUT_ABS),
    shell:
        "python -m murk.report.paper --output-dir {params.root:q}"


# The run's per-sample read-outs and one model card per model (python -m murk.report.export; `make export`): not in
# the default target. It reads the cube, the crossings and the numbers file that both analyses merge their fragments
# into; update(): a refused export keeps the previous one (the export folder is swapped in whole, or not at all).
rule export:
    input:
        cube=rules.analyse.output.cube,
        crossings=rules.analyse.output.crossings,
        numbers=[rules.analyse.output.numbers, rules.beyond.output.numbers],
    output:
        jsonl=update(f"{OUT}/export/samples.jsonl"),
        parquet=update(f"{OUT}/export/samples.parquet"),
        schema=update(f"{OUT}/export/samples.schema.json"),
    params:
        root=as_data(OUT_ABS),
    shell:
        "python -m murk.report.export --output-dir {params.root:q}"
