"""The analyse stage's cube: the read-out stores of the models it is given, checked to belong to this run, merged
into ``cube.zarr`` and restricted to the run's design; the digests of the analysis' inputs."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple, Sequence

from murk import core, monitor, protocol, results
from murk.pipeline.markers import refuse_other_run, run_id, store_digest

if TYPE_CHECKING:
    import pandas as pd
    import xarray as xr


class AnalysisCube(NamedTuple):
    """What :func:`analysis_cube` built (unpacks in this order)."""

    #: the merged cube (VLMs and, where it ran, the monitor), restricted to the design, loaded
    full: "xr.Dataset"
    #: the models' entries (:func:`murk.core.model_entries`; ``n_items`` None where not given)
    entries: list
    #: model -> its number of items (its entry's ``n_items``, at most the selection)
    n_items: dict[str, int]
    #: model (or monitor id) -> its read-out store, or its shards' stores
    stores: dict[str, Any]
    #: every store read, flat
    flat: list
    #: the run's identity (:func:`murk.pipeline.run_id` of the configuration and items hashes)
    run_id: str
    #: a note on where the models came from (:func:`murk.core.analyse_models`), or None
    note: str | None


def analysis_cube(models: Sequence | None, shard_size: int | None, output_dir: str | os.PathLike | None,
                  table: "pd.DataFrame", meta: Mapping[str, Any], cfg: Mapping[str, Any]) -> AnalysisCube:
    """Merge the read-out stores of ``models`` (and the visibility monitor's, where they exist) into the output
    root's ``cube.zarr`` (:func:`murk.results.merge_models`, atomic) and restrict it to the run's design.

    Parameters
    ----------
    models : sequence or None
        The analyse notebook's parameter ``models``: ids, or ``{id: ..., n_items: N}``; None: the run settings'
        models, or the models the root records (:func:`murk.core.analyse_models`).
    shard_size : int or None
        The read-outs' shard size (None: one store per model).
    output_dir : path or None
        The output root (None: the default).
    table : pandas.DataFrame
        The selected items (``image_id``, ``category``; may be empty: the stores' images are taken).
    meta : mapping
        The items' metadata (``config_hash``, ``items_hash``, optional ``images_sha256``).
    cfg : mapping
        The run's frozen configuration with its design (:func:`murk.protocol.config_of`).

    Returns
    -------
    AnalysisCube

    Raises
    ------
    FileNotFoundError
        A model's read-out store is missing (run the readout stage for it); nothing is written.
    ValueError
        A store was written for another run (:func:`murk.pipeline.refuse_other_run`, nothing written), or holds
        another number of items than its entry's ``n_items``.
    """
    models, note = core.analyse_models(models, output_dir, shard_size)
    entries = core.model_entries(models, None, "the analyse notebook's parameter models")   # n None: not given
    # each model's n: its entry's n_items, at most the selection (a root whose items.json lists no items, a cube
    # analysed without its select stage, takes the images of its stores)
    n_entry = {e.id: min(e.n_items, len(table) or e.n_items) if e.n_items else len(table) for e in entries}
    stores: dict[str, Any] = {e.id: core.readout_stores(e.id, n_entry[e.id], shard_size, output_dir) for e in entries}
    for mode_id in monitor.MONITOR_IDS:   # the oracle and the deployable monitor, never sharded
        if core.readout_store(mode_id, output_dir).exists():
            stores[mode_id] = core.readout_store(mode_id, output_dir)
    flat = [p for v in stores.values() for p in (v if isinstance(v, list) else [v])]
    missing = [str(p) for p in flat if not Path(p).exists()]
    if missing:
        raise FileNotFoundError(f"read-out stores missing: {missing}; run the readout stage for these models")
    run = run_id(meta["config_hash"], meta["items_hash"])   # this selection's identity (items_meta.json)
    refuse_other_run(flat, run, "analyse", core.items_file(output_dir))   # before anything is written
    full = results.merge_models(stores, core.cube_store(output_dir),
                                attrs={"git_commit": core.git_commit(), "run_id": run,
                                       # the selected images' content (select's record)
                                       "images_sha256": meta.get("images_sha256", "")},
                                images=(table["image_id"], table["category"]) if len(table) else None).load()
    for e in entries:  # an entry that gives its n_items must find a store of that many items
        if e.n_items is not None and int(full["n_items"].sel(model=e.id)) != n_entry[e.id]:
            raise ValueError(f"the read-out store of {e.id} holds {int(full['n_items'].sel(model=e.id))} items, its "
                             f"entry in models asks for n_items: {e.n_items}: run its read-out with that n_items "
                             f"(snakemake does), or give the entry the store's n_items")
    # a design whose sweep ends earlier, or with one abstain wording, is analysed on what it measures (murk.protocol)
    full = protocol.restrict_to_design(full, cfg)
    return AnalysisCube(full, entries, n_entry, stores, flat, run, note)


def analysis_inputs(stores: Sequence, output_dir: str | os.PathLike | None) -> dict[str, str]:
    """The content digest of every input of the analysis, keyed by its path in the output root: each read-out store
    read (:func:`murk.pipeline.store_digest`) and, where the depth stage wrote it, ``analysis/nominal_equivalence.nc``
    (``sha256:`` of its bytes), for :func:`murk.pipeline.analysis_id`.

    Parameters
    ----------
    stores : sequence of path
        The stores read (:attr:`AnalysisCube.flat`), inside the output root.
    output_dir : path or None
        The output root (None: the default).

    Returns
    -------
    dict
        Relative path -> digest.
    """
    root = core.output_dir(output_dir)
    inputs = {os.path.relpath(p, root): store_digest(p) for p in stores}
    nominal_file = core.analysis_dir(output_dir) / "nominal_equivalence.nc"
    if nominal_file.is_file():
        inputs[os.path.relpath(nominal_file, root)] = "sha256:" + hashlib.sha256(nominal_file.read_bytes()).hexdigest()
    return inputs
