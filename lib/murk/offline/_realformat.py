"""Real-format offline checkpoints: the real tokenizer, chat template, processor and generation configuration of
one of the study's models, read at build time from ``shared/real-model-files/`` (never copied into the project),
a config shrunk in depth and width only, and random weights: a pipeline check, like a tiny checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from murk import core
from murk.offline._checkpoints import (
    MARKER_FILE,
    _SMOLVLM_CHAT_TEMPLATE,
    _full_disk_guard,
    _replace_folder,
    is_tiny_checkpoint,
)

__all__ = ["INTERNVL_NAMED_TOKENS", "REALFORMAT_MODELS", "REAL_FILES_ENV", "real_model_files_dir",
           "build_realformat_checkpoint", "ensure_realformat_checkpoint", "internvl_tokenizer_config"]


# =========================================================================== real-format checkpoints
#
# A real-format checkpoint has the real tokenizer, chat template, processor and generation
# configuration of one of the study's models (read at build time from
# ``shared/real-model-files/``, never copied into the project), a config shrunk in depth and
# width only (the real vocabulary size and special-token ids), and random weights. It catches
# what the byte-level tiny checkpoints hide: BPE merges and digit splitting, real special
# tokens and turn markers, real processor defaults (tiling, pixel budgets) and sampling
# generation configs. Like a tiny checkpoint it is a *pipeline check* (marker file).

#: pseudo model id -> family key understood by :func:`build_realformat_checkpoint`
REALFORMAT_MODELS: dict[str, str] = {
    "murk-realformat/qwen3vl": "qwen3vl",    # Qwen/Qwen3-VL-2B-Instruct (and -4B)
    "murk-realformat/smolvlm": "smolvlm",    # HuggingFaceTB/SmolVLM-256M-Instruct (Idefics3 classes)
    "murk-realformat/smolvlm2": "smolvlm2",  # HuggingFaceTB/SmolVLM2-2.2B-Instruct (SmolVLM classes)
    "murk-realformat/internvl": "internvl",  # OpenGVLab/InternVL3_5-2B-HF
    "murk-realformat/gemma4": "gemma4",      # google/gemma-4-E2B-it
}

#: environment variable naming the folder of real model files (default ``../shared/real-model-files``)
REAL_FILES_ENV = "MURK_REAL_MODEL_FILES"

# shrunk widths of the real-format builds: the real vocabularies (49k-262k rows) dominate the
# parameter count, so the width is cut hard (embeddings of 32 columns, tied where the real
# model ties them) to keep a build at a few seconds and tens of MB
_RF_TEXT = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=1, head_dim=16)
_RF_VISION = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)


def real_model_files_dir() -> Path:
    """The folder of the real (non-weight) model files.

    Returns
    -------
    Path
        ``$MURK_REAL_MODEL_FILES`` if set, else ``shared/real-model-files`` next to the
        project (``../shared/real-model-files`` seen from a checkout under ``/work``).

    Raises
    ------
    FileNotFoundError
        If the folder does not exist (the message names it and the fix).
    """
    env = os.environ.get(REAL_FILES_ENV)
    folder = Path(env) if env else core.project_root().parent / "shared" / "real-model-files"
    if not folder.is_dir():
        raise FileNotFoundError(
            f"real model files not found in {folder}: real-format checkpoints are built from them; "
            f"set {REAL_FILES_ENV} to the folder holding qwen-bpe/, qwen3-vl-instruct/, "
            f"smolvlm-256m-instruct/ and gemma-4/")
    return folder


def _need(folder: Path, *names: str) -> list[Path]:
    files = [folder / n for n in names]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise FileNotFoundError(f"real model files missing: {', '.join(missing)}; "
                                f"see {folder.parent / 'README.md'} (or set {REAL_FILES_ENV})")
    return files


def _copy(files: list[Path], dest: Path) -> None:
    for f in files:
        shutil.copyfile(f, dest / f.name)


def _write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


# --- Qwen3-VL ---------------------------------------------------------------------------
# Published architecture values of Qwen/Qwen3-VL-2B/4B-Instruct that fix the format (no config.json
# is among the real files): vocabulary 151,936 rows, rope theta 5e6, interleaved
# M-RoPE, patch 16, merge 2, temporal patch 2, three deepstack layers; token ids from the
# tokenizer config (<|image_pad|> 151655, <|video_pad|> 151656, <|vision_start|> 151652,
# <|vision_end|> 151653, <|im_end|> 151645, <|endoftext|> 151643). The output head is untied here,
# although the published 2B and 4B tie it (4.44 B parameters only with a tied head: murk.readout):
# with random weights a tied head mostly repeats the last input token, which would hide what the continuations exercise (digits, stops, penalties)
_QWEN_VOCAB_ROWS = 151_936


def _stage_qwen3vl(src: Path, stage: Path) -> dict:
    from transformers import Qwen3VLConfig

    files = _need(src / "qwen-bpe", "vocab.json", "merges.txt")
    files += _need(src / "qwen3-vl-instruct", "tokenizer_config.json", "chat_template.json",
                   "preprocessor_config.json", "generation_config.json")
    _copy(files, stage)
    tok_cfg = json.loads((src / "qwen3-vl-instruct" / "tokenizer_config.json").read_text())
    added = {v["content"]: int(k) for k, v in tok_cfg["added_tokens_decoder"].items()}
    head_dim = _RF_TEXT["head_dim"]
    config = Qwen3VLConfig(
        vision_config=dict(depth=_RF_VISION["num_hidden_layers"], hidden_size=_RF_VISION["hidden_size"],
                           intermediate_size=_RF_VISION["intermediate_size"],
                           num_heads=_RF_VISION["num_attention_heads"], patch_size=16, spatial_merge_size=2,
                           temporal_patch_size=2, out_hidden_size=_RF_TEXT["hidden_size"],
                           num_position_embeddings=2304, deepstack_visual_indexes=[0, 1]),
        text_config=dict(_RF_TEXT, vocab_size=_QWEN_VOCAB_ROWS, max_position_embeddings=262_144,
                         rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0,
                                          "mrope_section": [head_dim // 4, head_dim // 8, head_dim // 8],
                                          "mrope_interleaved": True},
                         bos_token_id=added["<|endoftext|>"], eos_token_id=added["<|im_end|>"],
                         pad_token_id=added["<|endoftext|>"], tie_word_embeddings=False),
        image_token_id=added["<|image_pad|>"], video_token_id=added["<|video_pad|>"],
        vision_start_token_id=added["<|vision_start|>"], vision_end_token_id=added["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    config.save_pretrained(stage)
    return {"files": files}


# --- SmolVLM-256M (Idefics3) and SmolVLM2 (SmolVLM) --------------------------------------
_SMOL_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
                         "added_tokens.json", "special_tokens_map.json")


def _shrink_smol(cfg: dict, vision: dict) -> dict:
    """The SmolVLM-256M config.json shrunk in depth and width (vocabulary, ids and image geometry kept)."""
    tc = {k: v for k, v in cfg["text_config"].items() if k not in ("perceiver_config",)}
    tc.update(_RF_TEXT)
    vc = dict(cfg["vision_config"])
    vc.update(_RF_VISION)
    vc.update(vision)
    out = {k: v for k, v in cfg.items() if k not in ("text_config", "vision_config", "transformers.js_config")}
    out.update(text_config=tc, vision_config=vc)
    return out


def _stage_smolvlm(src: Path, stage: Path) -> dict:
    from transformers import Idefics3Config

    d = src / "smolvlm-256m-instruct"
    files = _need(d, *_SMOL_TOKENIZER_FILES, "chat_template.json", "preprocessor_config.json",
                  "processor_config.json", "generation_config.json", "config.json")
    _copy([f for f in files if f.name != "config.json"], stage)
    cfg = _shrink_smol(json.loads((d / "config.json").read_text()), {})
    Idefics3Config(**cfg).save_pretrained(stage)
    return {"files": files}


# SmolVLM2-2.2B-Instruct: no published files are among the real ones. Its language model is a
# SmolLM2 with the same tokenizer (vocabulary, added tokens <image> 49190 ... <end_of_utterance>
# 49279) as SmolVLM-256M, so the 256M tokenizer files are used; the classes are SmolVLM's, the
# sizes SmolVLM2-2.2B's (384-px tiles of 14-px patches, pixel shuffle 3 -> 81 tokens per tile,
# images up to 4 x 384 px long side when tiling) and the template SmolVLM2's (SmolVLM-256M's
# plus a video branch). Assumed, not read from a file: marked so in the marker file.
_SMOLVLM2_CHAT_TEMPLATE = _SMOLVLM_CHAT_TEMPLATE


def _stage_smolvlm2(src: Path, stage: Path) -> dict:
    from transformers import SmolVLMConfig

    d = src / "smolvlm-256m-instruct"
    files = _need(d, *_SMOL_TOKENIZER_FILES, "generation_config.json", "config.json")
    _copy([f for f in files if f.name != "config.json"], stage)
    cfg = _shrink_smol(json.loads((d / "config.json").read_text()), {"image_size": 384, "patch_size": 14})
    cfg.update(model_type="smolvlm", architectures=["SmolVLMForConditionalGeneration"], scale_factor=3)
    cfg["vision_config"]["model_type"] = "smolvlm_vision"
    SmolVLMConfig(**{k: v for k, v in cfg.items() if k != "model_type"}).save_pretrained(stage)
    tok_cfg = json.loads((d / "tokenizer_config.json").read_text())
    tok_cfg.update(processor_class="SmolVLMProcessor", chat_template=_SMOLVLM2_CHAT_TEMPLATE)
    _write_json(stage / "tokenizer_config.json", tok_cfg)
    _write_json(stage / "chat_template.json", {"chat_template": _SMOLVLM2_CHAT_TEMPLATE})
    _write_json(stage / "preprocessor_config.json", {
        "image_processor_type": "SmolVLMImageProcessor", "processor_class": "SmolVLMProcessor",
        "do_convert_rgb": True, "do_image_splitting": True, "do_normalize": True, "do_pad": True,
        "do_rescale": True, "do_resize": True, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
        "max_image_size": {"longest_edge": 384}, "size": {"longest_edge": 4 * 384}, "resample": 1,
        "rescale_factor": 1 / 255})
    _write_json(stage / "processor_config.json", {"image_seq_len": 81, "processor_class": "SmolVLMProcessor"})
    return {"files": files, "assumed": "SmolVLM2 processor sizes and template; tokenizer of SmolVLM-256M"}


# --- InternVL3.5-HF ----------------------------------------------------------------------
# transformers' converter (models/internvl/convert_internvl_weights_to_hf.py, write_tokenizer and
# write_image_processor): the Qwen2.5-VL tokenizer (the Qwen BPE plus the 22 added tokens
# 151643-151664, the first 22 of Qwen3's list) plus <img>, </img>, <IMG_CONTEXT>, <quad>, </quad>,
# <ref>, </ref>, <box>, </box> (so <IMG_CONTEXT> = 151667 = the converter's image_token_id), named
# start_image_token / end_image_token / context_image_token / video_token in
# extra_special_tokens; model_max_length 8192; the converter's chat template (image as
# "<IMG_CONTEXT>\n"); a 448-px image processor with ImageNet mean/std that tiles into up to 12
# crops (InternVL3.5); eos <|im_end|> 151645 (forced by the converter for InternVL3/3.5)
INTERNVL_NAMED_TOKENS = {
    "start_image_token": "<img>",
    "end_image_token": "</img>",
    "context_image_token": "<IMG_CONTEXT>",
    "video_token": "<video>",
}
_INTERNVL_EXTRA = ("<img>", "</img>", "<IMG_CONTEXT>", "<quad>", "</quad>", "<ref>", "</ref>", "<box>", "</box>",
                   "<video>")
_INTERNVL_CONVERTER_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n'}}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}{{ '<IMG_CONTEXT>\\n' }}"
    "{% elif content['type'] == 'video' %}{{ '<video>\\n' }}"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}"
    "{% endfor %}{% endif %}{{'<|im_end|>\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{'<|im_start|>assistant\\n' }}{% endif %}"
)


def internvl_tokenizer_config(qwen3_tokenizer_config: dict, named: bool = True) -> dict:
    """The InternVL3.5-HF ``tokenizer_config.json`` as transformers' converter writes it.

    Parameters
    ----------
    qwen3_tokenizer_config : dict
        The Qwen3 tokenizer config (``qwen3-vl-instruct/tokenizer_config.json``): its first
        22 added tokens (151643-151664) are Qwen2.5-VL's, on which the converter builds.
    named : bool
        False: leave out ``extra_special_tokens`` (the published pitfall that breaks
        ``InternVLProcessor``; :func:`murk.readout.load_vlm` supplies the names).

    Returns
    -------
    dict
        With ``added_tokens_decoder`` (ids 151643-151674), ``eos_token`` ``<|im_end|>``,
        ``pad_token`` ``<|endoftext|>``, ``model_max_length`` 8192 and the chat template.
    """
    base = sorted(((int(k), v) for k, v in qwen3_tokenizer_config["added_tokens_decoder"].items()))[:22]
    decoder = {str(i): dict(v) for i, v in base}
    nxt = max(i for i, _ in base) + 1
    for j, tok in enumerate(_INTERNVL_EXTRA):
        decoder[str(nxt + j)] = {"content": tok, "lstrip": False, "normalized": False, "rstrip": False,
                                 "single_word": False, "special": True}
    cfg = {"add_prefix_space": False, "added_tokens_decoder": decoder, "bos_token": None,
           "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>", "errors": "replace",
           "model_max_length": 8192, "pad_token": "<|endoftext|>", "processor_class": "InternVLProcessor",
           "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer", "unk_token": None,
           "return_token_type_ids": False, "chat_template": _INTERNVL_CONVERTER_TEMPLATE}
    if named:
        cfg["extra_special_tokens"] = dict(INTERNVL_NAMED_TOKENS)
    return cfg


def _stage_internvl(src: Path, stage: Path) -> dict:
    from transformers import InternVLConfig

    files = _need(src / "qwen-bpe", "vocab.json", "merges.txt")
    files += _need(src / "qwen3-vl-instruct", "tokenizer_config.json")
    _copy(files[:2], stage)
    tok_cfg = internvl_tokenizer_config(json.loads(files[2].read_text()))
    _write_json(stage / "tokenizer_config.json", tok_cfg)
    _write_json(stage / "chat_template.json", {"chat_template": _INTERNVL_CONVERTER_TEMPLATE})
    _write_json(stage / "preprocessor_config.json", {
        "image_processor_type": "GotOcr2ImageProcessorFast", "processor_class": "InternVLProcessor",
        "do_resize": True, "size": {"height": 448, "width": 448}, "do_rescale": True, "rescale_factor": 1 / 255,
        "do_normalize": True, "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225],
        "do_convert_rgb": True, "crop_to_patches": True, "min_patches": 1, "max_patches": 12})
    _write_json(stage / "processor_config.json", {"image_seq_length": 256, "processor_class": "InternVLProcessor"})
    ids = {v["content"]: int(k) for k, v in tok_cfg["added_tokens_decoder"].items()}
    config = InternVLConfig(
        vision_config=dict(_RF_VISION, image_size=[448, 448], patch_size=[14, 14], use_qk_norm=False,
                           use_absolute_position_embeddings=True),
        text_config=dict(_RF_TEXT, model_type="qwen3", vocab_size=_QWEN_VOCAB_ROWS, max_position_embeddings=40_960,
                         rope_theta=1_000_000.0, bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                         pad_token_id=ids["<|endoftext|>"], tie_word_embeddings=True),
        image_token_id=ids["<IMG_CONTEXT>"], image_seq_length=256, downsample_ratio=0.5,
        tie_word_embeddings=True,
    )
    config.save_pretrained(stage)
    return {"files": files, "assumed": "InternVL3.5-HF files from transformers' converter"}


# --- Gemma 4 -----------------------------------------------------------------------------
# Special tokens of google/gemma-4-E2B-it at their real ids. Sources: generation_config.json
# (bos 2, pad 0, eos [1, 106, 50]); transformers' Gemma4Config defaults (boi 255999, boa 256000,
# image 258880, audio 258881, eoi 258882, eoa 258883, video 258884); GemmaTokenizer's base layout
# (pad 0, eos 1, bos 2, unk 3, mask 4); published listings of the Gemma 4 vocabulary (tool
# markers 46-52, <|think|> 98, <|channel>/<channel|> 100/101, <|turn>/<turn|> 105/106)
GEMMA4_SPECIAL_IDS: dict[str, int] = {
    "<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "<mask>": 4,
    "<|tool>": 46, "<tool|>": 47, "<|tool_call>": 48, "<tool_call|>": 49, "<|tool_response>": 50,
    "<tool_response|>": 51, '<|"|>': 52, "<|think|>": 98, "<|channel>": 100, "<channel|>": 101,
    "<|turn>": 105, "<turn|>": 106,
    "<|image>": 255_999, "<|audio>": 256_000, "<|image|>": 258_880, "<|audio|>": 258_881,
    "<image|>": 258_882, "<audio|>": 258_883, "<|video|>": 258_884,
}
GEMMA4_VOCAB_ROWS = 262_144
_GEMMA4_FIRST_PIECE_ID = 107  # the first id after the turn markers ("\n" in the real vocabulary)


def _gemma4_corpus(src: Path) -> list[str]:
    """Training text of the stand-in SentencePiece-style vocabulary: murk's prompts and the spec."""
    from murk.core import load_config

    cfg = load_config()
    pr = cfg["prompts"]
    texts = [str(v) for v in pr.values() if isinstance(v, str)] + [str(v) for v in pr["verbal_wordings"].values()]
    texts += ["Answer: A. person\nConfidence: 85", "Confidence: 100", "The object inside the red box is a car."]
    spec = sorted((core.project_root().parent / "shared" / "spec").glob("*.txt"))
    texts += [p.read_text(encoding="utf-8") for p in spec]
    return texts


def _gemma4_standin_tokenizer(src: Path, stage: Path) -> None:
    """A stand-in ``tokenizer.json`` in Gemma's SentencePiece-style BPE with the real special tokens.

    The real ``tokenizer.json`` (~32 MB) is not available. The stand-in has the real vocabulary
    size (262,144), every special token of :data:`GEMMA4_SPECIAL_IDS` at its real id, and the
    pipeline of ``GemmaTokenizer`` (spaces -> "▁", BPE with byte fallback, digits never merged,
    as SentencePiece's ``split_digits``); its ordinary pieces are a BPE of about 3,000 pieces
    trained on murk's prompts and the spec, at ids 107 and up; the remaining ids hold
    never-produced ``<unused…>`` pieces.
    """
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import GemmaTokenizer

    trainer_tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    trainer_tok.normalizer = normalizers.Replace(" ", "▁")
    # pieces never span a word start, a newline or punctuation, and digits are never merged
    # (SentencePiece's split_by_whitespace, split_by_unicode_script and split_digits)
    trainer_tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex("▁"), behavior="merged_with_next"),
        pre_tokenizers.Split(Regex("\n+"), behavior="isolated"),
        pre_tokenizers.Punctuation(behavior="isolated"),
        pre_tokenizers.Digits(individual_digits=True)])
    alphabet = sorted(set("".join(_gemma4_corpus(src))) | set("▁\n"))
    trainer = trainers.BpeTrainer(vocab_size=3000, initial_alphabet=alphabet, show_progress=False,
                                  limit_alphabet=len(alphabet))
    trainer_tok.train_from_iterator(_gemma4_corpus(src), trainer)
    learned = json.loads(trainer_tok.to_str())["model"]
    pieces = [f"<0x{b:02X}>" for b in range(256)]
    pieces += [t for t, _ in sorted(learned["vocab"].items(), key=lambda kv: kv[1]) if t not in pieces]
    vocab: dict[str, int] = dict(GEMMA4_SPECIAL_IDS)
    taken = set(vocab.values())
    nxt = _GEMMA4_FIRST_PIECE_ID
    for p in pieces:
        while nxt in taken:
            nxt += 1
        vocab[p] = nxt
        taken.add(nxt)
    for i in range(GEMMA4_VOCAB_ROWS):
        if i not in taken:
            vocab[f"<unused{i}>"] = i
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in learned["merges"]]
    tok = GemmaTokenizer(vocab=vocab, merges=merges)
    tok.add_special_tokens({"additional_special_tokens": [t for t in GEMMA4_SPECIAL_IDS if t not in
                                                          ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>")]},
                           replace_extra_special_tokens=False)
    tok.save_pretrained(stage)
    (stage / "tokenizer_config.json").unlink()  # the real one replaces it


def _stage_gemma4(src: Path, stage: Path) -> dict:
    from transformers import Gemma4Config

    files = _need(src / "gemma-4", "tokenizer_config.json", "chat_template.jinja", "processor_config.json",
                  "generation_config.json")
    _gemma4_standin_tokenizer(src, stage)
    _copy(files, stage)
    ids = GEMMA4_SPECIAL_IDS
    head_dim = _RF_TEXT["head_dim"]
    # E2B alternates sliding and full attention and lets its last layers reuse the KV of earlier
    # ones; in miniature: sliding, full, sliding, full, the last two reusing KV
    n_layers = 4
    config = Gemma4Config(
        vision_config=dict(hidden_size=_RF_VISION["hidden_size"], intermediate_size=_RF_VISION["intermediate_size"],
                           num_hidden_layers=_RF_VISION["num_hidden_layers"],
                           num_attention_heads=_RF_VISION["num_attention_heads"],
                           num_key_value_heads=_RF_VISION["num_attention_heads"],
                           head_dim=_RF_VISION["hidden_size"] // _RF_VISION["num_attention_heads"],
                           patch_size=16, pooling_kernel_size=3, position_embedding_size=1024),
        text_config=dict(_RF_TEXT, num_hidden_layers=n_layers,
                         layer_types=["sliding_attention", "full_attention"] * 2, sliding_window=512,
                         num_kv_shared_layers=2, global_head_dim=head_dim, vocab_size=GEMMA4_VOCAB_ROWS,
                         vocab_size_per_layer_input=GEMMA4_VOCAB_ROWS, hidden_size_per_layer_input=4,
                         max_position_embeddings=131_072, final_logit_softcapping=30.0,
                         bos_token_id=ids["<bos>"], eos_token_id=ids["<eos>"], pad_token_id=ids["<pad>"]),
        audio_config=None,
        image_token_id=ids["<|image|>"], boi_token_id=ids["<|image>"], eoi_token_id=ids["<image|>"],
        audio_token_id=ids["<|audio|>"], boa_token_id=ids["<|audio>"], eoa_token_index=ids["<audio|>"],
        video_token_id=ids["<|video|>"], tie_word_embeddings=True,
    )
    config.save_pretrained(stage)
    return {"files": files, "assumed": "stand-in tokenizer.json (real special tokens and ids, trained pieces)"}


_REALFORMAT_STAGERS = {"qwen3vl": _stage_qwen3vl, "smolvlm": _stage_smolvlm, "smolvlm2": _stage_smolvlm2,
                       "internvl": _stage_internvl, "gemma4": _stage_gemma4}


def build_realformat_checkpoint(family: str, out_dir: str | os.PathLike, seed: int = 0,
                                files_dir: str | os.PathLike | None = None,
                                generation_config: dict | None = None) -> Path:
    """Build a real-format checkpoint: real tokenizer/template/processor files, shrunk config, random weights.

    The real files are staged with a config shrunk in depth and width only (real vocabulary
    size and special-token ids), loaded with ``AutoProcessor`` / ``AutoConfig`` exactly as a
    hub snapshot would be, and the model (random weights, ``torch.manual_seed(seed)``) and
    processor are written with ``save_pretrained``, together with the real generation config.

    Parameters
    ----------
    family : {"qwen3vl", "smolvlm", "smolvlm2", "internvl", "gemma4"}
        See :data:`REALFORMAT_MODELS` and the comments above each stager for what is real
        and what is assumed (SmolVLM2's processor sizes; InternVL's files follow
        transformers' converter; Gemma 4's ``tokenizer.json`` is a stand-in).
    out_dir : path
        Destination folder, replaced atomically.
    seed : int
        Seed of the random weights.
    files_dir : path, optional
        The real model files; default :func:`real_model_files_dir`.
    generation_config : dict, optional
        Entries that replace those of the real generation config (e.g.
        ``{"repetition_penalty": 1.3}``: tests that greedy read-outs ignore it).

    Returns
    -------
    Path
        ``out_dir`` with ``config.json``, ``model.safetensors``, ``generation_config.json``, the
        processor and tokenizer files and the marker :data:`MARKER_FILE`
        (``{"arch", "seed", "pipeline_check": true, "format": "real", "sources": {file: sha256}, "digest"}``,
        ``digest`` as in :func:`build_tiny_checkpoint`).

    Raises
    ------
    ValueError
        If ``family`` is unknown.
    FileNotFoundError
        If the real model files are missing.
    """
    if family not in _REALFORMAT_STAGERS:
        raise ValueError(f"unknown real-format family {family!r}; choose one of {sorted(_REALFORMAT_STAGERS)}")
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor, GenerationConfig

    src = Path(files_dir) if files_dir is not None else real_model_files_dir()
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        stage = tmp / "stage"
        final = tmp / "final"
        stage.mkdir()
        info = _REALFORMAT_STAGERS[family](src, stage)
        # a local folder: nothing is downloaded (local_files_only would be saved into tokenizer_config.json)
        processor = AutoProcessor.from_pretrained(stage, trust_remote_code=False)
        config = AutoConfig.from_pretrained(stage, trust_remote_code=False)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = AutoModelForImageTextToText.from_config(config).eval()
        if (stage / "generation_config.json").is_file():
            model.generation_config = GenerationConfig.from_pretrained(stage)
        for k, v in (generation_config or {}).items():
            setattr(model.generation_config, k, v)
        model.save_pretrained(final)
        processor.save_pretrained(final)
        marker = {"arch": family, "seed": int(seed), "pipeline_check": True, "format": "real",
                  "sources": {str(f.relative_to(src)): core.file_digest(f) for f in info["files"]},
                  "digest": core.checkpoint_digest(final, None)}
        if "assumed" in info:
            marker["assumed"] = info["assumed"]
        if generation_config:
            marker["generation_config_overrides"] = dict(generation_config)
        _write_json(final / MARKER_FILE, marker)
        _replace_folder(final, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def ensure_realformat_checkpoint(model_id: str, root: str | os.PathLike | None = None) -> Path:
    """Folder of a real-format checkpoint (:data:`REALFORMAT_MODELS`), built on first use.

    Returns
    -------
    Path
        ``murk.core.checkpoints_dir(root) / murk.core.model_slug(model_id)``.

    Raises
    ------
    KeyError
        If ``model_id`` is not a real-format id.
    murk.core.DiskFullError
        The disk is full while the checkpoint is built (as :func:`ensure_tiny_checkpoint`).
    FileNotFoundError
        If the real model files are missing (see :func:`real_model_files_dir`).
    """
    if model_id not in REALFORMAT_MODELS:
        raise KeyError(f"{model_id!r} is not a real-format model id; choose one of {sorted(REALFORMAT_MODELS)}")
    folder = core.checkpoints_dir(root) / core.model_slug(model_id)
    if not is_tiny_checkpoint(folder):
        with _full_disk_guard(folder, root):
            build_realformat_checkpoint(REALFORMAT_MODELS[model_id], folder)
    return folder

