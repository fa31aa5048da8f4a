"""The distinct tokens of one sequence's history, kept beside it for the repetition penalty.

Why: the penalty scores each distinct token a row has seen once; building that set from the whole
history every step cost ~0.45 ms a step at 16 rows x 1,250 tokens (Orpheus's default length),
growing with the length. `SeenTokens` follows the sequence's token list instead, one append a
decode step (`bench/penalty_state.py`). `sampling.sample` takes either it or a plain history.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class SeenTokens:
    """The distinct tokens of one sequence's history, following its token list: `sync(tokens)` takes
    the tokens appended since the last sync (one a decode step). A different list object (a
    checkpoint restored, a fork, an import), a shorter one or one whose last synced token changed
    (a step undone in place) is read again whole, so the set never keeps a token the history lost.
    The ids are kept in a numpy buffer (`ids`, in first-seen order), the form `sample` indexes by."""

    __slots__ = ("_source", "_synced", "_last", "_set", "_buffer", "_size")

    def __init__(self) -> None:
        self._source: list[int] | None = None  # held, so its id cannot be reused by another list
        self._synced = 0  # tokens of `_source` already counted
        self._last: int | None = None  # `_source[_synced - 1]` when synced
        self._set: set[int] = set()
        self._buffer = np.empty(64, dtype=np.int64)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @property
    def ids(self) -> np.ndarray:
        """The distinct seen ids [N] int64 (a view: valid until the next sync)."""
        return self._buffer[:self._size]

    def sync(self, tokens: list[int]) -> SeenTokens:
        """Follow `tokens` (the sequence's history now) → self."""
        n = self._synced
        if tokens is not self._source or len(tokens) < n or (n and tokens[n - 1] != self._last):
            self._source, self._set, self._size, n = tokens, set(), 0, 0
        if len(tokens) > n:
            fresh = [t for t in dict.fromkeys(tokens[n:]) if t not in self._set]
            if fresh:
                self._set.update(fresh)
                end = self._size + len(fresh)
                if end > len(self._buffer):
                    grown = np.empty(max(end, 2 * len(self._buffer)), dtype=np.int64)
                    grown[:self._size] = self._buffer[:self._size]
                    self._buffer = grown
                self._buffer[self._size:end] = fresh
                self._size = end
            self._synced, self._last = len(tokens), tokens[-1]
        return self


History = Sequence[int] | SeenTokens  # a row's tokens for the repetition penalty
