"""A synthetic output root with known curves (no VLM needed): a collapse, a confidence lag, a wording effect.

Two models, 30 images. Accuracy falls from its clean value (1 for model a,
``CLEAN_B`` for model b) to chance with its mid-way at 12 m in fog and 25 m under
water; the internal and verbalized confidences stay flat (they never cross: W is
a lower bound, a lag); the main abstain option rises as accuracy falls — for model
a it follows the errors, reaching its mid-way value only in murkier conditions
than accuracy (a lag), for model b it rises exactly as accuracy falls (its
mid-way at accuracy's: no lag) — while "I don't know" is never chosen (a wording
effect, and an abstain rate that never rises: W a lower bound); the blank and
shuffled controls are at chance; the ImageNet-C severities have fixed numbers of
correct images (``IMAGENET_C_CORRECT``: model a's accuracy falls below its clean
value, by most at severity 3; model b's lies *above* its clean value, by most at
severity 2), and their equivalent visibilities lie far above the failure band.
Model b's accuracy and abstentions are deterministic (the first images are the
correct ones), so that its curves are the known ones exactly.

A second variant (:data:`BARE`, ``write_root(root, **BARE)``) is the same design
without the sections that need more than the read-outs: no nominal equivalence,
no verbal wording variants asked, no parseable verbalized confidence, and two models
whose ids share their last part (two local folders ``…/run1 <img …>/final``,
``…/run2/final``); the first folder's name holds HTML, a Markdown link, mathtext, a
Typst rule, a citation, emphasis, code, a table pipe and a Typst shorthand
(:data:`HOSTILE_FOLDER`), which the paper shows as written (issue 49).

Read-out health (issue 12): model a puts 0.99 of its first-token probability on
the option letters, gives a parseable verbalized confidence on nine images in ten
(the tenth ends without one), and is asked the wordings v2/v3 on its first
``N_VERBAL`` images; model b (a pipeline check) puts 0.3 there (below the 0.5
threshold: it gets the †) and never gives a parseable confidence: every
continuation runs to the token limit (``"Confidence: 1"`` cut).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import xarray as xr

from murk import scene
from murk.core import _paths as paths
from murk.protocol import _items as items
from murk.results import _cube as cube
from murk.scene import _physics as physics

MODELS = ["org/synthetic-a", "murk-tiny/synthetic-b"]   # the second is a pipeline check
N_IMAGES = 30
V_HALF_M = {"fog": 12.0, "underwater": 25.0}
V_EQ_M = (110.0, 82.0, 67.0, 65.0, 55.0)   # per severity, every image (nominal equivalence)
OPTION_MASS = (0.99, 0.3)                  # per model: a healthy one, and one below the 0.5 threshold
N_VERBAL = 10                              # images also asked the wordings v2, v3
PARSE_RATE_A = 0.9                         # model a: every tenth image has no parseable confidence
IGNORED_A = {"do_sample": True, "temperature": 0.7, "top_k": 20}   # model a's generation config asked for sampling
CLEAN_B = 0.8                              # model b's clean accuracy (every arm's clean image)
#: custom code model a's checkpoint declared (auto_map) and its read-out did not run (VLM.custom_code_not_run)
CUSTOM_CODE_NOT_RUN_A = {"config.json AutoModelForImageTextToText":
                         "modeling_synth.SynthForConditionalGeneration -> Qwen3VLForConditionalGeneration"}
#: correct images (of N_IMAGES) at ImageNet-C severities 1-5, per model index, every task
IMAGENET_C_CORRECT = ((30, 29, 27, 28, 29), (27, 29, 28, 26, 25))
#: a local folder's name made of markup of every kind the paper passes through (HTML with a script, a Markdown
#: link to javascript:, mathtext, a Typst rule, a citation, emphasis, code, a table pipe, Typst's ellipsis
#: shorthand): the BARE variant's first model, which the paper must show as written (issue 49, item 2)
HOSTILE_FOLDER = ("run1 <img src=x onerror=document.title='pwned'> [x](javascript:document.title='pwned') $x^2$ "
                  "@ref *b* `c` #set page(width: 1cm) a|b...")
#: the variant root without nominal equivalence, verbal wordings and parseable verbal confidence
BARE = {"models": [f"runs/{HOSTILE_FOLDER}/final", "runs/run2/final"], "nominal": False, "n_verbal": 0,
        "parse": False, "monitor": False, "diagnostic": True}
#: the variant root with a subset model (issue 39): model a alone, read out on the first N_SUBSET images only (the
#: monitor on all of them), without the nominal equivalence
N_SUBSET = 12
SUBSET = {"models": MODELS[:1], "n_run": {0: N_SUBSET}, "nominal": False}


def accuracy_curve(level: int, v_half: float, chance: float = 0.25, clean: float = 1.0) -> float:
    """Accuracy that falls from ``clean`` (level 0) to ``chance`` with its midway at ``v_half`` metres."""
    if level == 0:
        return clean
    v = physics.SWEEP_M[level - 1]
    return chance + (clean - chance) / (1 + (v_half / v) ** 4)


def largest_imagenet_c_change(k: int) -> tuple[int, float]:
    """The known largest change (by magnitude) of model ``k``'s accuracy at an ImageNet-C severity from its clean
    accuracy: (severity, change)."""
    clean = 1.0 if k == 0 else round(CLEAN_B * N_IMAGES) / N_IMAGES
    changes = [n / N_IMAGES - clean for n in IMAGENET_C_CORRECT[k]]
    i = max(range(5), key=lambda j: abs(changes[j]))
    return i + 1, changes[i]


def write_root(root: Path, models=None, nominal: bool = True, n_verbal: int = N_VERBAL, parse: bool = True,
               monitor: bool = True, diagnostic: bool = False, n_run: dict | None = None) -> Path:
    """Write items, two read-out stores, the deployable monitor's store and a nominal equivalence under ``root``;
    returns it.

    ``models`` (default :data:`MODELS`), ``nominal`` (write the nominal equivalence), ``n_verbal`` (images asked
    the wordings v2, v3), ``parse`` (model a gives parseable verbalized confidences) and ``monitor`` (write the
    deployable monitor, :func:`write_monitor`) make the variants (:data:`BARE`). ``diagnostic`` gives the first
    model a confounded design (blank-image t2 accuracy 0, below chance; "No" to every t3
    question on the blank image) and the second an unconfounded one (every control's answers spread evenly over
    the options); otherwise every answer is option 0. ``n_run`` ({model index: N}) reads a model out on the first
    N images only (a subset model, its entry's ``n_items``: :data:`SUBSET`)."""
    models = MODELS if models is None else list(models)
    root = Path(root)
    ids = list(range(100, 100 + N_IMAGES))
    table = items.pd.DataFrame({"image_id": ids, "category": ["car"] * N_IMAGES})
    root.mkdir(parents=True, exist_ok=True)
    (root / "items.json").write_text("[]")
    (root / "items_meta.json").write_text(json.dumps({"config_hash": "c" * 64, "items_hash": "i" * 64,
                                                      "seed": 1, "n_items_requested": N_IMAGES}))
    rng = np.random.default_rng(0)
    for k, model in enumerate(models):
        store = paths.readout_store(model, root)
        # model a records what its generation config asked for, its loading options and the custom code its
        # checkpoint declared that was not run; model b (a store of an older murk) records none of them
        extra = ({"ignored_generation_settings": json.dumps(IGNORED_A), "trust_remote_code": 0, "allow_pickle": 0,
                  "custom_code_not_run": json.dumps(CUSTOM_CODE_NOT_RUN_A)} if k == 0 else {})
        n_k = N_IMAGES if n_run is None else int(n_run.get(k, N_IMAGES))
        cube.open_readout_store(store, table["image_id"][:n_k], table["category"][:n_k], {
            "config_hash": "c" * 64, "items_hash": "i" * 64, "model_id": model, "model_revision": "r",
            "depth_backend": "constant-13.8m", "depth_approximate": 1, "pipeline_check": k,
            "n_visual_tokens": 64, "n_verbal_items": n_verbal, **extra})
        for i in range(n_k):
            res = {}
            for arm, lvl in scene.CONDITIONS:
                for task in cube.TASKS:
                    chance = 0.25 if task == "t2" else 0.5
                    top = 1.0 if k == 0 else CLEAN_B
                    if arm == "imagenet_c":      # fixed numbers of correct images, the first ones
                        ok = float(i < IMAGENET_C_CORRECT[k][lvl - 1])
                    elif arm in ("blank", "shuffled"):
                        ok = float(rng.random() < chance)
                    else:
                        p_acc = accuracy_curve(lvl, V_HALF_M.get(arm, 1.0), chance, top) if arm != "clean" else top
                        ok = float(rng.random() < p_acc) if k == 0 else float(i < round(p_acc * N_IMAGES))
                    n_opt = 4 if task == "t2" else 2
                    answer = 0
                    if diagnostic and arm in ("blank", "shuffled"):
                        if k == 0 and arm == "blank":   # the confounded design: t2 never right, t3 always "No"
                            answer = 1 if task != "t2" else 0
                            ok = float(task == "t3_false") if task != "t2" else 0.0
                        elif k == 1:   # the unconfounded one: answers spread over the options, right at chance
                            answer = i % n_opt
                            ok = float((i // n_opt) % n_opt == 0)
                    r = {k_: np.nan for k_ in cube.READOUTS} | {k_: "" for k_ in cube.TEXT_READOUTS}
                    # c_int: 0.9 on correct answers, 0.9 or 1.0 on wrong ones (flat: it never crosses)
                    r.update({"answer": float(answer), "correct": ok, "c_int": 0.9 if ok else float(rng.choice([0.9, 1.0])),
                              "abstain2": 0.0, "option_mass": OPTION_MASS[k], "top_token": "A"})
                    if k == 0 or arm in ("imagenet_c", "blank", "shuffled"):   # model a: follows the errors (a lag)
                        r["abstain"] = float(not ok and rng.random() < 0.9)
                    else:   # model b: a share (top - p) / (top - chance), mid-way where accuracy's is: no lag
                        share = min(max((top - p_acc) / (top - chance), 0.0), 1.0)
                        r["abstain"] = float(i >= N_IMAGES - round(share * N_IMAGES))
                    # the option distribution (schema 4): the answer's option at c_int, the rest shared; the target is
                    # the answer when correct, the next option otherwise; the abstain letters' shares follow the decisions
                    rest = (1.0 - r["c_int"]) / (n_opt - 1)
                    r.update({f"p_option_{j}": (r["c_int"] if j == answer else rest) if j < n_opt else np.nan
                              for j in range(4)})
                    r.update({"target": float(answer if ok else (answer + 1) % n_opt),
                              "p_abstain": 0.6 if r["abstain"] else 0.1,
                              "p_abstain2": 0.05})
                    if k == 0 and parse:   # parsed on nine images in ten, always ended at end-of-sequence
                        parsed = i % 10 != 0
                        r.update({"verbal_conf": 0.9 if parsed else np.nan, "verbal_stop": 0.0,
                                  "verbal_text": "A Confidence: 90" if parsed else "A"})
                    else:        # cut by the token limit every time: missing
                        r.update({"verbal_conf": np.nan, "verbal_stop": 1.0, "verbal_text": "A. car Confidence: 1"})
                    if i < n_verbal:
                        for w, v in (("v2", 0.8), ("v3", 0.7)):
                            r.update({f"verbal_conf_{w}": v if k == 0 else np.nan, f"verbal_stop_{w}": float(k),
                                      f"verbal_text_{w}": f"Confidence: {round(100 * v)}" if k == 0 else "Confidence: 1"})
                    res[(arm, lvl, task)] = r
            cube.write_image(store, i, res)
    if monitor:
        write_monitor(root, table)
    if not nominal:
        return root
    veq = np.broadcast_to(np.asarray(V_EQ_M), (N_IMAGES, 5)) * rng.uniform(0.8, 1.25, (N_IMAGES, 5))
    nds = xr.Dataset({"v_eq_gain_m": (("image", "severity"), veq), "v_eq_std_ratio_m": (("image", "severity"), 1.5 * veq),
                      "gain": (("image", "severity"), np.full((N_IMAGES, 5), 0.5)),
                      "std_ratio": (("image", "severity"), np.full((N_IMAGES, 5), 0.6))},
                     coords={"image": ids, "severity": [1, 2, 3, 4, 5]},
                     attrs={"depth_backend": "constant-13.8m", "depth_approximate": 1})
    paths.analysis_dir(root).mkdir(parents=True, exist_ok=True)
    nds.to_netcdf(paths.analysis_dir(root) / "nominal_equivalence.nc")
    return root


def write_monitor(root: Path, table) -> Path:
    """The deployable monitor's store of a perfect monitor: V̂ = V on the sweep levels (a point estimate), a lower
    bound at its cap on the clean image and the ImageNet-C severities, an upper bound (opaque) on the blank image.
    Only the deployable mode: the oracle's sections say that its stage did not run."""
    from murk.monitor import _estimator
    from murk.monitor import _gate
    from murk.monitor import _monitor as mon

    model = mon.MONITOR_DEPLOYABLE_ID
    store = paths.readout_store(model, root)
    cube.open_readout_store(store, table["image_id"], table["category"], {
        "config_hash": "c" * 64, "items_hash": "i" * 64, "model_id": model, "model_revision": "r",
        "depth_backend": "constant-13.8m", "depth_approximate": 1, "pipeline_check": 0, "n_visual_tokens": -1,
        "kind": "monitor", "monitor_threshold_m": _gate.DEFAULT_THRESHOLD_M})
    for i in range(len(table)):
        res = {}
        for arm, lvl in scene.CONDITIONS:
            if arm in ("fog", "underwater"):
                v, code = float(physics.SWEEP_M[lvl - 1]), 0.0
            elif arm == "blank":
                v, code = 13.8, -1.0
            else:
                v, code = _estimator.CAP_M, 1.0
            r = {k_: np.nan for k_ in cube.READOUTS} | {k_: "" for k_ in cube.TEXT_READOUTS}
            r.update({"visibility_hat_m": v, "visibility_hat_censored": code,
                      "visibility_hat_arm": mon.ARM_CODE["underwater" if arm == "underwater" else "fog"],
                      "c_int": float(_gate.visibility_confidence(_gate.certified_visibility(v, code))),
                      "abstain": float(_gate.gate_decisions(v, _gate.DEFAULT_THRESHOLD_M, code))})
            for task in cube.TASKS:
                res[(arm, lvl, task)] = r
        cube.write_image(store, i, res)
    return store
