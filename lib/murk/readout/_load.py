"""Loading a VLM, and refusing what cannot be loaded: the checkpoint folder's files checked before transformers
reads them, a revision resolved, the processor, greedy generation settings and the float32 head
(:func:`load_vlm`, :func:`vlm_from_parts`); every refusal is one line naming the file or setting and the fix,
in the words of the command that was run.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from murk import core
from murk.core import load_config
from murk.offline import INTERNVL_NAMED_TOKENS, OFFLINE_MODELS, ensure_offline_checkpoint, is_tiny_checkpoint
from murk.readout._vlm import DEFAULT_MAX_SIDE_PX, VLM, count_visual_tokens, option_token_ids, single_tile_kwargs
from murk.readout._weight_files import CheckpointFileError, check_weight_files, declared_custom_code, model_kind

__all__ = ["load_vlm", "LOAD_COMMANDS", "setting_words", "custom_code_note", "hub_revision", "vlm_from_parts",
           "float32_head"]


# --------------------------------------------------------------------------- loading

#: small JSON files of a checkpoint folder, parsed before loading (a broken one is named in the error)
_JSON_FILES = ("config.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json",
               "added_tokens.json", "preprocessor_config.json", "processor_config.json",
               "video_preprocessor_config.json", "chat_template.json", "model.safetensors.index.json")
#: large JSON files, parsed only to explain a failed load
_BIG_JSON_FILES = ("tokenizer.json",)
_PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")
#: generation settings that are not greedy decoding (ignored by murk, recorded in VLM.ignored_generation_settings)
_NON_GREEDY = {"do_sample": False, "temperature": 1.0, "top_k": 50, "top_p": 1.0, "min_p": None, "typical_p": 1.0,
               "repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "num_beams": 1, "length_penalty": 1.0,
               "encoder_repetition_penalty": 1.0, "bad_words_ids": None, "suppress_tokens": None,
               "begin_suppress_tokens": None, "sequence_bias": None, "min_length": 0, "min_new_tokens": None,
               "forced_bos_token_id": None, "forced_eos_token_id": None, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0,
               "guidance_scale": None, "renormalize_logits": False}


class _LoadError(OSError):
    """A one-line loading error that names the model, what failed and the fix."""


#: the commands that run a read-out (:func:`load_vlm`'s ``command``): a fix is given in the words of the
#: command the user ran (the Snakefile passes ``-p run_by snakemake`` to the read-out notebook)
LOAD_COMMANDS = ("python", "papermill", "snakemake")


def setting_words(name: str, value: Any, command: str = "python") -> str:
    """How a user of ``command`` sets the loading option ``name`` to ``value``, in the words they type.

    Parameters
    ----------
    name : str
        A loading option of :func:`load_vlm` that is also a run setting (``data/workflow.yaml``):
        ``trust_remote_code`` or ``allow_pickle``.
    value : bool
    command : {"python", "papermill", "snakemake"}
        What runs the read-out (:data:`LOAD_COMMANDS`).

    Returns
    -------
    str
        E.g. ``"rerun with --config allow_pickle=true (make demo ARGS='--config allow_pickle=true')"``
        (Snakemake), ``"rerun the read-out notebook with -p allow_pickle True (papermill) ..."``,
        ``"pass allow_pickle=True to murk.readout.load_vlm"`` (Python).

    Raises
    ------
    ValueError
        If ``command`` is not one of :data:`LOAD_COMMANDS`.
    """
    yaml_value = json.dumps(value) if isinstance(value, bool) else str(value)
    if command == "snakemake":
        return (f"rerun with --config {name}={yaml_value} (make demo ARGS='--config {name}={yaml_value}'), or set "
                f"{name}: {yaml_value} in data/workflow.yaml")
    if command == "papermill":
        return (f"rerun the read-out notebook with -p {name} {value} (papermill), or set {name}: {yaml_value} "
                f"in data/workflow.yaml")
    if command == "python":
        return f"pass {name}={value!r} to murk.readout.load_vlm"
    raise ValueError(f"command={command!r}: use one of {', '.join(LOAD_COMMANDS)}")


def _model_words(command: str) -> str:
    """How a user of ``command`` names another model (an image-text-to-text one)."""
    if command == "snakemake":
        key = "offline_models" if core.offline() else "models"
        return (f"list an image-text-to-text model in {key} (data/workflow.yaml, or "
                f"make demo ARGS='--config {key}=[\"org/model\"]'), e.g. one of data/study.yaml's models")
    if command == "papermill":
        return ("rerun the read-out notebook with -p model <an image-text-to-text model: hub id or folder>, "
                "e.g. one of data/study.yaml's models")
    return ("pass murk.readout.load_vlm an image-text-to-text model (hub id or folder), e.g. one of "
            "data/study.yaml's models")


def custom_code_note(not_run: Mapping[str, str]) -> str:
    """One line saying which custom code was not run and which built-in class was used instead ('' if none).

    Parameters
    ----------
    not_run : dict of str -> str
        :attr:`VLM.custom_code_not_run`.
    """
    if not not_run:
        return ""
    parts = []
    for where, what in not_run.items():
        custom, _, used = what.partition(" -> ")
        parts.append(f"{where} names {custom}: " + (f"the built-in transformers class {used} was used instead"
                                                     if used else "not used by murk"))
    return ("custom code declared by the checkpoint was not run (trust_remote_code is false): "
            + "; ".join(parts))


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


def _resolve_source(model: str, root: str | os.PathLike | None) -> tuple[str, bool, bool]:
    """Folder or hub id to load from, whether it is local, whether murk built it (a pipeline check)."""
    if model in OFFLINE_MODELS:
        return str(ensure_offline_checkpoint(model, root)), True, True
    p = Path(model).expanduser()
    if p.is_dir():
        return str(p.resolve()), True, is_tiny_checkpoint(p)
    return model, False, False


def _not_found(model: str, err: Exception) -> OSError:
    hint = (
        "MURK_OFFLINE=1 is set, so only files already on this machine are used: pass a local "
        "checkpoint folder, a pipeline-check model murk builds offline "
        f"({', '.join(OFFLINE_MODELS)}), or put the model into the Hugging Face cache "
        "and retry; unset MURK_OFFLINE to allow downloads"
        if core.offline()
        else "pass a local checkpoint folder or a pipeline-check model murk builds offline "
        f"({', '.join(OFFLINE_MODELS)}), or check the Hugging Face id and network access"
    )
    return _LoadError(f"cannot load model {model!r}: {type(err).__name__}: {_one_line(err)}; fix: {hint}")


def _check_json(model: str, folder: Path, names: Sequence[str]) -> None:
    """Raise a one-line error naming the first of ``names`` in ``folder`` that is not valid JSON."""
    for name in names:
        f = folder / name
        if f.is_file():
            try:
                json.loads(f.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError) as err:
                raise _LoadError(f"cannot load model {model!r}: {f} is not valid JSON ({_one_line(err)}); "
                                 f"fix: repair or re-download that file") from err


def _weights_fix(model: str, err: CheckpointFileError, folder: Path, local: bool, rebuilt: bool) -> str:
    """The fix for a missing, truncated or damaged weights file ``err.path`` of ``folder``
    (``rebuilt``: a checkpoint murk builds on first use, :data:`murk.offline.OFFLINE_MODELS`)."""
    if err.lfs_pointer:
        return f"fetch the weights: run git lfs pull in {folder} (it was cloned without Git LFS)"
    if rebuilt:
        return (f"delete the folder {folder} (rm -r {folder}) and rerun the same command: murk builds this "
                f"pipeline-check checkpoint again")
    if local:
        return (f"copy or download {err.path.name} into {folder} again (a hub checkpoint: hf download <org/name> "
                f"--local-dir {folder}; a model of yours: save it again with save_pretrained)")
    try:
        name = err.path.relative_to(folder).as_posix()
    except ValueError:
        name = err.path.name
    return (f"download it again: hf download {model} {name} --force-download (this needs the network: with "
            f"MURK_OFFLINE=1 only the Hugging Face cache is read)")


def _weights_error(model: str, err: CheckpointFileError, folder: Path, local: bool, rebuilt: bool) -> _LoadError:
    return _LoadError(f"cannot load model {model!r}: {err.path} {err.problem}; "
                      f"fix: {_weights_fix(model, err, folder, local, rebuilt)}")


#: where a checkpoint keeps its chat template, in the order transformers reads them
_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json", "processor_config.json", "tokenizer_config.json")
#: where a checkpoint keeps its tokenizer's vocabulary
_TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model", "tokenizer_config.json")


def _first_file(folder: Path | None, names: Sequence[str], key: str | None = None) -> str | None:
    """The first of ``names`` in ``folder`` that exists (a JSON file: that holds ``key``), or None."""
    for name in names:
        f = folder / name if folder is not None else None
        if f is None or not f.is_file():
            continue
        if key is not None and f.suffix == ".json" and name != f"{key}.json":
            try:
                if key not in json.loads(f.read_text(encoding="utf-8")):
                    continue
            except (ValueError, UnicodeDecodeError, OSError):
                continue
        return str(f)
    return None


def _parts_error(model: str, folder: Path | None, err: Exception, command: str) -> _LoadError | None:
    """The one-line error of a loaded checkpoint whose chat template raises or whose tokenizer has no single
    token per option letter (None for any other error: it passes unchanged)."""
    where = "" if folder is not None else f" of the hub snapshot of {model}"
    if type(err).__module__.startswith("jinja2"):  # TemplateError, TemplateSyntaxError, UndefinedError ...
        f = _first_file(folder, _TEMPLATE_FILES, "chat_template") or f"the chat template{where}"
        return _LoadError(
            f"cannot load model {model!r}: its chat template {f} fails on murk's prompt (one user turn: an image, "
            f"then text; {type(err).__name__}: {_one_line(err)}); fix: repair that template (it must accept "
            f"content parts of type image and text), or copy the chat template of the model's original "
            f"release into it; or {_model_words(command)}")
    if isinstance(err, ValueError) and ("single-token variant" in str(err) or "is a variant of both" in str(err)):
        f = _first_file(folder, _TOKENIZER_FILES) or f"the tokenizer{where}"
        return _LoadError(
            f"cannot load model {model!r}: its tokenizer ({f}) cannot give each option letter one token of its "
            f"own ({_one_line(err)}); murk reads an option's probability from the first token of the answer, so "
            f"each of readout.option_letters (data/config.yaml) must be a single token of the tokenizer, one "
            f"letter per token; fix: use the tokenizer files of the model's original release, or "
            f"{_model_words(command)}")
    return None


def _check_folder(model: str, folder: Path) -> None:
    """Refuse a local checkpoint folder whose JSON files are broken or that has no ``config.json``."""
    _check_json(model, folder, _JSON_FILES)
    if not (folder / "config.json").is_file():
        raise _LoadError(f"cannot load model {model!r}: {folder / 'config.json'} is missing; fix: point to a "
                         f"checkpoint folder written by save_pretrained (or a Hugging Face snapshot)")


def _check_weights(model: str, folder: Path, allow_pickle: bool, command: str = "python",
                   rebuilt: bool = False) -> tuple[Path, ...]:
    """Refuse a local checkpoint folder whose weights are damaged, missing or pickles only; return its
    safetensors weights files (:func:`murk.readout.check_weight_files`)."""
    try:
        weights = check_weight_files(folder)
    except CheckpointFileError as err:
        raise _weights_error(model, err, folder, True, rebuilt) from None
    pickles = [n for n in _PICKLE_WEIGHTS if (folder / n).is_file()]
    if not weights and pickles and not allow_pickle:
        raise _LoadError(
            f"cannot load model {model!r}: {folder} holds weights only as {pickles[0]} (a pickle, which can run "
            f"code when loaded) and murk loads safetensors only; fix: convert the weights to safetensors "
            f"(load them once and save_pretrained), or, if you trust the files, "
            f"{setting_words('allow_pickle', True, command)}")
    if not weights and not pickles:
        raise _LoadError(
            f"cannot load model {model!r}: {folder} holds no weights (no model.safetensors, "
            f"model.safetensors.index.json or pytorch_model.bin); fix: copy the weights files into that folder "
            f"(or download the checkpoint again: hf download <org/name> --local-dir {folder})")
    return weights


def _snapshot_folder(model: str, kwargs: Mapping[str, Any]) -> Path | None:
    """The local folder of a hub id's snapshot (from the Hugging Face cache), or None."""
    try:
        from transformers.utils import cached_file

        f = cached_file(model, "config.json", local_files_only=True, _raise_exceptions_for_missing_entries=False,
                        **{k: v for k, v in kwargs.items() if k == "revision"})
    except Exception:  # noqa: BLE001 - only a better message depends on it
        return None
    return Path(f).parent if f else None


def hub_revision(model: str, kwargs: Mapping[str, Any] = {}) -> str | None:
    """The commit hash of the hub snapshot a hub id loads from, or None.

    transformers 5 no longer sets ``config._commit_hash``; the Hugging Face cache
    names each snapshot folder after its commit (``models--<org>--<name>/snapshots/<40
    hex digits>/``), so the folder that holds the id's ``config.json`` tells the
    revision. It is part of a store's identity (``model_revision``): two snapshots of
    one id never share a store.

    Parameters
    ----------
    model : str
        A hub id.
    kwargs : mapping
        The loading keyword arguments (``revision`` is honoured).

    Returns
    -------
    str or None
        40 lowercase hex digits, or None when the id is not in the cache or the
        folder is not named by a commit.
    """
    import re

    folder = _snapshot_folder(model, kwargs)
    return folder.name if folder is not None and re.fullmatch(r"[0-9a-f]{40}", folder.name) else None


_ROLE_OF_AUTO = {"AutoConfig": "config", "AutoProcessor": "processor", "AutoTokenizer": "tokenizer",
                 "AutoImageProcessor": "image_processor", "AutoVideoProcessor": "video_processor",
                 "AutoFeatureExtractor": "feature_extractor"}


def _custom_code_not_run(declared: Mapping[str, Mapping[str, str]], net: Any, net_config: Any,
                         processor: Any) -> dict[str, str]:
    """``{"<file> <auto class>": "<custom class> -> <built-in class used>"}`` (see :attr:`VLM.custom_code_not_run`)."""
    out = {}
    for fname, amap in declared.items():
        for auto, custom in amap.items():
            if auto.startswith("AutoModel"):
                used = net
            elif auto == "AutoConfig":
                used = net_config
            elif auto == "AutoProcessor":
                used = processor
            else:
                role = _ROLE_OF_AUTO.get(auto)
                used = getattr(processor, role, None) if role else None
            out[f"{fname} {auto}"] = f"{custom} -> {type(used).__name__}" if used is not None else custom
    return out


def _internvl_names_missing(err: Exception) -> bool:
    return isinstance(err, AttributeError) and any(n in str(err) for n in INTERNVL_NAMED_TOKENS)


def _tokenizer_with_names(model: str, source: str, kwargs: Mapping[str, Any], names: Mapping[str, str]):
    """The tokenizer with the named special tokens InternVL's converter writes, taken from its vocabulary."""
    from transformers import AutoTokenizer

    plain = AutoTokenizer.from_pretrained(source, **kwargs)
    vocab = plain.get_vocab()
    missing = [t for t in names.values() if t not in vocab]
    where = Path(source) / "tokenizer_config.json" if Path(source).is_dir() else f"{source}: tokenizer_config.json"
    if missing:
        raise _LoadError(
            f"cannot load model {model!r}: {where} names no image tokens ({', '.join(sorted(names))}) and the "
            f"vocabulary lacks {', '.join(missing)}; fix: use a tokenizer written by transformers' InternVL converter "
            f"(its extra_special_tokens: {json.dumps(dict(names))})")
    tok = AutoTokenizer.from_pretrained(source, extra_special_tokens=dict(names), **kwargs)
    bad = [t for t in names.values() if tok.convert_tokens_to_ids(t) != vocab[t]]
    if bad:
        raise _LoadError(f"cannot load model {model!r}: naming the image tokens of {where} moved {bad}; fix: add "
                         f"extra_special_tokens {json.dumps(dict(names))} to that file")
    logging.getLogger("murk").warning("%s: %s names no image tokens; using the names of transformers' InternVL "
                                      "converter (%s)", model, where, ", ".join(f"{k}={v}" for k, v in names.items()))
    return tok


def _load_processor(model: str, source: str, kwargs: Mapping[str, Any]):
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(source, **kwargs)
    except AttributeError as err:
        if not _internvl_names_missing(err):
            raise
    tokenizer = _tokenizer_with_names(model, source, kwargs, INTERNVL_NAMED_TOKENS)
    return AutoProcessor.from_pretrained(source, tokenizer=tokenizer, **kwargs)


def _greedy_generation_config(net: Any, tokenizer: Any) -> tuple[Any, dict[str, Any], tuple[int, ...]]:
    """A greedy generation config with the checkpoint's special-token ids; what it ignores; the EOS ids.

    The end-of-sequence ids are those of the checkpoint's generation config, model config,
    text config and tokenizer together, so ``generate`` and murk's own decoding stop alike.
    """
    from transformers import GenerationConfig

    ckpt = net.generation_config
    ignored = {}
    for k, neutral in _NON_GREEDY.items():
        v = getattr(ckpt, k, None)
        if v is not None and v != neutral:
            ignored[k] = v.tolist() if hasattr(v, "tolist") else v
    eos: list[int] = []
    for obj in (ckpt, net.config, net.config.get_text_config(), tokenizer):
        e = getattr(obj, "eos_token_id", None)
        if e is not None:
            eos += [int(i) for i in (e if isinstance(e, (list, tuple)) else [e])]
    eos_tokens = tuple(dict.fromkeys(eos))
    greedy = GenerationConfig(bos_token_id=getattr(ckpt, "bos_token_id", None),
                              pad_token_id=getattr(ckpt, "pad_token_id", None),
                              eos_token_id=list(eos_tokens) or None, do_sample=False, num_beams=1)
    return greedy, ignored, eos_tokens


def float32_head(net: Any) -> None:
    """Compute the output head (hidden state -> logits) in float32 when the model runs in a lower precision.

    In bfloat16 the logits themselves are rounded to 8 significant bits: a logit of 20
    carries an error of up to 0.06, which moves c_int by up to ~1e-2 between two ways of
    computing the same prompt. With the head in float32 (a float32 copy of its weight:
    vocab x hidden x 4 bytes, e.g. 1.2 GB for Qwen3-VL-2B, 1.6 GB for Gemma 4 E2B) the
    logits keep the precision of the bf16 hidden state, and the first-token softmax is
    taken in float32 (:func:`softmax32`). The model's own post-processing (Gemma's
    final-logit soft-capping) then runs in float32 too.
    """
    import torch

    head = net.get_output_embeddings() if hasattr(net, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if weight is None or weight.dtype == torch.float32 or getattr(head, "_murk_float32", False):
        return
    w32 = weight.detach().float()
    b32 = None if getattr(head, "bias", None) is None else head.bias.detach().float()

    def forward(hidden):
        return torch.nn.functional.linear(hidden.float(), w32, b32)

    head.forward = forward
    head._murk_float32 = True


def _pretrained_kwargs(trust_remote_code: bool) -> dict[str, Any]:
    """The keywords of every ``from_pretrained`` of a load: ``trust_remote_code``, and offline
    (``murk.core.offline``) ``local_files_only`` with the hub's and transformers' offline switches set."""
    kwargs: dict[str, Any] = {"trust_remote_code": bool(trust_remote_code)}
    if core.offline():
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        kwargs["local_files_only"] = True
    return kwargs


def load_vlm(
    model: str,
    device: str | None = None,
    dtype: Any = None,
    root: str | os.PathLike | None = None,
    config: Mapping[str, Any] | None = None,
    *,
    trust_remote_code: bool = False,
    allow_pickle: bool = False,
    command: str = "python",
) -> VLM:
    """Load a VLM (processor + model) for the read-outs.

    Parameters
    ----------
    model : str
        A Hugging Face id (e.g. ``"Qwen/Qwen3-VL-2B-Instruct"``), a local
        checkpoint folder, or an id of a checkpoint murk builds offline
        (:data:`murk.offline.OFFLINE_MODELS`: the tiny ``murk-tiny/...`` and the
        real-format ``murk-realformat/...`` pipeline checks, built on first use
        into ``root``'s ``checkpoints/`` and then loaded from that folder by the
        same code path).
    device : str, optional
        Default ``"cuda"`` when available, else ``"cpu"``.
    dtype : torch.dtype or str, optional
        Default ``readout.dtype_gpu`` (bfloat16) on CUDA and ``readout.dtype_cpu``
        (float32) otherwise (spec Table III). On the CPU, ``"auto"`` (as a value or
        as ``readout.dtype_cpu``) measures float32 and bfloat16 matmul on this machine
        and takes bfloat16 where it is clearly faster, saying so with both rates
        (:func:`murk.readout.resolve_cpu_dtype`).
    root : path, optional
        Output root holding ``checkpoints/`` (:func:`murk.core.checkpoints_dir`).
    config : dict, optional
        Study configuration; default the project's.
    trust_remote_code : bool, keyword only
        Run code shipped with the checkpoint (``auto_map`` in its config). Default
        False: such a checkpoint is refused with an error, never a terminal prompt;
        the value is passed explicitly to every ``from_pretrained``.
    allow_pickle : bool, keyword only
        Accept weights stored as pickles (``pytorch_model.bin``), which can run
        code when loaded. Default False: safetensors only (``use_safetensors=True``).
    command : {"python", "papermill", "snakemake"}, keyword only
        What runs this load (:data:`LOAD_COMMANDS`): a refusal's fix is given in its words
        (``allow_pickle=True`` to this function; ``-p allow_pickle True`` to the read-out
        notebook; ``--config allow_pickle=true`` to Snakemake; :func:`setting_words`).

    Returns
    -------
    VLM
        With a greedy ``generation_config`` (the checkpoint's non-greedy settings are
        kept in :attr:`VLM.ignored_generation_settings`, not applied) and, in bfloat16,
        the output head computed in float32 (:func:`float32_head`). Custom code the
        checkpoint declares (``auto_map``) for a ``model_type`` transformers knows is not
        run unless ``trust_remote_code``: the built-in classes are used, a warning is
        logged (logger ``murk``) and :attr:`VLM.custom_code_not_run` says which.

    Raises
    ------
    OSError
        One line naming the model, what failed and the fix: a file that is not valid
        JSON, a missing ``config.json``; a weights file that is missing, truncated or
        damaged, a shard named by ``model.safetensors.index.json`` that is absent or
        lacks its tensors, weights the model expects that no file holds
        (:func:`murk.readout.check_weight_files`); a checkpoint that is not an
        image-text-to-text model (a text-only language model, a vision-only model:
        its ``model_type`` and ``architectures``, :func:`murk.readout.model_kind`);
        pickle-only weights, custom code (fixes in the words of ``command``);
        tokenizer files without InternVL's image-token names and without those tokens;
        a chat template that fails on murk's prompt (the template file named), a
        tokenizer without one token per option letter (the tokenizer file named).
        With ``MURK_OFFLINE=1`` nothing is downloaded (``local_files_only=True``,
        ``HF_HUB_OFFLINE=1``), so a missing id fails at once.
    ValueError
        If ``command`` is not one of :data:`LOAD_COMMANDS`, or ``dtype`` (or the
        configuration's) names no torch dtype, e.g. ``auto`` on a GPU (the message
        names the setting and the dtypes to give).
    """
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    cfg = load_config() if config is None else config
    rcfg = cfg.get("readout", {})
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype is None:
        dtype = rcfg.get("dtype_gpu", "bfloat16") if str(device).startswith("cuda") else rcfg.get("dtype_cpu", "float32")
    if isinstance(dtype, str):
        from murk.readout import _hardware as hardware

        on_gpu = str(device).startswith("cuda")
        name = dtype if on_gpu else hardware.resolve_cpu_dtype(dtype)
        if not isinstance(getattr(torch, name, None), torch.dtype):
            setting = "readout.dtype_gpu" if on_gpu else "readout.dtype_cpu"
            hint = ("auto is measured on the CPU only (readout.dtype_cpu): on a GPU give bfloat16 (the study's), "
                    "float16 or float32" if name == "auto" else "give float32, bfloat16 or float16")
            raise ValueError(f"dtype {name!r} for {device} ({setting} in data/config.yaml, or load_vlm's dtype) is not a "
                             f"torch dtype: {hint}")
        dtype = getattr(torch, name)

    if command not in LOAD_COMMANDS:
        raise ValueError(f"command={command!r}: use one of {', '.join(LOAD_COMMANDS)}")
    kwargs = _pretrained_kwargs(trust_remote_code)
    source, local, built = _resolve_source(model, root)
    if not local and (model.startswith((".", "/", "~")) or model.count("/") > 1):
        raise _not_found(model, FileNotFoundError(f"no folder {model}"))
    weights: tuple[Path, ...] = ()
    if local:
        _check_folder(model, Path(source))
    try:
        # the config first: custom code named in config.json (auto_map) is refused before anything else loads
        net_config = AutoConfig.from_pretrained(source, **kwargs)
        config_map = dict(getattr(net_config, "auto_map", None) or {})
        runs_custom_model = bool(trust_remote_code) and "AutoModelForImageTextToText" in config_map
        kind = None if runs_custom_model else model_kind(net_config)
        if kind is not None:
            where = Path(source) / "config.json" if local else f"the config.json of {model}"
            custom = (" (its auto_map names no AutoModelForImageTextToText class)"
                      if trust_remote_code and config_map else "")
            raise _LoadError(
                f"cannot load model {model!r}: {where} describes {kind}{custom}; murk reads out image-text-to-text "
                f"models (one image and a question in, text out: a VLM that transformers' "
                f"AutoModelForImageTextToText loads); fix: {_model_words(command)}")
        if local:  # the weights files' headers only (kB): a missing or damaged one is named before anything loads
            weights = _check_weights(model, Path(source), allow_pickle, command, model in OFFLINE_MODELS)
        processor = _load_processor(model, source, kwargs)
        net, info = AutoModelForImageTextToText.from_pretrained(
            source, config=net_config, dtype=dtype, use_safetensors=None if allow_pickle else True,
            output_loading_info=True, **kwargs)
    except _LoadError:
        raise
    except Exception as err:  # transformers raises OSError, ValueError, KeyError, AttributeError...
        msg = str(err)
        if "trust_remote_code" in msg:
            where = (f"{source} (the .py files named by auto_map in its config files)" if local
                     else f"the repository https://huggingface.co/{model}")
            raise _LoadError(
                f"cannot load model {model!r}: it needs code shipped with the checkpoint, which murk does not run "
                f"unless asked; fix: read that code in {where}; if you trust it, "
                f"{setting_words('trust_remote_code', True, command)}") from err
        folder = Path(source) if local else _snapshot_folder(model, kwargs)
        if folder is not None and (type(err).__name__ == "SafetensorError" or isinstance(err, FileNotFoundError)):
            try:
                check_weight_files(folder)
            except CheckpointFileError as bad:
                raise _weights_error(model, bad, folder, local, model in OFFLINE_MODELS) from err
        if type(err).__name__ == "SafetensorError":
            where = folder if folder is not None else f"the hub snapshot of {model}"
            fix = (_weights_fix(model, CheckpointFileError(Path("model.safetensors"), ""), Path(source), local,
                                model in OFFLINE_MODELS)
                   if folder is None or local else f"download the weights of {model} again: hf download {model} "
                   f"--force-download (this needs the network)")
            raise _LoadError(f"cannot load model {model!r}: a weights file in {where} is damaged "
                             f"({_one_line(msg)}); fix: {fix}") from err
        if "safetensors" in msg and not allow_pickle:
            raise _LoadError(
                f"cannot load model {model!r}: no safetensors weights ({_one_line(msg)[:200]}); fix: use a "
                f"revision with safetensors weights, or, if you trust its pickle weights, "
                f"{setting_words('allow_pickle', True, command)}") from err
        if local:
            _check_json(model, Path(source), _BIG_JSON_FILES)
        if local or not isinstance(err, (OSError, ValueError)):
            where = source if local else f"the hub snapshot of {model}"
            raise _LoadError(f"cannot load model {model!r} from {where}: {type(err).__name__}: {_one_line(msg)}; "
                             f"fix: check its config.json, tokenizer and processor files (a transformers "
                             f"version that knows this architecture is needed)") from err
        raise _not_found(model, err) from err
    missing = sorted((info or {}).get("missing_keys") or ())
    if missing:
        files = ", ".join(str(w) for w in weights) if weights else (
            f"the weights of {source}" if local else f"the weights of {model}")
        raise _LoadError(
            f"cannot load model {model!r}: {files} lack {len(missing)} of the model's weights (e.g. {missing[0]}): "
            f"the checkpoint is incomplete and those weights would be random; fix: "
            + (_weights_fix(model, CheckpointFileError(weights[0] if weights else Path(source), ""),
                            Path(source), local, model in OFFLINE_MODELS) if local else
               f"download the weights of {model} again: hf download {model} --force-download"))
    not_run: dict[str, str] = {}
    if not trust_remote_code:  # the files are all local now (a hub id's: in its snapshot folder)
        folder = Path(source) if local else _snapshot_folder(model, kwargs)
        declared = declared_custom_code(folder) if folder is not None else {}
        if config_map and "config.json" not in declared:
            declared["config.json"] = {str(k): str(v[-1] if isinstance(v, (list, tuple)) else v).split("--")[-1]
                                       for k, v in sorted(config_map.items())}
        not_run = _custom_code_not_run(declared, net, net_config, processor)
    if not_run:
        logging.getLogger("murk").warning("%s: %s", model, custom_code_note(not_run))
    net.to(device)
    # a local folder (murk's built checkpoints too) is named by its content (murk.core: a re-saved checkpoint
    # is another revision); a hub id by its snapshot's commit
    revision = (core.checkpoint_revision(source) if local else
                getattr(net.config, "_commit_hash", None) or hub_revision(model, kwargs) or "local")
    try:  # the option tokens and a first chat-templated prompt (the count of visual tokens)
        vlm = vlm_from_parts(net, processor, model, str(revision), bool(built), str(device), dtype, cfg)
    except Exception as err:  # noqa: BLE001 - only jinja2's TemplateError and the option-token refusal are named
        folder = Path(source) if local else _snapshot_folder(model, kwargs)
        raise _parts_error(model, folder, err, command) or err
    vlm.custom_code_not_run = not_run
    return vlm


def vlm_from_parts(net: Any, processor: Any, model_id: str, revision: str, is_pipeline_check: bool,
                   device: str, dtype: Any, config: Mapping[str, Any] | None = None) -> VLM:
    """A :class:`VLM` from a model and processor already in memory (as :func:`load_vlm` assembles it).

    Used by :func:`load_vlm` and by benchmarks that build full-size random-weight
    models in memory. The model must already be on ``device`` in ``dtype``; it is put
    in eval mode, given a greedy ``generation_config`` (what the checkpoint's said
    beyond greedy decoding is kept in :attr:`VLM.ignored_generation_settings`) and,
    below float32, an output head computed in float32 (:func:`float32_head`).

    Returns
    -------
    VLM

    Raises
    ------
    ValueError
        If an option letter has no single-token variant in the tokenizer.
    """
    cfg = load_config() if config is None else config
    rcfg = cfg.get("readout", {})
    max_side = int(cfg.get("render", {}).get("max_side_px", DEFAULT_MAX_SIDE_PX))
    net.eval()
    float32_head(net)
    tokenizer = processor.tokenizer
    greedy, ignored, eos_tokens = _greedy_generation_config(net, tokenizer)
    net.generation_config = greedy
    if ignored:
        logging.getLogger("murk").info("%s: generation_config settings ignored (greedy decoding): %s", model_id,
                                       ignored)
    letters = tuple(rcfg.get("option_letters", ("A", "B", "C", "D", "E")))
    option_tokens = {L: tuple(v) for L, v in option_token_ids(tokenizer, letters).items()}
    vlm = VLM(
        model=net,
        processor=processor,
        tokenizer=tokenizer,
        model_id=model_id,
        revision=str(revision),
        is_pipeline_check=bool(is_pipeline_check),
        device=str(device),
        dtype=dtype,
        option_tokens=option_tokens,
        image_kwargs=single_tile_kwargs(processor, max_side),
        max_side_px=max_side,
        eos_token_ids=eos_tokens,
        ignored_generation_settings=ignored,
    )
    vlm.n_visual_tokens = count_visual_tokens(vlm)
    return vlm

