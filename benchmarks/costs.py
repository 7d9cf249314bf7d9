"""The cost model of collection: FLOPs of one prompt from a model's config (shared by the benchmarks)."""

from __future__ import annotations

# Published configs of models too large to load here (config.json of meta-llama/Meta-Llama-3-8B).
LLAMA_3_8B = {"num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
              "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256}
# H100 SXM, dense bfloat16 tensor-core peak (NVIDIA's datasheet), FLOP/s.
H100_BF16_PEAK = 989e12


def setting(config, name: str, default=None):
    return config.get(name, default) if isinstance(config, dict) else getattr(config, name, default)


def linear_parameters(config) -> int:
    """Weights multiplied per token: attention projections and a gated feed-forward (Llama, Gemma, Mistral, Qwen, SmolLM)."""
    d, layers, ff = setting(config, "hidden_size"), setting(config, "num_hidden_layers"), setting(config, "intermediate_size")
    heads, kv_heads = setting(config, "num_attention_heads"), setting(config, "num_key_value_heads") or setting(config, "num_attention_heads")
    head_dim = setting(config, "head_dim") or d // heads
    attention = d * heads * head_dim * 2 + d * kv_heads * head_dim * 2  # q and o, k and v
    return layers * (attention + 3 * d * ff)


def flops_per_prompt(config, tokens: float, n_domain: int) -> float:
    """Forward FLOPs of one prompt of `tokens` tokens scored over `n_domain` answers: linear layers, causal attention, restricted head."""
    d, layers, heads = setting(config, "hidden_size"), setting(config, "num_hidden_layers"), setting(config, "num_attention_heads")
    head_dim = setting(config, "head_dim") or d // heads
    attention = layers * 2 * 2 * heads * head_dim * tokens * (tokens + 1) / 2  # scores and weighted values, causal
    return 2 * linear_parameters(config) * tokens + attention + 2 * d * n_domain
