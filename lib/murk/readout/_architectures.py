"""The study models' published architectures, and the one way murk reads a model configuration.

Two things live here, both about what a model *is* rather than what it computes:

* :data:`PUBLISHED`: the five study models (spec Sec. III) at their published
  configurations, every value transcribed from the public ``config.json`` or model
  card cited beside it. :func:`published_config` turns an entry into the
  transformers configuration, so tests and benchmarks can build the real
  architectures on the meta device (no memory) or with random weights.
* The **configuration accessor** (:func:`text_attr`, :func:`vision_attr`,
  :func:`layer_types`, :func:`head_dims`, :func:`kv_heads`, :func:`kv_shared_layers`,
  :func:`intermediate_sizes`): every model-config attribute that the read-out
  engine and the benchmarks read goes through it. Since transformers 5.20 a
  configuration can be *heterogeneous*: per-layer values (``per_layer_config``)
  override global ones, and reading such an attribute on the global config raises
  ``AmbiguousGlobalPerLayerAttributeError`` (a ``RuntimeError``, so
  ``getattr(config, name, None)`` does not catch it). Gemma 4 is built that way:
  its full-attention layers have ``head_dim`` = ``global_head_dim`` (512 in
  Gemma-4-E2B), its sliding-window layers ``head_dim`` (256). The accessor reads
  such values per layer and answers a global read only when all layers agree.

Only the standard library and transformers are used (transformers imported lazily).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "PUBLISHED",
    "published_config",
    "text_config",
    "text_attr",
    "vision_attr",
    "layer_types",
    "head_dims",
    "kv_heads",
    "kv_shared_layers",
    "intermediate_sizes",
]

_REQUIRED = object()

# --------------------------------------------------------------------------- published configurations

_QWEN3VL_SOURCE = "https://huggingface.co/Qwen/{name}/blob/main/config.json"
#: Qwen3-VL-2B/4B-Instruct config.json, text_config entries common to both sizes
_QWEN3VL_TEXT = dict(num_key_value_heads=8, head_dim=128, vocab_size=151_936, max_position_embeddings=262_144,
                     rms_norm_eps=1e-6, hidden_act="silu", attention_bias=False,
                     rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0,
                                      "mrope_section": [24, 20, 20], "mrope_interleaved": True})
#: Qwen3-VL-2B/4B-Instruct config.json, vision_config (the same tower in both; out_hidden_size = text hidden_size)
_QWEN3VL_VISION = dict(depth=24, hidden_size=1024, intermediate_size=4096, num_heads=16, patch_size=16,
                       spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=2304,
                       deepstack_visual_indexes=[5, 11, 17], hidden_act="gelu_pytorch_tanh", in_channels=3)
#: Qwen3-VL-*-Instruct config.json (top level) and tokenizer_config.json (ids 151643-151656)
_QWEN3VL_TOP = dict(image_token_id=151_655, video_token_id=151_656, vision_start_token_id=151_652,
                    vision_end_token_id=151_653, tie_word_embeddings=True)
_QWEN3VL_TOKENS = dict(bos_token_id=151_643, eos_token_id=151_645)

#: Each study model's published configuration. Keys of an entry:
#:
#: ``family``: murk's family name; ``config_class``: the transformers configuration
#: class; ``text`` / ``vision``: the ``text_config`` / ``vision_config`` entries that fix
#: the architecture; ``top``: top-level entries (token ids, tied embeddings);
#: ``text_tokens``: the text config's special-token ids; ``source``: where the values
#: were read; ``parameters``: the published parameter total (``parameters_source``:
#: where, ``parameters_rtol``: the relative tolerance a build is checked against,
#: wider where the publication rounds; ``parameters_count_with``: top-level entries
#: that add towers murk does not build but the published total counts).
PUBLISHED: dict[str, dict[str, Any]] = {
    "Qwen/Qwen3-VL-2B-Instruct": dict(
        family="qwen3vl", config_class="Qwen3VLConfig",
        source=_QWEN3VL_SOURCE.format(name="Qwen3-VL-2B-Instruct"),
        text=dict(_QWEN3VL_TEXT, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                  num_attention_heads=16),
        vision=dict(_QWEN3VL_VISION), top=dict(_QWEN3VL_TOP), text_tokens=dict(_QWEN3VL_TOKENS),
        # hub safetensors metadata "2.13B params"; 2,127,532,032 counted on the full-size build (issue 38)
        parameters=2.128e9, parameters_source="hub safetensors metadata of Qwen/Qwen3-VL-2B-Instruct (2.13B)",
        parameters_rtol=0.005),
    "Qwen/Qwen3-VL-4B-Instruct": dict(
        family="qwen3vl", config_class="Qwen3VLConfig",
        source=_QWEN3VL_SOURCE.format(name="Qwen3-VL-4B-Instruct"),
        text=dict(_QWEN3VL_TEXT, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                  num_attention_heads=32),
        vision=dict(_QWEN3VL_VISION), top=dict(_QWEN3VL_TOP), text_tokens=dict(_QWEN3VL_TOKENS),
        parameters=4.44e9, parameters_source="hub safetensors metadata of Qwen/Qwen3-VL-4B-Instruct (4.44B)",
        parameters_rtol=0.01),
    "OpenGVLab/InternVL3_5-2B-HF": dict(
        family="internvl", config_class="InternVLConfig",
        source="https://huggingface.co/OpenGVLab/InternVL3_5-2B-HF/blob/main/config.json "
               "(InternViT-300M-448px-V2.5 + Qwen3-1.7B; pixel shuffle 0.5: 256 tokens per 448-px tile)",
        text=dict(model_type="qwen3", hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151_936,
                  max_position_embeddings=40_960, rope_theta=1_000_000.0, rms_norm_eps=1e-6, hidden_act="silu"),
        vision=dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
                    image_size=[448, 448], patch_size=[14, 14], attention_bias=True, use_qk_norm=False,
                    norm_type="layer_norm", layer_scale_init_value=0.1, use_absolute_position_embeddings=True),
        # <IMG_CONTEXT> 151667 (transformers' convert_internvl_weights_to_hf.py); the LM head is untied
        # (the model card's 2.0B language parameters are Qwen3-1.7B's 1.72B plus a separate head)
        top=dict(image_token_id=151_667, image_seq_length=256, downsample_ratio=0.5, projector_hidden_act="gelu",
                 vision_feature_layer=-1, vision_feature_select_strategy="default", tie_word_embeddings=False),
        text_tokens=dict(bos_token_id=151_643, eos_token_id=151_645),
        parameters=2.3e9, parameters_source="InternVL3.5 model card, model table: 0.3B vision + 2.0B language = "
                                            "2.3B (rounded to 0.1B: +-0.05B)", parameters_rtol=0.022),
    "HuggingFaceTB/SmolVLM2-2.2B-Instruct": dict(
        family="smolvlm", config_class="SmolVLMConfig",
        source="https://huggingface.co/HuggingFaceTB/SmolVLM2-2.2B-Instruct/blob/main/config.json "
               "(SigLIP so400m at 384 px, patch 14: 729 patches, pixel shuffle 3: 81 tokens; SmolLM2-1.7B)",
        text=dict(model_type="llama", hidden_size=2048, intermediate_size=8192, num_hidden_layers=24,
                  num_attention_heads=32, num_key_value_heads=32, head_dim=64, vocab_size=49_280,
                  max_position_embeddings=16_384, rope_theta=130_000.0, rms_norm_eps=1e-5, hidden_act="silu"),
        vision=dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27, num_attention_heads=16,
                    image_size=384, patch_size=14),
        top=dict(image_token_id=49_190, scale_factor=3, tie_word_embeddings=False),
        text_tokens=dict(bos_token_id=1, eos_token_id=49_279, pad_token_id=2),
        parameters=2.25e9, parameters_source="hub safetensors metadata of HuggingFaceTB/SmolVLM2-2.2B-Instruct "
                                             "(2.25B)", parameters_rtol=0.01),
    "google/gemma-4-E2B-it": dict(
        family="gemma", config_class="Gemma4Config",
        source="https://huggingface.co/google/gemma-4-E2B-it/blob/main/config.json and the model card "
               "(35 layers, 4 sliding : 1 full, window 512, last 20 layers reuse KV, per-layer embeddings, "
               "double-wide MLP in the KV-sharing layers); use_bidirectional_attention unset "
               "(transformers' modeling_gemma4: 'Smaller Gemma models (use_bidirectional_attention=None)')",
        text=dict(hidden_size=1536, intermediate_size=6144, num_hidden_layers=35, num_attention_heads=8,
                  num_key_value_heads=1, head_dim=256, global_head_dim=512, sliding_window=512,
                  layer_types=[("full_attention" if (i + 1) % 5 == 0 else "sliding_attention") for i in range(35)],
                  num_kv_shared_layers=20, use_double_wide_mlp=True, vocab_size=262_144,
                  vocab_size_per_layer_input=262_144, hidden_size_per_layer_input=256,
                  final_logit_softcapping=30.0, max_position_embeddings=131_072, rms_norm_eps=1e-6,
                  hidden_activation="gelu_pytorch_tanh"),
        vision=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=16, num_attention_heads=12,
                    num_key_value_heads=12, head_dim=64, patch_size=16, pooling_kernel_size=3,
                    position_embedding_size=10_240),
        # token ids: transformers' Gemma4Config defaults = murk.offline._realformat.GEMMA4_SPECIAL_IDS; the audio
        # encoder is left out (murk reads images and text only)
        top=dict(image_token_id=258_880, boi_token_id=255_999, eoi_token_id=258_882, audio_token_id=258_881,
                 boa_token_id=256_000, eoa_token_index=258_883, video_token_id=258_884, audio_config=None,
                 tie_word_embeddings=True),
        text_tokens=dict(bos_token_id=2, eos_token_id=[1, 106], pad_token_id=0),
        parameters=5.1e9, parameters_source="Gemma 4 model card: E2B, 5.1B parameters with embeddings "
                                            "(2.3B effective), audio encoder included",
        # the published total counts the audio encoder: built for the count only, at transformers'
        # Gemma4AudioConfig defaults (documented against google/gemma-4-e2b-it; 0.305B)
        parameters_count_with=dict(audio_config={}), parameters_rtol=0.01),
}


def published_config(model_id: str, spec: Mapping[str, Any] | None = None, *,
                     text_tokens: Mapping[str, Any] | None = None, **top: Any):
    """The transformers configuration of a study model at its published architecture.

    Parameters
    ----------
    model_id : str
        A key of :data:`PUBLISHED` (e.g. ``"google/gemma-4-E2B-it"``).
    spec : mapping, optional
        An entry of the same form to use instead (e.g. a shrunk copy for a smoke run).
    text_tokens : mapping, optional
        Special-token ids of the text config that replace the published ones
        (``bos_token_id``, ``eos_token_id``, ``pad_token_id``), for a stand-in tokenizer.
    **top
        Top-level entries that replace the published ones (``image_token_id``, ...).

    Returns
    -------
    transformers.PretrainedConfig
        An instance of the entry's ``config_class`` (Qwen3-VL: ``out_hidden_size`` of the
        vision tower set to the text ``hidden_size``, as published).

    Raises
    ------
    KeyError
        If ``model_id`` is not in :data:`PUBLISHED` and no ``spec`` is given.
    """
    import transformers

    s = PUBLISHED[model_id] if spec is None else spec
    text = dict(s["text"])
    text.update(s.get("text_tokens", {}))
    text.update(text_tokens or {})
    vision = dict(s["vision"])
    if s["family"] == "qwen3vl":
        vision["out_hidden_size"] = text["hidden_size"]
    kwargs = dict(s.get("top", {}), **top)
    return getattr(transformers, s["config_class"])(text_config=text, vision_config=vision, **kwargs)


# --------------------------------------------------------------------------- the accessor


def text_config(config):
    """The language model's configuration (``config.get_text_config()``; ``config`` itself for a text model)."""
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def _per_layer_names(tc) -> frozenset:
    """Attributes that vary by layer in a heterogeneous config (transformers >= 5.20), else empty."""
    try:
        names = tc.per_layer_attributes if getattr(tc, "is_heterogeneous", False) else None
    except AttributeError:
        names = None
    return frozenset(names or ())


def _n_layers(tc) -> int:
    return int(tc.num_hidden_layers)


def _layer_value(tc, name: str, layer: int, default: Any) -> Any:
    if name in _per_layer_names(tc):
        value = getattr(tc.per_layer_config[layer], name, None)
    else:
        value = getattr(tc, name, None)
    return default if value is None else value


def text_attr(config, name: str, layer: int | None = None, default: Any = _REQUIRED) -> Any:
    """One attribute of the language model's configuration, per layer where it varies by layer.

    Parameters
    ----------
    config : transformers.PretrainedConfig
        A model's config (multimodal or text); its text config is read.
    name : str
        The attribute (``"hidden_size"``, ``"head_dim"``, ``"num_key_value_heads"``, ...).
    layer : int, optional
        Decoder layer index (0-based). Needed only for an attribute whose value differs
        between layers; given for a uniform attribute, it returns the global value.
    default : optional
        Returned when the attribute is absent or None. Without it an absent attribute
        raises.

    Returns
    -------
    object
        The value.

    Raises
    ------
    AttributeError
        If the attribute is absent (or None) and no ``default`` is given.
    ValueError
        If ``layer`` is None and the attribute differs between layers (read it per layer,
        e.g. with :func:`head_dims`).
    """
    tc = text_config(config)
    if name in _per_layer_names(tc):
        if layer is None:
            values = {repr(getattr(c, name, None)) for c in tc.per_layer_config}
            if len(values) > 1:
                raise ValueError(f"{name!r} differs between the layers of this {tc.model_type!r} config "
                                 f"({', '.join(sorted(values))}); read it per layer (layer=i)")
            layer = 0
        return _checked(name, _layer_value(tc, name, layer, None), default)
    return _checked(name, getattr(tc, name, None), default)


def _checked(name: str, value: Any, default: Any) -> Any:
    if value is None:
        if default is _REQUIRED:
            raise AttributeError(f"the model config has no {name!r}")
        return default
    return value


def vision_attr(config, *names: str, default: Any = _REQUIRED) -> Any:
    """The first present attribute among ``names`` of the vision tower's configuration.

    Families name the same thing differently (Qwen3-VL: ``depth`` and ``num_heads``;
    SigLIP, InternViT, Gemma 4: ``num_hidden_layers`` and ``num_attention_heads``), so
    several names may be given, tried in order.

    Parameters
    ----------
    config : transformers.PretrainedConfig
        The model's (multimodal) config.
    *names : str
        Attribute names, tried in order.
    default : optional
        Returned when the model has no vision config or none of the names is set.

    Returns
    -------
    object

    Raises
    ------
    AttributeError
        If nothing is found and no ``default`` is given.
    """
    vc = getattr(config, "vision_config", None)
    for n in names:
        value = getattr(vc, n, None) if vc is not None else None
        if value is not None:
            return value
    if default is _REQUIRED:
        raise AttributeError(f"the model config has no vision attribute among {names}")
    return default


def layer_types(config) -> list[str]:
    """Attention type of each decoder layer (``"full_attention"``, ``"sliding_attention"``, ...).

    Returns
    -------
    list of str, length ``num_hidden_layers``
        ``config.layer_types``, or all ``"full_attention"`` where the config has none.
    """
    tc = text_config(config)
    types = getattr(tc, "layer_types", None)
    return list(types) if types else ["full_attention"] * _n_layers(tc)


def head_dims(config) -> list[int]:
    """Attention head size of each decoder layer (channels per head).

    Per-layer values come from a heterogeneous config's ``per_layer_config`` (Gemma 4
    under transformers >= 5.20: ``global_head_dim`` in its full-attention layers); a
    config that carries ``global_head_dim`` as a plain attribute gets it in its
    full-attention layers; otherwise ``head_dim``, or ``hidden_size //
    num_attention_heads`` where the config names none.

    Returns
    -------
    list of int, length ``num_hidden_layers``
    """
    tc = text_config(config)
    fallback = int(tc.hidden_size) // int(tc.num_attention_heads)
    per_layer = "head_dim" in _per_layer_names(tc)
    plain_global = None if per_layer else getattr(tc, "global_head_dim", None)
    out = []
    for i, t in enumerate(layer_types(tc)):
        if per_layer:
            out.append(int(_layer_value(tc, "head_dim", i, fallback)))
        elif plain_global and t == "full_attention":
            out.append(int(plain_global))
        else:
            out.append(int(getattr(tc, "head_dim", None) or fallback))
    return out


def kv_heads(config) -> list[int]:
    """Key/value heads of each decoder layer (``num_key_value_heads``, per layer where it varies).

    Returns
    -------
    list of int, length ``num_hidden_layers``
        ``num_attention_heads`` where the config names no KV heads (multi-head attention).
    """
    tc = text_config(config)
    heads = int(tc.num_attention_heads)
    return [int(_layer_value(tc, "num_key_value_heads", i, heads)) for i in range(_n_layers(tc))]


def intermediate_sizes(config) -> list[int]:
    """MLP width of each decoder layer (Gemma 4's KV-sharing layers are twice as wide under
    ``use_double_wide_mlp``).

    Returns
    -------
    list of int, length ``num_hidden_layers``
        ``4 * hidden_size`` where the config names no ``intermediate_size``.
    """
    tc = text_config(config)
    base = [int(_layer_value(tc, "intermediate_size", i, 4 * int(tc.hidden_size))) for i in range(_n_layers(tc))]
    if getattr(tc, "use_double_wide_mlp", False):
        first = _n_layers(tc) - kv_shared_layers(tc)
        base = [w * 2 if i >= first else w for i, w in enumerate(base)]
    return base


def kv_shared_layers(config) -> int:
    """How many of the last decoder layers reuse an earlier layer's KV cache (Gemma 4), 0 for most models."""
    return int(getattr(text_config(config), "num_kv_shared_layers", 0) or 0)
