"""A tiny Llama chat checkpoint written as a Hugging Face directory, for the llama family's tests:
transformers' own LlamaForCausalLM on random weights (its initialisation, its save_pretrained, in
shards with an index), the tiny byte-level tokenizer as tokenizer.json, and tokenizer_config.json
with a chat template and the named special tokens."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from wgc.models.llama.config import TINY_BOS, TINY_SPECIALS, TINY_STOPS, TINY_TEMPLATE
from wgc.models.llama.tokenizer import tiny_tokenizer

HIDDEN = 64


def hf_config(**overrides: Any) -> Any:
    """A small Llama with GQA and Llama-3 rope scaling, untied head, the tiny tokenizer's ids."""
    import transformers

    values: dict[str, Any] = dict(
        vocab_size=512, hidden_size=HIDDEN, intermediate_size=160, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=1024, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 128},
        tie_word_embeddings=False, bos_token_id=TINY_BOS, eos_token_id=list(TINY_STOPS))
    values.update(overrides)
    return transformers.LlamaConfig(**values)


def write_checkpoint(directory: Path, seed: int = 0, template: str = TINY_TEMPLATE, **overrides: Any) -> Any:
    """The directory with weights, config and tokenizer files; returns the transformers model."""
    import transformers

    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(hf_config(**overrides)).eval()
    model.save_pretrained(str(directory), max_shard_size="200KB")  # several shards and an index
    tiny_tokenizer().tokenizer.save(str(directory / "tokenizer.json"))
    settings = {"bos_token": TINY_SPECIALS[TINY_BOS], "eos_token": TINY_SPECIALS[TINY_STOPS[1]],
                "pad_token": TINY_SPECIALS[TINY_STOPS[0]], "chat_template": template,
                "tokenizer_class": "PreTrainedTokenizerFast"}
    (directory / "tokenizer_config.json").write_text(json.dumps(settings), encoding="utf-8")
    return model
