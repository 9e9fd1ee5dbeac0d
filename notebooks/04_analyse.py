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
# # Stage 4 · analyse: cube → means, crossings, figures, numbers
#
# Merges the models' read-out stores into the cube (`cube.zarr`, dims
# model × arm × level × task × image × readout), then computes per condition
# the image-level means with paired percentile bootstrap intervals, the
# crossing visibilities V_acc and V_aware per model and arm, the blind-spot
# width W = log10(V_acc / V_aware), the figures, the tables, and the flat
# numbers file that the paper reads. Nothing here is typed by hand.

# %% tags=["parameters"]
models = ["murk-tiny/smolvlm", "murk-tiny/qwen3vl"]   # models whose read-out stores form the cube
output_dir = None

# %%
from IPython.display import Image, Markdown, display

from murk import paths, report

res = report.stage_analyse(models, output_dir=output_dir)
cube = res["cube"]
print(cube)
if cube.attrs.get("pipeline_check"):
    display(Markdown("**" + cube.attrs["note"] + "**"))

# %% [markdown]
# ## Crossing visibilities and blind-spot widths

# %%
display(Markdown((paths.analysis_dir(output_dir) / "tbl-crossings.md").read_text()))

# %% [markdown]
# ## Figures (files under `figures/`, used by the paper)

# %%
for name, files in res["figures"].items():
    print(name)
    display(Image(filename=str(files[0]), width=640))
