"""Tiny in-code models for the architectures tests/helpers/tiny.py does not build (hidden 32, 2 blocks)."""

from __future__ import annotations

import torch
from transformers import (
    Gemma2Config,
    Gemma2ForCausalLM,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Olmo2Config,
    Olmo2ForCausalLM,
    OlmoConfig,
    OlmoForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

# Shared by every builder below: 4 query heads over 2 key/value heads (grouped-query attention).
SIZES = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=None)


def tiny_qwen2(vocab_size: int, seed: int = 0) -> Qwen2ForCausalLM:
    """Qwen2: biases on the query/key/value projections."""
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=vocab_size, **SIZES)).float()


def tiny_qwen3(vocab_size: int, seed: int = 0) -> Qwen3ForCausalLM:
    """Qwen3: per-head query/key RMS norms, head_dim (16) not hidden/heads (8)."""
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(Qwen3Config(vocab_size=vocab_size, head_dim=16, **SIZES)).float()


def tiny_mistral(vocab_size: int, seed: int = 0) -> MistralForCausalLM:
    """Mistral with a 4-token sliding window, so windowing meets left padding in the tests."""
    torch.manual_seed(seed)
    return MistralForCausalLM(MistralConfig(vocab_size=vocab_size, sliding_window=4, **SIZES)).float()


def tiny_olmo(vocab_size: int, seed: int = 0) -> OlmoForCausalLM:
    """OLMo: parameter-free layer norms, query/key/value clipping, biased attention projections."""
    torch.manual_seed(seed)
    return OlmoForCausalLM(OlmoConfig(vocab_size=vocab_size, clip_qkv=8.0, attention_bias=True, **SIZES)).float()


def tiny_olmo2(vocab_size: int, seed: int = 0) -> Olmo2ForCausalLM:
    """OLMo2: norms after attention and FFN (before the residual add), query/key norms over all heads."""
    torch.manual_seed(seed)
    return Olmo2ForCausalLM(Olmo2Config(vocab_size=vocab_size, **SIZES)).float()


def tiny_gpt_neox(vocab_size: int, seed: int = 0) -> GPTNeoXForCausalLM:
    """GPT-NeoX (Pythia): parallel residual, rotary on half of each head, one query/key/value projection ordered by head."""
    torch.manual_seed(seed)
    config = GPTNeoXConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           max_position_embeddings=64, rotary_pct=0.5, use_parallel_residual=True, pad_token_id=0, bos_token_id=1,
                           eos_token_id=None, tie_word_embeddings=False)
    return GPTNeoXForCausalLM(config).float()


def tiny_gemma2(vocab_size: int, seed: int = 0) -> Gemma2ForCausalLM:
    """Gemma 2: post-norms around both sub-layers, soft-capped attention scores and logits, a 4-token sliding window."""
    torch.manual_seed(seed)
    config = Gemma2Config(vocab_size=vocab_size, head_dim=8, sliding_window=4, query_pre_attn_scalar=8, attn_logit_softcapping=5.0,
                          final_logit_softcapping=3.0, layer_types=["sliding_attention", "full_attention"], **SIZES)
    return Gemma2ForCausalLM(config).float()


def tiny_phi3(vocab_size: int, seed: int = 0) -> Phi3ForCausalLM:
    """Phi-3: one fused query/key/value projection (queries, then keys, then values) and one fused gate/up projection."""
    torch.manual_seed(seed)
    return Phi3ForCausalLM(Phi3Config(vocab_size=vocab_size, **SIZES)).float()


def tiny_gemma3_multimodal(vocab_size: int, seed: int = 0):
    """Gemma3ForConditionalGeneration (model type "gemma3"): the text model under a tiny SigLIP tower, used text-only."""
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3TextConfig, SiglipVisionConfig

    torch.manual_seed(seed)
    text = Gemma3TextConfig(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, head_dim=8, max_position_embeddings=64, sliding_window=4,
        layer_types=["sliding_attention", "full_attention"],
    )
    vision = SiglipVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                                image_size=28, patch_size=14)
    # The image marker tokens only need ids inside the vocabulary; text-only prompts never use them.
    config = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4, image_token_index=vocab_size - 1,
                          boi_token_index=vocab_size - 2, eoi_token_index=vocab_size - 3)
    return Gemma3ForConditionalGeneration(config).float()
