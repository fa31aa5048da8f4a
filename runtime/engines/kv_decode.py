"""Two shapes of KV step written for their own case: a decode step reserved in one pass, and a mixed
step's attention planned in two parts. Both stand in for the engine's general path (kv_engine.py)
where it would do the same work row by row or over padding; the tests hold them equal to it.

- `prepare_decode`: one token for each sequence already in the cache, resident and with no chunk
  in progress, in one pass over the rows with one allocator call (PageAllocator.append_one_each);
  the general `prepare` asks the allocator a dozen times a row.
- `split_step` / `SplitStep`: decode rows beside prompt chunks in one forward (the batcher's mixed
  dispatch): the one-token rows keep their decode plan, the rest get the general plan.
- `mirror_step`: a CPU decode step's attention read from the engine's dense mirror of the batch's
  K/V instead of gathered from the pages each layer (kv_mirror.py), where the engine keeps one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from wgc.runtime.engines.attention import AttentionBatch, KVStep, Mode, TorchAttention
from wgc.runtime.engines.kv_mirror import DecodeMirror, MirrorStep
from wgc.runtime.engines.kv_pages import Exhausted
from wgc.runtime.engines.kv_types import KVExhausted, KVSeq, Prepared, Write

if TYPE_CHECKING:
    from wgc.runtime.engines.kv_engine import KVCacheEngine


def prepare_decode(engine: KVCacheEngine, writes: list[Write], keys: list[tuple[int, str]],
                   mode: Mode) -> Prepared | None:
    """`prepare` of a decode step — one token for each sequence already in the cache, resident and
    with no chunk in progress — in one pass over the rows with one allocator call (the general
    path asks the allocator a dozen times a row). The same Prepared, undo and pages as the
    general path (tests/engines/test_kv_decode_prepare.py); None for any other step."""
    seqs = engine.seqs
    rows: list[KVSeq] = []
    for w, key in zip(writes, keys):
        seq = seqs.get(key)
        if seq is None or w.count != 1 or w.block or w.tokens is None or seq.swapped is not None or seq.progress:
            return None
        rows.append(seq)
    try:
        out = engine.pages.append_one_each(keys)
    except KeyError:  # a sequence that holds no pages (cut back to nothing): the general path
        return None
    if isinstance(out, Exhausted):
        raise KVExhausted(f"KV pool exhausted: {out.needed} pages needed, {out.free} free of {engine.pages.num_pages}")
    undo: list[tuple[int, str, KVSeq | None, Any, int]] = []
    positions: list[int] = []
    for w, seq, length in zip(writes, rows, out.lengths):
        undo.append((w.request, w.label, seq, seq.snapshot(), length))
        positions.append(seq.position)
        seq.position += 1
        if seq.tokens is not None:
            seq.tokens.append(w.tokens[0])  # type: ignore[index]
    copies = [(writes[i].request, writes[i].label, old, new) for i, old, new in out.copies]
    for _, _, old, new in copies:  # copy-on-write of a shared partial page, before the write
        engine.storage.k[:, new] = engine.storage.k[:, old]
        engine.storage.v[:, new] = engine.storage.v[:, old]
    n = len(writes)
    ones = [1] * n
    batch = AttentionBatch(out.tables, out.lengths, ones, engine.page_size, mode, True)
    return Prepared(writes, [0] * n, ones, [True] * n, batch, torch.tensor(positions, dtype=torch.int64), undo,
                    copies, list(out.stamps))


def split_step(engine: KVCacheEngine, prepared: Prepared) -> SplitStep | None:
    """A CPU step whose leading rows are one token each and whose others are longer (decodes beside
    prompt chunks, one mixed forward), planned in two parts, each for its own shape; None for any
    other step. One plan of the whole pads every decode row to the longest chunk's queries (a
    64-stream mixed step of the 34M Llama ran 0.6x the separate forwards, measured). Not on CUDA: a
    FlashInfer plan lives in its wrapper's state, one at a time."""
    batch = prepared.batch
    lengths = prepared.lengths
    head = 0
    while head < len(lengths) and lengths[head] == 1:
        head += 1
    if not (0 < head < len(lengths) and batch.write and engine.device.type == "cpu"):
        return None
    parts = [AttentionBatch(batch.page_tables[a:b], batch.cached_lengths[a:b], batch.q_lengths[a:b],
                            batch.page_size, batch.mode, True) for a, b in ((0, head), (head, len(lengths)))]
    backend = engine.planner.backend
    keys = [(w.request, w.label) for w in prepared.items[:head]]
    decodes = mirror_step(engine, parts[0], engine.pages.stamps(keys))
    return SplitStep(decodes or KVStep(engine.storage, backend, engine.planner.plan(parts[0])),
                     KVStep(engine.storage, backend, engine.planner.plan(parts[1])), head)


def mirror_step(engine: KVCacheEngine, batch: AttentionBatch,
                stamps: list[tuple[int, int] | None]) -> MirrorStep | None:
    """A decode batch's attention through the engine's mirror (kv_mirror.py); None where the engine
    keeps none, the step is not a written one-token-a-row step, the backend is not the torch path's
    fast decode (a test's general plan, a family's own backend), plans are made ahead (they would be
    wasted), or the mirror would outgrow its budget. `stamps`: each row's after this step's append."""
    mirror = mirror_in_use(engine)
    if mirror is None or not batch.write or not batch.q_lengths or any(n != 1 for n in batch.q_lengths):
        return None
    return mirror.step(engine.storage, batch, stamps, engine.planner.backend.scale)


def mirror_in_use(engine: KVCacheEngine) -> DecodeMirror | None:
    """The engine's mirror when its decode steps attend through it: it keeps one, the backend is the
    torch path's fast decode, and plans are not made ahead."""
    backend = engine.planner.backend
    if type(backend) is not TorchAttention or not backend.fast_decode or engine.planner.active:
        return None
    return engine.mirror


@dataclass(frozen=True)
class SplitStep:
    """A mixed step's attention: the first `split` packed tokens (one-token rows) through `head`'s plan,
    the rest through `tail`'s; each part writes its own rows' slots and reads only its own rows."""

    head: KVStep | MirrorStep
    tail: KVStep
    split: int

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        s = self.split
        return torch.cat([self.head.attend(layer, q[:s], k[:s], v[:s]),
                          self.tail.attend(layer, q[s:], k[s:], v[s:])])  # [sum n, heads, head_dim]
