"""The random-weight Hugging Face directories wgc and vLLM both load, written once per run.

Two plain Llama shapes (`0.7m`: Orpheus tiny's decoder shape over a 512-id vocabulary; `34m`: hidden
512, 8 layers), each with a byte-level tokenizer.json covering every id (bytes, Llama 3's specials,
then one plain added token per remaining id, so that both detokenizers can show any id) and a
Llama-3-style chat template; no eos_token_id, so greedy replies run to max_tokens on both sides. And
Orpheus's tiny language model (the preset's own weights, compact vocabulary) plus the tiny SNAC's
weights, for the Orpheus pipelines.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import AddedToken
from wgc.models.layers import LlamaConfig, LlamaModel
from wgc.models.layers.llama_weights import save_llama
from wgc.models.layers.paged_llama import random_llama
from wgc.models.llama.config import TINY_SPECIALS, TINY_TEMPLATE
from wgc.models.llama.tokenizer import tiny_tokenizer
from wgc.models.orpheus.codec import SNAC_TINY, tiny_snac
from wgc.models.orpheus.config import OrpheusConfig
from wgc.models.orpheus.llm import tiny_init
from wgc.models.orpheus.vocab import TokenMap, encode_prompt
from wgc.models.orpheus.vocab import tiny_tokenizer as orpheus_tokenizer

SHAPES = {
    "0.7m": replace(LlamaConfig.preset("tiny"), max_positions=2048),
    "34m": LlamaConfig(vocab=8192, hidden=512, layers=8, heads=8, kv_heads=4, head_dim=64, intermediate=1536,
                       rope_scaling=None, rope_theta=10000.0, max_positions=2048),
}


def parameters(config: LlamaConfig) -> int:
    c = config
    layer = c.hidden * (c.heads + 2 * c.kv_heads) * c.head_dim + c.heads * c.head_dim * c.hidden
    layer += 3 * c.hidden * c.intermediate + 2 * c.hidden
    return c.layers * layer + 2 * c.vocab * c.hidden + c.hidden


def write_llama(directory: Path, name: str, seed: int = 0) -> Path:
    """A random-weight Llama of shape `name` with its tokenizer files; the directory."""
    config = SHAPES[name]
    model = random_llama(config, torch.device("cpu"), torch.float32, seed)
    hf = {**config.to_hf(), "bos_token_id": 256, "eos_token_id": None}
    save_llama(model, hf, directory)
    tok = tiny_tokenizer().tokenizer
    tok.add_tokens([AddedToken(f"<t{i}>", special=False) for i in range(tok.get_vocab_size(), config.vocab)])
    tok.save(str(directory / "tokenizer.json"))
    settings = {"bos_token": TINY_SPECIALS[256], "eos_token": TINY_SPECIALS[260], "chat_template": TINY_TEMPLATE,
                "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": config.max_positions}
    (directory / "tokenizer_config.json").write_text(json.dumps(settings), encoding="utf-8")
    return directory


def write_orpheus(directory: Path) -> Path:
    """Orpheus's tiny language model exactly as the preset builds it, as a Hugging Face directory."""
    config = OrpheusConfig.preset("tiny")
    model = LlamaModel(config.llama)
    tiny_init(model, config, 0)
    save_llama(model, config.hf_config(), directory)
    return directory


def write_snac(directory: Path) -> Path:
    """The tiny SNAC (the preset's seed-0 weights, weight norm kept) for the peer pipeline."""
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.contiguous() for k, v in tiny_snac().state_dict().items()}
    save_file(state, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(SNAC_TINY), encoding="utf-8")
    return directory


def orpheus_prompt_ids(text: str, voice: str = "tara") -> list[int]:
    """The model ids of Orpheus's prompt for the tiny preset (compact vocabulary)."""
    token_map = TokenMap("compact")
    return [token_map.to_model(t) for t in encode_prompt(orpheus_tokenizer(), voice, text)]

