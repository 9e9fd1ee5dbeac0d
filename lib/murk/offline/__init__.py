"""The offline checkpoints: tiny random-weight builds of the real architectures and real-format stand-ins, built on
first use where a run is offline (pipeline checks; their answers carry no information).

Layer 4 of 9 of the data flow (core < scene < protocol < offline < readout < results < monitor < report <
pipeline). It may import :mod:`murk.core`, :mod:`murk.scene` and :mod:`murk.protocol`. The names below are its
public surface; the modules behind it (``_checkpoints``: the tiny builds, ``_realformat``, ``_models``) are its
implementation.
"""

from __future__ import annotations

from murk.offline._realformat import (  # noqa: F401
    INTERNVL_NAMED_TOKENS,
    REALFORMAT_MODELS,
    REAL_FILES_ENV,
    real_model_files_dir,
    build_realformat_checkpoint,
    ensure_realformat_checkpoint,
    internvl_tokenizer_config,
)
from murk.offline._checkpoints import (  # noqa: F401
    gemma4_max_soft_tokens,
    TINY_MODELS,
    MARKER_FILE,
    MAX_PIXELS,
    build_tiny_checkpoint,
    ensure_tiny_checkpoint,
    is_tiny_checkpoint,
)
from murk.offline._models import (  # noqa: F401
    OFFLINE_MODELS,
    ensure_offline_checkpoint,
)

__all__ = [
    "INTERNVL_NAMED_TOKENS",
    "gemma4_max_soft_tokens",
    "TINY_MODELS",
    "MARKER_FILE",
    "MAX_PIXELS",
    "build_tiny_checkpoint",
    "ensure_tiny_checkpoint",
    "is_tiny_checkpoint",
    "REALFORMAT_MODELS",
    "OFFLINE_MODELS",
    "REAL_FILES_ENV",
    "real_model_files_dir",
    "build_realformat_checkpoint",
    "ensure_realformat_checkpoint",
    "ensure_offline_checkpoint",
    "internvl_tokenizer_config",
]
