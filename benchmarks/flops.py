"""Useful model FLOPs of a batched read-out, from the engine's counters (:class:`murk.engine.EngineStats`).

Counted as ``benchmarks/readout_gpu.py``'s docstring says: ``2 x parameters`` per real
token through each language-model layer (prefill tree tokens and continuation tokens;
Gemma 4's KV-sharing layers only for the prompt-final and continuation tokens, the
only queries they compute), attention over the real (query, key) pairs of the token
trees (``4 x heads x head_dim`` per pair and layer), the LM head on the read logits,
the vision encoder per patch token and its merger / projector per image token, and
the vision attention over its patch pairs. Padding and masked pairs count as waste,
so ``model FLOPs / seconds / peak`` is the model FLOP utilisation (MFU) of the
useful work. Shared by ``readout.py`` (CPU) and ``readout_gpu.py``.
"""

from __future__ import annotations

from murk import architectures as A


def _params(module, skip=()) -> int:
    return sum(p.numel() for n, p in module.named_parameters() if not any(n.startswith(s) for s in skip))


def model_flops(vlm, st) -> float:
    """Useful FLOPs of the work counted in ``st`` (see the module docstring)."""
    net = vlm.model
    base = net.model
    cfg = net.config
    text = getattr(base, "language_model", None) or getattr(base, "text_model")
    layers = list(text.layers)
    first_shared = len(layers) - A.kv_shared_layers(cfg)
    full_tok = st.prefill_tokens + st.decode_tokens
    short_tok = st.end_tokens + st.decode_tokens
    full_pairs = st.attn_pairs + st.decode_attn_pairs
    short_pairs = st.end_attn_pairs + st.decode_attn_pairs
    f = 0.0
    heads = int(A.text_attr(cfg, "num_attention_heads"))
    for i, (layer, hd) in enumerate(zip(layers, A.head_dims(cfg))):  # head sizes per layer (Gemma 4: 256 / 512)
        shared = i >= first_shared
        f += 2.0 * _params(layer) * (short_tok if shared else full_tok)
        f += 4.0 * heads * hd * (short_pairs if shared else full_pairs)
    other = _params(text, skip=("layers.", "embed_tokens", "embed_tokens_per_layer"))  # norms, PLE projection
    f += 2.0 * other * full_tok
    f += 2.0 * int(A.text_attr(cfg, "hidden_size")) * int(A.text_attr(cfg, "vocab_size")) * short_tok  # LM head
    vision = getattr(base, "visual", None) or getattr(base, "vision_tower", None) or getattr(base, "vision_model")
    merge_names = ("merger", "deepstack_merger_list")  # Qwen: the merger runs on merged tokens
    f += 2.0 * _params(vision, skip=merge_names + ("pos_embed",)) * st.vision_tokens
    proj = [getattr(base, n) for n in ("multi_modal_projector", "connector", "embed_vision") if hasattr(base, n)]
    merged = _params(vision) - _params(vision, skip=merge_names) + sum(_params(m) for m in proj)
    f += 2.0 * merged * st.image_tokens
    vh = int(A.vision_attr(cfg, "hidden_size"))
    vl = int(A.vision_attr(cfg, "depth", "num_hidden_layers"))
    f += 4.0 * vh * vl * st.vision_attn_pairs
    return f
