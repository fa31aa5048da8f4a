"""One text choice of a chat completion: token ids in, text deltas out, usage and finish_reason.

The tokens a choice receives are counted exactly (usage.completion_tokens, an end token
included); the text shown stops at the first end token or stop string. finish_reason is "stop"
for an end token, a stop string, or a walk that ended by itself short of max_tokens, and
"length" when max_tokens tokens came or a walk's loop stopped at its `max` bound.
"""

from __future__ import annotations

from typing import Any

from wgc.runtime.http.text.detok import Detokenizer, StopMatcher
from wgc.runtime.http.text.tokenizer import Tokenizer


def token_ids(payload: Any) -> list[int]:
    """A text output as token ids: an int, a list of ints, or an integer tensor of any shape."""
    if hasattr(payload, "tolist"):
        payload = payload.tolist()
    if isinstance(payload, list | tuple):
        return [i for p in payload for i in token_ids(p)]
    if isinstance(payload, bool | int | float):
        return [int(payload)]
    return []


class TextChoice:
    def __init__(self, index: int, tokenizer: Tokenizer, end_ids: frozenset[int], stops: list[str],
                 max_tokens: int | None) -> None:
        self.index = index
        self.detok = Detokenizer(tokenizer)
        self.matcher = StopMatcher(stops)
        self.end_ids = end_ids
        self.max_tokens = max_tokens
        self.tokens = 0
        self.text: list[str] = []
        self.finish: str | None = None

    def feed(self, payload: Any) -> str:
        """The text these tokens add, once it is safe to show."""
        out = []
        for token in token_ids(payload):
            if self.finish is not None:
                break
            self.tokens += 1
            if token in self.end_ids:
                out.append(self.matcher.push(self.detok.finish()) + self.matcher.finish())
                self.finish = "stop"
                break
            out.append(self.matcher.push(self.detok.push([token])))
            if self.matcher.stopped:
                self.finish = "stop"
        delta = "".join(out)
        self.text.append(delta)
        return delta

    def end(self, cut: bool = False) -> str:
        """The request is done: what was held back, and the finish reason (`cut`: a loop of its walks
        stopped at its `max` bound, so the answer is cut short even if the text is not)."""
        if self.finish is not None:
            return ""
        tail = self.matcher.push(self.detok.finish())
        tail += self.matcher.finish()
        hit_limit = cut or (self.max_tokens is not None and self.tokens >= self.max_tokens)
        self.finish = "stop" if self.matcher.stopped or not hit_limit else "length"
        self.text.append(tail)
        return tail

    @property
    def content(self) -> str:
        return "".join(self.text)
