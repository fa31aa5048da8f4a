"""The llama family's tokenizer as the HTTP frontend takes it (runtime/http/text/tokenizer.py): the
checkpoint's tokenizer.json with the chat template and named special tokens of its
tokenizer_config.json (or chat_template.jinja, which transformers writes beside it and prefers),
else the tiny byte-level tokenizer with a Llama-3-style template.

`encode` is what a chat prompt takes: the rendered template already holds <|begin_of_text|>, so no
special token is added (as transformers' `apply_chat_template(tokenize=True)` does);
`encode_prompt` is a raw /v1/completions prompt, with the specials the tokenizer's post-processor
adds (BOS), as vLLM's completions do.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer
from wgc.models.layers.tokenizer import TokenBytes, byte_tokenizer, read_tokenizer
from wgc.models.llama.config import TINY_BOS, TINY_SPECIALS, TINY_STOPS, TINY_TEMPLATE, LlamaChatConfig
from wgc.models.weights_io import WeightsError, read_json

SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class ChatTokenizer:
    """runtime/http/text/tokenizer.Tokenizer over a `tokenizers.Tokenizer`, with the chat template's data."""

    def __init__(self, tokenizer: Tokenizer, chat_template: str | None, specials: dict[str, str],
                 stop_ids: Sequence[int]) -> None:
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.template_tokens = specials  # the named special tokens the template sees (bos_token, eos_token, ...)
        self.bos_token = specials.get("bos_token", "")
        self.eos_token = specials.get("eos_token", "")
        self.stop_ids = frozenset(stop_ids)
        hidden = frozenset(i for i, t in tokenizer.get_added_tokens_decoder().items() if t.special)
        self._bytes = TokenBytes(tokenizer, hidden)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_prompt(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=True).ids

    def decode(self, ids: Sequence[int]) -> bytes:
        return self._bytes(ids)


def tiny_tokenizer() -> ChatTokenizer:
    specials = {"bos_token": TINY_SPECIALS[TINY_BOS], "eos_token": TINY_SPECIALS[TINY_STOPS[1]]}
    return ChatTokenizer(byte_tokenizer(TINY_SPECIALS, bos=TINY_BOS), TINY_TEMPLATE, specials, TINY_STOPS)


def load_chat_tokenizer(directory: Path, config: LlamaChatConfig) -> ChatTokenizer:
    """The directory's tokenizer.json, template and special tokens; the stop ids are the config's."""
    directory = Path(directory)
    try:
        tokenizer = read_tokenizer(directory, "the llama family reads the checkpoint's tokenizer")
    except (FileNotFoundError, ValueError) as err:
        raise WeightsError(str(err)) from None
    settings_file = directory / "tokenizer_config.json"
    settings = read_json(settings_file, "") if settings_file.is_file() else {}
    specials = {name: text for name in SPECIAL_NAMES if (text := _token_text(settings.get(name))) is not None}
    return ChatTokenizer(tokenizer, _template(directory, settings), specials, config.stop_ids)


def _token_text(value: Any) -> str | None:
    """A special token of tokenizer_config.json: a string, or an AddedToken object {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _template(directory: Path, settings: dict[str, Any]) -> str | None:
    """chat_template.jinja, else tokenizer_config.json's `chat_template` (a string, or a list of named
    templates of which the `default` one is used); None when the checkpoint has none."""
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    found = settings.get("chat_template")
    if isinstance(found, list):
        named = {t.get("name"): t.get("template") for t in found if isinstance(t, dict)}
        found = named.get("default")
    return found if isinstance(found, str) else None
