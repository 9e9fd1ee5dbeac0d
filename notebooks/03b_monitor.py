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
# # Stage 3b · monitor: a visibility estimate that abstains before the VLM is asked
#
# Beyond the spec (its Sec. V suggests it and leaves it untested): for every item
# and condition, the dark channel prior (He, Sun & Tang 2009) with the known depth
# gives an estimate V̂ of the visibility (Koschmieder), from the degraded image
# without the box. Its read-outs (`c_int` = a confidence from V̂, `abstain` =
# V̂ below a threshold, `visibility_hat_m` = V̂) join the cube as the "model"
# `murk/visibility-monitor`; the analyse stage compares it with each VLM.
#
# That monitor is an *oracle*: it is given the depth map the image was rendered
# with (estimated on the clean image) and the arm it was rendered in. The
# *deployable* mode, `murk/visibility-monitor-deployable`
# (`murk.monitor.deployable_readouts`), sees only the degraded image: depth from
# the run's depth backend applied to that image, the arm from the veiling light's
# colour (`murk.monitor.estimate_arm`, recorded as `visibility_hat_arm`), no level.
# Both are written here, from the same renderings.

# %% tags=["parameters"]
# (one parameter a line, its comment above it: papermill reads `name = value` lines)
# abstain threshold in metres; None: murk.monitor.DEFAULT_THRESHOLD_M
threshold_m = None
output_dir = None

# %%
import matplotlib.pyplot as plt
import numpy as np
import xarray as xr
from IPython.display import display

import murk
from murk import core, monitor, pipeline, protocol, scene
from murk import results as murk_results

# one writer per output root (murk.pipeline): refused, writing nothing, while another run holds it
ROOT_LOCK = pipeline.hold_for_stage(output_dir, stage="03b_monitor")

table, meta = protocol.read_items(output_dir)
cfg = protocol.config_of(meta)   # data/config.yaml with the run's design (murk.protocol; the study's: as it is)
current = scene.current_depth(output_dir)
RUN_ID = pipeline.run_id(meta["config_hash"], meta["items_hash"])   # this selection's identity (items_meta.json)
pipeline.refuse_other_depth(current, RUN_ID, "monitor", core.depth_dir(output_dir) / "current.json")
threshold_m = monitor.DEFAULT_THRESHOLD_M if threshold_m is None else float(threshold_m)
stores, done = {}, {}
# each image's input digest (its file's and its shuffled partner's): an image done from other files is read again
inputs = protocol.input_digests(table, meta, protocol.shuffled_partner(len(table), cfg["items"]["shuffle_offset"]))
for mode_id in monitor.MONITOR_IDS:   # the oracle, then the deployable mode: one store each
    stores[mode_id] = core.readout_store(mode_id, output_dir)
    attrs = murk_results.store_identity(
        config_hash=meta["config_hash"], items_hash=meta["items_hash"], model_id=mode_id,
        model_revision=f"murk {murk.__version__}", depth_backend=current["depth_backend"],
        depth_model=current.get("depth_model", ""), depth_revision=current.get("depth_revision", ""),
        monitor_threshold_m=threshold_m, pipeline_check=0, n_visual_tokens=-1, kind="monitor",
        depth_approximate=current["depth_approximate"], run_id=RUN_ID)
    done[mode_id] = murk_results.open_readout_store(stores[mode_id], table["image_id"], table["category"], attrs,
                                            inputs)["done"].values.copy()
todo = [i for i in range(len(table)) if not all(d[i] for d in done.values())]
# the deployable mode's depth: the backend the depth stage used, applied to each degraded image
depth_backend = scene.backend_from_record(current)
print(f"{len(todo)} of {len(table)} images to estimate (depth backend of the deployable mode: "
      f"{depth_backend.name}{', an approximation that ignores the image' if depth_backend.approximate else ''})")

# %% [markdown]
# ## The loop: render → estimate → write
#
# As in the read-out stage, but the conditions are rendered without the box
# (`marker=False`) and `murk.monitor.monitor_readouts` (oracle) and
# `murk.monitor.deployable_readouts` turn each into V̂ and its read-outs; they
# are the same for every task. Bad input (a missing, truncated or
# undecodable image, a missing depth map or one of another shape) and a failed
# rendering are recorded per image with their reason, and the loop goes on.

# %%
partner = protocol.shuffled_partner(len(table), cfg["items"]["shuffle_offset"])
skipped = {}
for i in core.bar(todo, desc="monitor", unit="img"):
    row = table.iloc[i]
    try:
        x = scene.item_inputs(table, i, partner[i], meta["image_dir"], current["path"], cfg)
    except (FileNotFoundError, ValueError, OSError) as e:  # bad input: record it, keep going, lose nothing
        skipped[int(row["image_id"])] = str(e)
        for mode_id, store in stores.items():
            murk_results.write_missing(store, i, str(e), inputs[i])
        continue
    try:
        conditions = {(arm, level): shown for arm, level, shown in scene.render_conditions(
            x["image"], x["depth_m"], x["bbox"], x["partner_image"], seed=meta["seed"],
            image_id=int(row["image_id"]), config=cfg, marker=False)}
    except (ValueError, OSError) as e:  # the same for a rendering that fails on this image's input
        skipped[int(row["image_id"])] = f"rendering failed: {e}"
        for mode_id, store in stores.items():
            murk_results.write_missing(store, i, f"rendering failed: {e}", inputs[i])
        continue
    for mode_id, store in stores.items():
        if done[mode_id][i]:
            continue
        try:
            if mode_id == monitor.MONITOR_ID:
                out = monitor.monitor_readouts(conditions, {("clean", 0): x["depth_m"],
                                                            ("shuffled", 0): x["partner_depth_m"]}, threshold_m=threshold_m)
            else:
                out = monitor.deployable_readouts(conditions, depth_backend, int(row["image_id"]), threshold_m=threshold_m)
        except (FileNotFoundError, ValueError, OSError) as e:   # e.g. the depth backend fails on a degraded image
            skipped[int(row["image_id"])] = f"{mode_id}: {e}"
            murk_results.write_missing(store, i, f"{mode_id}: {e}", inputs[i])
            continue
        results = {}
        for (arm, level), r in out.items():
            r = {k: r.get(k, np.nan) for k in core.READOUTS} | {k: "" for k in core.TEXT_READOUTS}
            for task in core.TASKS:
                results[(arm, level, task)] = r
        murk_results.write_image(store, i, results, inputs[i])
print("monitor: every item processed" if not skipped else
      f"monitor: {len(skipped)} item(s) skipped, recorded as missing:\n"
      + "\n".join(f"  image {k}: {v}" for k, v in skipped.items()))

# %% [markdown]
# Quick look: median V̂ against the true V in both physical arms, oracle (solid) and
# deployable (dotted); the dashed line is V̂ = V.

# %%
fig, ax = plt.subplots(figsize=(4.5, 3.2))
for mode_id, style in zip(monitor.MONITOR_IDS, ("-o", ":s")):
    ds = xr.open_zarr(stores[mode_id], consolidated=False)
    vhat = ds["value"].sel(task="t2", readout="visibility_hat_m")
    print(f"{mode_id}: {int(ds['done'].sum())} of {ds.sizes['image']} images")
    for arm in ("fog", "underwater"):
        ax.plot(scene.SWEEP_M, np.nanmedian(vhat.sel(arm=arm).values[1:], axis=-1), style,
                label=f"{arm}, {'oracle' if mode_id == monitor.MONITOR_ID else 'deployable'}")
ax.plot(scene.SWEEP_M, scene.SWEEP_M, "k--", lw=1)
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("true V (m)")
ax.set_ylabel("median V̂ (m)")
ax.legend(fontsize=7)
fig.tight_layout()

# %% [markdown]
# The run's identity (`murk.pipeline.run_id`), as the store's attributes record it.

# %%
#| label: murk-identity
display(pipeline.identity_bundle(run_id=RUN_ID), raw=True)
