"""The checks every model folder passes before it is loaded: its safetensors weights files, its model kind, its custom code.

Real hub checkpoints and the offline builds of :mod:`murk.offline` alike pass through
:func:`check_weight_files` before ``from_pretrained`` (:func:`murk.readout.load_vlm`), so a
damaged or missing weights file is named in one line instead of safetensors' bare error.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = [
    "SAFE_WEIGHTS",
    "SAFE_WEIGHTS_INDEX",
    "CUSTOM_CODE_FILES",
    "CheckpointFileError",
    "safetensors_tensor_names",
    "check_weight_files",
    "model_kind",
    "declared_custom_code",
]


# --- checking a checkpoint before it is loaded (issue 21) --------------------------------
# What transformers itself says about a damaged weights file is safetensors' ``SafetensorError``
# ("Error while deserializing header: header too small | invalid header length | header too large |
# incomplete metadata, file not fully covered | invalid JSON in header ...", none naming the file),
# and about a shard named by the index but absent a bare ``FileNotFoundError``. These checks read
# only the 8-byte length and the JSON header of each weights file, so the file can be named.

#: the weights files of a safetensors checkpoint (transformers' SAFE_WEIGHTS_NAME / SAFE_WEIGHTS_INDEX_NAME)
SAFE_WEIGHTS = "model.safetensors"
SAFE_WEIGHTS_INDEX = "model.safetensors.index.json"
#: safetensors refuses a header longer than this ("header too large"; safetensors' MAX_HEADER_SIZE)
_SAFETENSORS_MAX_HEADER = 100_000_000
_LFS_POINTER = b"version https://git-lfs"
#: the files that may declare custom code (``auto_map``), in the order transformers reads them
CUSTOM_CODE_FILES = ("config.json", "tokenizer_config.json", "processor_config.json", "preprocessor_config.json",
                     "video_preprocessor_config.json")


class CheckpointFileError(ValueError):
    """A weights file of a checkpoint folder that is missing, truncated or damaged.

    Attributes
    ----------
    path : Path
        The file (which may not exist).
    problem : str
        What is wrong with it, one line, without the fix (the caller knows which command ran).
    lfs_pointer : bool
        The file is a Git LFS pointer (a clone without ``git lfs``), not the weights.
    """

    def __init__(self, path: Path, problem: str, lfs_pointer: bool = False):
        super().__init__(f"{path} {problem}")
        self.path = Path(path)
        self.problem = problem
        self.lfs_pointer = lfs_pointer


def safetensors_tensor_names(path: str | os.PathLike) -> set[str]:
    """The tensor names of a safetensors file, after checking that the file is whole.

    Reads the 8-byte little-endian header length and the JSON header only (safetensors'
    format), and compares the file's size with the end of the last tensor the header
    describes: a file cut short (a copy or download that stopped, a full disk) is found
    without reading the weights.

    Parameters
    ----------
    path : path
        A ``*.safetensors`` file.

    Returns
    -------
    set of str
        The names of its tensors (the header's keys without ``__metadata__``).

    Raises
    ------
    CheckpointFileError
        If the file is missing, a Git LFS pointer, shorter than its header says (truncated),
        longer than it (damaged), or its header is not a safetensors header.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointFileError(path, "is missing")
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if head.startswith(_LFS_POINTER[:8]) and (head + f.read(64)).startswith(_LFS_POINTER):
            raise CheckpointFileError(path, f"is a Git LFS pointer ({size} bytes), not the weights", lfs_pointer=True)
        if len(head) < 8:
            raise CheckpointFileError(path, f"is {size} bytes long: too short for a safetensors file "
                                            f"(truncated or empty)")
        n = int.from_bytes(head, "little")
        if n > _SAFETENSORS_MAX_HEADER:
            raise CheckpointFileError(path, f"is not a safetensors file, or is damaged: its first 8 bytes claim a "
                                            f"header of {n:,} bytes (safetensors reads at most "
                                            f"{_SAFETENSORS_MAX_HEADER:,})")
        if n > size - 8:
            raise CheckpointFileError(path, f"is truncated: {size:,} bytes long, but its header alone claims "
                                            f"{n:,} bytes")
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
        ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
    except (ValueError, UnicodeDecodeError, TypeError, KeyError, IndexError, AttributeError) as err:
        raise CheckpointFileError(path, f"has a damaged header ({type(err).__name__}: "
                                        f"{' '.join(str(err).split())[:120]})") from None
    expected = 8 + n + max(ends, default=0)
    if size < expected:
        raise CheckpointFileError(path, f"is truncated: {size:,} bytes of the {expected:,} its header describes "
                                        f"({expected - size:,} missing)")
    if size > expected:
        raise CheckpointFileError(path, f"is damaged: {size:,} bytes, {size - expected:,} more than its header "
                                        f"describes ({expected:,})")
    return {k for k in header if k != "__metadata__"}


def check_weight_files(folder: str | os.PathLike) -> tuple[Path, ...]:
    """Check the safetensors weights of a checkpoint folder before loading it.

    The files transformers would load, in its order: ``model.safetensors``, else the shards
    named by ``model.safetensors.index.json`` (each must exist, be whole
    (:func:`safetensors_tensor_names`) and hold every tensor the index assigns to it).

    Parameters
    ----------
    folder : path
        A checkpoint folder (``save_pretrained`` layout, or a hub snapshot).

    Returns
    -------
    tuple of Path
        The weights files checked; empty when the folder has no safetensors weights at all
        (the caller decides: pickle weights, or none).

    Raises
    ------
    CheckpointFileError
        Naming the first file that is missing, truncated or damaged; shards without their
        index are reported as a missing ``model.safetensors.index.json``.
    """
    folder = Path(folder)
    single, index = folder / SAFE_WEIGHTS, folder / SAFE_WEIGHTS_INDEX
    if single.is_file():
        safetensors_tensor_names(single)
        return (single,)
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            shards = sorted(set(weight_map.values()))
        except (ValueError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as err:
            raise CheckpointFileError(index, f"has no readable weight_map ({type(err).__name__}: "
                                             f"{' '.join(str(err).split())[:120]})") from None
        absent = [s for s in shards if not (folder / s).is_file()]
        if absent:
            n_t = sum(1 for s in weight_map.values() if s == absent[0])
            more = f"; {len(absent)} of its {len(shards)} shards are missing" if len(absent) > 1 else ""
            raise CheckpointFileError(folder / absent[0], f"is missing: {index.name} assigns {n_t} tensor(s) to "
                                                          f"it{more}")
        for s in shards:
            names = safetensors_tensor_names(folder / s)
            lacking = sorted(t for t, shard in weight_map.items() if shard == s and t not in names)
            if lacking:
                raise CheckpointFileError(folder / s, f"lacks {len(lacking)} tensor(s) that {index.name} assigns "
                                                      f"to it (e.g. {lacking[0]}): incomplete, or a shard of "
                                                      f"another checkpoint")
        return tuple(folder / s for s in shards)
    shards = sorted(folder.glob("model-*-of-*.safetensors"))
    if shards:
        raise CheckpointFileError(index, f"is missing: the folder holds the shards {shards[0].name} ... "
                                         f"({len(shards)} in all) but not the index that lists their tensors")
    return ()


def model_kind(config: Any) -> str | None:
    """What a checkpoint is, when it is not an image-text-to-text model (None when it is one).

    Parameters
    ----------
    config : transformers.PretrainedConfig
        From ``AutoConfig.from_pretrained``.

    Returns
    -------
    str or None
        None when transformers' ``AutoModelForImageTextToText`` knows its configuration class
        (the VLMs murk reads out); otherwise ``"a text-only language model"``, ``"a vision-only
        model"`` or ``"not an image-text-to-text model"``, followed by its ``model_type`` and
        ``architectures`` (e.g. ``"a text-only language model (model_type 'llama', architectures
        LlamaForCausalLM)"``).
    """
    from transformers import AutoModelForImageTextToText
    from transformers.models.auto import modeling_auto as ma

    mt = str(getattr(config, "model_type", "") or "")
    try:  # the test AutoModelForImageTextToText itself applies (its configuration classes)
        if type(config) in AutoModelForImageTextToText._model_mapping:
            return None
    except (AttributeError, TypeError):  # a transformers without that private mapping: by model_type
        if mt in ma.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
            return None
    vision = ("MODEL_FOR_IMAGE_MAPPING_NAMES", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
              "MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES", "MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES",
              "MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES", "MODEL_FOR_IMAGE_SEGMENTATION_MAPPING_NAMES",
              "MODEL_FOR_BACKBONE_MAPPING_NAMES", "MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES",
              "MODEL_FOR_MASKED_IMAGE_MODELING_MAPPING_NAMES", "MODEL_FOR_VIDEO_CLASSIFICATION_MAPPING_NAMES")
    text = ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
            "MODEL_FOR_MASKED_LM_MAPPING_NAMES")

    def known(names):
        return any(mt in getattr(ma, n, {}) for n in names)

    has_vision = getattr(config, "vision_config", None) is not None
    if known(text) and not has_vision:
        kind = "a text-only language model"
    elif known(vision) or (has_vision and getattr(config, "text_config", None) is None):
        kind = "a vision-only model"
    else:
        kind = "not an image-text-to-text model"
    archs = ", ".join(getattr(config, "architectures", None) or []) or "none listed"
    return f"{kind} (model_type {mt!r}, architectures {archs})"


def _class_name(ref: Any) -> str:
    """``"module.Class"`` of an ``auto_map`` entry (a string, ``"repo--module.Class"`` or a [slow, fast] pair)."""
    if isinstance(ref, (list, tuple)):
        ref = next((r for r in reversed(ref) if r), "")
    return str(ref).split("--")[-1]


def declared_custom_code(folder: str | os.PathLike) -> dict[str, dict[str, str]]:
    """The custom code a checkpoint folder declares: ``{file: {auto class: "module.Class"}}``.

    Read from the ``auto_map`` of each of :data:`CUSTOM_CODE_FILES` present (in
    ``tokenizer_config.json`` a [slow, fast] pair: the fast one, else the slow one). A file
    that is missing or not valid JSON declares nothing here (it is named elsewhere).
    """
    out: dict[str, dict[str, str]] = {}
    for name in CUSTOM_CODE_FILES:
        f = Path(folder) / name
        try:
            amap = json.loads(f.read_text(encoding="utf-8")).get("auto_map") if f.is_file() else None
        except (ValueError, UnicodeDecodeError, AttributeError):
            amap = None
        if isinstance(amap, dict) and amap:
            out[name] = {str(k): _class_name(v) for k, v in sorted(amap.items()) if _class_name(v)}
    return {k: v for k, v in out.items() if v}
