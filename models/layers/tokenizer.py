"""Tokenizers shared by the families: the byte-level tiny tokenizer their `tiny` presets run (built in
code with `tokenizers`, nothing downloaded), reading a checkpoint's tokenizer.json with clear errors,
and token ids back to the bytes they stand for (text streamed out a token at a time).

The tiny tokenizer has no merges: byte b is token b, in GPT-2's byte alphabet (the one Llama 3's and
Qwen2's byte-level BPE use), and each special keeps the id the real tokenizer gives it, so the ids a
walk's consts name (end of speech, <|im_end|>) mean the same with either tokenizer.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

BYTES = 256


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte → printable character table (the byte-level alphabet)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    extra = 0
    for b in range(BYTES):
        if b not in printable:
            printable.append(b)
            chars.append(BYTES + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


def byte_tokenizer(specials: dict[int, str], bos: int | None = None) -> Tokenizer:
    """Byte-level, no merges; `specials` (id → text) keep their ids; `bos` prepended when given."""
    alphabet = bytes_to_unicode()
    vocab = {alphabet[b]: b for b in range(BYTES)}
    vocab.update({name: token for token, name in specials.items()})
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(name, special=True) for name in specials.values()])
    if bos is not None:
        name = specials[bos]
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{name} $A", pair=f"{name} $A {name} $B", special_tokens=[(name, bos)])
    return tokenizer


def read_tokenizer(directory: Path, needs: str) -> Tokenizer:
    """tokenizer.json of a local Hugging Face directory; `needs` says which (for the error when absent)."""
    path = Path(directory) / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no tokenizer.json ({needs} beside the weights)")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:  # noqa: BLE001 - the library raises plain Exception for a bad file
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ValueError(f"{path}: not a readable tokenizer.json ({first})") from None


class TokenBytes:
    """Token ids → the bytes they stand for, for text streamed out a token at a time (the frontend's
    UTF-8-safe detokenizer joins them): byte-level BPE (GPT-2's alphabet: Llama 3, Qwen) or
    SentencePiece pieces (U+2581 for a space, <0xNN> byte fallback: Llama 2, TinyLlama). Ids in
    `skip` (the specials) and unknown ids stand for nothing."""

    def __init__(self, tokenizer: Tokenizer, skip: frozenset[int]) -> None:
        self.tokenizer = tokenizer
        self.skip = skip
        self.byte_level = '"ByteLevel"' in json.dumps(json.loads(tokenizer.to_str()).get("decoder"))
        self._alphabet = {ch: b for b, ch in bytes_to_unicode().items()}
        self._cache: dict[int, bytes] = {}

    def __call__(self, ids: Sequence[int]) -> bytes:
        return b"".join(self.one(int(i)) for i in ids)

    def one(self, token: int) -> bytes:
        out = self._cache.get(token)
        if out is None:
            out = self._cache[token] = self._piece(token)
        return out

    def _piece(self, token: int) -> bytes:
        piece = None if token in self.skip else self.tokenizer.id_to_token(token)
        if piece is None:
            return b""
        if self.byte_level:
            return bytes(self._alphabet[ch] for ch in piece if ch in self._alphabet)
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            return bytes([int(piece[3:5], 16)])
        return piece.replace("\u2581", " ").encode("utf-8")
