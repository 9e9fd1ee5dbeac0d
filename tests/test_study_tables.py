"""murk.report._study_tables: the analysis notebook's settings, verbal rates, wordings, nominal severities,
monotonicity, missing items and models tables on tiny inputs."""

import json

import numpy as np
import xarray as xr

from murk import report, results
from murk.report import _study_tables as st

KEY = lambda m: m.replace("/", "--")  # noqa: E731


def _numbers(tmp_path, cell="num-x"):
    return report.Numbers(tmp_path / "n.json", cell=cell)


def test_record_settings_takes_each_value_from_where_it_lives(tmp_path):
    n = _numbers(tmp_path)
    cfg = {"analysis": {"bootstrap_resamples": 200, "bootstrap_resamples_crossing": 400, "ci_level": 0.9,
                        "chance": {"t2": 0.25, "t3": 0.5}},
           "render": {"max_side_px": 512, "box_width_px": 3}, "readout": {"verbal_max_new_tokens": 24}}
    sc = xr.Dataset(attrs={"confident_threshold": 0.9, "confident_max_visibility_m": 7.8125})
    st.record_settings(n, cfg, {"seed": 7}, sc, np.array([62.5, 7.8125, 1.953125]))
    assert (n["n_resamples"], n["n_resamples_crossing"], n["ci_percent"]) == ("200", "400", "90")
    assert n["cfg.sweep"] == "62.5, 7.8, 1.95" and n["cfg.n_levels"] == "3"   # report.fmt_level
    assert (n["cfg.sweep_min_m"], n["cfg.sweep_max_m"]) == ("1.95", "62.5")
    assert (n["cfg.chance_t2"], n["cfg.chance_t3"], n["cfg.seed"], n["cfg.box_width_px"]) == ("0.25", "0.5", "7", "3")
    assert n["cfg.confident_threshold"] == "0.9" and n["cfg.confident_max_v_m"] == "7.8"
    assert "24-token limit" in n["methods.verbal_grammar"]


def _rates():
    dims = ("model", "arm", "level", "wording")
    shape = (1, 2, 3, 1)
    n_asked = np.full(shape, 10)
    parse = np.full(shape, 1.0)
    parse[0, 1, 1:, 0] = 0.5        # under water, the degraded levels: half parsed
    return xr.Dataset({"n_asked": (dims, n_asked), "parse_rate": (dims, parse),
                       "limit_hit_rate": (dims, np.zeros(shape))},
                      coords={"model": ["org/m"], "arm": ["fog", "underwater"], "level": [0, 1, 2], "wording": ["v1"]})


def test_record_verbal_rates_counts_the_clean_image_once(tmp_path):
    n = _numbers(tmp_path)
    pooled = st.record_verbal_rates(n, _rates(), ["org/m"], KEY, ["fog", "underwater"], 2)
    assert n["verbal.parse_rate.org--m.underwater.v1.clean"] == "1.00"
    assert n["verbal.parse_rate.org--m.underwater.v1.end"] == "0.50"
    assert n["verbal.n_asked.org--m.fog.v1.end"] == "10"
    # 3 fog levels and the 2 degraded underwater levels: 50 asked, 40 parsed (the clean image once, not twice)
    assert n["verbal.n_asked.org--m.v1.all"] == "50" and n["verbal.parse_rate.org--m.v1.all"] == "0.80"
    assert int(pooled["n_asked"].sel(model="org/m", wording="v1")) == 50


def test_verbal_wordings_table_without_variants_is_a_note():
    ds = xr.Dataset(coords={"readout": ["correct", "verbal_conf"]})
    md, asked = st.verbal_wordings_table(None, ds, ["org/m"], str, KEY, np.array([np.inf, 7.8125]))
    assert asked == [] and "no verbal wording variants" in md and report.NOT_COMPUTED in md


def test_verbal_wordings_finding_names_who_was_asked():
    assert st.verbal_wordings_finding([], ["A"]).startswith("No model was asked")
    assert st.verbal_wordings_finding(["A", "B"], []).endswith("is compared for A and B.")
    assert "(B and C were not asked" in st.verbal_wordings_finding(["A"], ["B", "C"])


def test_nominal_results_reads_the_equivalence_and_records_the_removed_pairs(tmp_path):
    n = _numbers(tmp_path, "tbl-nominal")
    md, veq = st.nominal_results(n, tmp_path / "absent.nc")
    assert report.NOT_COMPUTED in md and np.isnan(veq).all() and veq.shape == (5,) and len(n) == 0
    gain = np.array([[40.0, 20.0, 10.0, 5.0, 2.5], [60.0, 30.0, 15.0, 7.5, np.nan]])
    nds = xr.Dataset({"v_eq_gain_m": (("image", "severity"), gain), "v_eq_std_ratio_m": (("image", "severity"), gain),
                      "reason": (("image", "severity"), np.array([[""] * 5, [""] * 4 + ["no_root"]], dtype=object))},
                     coords={"image": [1, 2], "severity": [1, 2, 3, 4, 5]},
                     attrs={"depth_backend": "constant", "depth_approximate": 1})
    nds.to_netcdf(tmp_path / "nominal_equivalence.nc")
    md, veq = st.nominal_results(n, tmp_path / "nominal_equivalence.nc")
    np.testing.assert_allclose(veq, [50.0, 25.0, 12.5, 6.25, 2.5])
    assert n["nominal.veq.1"] == "50" and n["nominal.n_images"] == "2" and n["nominal.removed.no_root"] == "1"
    assert n["nominal.removed"] == "1 for no root within the bracket" and n["nominal.n_pairs"] == "10"
    assert n["nominal.removed_sentence"].startswith("Of the 10 image–severity pairs")
    assert md.endswith(f" {n['nominal.removed_sentence']}; {n['nominal.curve_non_monotone']}.\n")


def _mono():
    dims = ("model", "arm", "task", "readout")
    coords = {"model": ["org/m"], "arm": ["fog", "underwater", "imagenet_c"], "task": ["t2"],
              "readout": list(results.SIGNALS)}
    shape = tuple(len(coords[d]) for d in dims)
    raw = np.full(shape, 0.25)
    raw[:, 2] = 0.5                  # the ImageNet-C arm, pooled apart
    return xr.Dataset({"mono_pairs": (dims, np.full(shape, 4)), "mono_raw": (dims, raw),
                       "mono_beyond_noise": (dims, np.zeros(shape))}, coords=coords)


def test_monotonicity_table_pools_the_physical_arms_apart_from_imagenet_c(tmp_path):
    n = _numbers(tmp_path)
    md = st.monotonicity_table(n, _mono(), ["org/m"], str, ["fog", "underwater"])
    k = len(results.SIGNALS)
    assert n["mono.pooled.raw"] == "0.25" and n["mono.pooled.raw.count"] == f"{2 * k}/{8 * k}"
    assert n["mono.pooled.sig"] == "0.00" and n["mono.pooled.imagenet_c.raw.count"] == f"{2 * k}/{4 * k}"
    assert "1/4 · 0/4" in md and "2/4 · 0/4" in md and md.count("org/m") == 3


def test_missing_table_lists_bad_input_not_images_never_asked(tmp_path):
    n = _numbers(tmp_path, "tbl-missing")
    full = xr.Dataset({"missing_reason": (("model", "image"), np.array([["", "bad_image", results.NOT_RUN]],
                                                                         dtype=object))},
                      coords={"model": ["org/m"], "image": [1, 2, 3]})
    rep = tmp_path / "items_report.json"
    rep.write_text(json.dumps({"image_checks": {"transposed": {"5": "image 5 is stored rotated: EXIF 6"}}}))
    md = st.missing_table(n, full, rep)
    assert n["n_missing_items"] == "1" and "bad\\_image" in md and "| 3 |" not in md   # the reason as data
    assert n["colophon.transposed_images"] == "image 5 (stored rotated)"
    md = st.missing_table(n, full.drop_vars("missing_reason"), tmp_path / "absent.json")
    assert n["n_missing_items"] == "0" and "every item was read out" in md and n["colophon.transposed_images"] == "none"


def test_models_table_marks_a_low_mass_model(tmp_path):
    n = _numbers(tmp_path, "tbl-models")
    for m in ("org--a", "org--b"):
        for t in ("t2", "t3"):
            n.record(f"option_mass.{m}.{t}", "0.9" if m == "org--a" else "0.1")
    n.record("option_mass.footnote", "† below the threshold.")
    ds = xr.Dataset(coords={"model": ["org/a", "org/b"], "n_items": ("model", [4, 2]),
                            "model_revision": ("model", ["sha256:" + "0" * 64, "abcdef0123456789"]),
                            "n_visual_tokens": ("model", [64, 16]), "pipeline_check": ("model", [True, False])})
    md = st.models_table(n, ds, ["org/b"])
    lines = md.splitlines()
    assert "`org/b` †" in lines[3] and "| 2 |" in lines[3] and "`abcdef012345`" in lines[3]
    assert "`org/a` |" in lines[2] and "0.9 / 0.9" in lines[2] and "yes (tiny random weights)" in lines[2]
    assert f"`sha256:{'0' * 16}`" in lines[2] and lines[-1] == "† below the threshold."


def test_example_tiles_without_a_depth_cache_are_empty():
    assert st.example_tiles(xr.Dataset(), None, "images", {}, None, "org/m", np.array([np.inf]), (0,)) == ([], [], [])


def test_record_accuracy_ranges_span_the_models(tmp_path):
    n = _numbers(tmp_path, "num-rq1")
    coords = {"model": ["a", "b"], "arm": ["fog", "underwater", "blank", "shuffled"], "level": [0, 1, 2],
              "task": ["t2"], "readout": ["correct"]}
    mean = np.full((2, 4, 3, 1, 1), 0.25)
    mean[:, 0, 0] = [[[0.8]], [[0.9]]]                 # fog, clean: 0.80 and 0.90
    mean[:, 1, 2] = [[[0.3]], [[0.2]]]                 # under water, the end
    means = xr.Dataset({"mean": (tuple(coords), mean)}, coords=coords)
    cc = {d: coords[d] for d in ("model", "arm", "task", "readout")}
    cross = xr.Dataset({"v_cross_m": (tuple(cc), np.full((2, 4, 1, 1), 7.8125)),
                        "censored_side": (tuple(cc), np.full((2, 4, 1, 1), "", dtype=object))}, coords=cc)
    cross["v_cross_m"].loc[dict(model="b", arm="fog")] = 3.90625
    st.record_accuracy_ranges(n, means, cross, "t2", 2)
    assert n["range.correct.clean.t2"] == report.fmt_range(np.array([0.8, 0.9])) == "0.80–0.90"
    assert n["range.correct.end.underwater.t2"] == report.fmt_range(np.array([0.3, 0.2]))
    assert n["range.correct.blank.t2"] == report.fmt_range(np.array([0.25, 0.25]))
    assert n["range.v.correct.fog.t2"] == report.fmt_range(np.array([7.8125, 3.90625]), np.array(["", ""]), digits=1)
    assert n["range.correct.clean.t2"] != n["range.correct.end.underwater.t2"]


def test_verbal_wordings_table_compares_the_wordings_on_the_items_asked_all_three(tmp_path):
    n = _numbers(tmp_path, "tbl-verbal-wordings")
    coords = {"model": ["a", "b"], "arm": ["fog"], "level": [0, 1], "task": ["t2"], "image": [1, 2, 3],
              "readout": ["correct", "verbal_conf", "verbal_stop", "verbal_conf_v2", "verbal_stop_v2"]}
    value = np.zeros([len(v) for v in coords.values()])
    value[..., 0], value[..., 1], value[..., 2] = 1.0, 0.8, 0.0      # right, v1 0.8, ended
    value[..., 3], value[..., 4] = np.nan, np.nan                    # v2 not asked ...
    value[0, ..., :2, 3] = [0.6, np.nan]                             # ... but of model a on images 1 and 2,
    value[0, ..., :2, 4] = 0.0                                       # one of them parsed on the clean image,
    value[0, 0, 1, 0, 1, 3] = 0.4                                    # both at 7.8 m
    text = np.full(value.shape[:-1], "", dtype=object)
    text[0, ..., :2] = "Confidence: 60"
    ds = xr.Dataset({"value": (tuple(coords), value), "verbal_text_v2": (tuple(coords)[:-1], text)}, coords=coords)
    md, asked = st.verbal_wordings_table(n, ds, ["a", "b"], str, KEY, np.array([np.inf, 7.8125]))
    assert asked == ["a"]
    assert n["verbal.wording.parse_rate.a.v2.clean"] == "0.50" and n["verbal.wording.parse_rate.a.v1.clean"] == "1.00"
    rows = [r for r in md.splitlines() if r.startswith("| a ")]
    assert len(rows) == 2 and all("| 2 |" in r and "| 0.80 |" in r for r in rows)   # on its 2 items
    assert "| 0.60 |" in rows[0] and "| 0.50 |" in rows[1] and "7.8" in rows[1]
    assert any(r.startswith("| b | – | 0 |") for r in md.splitlines())
