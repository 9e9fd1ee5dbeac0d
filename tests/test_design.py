"""Design variants (murk.protocol; issue 26, item 1) and the marker diagnostic (item 2).

The spec's pilot (Sec. III) differs from the study in five choices; each is one run setting, and
data/pilot.yaml sets all five. These tests check each choice where it enters (the configuration and its
hash, the selection, the prompts, the renderings, the analysis' levels and read-outs) and that the study's
design leaves the frozen configuration and its hash as they are.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import yaml

from murk import report
from murk.core import settings
from murk.core import _config as config
from murk.protocol import _design as design
from murk.protocol import _item_files
from murk.protocol import _items as items
from murk.protocol import _prompts as prompts
from murk.results import _cube as cube
from murk.results import _diagnostics as diagnostics
from murk.results import _metrics as metrics
from murk.scene import _physics as physics
from murk.scene import _render as render

import stages  # tests/stages.py: the shared COCO sample

ROOT = Path(__file__).resolve().parents[1]
COCO = stages.SAMPLE
ANN = COCO / "annotations" / "instances_val2017.json"
PILOT = yaml.safe_load((ROOT / "data" / "pilot.yaml").read_text())


def test_the_studys_design_is_the_frozen_configuration_and_its_hash():
    cfg = config.load_config()
    for given in (None, {}, {"binary_task": "verification", "distractors": "prior-matched", "box_width_px": 8,
                             "sweep_end_m": 1.953125, "abstain_wordings": 2}):
        same = design.design_config(cfg, given)
        assert same == cfg and config.config_hash(same) == config.config_hash(cfg)
        assert design.is_study_design(same) and report.describe_design(same).startswith("This run uses the study's")


def test_the_pilot_file_sets_each_of_the_five_choices_as_the_spec_describes_them():
    cfg = config.load_config()
    checked = {k: settings.check_setting(k, v, "data/pilot.yaml") for k, v in PILOT.items()}
    pilot = design.design_config(cfg, design.design_from_settings(checked))
    assert design.differences(pilot) == {"binary_task": "existence", "distractors": "uniform", "box_width_px": 3,
                                         "sweep_end_m": 3.90625, "abstain_wordings": 1}
    assert checked["n_items"] == 200
    assert config.config_hash(pilot) != config.config_hash(cfg)        # a variant is its own run
    assert config.config_hash(config.load_config()) == config.config_hash(cfg)   # the frozen file is untouched
    assert pilot["render"]["box_width_px"] == 3 and cfg["render"]["box_width_px"] == 8
    assert design.sweep_of(pilot) == [float(v) for v in physics.SWEEP_M[:-1]]    # ends at 3.9 m
    text = report.describe_design(pilot)
    assert "murk's own wording" in text and "3 px" in text and "ends at 3.9 m" in text
    assert report.design_name(pilot) == ("a design variant (an existence task, uniform distractors, a 3-px box, "
                                         "the sweep to 3.9 m, one abstain wording)")
    assert report.design_name(cfg) == "the study's design"


def test_each_choice_is_independent_and_any_mix_is_a_design():
    cfg = config.load_config()
    hashes = {config.config_hash(cfg)}
    for k, v in (("binary_task", "existence"), ("distractors", "uniform"), ("box_width_px", 3),
                 ("sweep_end_m", 3.90625), ("abstain_wordings", 1)):
        one = design.design_config(cfg, {k: v})
        assert design.differences(one) == {k: v}
        hashes.add(config.config_hash(one))
    assert len(hashes) == 6


@pytest.mark.parametrize("given, why", [({"binary_task": "counting"}, "binary_task must be one of"),
                                        ({"sweep_end_m": 5.0}, "sweep_end_m must be one of the sweep's levels"),
                                        ({"box_width": 3}, "'box_width' is not a design setting"),
                                        ({"abstain_wordings": 0}, "abstain_wordings must be 1 or 2")])
def test_a_bad_design_is_refused_naming_the_setting(given, why):
    with pytest.raises(ValueError, match=why):
        design.design_config(config.load_config(), given)


def test_the_existence_question_asks_about_the_whole_image_and_the_verification_about_the_box():
    row = prompts.EXAMPLE_ITEM
    study = prompts.questions_for_item(row, config.load_config())
    pilot = prompts.questions_for_item(row, design.design_config(config.load_config(), {"binary_task": "existence"}))
    assert study[1].stem == "Is the object inside the red box an umbrella?"
    assert pilot[1].stem == "Is there an umbrella anywhere in the image?"
    assert pilot[2].stem == "Is there a truck anywhere in the image?" and pilot[2].correct_index == 1
    assert pilot[0] == study[0]  # t2 is the same question


@stages.needs_sample
def test_uniform_distractors_keep_the_images_and_targets_and_give_rare_categories_their_share():
    cfg = config.load_config()
    main = items.select_items(ANN, n_items=37, seed=1, config=cfg)   # the sample's 37 candidates
    uni = items.select_items(ANN, n_items=37, seed=1, config=design.design_config(cfg, {"distractors": "uniform"}))
    assert list(main["image_id"]) == list(uni["image_id"]) and list(main["category"]) == list(uni["category"])
    assert list(main["t2_options"]) != list(uni["t2_options"])
    pool = items._candidate_pool(ANN, cfg)
    never = {pool.cat_name[int(c)] for c, w in zip(pool.cat_ids, pool.distractor_weight) if w == 0}

    def never_targets(t):
        return np.mean([sum(o in never for j, o in enumerate(opts) if j != k) / 3
                        for opts, k in zip(t["t2_options"], t["t2_answer_index"])])
    # the prior-matched rule never shows a category that can never be a target; uniform draws mostly those
    assert len(never) > 40 and never_targets(main) == 0.0 and never_targets(uni) > 0.5
    for t in (main, uni):  # distractors stay absent from the image and t3's is one of them
        assert all(t3 in opts and opts[k] != t3 for opts, k, t3 in zip(t["t2_options"], t["t2_answer_index"],
                                                                        t["t3_distractor"]))
    assert _item_files.items_hash(main) != _item_files.items_hash(uni)


def _cube(levels: int = 9) -> xr.Dataset:
    ds = cube.empty_model_dataset([1, 2], ["car", "bus"])
    ds["value"][:] = 0.5
    return ds


def test_a_shorter_sweep_and_one_abstain_wording_restrict_the_analysis():
    cfg = design.design_config(config.load_config(), {"sweep_end_m": 3.9, "abstain_wordings": 1})
    ds = design.restrict_to_design(_cube(), cfg)
    assert ds.sizes["level"] == 8 and float(ds["visibility_m"].sel(arm="fog")[-1]) == 3.90625
    v = ds["value"]
    assert v.sel(readout=["abstain2", "p_abstain2"]).isnull().all()
    assert not v.sel(readout=["abstain", "correct", "c_int"]).isnull().any()
    study = _cube()
    assert design.restrict_to_design(study, config.load_config()) is study


def test_a_crossing_never_reached_is_censored_at_the_designs_last_level():
    acc = np.array([1.0, 1.0, 0.99, 0.98, 0.97, 0.96, 0.95])        # never reaches (1 + 0.25) / 2
    v, c, side = metrics.crossing_visibility(physics.SWEEP_M[:7], acc, 1.0, 0.25, return_side=True)
    assert bool(c) and side == "below" and float(v) == 3.90625
    v, c = metrics.crossing_visibility(physics.SWEEP_M, np.append(acc, 0.9), 1.0, 0.25)
    assert bool(c) and float(v) == metrics.CENSOR_M == 1.953125   # the study's: 1.95 m, as before


def test_the_marker_contrast_sees_a_thin_box_diluted_by_the_encoders_patches():
    """A red box on fog grey (A = 0.8, spec Sec. III): the 3-px box's patch-averaged contrast is about 3/8 of the
    8-px box's, and near the hard-to-see threshold; the same boxes measured per pixel (patch 1) are equal."""
    grey = np.full((320, 448, 3), int(round(0.8 * 255)), np.uint8)
    c = {w: np.mean([diagnostics.marker_contrast(render.draw_box(grey, (40 + o, 30 + o, 200, 150), w), grey)
                     for o in range(16)]) for w in (3, 8)}
    full = np.linalg.norm(np.array([255 - 204, 204, 204]) / 255) / np.sqrt(3)
    assert c[8] > 2 * diagnostics.HARD_TO_SEE_CONTRAST > c[3]
    assert 0.3 < c[3] / c[8] < 0.5
    assert diagnostics.marker_contrast(render.draw_box(grey, (40, 30, 200, 150), 3), grey, patch_px=1) == \
        pytest.approx(full, rel=1e-6)
    assert np.isnan(diagnostics.marker_contrast(grey, grey))
    with pytest.raises(ValueError, match="same"):
        diagnostics.marker_contrast(grey, grey[:10])
