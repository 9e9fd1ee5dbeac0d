"""Every tiny architecture through the real read-out stage (the session demo's three through Snakemake, the other
two by hand on a copy of its root), ``verbal_stop`` reaching each store and the merged cube. The engines
themselves: tests/test_engine_batched.py, tests/test_baseline.py."""

import numpy as np
import pytest

from murk.offline import TINY_MODELS


@pytest.mark.slow  # the real stages for every architecture: minutes (out of `make test-fast`)
def test_all_tiny_architectures_through_the_readout_stage(demo, tmp_path, monkeypatch):
    """Every tiny id of TINY_MODELS through the real stages (select -> depth -> readout): the session demo's
    three (Snakemake; the verbal wordings v2, v3 asked on each model's first ``n_verbal_items`` images, those of
    data/workflow.yaml) and, by hand (papermill) on a copy of the demo's root, the other two on one item
    without the verbal wordings; ``verbal_stop`` reaches each store and the merged cube."""
    import xarray as xr
    import yaml

    import stages  # tests/stages.py: the stage notebooks through papermill
    from murk import scene
    from murk.core import _paths as paths
    from murk.results import _cube as cube

    monkeypatch.setenv("MURK_OFFLINE", "1")
    monkeypatch.setenv("MURK_COCO_DIR", str(stages.SAMPLE))
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    root = stages.copy_root(demo, tmp_path / "out")
    workflow_n_verbal = int(yaml.safe_load((stages.ROOT / "data" / "workflow.yaml").read_text())["n_verbal_items"])
    n_verbal = dict.fromkeys(stages.DEMO_N, workflow_n_verbal)
    for model in sorted(set(TINY_MODELS) - set(stages.DEMO_N)):
        stages.run("03_readout", root, suffix=f"-{paths.model_slug(model)}", model=model, device="cpu",
                   max_items=1, n_verbal_items=0)
        n_verbal[model] = 0
    assert set(n_verbal) == set(TINY_MODELS)
    stores = {}
    for model in sorted(TINY_MODELS):
        store = paths.readout_store(model, root)
        ds = xr.open_zarr(store, consolidated=False).load()
        assert bool(ds["done"].all()), model
        assert ds.attrs["pipeline_check"] == 1 and ds.attrs["n_visual_tokens"] > 0
        v = ds["value"]
        for arm, lvl in scene.CONDITIONS:
            arm = "fog" if arm == "clean" else arm
            cell = v.sel(arm=arm, level=lvl, readout=["answer", "c_int", "abstain", "abstain2", "option_mass"])
            assert cell.notnull().all(), (model, arm, lvl)
        assert (ds["top_token"].sel(arm="fog", level=0) != "").all()
        stop = v.sel(readout="verbal_stop")
        assert stop.isin([0.0, 1.0]).sel(arm="fog").all(), model  # 0 = EOS, 1 = token limit: always recorded
        asked = np.arange(ds.sizes["image"]) < n_verbal[model]  # the images asked v2 and v3
        fog = dict(arm="fog")
        for name in ("verbal_stop_v2", "verbal_stop_v3"):
            assert v.sel(readout=name, **fog).isel(image=asked).isin([0.0, 1.0]).all(), (model, name)
            assert v.sel(readout=name).isel(image=~asked).isnull().all(), (model, name)  # not asked
        texts_v2 = ds["verbal_text_v2"].sel(arm="fog", level=0)
        assert (texts_v2.isel(image=~asked) == "").all() and v.sel(readout="verbal_conf_v2").isel(
            image=~asked).isnull().all(), model
        if model == "murk-tiny/qwen3vl":
            assert asked.any() and (texts_v2.isel(image=asked) != "").all()
        stores[model] = store
    # the merged cube keeps them
    merged = cube.merge_models(stores, tmp_path / "cube.zarr")
    assert {"verbal_stop", "verbal_stop_v2", "verbal_stop_v3"} <= set(merged["readout"].values)
    reopened = cube.open_cube(tmp_path / "cube.zarr")
    got = reopened["value"].sel(model="murk-tiny/qwen3vl", arm="fog", level=0, readout="verbal_stop").values
    # (task, image): recorded on its own images, NaN on the images only the other models were read out on
    assert (np.isfinite(got).sum(axis=-1) == stages.DEMO_N["murk-tiny/qwen3vl"]).all()
    assert np.isin(got[np.isfinite(got)], [0.0, 1.0]).all()
    from murk.results import _analysis as analysis

    rates = analysis.verbal_rates(reopened)
    for model in TINY_MODELS:  # three tasks (t2, t3_true, t3_false) a continuation each, per asked image
        n_images = min(n_verbal[model], stages.DEMO_N.get(model, 1))
        assert float(rates["n_asked"].sel(model=model, arm="fog", level=0, wording="v2")) == 3 * n_images, model
