"""Text out, piece by piece: UTF-8-safe incremental decoding and stop strings.

`Detokenizer` turns token ids into text as they come. A character whose bytes span several
tokens is held back until its last byte arrives, so no delta ever carries half a character;
bytes that can never form a character become U+FFFD, exactly as a one-shot decode would show
them. `StopMatcher` holds back the shortest tail that could still begin a stop string, so a stop
string split across deltas is never shown.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from wgc.runtime.http.text.tokenizer import Tokenizer


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


class _Prefix:
    """How much of one stop string the text seen so far ends with (Knuth-Morris-Pratt): each character
    costs amortised O(1), whatever the stop string's length."""

    def __init__(self, stop: str) -> None:
        self.stop = stop
        self.fail = [0] * len(stop)  # fail[i]: the longest proper prefix of stop[:i + 1] that is also its suffix
        k = 0
        for i in range(1, len(stop)):
            while k and stop[i] != stop[k]:
                k = self.fail[k - 1]
            if stop[i] == stop[k]:
                k += 1
            self.fail[i] = k
        self.matched = 0  # characters of `stop` the text ends with

    def feed(self, ch: str) -> bool:
        """One more character; True when the stop string is complete."""
        stop, k = self.stop, self.matched
        while k and stop[k] != ch:
            k = self.fail[k - 1]
        if stop[k] == ch:
            k += 1
        if k == len(stop):
            self.matched = self.fail[k - 1]
            return True
        self.matched = k
        return False


class StopMatcher:
    """Text with its stop strings cut out: `push` returns what is safe to show, holding back the
    longest tail that could still begin a stop string. Linear in the text, whatever the stop
    strings' lengths (an automaton per stop string, not a search of the tail at each token)."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [_Prefix(s) for s in stops if s]
        self._held: deque[str] = deque()  # the tail held back, in the pieces it came in (never copied whole)
        self._held_len = 0
        self.stopped = False

    def push(self, text: str) -> str:
        """The part of `text` that is safe to show; sets `stopped` when a stop string appeared."""
        if self.stopped or not self.stops:
            return "" if self.stopped else text
        for i, ch in enumerate(text):
            done = [len(m.stop) for m in self.stops if m.feed(ch)]
            if done:  # the text stops here: cut before the longest stop string that just completed
                self.stopped = True
                shown = "".join(self._held) + text[:i + 1]
                self._held.clear()
                return shown[:len(shown) - max(done)]
        if text:
            self._held.append(text)
            self._held_len += len(text)
        return self._release(self._held_len - max(m.matched for m in self.stops))

    def _release(self, n: int) -> str:
        """The first `n` held characters, no longer held."""
        out = []
        while n > 0:
            piece = self._held.popleft()
            if len(piece) > n:
                self._held.appendleft(piece[n:])
                piece = piece[:n]
            out.append(piece)
            n -= len(piece)
            self._held_len -= len(piece)
        return "".join(out)

    def finish(self) -> str:
        text = "" if self.stopped else "".join(self._held)
        self._held.clear()
        self._held_len = 0
        return text
