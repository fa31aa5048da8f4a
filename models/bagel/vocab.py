"""BAGEL's tokens: the prompt wrap, the tiny tokenizer (built with `tokenizers`, nothing downloaded),
a local tokenizer.json, and the map between model ids and Qwen ids.

A text part is `<|im_start|> text <|im_end|>` (BAGEL's `prepare_prompts`; the tokenizer adds no
specials of its own). The wrap is applied once: a prompt whose ids already start and end with the
two markers (a client that applied the template itself) is not wrapped again (vllm-omni PR #2381
doubled them).

The compact vocabulary (the tiny preset), 260 ids: 0..255 bytes (byte b is id b, as in the tiny
tokenizer), 256..259 the four specials of config.SPECIALS in order. Every compact id means a token,
so a sampled id always maps to a Qwen id; with the real vocabulary the map is the identity.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from tokenizers import Tokenizer
from wgc.models.bagel.config import IM_END, IM_START, SPECIAL_NAMES, SPECIALS, Vocab
from wgc.models.layers.tokenizer import BYTES, byte_tokenizer, read_tokenizer

COMPACT_VOCAB = BYTES + len(SPECIALS)  # 260
_SPECIAL_INDEX = {t: BYTES + i for i, t in enumerate(SPECIALS)}


class TokenMap:
    """Qwen ids <-> model ids: the identity for "qwen", the compact layout above for "compact"."""

    def __init__(self, kind: Vocab) -> None:
        if kind not in ("qwen", "compact"):
            raise ValueError(f"unknown vocabulary kind {kind!r}")
        self.identity = kind == "qwen"

    def to_model(self, token: int) -> int:
        token = int(token)
        if self.identity or 0 <= token < BYTES:
            return token
        special = _SPECIAL_INDEX.get(token)
        if special is None:
            raise ValueError(f"token {token} has no id in the compact vocabulary (bytes and {len(SPECIALS)} specials)")
        return special

    def from_model(self, token: int) -> int:
        token = int(token)
        return token if self.identity or token < BYTES else SPECIALS[token - BYTES]


def wrap_prompt(ids: list[int]) -> list[int]:
    """Qwen ids of one text part, wrapped in <|im_start|> ... <|im_end|> exactly once."""
    if len(ids) >= 2 and ids[0] == IM_START and ids[-1] == IM_END:
        return list(ids)
    return [IM_START, *ids, IM_END]


def encode_prompt(tokenizer: Tokenizer, text: str) -> list[int]:
    """A text part as Qwen ids, wrapped."""
    return wrap_prompt(tokenizer.encode(text, add_special_tokens=False).ids)


@lru_cache(maxsize=1)
def tiny_tokenizer() -> Tokenizer:
    """Byte-level, no merges: byte b is token b; the four specials keep their Qwen ids."""
    return byte_tokenizer({t: SPECIAL_NAMES[t] for t in SPECIALS})


def load_tokenizer(directory: Path) -> Tokenizer:
    """tokenizer.json of a local Hugging Face directory (Qwen2.5's, shipped with the checkpoint)."""
    return read_tokenizer(directory, "BAGEL needs its Qwen2.5 tokenizer")
