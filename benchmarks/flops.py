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


def _params(module, skip=()) -> int:
    return sum(p.numel() for n, p in module.named_parameters() if not any(n.startswith(s) for s in skip))


def model_flops(vlm, st) -> float:
    """Useful FLOPs of the work counted in ``st`` (see the module docstring)."""
    net = vlm.model
    base = net.model
    tc = net.config.get_text_config()
    text = getattr(base, "language_model", None) or getattr(base, "text_model")
    layers = list(text.layers)
    first_shared = len(layers) - int(getattr(tc, "num_kv_shared_layers", 0) or 0)
    full_tok = st.prefill_tokens + st.decode_tokens
    short_tok = st.end_tokens + st.decode_tokens
    full_pairs = st.attn_pairs + st.decode_attn_pairs
    short_pairs = st.end_attn_pairs + st.decode_attn_pairs
    f = 0.0
    types = getattr(tc, "layer_types", None) or ["full_attention"] * len(layers)
    for i, layer in enumerate(layers):
        shared = i >= first_shared
        hd = int(getattr(tc, "global_head_dim", 0) or 0) if types[i] == "full_attention" else 0
        hd = hd or int(getattr(tc, "head_dim", None) or tc.hidden_size // tc.num_attention_heads)
        f += 2.0 * _params(layer) * (short_tok if shared else full_tok)
        f += 4.0 * tc.num_attention_heads * hd * (short_pairs if shared else full_pairs)
    other = _params(text, skip=("layers.", "embed_tokens", "embed_tokens_per_layer"))  # norms, PLE projection
    f += 2.0 * other * full_tok
    f += 2.0 * int(tc.hidden_size) * int(tc.vocab_size) * short_tok  # LM head on the read logits
    vision = getattr(base, "visual", None) or getattr(base, "vision_tower", None) or getattr(base, "vision_model")
    merge_names = ("merger", "deepstack_merger_list")  # Qwen: the merger runs on merged tokens
    f += 2.0 * _params(vision, skip=merge_names + ("pos_embed",)) * st.vision_tokens
    proj = [getattr(base, n) for n in ("multi_modal_projector", "connector", "embed_vision") if hasattr(base, n)]
    merged = _params(vision) - _params(vision, skip=merge_names) + sum(_params(m) for m in proj)
    f += 2.0 * merged * st.image_tokens
    vc = net.config.vision_config
    vh = int(vc.hidden_size)
    vl = int(getattr(vc, "depth", None) or vc.num_hidden_layers)
    f += 4.0 * vh * vl * st.vision_attn_pairs
    return f
