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
# # Stage 3 · readout: one VLM, every item × condition × question
#
# For each item the 24 conditions (clean; fog and underwater at the 8
# visibilities; ImageNet-C fog 1–5; blank and shuffled controls) are rendered
# (Eq. 1 in linear RGB, the 8-px red box drawn after the degradation), and the
# t2 and t3 questions are asked with three prompts (main with a verbalized
# confidence, abstain, abstain₂). Results go into this model's zarr store one
# image at a time: rerunning resumes and never repeats finished images.
#
# `murk-tiny/…` models are tiny randomly initialised checkpoints of the real
# architectures: their numbers are a **pipeline check**, not results.

# %% tags=["parameters"]
model = "murk-tiny/smolvlm"   # hub id, local folder, or murk-tiny/smolvlm | murk-tiny/qwen3vl
max_items = None              # None: all selected items
device = None                 # None: cuda if available, else cpu
shard = None                  # with shard_size: read out only items shard*shard_size ... (own store)
shard_size = None
n_verbal_items = 0            # the first n items are also asked verbal wordings v2, v3 (spec Table VI: 300)
output_dir = None

# %%
import matplotlib.pyplot as plt
import xarray as xr

from murk import pipeline

store = pipeline.stage_readout(model, output_dir=output_dir, max_items=max_items, device=device,
                               n_verbal_items=n_verbal_items, shard=shard, shard_size=shard_size)
if store is None:
    print("this shard lies beyond the last item: nothing to read out")
    ds = None
else:
    ds = xr.open_zarr(store, consolidated=False)
    print(f"{int(ds['done'].sum())} of {ds.sizes['image']} images read out; attrs:")
    print({k: ds.attrs[k] for k in ("model_id", "model_revision", "pipeline_check", "n_visual_tokens", "depth_backend")})

# %% [markdown]
# Quick look: t2 accuracy, mean internal confidence and abstain rate against visibility, fog arm.

# %%
if ds is not None:
    sel = ds["value"].sel(arm="fog", task="t2")
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for name in ("correct", "c_int", "abstain"):
        ax.plot(ds["visibility_m"][1:], sel.sel(readout=name).mean("image")[1:], marker="o", label=name)
    ax.set_xscale("log")
    ax.invert_xaxis()
    ax.set_xlabel("visibility V (m)")
    ax.set_title(f"{model} (fog, t2)")
    ax.legend()
    fig.tight_layout()
