"""Whether a read-out store's weights are still its checkpoint's, decided from what the store records.

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

__all__ = ["weights_changed"]


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
