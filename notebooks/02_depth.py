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
# pixel at 13.8 m; the cube and the paper name the backend used.

# %% tags=["parameters"]
backend = "auto"   # "auto" | "depth-anything-v2" | "constant"; auto = constant when MURK_OFFLINE=1
model = "depth-anything/Depth-Anything-V2-Metric-Outdoor-Small-hf"  # hub id or local folder
output_dir = None

# %%
import json

import matplotlib.pyplot as plt
import numpy as np

from murk import depth, pipeline

folder = pipeline.stage_depth(backend=backend, model=model, output_dir=output_dir)
manifest = json.loads((folder / "manifest.json").read_text())
print({k: v for k, v in manifest.items() if k != "image_ids"})

# %% [markdown]
# Quick look: the median depth of each image (the spec reports 13.8 m as the
# median over images of the per-image median for Depth Anything V2 on its 1000 items).

# %%
medians = np.array([np.median(depth.load_depth(folder, i)) for i in manifest["image_ids"]])
print(f"median over images of the median scene depth: {np.median(medians):.1f} m")
fig, ax = plt.subplots(figsize=(5, 3))
ax.hist(medians, bins=20, color="#4477AA")
ax.set_xlabel("median scene depth (m)")
ax.set_ylabel("images")
fig.tight_layout()
