"""Chat messages to prompt parts: the model's Jinja2 chat template, rendered in a sandbox.

The Hugging Face chat_template convention, rendered as transformers' `apply_chat_template` does:
the template sees `messages` (role, content), `add_generation_prompt`, `tools` and `documents`
(None), the tokenizer's named special tokens (`bos_token`, `eos_token`, ...), `raise_exception`,
`strftime_now`, `dict` and `namespace` (which refuses underscore names), and a `tojson` filter
that keeps non-ASCII text and does no HTML escaping, with `trim_blocks` and `lstrip_blocks` on, in
Jinja2's ImmutableSandboxedEnvironment (no attribute access to Python internals, no mutation of the
arguments).

Media. A message's content is handed to the template as one string; each image or audio part
stands in it as a private-use sentinel. After rendering, the text is cut at the sentinels: the
prompt becomes text parts and media parts in their conversation order, which is what a plan
that iterates over `request.parts` consumes (text through one walk, images through another).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment
from wgc.runtime.http.serving.errors import ApiError

DEFAULT_TEMPLATE = (  # ChatML
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_OPEN, _CLOSE = "\ue000", "\ue001"
_SENTINEL = re.compile(f"{_OPEN}wgc:media:(\\d+){_CLOSE}")


@dataclass(frozen=True)
class PromptPart:
    kind: str  # "text", or the media kind ("image", "audio")
    text: str = ""
    media: int = -1  # index into the request's media list


def sentinel(index: int) -> str:
    return f"{_OPEN}wgc:media:{index}{_CLOSE}"


def check_text(text: str, param: str) -> str:
    """User text must not forge a sentinel."""
    if _OPEN in text or _CLOSE in text:
        raise ApiError("invalid_request", "text must not contain U+E000 or U+E001 (reserved)", param)
    return text


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    """JSON as chat templates expect it (Jinja2's own filter escapes <, >, & and ' for HTML)."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _dict(*args: Any, **kwargs: Any) -> dict[Any, Any]:
    return dict(*args, **kwargs)


class _Namespace(jinja2.utils.Namespace):
    """`namespace(...)` without underscore names, so a template cannot reach Python internals through one."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # as Jinja's own: `self` may also be a key
        self, rest = args[0], args[1:]
        for name in dict(*rest, **kwargs):
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, *rest, **kwargs)

    def __setitem__(self, name: str, value: Any) -> None:
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"a chat template may not store {name!r} on a namespace")


class ChatTemplate:
    def __init__(self, source: str | None, bos_token: str = "", eos_token: str = "",
                 specials: Mapping[str, str] | None = None) -> None:
        """`specials`: the tokenizer's named special tokens (bos_token, eos_token, pad_token, ...) the
        template sees; `bos_token` and `eos_token` fill those two when it does not name them."""
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=[jinja2.ext.loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = _strftime_now
        env.globals["dict"] = _dict
        env.globals["namespace"] = _Namespace
        self.source = source or DEFAULT_TEMPLATE
        self.template = env.from_string(self.source)  # a bad template fails at start-up, not per request
        self.specials = {"bos_token": bos_token, "eos_token": eos_token, **(specials or {})}
        self.bos_token = self.specials["bos_token"]
        self.eos_token = self.specials["eos_token"]

    def text(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        """The rendered conversation; ApiError template_error (naming `messages`) when the template fails."""
        try:
            return self.template.render(**self.specials, messages=messages, tools=None, documents=None,
                                        add_generation_prompt=add_generation_prompt)
        except (jinja2.TemplateError, TypeError, ValueError, RecursionError) as err:
            raise ApiError("template_error", f"the chat template failed: {err}", "messages") from None

    def render(self, messages: list[dict[str, Any]], media_kinds: list[str]) -> list[PromptPart]:
        """`messages` hold string contents with sentinels; `media_kinds[i]` is the kind of medium i."""
        return split_media(self.text(messages), media_kinds)


def split_media(text: str, media_kinds: list[str]) -> list[PromptPart]:
    parts: list[PromptPart] = []
    seen: list[int] = []
    pos = 0
    for m in _SENTINEL.finditer(text):
        if m.start() > pos:
            parts.append(PromptPart("text", text[pos:m.start()]))
        index = int(m.group(1))
        if index >= len(media_kinds):
            raise ApiError("invalid_request", "message text must not contain U+E000 (reserved)", "messages")
        parts.append(PromptPart(media_kinds[index], media=index))
        seen.append(index)
        pos = m.end()
    if pos < len(text):
        parts.append(PromptPart("text", text[pos:]))
    if sorted(seen) != list(range(len(media_kinds))):
        raise ApiError("template_error", "the chat template dropped or repeated an image or audio part "
                       "(it must print every message's content once)", "messages")
    return parts
