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

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
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

BYTES = 256
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


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte → printable character table (the byte-level alphabet Llama 3's tokenizer uses)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


@lru_cache(maxsize=1)
def tiny_tokenizer() -> Tokenizer:
    """A byte-level tokenizer with no merges: byte b is token b; the specials keep their Orpheus ids;
    <|begin_of_text|> is prepended as Llama 3's tokenizer does. Built in code: nothing downloaded."""
    alphabet = _bytes_to_unicode()
    vocab = {alphabet[b]: b for b in range(BYTES)}
    vocab.update({SPECIAL_NAMES[t]: t for t in SPECIALS})
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(SPECIAL_NAMES[t], special=True) for t in SPECIALS])
    bos = SPECIAL_NAMES[BEGIN_OF_TEXT]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, BEGIN_OF_TEXT)])
    return tokenizer


def load_tokenizer(directory: Path) -> Tokenizer:
    """tokenizer.json of a local Hugging Face directory; a clear error when it is absent or unreadable."""
    path = Path(directory) / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no tokenizer.json (Orpheus needs its Llama 3 tokenizer beside the weights)")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:  # noqa: BLE001 - the library raises plain Exception for a bad file
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ValueError(f"{path}: not a readable tokenizer.json ({first})") from None
