"""The KV engine's plain data: the cache's geometry, a sequence's state (KVSeq), one call's input for a
step (Write) and a reserved step (Prepared), and the pool's exhaustion error.

Apart from the engine (kv_engine.py) so that its one-pass decode step (kv_decode.py) and the engine
share them without importing each other; kv_engine.py re-exports every name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from wgc.runtime.engines.attention import AttentionBatch
from wgc.runtime.engines.prefix_cache import ROOT


class KVExhausted(RuntimeError):
    """The pool has too few free pages for this batch; nothing was allocated."""


@dataclass(frozen=True)
class Geometry:
    """The cache's shape: what one token of one layer holds."""

    layers: int
    heads: int  # query heads (the attention backend plans for them)
    kv_heads: int
    head_dim: int
    max_positions: int
    dtype: torch.dtype = torch.float32


@dataclass(frozen=True)
class Swapped:
    """A preempted label's K/V in host memory: [layers, length, kv_heads, head_dim] each."""

    length: int
    k: Tensor
    v: Tensor


@dataclass(slots=True)
class KVSeq:
    position: int = 0  # rope position of the next token written
    tokens: list[int] | None = field(default_factory=list)  # ids in the cache; None once it holds other content
    progress: int = 0  # tokens of the call in progress already written (0: none in progress)
    published: int = 0  # leading full pages published for prefix caching
    digest: bytes = ROOT  # the last published page's digest
    swapped: Swapped | None = None
    data: dict[str, Any] = field(default_factory=dict)  # the family's values (plain data)

    def copy(self) -> KVSeq:
        return KVSeq(self.position, None if self.tokens is None else list(self.tokens), self.progress,
                     self.published, self.digest, self.swapped, dict(self.data))

    def snapshot(self) -> tuple[Any, ...]:
        """What `restore` needs to undo a step, in O(1) of the history: the token list by reference
        and its length (a step only appends to it or replaces it), the rest by value. A `copy` per
        row per step copied every history: 0.7 ms a step at batch 32 with 2,000-token rows."""
        n = None if self.tokens is None else len(self.tokens)
        return (self.position, self.tokens, n, self.progress, self.published, self.digest, self.swapped,
                dict(self.data))

    def restore(self, snapshot: tuple[Any, ...]) -> None:
        """Back to the state `snapshot` took (in place): appended tokens cut, every field reset."""
        self.position, tokens, n, self.progress, self.published, self.digest, self.swapped, data = snapshot
        if tokens is not None:
            del tokens[n:]
        self.tokens, self.data = tokens, data


@dataclass(slots=True)
class Write:
    """One call's input for one step. Not frozen: one is made per row per step, and a frozen
    dataclass's __init__ (object.__setattr__ a field) was 3% of a batch-32 decode round outside the
    forward; nothing changes a Write once made (a budget is a new one, `dataclasses.replace`)."""

    request: int
    label: str
    tokens: list[int] | None  # the whole input's ids, or None (embeddings the family computes)
    count: int  # tokens in the call's whole input
    budget: int = 0  # tokens to write this step (0: all that remain): the scheduler's grant
    block: bool = False  # the whole input at one rope position, written at once


@dataclass
class Prepared:
    """One reserved step: per item the chunk [start, start + length) of its input written now."""

    items: list[Write]
    starts: list[int]
    lengths: list[int]
    final: list[bool]  # the item's input is complete after this step: its logits are wanted
    batch: AttentionBatch
    positions: Tensor  # [sum lengths] int64, on the host
    undo: list[tuple[int, str, KVSeq | None, Any, int]]  # (request, label, sequence, its snapshot, KV length before)
    copies: list[tuple[int, str, int, int]] = field(default_factory=list)  # (request, label, old, new page)
    stamps: list[tuple[int, int] | None] | None = None  # a decode step's: each row's stamp after it (kv_pages)

    def chunk(self, i: int) -> list[int]:
        tokens = self.items[i].tokens
        assert tokens is not None
        return tokens[self.starts[i]:self.starts[i] + self.lengths[i]]

    def token_ids(self) -> list[int]:
        """Every item's chunk, packed in order ([sum lengths])."""
        if all(n == 1 for n in self.lengths) and not any(self.starts):  # a decode step: one token a row
            return [w.tokens[0] for w in self.items]  # type: ignore[index]
        return [t for i in range(len(self.items)) for t in self.chunk(i)]
