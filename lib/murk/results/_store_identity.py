"""A read-out store's identity: the settings that make its content (:data:`IDENTITY_ATTRS`), how a store and a run
that differ in them are told apart and named, and a store of superseded local weights set aside."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from murk.core import SCHEMA_VERSION

__all__ = ["IDENTITY_ATTRS", "store_identity", "SUPERSEDED_NAME", "set_aside_superseded"]


def _attr(v: Any) -> Any:
    if isinstance(v, (bool, np.bool_)):
        return int(v)
    if isinstance(v, (np.integer, np.floating)):
        return v.item()
    return v


#: The settings that make a read-out store's content: a store is resumed only by a run
#: with the same values (:func:`open_readout_store`), and each is named when they differ.
#: Values: what each setting stands for, quoted in the refusal.
IDENTITY_ATTRS: dict[str, str] = {
    "config_hash": "the frozen study settings (data/config.yaml: prompts, verbal wordings, item rules, rendering, "
                   "read-out dtypes)",
    "items_hash": "the selected items (n_items, seed, the COCO folder)",
    "model_id": "the model",
    "model_revision": "the model's weights (the hub snapshot's commit; for a local folder its content digest, "
                      "sha256:<16 hex> of its weights, config, tokenizer, processor and chat template files)",
    "dtype": "the numeric precision of the model (bfloat16 on CUDA, float32 on CPU: another device)",
    "n_verbal_items": "how many items are also asked the verbal wordings v2 and v3 "
                      "(snakemake --config n_verbal_items=N, papermill -p n_verbal_items N)",
    "depth_backend": "the depth backend (the depth stage's backend)",
    "depth_model": "the depth model",
    "depth_revision": "the depth model's weights",
    "monitor_threshold_m": "the visibility monitor's abstain threshold",
    "readout_engine": "the read-out engine (murk.readout's batched read-out; the earlier per-unit engine agrees "
                      "to floating-point rounding, but its stores are not resumed with it)",
    "served_root": "the weights a served model's server reads (its /v1/models root: the folder or hub id it serves; "
                   "the model entry's server)",
    "images_per_batch": "the batched engine's images per scheduled batch (which images share a forward pass; "
                        "papermill -p images_per_batch N)",
    "schema_version": "the store layout (written by another murk version)",
}
_REQUIRED_ATTRS = ("config_hash", "items_hash", "model_id", "depth_backend")


def store_identity(*, config_hash: str, items_hash: str, model_id: str, depth_backend: str,
                   model_revision: str = "", dtype: Any = "", n_verbal_items: int = 0, n_items: int | None = None,
                   depth_model: str = "", depth_revision: str = "", **provenance: Any) -> dict[str, Any]:
    """The attributes of a read-out store: its identity (:data:`IDENTITY_ATTRS`) and provenance.

    Parameters
    ----------
    config_hash, items_hash : str
        From ``items_meta.json`` (stage *select*).
    model_id, model_revision : str
        The model asked for and its revision (``VLM.revision``).
    dtype : torch.dtype or str
        The model's dtype (``VLM.dtype``); stored as its name, e.g. ``"float32"``.
    n_verbal_items : int
        Items also asked the verbal wordings v2, v3. Stored as ``min(n_verbal_items,
        n_items)`` when ``n_items`` is given, so that asking for more than there are
        items does not change the identity.
    depth_backend, depth_model, depth_revision : str
        From ``depth/current.json`` (stage *depth*).
    **provenance
        Other attributes kept with the store (``pipeline_check``, ``n_visual_tokens``,
        ``depth_approximate``, ``note``, ...).

    Returns
    -------
    dict
        Attributes for :func:`open_readout_store` (``schema_version`` included).
    """
    n_verbal = int(n_verbal_items)
    if n_items is not None:
        n_verbal = min(n_verbal, int(n_items))
    return {"config_hash": config_hash, "items_hash": items_hash, "model_id": model_id,
            "model_revision": str(model_revision), "dtype": str(dtype).removeprefix("torch."),
            "n_verbal_items": n_verbal, "depth_backend": depth_backend, "depth_model": str(depth_model or ""),
            "depth_revision": str(depth_revision or ""), "schema_version": SCHEMA_VERSION, **provenance}


def _identity_differences(have: Mapping[str, Any], want: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The identity settings (:data:`IDENTITY_ATTRS`, in its order) in which a store's attributes ``have`` and a
    run's ``want`` differ: key -> (the store's value, the run's); a key one side lacks is ``"(not recorded)"``."""
    want = {"schema_version": SCHEMA_VERSION, **want}  # a new store records the current layout
    out = {}
    for k in IDENTITY_ATTRS:
        if k in have or k in want:
            a, b = have.get(k, "(not recorded)"), _attr(want.get(k, "(not recorded)"))
            if a != b:
                out[k] = (a, b)
    return out


def _identity_diff(path: Path, have: Mapping[str, Any], want: Mapping[str, Any]) -> str:
    """Message naming each identity setting in which a store and a run differ ('' if none)."""
    lines = [f"  {k}: store {a!r}, this run {b!r} ({IDENTITY_ATTRS[k]})"
             for k, (a, b) in _identity_differences(have, want).items()]
    if not lines:
        return ""
    return (f"read-out store {path} was written with other settings than this run:\n" + "\n".join(lines)
            + f"\nA store is never mixed from two settings. Either run with the store's settings, or delete it "
              f"to read out afresh (rm -r {path}), or give this run another output_dir.")


def _only_n_items_changed(have: Mapping[str, Any], want: Mapping[str, Any], n_have: int, n_want: int) -> bool:
    """Whether a store of ``n_have`` items and a run of ``n_want`` differ in nothing else than the model's
    ``n_items``: ``n_verbal_items`` is stored capped at the number of items (:func:`store_identity`), so a
    changed ``n_items`` can change it too; every other identity setting is equal."""
    for k, (a, b) in _identity_differences(have, want).items():
        if k != "n_verbal_items":
            return False
        try:
            a, b = int(a), int(b)
        except (TypeError, ValueError):
            return False
        # one asked n_verbal_items k, capped by each run's n_items, gives both; else it changed itself
        if not any(min(k, n_have) == a and min(k, n_want) == b for k in (a, b, max(n_have, n_want))):
            return False
    return True


def _n_items_message(path: Path, model_id: str, n_have: int, n_want: int) -> str:
    """One line: the model's ``n_items`` changed since its store was written, and the fixes."""
    return (f"read-out store {path} holds the first {n_have} items of model {model_id!r} and this run asks for "
            f"{n_want}: the model's n_items changed (the n_items of its entry in models or offline_models, "
            f"{{id: {model_id}, n_items: N}}, else the run's n_items; papermill: -p max_items N), and a store is "
            f"never mixed from two runs; fix: give that model n_items {n_have} again, or delete its store to read it out afresh "
            f"with {n_want} item{'s' if n_want != 1 else ''} (rm -r {path}; the other models' stores are kept), or give this run another "
            f"output_dir")


#: the name a store of superseded local weights is kept under, beside the store (not ``*.zarr``: no stage reads it)
SUPERSEDED_NAME = "{name}.superseded-{revision}"


def _is_local_revision(revision: Any) -> bool:
    """A local checkpoint folder's revision: its content digest, or ``local`` (what murk recorded before)."""
    return str(revision).startswith("sha256:") or revision == "local"


def set_aside_superseded(path: str | os.PathLike, attrs: Mapping[str, Any]) -> Path | None:
    """Move aside a store read out from other weights of the same local checkpoint, so a fresh one is made.

    A local checkpoint folder re-saved with other weights has another revision (its
    content digest, :func:`murk.core.checkpoint_revision`). Its read-out must
    neither resume the old store (a store mixed from two sets of weights) nor be
    refused: the store is renamed to :data:`SUPERSEDED_NAME` beside itself (kept, not
    read by any stage: ``murk.pipeline.foreign_stores``, the analyse stage and the
    markers read ``*.zarr`` stores only) and :func:`open_readout_store` then creates a
    fresh one. Any other difference of identity (:data:`IDENTITY_ATTRS`), also besides
    the revision, leaves the store in place for :func:`open_readout_store` to refuse.

    Parameters
    ----------
    path : path
        The read-out store (a shard's too).
    attrs : mapping
        This run's attributes (:func:`store_identity`).

    Returns
    -------
    Path or None
        Where the store now is (``<store>.superseded-sha256-<16 hex>``, with ``-2``, ``-3``
        … when that exists), or None when nothing was moved: no store, an unreadable
        one, the same identity, or a difference other than a local folder's revision.

    Raises
    ------
    OSError
        The store cannot be renamed (it is left as it was).
    """
    from murk.core import store_attrs

    path = Path(path)
    try:
        have = store_attrs(path)
    except (OSError, ValueError):
        return None
    if not isinstance(have, dict):
        return None
    differ = _identity_differences(have, attrs)
    if list(differ) != ["model_revision"]:
        return None
    old, new = differ["model_revision"]
    if not (_is_local_revision(old) and str(new).startswith("sha256:")):
        return None
    aside = path.with_name(SUPERSEDED_NAME.format(name=path.name, revision=str(old).replace(":", "-")))
    base, n = aside, 1
    while aside.exists():
        n += 1
        aside = base.with_name(f"{base.name}-{n}")
    os.replace(path, aside)
    return aside
