"""A synthetic output root with known curves (no VLM needed): a collapse, a confidence lag, a wording effect.

Two models, 30 images. Accuracy falls from 1 on the clean image to chance with its
mid-way at 12 m in fog and 25 m under water; the internal and verbalized
confidences stay flat (they never cross: W is a lower bound, a lag); the main
abstain option follows the errors while "I don't know" is never chosen (a wording
effect); the blank and shuffled controls are at chance; the ImageNet-C severities
leave accuracy near its clean value and their equivalent visibilities lie far
above the failure band.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import xarray as xr

from murk import cube, items, paths, physics

MODELS = ["org/synthetic-a", "murk-tiny/synthetic-b"]   # the second is a pipeline check
N_IMAGES = 30
V_HALF_M = {"fog": 12.0, "underwater": 25.0}
V_EQ_M = (110.0, 82.0, 67.0, 65.0, 55.0)   # per severity, every image (nominal equivalence)


def accuracy_curve(level: int, v_half: float, chance: float = 0.25) -> float:
    """Accuracy that falls from 1 (clean) to ``chance`` with its midway at ``v_half`` metres."""
    if level == 0:
        return 1.0
    v = physics.SWEEP_M[level - 1]
    return chance + (1 - chance) / (1 + (v_half / v) ** 4)


def write_root(root: Path) -> Path:
    """Write items, two read-out stores and a nominal equivalence under ``root``; returns it."""
    root = Path(root)
    ids = list(range(100, 100 + N_IMAGES))
    table = items.pd.DataFrame({"image_id": ids, "category": ["car"] * N_IMAGES})
    root.mkdir(parents=True, exist_ok=True)
    (root / "items.json").write_text("[]")
    (root / "items_meta.json").write_text(json.dumps({"config_hash": "c" * 64, "items_hash": "i" * 64,
                                                      "seed": 1, "n_items_requested": N_IMAGES}))
    rng = np.random.default_rng(0)
    for k, model in enumerate(MODELS):
        store = paths.readout_store(model, root)
        cube.open_readout_store(store, table["image_id"], table["category"], {
            "config_hash": "c" * 64, "items_hash": "i" * 64, "model_id": model, "model_revision": "r",
            "depth_backend": "constant-13.8m", "depth_approximate": 1, "pipeline_check": k,
            "n_visual_tokens": 64})
        for i in range(N_IMAGES):
            res = {}
            for arm, lvl in cube.CONDITIONS:
                for task in cube.TASKS:
                    chance = 0.25 if task == "t2" else 0.5
                    p_acc = {"clean": 1.0, "blank": chance, "shuffled": chance}.get(arm) or (
                        accuracy_curve(lvl, V_HALF_M[arm], chance) if arm != "imagenet_c" else 0.97)
                    ok = float(rng.random() < p_acc)
                    r = {k_: np.nan for k_ in cube.READOUTS} | {k_: "" for k_ in cube.TEXT_READOUTS}
                    # c_int: 0.9 on correct answers, 0.9 or 1.0 on wrong ones (flat: it never crosses)
                    r.update({"answer": 0.0, "correct": ok, "c_int": 0.9 if ok else float(rng.choice([0.9, 1.0])),
                              "verbal_conf": 0.9, "abstain": float(not ok and rng.random() < 0.9),
                              "abstain2": 0.0, "option_mass": 0.99, "verbal_text": "A Confidence: 90",
                              "top_token": "A"})
                    res[(arm, lvl, task)] = r
            cube.write_image(store, i, res)
    veq = np.broadcast_to(np.asarray(V_EQ_M), (N_IMAGES, 5)) * rng.uniform(0.8, 1.25, (N_IMAGES, 5))
    nds = xr.Dataset({"v_eq_gain_m": (("image", "severity"), veq), "v_eq_std_ratio_m": (("image", "severity"), 1.5 * veq),
                      "gain": (("image", "severity"), np.full((N_IMAGES, 5), 0.5)),
                      "std_ratio": (("image", "severity"), np.full((N_IMAGES, 5), 0.6))},
                     coords={"image": ids, "severity": [1, 2, 3, 4, 5]},
                     attrs={"depth_backend": "constant-13.8m", "depth_approximate": 1})
    paths.analysis_dir(root).mkdir(parents=True, exist_ok=True)
    nds.to_netcdf(paths.analysis_dir(root) / "nominal_equivalence.nc")
    return root
