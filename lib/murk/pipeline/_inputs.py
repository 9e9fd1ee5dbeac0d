"""Whether the inputs an output root's results record still hold: decided from what the root records, so that a
copied root, or a root run from a second checkout, notices a change as the root it was made in does.

Snakemake's own rerun triggers (params, input, code) read the metadata of the checkout that ran the job
(``.snakemake/metadata``), and its file times; neither travels with a copied root. The root records its inputs
itself: the selection's configuration hash (``items_meta.json``, :func:`configuration_changed`), each selected
image's digest (``items_meta.json``, :func:`murk.core.changed_images`) and each read-out store's weights revision
(:func:`weights_changed`).

A read-out store records the revision of the weights it was read out from (``model_revision``: a local folder's
content digest, a hub snapshot's commit). The Snakefile compares it with the checkpoint's identity now
(:func:`murk.pipeline.checkpoint_identity`) and forces the read-out of a store of other weights, so a copied output
root, or a root run from a second checkout, notices a re-saved checkpoint: Snakemake's params trigger of the same
identity reads the metadata of the checkout that ran the job only.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from murk import core

__all__ = ["weights_changed", "configuration_changed"]


def _comparable_revision(revision: Any) -> str | None:
    """A weights revision that names content: a local folder's ``sha256:<16 hex>`` or a hub commit (40 hex)."""
    text = str(revision)
    return text if re.fullmatch(r"sha256:[0-9a-f]{16}|[0-9a-f]{40}", text) else None


def weights_changed(store: str | os.PathLike, model: str, root: str | os.PathLike, identity: str) -> str | None:
    """Why a read-out store holds the read-out of other weights than its checkpoint has now, or None.

    Decided from what the store records (its ``model_revision`` attribute, :data:`murk.results.IDENTITY_ATTRS`),
    not from Snakemake's metadata of one checkout (the params trigger of :func:`murk.pipeline.checkpoint_identity`):
    a copied output root, or a root read from a second checkout, notices a re-saved checkpoint too. The Snakefile
    forces the read-out of a store this function names (:func:`murk.pipeline.force_rerun`), which sets the old
    store aside (:func:`murk.results.set_aside_superseded`) and reads out afresh; a dry run lists it and changes
    nothing.

    Parameters
    ----------
    store : path
        The read-out store (``<root>/readout/<slug>.zarr``, a shard's).
    model : str
        The model entry's id.
    root : path
        The output root.
    identity : str
        :func:`murk.pipeline.checkpoint_identity` of the model now.

    Returns
    -------
    str or None
        E.g. ``"the store … was read out from the weights sha256:1111… of /models/m, which are sha256:2222…
        now …"``.
        None where the two are not both known and comparable: no store (or unreadable attributes); a hub id
        online (``""``, the read-out records the commit it loads); a checkpoint murk builds that is not built
        yet; ``"unreadable"``; a store of an earlier murk that recorded ``local`` for a folder. Compared are a
        local folder's content digest (``sha256:<16 hex>``, also a murk-built checkpoint changed since it was
        built), a murk-built checkpoint as built (``""``: the revision of the digest its marker,
        :data:`murk.core.BUILT_MARKER`, records) and an offline hub id's cached commit (40 hex).
    """
    try:
        recorded = _comparable_revision(core.store_attrs(store).get("model_revision", ""))
    except (OSError, ValueError, AttributeError):
        return None
    now = _comparable_revision(identity)
    if identity == "":   # a murk-built checkpoint as built: what its marker records
        try:
            built = core.checkpoints_dir(root) / core.model_slug(model) / core.BUILT_MARKER
            digest = json.loads(built.read_text(encoding="utf-8")).get("digest")
        except (OSError, ValueError, AttributeError):
            digest = None
        now = _comparable_revision(f"sha256:{digest[:16]}") if isinstance(digest, str) else None
    if recorded is None or now is None or recorded == now:
        return None
    if recorded.startswith("sha256:") != now.startswith("sha256:"):   # a folder's digest and a hub commit
        return None
    return (f"the store {store} was read out from the weights {recorded} of {model}, which are {now} now "
            f"(the checkpoint was re-saved since; its revision, as the store records it)")


def configuration_changed(root: str | os.PathLike, config_hash: str) -> str | None:
    """Why the root's selection was made with another configuration than the run's now, or None.

    Parameters
    ----------
    root : path
        The output root; its ``items_meta.json`` records the configuration hash select used.
    config_hash : str
        :func:`murk.core.config_hash` of the configuration the run's select would use now (``data/config.yaml`` or
        ``$MURK_CONFIG``, with the run's design settings applied: :func:`murk.protocol.design_config`).

    Returns
    -------
    str or None
        E.g. ``"the configuration (config hash 1a2b3c4d5e6f) is not the one select recorded in …/items_meta.json
        (9f8e7d6c5b4a) …"``; None when the root records none (no selection yet, an unreadable file) or the same.
        The Snakefile then forces select, which re-selects, or refuses a root that holds read-out stores of the
        other configuration, naming them and the fixes (:func:`murk.pipeline.refuse_foreign_stores`).
    """
    meta = os.path.join(os.fspath(root), "items_meta.json")
    try:
        with open(meta, encoding="utf-8") as f:
            recorded = json.load(f).get("config_hash")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(recorded, str) or not recorded or recorded == config_hash:
        return None
    return (f"the configuration (config hash {config_hash[:12]}) is not the one select recorded in {meta} "
            f"({recorded[:12]}): the configuration file (data/config.yaml, $MURK_CONFIG) or the run's design "
            f"settings changed")
