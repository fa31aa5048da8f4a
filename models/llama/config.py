"""The llama family's checkpoint: its decoder shape (shared `LlamaConfig`), the token ids that end a
reply, and the tiny preset that runs on random weights with the byte-level tiny tokenizer.

Stop ids. A Llama-3 instruct checkpoint ends a turn with any of several tokens (<|eot_id|>,
<|eom_id|>, <|end_of_text|>): config.json's and generation_config.json's `eos_token_id` (an int or
a list) together. The walk has one end token (`const eos`), so the component reports every stop id
as that one value (model.py); the frontend then ends the text there and counts it in usage.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from wgc.models.layers import LlamaConfig
from wgc.models.weights_io import WeightsError, read_json

# The tiny preset's special tokens (Llama 3's names, compact ids after the 256 bytes).
TINY_SPECIALS = {256: "<|begin_of_text|>", 257: "<|end_of_text|>", 258: "<|start_header_id|>",
                 259: "<|end_header_id|>", 260: "<|eot_id|>"}
TINY_BOS, TINY_STOPS = 256, (257, 260)
# Llama 3's own template, trimmed of tools and dates: a header per turn, <|eot_id|> after each.
TINY_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>"
    "{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


@dataclass(frozen=True)
class LlamaChatConfig:
    """A chat checkpoint: the decoder, the ids that end a reply, and its BOS (None when it has none)."""

    name: str
    llama: LlamaConfig
    stop_ids: tuple[int, ...]
    bos_id: int | None = None

    @staticmethod
    def preset(name: str) -> LlamaChatConfig:
        if name == "tiny":  # Orpheus tiny's decoder shape (0.7M parameters) over the 512-id byte vocabulary
            return LlamaChatConfig("tiny", replace(LlamaConfig.preset("tiny"), max_positions=2048), TINY_STOPS,
                                   TINY_BOS)
        raise ValueError(f"unknown llama preset {name!r} (known: tiny)")

    @staticmethod
    def from_directory(directory: Path) -> LlamaChatConfig:
        """config.json (and generation_config.json when present) of a local Hugging Face directory."""
        directory = Path(directory)
        raw = read_json(directory / "config.json", f"{directory}: no config.json (a Hugging Face model directory "
                        "holds config.json, model.safetensors or shards with an index, and tokenizer.json)")
        try:
            llama = LlamaConfig.from_hf(raw)
        except ValueError as err:  # its messages begin "config.json ...": name the file in full
            raise WeightsError(str(directory / "config.json") + str(err).removeprefix("config.json")) from None
        stops = _ids(raw.get("eos_token_id"))
        generation = directory / "generation_config.json"
        if generation.is_file():
            stops += [i for i in _ids(read_json(generation, "").get("eos_token_id")) if i not in stops]
        bos = raw.get("bos_token_id")
        return LlamaChatConfig(str(directory), llama, tuple(stops), int(bos) if isinstance(bos, int) else None)


def _ids(value: Any) -> list[int]:
    """An `eos_token_id` value (int, list of ints or absent) as a list."""
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value if isinstance(v, int) and not isinstance(v, bool)] if isinstance(value, list) else []
