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
# # Stage 1 · select: COCO scenes → items
#
# Draws the study's items from COCO (spec Sec. III): images with a vehicle or
# outdoor object and a boxable target instance; one target per image, chosen
# inversely to its category's frequency; prior-matched distractors for the
# 4-way identification task t2 and the verification task t3. Writes
# `items.json`, `items_meta.json` (config hash, items hash) and `items_report.json`
# (candidate count, guesser statistic, target shares) under the output root, and
# freezes the run: the first select of `run_name` records both hashes (under
# `data/frozen/`, or `$MURK_FROZEN_DIR`); a later select of the same run name with
# another config or other items is refused.

# %% tags=["parameters"]
coco_dir = None      # folder in COCO's layout; None: $MURK_COCO_DIR
split = "val2017"    # the study draws from val2017
n_items = 8          # the study: 1000 (smoke-sized default)
seed = 1             # the study: 1
output_dir = None    # None: $MURK_OUTPUT_DIR or outputs/
run_name = None      # frozen record name; None: "offline-demo" if MURK_OFFLINE else "demo"

# %%
import json
from collections import Counter

import matplotlib.pyplot as plt

from murk import pipeline

from murk import paths

table = pipeline.stage_select(coco_dir=coco_dir, n_items=n_items, seed=seed, output_dir=output_dir, split=split,
                              run_name=run_name)
_, meta = pipeline.read_items(output_dir)
print(f"run {meta['run_name']!r}: {len(table)} items; config hash {meta['config_hash'][:12]}, "
      f"items hash {meta['items_hash'][:12]}")
table[["image_id", "category", "t2_options", "t2_answer_index", "t3_distractor"]].head(10)

# %% [markdown]
# Checks of the selection (spec Sec. III): the candidate count (1146 on full
# val2017), the guesser that always answers the most frequent target category
# (0.29 on t2 for the spec's 1000 items; chance 0.25) and the share of each
# target category.

# %%
report = json.loads((paths.items_file(output_dir).with_name("items_report.json")).read_text())
print(f"{report['n_candidates']} candidates, {report['n_items']} items from {report['annotation_file']}")
print(f"guesser '{report['guesser_category']}': t2 accuracy {report['guesser_accuracy_t2']:.3f} "
      f"(shown in {report['guesser_option_share']:.2f} of the items; chance {report['chance_t2']:.2f}); "
      f"prior guesser {report['prior_guesser_accuracy_t2']:.3f}")
{name: round(share, 3) for name, share in report["target_share"].items()}

# %% [markdown]
# Quick look: target categories (selection is inverse to frequency, so no
# single category should dominate) and the categories offered as distractors.

# %%
targets = Counter(table["category"])
distractors = Counter(name for opts, k in zip(table["t2_options"], table["t2_answer_index"])
                      for j, name in enumerate(opts) if j != k)
fig, axes = plt.subplots(1, 2, figsize=(10, 3.5), sharey=True)
for ax, counts, title in zip(axes, (targets, distractors), ("targets", "t2 distractors")):
    names = sorted(counts, key=counts.get, reverse=True)[:15]
    ax.barh(names[::-1], [counts[n] for n in names[::-1]], color="#4477AA")
    ax.set_title(title)
    ax.set_xlabel("items")
fig.tight_layout()
