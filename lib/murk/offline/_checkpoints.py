"""Tiny offline checkpoints of the real VLM architectures (pipeline checks).

A tiny checkpoint has the *real* model class, processor class, image processor,
video processor and a chat template close to the real model's, but random
weights, a byte-level tokenizer and a few kilobytes of parameters. It is saved
with ``save_pretrained`` so that ``AutoProcessor.from_pretrained(folder)`` and
``AutoModelForImageTextToText.from_pretrained(folder)`` load it exactly like a
hub checkpoint, which lets the whole read-out stage (:mod:`murk.readout`) run
offline through the same code path as the study models of spec Sec. III.

Its answers carry no information: results built on it are marked
``pipeline_check`` (file ``murk_tiny.json`` in the folder).

The shrunk sizes follow ``shared/notes/offline-checkpoints.md`` (text hidden 64,
2 layers, 4 heads, 2 KV heads, head_dim 16; vision hidden 32, 2 layers).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from murk import core

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

#: pseudo model id -> architecture key understood by :func:`build_tiny_checkpoint`
TINY_MODELS: dict[str, str] = {
    "murk-tiny/smolvlm": "smolvlm",
    "murk-tiny/qwen3vl": "qwen3vl",
    "murk-tiny/internvl": "internvl",
    "murk-tiny/gemma": "gemma",
    # SmolVLM2 has the same model, processor and image-processor classes as SmolVLM
    # (SmolVLMForConditionalGeneration / SmolVLMProcessor; only sizes and the chat
    # template's video handling differ), so its tiny twin is the SmolVLM build
    "murk-tiny/smolvlm2": "smolvlm",
}

#: marker file written into every tiny checkpoint folder
MARKER_FILE = core.BUILT_MARKER  # "murk_tiny.json"

#: the largest image the model may see, in pixels (spec Sec. III: "at most 448^2 pixels")
MAX_PIXELS = 448 * 448

# --- shrunk sizes (offline-checkpoints.md) -------------------------------------
_TEXT = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
)
_VISION = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)

# SmolVLM: one square tile of 384 px (as SmolVLM2), patches of 32 px, pixel shuffle 2
# -> image_seq_len = (384/32)^2 / 2^2 = 36 visual tokens
_SMOL_TILE_PX = 384
_SMOL_PATCH_PX = 32
_SMOL_SCALE = 2

_SMOLVLM_CHAT_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}"
    "{% if message['content'] is string %}{{': ' + message['content']}}"
    "{% else %}{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% elif line['type'] == 'video' %}{{ '<video>' }}"
    "{% endif %}{% endfor %}{% endif %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)

_QWEN3VL_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _replace_folder(src: Path, dst: Path) -> None:
    """Move the finished folder ``src`` to ``dst``, replacing an existing ``dst`` (two renames, no half state).

    Raises
    ------
    OSError
        From :func:`os.replace` (e.g. ``src`` and ``dst`` on different file systems).
    """
    if dst.exists():
        old = dst.with_name(f".{dst.name}.old-{os.getpid()}")
        os.replace(dst, old)
        os.replace(src, dst)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(src, dst)

def _byte_level_tokenizer(special: dict[str, str], extra: list[str], named: dict[str, str]):
    """A byte-level BPE over the 256 byte symbols (no merges) plus special tokens.

    Parameters
    ----------
    special : dict
        Standard named special tokens (``bos_token``, ``eos_token``, ``pad_token``...).
    extra : list of str
        Further special tokens without an attribute (e.g. SmolVLM's ``<row_1_col_1>``).
    named : dict
        Model-specific named special tokens; in transformers v5 a dict given as
        ``extra_special_tokens`` creates attributes such as ``tokenizer.image_token``
        and ``tokenizer.image_token_id``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()  # the 256 byte symbols
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **special, extra_special_tokens=dict(named))
    named_values = set(named.values())
    fast.add_tokens([t for t in extra if t not in named_values], special_tokens=True)
    return fast


def _seeded(seed: int):
    import torch

    torch.manual_seed(seed)


def _build_smolvlm(seed: int):
    from transformers import (
        SmolVLMConfig,
        SmolVLMForConditionalGeneration,
        SmolVLMImageProcessor,
        SmolVLMProcessor,
        SmolVLMVideoProcessor,
    )

    rows_cols = [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]
    named = {
        "image_token": "<image>",
        "fake_image_token": "<fake_token_around_image>",
        "global_image_token": "<global-img>",
        "end_of_utterance_token": "<end_of_utterance>",
        "video_token": "<video>",
    }
    tokenizer = _byte_level_tokenizer(
        special={"bos_token": "<|im_start|>", "eos_token": "<end_of_utterance>", "pad_token": "<|im_end|>"},
        extra=rows_cols,
        named=named,
    )
    tokenizer.chat_template = _SMOLVLM_CHAT_TEMPLATE
    image_seq_len = (_SMOL_TILE_PX // _SMOL_PATCH_PX) ** 2 // _SMOL_SCALE**2
    image_processor = SmolVLMImageProcessor(
        do_image_splitting=False,
        size={"longest_edge": _SMOL_TILE_PX},
        max_image_size={"longest_edge": _SMOL_TILE_PX},
    )
    video_processor = SmolVLMVideoProcessor(
        size={"longest_edge": _SMOL_TILE_PX}, max_image_size={"longest_edge": _SMOL_TILE_PX}
    )
    processor = SmolVLMProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        image_seq_len=image_seq_len,
        chat_template=_SMOLVLM_CHAT_TEMPLATE,
    )
    config = SmolVLMConfig(
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        scale_factor=_SMOL_SCALE,
        vision_config=dict(_VISION, image_size=_SMOL_TILE_PX, patch_size=_SMOL_PATCH_PX),
        text_config=dict(
            _TEXT,
            model_type="llama",
            vocab_size=len(tokenizer),
            max_position_embeddings=2048,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        ),
        tie_word_embeddings=False,
    )
    _seeded(seed)
    model = SmolVLMForConditionalGeneration(config)
    return model, processor


def _build_qwen3vl(seed: int):
    from transformers import (
        Qwen2VLImageProcessor,
        Qwen3VLConfig,
        Qwen3VLForConditionalGeneration,
        Qwen3VLProcessor,
        Qwen3VLVideoProcessor,
    )

    named = {
        "image_token": "<|image_pad|>",
        "video_token": "<|video_pad|>",
        "vision_start_token": "<|vision_start|>",
        "vision_end_token": "<|vision_end|>",
    }
    tokenizer = _byte_level_tokenizer(
        special={"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        extra=["<|im_start|>"],
        named=named,
    )
    tokenizer.chat_template = _QWEN3VL_CHAT_TEMPLATE
    patch, merge, temporal = 16, 2, 2
    # the pixel budget bounds the visual tokens: at most 448^2 px -> <= 196 tokens
    image_processor = Qwen2VLImageProcessor(
        patch_size=patch,
        merge_size=merge,
        temporal_patch_size=temporal,
        size={"shortest_edge": (patch * merge) ** 2, "longest_edge": MAX_PIXELS},
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )
    video_processor = Qwen3VLVideoProcessor(
        patch_size=patch,
        merge_size=merge,
        temporal_patch_size=temporal,
        size={"shortest_edge": (patch * merge) ** 2, "longest_edge": 4 * MAX_PIXELS},
    )
    processor = Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=_QWEN3VL_CHAT_TEMPLATE,
    )
    ids = tokenizer.convert_tokens_to_ids
    head_dim = _TEXT["head_dim"]
    config = Qwen3VLConfig(
        vision_config=dict(
            depth=_VISION["num_hidden_layers"],
            hidden_size=_VISION["hidden_size"],
            intermediate_size=_VISION["intermediate_size"],
            num_heads=_VISION["num_attention_heads"],
            patch_size=patch,
            spatial_merge_size=merge,
            temporal_patch_size=temporal,
            out_hidden_size=_TEXT["hidden_size"],
            num_position_embeddings=256,
            deepstack_visual_indexes=[0],
        ),
        text_config=dict(
            _TEXT,
            vocab_size=len(tokenizer),
            max_position_embeddings=4096,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 5_000_000.0,
                # (t, h, w) sections, summing to head_dim / 2
                "mrope_section": [head_dim // 4, head_dim // 8, head_dim // 8],
                "mrope_interleaved": True,
            },
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        ),
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=False,
    )
    _seeded(seed)
    model = Qwen3VLForConditionalGeneration(config)
    return model, processor


# InternVL (InternVL3.5-HF layout): one 448-px tile of 28-px patches, pixel shuffle 0.5
# -> (448/28)^2 * 0.5^2 = 64 visual tokens (the real model: patches of 14 px -> 256 tokens)
_INTERNVL_TILE_PX = 448
_INTERNVL_PATCH_PX = 28

_INTERNVL_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}<IMG_CONTEXT>\n"
    "{% elif content['type'] == 'video' %}<video>\n"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Gemma 4's turn format (``<|turn>role ... <turn|>``, the image as ``\n\n<|image|>\n\n``, the
# generation prompt ``<|turn>model\n`` of the E-series template); the real template is
# ``shared/real-model-files/gemma-4/chat_template.jinja`` (used by the real-format build)
_GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|turn>{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] | trim }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}{{ '\n\n<|image|>\n\n' }}"
    "{% elif content['type'] == 'text' %}{{ content['text'] | trim }}{% endif %}"
    "{% endfor %}{% endif %}<turn|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|turn>model\n{% endif %}"
)

#: Gemma 4 visual-token budgets offered by ``Gemma4ImageProcessor`` (soft tokens per image)
GEMMA4_SOFT_TOKEN_BUDGETS = (70, 140, 280, 560, 1120)


def gemma4_max_soft_tokens(max_pixels: int = MAX_PIXELS, patch: int = 16, pooling: int = 3) -> int:
    """The largest Gemma 4 soft-token budget whose images have at most ``max_pixels`` pixels.

    ``Gemma4ImageProcessor`` resizes (up or down, aspect kept) to at most
    ``max_soft_tokens * pooling^2`` patches of ``patch^2`` pixels; with 16-px patches
    and 3 x 3 pooling, 70 tokens allow 161,280 px (<= 448^2 = 200,704 px) and 140
    tokens 322,560 px (> 448^2), so the study uses 70 (the model card's default is 280).
    """
    ok = [b for b in GEMMA4_SOFT_TOKEN_BUDGETS if b * pooling**2 * patch**2 <= max_pixels]
    if not ok:
        raise ValueError(f"no Gemma 4 soft-token budget fits in {max_pixels} pixels")
    return max(ok)


def _build_internvl(seed: int):
    from transformers import (
        GotOcr2ImageProcessor,
        InternVLConfig,
        InternVLForConditionalGeneration,
        InternVLProcessor,
        InternVLVideoProcessor,
    )

    named = {
        "start_image_token": "<img>",
        "end_image_token": "</img>",
        "context_image_token": "<IMG_CONTEXT>",
        "video_token": "<video>",
    }
    tokenizer = _byte_level_tokenizer(
        special={"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        extra=["<|im_start|>"],
        named=named,
    )
    tokenizer.chat_template = _INTERNVL_CHAT_TEMPLATE
    downsample = 0.5
    image_seq_len = int((_INTERNVL_TILE_PX // _INTERNVL_PATCH_PX) ** 2 * downsample**2)
    image_processor = GotOcr2ImageProcessor(
        size={"height": _INTERNVL_TILE_PX, "width": _INTERNVL_TILE_PX},
        crop_to_patches=False,
        min_patches=1,
        max_patches=12,
    )
    video_processor = InternVLVideoProcessor(size={"height": _INTERNVL_TILE_PX, "width": _INTERNVL_TILE_PX})
    processor = InternVLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        image_seq_length=image_seq_len,
        chat_template=_INTERNVL_CHAT_TEMPLATE,
    )
    config = InternVLConfig(
        vision_config=dict(
            hidden_size=_VISION["hidden_size"],
            num_hidden_layers=_VISION["num_hidden_layers"],
            num_attention_heads=_VISION["num_attention_heads"],
            intermediate_size=_VISION["intermediate_size"],
            image_size=[_INTERNVL_TILE_PX, _INTERNVL_TILE_PX],
            patch_size=[_INTERNVL_PATCH_PX, _INTERNVL_PATCH_PX],
        ),
        text_config=dict(
            _TEXT,
            model_type="qwen3",  # InternVL3.5-2B: a Qwen3-1.7B language model
            vocab_size=len(tokenizer),
            max_position_embeddings=4096,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        ),
        image_token_id=tokenizer.convert_tokens_to_ids("<IMG_CONTEXT>"),
        image_seq_length=image_seq_len,
        downsample_ratio=downsample,
        tie_word_embeddings=False,
    )
    _seeded(seed)
    model = InternVLForConditionalGeneration(config)
    return model, processor


def _build_gemma4(seed: int):
    from transformers import (
        Gemma4AudioFeatureExtractor,
        Gemma4Config,
        Gemma4ForConditionalGeneration,
        Gemma4ImageProcessor,
        Gemma4Processor,
        Gemma4VideoProcessor,
    )

    # Gemma 4's token strings (google/gemma-4-E2B-it tokenizer_config.json), byte-level ids
    named = {
        "image_token": "<|image|>",
        "boi_token": "<|image>",
        "eoi_token": "<image|>",
        "audio_token": "<|audio|>",
        "boa_token": "<|audio>",
        "eoa_token": "<audio|>",
        "sot_token": "<|turn>",
        "eot_token": "<turn|>",
        "soc_token": "<|channel>",
        "eoc_token": "<channel|>",
    }
    tokenizer = _byte_level_tokenizer(
        special={"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"},
        extra=["<|video|>"],
        named=named,
    )
    tokenizer.chat_template = _GEMMA_CHAT_TEMPLATE
    patch, pooling = 16, 3
    soft = gemma4_max_soft_tokens(MAX_PIXELS, patch, pooling)
    image_processor = Gemma4ImageProcessor(patch_size=patch, pooling_kernel_size=pooling, max_soft_tokens=soft)
    video_processor = Gemma4VideoProcessor(patch_size=patch, pooling_kernel_size=pooling, max_soft_tokens=soft)
    processor = Gemma4Processor(
        feature_extractor=Gemma4AudioFeatureExtractor(),
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=_GEMMA_CHAT_TEMPLATE,
        image_seq_length=soft,
    )
    ids = tokenizer.convert_tokens_to_ids
    head_dim = _TEXT["head_dim"]
    # tiny: 2 own-KV layers + 2 layers reusing them; with real sizes patched into _TEXT (benchmarks),
    # E2B's pattern: four sliding layers then one full, the last 20 of 35 layers reusing KV
    tiny = _TEXT["num_hidden_layers"] <= 2
    n_layers = 4 if tiny else int(_TEXT["num_hidden_layers"])
    layer_types = (["sliding_attention", "full_attention"] * (n_layers // 2) if tiny else
                   [("full_attention" if (i + 1) % 5 == 0 else "sliding_attention") for i in range(n_layers)])
    kv_shared = 2 if tiny else round(n_layers * 20 / 35)
    config = Gemma4Config(
        vision_config=dict(
            hidden_size=_VISION["hidden_size"],
            intermediate_size=_VISION["intermediate_size"],
            num_hidden_layers=_VISION["num_hidden_layers"],
            num_attention_heads=_VISION["num_attention_heads"],
            num_key_value_heads=_VISION["num_attention_heads"],
            head_dim=_VISION["hidden_size"] // _VISION["num_attention_heads"],
            patch_size=patch,
            pooling_kernel_size=pooling,
            position_embedding_size=1024,
        ),
        text_config=dict(
            _TEXT,
            num_hidden_layers=n_layers,
            layer_types=layer_types,
            sliding_window=512,
            num_kv_shared_layers=kv_shared,
            global_head_dim=head_dim,
            vocab_size=len(tokenizer),
            vocab_size_per_layer_input=len(tokenizer),
            hidden_size_per_layer_input=8,
            max_position_embeddings=4096,
            final_logit_softcapping=30.0,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        ),
        audio_config=None,  # the study is image + text only; E2B's audio tower is not built
        image_token_id=ids("<|image|>"),
        boi_token_id=ids("<|image>"),
        eoi_token_id=ids("<image|>"),
        audio_token_id=ids("<|audio|>"),
        boa_token_id=ids("<|audio>"),
        eoa_token_index=ids("<audio|>"),
        video_token_id=ids("<|video|>"),
        tie_word_embeddings=True,
    )
    _seeded(seed)
    model = Gemma4ForConditionalGeneration(config)
    # as google/gemma-4-E2B-it's generation config: a turn ends at <turn|> as well as at <eos>
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, ids("<turn|>")]
    return model, processor


_BUILDERS = {"smolvlm": _build_smolvlm, "qwen3vl": _build_qwen3vl, "internvl": _build_internvl, "gemma": _build_gemma4}


def build_tiny_checkpoint(arch: str, out_dir: str | os.PathLike, seed: int = 0) -> Path:
    """Build a tiny, randomly initialised checkpoint of a real VLM architecture.

    Parameters
    ----------
    arch : {"smolvlm", "qwen3vl"}
        ``"smolvlm"``: SmolVLM (Idefics3 family; ``SmolVLMForConditionalGeneration``,
        ``SmolVLMProcessor`` with ``SmolVLMImageProcessor(do_image_splitting=False)``,
        one 384-px tile, 36 visual tokens). ``"qwen3vl"``: Qwen3-VL
        (``Qwen3VLForConditionalGeneration``, ``Qwen3VLProcessor`` with
        ``Qwen2VLImageProcessor``, patch 16, merge 2, at most 448^2 pixels, i.e. at
        most 196 visual tokens).
    out_dir : path
        Destination folder; replaced atomically (built in a temporary folder
        next to it, then ``os.replace``). An existing folder is overwritten.
    seed : int
        Seed of ``torch.manual_seed`` before the weights are initialised: the same
        seed gives identical weights.

    Returns
    -------
    Path
        ``out_dir``, holding model, processor, tokenizer, chat template and the
        marker ``murk_tiny.json`` (``{"arch", "seed", "pipeline_check": true, "digest"}``: ``digest`` is
        :func:`murk.core.checkpoint_digest` of the folder as built).

    Raises
    ------
    ValueError
        If ``arch`` is unknown.
    """
    if arch not in _BUILDERS:
        raise ValueError(f"unknown tiny architecture {arch!r}; choose one of {sorted(_BUILDERS)}")
    import torch

    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        with torch.random.fork_rng(devices=[]):
            model, processor = _BUILDERS[arch](seed)
        model.eval()
        model.save_pretrained(tmp)
        processor.save_pretrained(tmp)
        # the content digest of what was built (murk.core; the marker itself is not part of it): a re-saved
        # checkpoint is told from the built one (murk.pipeline.checkpoint_identity)
        marker = {"arch": arch, "seed": int(seed), "pipeline_check": True,
                  "digest": core.checkpoint_digest(tmp, None)}
        (tmp / MARKER_FILE).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
        _replace_folder(tmp, out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def is_tiny_checkpoint(folder: str | os.PathLike) -> bool:
    """True if ``folder`` holds a murk tiny checkpoint (marker file present)."""
    return (Path(folder) / MARKER_FILE).is_file()


def ensure_tiny_checkpoint(model_id: str, root: str | os.PathLike | None = None) -> Path:
    """Folder of a tiny checkpoint, built on first use.

    Parameters
    ----------
    model_id : str
        A key of :data:`TINY_MODELS` (``"murk-tiny/smolvlm"``, ``"murk-tiny/qwen3vl"``).
    root : path, optional
        Output root (see :func:`murk.core.output_dir`).

    Returns
    -------
    Path
        ``murk.core.checkpoints_dir(root) / murk.core.model_slug(model_id)``.

    Raises
    ------
    KeyError
        If ``model_id`` is not a tiny model id.
    murk.core.DiskFullError
        The disk is full while the checkpoint is built (one line naming the output
        root and how to resume; nothing of the checkpoint is left).
    """
    if model_id not in TINY_MODELS:
        raise KeyError(f"{model_id!r} is not a tiny model id; choose one of {sorted(TINY_MODELS)}")
    folder = core.checkpoints_dir(root) / core.model_slug(model_id)
    if not is_tiny_checkpoint(folder):
        with _full_disk_guard(folder, root):
            build_tiny_checkpoint(TINY_MODELS[model_id], folder)
    return folder


def _full_disk_guard(folder: Path, root: str | os.PathLike | None):
    """:func:`murk.core.guard` for building the offline checkpoint ``folder`` of the output root ``root``:
    a full disk (safetensors' ``SafetensorError`` naming no file, an ``OSError``) becomes the one line naming
    the root and the resume command."""
    from murk import core

    return core.guard(folder, "the half-built checkpoint was removed (it is built in a temporary folder "
                                  "and put in place only when complete); the selection, depth maps, stores and "
                                  "every other finished file are kept", root=core.output_dir(root))


def build_tiny_depth_checkpoint(out_dir: str | os.PathLike, seed: int = 0) -> Path:
    """A tiny randomly initialised Depth Anything V2 *metric* checkpoint, built offline.

    Same classes as ``depth-anything/Depth-Anything-V2-Metric-Outdoor-Small-hf``
    (``DepthAnythingForDepthEstimation`` on a DINOv2 backbone with
    ``depth_estimation_type="metric"``, ``max_depth=80``; ``DPTImageProcessor``),
    shrunk so that it builds in well under a second. With random weights its
    head outputs sigmoid(0) · 80 = 40 m everywhere (``shared/notes``): it tests
    the loading and post-processing path, not depth.

    Parameters
    ----------
    out_dir : path
        Folder to write (replaced atomically).
    seed : int
        Torch seed of the random initialisation.

    Returns
    -------
    Path of the checkpoint folder (loadable with ``from_pretrained``).
    """
    from transformers import (DepthAnythingConfig, DepthAnythingForDepthEstimation, Dinov2Config,
                              DPTImageProcessor)

    out_dir = Path(out_dir)
    backbone = Dinov2Config(hidden_size=32, num_hidden_layers=4, num_attention_heads=2, intermediate_size=64,
                            patch_size=14, image_size=56, out_features=["stage1", "stage2", "stage3", "stage4"],
                            reshape_hidden_states=False)
    cfg = DepthAnythingConfig(backbone_config=backbone, depth_estimation_type="metric", max_depth=80,
                              fusion_hidden_size=16, neck_hidden_sizes=[8, 16, 32, 32], reassemble_hidden_size=32,
                              head_hidden_size=8)
    _seeded(seed)
    model = DepthAnythingForDepthEstimation(cfg).eval()
    processor = DPTImageProcessor(do_resize=True, size={"height": 56, "width": 56}, keep_aspect_ratio=True,
                                  ensure_multiple_of=14, image_mean=[0.485, 0.456, 0.406],
                                  image_std=[0.229, 0.224, 0.225])
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent if out_dir.parent.exists() else None))
    model.save_pretrained(tmp)
    processor.save_pretrained(tmp)
    (tmp / MARKER_FILE).write_text(json.dumps({"arch": "depth-anything-v2-metric", "seed": seed,
                                               "pipeline_check": True}))
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    return out_dir


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


#: every model id murk builds offline (tiny and real-format pipeline checks)
OFFLINE_MODELS: tuple[str, ...] = (*TINY_MODELS, *REALFORMAT_MODELS)


def ensure_offline_checkpoint(model_id: str, root: str | os.PathLike | None = None) -> Path:
    """Folder of a tiny or real-format checkpoint (:data:`OFFLINE_MODELS`), built on first use."""
    if model_id in REALFORMAT_MODELS:
        return ensure_realformat_checkpoint(model_id, root)
    return ensure_tiny_checkpoint(model_id, root)
