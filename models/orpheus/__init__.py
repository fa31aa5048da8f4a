"""Orpheus TTS (models/orpheus.walk): the Llama language model writing SNAC audio tokens, and the SNAC
24 kHz decoder turning windows of 28 tokens into 85 ms of audio. See docs/models/orpheus.md."""

from wgc.models.orpheus.codec import SnacDecoder, split_levels, token_codes
from wgc.models.orpheus.config import OrpheusConfig
from wgc.models.orpheus.llm import KVExhausted, LanguageModel
from wgc.models.orpheus.vocab import TokenMap, encode_prompt, tiny_tokenizer
from wgc.models.orpheus.weights import WeightsError, load_llama, save_llama

__all__ = [
    "KVExhausted",
    "LanguageModel",
    "OrpheusConfig",
    "SnacDecoder",
    "TokenMap",
    "WeightsError",
    "encode_prompt",
    "load_llama",
    "save_llama",
    "split_levels",
    "tiny_tokenizer",
    "token_codes",
]
