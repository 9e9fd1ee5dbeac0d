"""The per-sample export of a run and its model cards, written whole or not at all (``make export``).

``<root>/export/`` holds ``samples.jsonl`` (one JSON object per line, :func:`murk.results.sample_rows`),
``samples.schema.json`` (its JSON Schema, :func:`murk.results.samples_json_schema`), ``samples.parquet`` (the same
rows; each field's description and units in the Parquet schema's field metadata, the run's identity in the file's)
and ``model-cards/<model slug>.md`` (:func:`murk.report.model_card`). The folder is built beside the old one and
swapped in: a refused or failed export leaves the previous one as it was.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import xarray as xr

from murk import core, protocol, results
from murk.report._model_card import model_card

__all__ = ["EXPORT_FILES", "ExportRefused", "write_jsonl", "read_jsonl", "write_parquet", "read_parquet",
           "write_export"]

#: the files of an export and what each holds (listed in the model cards)
EXPORT_FILES = {
    "samples.jsonl": "every read-out, one JSON object per model, arm, level, task and image",
    "samples.schema.json": "the JSON Schema (draft 2020-12) of a line of samples.jsonl",
    "samples.parquet": "the same rows as Parquet; field descriptions and units in its schema's field metadata",
}


class ExportRefused(ValueError):
    """The run cannot be exported as it is (a file missing, files of two runs): nothing was written."""


def _jsonable(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (results.json_number(v) if isinstance(v, float) else v) for k, v in row.items()}


def write_jsonl(rows: Iterable[Mapping[str, Any]], path: str | os.PathLike) -> Path:
    """Write sample rows as JSON Lines (UTF-8; NaN as ``null``, infinities as ``"inf"``/``"-inf"``).

    Floats are written as their shortest repr, which reads back as the same float64 (:func:`read_jsonl`).
    """
    path = Path(path)
    with open(path, "w", encoding="utf-8") as f:
        _append_jsonl(f, rows)
    return path


def _append_jsonl(f, rows: Iterable[Mapping[str, Any]]) -> None:
    for row in rows:
        f.write(json.dumps(_jsonable(row), ensure_ascii=False, allow_nan=False) + "\n")


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of :func:`write_jsonl`, numbers as float64 again (``null`` -> NaN, ``"inf"`` -> inf)."""
    numbers = {name for name, typ, *_ in results.SAMPLE_FIELDS if typ == "number"}
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            rows.append({k: (results.number_from_json(v) if k in numbers else v) for k, v in r.items()})
    return rows


def _arrow_schema(metadata: Mapping[str, str]):
    import pyarrow as pa

    types = {"string": pa.string(), "integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_(),
             "string list": pa.list_(pa.string())}
    fields = [pa.field(name, types[typ], nullable=True,
                       metadata={"description": text, **({"units": units} if units else {})})
              for name, typ, units, text in results.SAMPLE_FIELDS]
    return pa.schema(fields, metadata=dict(metadata))


def write_parquet(rows: list[Mapping[str, Any]], path: str | os.PathLike, metadata: Mapping[str, str] = {}) -> Path:
    """Write sample rows as Parquet with pyarrow: one column per :data:`murk.results.SAMPLE_FIELDS`.

    Numbers are float64 with NaN kept as NaN (not null: the cube's missing value, read back as it was); each field
    carries ``description`` and ``units`` in its metadata, the file ``metadata`` (the run's identity).

    Raises
    ------
    ImportError
        pyarrow is not installed (a dependency of murk: ``make env`` installs it).
    """
    import pyarrow.parquet as pq

    schema = _arrow_schema(metadata)
    pq.write_table(_arrow_table(rows, schema), path)
    return Path(path)


def _arrow_table(rows: list[Mapping[str, Any]], schema):
    import pyarrow as pa

    return pa.table({f.name: pa.array([r[f.name] for r in rows], type=f.type) for f in schema}, schema=schema)


def read_parquet(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of :func:`write_parquet` (numbers as Python floats, NaN kept)."""
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def _load(root: Path) -> tuple[xr.Dataset, Any, dict, xr.Dataset, dict]:
    cube_path = core.cube_store(root)
    needed = [cube_path, core.items_file(root), core.analysis_dir(root) / "crossings.nc", core.numbers_file(root)]
    absent = [p for p in needed if not p.exists()]
    if absent:
        # the run's own command makes it again: the Snakefile re-makes an analysis output missing from an analysed
        # root (its rerun_if_missing), and runs every stage of a root never analysed
        od = "" if root.absolute() == core.output_dir().absolute() else f" ARGS='--config output_dir={root}'"
        raise ExportRefused(f"{absent[0]} is missing: run the analysis first with the command that made this output "
                            f"root (make demo{od}, or make study, with your other settings; Snakemake makes what is "
                            f"missing again), then the same command again")
    cube = results.open_cube(cube_path).load()
    table, meta = protocol.read_items(root)
    numbers = json.loads(core.numbers_file(root).read_text(encoding="utf-8"))
    with xr.open_dataset(core.analysis_dir(root) / "crossings.nc") as c:
        crossings = c.load()
    run_cube, run_num = str(cube.attrs.get("run_id", "")), str(numbers.get("run_id", ""))
    if run_cube and run_num and run_cube != run_num:
        raise ExportRefused(f"{cube_path} is of run {run_cube} but {core.numbers_file(root)} of run {run_num}: run "
                            f"the analysis again (make demo, or make study, with the same ARGS), then the same "
                            f"command again")
    if str(meta.get("items_hash", "")) != str(cube.attrs.get("items_hash", "")):
        raise ExportRefused(f"{cube_path} was built from other items than {core.items_file(root)}: run the analysis "
                            f"again (make demo, or make study, with the same ARGS), then the same command again")
    return cube, table, meta, crossings, numbers


def write_export(root: str | os.PathLike | None = None, *, hold: Callable[[], object] | None = None) -> dict[str, Path]:
    """Write the run's per-sample export and model cards into ``<root>/export/``, whole or not at all.

    Parameters
    ----------
    root : path, optional
        The output root (:func:`murk.core.output_dir`).
    hold : callable, optional
        Called once the inputs are read and checked, right before the first write: ``python -m murk.report.export``
        takes the root's writer lock there (:func:`murk.core.hold_root_writer`, whose refusal it passes on).

    Returns
    -------
    dict of str to Path
        ``samples.jsonl``, ``samples.schema.json``, ``samples.parquet`` and ``card:<model>`` for each VLM.

    Raises
    ------
    ExportRefused
        A file the export reads is missing, the cube and the numbers file are of different runs, the cube of
        other items or of another schema: nothing is written.
    ImportError
        pyarrow is missing: nothing is written.
    murk.core.DiskFullError
        The disk filled: the previous export is kept.
    """
    root = core.output_dir(root)
    cube, table, meta, crossings, numbers = _load(root)
    import pyarrow  # noqa: F401  (before anything is written: a missing dependency refuses the whole export)

    cfg = protocol.config_of(meta)
    ident = {k: str(cube.attrs.get(k, "")) for k in ("run_id", "config_hash", "items_hash", "git_commit",
                                                     "depth_backend", "schema_version", "pipeline_check", "note")}
    ident["analysis_id"] = str(numbers.get("analysis_id", ""))
    if hold is not None:
        hold()
    out = root / "export"
    tmp = root / ".export.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    written: dict[str, Path] = {}
    try:
        _write(tmp, out, cube, table, cfg, crossings, numbers, ident, written)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)   # a failed export leaves nothing behind, the previous one kept
        raise
    old = root / ".export.old"
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)
    written.update({name: out / name for name in EXPORT_FILES})
    return written


def _write(tmp: Path, out: Path, cube, table, cfg, crossings, numbers, ident, written) -> None:
    """The export's files into ``tmp``: the rows model by model (one model's rows in memory at a time: about
    4.7 kB a row, measured), appended to the JSON Lines and, as a row group, to the Parquet file."""
    import pyarrow.parquet as pq

    with core.guard(out, f"the previous export {out}, if any, is kept as it was", cleanup=[tmp]):
        (tmp / "model-cards").mkdir(parents=True)
        arrow = _arrow_schema({f"murk.{k}": v for k, v in ident.items()})
        with open(tmp / "samples.jsonl", "w", encoding="utf-8") as f, \
                pq.ParquetWriter(tmp / "samples.parquet", arrow) as parquet:
            for i in range(cube.sizes["model"]):
                try:
                    rows = results.sample_rows(cube.isel(model=[i]), table, cfg)
                except ValueError as e:   # a cube of another schema, items of another run
                    raise ExportRefused(str(e)) from None
                _append_jsonl(f, rows)
                parquet.write_table(_arrow_table(rows, arrow))
        schema = results.samples_json_schema(f"murk per-sample read-outs of run {ident['run_id']}")
        (tmp / "samples.schema.json").write_text(json.dumps(schema, indent=1, ensure_ascii=False) + "\n",
                                                 encoding="utf-8")
        for model in [str(m) for m in crossings["model"].values]:
            name = f"{core.model_slug(model)}.md"
            (tmp / "model-cards" / name).write_text(model_card(model, cube, crossings, numbers, EXPORT_FILES),
                                                    encoding="utf-8")
            written[f"card:{model}"] = out / "model-cards" / name

