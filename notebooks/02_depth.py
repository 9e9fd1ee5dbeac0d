# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Stage 2 · depth: metric depth z (m) of each clean image
#
# Depth Anything V2 (metric, outdoor, small) through transformers, clipped to
# [0.5, 80] m and estimated on the clean image (spec Sec. III). Without weights
# (`MURK_OFFLINE=1`) the explicitly approximate `constant` backend puts every
# pixel at 13.8 m; `folder` reads precomputed `<image_id>.npy` maps (metres) from the
# folder given as `model`. The cube and the paper name the backend used.
#
# This stage also draws Figure 2 (one scene at six levels) and computes Table VII
# (the nominal equivalence of the ImageNet-C severities), which need the depth.

# %% tags=["parameters"]
backend = "auto"   # "auto" | "depth-anything-v2" | "folder" | "constant"; auto = constant when MURK_OFFLINE=1
model = "depth-anything/Depth-Anything-V2-Metric-Outdoor-Small-hf"  # hub id or local folder (folder: the maps)
output_dir = None

# %%
import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from murk import depth, pipeline

folder = pipeline.stage_depth(backend=backend, model=model, output_dir=output_dir)
manifest = json.loads((folder / "manifest.json").read_text())
print({k: v for k, v in manifest.items() if k not in ("image_ids", "per_image")})

# %% [markdown]
# Quick look: the median over images of the median scene depth (the spec reports
# 13.8 m for Depth Anything V2 on its 1000 items); the depth stage writes it into
# the manifest.

# %%
medians = np.array([np.median(depth.load_depth(folder, i)) for i in manifest["image_ids"]])
print(f"median over images of the median scene depth: {manifest['median_scene_depth_m']:.1f} m "
      f"({manifest['depth_backend']}{', approximate' if manifest['depth_approximate'] else ''})")
fig, ax = plt.subplots(figsize=(5, 3))
ax.hist(medians, bins=20, color="#4477AA")
ax.set_xlabel("median scene depth (m)")
ax.set_ylabel("images")
fig.tight_layout()

# %% [markdown]
# ## Figure 2: one scene at six levels, both arms
#
# The first item, as presented to the models (degraded, then the 8-px box drawn).

# %%
from murk import config, figures, paths, render

table, meta = pipeline.read_items(output_dir)
row = table.iloc[0]
img = render.load_image(Path(meta["image_dir"]) / row["file_name"])
size = render.presented_size(img.shape[1], img.shape[0], config.load_config()["render"]["max_side_px"])
img = render.resize_image(img, size)
bbox = render.scale_bbox(row["bbox"], (int(row["width"]), int(row["height"])), size)
fig = figures.plot_scene_levels(img, depth.load_depth(folder, int(row["image_id"])), bbox,
                                depth_label=manifest["depth_backend"],
                                approximate=bool(manifest["depth_approximate"]))
figures.save(fig, paths.figures_dir(output_dir), "scene_levels")

# %% [markdown]
# ## Table VII: ImageNet-C fog severities on the visibility axis
#
# For each image and severity, the fog visibility whose rendering (same image, its
# own depth) retains the same contrast gain; the luma std ratio is the check.
# Written to `analysis/nominal_equivalence.nc` and `analysis/tbl-nominal.md`.

# %%
from murk import nominal

nominal_ds = pipeline.stage_nominal(output_dir=output_dir)
tbl = nominal.table_vii(nominal_ds)
print(tbl[["median_v_eq_gain_m", "spread_p90_p10", "median_v_eq_std_ratio_m", "n_images"]].round(1))
print(f"monotone share: {tbl.attrs['monotone_share']:.2f} of {tbl.attrs['monotone_n']} images; "
      f"depth {nominal_ds.attrs['depth_backend']}")
