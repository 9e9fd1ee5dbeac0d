"""The served back-end against a real vLLM server (fixture ``vllm_server``: the offline demo's Qwen3-VL checkpoint,
float32; marker ``served``, make test-served): the demo's first two items read out through the server agree with the
in-process engine on the same checkpoint; a server killed mid-run is resumed by the same command, which reads only
what is missing; the cube is made from the served store as from an in-process one (issue 41)."""

import json
import math
import subprocess
import time

import numpy as np
import pytest

import stages

pytestmark = [pytest.mark.served, pytest.mark.slow]

N_ITEMS = 2
#: the probability read-outs compared within 1e-6 (float32); the others must be equal
PROBS = ("c_int", "option_mass", "p_option_0", "p_option_1", "p_option_2", "p_option_3", "p_abstain", "p_abstain2")


@pytest.fixture(scope="module")
def root(tmp_path_factory, coco_sample):
    """The offline demo's first two items (select, constant depth) in a fresh output root."""
    out = tmp_path_factory.mktemp("served") / "out"
    stages.run("01_select", out, coco_dir=str(coco_sample), n_items=N_ITEMS, seed=1, run_name="served-test")
    stages.run("02_depth", out, backend="constant")
    return out


def _load(root):
    from murk import protocol, readout, scene

    table, meta = protocol.read_items(root)
    cfg = protocol.config_of(meta)
    partner = protocol.shuffled_partner(len(table), cfg["items"]["shuffle_offset"])
    return cfg, readout.ItemJobs(table, partner, meta["image_dir"], scene.current_depth(root)["path"], cfg,
                                 seed=meta["seed"], n_verbal_items=N_ITEMS)


def _served(vllm_server, max_in_flight=8):
    return {"server": vllm_server.api_url, "served_model": vllm_server.name, "max_in_flight": max_in_flight}


def test_served_readouts_agree_with_the_in_process_engine(root, vllm_server):
    """Float32: every probability read-out within 1e-6, answers, abstentions, top tokens and the verbal
    continuations (all three wordings) identical; every prompt's tokens equal murk's (checked through /tokenize)."""
    from murk import readout

    cfg, load = _load(root)
    vlm = readout.load_vlm(str(vllm_server.folder), device="cpu")
    local = {r.item: r.results for r in readout.read_images(vlm, readout.plan(range(N_ITEMS), 0, N_ITEMS, 1), load,
                                                            config=cfg, progress=False)}
    head = readout.load_served_vlm(str(vllm_server.folder), config=cfg)
    client = readout.ServedClient(readout.ServedModel.from_entry({"id": str(vllm_server.folder),
                                                                  **_served(vllm_server)}), head, cfg)
    ident = client.probe()
    assert client.logprobs_mode == "logprob_token_ids" and client.tokenize
    assert ident["served_engine"] == "vllm" and ident["served_engine_version"].startswith("0.32")
    served = {r.item: r.results for r in readout.read_images_served(client, range(N_ITEMS), load, progress=False)}
    assert len(client._checked) >= 15  # every distinct prompt shape's tokens were compared, none refused
    worst = 0.0
    n = 0
    for item in range(N_ITEMS):
        assert served[item] is not None and set(served[item]) == set(local[item])
        for key, want in local[item].items():
            got = served[item][key]
            for k, v in want.items():
                if k in PROBS:
                    assert (math.isnan(v) and math.isnan(got[k])) or abs(got[k] - v) <= 1e-6, (key, k, got[k], v)
                    if not math.isnan(v):
                        worst = max(worst, abs(got[k] - v))
                else:
                    assert got[k] == v or (isinstance(v, float) and math.isnan(v) and math.isnan(got[k])), (key, k)
            n += 1
    assert n == N_ITEMS * 24 * 3
    print(f"served vs in-process: {n} (unit, question) read-outs, largest probability difference {worst:.2e}")


def _store_values(store):
    import xarray as xr

    ds = xr.open_zarr(store, consolidated=False)
    v = ds["value"].transpose("image", ...)
    return ds["done"].values.copy(), v.values.copy(), dict(ds.attrs)


def test_a_killed_server_is_resumed_by_the_same_command_reading_only_what_is_missing(root, vllm_server):
    import _vllm
    from murk import core

    model = str(vllm_server.folder)
    store = core.readout_store(model, root)
    # through a proxy that holds each request 0.1 s: an image's few hundred requests, 4 in flight, take seconds, so
    # the kill below falls between the first image and the second (seen: without it, the second image was done
    # before the poll saw the first)
    proxy = _vllm.SlowProxy(vllm_server.base_url, delay_s=0.1)
    served = {**_served(vllm_server, 4), "server": proxy.url + "/v1"}
    cmd = stages.command("03_readout", root, "-served", model=model, n_verbal_items=N_ITEMS) + \
        ["-y", json.dumps({"served": served})]
    proc = subprocess.Popen(cmd, cwd=stages.ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 600
        while time.time() < deadline and proc.poll() is None:  # the first image written, the second not yet
            if store.exists():
                try:
                    done = _store_values(store)[0]
                except (OSError, ValueError, KeyError):
                    done = None
                if done is not None and done[0]:
                    break
            time.sleep(0.5)
        assert proc.poll() is None, "the read-out ended before the server could be killed"
        vllm_server.kill()
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        vllm_server.start()
    assert proc.returncode != 0, (out + err)[-3000:]
    assert "ServedError" in out + err and "did not answer" in out + err and "rerun the same command" in out + err
    done1, values1, _ = _store_values(store)
    assert done1.tolist() == [True, False]
    # the same command again: only the second image is read
    r = subprocess.run(cmd, cwd=stages.ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert "1 of 2 images to read out" in r.stdout + r.stderr or "1 of 2 images to read out" in \
        stages.executed_path("03_readout", root, "-served").read_text()
    done2, values2, attrs = _store_values(store)
    assert done2.all()
    np.testing.assert_array_equal(values2[0], values1[0])  # the first image was not read again
    assert np.isnan(values1[1]).all() and not np.isnan(values2[1]).all()
    assert attrs["readout_engine"] == "served" and attrs["served_model"] == vllm_server.name
    assert attrs["served_engine"] == "vllm" and attrs["served_logprobs"] == "logprob_token_ids"
    proxy.close()


def test_the_cube_is_made_from_the_served_store(root, vllm_server):
    """The monitor and the analysis on the served store (after the resumed run): the cube holds its read-outs."""
    import xarray as xr

    from murk import core

    model = str(vllm_server.folder)
    store = core.readout_store(model, root)
    if not store.exists():
        pytest.skip("needs the served store of the resume test")
    stages.run("03b_monitor", root)
    stages.run("04_analyse", root, models=[model])
    cube = xr.open_zarr(root / "cube.zarr", consolidated=False)
    served = xr.open_zarr(store, consolidated=False)
    got = cube["value"].sel(model=cube["model"].values[0]).transpose(*served["value"].dims).values
    np.testing.assert_array_equal(got, served["value"].values)


def test_a_run_whose_model_names_the_server_makes_the_cube_and_the_paper(tmp_path, vllm_server):
    """Through Snakemake, as `make demo` runs it (one item): a run whose model entry names the server reads the
    model out through it (the store says so, with the server's identity), and the cube and the paper are made from
    the served read-outs as from in-process ones: the cube holds the store's values, the paper the cube's run."""
    import xarray as xr
    import yaml

    from murk import core

    model = str(vllm_server.folder)
    settings = tmp_path / "served.yaml"
    settings.write_text(yaml.safe_dump({"offline_models": [{"id": model, **_served(vllm_server)}]}))
    out = tmp_path / "out"
    r = stages.snakemake(out, "--configfile", str(settings), n_items=1, run_name="served-run")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    store = xr.open_zarr(core.readout_store(model, out), consolidated=False)
    assert store.attrs["readout_engine"] == "served" and store.attrs["served_engine"] == "vllm"
    assert store.attrs["served_model"] == vllm_server.name and bool(store["done"].all())
    cube = xr.open_zarr(out / "cube.zarr", consolidated=False)
    got = cube["value"].sel(model=model).transpose(*store["value"].dims).values
    np.testing.assert_array_equal(got, store["value"].values)
    numbers = json.loads((out / "paper_numbers.json").read_text())
    html = (out / "paper" / "index.html").read_text(encoding="utf-8")
    assert cube.attrs["run_id"] in html and numbers["colophon.model_revisions"].count(model) == 1
