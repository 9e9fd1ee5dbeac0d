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
# # Stage 3b · monitor: a visibility estimate that abstains before the VLM is asked
#
# Beyond the spec (its Sec. V suggests it and leaves it untested): for every item
# and condition, the dark channel prior (He, Sun & Tang 2009) with the known depth
# gives an estimate V̂ of the visibility (Koschmieder), from the degraded image
# without the box. Its read-outs (`c_int` = a confidence from V̂, `abstain` =
# V̂ below a threshold, `visibility_hat_m` = V̂) join the cube as the "model"
# `murk/visibility-monitor`; the analyse stage compares it with each VLM.

# %% tags=["parameters"]
threshold_m = None   # abstain threshold in metres; None: murk.monitor.DEFAULT_THRESHOLD_M
output_dir = None

# %%
import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

from murk import physics, pipeline

store = pipeline.stage_monitor(output_dir=output_dir, threshold_m=threshold_m)
ds = xr.open_zarr(store, consolidated=False)
vhat = ds["value"].sel(task="t2", readout="visibility_hat_m")
print(f"{int(ds['done'].sum())} of {ds.sizes['image']} images")

# %% [markdown]
# Quick look: median V̂ against the true V in both physical arms (the dashed line is V̂ = V).

# %%
fig, ax = plt.subplots(figsize=(4.5, 3.2))
for arm in ("fog", "underwater"):
    ax.plot(physics.SWEEP_M, np.nanmedian(vhat.sel(arm=arm).values[1:], axis=-1), "-o", label=arm)
ax.plot(physics.SWEEP_M, physics.SWEEP_M, "k--", lw=1)
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("true V (m)")
ax.set_ylabel("median V̂ (m)")
ax.legend()
fig.tight_layout()
