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
# # Stage 4 · analyse: cube → scores, crossings, tables, figures, numbers
#
# Merges the models' read-out stores into the cube (`cube.zarr`, dims
# model × arm × level × task × image × readout), then computes from one paired
# bootstrap draw over images (1000 resamples per condition value, 2000 for
# crossing points; spec Sec. III): the condition means, ECE and AUROC of the
# confidences, coverage and risk of the abstain options, the crossing
# visibilities V_acc and V_aware, the blind-spot width W = log10(V_acc / V_aware)
# (≥ when the awareness crossing is censored), the blank-floor variant of V_acc,
# the monotonicity counts, the confident errors and the reliability data. All
# of it goes into `analysis/scores.nc` (a `stat` coordinate: point / lo / hi),
# the tables (`analysis/*.md`), the figures and the flat numbers file that the
# paper reads. Nothing here is typed by hand.

# %% tags=["parameters"]
models = ["murk-tiny/smolvlm", "murk-tiny/qwen3vl"]   # models whose read-out stores form the cube
shard_size = None     # the read-outs' shard size (None: one store per model)
output_dir = None

# %%
from IPython.display import Image, Markdown, display

from murk import paths, report

res = report.stage_analyse(models, output_dir=output_dir, shard_size=shard_size)
cube = res["cube"]
print(cube)
if cube.attrs.get("pipeline_check"):
    display(Markdown("**" + cube.attrs["note"] + "**"))

# %% [markdown]
# ## Tables (files under `analysis/`, included by the paper)

# %%
for name, what in report.TABLES.items():
    display(Markdown(f"**{name}**: {what}"))
    display(Markdown((paths.analysis_dir(output_dir) / f"{name}.md").read_text()))

# %% [markdown]
# ## The scores dataset

# %%
res["scores"]

# %% [markdown]
# ## Figures (files under `figures/`, used by the paper)

# %%
for name, files in res["figures"].items():
    print(name)
    display(Image(filename=str(files[0]), width=640))
