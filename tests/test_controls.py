"""murk.report._controls: the design diagnostics, the box marker and the design comparison on tiny inputs."""

import numpy as np
import pandas as pd
import xarray as xr

from murk import core, report, results
from murk.report import _controls as controls

KEY = lambda m: m.replace("/", "--")  # noqa: E731
CHANCE = {"t2": 0.25, "t3": 0.5}


def _numbers(tmp_path, cell="tbl-x"):
    return report.Numbers(tmp_path / "n.json", cell=cell)


def _cube():
    """One model, the two controls, four images: t2 never right on the blank image, t3 always answered "No"."""
    coords = {"model": ["org/m"], "arm": ["blank", "shuffled"], "level": [0], "task": ["t2", "t3_true", "t3_false"],
              "image": [1, 2, 3, 4], "readout": ["answer", "correct"]}
    value = np.zeros([len(v) for v in coords.values()])
    value[..., 0] = 1.0                                              # answer: option 1 ("No" for t3)
    value[0, 1, 0, 0, :, 1] = [0, 1, 0, 0]                           # shuffled t2: one in four right
    value[0, :, 0, 2, :, 1] = 1.0                                    # t3 distractor: "No" is right
    ds = xr.Dataset({"value": (tuple(coords), value),
                     "missing_reason": (("model", "image"), np.full((1, 4), "", dtype=object))}, coords=coords)
    scores = xr.concat([ds["value"].sel(task="t2", drop=True),
                        ds["value"].sel(task=["t3_true", "t3_false"]).mean("task")],
                       dim=xr.DataArray(["t2", "t3"], dims="task", name="task")).transpose(*ds["value"].dims)
    m = scores.mean("image")
    mean = xr.concat([m, np.maximum(m - 0.2, 0), np.minimum(m + 0.2, 1)],
                     dim=xr.DataArray(list(results.STATS), dims="stat", name="stat"))
    return ds, scores, xr.Dataset({"mean": mean})


def test_diagnostics_table_states_the_floors_and_the_dominant_answer(tmp_path):
    ds, scores, sc = _cube()
    n = _numbers(tmp_path, "tbl-diagnostics")
    md, dominated = controls.diagnostics_table(
        n, ds, sc, scores, pd.DataFrame({"image_id": []}), ["org/m"], str, KEY, CHANCE, ["Yes", "No"],
        lambda k: results.resample_counts(k, 200, 0), 200, 0.95)
    assert dominated == {"No": ["org/m (1.00)"]}
    assert n["diagnostic.t3_blank_top_answer.org--m"] == "No" and n["diagnostic.t3_blank_top_share.org--m"] == "1.00"
    assert n["diagnostic.floor.blank.t2.org--m"] == results.BELOW_CHANCE            # 0 of 4 against 0.25
    assert n["diagnostic.floor.shuffled.t2.org--m"] not in (results.BELOW_CHANCE, results.ABOVE_GUESSER)
    assert n["diagnostic.floor_family"] == "4" and n["diagnostic.guesser.t2.org--m"] == "n/a"
    floors = {("blank", "t2", results.BELOW_CHANCE): [f"org/m ({report.fmt_estimate(0.0, 0.0, 0.2)})"]}
    assert n["finding.diagnostic"] == report.diagnostic_finding(floors, dominated, [])   # flagged: not clear
    assert md.count("| org/m |") == 2 and "No (1.00)" in md and results.BELOW_CHANCE in md


def test_marker_table_takes_medians_and_hard_shares_over_the_rendered_items(tmp_path):
    n = _numbers(tmp_path, "tbl-marker")
    t = results.HARD_TO_SEE_CONTRAST
    md, hard = controls.marker_table(n, {"clean": [2 * t, 3 * t, np.nan], "fog": [t / 2, 2 * t], "underwater": []},
                                     3, 1.953125)
    assert hard["clean"] == 0.0 and hard["fog"] == 0.5 and np.isnan(hard["underwater"])
    assert n["diagnostic.marker.n.clean"] == "2" and n["diagnostic.marker.n.underwater"] == "0"
    assert n["diagnostic.marker.hard_share.fog"] == "0.50" and n["diagnostic.marker.width_px"] == "3"
    assert "fog, V = 1.95 m" in md and n["finding.diagnostic_marker"]


def test_marker_contrasts_without_a_depth_cache_render_nothing():
    got = controls.marker_contrasts(pd.DataFrame({"file_name": ["a.jpg"]}), "images", {"box_width_px": 3}, None, 2.0)
    assert got == {"clean": [], "fog": [], "underwater": []}


def test_design_comparison_says_why_it_was_not_made(tmp_path):
    n = _numbers(tmp_path, "tbl-design-comparison")
    ds = xr.Dataset(coords={"model": ["org/m"]})
    rows, why = controls.design_comparison(n, ds, None, tmp_path, [], str, KEY, CHANCE)
    assert rows == [] and why is None and n["finding.design_comparison"].startswith("No other design's run")
    rows, why = controls.design_comparison(n, ds, tmp_path, tmp_path, [], str, KEY, CHANCE)
    assert "names this run's own folder" in why and n["finding.design_comparison"].endswith(f"{why}.")
    other = tmp_path / "other"
    other.mkdir()
    rows, why = controls.design_comparison(n, ds, other, tmp_path, [], str, KEY, CHANCE)
    assert "holds no analysed run" in why and not core.cube_store(other).exists()


def test_a_model_with_a_confounded_floor_is_not_called_clear(tmp_path):
    ds, scores, sc = _cube()
    ds["value"].loc[dict(readout="answer")] = np.array([0.0, 1.0, 0.0, 1.0])   # t3 on the blank: no answer dominates
    n = _numbers(tmp_path, "tbl-diagnostics")
    _, dominated = controls.diagnostics_table(
        n, ds, sc, scores, pd.DataFrame({"image_id": []}), ["org/m"], str, KEY, CHANCE, ["Yes", "No"],
        lambda k: results.resample_counts(k, 200, 0), 200, 0.95)
    floors = {("blank", "t2", results.BELOW_CHANCE): [f"org/m ({report.fmt_estimate(0.0, 0.0, 0.2)})"]}
    assert dominated == {} and n["finding.diagnostic"] == report.diagnostic_finding(floors, {}, [])
