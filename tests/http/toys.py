"""The toy model's components (tests/http/toy.walk): exact, tiny, and honest about their resources.

`ByteLm` keeps each request's context and reply in a real `PageAllocator` (one page per 4 tokens),
so the leak tests read true KV page counts from `runtime.health()`. Its module also provides the
tokenizer hook the HTTP frontend looks for: bytes as tokens, 256 as the end token, and a chat
template in the Hugging Face convention.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from wgc.runtime.components.base import Call, Component
from wgc.runtime.engines.kv_pages import Exhausted, PageAllocator

from wgc.plan.model import ComponentSpec

EOS = 256
USER = "<|user|>"
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>"
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for p in m['content'] %}{% if p['type'] == 'text' %}{{ p['text'] }}{% endif %}{% endfor %}"
    "{% endif %}{{ '\\n' }}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


class ToyTokenizer:
    """Bytes as tokens (0..255) and one special token, the end (256), which decodes to nothing."""

    chat_template = CHAT_TEMPLATE
    bos_token = ""
    eos_token = "<|end|>"
    stop_ids = frozenset({EOS})

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> bytes:
        return bytes(i for i in ids if 0 <= i < 256)


def tokenizer(spec: ComponentSpec) -> ToyTokenizer:
    return ToyTokenizer()


@dataclass
class _Request:
    context: str = ""
    reply: bytes = b""
    pos: int = 0
    images: list[tuple[int, ...]] = field(default_factory=list)


class ByteLm(Component):
    """Answers "Echo: <the last user line>" one UTF-8 byte per token, then EOS."""

    def __init__(self, spec: ComponentSpec, rank: int, device: str) -> None:
        super().__init__(spec, rank, device)
        self.pages = PageAllocator(num_pages=4096, page_size=4)
        self.requests: dict[int, _Request] = {}

    def _req(self, c: Call) -> _Request:
        return self.requests.setdefault(c.request, _Request())

    def _grow(self, c: Call, n: int) -> None:
        if isinstance(self.pages.append(c.request, "main", n), Exhausted):
            raise RuntimeError(f"request {c.request}: out of KV pages")

    def see_text(self, calls: list[Call]) -> list[Any]:
        for c in calls:
            self._req(c).context += str(c.args[0])
            self._grow(c, len(str(c.args[0]).encode()))
        return [None] * len(calls)

    def see_image(self, calls: list[Call]) -> list[Any]:
        for c in calls:
            shape = tuple(int(n) for n in getattr(c.args[0], "shape", ()))
            self._req(c).images.append(shape)
            self._req(c).context += f"[image {'x'.join(map(str, shape))}]"
            self._grow(c, 16)
        return [None] * len(calls)

    def first(self, calls: list[Call]) -> list[Any]:
        _sleep(calls, 3)
        out = []
        for c in calls:
            r = self._req(c)
            line = r.context.rsplit(USER, 1)[-1].split("\n", 1)[0]
            r.reply = ("Echo: " + line).encode("utf-8")
            out.append(self._next(c, r))
        return out

    def decode(self, calls: list[Call]) -> list[Any]:
        _sleep(calls, 1)
        out = []
        for c in calls:
            r = self._req(c)
            r.pos += 1
            out.append(self._next(c, r))
        return out

    def _next(self, c: Call, r: _Request) -> int:
        self._grow(c, 1)
        return r.reply[r.pos] if r.pos < len(r.reply) else EOS

    def release(self, request: int) -> None:
        self.requests.pop(request, None)
        self.pages.free_request(request)

    def counters(self) -> dict[str, int]:
        return {"requests": len(self.requests), **self.pages.counters()}


def _sleep(calls: list[Call], delay_arg: int) -> None:
    """Once per batched call: requests batched together share the delay, like a real forward."""
    delay = max(float(c.args[delay_arg]) for c in calls)
    if delay > 0:
        time.sleep(delay / 1000)


class Vocoder(Component):
    """20 samples of a tone per code; `bass` is an octave down."""

    def decode(self, calls: list[Call]) -> list[Any]:
        out = []
        for c in calls:
            codes = [int(x) for x in c.args[0]]
            base = 110.0 if c.args[1] == "bass" else 220.0
            t = torch.arange(20, dtype=torch.float32) / 8000
            tones = [0.5 * torch.sin(2 * math.pi * (base + code) * t) for code in codes]
            out.append(torch.cat(tones) if tones else torch.zeros(0))  # [20 * len(codes)] f32
        return out


class Painter(Component):
    def paint(self, calls: list[Call]) -> list[Any]:
        out = []
        for c in calls:
            w, h, seed = int(c.args[0]), int(c.args[1]), int(c.args[2])
            x = torch.arange(w).mul(255).div(max(w - 1, 1)).to(torch.uint8)  # [W]
            y = torch.arange(h).mul(255).div(max(h - 1, 1)).to(torch.uint8)  # [H]
            img = torch.empty(h, w, 3, dtype=torch.uint8)  # [H, W, 3]
            img[..., 0] = x[None, :]
            img[..., 1] = y[:, None]
            img[..., 2] = seed % 256
            out.append(img)
        return out

    def act(self, calls: list[Call]) -> list[Any]:
        return [torch.arange(8, dtype=torch.float32).reshape(4, 2) + int(c.args[0]) for c in calls]  # [4, 2]

    def latent(self, calls: list[Call]) -> list[Any]:
        return [torch.tensor([1, 2, 3], dtype=torch.int64) * (int(c.args[0]) + 1) for c in calls]  # [3]
