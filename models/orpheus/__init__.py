"""Orpheus TTS (models/orpheus.walk): the Llama language model writing SNAC audio tokens, and the SNAC
24 kHz decoder turning windows of 28 tokens into 85 ms of audio. See docs/models/orpheus.md."""

from wgc.models.layers.llama_weights import WeightsError, load_llama, save_llama
from wgc.models.orpheus.codec import SnacDecoder, split_levels, token_codes
from wgc.models.orpheus.config import OrpheusConfig
from wgc.models.orpheus.llm import KVExhausted, LanguageModel
from wgc.models.orpheus.vocab import TokenMap, encode_prompt, tiny_tokenizer

from wgc.plan.model import ComponentSpec


def sample_rate(spec: ComponentSpec) -> int:
    """The HTTP frontend's hook: the rate of the audio `snac` emits (24 kHz with real weights, the
    tiny SNAC's nominal 6 kHz without). The decoder reads the same knob, so the two always agree."""
    from wgc.models.orpheus.codec import SNAC_24KHZ, SNAC_TINY
    from wgc.models.orpheus.knobs import snac_dir

    return int((SNAC_24KHZ if snac_dir() is not None else SNAC_TINY)["sampling_rate"])

__all__ = [
    "KVExhausted",
    "LanguageModel",
    "OrpheusConfig",
    "SnacDecoder",
    "TokenMap",
    "WeightsError",
    "encode_prompt",
    "sample_rate",
    "load_llama",
    "save_llama",
    "split_levels",
    "tiny_tokenizer",
    "token_codes",
]
