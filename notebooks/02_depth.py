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
# # Stage 2 · depth: metric depth z (m) of each clean image
#
# Depth Anything V2 (metric, outdoor, small) through transformers, clipped to
# [0.5, 80] m and estimated on the clean image (spec Sec. III). Without weights
# (`MURK_OFFLINE=1`) the explicitly approximate `constant` backend puts every
# pixel at the spec's median scene depth; `folder` reads precomputed
# `<image_id>.npy` maps (metres) from the folder given as `model`. The cube and
# the paper name the backend used.
#
# This stage also draws the paper's scene figure (one scene at six levels) and
# computes the nominal equivalence of the ImageNet-C severities (spec Table VII),
# which both need the depth.

# %% tags=["parameters"]
# (one parameter a line, its comment above it: papermill reads `name = value` lines)
# "auto", "depth-anything-v2", "folder" or "constant" ("auto": "constant" when MURK_OFFLINE=1);
# None: the run settings' depth_backend (data/workflow.yaml: auto)
backend = None
# hub id or local folder (folder: the maps); None: the run settings' depth_model
model = None
output_dir = None

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Image, display

from murk import core, pipeline, protocol, report
from murk import scene as murk_scene

# one writer per output root (murk.pipeline): refused, writing nothing, while another run holds it
ROOT_LOCK = pipeline.hold_for_stage(output_dir, stage="02_depth")

table, meta = protocol.read_items(output_dir)
cfg = protocol.config_of(meta)   # data/config.yaml with the run's design (murk.protocol; the study's: as it is)
max_side = cfg["render"]["max_side_px"]
# the figure and table below are outputs too: refuse (before writing) a root whose stores are of another selection
pipeline.refuse_foreign_stores(core.output_dir(output_dir), meta["config_hash"], meta["items_hash"], stage="depth")
RUN_ID = pipeline.run_id(meta["config_hash"], meta["items_hash"])   # this selection's identity (items_meta.json)
report.set_identity(run_id=RUN_ID)   # into the scene figure's file metadata

# %% [markdown]
# ## The loop: read → estimate → write
#
# For each item in order: skip it if its map is cached by the same model and
# revision from the same image content (the digest `items_meta.json` records);
# otherwise read the clean image at full resolution, estimate depth,
# resize the map to the presented size (longer side ≤ `max_side_px`) and write
# `outputs/depth/<backend>/<image_id>.npy` atomically. An image that cannot be read
# is skipped and listed; the read-out stage records it as missing.

# %%
# a parameter left at None takes its default from the run settings (data/workflow.yaml), as Snakemake does
backend, model = core.run_default("depth_backend", backend), core.run_default("depth_model", model)
# (in Lab without MURK_OFFLINE, on an offline run's root: that run's backend, as MURK_OFFLINE=1 would pick it)
if backend == "auto" and not core.offline() and core.root_depth_backend(output_dir):
    backend = core.root_depth_backend(output_dir)
    print(f"murk: backend 'auto' is {backend} here: this root's depth stage used it (an offline run's root)")
est = murk_scene.get_backend(backend, model)
folder = murk_scene.depth_cache_dir(est.name, output_dir)
folder.mkdir(parents=True, exist_ok=True)
written, skipped = [], {}
for _, row in core.bar(table.iterrows(), total=len(table), desc="depth", unit="img"):
    image_id = int(row["image_id"])
    if murk_scene.is_cached(folder, image_id, est, meta.get("image_sha256", {}).get(str(image_id))):
        continue
    try:
        img = murk_scene.load_image(Path(meta["image_dir"]) / row["file_name"], (int(row["width"]), int(row["height"])))
        size = murk_scene.presented_size(img.shape[1], img.shape[0], max_side,
                                     name=f"image {image_id} ({row['file_name']})")
    except (FileNotFoundError, ValueError, OSError) as e:  # bad input (incl. too small): skip, list, go on
        skipped[image_id] = str(e)
        continue
    murk_scene.save_depth(folder, image_id, murk_scene.resize_depth(est(img, image_id=image_id), size))
    written.append(image_id)
murk_scene.write_manifest(folder, est, table["image_id"], written=written, skipped=skipped,
                     image_sha256=meta.get("image_sha256"))   # each new map: the digest of its image
murk_scene.set_current(folder, est, output_dir, run_id=RUN_ID)  # the cache the later stages read, for this run
print(f"depth: {len(written)} written, {len(table) - len(written) - len(skipped)} cached, {len(skipped)} skipped "
      f"(recorded as missing by the read-out)")
for image_id, reason in skipped.items():
    print(f"  image {image_id}: {reason}")

# %% [markdown]
# Quick look: the median over images of the median scene depth (the spec reports
# it for Depth Anything V2 on its items); the manifest records it with the
# backend's provenance. Only the maps in the cache are read; the images without
# one are listed with the reason the loop recorded.

# %%
manifest = murk_scene.read_manifest(folder)
print({k: v for k, v in manifest.items() if k not in ("image_ids", "per_image", "skipped")})
with_map = [i for i in manifest["image_ids"] if murk_scene.has_depth(folder, i)]
for i in sorted(set(manifest["image_ids"]) - set(with_map)):
    print(f"no depth map for image {i}: {manifest.get('skipped', {}).get(str(i), 'map file missing')}")
medians = [np.median(murk_scene.load_depth(folder, i)) for i in with_map]
fig, ax = plt.subplots(figsize=(5, 3))
ax.hist(medians, bins=20, color="#4477AA")
ax.set_xlabel("median scene depth (m)")
ax.set_ylabel("images")
fig.tight_layout()

# %% [markdown]
# ## One scene across the sweep
#
# The first item with a readable image and a depth map of its presented size,
# as presented to the models: degraded first (Eq. 1 in linear RGB), then the red
# box drawn. Saved as `figures/scene_levels.png` and embedded in the paper from
# this cell. When no item has both, the figure says so (the run goes on: every
# item is then recorded as missing by the read-out).

# %%
#| label: fig-scene
#| fig-cap: "One scene across the sweep in fog (top) and under water (bottom), degraded first, the box drawn after the degradation (spec Fig. 2)."
scene, passed = None, {}
for i in range(len(table)):
    row = table.iloc[i]
    try:
        img, size = murk_scene.load_presented(Path(meta["image_dir"]) / row["file_name"], max_side,
                                          expected_size=(int(row["width"]), int(row["height"])))
        z = murk_scene.load_depth(folder, int(row["image_id"]), shape=img.shape[:2])
    except (FileNotFoundError, ValueError, OSError) as e:
        passed[int(row["image_id"])] = str(e)
        continue
    scene = row, img, size, z
    break
for image_id, reason in passed.items():
    print(f"scene figure: image {image_id} passed over: {reason}")
if scene is not None:
    row, img, size, z = scene
    print(f"scene figure: image {int(row['image_id'])} ({row['file_name']})")
    bbox = murk_scene.scale_bbox(row["bbox"], (int(row["width"]), int(row["height"])), size)
    shown = tuple(v for v in report.SCENE_LEVELS_M if v >= min(protocol.sweep_of(cfg)))   # the design's sweep
    fig = report.plot_scene_levels(img, z, bbox, shown, box_width_px=cfg["render"]["box_width_px"],
                                    depth_label=manifest["depth_backend"],
                                    approximate=bool(manifest["depth_approximate"]))
else:
    fig, ax = plt.subplots(figsize=(6, 1.5))
    ax.axis("off")
    ax.text(0.5, 0.5, f"No scene to show: none of the {len(table)} items has a readable image and a depth map\n"
                      f"(each is recorded as missing; see the colophon)", ha="center", va="center")
png, _ = report.save(fig, core.figures_dir(output_dir), "scene_levels")
display(Image(filename=str(png)))

# %% [markdown]
# ## ImageNet-C fog severities on the visibility axis
#
# For each image and severity, the fog visibility whose rendering (same image, its
# own depth) retains the same contrast gain; the luma std ratio is the check
# (`murk.scene.nominal_equivalence`). Written to `analysis/nominal_equivalence.nc`;
# the analyse stage turns it into the paper's table and figure (RQ4).

# %%
current = murk_scene.current_depth(output_dir)
attrs = {"config_hash": meta["config_hash"], "items_hash": meta["items_hash"],
         "depth_backend": current["depth_backend"], "depth_approximate": int(current["depth_approximate"]),
         "depth_model": current.get("depth_model", ""), "depth_revision": current.get("depth_revision", ""),
         "run_id": RUN_ID, "git_commit": core.git_commit()}
nominal_ds = murk_scene.nominal_equivalence(
    table, meta["image_dir"], current["path"], max_side=max_side, seed=meta["seed"],
    severities=murk_scene.IMAGENET_C_SEVERITIES,
    attrs=attrs, progress=True)
report.write_netcdf_atomic(nominal_ds, core.analysis_dir(output_dir) / "nominal_equivalence.nc")
murk_scene.table_vii(nominal_ds)[["median_v_eq_gain_m", "spread_p90_p10", "median_v_eq_std_ratio_m", "n_images"]]

# %% [markdown]
# The run's identity (`murk.pipeline.run_id`), as `depth/current.json`, the
# nominal equivalence and the scene figure's file record it.

# %%
#| label: murk-identity
display(pipeline.identity_bundle(run_id=RUN_ID), raw=True)
