"""Chat messages to prompt parts: the model's Jinja2 chat template, rendered in a sandbox.

The Hugging Face chat_template convention: the template sees `messages` (role, content),
`add_generation_prompt`, `bos_token`, `eos_token`, `raise_exception` and `strftime_now`, with
`trim_blocks` and `lstrip_blocks` on, in Jinja2's ImmutableSandboxedEnvironment (no attribute
access to Python internals, no mutation of the arguments).

Media. A message's content is handed to the template as one string; each image or audio part
stands in it as a private-use sentinel. After rendering, the text is cut at the sentinels: the
prompt becomes text parts and media parts in their conversation order, which is what a plan
that iterates over `request.parts` consumes (text through one walk, images through another).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from wgc.runtime.http.errors import ApiError

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


class ChatTemplate:
    def __init__(self, source: str | None, bos_token: str = "", eos_token: str = "") -> None:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=[jinja2.ext.loopcontrols])
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = _strftime_now
        self.source = source or DEFAULT_TEMPLATE
        self.template = env.from_string(self.source)  # a bad template fails at start-up, not per request
        self.bos_token = bos_token
        self.eos_token = eos_token

    def render(self, messages: list[dict[str, Any]], media_kinds: list[str]) -> list[PromptPart]:
        """`messages` hold string contents with sentinels; `media_kinds[i]` is the kind of medium i."""
        try:
            text = self.template.render(messages=messages, add_generation_prompt=True,
                                        bos_token=self.bos_token, eos_token=self.eos_token)
        except (jinja2.TemplateError, TypeError, ValueError, RecursionError) as err:
            raise ApiError("template_error", f"the chat template failed: {err}", "messages") from None
        return split_media(text, media_kinds)


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
