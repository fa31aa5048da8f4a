"""The thinker's chat framing: which tokens open and close turns, which rows belong to a user turn
(what the talker reads, §2.2), and the tokenizers.

A request's parts arrive as contents only (text, or an encoder's embeddings); the thinker frames
them as Qwen3-Omni's chat template does: a part written while no turn is open first opens a user
turn (`<|im_start|>user\\n`), unless the text part itself starts with `<|im_start|>` (a client that
templated its own turns, a system prompt among them); `begin_reply` closes the open turn
(`<|im_end|>\\n`) and writes the assistant header (`<|im_start|>assistant\\n`) before sampling.

A row's role is transformers' (`generate`): the token after the nearest `<|im_start|>` at or before
it. The state carried between parts, `Turn`, travels in the label's data as a plain list.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tokenizers import Tokenizer
from wgc.models.layers.tokenizer import byte_tokenizer, read_tokenizer
from wgc.models.qwen3_omni.config import Tokens


@dataclass(frozen=True)
class Turn:
    """The chat state after a label's last token."""

    role: int = -1  # the role id of the last <|im_start|> (-1: none yet, or it was the last token)
    open: bool = False  # an <|im_start|> not yet closed by <|im_end|>
    pending: bool = False  # the last token was <|im_start|>: the next one is the role

    def plain(self) -> list[int]:
        return [self.role, int(self.open), int(self.pending)]

    @staticmethod
    def of(value: list[int] | None) -> Turn:
        return Turn() if not value else Turn(int(value[0]), bool(value[1]), bool(value[2]))


def frame(turn: Turn, ids: list[int], tokens: Tokens) -> list[int]:
    """A part's ids (Qwen ids) with the user turn opened first when none is open."""
    if turn.open or (ids and ids[0] == tokens.im_start):
        return list(ids)
    return [tokens.im_start, tokens.user, tokens.newline, *ids]


def reply_header(turn: Turn, tokens: Tokens) -> list[int]:
    """What `begin_reply` writes: the open turn closed, then the assistant header."""
    close = [tokens.im_end, tokens.newline] if turn.open else []
    return [*close, tokens.im_start, tokens.assistant, tokens.newline]


def roles(turn: Turn, ids: list[int], tokens: Tokens) -> tuple[list[int], Turn]:
    """Each row's role id (-1: none) after `turn`, and the state after the rows."""
    out: list[int] = []
    role, is_open, pending = turn.role, turn.open, turn.pending
    for i, t in enumerate(ids):
        if pending:  # this row is the role token: the im_start before it already named it
            role, pending = t, False
        if t == tokens.im_start:
            role = ids[i + 1] if i + 1 < len(ids) else -1  # an im_start that ends the part: role unknown here
            is_open, pending = True, True
        elif t == tokens.im_end:
            is_open = False
        out.append(role)
    return out, Turn(role, is_open, pending)


def user_rows(turn: Turn, ids: list[int], tokens: Tokens) -> tuple[list[bool], Turn]:
    """Per row: inside a user turn (the rows the talker keeps); and the state after them."""
    row_roles, after = roles(turn, ids, tokens)
    return [r == tokens.user for r in row_roles], after


SPECIAL_NAMES = {"im_start": "<|im_start|>", "im_end": "<|im_end|>", "audio_start": "<|audio_start|>",
                 "audio_end": "<|audio_end|>", "audio": "<|audio_pad|>", "vision_start": "<|vision_start|>",
                 "vision_end": "<|vision_end|>", "image": "<|image_pad|>", "video": "<|video_pad|>"}


@lru_cache(maxsize=4)
def tiny_tokenizer(tokens: Tokens) -> Tokenizer:
    """Byte-level, no merges: byte b is token b; the markers a templated prompt may hold keep their
    Qwen ids (role words are bytes here: the thinker writes role ids itself)."""
    return byte_tokenizer({getattr(tokens, name): text for name, text in SPECIAL_NAMES.items()})


def load_tokenizer(directory: Path) -> Tokenizer:
    return read_tokenizer(directory, "the Qwen3-Omni thinker needs its Qwen tokenizer")


def encode(tokenizer: Tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False).ids)
