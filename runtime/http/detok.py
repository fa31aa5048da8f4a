"""Text out, piece by piece: UTF-8-safe incremental decoding and stop strings.

`Detokenizer` turns token ids into text as they come. A character whose bytes span several
tokens is held back until its last byte arrives, so no delta ever carries half a character;
bytes that can never form a character become U+FFFD, exactly as a one-shot decode would show
them. `StopMatcher` holds back the shortest tail that could still begin a stop string, so a stop
string split across deltas is never shown.
"""

from __future__ import annotations

from collections.abc import Sequence

from wgc.runtime.http.tokenizer import Tokenizer


def _incomplete_tail(buf: bytes) -> int:
    """How many bytes at the end of `buf` are the valid start of a character still missing bytes."""
    for back in range(1, min(4, len(buf)) + 1):
        b = buf[-back]
        if b & 0xC0 == 0x80:  # a continuation byte: look further back for its lead
            continue
        need = 2 if b & 0xE0 == 0xC0 else 3 if b & 0xF0 == 0xE0 else 4 if b & 0xF8 == 0xF0 else 1
        return back if need > back else 0
    return 0


class Detokenizer:
    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self._pending = b""

    def push(self, ids: Sequence[int]) -> str:
        """The text these tokens complete (possibly ""); never ends inside a character."""
        self._pending += self.tokenizer.decode(ids)
        cut = len(self._pending) - _incomplete_tail(self._pending)
        text = self._pending[:cut].decode("utf-8", errors="replace")
        self._pending = self._pending[cut:]
        return text

    def finish(self) -> str:
        """What is left at the end: an unfinished character shows as U+FFFD."""
        text, self._pending = self._pending.decode("utf-8", errors="replace"), b""
        return text


class StopMatcher:
    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self._held = ""
        self.stopped = False

    def push(self, text: str) -> str:
        """The part of `text` that is safe to show; sets `stopped` when a stop string appeared."""
        if self.stopped:
            return ""
        buf = self._held + text
        hits = [i for i in (buf.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.stopped = True
            self._held = ""
            return buf[:min(hits)]
        keep = max((n for s in self.stops for n in range(1, len(s)) if buf.endswith(s[:n])), default=0)
        self._held = buf[len(buf) - keep:] if keep else ""
        return buf[:len(buf) - keep]

    def finish(self) -> str:
        text, self._held = ("" if self.stopped else self._held), ""
        return text
