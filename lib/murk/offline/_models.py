"""Every model id murk builds offline (the tiny and the real-format pipeline checks), and the one call that builds
either kind on first use (:func:`ensure_offline_checkpoint`).
"""

from __future__ import annotations

import os
from pathlib import Path

from murk.offline._checkpoints import TINY_MODELS, ensure_tiny_checkpoint
from murk.offline._realformat import REALFORMAT_MODELS, ensure_realformat_checkpoint

__all__ = ["OFFLINE_MODELS", "ensure_offline_checkpoint"]


#: every model id murk builds offline (tiny and real-format pipeline checks)
OFFLINE_MODELS: tuple[str, ...] = (*TINY_MODELS, *REALFORMAT_MODELS)


def ensure_offline_checkpoint(model_id: str, root: str | os.PathLike | None = None) -> Path:
    """Folder of a tiny or real-format checkpoint (:data:`OFFLINE_MODELS`), built on first use."""
    if model_id in REALFORMAT_MODELS:
        return ensure_realformat_checkpoint(model_id, root)
    return ensure_tiny_checkpoint(model_id, root)

