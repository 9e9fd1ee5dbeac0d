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
# # Stage 1 · select: COCO scenes → items
#
# Draws the study's items from COCO (spec Sec. III): images with a vehicle or
# outdoor object and a boxable target instance; one target per image, chosen
# inversely to its category's frequency; prior-matched distractors for the
# 4-way identification task t2 and the verification task t3. Writes
# `items.json`, `items_meta.json` (config hash, items hash) and `items_report.json`
# (candidate count, guesser statistic, target shares) under the output root.
#
# The run is frozen: the first select of `run_name` records both hashes (under
# `data/frozen/`, or `$MURK_FROZEN_DIR`); a later select of the same run name with
# another config or other items is refused *before anything is written*, and so is
# a selection written into an output root whose stores belong to another one.
#
# A selected image missing from the COCO folder (offline) does not stop the run:
# the selection is defined by the annotations (so its hash stays reproducible),
# the missing files are named here, and the later stages record each one in
# `missing_reason`. Each selected image's stored size is compared with its
# annotation's (`murk.protocol.image_checks`, from the file headers): an image stored
# rotated, whose EXIF orientation (5-8) alone makes the sizes agree, is used
# transposed by every stage and listed in the paper's colophon; one of another
# size, over Pillow's pixel limit or unreadable is named here and recorded as
# missing by the later stages. Only a missing annotation file or image folder, an
# annotation of a category the file does not declare, or a box that is not four
# numbers refuses (`murk.protocol.select_items`); boxes of zero size or outside their
# image are never a target (a warning names them).

# %% tags=["parameters"]
# (one parameter a line, its comment above it: papermill reads `name = value` lines)
# folder in COCO's layout; None: $MURK_COCO_DIR
coco_dir = None
# None: the run settings' split (data/workflow.yaml: val2017, the study's split)
split = None
# None: the run settings' n_items (data/workflow.yaml, smoke-sized; the study: 1000)
n_items = None
# None: the run settings' seed (the study: 1)
seed = None
# None: $MURK_OUTPUT_DIR or outputs/
output_dir = None
# frozen record name; None: "offline-demo" if MURK_OFFLINE else "demo" (a design variant: with "-design-<its config hash>")
run_name = None
# design variant (murk.protocol: binary_task, distractors, box_width_px, sweep_end_m, abstain_wordings); None: the run settings'
design = None

# %%
from collections import Counter

import matplotlib.pyplot as plt
from IPython.display import display

from murk import core, pipeline, protocol
from murk import report as murk_report

# one writer per output root (murk.pipeline): refused, writing nothing, while another run holds it
ROOT_LOCK = pipeline.hold_for_stage(output_dir, stage="01_select")

# %% [markdown]
# ## The draw
#
# The annotation file and image folder (`MURK_COCO_DIR`, or fetched into
# `outputs/coco/` when online), the frozen configuration (`data/config.yaml`,
# spec Table III) with the run's design applied (`murk.protocol.design_config`:
# the study's design leaves it as it is; a variant such as `data/pilot.yaml`
# has its own configuration and hash, recorded in `items_meta.json`, from
# which every later stage reads it), then the selection itself
# (`murk.protocol.select_items`).

# %%
# a parameter left at None takes its default from the run settings (data/workflow.yaml), as Snakemake does
split, n_items, seed = (core.run_default(k, v) for k, v in (("split", split), ("n_items", n_items), ("seed", seed)))
if design is None:
    design = protocol.design_from_settings({k: core.run_default(k) for k in protocol.DESIGN_KEYS})
ann, image_dir = protocol.coco_files(coco_dir, split)
cfg = protocol.design_config(core.load_config(), design)
print(murk_report.describe_design(cfg))
table = protocol.select_items(ann, n_items=n_items, seed=seed, config=cfg)
table[["image_id", "category", "t2_options", "t2_answer_index", "t3_distractor"]].head(10)

# %% [markdown]
# ## Freeze, then write
#
# Two checks, both before any file is written: the output root holds no store of
# another selection (`murk.pipeline.refuse_foreign_stores`), and the config hash
# and items hash match the run name's frozen record (recorded on its first run,
# `murk.core.freeze_run`). Only then are the selected images fetched (online)
# and the three files written.
# `items_meta.json` also records each selected image's content digest
# (`image_sha256`, SHA-256 of the file; `images_sha256` over all of them), outside
# the items hash: a run that finds an image changed since (`murk.core`) runs its
# depth map and read-outs again, and the cube and paper after them.

# %%
config_hash, items_hash = core.config_hash(cfg), protocol.items_hash(table)
if run_name is None:  # a design variant has its own record: its config hash differs from the study's
    run_name = ("offline-demo" if core.offline() else "demo") + (
        "" if protocol.is_study_design(cfg) else f"-design-{config_hash[:8]}")
pipeline.refuse_foreign_stores(core.output_dir(output_dir), config_hash, items_hash, stage="select")
core.freeze_run(run_name, config_hash, items_hash, n_items=len(table), seed=seed, annotation_file=ann)
report = protocol.selection_report(table, ann, cfg)
# downloads only the selected images, if online; offline, a missing one is named (a warning) and kept
protocol.ensure_images(table["file_name"], image_dir, split, missing_ok=True)
# each image's stored size against its annotation (headers only): used as stored, transposed, or recorded missing
report["image_checks"] = protocol.image_checks(table, image_dir, progress=True)
# each image's content digest (murk.core: sha256 of the file; unchanged files through the root's cache)
digest_cache = core.DigestCache(core.cache_file(core.output_dir(output_dir)))
image_sha256 = protocol.image_digests(table, image_dir, digest_cache)
meta = {"config_hash": config_hash, "items_hash": items_hash, "run_id": pipeline.run_id(config_hash, items_hash),
        "run_name": run_name,
        "n_items": int(len(table)), "n_items_requested": int(n_items), "seed": int(seed),
        "annotation_file": str(ann), "image_dir": str(image_dir),
        "design": protocol.differences(cfg), "study_config_hash": core.config_hash(core.load_config()),
        "image_sha256": image_sha256, "images_sha256": core.combined_digest(image_sha256.values())}
protocol.save_selection(table, meta, report, output_dir)
digest_cache.save()
print(f"run {run_name!r}: {len(table)} items; config hash {config_hash[:12]}, items hash {items_hash[:12]}")
for kind, notes in report["image_checks"].items():
    for image_id, note in notes.items():
        said = {"transposed": "used transposed", "converted": "used in part"}.get(kind, "recorded as missing")
        print(f"image {image_id} {said}: {note}")

# %% [markdown]
# The run's identity (`murk.pipeline.run_id`: a digest of the two hashes), which
# every later artifact of this selection carries and every later stage checks.

# %%
#| label: murk-identity
display(pipeline.identity_bundle(run_id=meta["run_id"]), raw=True)

# %% [markdown]
# ## Checks of the selection
#
# The candidate count (the spec reports it for full val2017), the guesser that
# always answers the most frequent target category (the spec's statistic for its
# 1000 items, against chance for t2) and the share of each target category.

# %%
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
    ax.barh([murk_report.plot_text(n) for n in names[::-1]], [counts[n] for n in names[::-1]], color="#4477AA")
    ax.set_title(title)
    ax.set_xlabel("items")
fig.tight_layout()
