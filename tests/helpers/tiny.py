"""Tiny models and a word-level tokenizer built in code, so tests never download anything."""

from __future__ import annotations

import contextlib

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIAL = ["<pad>", "<bos>", "<unk>"]
WORDS = (
    "X Y Z Alice Bob Carol lives in the city of country capital is "
    "Paris London Tokyo Rome Berlin France England Japan Italy Germany"
).split()
NAMES = tuple(f"name{i}" for i in range(120))  # inputs X the tiny tokenizer knows as whole words
CITIES = ("Paris", "London", "Tokyo", "Rome", "Berlin")
COUNTRIES = ("France", "England", "Japan", "Italy", "Germany")
MODEL_WORDS = (*WORDS, *NAMES)  # the session tokenizer's vocabulary (conftest's `tokenizer`)
INPUTS = list(NAMES[:60])


def tiny_tokenizer(words: tuple[str, ...] | list[str] = WORDS) -> PreTrainedTokenizerFast:
    """Whitespace word-level tokenizer over SPECIAL + `words` that prepends <bos> like Llama and Gemma."""
    vocab = {token: i for i, token in enumerate(SPECIAL + list(words))}
    return whitespace_tokenizer(models.WordLevel(vocab, unk_token="<unk>"), vocab)


def whitespace_tokenizer(model, vocab: dict[str, int]) -> PreTrainedTokenizerFast:
    """`model` (a `tokenizers` model over `vocab`) after a whitespace split, with <bos> prepended."""
    backend = Tokenizer(model)
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", vocab["<bos>"])])
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", bos_token="<bos>", unk_token="<unk>")


def tiny_llama(vocab_size: int, seed: int = 0) -> LlamaForCausalLM:
    """A 2-block Llama with hidden size 32 (rotary positions, untied head)."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config).float()


def tiny_gpt2(vocab_size: int, seed: int = 0) -> GPT2LMHeadModel:
    """A 2-block GPT-2 with hidden size 32 (absolute positions, tied head, dropout on by default)."""
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=vocab_size, n_embd=32, n_layer=2, n_head=4, n_positions=64)
    return GPT2LMHeadModel(config).float()


def tiny_gemma3(vocab_size: int, seed: int = 0):
    """A 2-block Gemma 3 text model with final-logit soft-capping switched on."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(seed)
    config = Gemma3TextConfig(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, head_dim=8, max_position_embeddings=64, sliding_window=4, final_logit_softcapping=3.0,
        layer_types=["sliding_attention", "full_attention"],
    )
    return Gemma3ForCausalLM(config).float()


def state_copy(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of every parameter, for bit-exact before/after comparisons."""
    return {name: p.detach().clone() for name, p in model.named_parameters()}


@contextlib.contextmanager
def one_thread():
    """Run torch on one thread: for tiny models thread hand-offs cost more than the arithmetic."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def tiny_subword_tokenizer(words: tuple[str, ...] | list[str]) -> PreTrainedTokenizerFast:
    """WordPiece over `words` plus single letters, so made-up names split into letter pieces ("Tom" -> T ##o ##m)."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    pieces = [c.upper() for c in letters] + letters + ["##" + c for c in letters]
    vocab = {token: i for i, token in enumerate(dict.fromkeys(SPECIAL + list(words) + pieces))}
    return whitespace_tokenizer(models.WordPiece(vocab, unk_token="<unk>"), vocab)


def write_tiny_gguf(path, words: tuple[str, ...] | list[str] = WORDS, seed: int = 0) -> None:
    """A 2-block Llama with a SentencePiece-style vocabulary as an unquantised GGUF file, as llama.cpp writes one."""
    import gguf
    import numpy as np

    tokens = ["<unk>", "<s>", "</s>"] + ["\u2581" + word for word in words] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["\u2581"]
    d_model, d_ff, n_blocks, n_heads, n_kv_heads = 32, 64, 2, 4, 2
    d_kv = n_kv_heads * d_model // n_heads
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(64)
    writer.add_embedding_length(d_model)
    writer.add_feed_forward_length(d_ff)
    writer.add_block_count(n_blocks)
    writer.add_head_count(n_heads)
    writer.add_head_count_kv(n_kv_heads)
    writer.add_rope_dimension_count(d_model // n_heads)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * 3 + [-float(i) for i in range(len(tokens) - 3)])
    writer.add_token_types([2, 3, 3] + [1] * (len(tokens) - 3))  # unknown, control, control, then normal tokens
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    rng = np.random.default_rng(seed)

    def weight(name: str, *shape: int) -> None:
        writer.add_tensor(name, (rng.standard_normal(shape) * 0.1).astype(np.float32))

    weight("token_embd.weight", len(tokens), d_model)
    for block in range(n_blocks):
        for norm in ("attn_norm", "ffn_norm"):
            writer.add_tensor(f"blk.{block}.{norm}.weight", np.ones(d_model, np.float32))
        weight(f"blk.{block}.attn_q.weight", d_model, d_model)
        weight(f"blk.{block}.attn_k.weight", d_kv, d_model)
        weight(f"blk.{block}.attn_v.weight", d_kv, d_model)
        weight(f"blk.{block}.attn_output.weight", d_model, d_model)
        weight(f"blk.{block}.ffn_gate.weight", d_ff, d_model)
        weight(f"blk.{block}.ffn_up.weight", d_ff, d_model)
        weight(f"blk.{block}.ffn_down.weight", d_model, d_ff)
    writer.add_tensor("output_norm.weight", np.ones(d_model, np.float32))
    weight("output.weight", len(tokens), d_model)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def city_country_registry(cities, countries, pairs: str) -> str:
    """A registry file's text: a city prompt, a country prompt (family "tiny") and their reference `pairs` (YAML flow mapping)."""
    return f"""
domains:
  tiny_cities: [{", ".join(cities)}]
  tiny_countries: [{", ".join(countries)}]
prompts:
  - {{name: tiny_city, family: tiny, language: en, template: "{{}} lives in the city of", domain: tiny_cities}}
  - {{name: tiny_country, family: tiny, language: en, template: "{{}} lives in the country of", domain: tiny_countries}}
references:
  - name: tiny_cities->tiny_countries
    source_domain: tiny_cities
    target_domain: tiny_countries
    pairs: {pairs}
"""


# A family of tiny prompts (one whose domain the tokenizer lacks) with City->Country reference pairs.
REGISTRY_YAML = f"""
domains:
  tiny_cities: [{", ".join(CITIES)}]
  tiny_countries: [{", ".join(COUNTRIES)}]
  tiny_ghosts: [Atlantis, Gotham]
prompts:
  - {{name: tiny_city, family: tiny, language: en, template: "{{}} lives in the city of", domain: tiny_cities}}
  - {{name: tiny_ghost, family: tiny, language: en, template: "{{}} is", domain: tiny_ghosts}}
  - {{name: tiny_country, family: tiny, language: en, template: "{{}} lives in the country of", domain: tiny_countries}}
  - {{name: tiny_capital, family: tiny, language: en, template: "{{}} capital is", domain: tiny_cities}}
references:
  - name: tiny_cities->tiny_countries
    source_domain: tiny_cities
    target_domain: tiny_countries
    pairs: {{Paris: France, London: England, Tokyo: Japan, Rome: Italy, Berlin: Germany}}
"""
