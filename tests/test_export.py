"""murk.report's per-sample export (issue 41, item 4): JSON Lines and Parquet that read back into the cube value for
value, and ``python -m murk.report.export`` (``make export``), whole or not at all."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import xarray as xr

from murk import core, report, results
from test_samples import ITEMS, _differences, small_cube  # noqa: F401  (the module's cube fixture)

RUN_ID = "r-0123456789ab"


def crossings_of(models, seed: int = 3) -> xr.Dataset:
    """A crossings dataset as ``analysis/crossings.nc`` holds it (murk.results.crossing_table's variables): random
    crossings with intervals, one censored crossing (a bound) and one undefined W per model."""
    rng = np.random.default_rng(seed)
    dims = ("model", "arm", "task", "readout")
    coords = {"model": list(models), "arm": ["fog", "underwater"], "task": ["t2", "t3"],
              "readout": list(report.CARD_SIGNALS)}
    shape = tuple(len(coords[d]) for d in dims)
    v = 10 ** rng.uniform(0.5, 2.2, shape)
    w = rng.normal(0, 0.5, shape)
    side = np.full(shape, "", dtype=object)
    wside = np.full(shape, "", dtype=object)
    side[:, 0, 0, 1] = "below"                      # c_int never crosses in fog, t2: V_c_int <= 1.95 m
    v[:, 0, 0, 1] = 1.953125
    wside[:, 0, 0, 1] = "above"                     # so W_c_int is a lower bound
    w[:, 1, 1, 2] = np.nan                          # verbal_conf, under water, t3: undefined
    wside[:, 1, 1, 2] = "undefined"
    w[..., 0] = np.nan                              # accuracy has no W
    data = {"v_cross_m": v, "v_lo_m": v / 1.5, "v_hi_m": v * 1.5, "censored_side": side, "w": w, "w_lo": w - 0.2,
            "w_hi": w + 0.2, "w_censored_side": wside}
    return xr.Dataset({k: (dims, x) for k, x in data.items()}, coords=coords)


def numbers_of(models) -> dict:
    """A numbers file as the analysis writes it: identity, settings, depth statement and the printed crossings."""
    n = {"run_id": RUN_ID, "analysis_id": "a-feedfacecafe", "ci_percent": "95", "n_resamples_crossing": "2000",
         "methods.depth": "Metric depth comes from the `constant-13.8m` backend, an explicit approximation",
         "pipeline_check_note": "**Pipeline check.** The model `murk-tiny/b` is a tiny random-weight checkpoint."}
    for m in models:
        k = core.model_slug(m)
        n[f"v.correct.fog.t2.{k}"], n[f"v.correct.fog.t2.{k}.ci"] = f"12.{len(k)}", "[9.0, 15.0]"
        n[f"w.c_int.fog.t2.{k}"] = "≥ 0.51"
    return n


def write_root(root, ds: xr.Dataset, numbers: dict | None = None, items=ITEMS):
    """An analysed output root from a cube: cube.zarr, items.json and its meta, crossings.nc, paper_numbers.json."""
    ds = ds.copy()
    ds.attrs["run_id"] = RUN_ID
    for name in (*core.TEXT_READOUTS, "missing_reason"):
        ds[name] = ds[name].copy(data=np.asarray(ds[name].values, dtype=object))
    ds.to_zarr(core.cube_store(root), mode="w", consolidated=True, zarr_format=2)
    extra = {"file_name": "x.jpg", "width": 640, "height": 480, "annotation_id": 1, "category_id": 1,
             "supercategory": "thing", "bbox": [1.0, 2.0, 30.0, 40.0]}
    root.mkdir(parents=True, exist_ok=True)
    core.items_file(root).write_text(json.dumps([{**extra, **it} for it in items]))
    core.items_file(root).with_name("items_meta.json").write_text(json.dumps({"items_hash": ds.attrs["items_hash"]}))
    vlms = [str(m) for m in ds["model"].values]
    core.analysis_dir(root).mkdir(parents=True, exist_ok=True)
    crossings_of(vlms).to_netcdf(core.analysis_dir(root) / "crossings.nc")
    core.numbers_file(root).write_text(json.dumps(numbers or numbers_of(vlms)))
    return root


def test_jsonl_reads_back_into_the_cube_and_a_changed_digit_is_noticed(small_cube, tmp_path):  # noqa: F811
    rows = results.sample_rows(small_cube)
    path = report.write_jsonl(rows, tmp_path / "samples.jsonl")
    assert _differences(small_cube, results.samples_to_cube(report.read_jsonl(path))) == []
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(rows) and "NaN" not in lines[0] and '"visibility_m": "inf"' in lines[0]
    first = json.loads(lines[0])
    first["c_int"] = float(repr(first["c_int"])[:-1] + ("1" if repr(first["c_int"])[-1] != "1" else "2"))
    path.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n", encoding="utf-8")
    got = _differences(small_cube, results.samples_to_cube(report.read_jsonl(path)))
    assert got == [f"value ('org/a', 'fog', 0, 't2', 30, 'c_int')"]


def test_parquet_reads_back_into_the_cube_with_its_field_descriptions(small_cube, tmp_path):  # noqa: F811
    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow (murk's dependency for samples.parquet) is missing")
    rows = results.sample_rows(small_cube)
    path = report.write_parquet(rows, tmp_path / "samples.parquet", {"murk.run_id": RUN_ID})
    assert _differences(small_cube, results.samples_to_cube(report.read_parquet(path))) == []
    schema = pq.read_schema(path)
    assert schema.names == [f[0] for f in results.SAMPLE_FIELDS]
    assert schema.field("visibility_m").metadata[b"units"] == b"m"
    assert b"first-token" in schema.field("p_option_2").metadata[b"description"]
    assert schema.metadata[b"murk.run_id"] == RUN_ID.encode()
    assert str(schema.field("c_int").type) == "double" and str(schema.field("image").type) == "int64"


def test_export_writes_its_files_and_cards(small_cube, tmp_path):  # noqa: F811
    pytest.importorskip("pyarrow")
    root = write_root(tmp_path / "out", small_cube)
    written = report.write_export(root)
    out = root / "export"
    assert sorted(p.name for p in out.iterdir()) == ["model-cards", "samples.jsonl", "samples.parquet",
                                                      "samples.schema.json"]
    assert sorted(p.name for p in (out / "model-cards").iterdir()) == ["murk-tiny--b.md", "org--a.md"]
    assert written["card:org/a"] == out / "model-cards" / "org--a.md"
    assert _differences(small_cube, results.samples_to_cube(report.read_jsonl(out / "samples.jsonl"))) == []
    assert _differences(small_cube, results.samples_to_cube(report.read_parquet(out / "samples.parquet"))) == []
    assert json.loads((out / "samples.schema.json").read_text())["title"].endswith(RUN_ID)
    rows = report.read_jsonl(out / "samples.jsonl")
    assert rows[0]["prompt"] and rows[0]["options"] == ITEMS[0]["t2_options"]
    assert not (root / ".export.tmp").exists() and not (root / ".export.old").exists()


def _tree(root):
    """Every path under ``root`` with its time; the root's writer lock (``.murk/``, which ``python -m
    murk.report.export`` takes right before its first write: murk.core.hold_root_writer) is bookkeeping, no output."""
    return sorted((str(p.relative_to(root)), p.stat().st_mtime_ns) for p in root.rglob("*")
                  if p.relative_to(root).parts[0] != core.ROOT_LOCK_DIR)


def test_refusals_write_nothing_in_one_line(small_cube, tmp_path, capsys, monkeypatch):  # noqa: F811
    from murk.report import export

    empty = tmp_path / "empty"
    empty.mkdir()
    assert export.main(["--output-dir", str(empty)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "make export" in err and "cube.zarr is missing" in err and "make demo" in err
    assert list(empty.iterdir()) == []
    # the cube and the numbers of two runs
    root = write_root(tmp_path / "mixed", small_cube, {**numbers_of(["org/a"]), "run_id": "r-other"})
    before = _tree(root)
    assert export.main(["--output-dir", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"of run {RUN_ID}" in err and "of run r-other" in err
    assert _tree(root) == before
    # pyarrow missing: refused before anything is written, a previous export kept as it was
    root = write_root(tmp_path / "noarrow", small_cube)
    (root / "export").mkdir()
    (root / "export" / "samples.jsonl").write_text("previous\n")
    before = _tree(root)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    assert export.main(["--output-dir", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs pyarrow" in err and "make env" in err
    assert _tree(root) == before


def test_items_of_another_run_are_refused_while_the_rows_are_made(small_cube, tmp_path, capsys):  # noqa: F811
    """Items that lack an image of the cube (under the cube's items hash): refused in one line, nothing written."""
    pytest.importorskip("pyarrow")
    from murk.report import export

    root = write_root(tmp_path / "items", small_cube, items=ITEMS[:2])
    before = _tree(root)
    assert export.main(["--output-dir", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not among the run's items (e.g. [40])" in err and "nothing was written" in err
    assert _tree(root) == before


def test_a_failed_export_keeps_the_previous_one(small_cube, tmp_path, monkeypatch):  # noqa: F811
    pytest.importorskip("pyarrow")
    from murk.report import _export

    root = write_root(tmp_path / "out", small_cube)
    report.write_export(root)
    before = _tree(root / "export")

    def broken(*a, **k):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(_export, "model_card", broken)
    with pytest.raises(RuntimeError, match="disk on fire"):
        report.write_export(root)
    assert _tree(root / "export") == before and not (root / ".export.tmp").exists()
