"""Tokenizers as the frontend needs them: text to ids (usage), ids to bytes (incremental text out).

A model's component module may define `tokenizer(spec: ComponentSpec) -> Tokenizer` (serving/hooks.py); the
frontend looks for it on the module of the component that emits text. A real model returns its Hugging
Face tokenizer behind this protocol (byte-level BPE decodes each token to its bytes). Without one
(fake components, or a module that has none) the byte-level fallback applies: token id = byte.

Optional attributes, read with defaults: `chat_template` (a Jinja2 string in the Hugging Face
convention; None uses the default template), `bos_token` / `eos_token` (strings the template may
print), `template_tokens` (every named special token the template sees, as transformers passes
them: bos_token, eos_token, pad_token, ...), `stop_ids` (ids that end the text and are never shown),
`encode_prompt(text)` (a raw /v1/completions prompt to ids, with the specials the tokenizer adds,
such as BOS; `encode` is used without it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from wgc.runtime.http.serving.hooks import component_hook

from wgc.plan.model import ComponentSpec


@runtime_checkable
class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> bytes: ...


class ByteTokenizer:
    """The fallback: a token is one byte; ids outside 0..255 (specials) decode to nothing."""

    chat_template: str | None = None
    bos_token = ""
    eos_token = ""
    stop_ids: frozenset[int] = frozenset()

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> bytes:
        return bytes(i for i in ids if 0 <= i < 256)


def load_tokenizer(component: ComponentSpec | None, fake: bool) -> Tokenizer:
    """The component module's tokenizer, or the byte fallback (always with fake components)."""
    hook = component_hook(component, "tokenizer", fake)
    if hook is None or component is None:
        return ByteTokenizer()
    tok = hook(component)
    if not isinstance(tok, Tokenizer):
        raise TypeError(f"{component.cls}'s module: tokenizer() returned a {type(tok).__name__}, not a Tokenizer "
                        "(encode(text) -> ids, decode(ids) -> bytes)")
    return tok


def stop_ids(tok: Tokenizer) -> frozenset[int]:
    return frozenset(getattr(tok, "stop_ids", frozenset()) or ())


def chat_template(tok: Tokenizer) -> str | None:
    return getattr(tok, "chat_template", None)
