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
2 layers, 4 heads, 2 KV heads, head_dim 16 (32 in the SmolVLM and Qwen3-VL builds, which a vLLM server
serves too); vision hidden 32, 2 layers).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from murk import core

__all__ = ["gemma4_max_soft_tokens", "TINY_MODELS", "MARKER_FILE", "MAX_PIXELS", "build_tiny_checkpoint",
           "ensure_tiny_checkpoint", "is_tiny_checkpoint"]

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
# the text head size of the SmolVLM and Qwen3-VL builds, which a vLLM server reads too (tests/_vllm.py): vLLM's
# CPU attention takes head sizes 32-512 only ("Unsupported CPU attention configuration: head_dim=16"; the real
# models have 64 to 256); the query/key/value projections widen to 4 x 32 = 128, the hidden size stays 64
_SERVED_TEXT = dict(_TEXT, head_dim=32)

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
            _SERVED_TEXT,
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
    head_dim = _SERVED_TEXT["head_dim"]
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
            _SERVED_TEXT,
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


