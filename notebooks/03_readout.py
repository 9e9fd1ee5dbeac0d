# ---
# jupyter:
#   jupytext:
#     notebook_metadata_filter: -jupytext.text_representation
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Stage 3 · readout: one VLM, every item × condition × question
#
# For each item the 24 conditions (clean; fog and underwater at the 8
# visibilities; ImageNet-C fog 1–5; blank and shuffled controls) are rendered
# (Eq. 1 in linear RGB, the 8-px red box drawn after the degradation), and the
# t2 and t3 questions are asked with three prompts (main with a verbalized
# confidence, abstain, abstain₂). The read-out runs on murk's batched engine
# (`murk.readout`): the prompts of one (image, condition) unit as one token tree,
# many units per forward pass, rendering overlapping with the model. Results go
# into this model's zarr store one image at a time: rerunning resumes and never
# repeats finished images.
#
# `murk-tiny/…` models are tiny randomly initialised checkpoints of the real
# architectures: their numbers are a **pipeline check**, not results.

# %% tags=["parameters"]
# (one parameter a line, its comment above it: papermill reads `name = value` lines)
# hub id, local folder, or murk-tiny/smolvlm, murk-tiny/qwen3vl; None: the first model of the run settings
# (data/workflow.yaml; offline_models if MURK_OFFLINE=1)
model = None
# N: the first N items (a model entry's n_items); None: the model's n_items in the run settings if it is
# listed there, else all selected items
max_items = None
# None: the run settings' device (null: cuda if available, else cpu)
device = None
# with shard_size: read out only items shard*shard_size ... (own store)
shard = None
shard_size = None
# the first n items are also asked verbal wordings v2, v3 (spec Table VI: 300); None: the run settings'
# n_verbal_items
n_verbal_items = None
# batched engine: images per scheduled batch (x 24 units); None: the store's value on resume, else
# data/config.yaml readout.images_per_batch, else from free memory
images_per_batch = None
# run code shipped with a checkpoint (auto_map) only if True, never on a prompt; None: the run settings'
# trust_remote_code (false)
trust_remote_code = None
# accept pickle weights (pytorch_model.bin) only if True; None: the run settings' allow_pickle (false:
# safetensors only)
allow_pickle = None
# None: in-process (transformers); a mapping {server: <base URL, e.g. http://127.0.0.1:8000/v1>, served_model: <name>,
# max_in_flight: N}: read out through that OpenAI-compatible server (a model entry's keys; None and the model listed
# with a server in the run settings: that server)
served = None
# what runs this notebook: "papermill" (by hand) or "snakemake" (the Snakefile passes it): a refusal's fix is
# given in the words of that command
run_by = "papermill"
output_dir = None

# %%
import json
import resource
import time
import warnings

import matplotlib.pyplot as plt
import xarray as xr
from IPython.display import display

from murk import core, pipeline, protocol, readout, report, results, scene

# one writer per output root (murk.pipeline): refused, writing nothing, while another run holds it
ROOT_LOCK = pipeline.hold_for_stage(output_dir, stage="03_readout")

table, meta = protocol.read_items(output_dir)
cfg = protocol.config_of(meta)   # data/config.yaml with the run's design (murk.protocol; the study's: as it is)
# a parameter left at None takes its default from the run settings (data/workflow.yaml), as Snakemake does
if model is None or max_items is None:  # (Snakemake passes both)
    # (the models the root records where it holds no read-out of the run settings': Lab without MURK_OFFLINE)
    _models, _models_note = core.analyse_models(None, output_dir, shard_size, required=False)
    if _models_note and model is None:
        print(_models_note)
    listed = core.model_entries(_models, len(table), "the run settings' models")
    model = model or listed[0].id
    if served is None:  # a model listed with a server is read out through it, as Snakemake does
        served = next(({"server": e.server, "served_model": e.served_model, "max_in_flight": e.max_in_flight}
                       for e in listed if e.id == model and e.server), None)
    if max_items is None:  # a model listed with n_items is read out on its first n_items, as Snakemake does
        max_items = next((e.n_items for e in listed if e.id == model and e.n_items < len(table)), None)
n_verbal_items = int(core.run_default("n_verbal_items", n_verbal_items))
device = core.run_default("device", device)
trust_remote_code = bool(core.run_default("trust_remote_code", trust_remote_code))
allow_pickle = bool(core.run_default("allow_pickle", allow_pickle))
current = scene.current_depth(output_dir)
RUN_ID = pipeline.run_id(meta["config_hash"], meta["items_hash"])   # this selection's identity (items_meta.json)
pipeline.refuse_other_depth(current, RUN_ID, "readout", core.depth_dir(output_dir) / "current.json")
span = core.shard_span(len(table), shard, shard_size, max_items)   # the items of this job
store = core.readout_store(model, output_dir, shard, shard_size)
pipeline.hold_store_lock(store, run_by)   # one writer per store: a second (a restarted driver's) is refused
print(f"{model}: items {span.start}..{span.stop - 1} of {len(table)} into {store}" if len(span) else
      f"{model}: shard {shard} of size {shard_size} lies beyond the {len(table)} items: nothing to read out")

# %% [markdown]
# ## The store and the model
#
# A model entry with a `server` is read out through that OpenAI-compatible server (`served`; vLLM, SGLang, ...:
# `murk.readout.ServedClient`, docs/served.md): murk loads only the model's tokenizer, processor and chat
# template (`murk.readout.load_served_vlm`), probes the server once (`murk.readout.ServedClient`: it must serve
# the model, continue the prefilled assistant turn and return log-probabilities, else it is refused in one
# line) and records its identity in the store's attributes (`served_*`); the store's `readout_engine` is
# `served`, so a served store is never resumed in-process or the other way round.
#
# The model is loaded once (`murk.readout.load_vlm`: a hub id, a local folder or
# a tiny offline checkpoint; decoding is greedy whatever its generation config
# says, and what that config asked for is recorded). A checkpoint that cannot be
# read out is refused in one line naming the file and the fix, in the words of
# the command that runs this notebook (`run_by`): a missing, truncated or damaged
# weights file or shard, a text-only or vision-only model, pickle weights or
# custom code not allowed. Custom code a checkpoint declares for an architecture
# transformers knows is not run unless `trust_remote_code` is set: the built-in
# class is used, and that is printed here and kept in the store's attributes
# (`custom_code_not_run`), whence the paper's colophon lists it. The store's identity is
# every setting that changes its content (`murk.results.store_identity`: config,
# items, model and revision, dtype, `n_verbal_items`, depth backend and model): a
# store written with other settings is refused with a message naming the
# setting, never mixed (`murk.results.open_readout_store`). A local checkpoint's
# revision is its content digest: a store of the same folder re-saved with other
# weights is kept aside (`murk.results.set_aside_superseded`, said here and on the
# terminal) and a fresh store is read out. Images already done are
# skipped; images whose chunk files were damaged, or whose image files changed
# since they were read (the store's `input_sha256`), are read again.
#
# The batched engine reads the items in a fixed global schedule: batch *b* holds
# items *b·k* … *(b+1)·k − 1*, all 24 conditions of each (`murk.readout.schedule`).
# Which images share a forward pass changes a read-out only by floating-point
# rounding (≤ 1e-6 in float32), but a store must be reproducible bit for bit, so
# *k* (`images_per_batch`) belongs to the store's identity: a resumed
# run or another shard reuses the store's *k*, and a shard size that would cut a
# batch is refused (`murk.readout.check_shard_alignment`). On a CPU *k* = 1; on a GPU
# it is chosen from the free memory and the model's size
# (`murk.readout.auto_images_per_batch`), then lowered to a divisor of the shard
# size. Shards run on GPUs of different memory can choose different *k*: set
# `images_per_batch` explicitly there, so that every shard reads the same batches.

# %%
def stored_attr(store, key):
    """An attribute of an existing store (None without one); a damaged store is named by open_readout_store."""
    try:
        return core.store_attrs(store).get(key)
    except (OSError, ValueError):
        return None


todo, vlm, k = [], None, None
if len(span):
    load_start = time.perf_counter()   # the job's measured cost (below) sizes the next jobs' SLURM requests
    if served:  # the model's files without its weights; the server reads it out
        vlm = readout.load_served_vlm(model, root=output_dir, config=cfg, trust_remote_code=trust_remote_code,
                                      command=run_by)
        client = readout.ServedClient(readout.ServedModel.from_entry({"id": model, **served}), vlm, cfg)
        served_attrs = client.identity_attrs() if client.probe() else {}
        print(f"served: {model} as {client.server.name} by {client.server.url} "
              f"({served_attrs['served_engine']} {served_attrs['served_engine_version']}; "
              f"log-probabilities by {client.logprobs_mode}; at most {client.server.max_in_flight} requests in flight)")
    else:
        vlm = readout.load_vlm(model, device=device, root=output_dir, trust_remote_code=trust_remote_code,
                               allow_pickle=allow_pickle, command=run_by)
        served_attrs = {}
    # a served model's dtype is the server's where it tells it (not the processor's float32)
    store_dtype = served_attrs.get("served_dtype", "unreported by the server") if served else vlm.dtype
    load_s = time.perf_counter() - load_start
    if vlm.custom_code_not_run:  # never silently: said here, kept in the store's attributes and the colophon
        print(f"WARNING {model}: {readout.custom_code_note(vlm.custom_code_not_run)}")
    k = None if served else (images_per_batch or stored_attr(store, "images_per_batch")
                             or cfg["readout"].get("images_per_batch"))
    if not k and not served:  # from the free memory, then the largest power of two that divides the shard size
        k = readout.auto_images_per_batch(vlm, config=cfg)
        while shard_size and int(shard_size) % k:
            k //= 2
    if not served:  # a server reads each image on its own: no scheduled batches
        k = int(k)
        readout.check_shard_alignment(shard_size, k)  # a shard must not cut a scheduled batch
        print(f"batched engine: {k} image(s) = {k * readout.N_CONDITIONS} units per scheduled batch")
    attrs = results.store_identity(
        config_hash=meta["config_hash"], items_hash=meta["items_hash"], model_id=model,
        model_revision=vlm.revision, dtype=store_dtype, n_verbal_items=n_verbal_items,
        n_items=len(core.shard_span(len(table), max_items=max_items)),   # this model's items (its n_items)
        depth_backend=current["depth_backend"], depth_model=current.get("depth_model", ""),
        depth_revision=current.get("depth_revision", ""), pipeline_check=int(vlm.is_pipeline_check),
        n_visual_tokens=int(vlm.n_visual_tokens), depth_approximate=current["depth_approximate"],
        ignored_generation_settings=json.dumps(vlm.ignored_generation_settings, sort_keys=True),
        eos_token_ids=json.dumps(sorted(vlm.eos_token_ids)), readout_engine="served" if served else "batched",
        trust_remote_code=int(bool(trust_remote_code)), allow_pickle=int(bool(allow_pickle)), run_id=RUN_ID,
        custom_code_not_run=json.dumps(vlm.custom_code_not_run, sort_keys=True), **served_attrs,
        **({"images_per_batch": k} if k is not None else {}))
    if vlm.is_pipeline_check:
        attrs["note"] = "PIPELINE CHECK: tiny randomly initialised checkpoint; numbers carry no meaning"
    elif current["depth_approximate"]:
        warnings.warn(f"{model} is a real model but the depth is the approximate backend "
                      f"{current['depth_backend']!r}: its crossing visibilities in metres rest on that assumption "
                      f"(W does not). Rerun the depth stage with backend='depth-anything-v2' for the study.")
    old_revision = stored_attr(store, "model_revision")
    aside = results.set_aside_superseded(store, attrs)   # a re-saved local checkpoint: a fresh store, never a mixed one
    if aside is not None:
        note = (f"{model}: its weights changed (revision {old_revision} -> {vlm.revision}): read out into a fresh "
                f"store {store}; the store of the earlier weights is kept as {aside}")
        print(note)
        if (terminal := core.terminal_stream()) is not None:   # under Snakemake (murk.pipeline.execute): the terminal too
            print(f"murk: {note}", file=terminal, flush=True)
    # each image's input digest (its image file's and its shuffled partner's, as select recorded them):
    # an image done from other files is read out again
    inputs = protocol.input_digests(table, meta, protocol.shuffled_partner(len(table), cfg["items"]["shuffle_offset"]))
    ds = results.open_readout_store(store, table["image_id"].iloc[span.start:span.stop],
                                 table["category"].iloc[span.start:span.stop], attrs, inputs[span.start:span.stop])
    done = ds["done"].values
    todo = [i for i in span if not done[i - span.start]]
print(f"{len(todo)} of {len(span)} images to read out")

# %% [markdown]
# ## The loop: render → read → write
#
# For each image not yet done, `load` gathers its inputs at the presented size
# (`murk.scene.item_inputs`: the image, its depth, the box, the shuffled
# control's partner) and its 24 conditions (`murk.scene.render_conditions`, a
# generator; `murk.readout.ItemJobs`); the batched engine (`murk.readout.read_images`)
# consumes them in preparing workers (processes on a GPU, sized from the CPUs the
# job was given), builds each unit's token tree, and reads every question of every
# condition of the scheduled batch in one forward pass and one greedy decode loop,
# while the next batches are being rendered. Each image is written as soon as its
# batch is read (`murk.results.write_image`: values first, then its `done` flag).
#
# Bad input (a missing or undecodable image, a missing depth map) and a failed
# rendering (recorded as `rendering failed: <error>`, e.g. a depth map of another
# shape than its image) are recorded per image with their reason
# (`murk.results.write_missing`) and the loop goes on. A resumed run recomputes whole
# scheduled batches (finished batch-mates are read again, not written), so its
# store equals an uninterrupted run's. A unit the batched engine cannot take (a
# model family or attention kernel without custom 4-D masks) is read with every
# prompt run whole (`murk.readout.read_unit`) and listed below.

# %%
partner = protocol.shuffled_partner(len(table), cfg["items"]["shuffle_offset"])
skipped, fallbacks = {}, []


# item i's questions and its 24 conditions (a generator, rendered by the engine's preparing workers; a
# module-level object, so that worker processes can be sent it)
load = readout.ItemJobs(table, partner, meta["image_dir"], current["path"], cfg, seed=meta["seed"],
                       n_verbal_items=int(n_verbal_items))


def record_missing(i, reason):
    skipped[int(table.iloc[i]["image_id"])] = reason
    results.write_missing(store, i - span.start, reason, inputs[i])


stats = readout.EngineStats()
if todo:
    run_start = time.perf_counter()
    if served:  # each image on its own: a resumed run asks only what is missing
        read = readout.read_images_served(client, todo, load, stats=stats, progress=f"readout {core.model_slug(model)}")
    else:
        batches = readout.plan(todo, span.start, span.stop, k)
        done_items = {i for i in span if done[i - span.start]}
        read = readout.read_images(vlm, batches, load, config=cfg, done=done_items, stats=stats,
                                   progress=f"readout {core.model_slug(model)}")
    for res in read:
        if res.missing_reason is not None:
            record_missing(res.item, res.missing_reason)
        else:
            results.write_image(store, res.item - span.start, res.results, inputs[res.item])  # 24 conditions, then `done`
        fallbacks += [f"image {int(table.iloc[res.item]['image_id'])} {f}" for f in res.fallbacks]
    # what this job cost, beside its store: the next read-out jobs of this model ask SLURM for as much, with a
    # margin (murk.pipeline.readout_resources)
    on_cuda = str(vlm.device).startswith("cuda")
    if on_cuda:
        import torch
    pipeline.write_readout_cost(
        store, model=model, device="served" if served else str(vlm.device).split(":")[0], images=len(todo), units=stats.units,
        run_s=time.perf_counter() - run_start, load_s=load_s,
        peak_host_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,   # Linux: KiB
        peak_device_bytes=torch.cuda.max_memory_allocated(vlm.device) if on_cuda else 0, images_per_batch=k or 1)
print(f"readout {model}: every item processed" if not skipped else
      f"readout {model}: {len(skipped)} item(s) skipped, recorded as missing:\n"
      + "\n".join(f"  image {k_}: {v}" for k_, v in skipped.items()))
if stats.batches:
    print(f"batched engine: {stats.units} units in {stats.batches} batches, {stats.forward_calls} forward calls; "
          f"the model waited for the CPU {100 * stats.wait_share:.0f} % of the time; "
          f"{stats.fallback_units} units with every prompt run whole; {stats.oom_splits} out-of-memory splits")
if served and stats.units:
    print(f"served: {stats.units} units, {stats.prompts} prompts, {client.requests} requests (retries included) "
          f"in {stats.model_s:.1f} s waiting for the server")
if fallbacks:
    print("read with every prompt run whole (the batched engine cannot take them):\n  " + "\n  ".join(fallbacks[:20]))

# %% [markdown]
# ## The option-mass guard
#
# The answer and c_int are the option letters' share of the first-token
# distribution. A healthy model puts most of its first-token mass on the letters;
# a wrong chat template or prefill, or a model that starts with `(`, `**`, a
# newline or `The`, leaves a sliver there and nothing else would say so.
# `murk.readout.check_option_mass` warns (naming the model, the medians and the
# likely causes) when the median mass on clean images is below 0.5. Random-weight
# pipeline checks always trip it: that is expected, and the warning stays.

# %%
if len(span):
    medians = readout.check_option_mass(xr.open_zarr(store, consolidated=False), model)
    print(f"{model}: median option mass on clean images: t2 {medians['t2']:.3g}, t3 {medians['t3']:.3g}")

# %% [markdown]
# Quick look: t2 accuracy, mean internal confidence and abstain rate against visibility, fog arm.

# %%
if len(span):
    ds = xr.open_zarr(store, consolidated=False)
    print(f"{int(ds['done'].sum())} of {ds.sizes['image']} images read out; attrs:")
    print({k: ds.attrs[k] for k in ("model_id", "model_revision", "pipeline_check", "n_visual_tokens", "depth_backend")})
    sel = ds["value"].sel(arm="fog", task="t2")
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for name in ("correct", "c_int", "abstain"):
        ax.plot(ds["visibility_m"].sel(arm="fog")[1:], sel.sel(readout=name).mean("image")[1:], marker="o", label=name)
    ax.set_xscale("log")
    ax.invert_xaxis()
    ax.set_xlabel("visibility V (m)")
    ax.set_title(report.plot_text(f"{model} (fog, t2)"))   # the id as written: a $ in it starts no mathtext
    ax.legend()
    fig.tight_layout()

# %% [markdown]
# The run's identity (`murk.pipeline.run_id`), as the store's attributes record it.

# %%
#| label: murk-identity
display(pipeline.identity_bundle(run_id=RUN_ID, model=model), raw=True)
