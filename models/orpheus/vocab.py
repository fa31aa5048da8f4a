"""Tokens: the prompt format, the tokenizer (`tokenizers`, from a local tokenizer.json or the tiny one
built here) and the map between the model's token ids and Orpheus's.

Prompt (Orpheus's): `"{voice}: {text}"` through the tokenizer (which prepends <|begin_of_text|>),
wrapped as [128259] + ids + [128009, 128260, 128261, 128257] (start of human; end of text, end of
human, start of AI, start of speech). Generation then writes audio tokens until 128258.

The compact vocabulary (the tiny preset; `OrpheusConfig.vocab == "compact"`), 4,365 ids:

    0 .. 255      bytes, as the tiny byte-level tokenizer numbers them (= their Orpheus ids)
    256 .. 268    the special tokens of SPECIALS, in order (Orpheus ids 128000 .. 128265)
    269 .. 4364   code values 0 .. 4095, one id per value whatever the frame position

A compact code id carries no frame position: the component writes the position when it maps a
sampled id out, from how many tokens the request has generated (token n sits at position n mod 7),
and maps any Orpheus audio token in to its value. So a randomly initialised model, which cannot
learn the 7-position grammar, still writes valid frames whenever it writes codes; with Orpheus ids
(the real checkpoint) the map is the identity and the model writes positions itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from tokenizers import Tokenizer
from wgc.models.layers.tokenizer import BYTES, byte_tokenizer, read_tokenizer
from wgc.models.orpheus.config import (
    AUDIO_BASE,
    AUDIO_END,
    BEGIN_OF_TEXT,
    CODEBOOK,
    FRAME,
    PROMPT_PREFIX,
    PROMPT_SUFFIX,
    TEXT_VOCAB,
    Vocab,
)

SPECIALS: tuple[int, ...] = (128000, 128001, 128009, *range(TEXT_VOCAB, AUDIO_BASE))  # 13 ids
SPECIAL_NAMES = {128000: "<|begin_of_text|>", 128001: "<|end_of_text|>", 128009: "<|eot_id|>",
                 **{TEXT_VOCAB + i: f"<custom_token_{i}>" for i in range(AUDIO_BASE - TEXT_VOCAB)}}
CODE_START = BYTES + len(SPECIALS)  # 269: compact id of code value 0
COMPACT_VOCAB = CODE_START + CODEBOOK  # 4365
_SPECIAL_INDEX = {t: BYTES + i for i, t in enumerate(SPECIALS)}


class TokenMap:
    """Orpheus ids ↔ model ids: the identity for "orpheus", the compact layout above for "compact"."""

    def __init__(self, kind: Vocab) -> None:
        if kind not in ("orpheus", "compact"):
            raise ValueError(f"unknown vocabulary kind {kind!r}")
        self.kind = kind
        self.identity = kind == "orpheus"

    def to_model(self, token: int) -> int:
        """An Orpheus id (prompt token, or a generated token fed back) as a model id."""
        token = int(token)
        if self.identity:
            return token
        if 0 <= token < BYTES:
            return token
        special = _SPECIAL_INDEX.get(token)
        if special is not None:
            return special
        if AUDIO_BASE <= token < AUDIO_END:
            return CODE_START + (token - AUDIO_BASE) % CODEBOOK
        raise ValueError(f"token {token} has no id in the compact vocabulary (bytes, {len(SPECIALS)} specials, codes)")

    def from_model(self, token: int, step: int) -> int:
        """A sampled model id as an Orpheus id; `step` = tokens the request generated before it."""
        token = int(token)
        if self.identity or token < BYTES:
            return token
        if token < CODE_START:
            return SPECIALS[token - BYTES]
        return AUDIO_BASE + CODEBOOK * (step % FRAME) + (token - CODE_START)

    def code_ids(self) -> range:
        """Model ids of audio tokens (every position)."""
        return range(CODE_START, COMPACT_VOCAB) if not self.identity else range(AUDIO_BASE, AUDIO_END)


def format_prompt(ids: Sequence[int]) -> list[int]:
    """The tokenized `"{voice}: {text}"` wrapped in Orpheus's control tokens (Orpheus ids)."""
    return [*PROMPT_PREFIX, *ids, *PROMPT_SUFFIX]


def prompt_text(voice: str, text: str) -> str:
    return f"{voice}: {text}" if voice else text


def encode_prompt(tokenizer: Tokenizer, voice: str, text: str) -> list[int]:
    """Orpheus's prompt for `text` spoken by `voice`, as Orpheus token ids."""
    return format_prompt(tokenizer.encode(prompt_text(voice, text)).ids)


@lru_cache(maxsize=1)
def tiny_tokenizer() -> Tokenizer:
    """A byte-level tokenizer with no merges: byte b is token b; the specials keep their Orpheus ids;
    <|begin_of_text|> is prepended as Llama 3's tokenizer does. Built in code: nothing downloaded."""
    return byte_tokenizer({t: SPECIAL_NAMES[t] for t in SPECIALS}, bos=BEGIN_OF_TEXT)


def load_tokenizer(directory: Path) -> Tokenizer:
    """tokenizer.json of a local Hugging Face directory; a clear error when it is absent or unreadable."""
    return read_tokenizer(directory, "Orpheus needs its Llama 3 tokenizer")
