"""The CPU decode step without the per-step K/V gather: a dense mirror of the decode batch's cache.

The pure-torch decode step (attention.py's `_attend_decode`) gathers every row's keys and values out
of the pages into fresh tensors each layer of each step: at the 34M Llama shape and batch 32 those
gathers (and the page faults of their fresh memory) were 2.45 ms of a ~20 ms step, the one large
cost vLLM's paged kernel does not pay (bench/peer_profile.py). Here the batch's K and V are kept,
per layer, in one dense buffer [rows, kv_heads, capacity, head_dim] across steps: row b holds the
tokens of the batch's b-th sequence head-major, so SDPA reads `buffer[:B, :, :K]` in place (each
head's keys contiguous). A step writes its new keys and values into the pages (still the cache's
truth: prefill, preemption, export read them) and into the mirror at each row's position, and
gathers only the rows the mirror does not hold yet.

Correctness rests on the page allocator's stamps (kv_pages.py): a row is kept for this step only
when its sequence's stamp is exactly one edit past the one recorded at the row's last mirrored
step, that edit being this step's own one-token append. Any other change to the sequence since —
a prefill chunk, a truncate (rollback, an aborted step), a swap-in or import (a new sequence), a
fork into the label, a prefix attach, a sequence that left and another that took its place — gives
another stamp, and the row is gathered again from the pages. Nothing outside has to say so.

Cost: memory, at most the pool's own K/V bytes again (beyond that the step gathers, as before); the
placement's memory table counts it at that bound (its "kv mirror" line, wgc/placement/memory.py).
Row b is the batch's b-th sequence, so a family keeps its rows where they are by ordering its decode
batch as `order` says (PagedLlama does; in the order given, a sequence leaving the middle of a batch
would re-gather every row after it). Only the torch backend on CPU uses it (kv_decode.mirror_step);
CUDA is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from wgc.runtime.engines.attention import AttentionBatch, KVStorage, write_kv
from wgc.runtime.engines.kv_pages import PageAllocator, Stamp


class DecodeMirror:
    """One engine's mirror: K and V [layers, rows, kv_heads, capacity, head_dim] and, per row, the
    stamp of the sequence its content is of (None: nothing usable)."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, page_size: int, dtype: torch.dtype,
                 max_bytes: int) -> None:
        self.layers, self.kv_heads, self.head_dim, self.page_size = layers, kv_heads, head_dim, page_size
        self.dtype = dtype
        self.max_bytes = max_bytes  # beyond this the step gathers as before (at most the pool again)
        self.k = self.v = torch.zeros(layers, 0, kv_heads, 0, head_dim, dtype=dtype)
        # each layer's buffer, and seen as [rows * kv_heads * capacity, d], made once per growth: a step
        # asks for them every layer (two selects and views a layer otherwise)
        self.layer_k: tuple[Tensor, ...] = ()
        self.layer_v: tuple[Tensor, ...] = ()
        self.flat_k: tuple[Tensor, ...] = ()
        self.flat_v: tuple[Tensor, ...] = ()
        self.key_positions = torch.arange(0)  # [capacity]
        self.marks: list[Stamp | None] = []  # per row: the stamp of the sequence it mirrors
        self.lengths: list[int] = []  # per row: tokens it holds (for `check`)
        self.events = {"mirror_steps": 0, "mirror_rows_gathered": 0, "mirror_over_budget": 0}

    @property
    def rows(self) -> int:
        return self.k.shape[1]

    @property
    def capacity(self) -> int:
        return self.k.shape[3]

    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()

    def step(self, storage: KVStorage, batch: AttentionBatch, stamps: list[Stamp | None],
             scale: float | None) -> MirrorStep | None:
        """The attention of a decode step (one written token a row) through the mirror; None when the
        mirror would outgrow its budget (the caller then gathers). `stamps`: each row's sequence's
        stamp after this step's append."""
        cached = list(batch.cached_lengths)
        count, width = len(cached), max(cached) + 1  # B, K
        if not self._fit(count, width):
            self.events["mirror_over_budget"] += 1
            return None
        marks = self.marks
        stale = [b for b, stamp in enumerate(stamps)
                 if stamp is None or b >= len(marks) or marks[b] != (stamp[0], stamp[1] - 1)]
        if stale:
            self._gather(storage, batch, stale)
        marks[:count] = stamps
        self.lengths[:count] = [c + 1 for c in cached]
        self.events["mirror_steps"] += 1
        ps, kvh, cap = self.page_size, self.kv_heads, self.capacity
        # the step's indices in Python integers, one tensor each: a handful of small tensor ops cost more
        # (~15 us each in a 0.7M step) than the loops over B rows
        write_slots = torch.tensor([table[c // ps] * ps + c % ps for table, c in zip(batch.page_tables, cached)],
                                   dtype=torch.int64)  # [B]
        dest = torch.tensor([(b * kvh + h) * cap + c for b, c in enumerate(cached) for h in range(kvh)],
                            dtype=torch.int64)  # [B * kvh]: where each new (row, head) of head_dim goes
        mask = None
        if min(cached) + 1 != width:
            written = torch.tensor(cached, dtype=torch.int64)  # [B]
            mask = (self.key_positions[:width] <= written[:, None])[:, None, None, :]  # [B, 1, 1, K]
        return MirrorStep(self, storage, write_slots, dest, mask, count, width, scale)

    def order(self, stamps: list[Stamp | None]) -> list[int] | None:
        """The order for a coming decode batch (each row's stamp before this step's append) in which
        every sequence the mirror holds below the batch's size stays at its row and the others fill
        the rows left free, in the order given: a sequence leaving the middle of a batch then costs
        one row's gather, the row moved into its place, instead of every row after it. None: keep
        the order given (it is that order already)."""
        count = len(stamps)
        if self.marks[:count] == stamps:  # a steady batch: every row where it was
            return None
        home = {mark: row for row, mark in enumerate(self.marks[:count]) if mark is not None}
        placed: list[int | None] = [None] * count
        newcomers = []
        for i, stamp in enumerate(stamps):
            row = home.pop(stamp, None) if stamp is not None else None
            if row is None:
                newcomers.append(i)
            else:
                placed[row] = i
        fill = iter(newcomers)
        order = [i if i is not None else next(fill) for i in placed]
        return None if order == list(range(count)) else order

    def _fit(self, count: int, width: int) -> bool:
        """Grow the buffers to at least `count` rows of `width` tokens (capacity doubled, in whole
        pages), keeping what they hold; False, and no change, past the budget."""
        rows, cap = self.rows, self.capacity
        if count <= rows and width <= cap:
            return True
        new_rows = max(rows, count)
        new_cap = cap if width <= cap else -(-max(width, 2 * cap) // self.page_size) * self.page_size
        element = torch.empty((), dtype=self.dtype).element_size()
        if 2 * self.layers * new_rows * self.kv_heads * new_cap * self.head_dim * element > self.max_bytes:
            return False
        shape = (self.layers, new_rows, self.kv_heads, new_cap, self.head_dim)
        k, v = torch.zeros(shape, dtype=self.dtype), torch.zeros(shape, dtype=self.dtype)  # padding stays finite
        k[:, :rows, :, :cap] = self.k
        v[:, :rows, :, :cap] = self.v
        self.k, self.v = k, v
        self.layer_k, self.layer_v = tuple(k.unbind(0)), tuple(v.unbind(0))
        self.flat_k = tuple(layer.view(-1, self.head_dim) for layer in self.layer_k)
        self.flat_v = tuple(layer.view(-1, self.head_dim) for layer in self.layer_v)
        self.key_positions = torch.arange(new_cap)  # [capacity]: a mask's key positions
        self.marks += [None] * (new_rows - rows)
        self.lengths += [0] * (new_rows - rows)
        return True

    def _gather(self, storage: KVStorage, batch: AttentionBatch, rows: list[int]) -> None:
        """Copy the cached tokens of `rows` from the pages into their mirror rows, every layer at once."""
        ps, kvh, cap, d = self.page_size, self.kv_heads, self.capacity, self.head_dim
        slots, dest = [], []
        for b in rows:
            n = batch.cached_lengths[b]
            table = torch.tensor(batch.page_tables[b][:-(-n // ps)], dtype=torch.int64)
            slots.append((table[:, None] * ps + torch.arange(ps)).reshape(-1)[:n])  # [n]
            heads = b * kvh + torch.arange(kvh)  # [kvh]
            dest.append((heads[None, :] * cap + torch.arange(n)[:, None]).reshape(-1))  # [n * kvh], (token, head)
        src_slots, dst = torch.cat(slots), torch.cat(dest)
        layers = self.layers
        for pages, mirror in ((storage.k, self.k), (storage.v, self.v)):
            src = pages.view(layers, -1, kvh, d).index_select(1, src_slots)  # [layers, N, kvh, d]
            mirror.view(layers, -1, d).index_copy_(1, dst, src.reshape(layers, -1, d).to(self.dtype))
        self.events["mirror_rows_gathered"] += len(rows)

    def check(self, storage: KVStorage, pages: PageAllocator) -> None:
        """Raise AssertionError unless every row the next step would keep (its recorded stamp is a
        sequence's stamp now) holds exactly that sequence's tokens, bit for bit, as the pages do."""
        ps = self.page_size
        tables: dict[Stamp, tuple[list[int], int]] = {}
        for request in pages.requests():
            for label in pages.labels(request):
                stamp = pages.stamps([(request, label)])[0]
                if stamp is not None:
                    tables[stamp] = (pages.page_table(request, label), pages.length(request, label))
        for b, mark in enumerate(self.marks):
            if mark is None or mark not in tables:
                continue
            table, length = tables[mark]
            if length != self.lengths[b]:
                raise AssertionError(f"mirror row {b}: {self.lengths[b]} tokens, its sequence {length}")
            pos = torch.arange(length)
            slots = torch.tensor(table, dtype=torch.int64)[pos // ps] * ps + pos % ps
            for name, pages, mirror in (("K", storage.k, self.k), ("V", storage.v, self.v)):
                want = pages.view(self.layers, -1, self.kv_heads, self.head_dim)[:, slots].transpose(1, 2)
                if not torch.equal(mirror[:, b, :, :length], want.to(self.dtype)):
                    raise AssertionError(f"mirror row {b}: its {name} differs from the pages")


@dataclass(frozen=True)
class MirrorStep:
    """A decode step's attention through the mirror (the KVStep interface: `attend` once a layer)."""

    mirror: DecodeMirror
    storage: KVStorage
    write_slots: Tensor  # [B]: each new token's flat slot in the pages
    dest: Tensor  # [B * kv_heads]: each new (row, head)'s flat row in a layer's buffer
    mask: Tensor | None  # [B, 1, 1, K] True = attend; None: every row holds K tokens
    count: int  # B
    width: int  # K

    scale: float | None

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """q [B, heads, d], the new k, v [B, kv_heads, d] -> [B, heads, d_v]: k and v written into the
        pages and the mirror, then grouped queries (q [B, kv_heads, group, d], SDPA's GQA pairing)
        against the mirror's first K tokens of each row, read in place."""
        m = self.mirror
        k_pages, v_pages = self.storage.layer(layer)
        write_kv(k_pages, v_pages, k, v, self.write_slots)
        d = m.head_dim
        if k.dtype != m.dtype:
            k, v = k.to(m.dtype), v.to(m.dtype)
        m.flat_k[layer].index_copy_(0, self.dest, k.reshape(-1, d))
        m.flat_v[layer].index_copy_(0, self.dest, v.reshape(-1, d))
        buffer_k, buffer_v = m.layer_k[layer], m.layer_v[layer]  # [rows, kvh, capacity, d]
        size = (self.count, m.kv_heads, self.width, d)
        keys, values = buffer_k.as_strided(size, buffer_k.stride()), buffer_v.as_strided(size, buffer_v.stride())
        if keys.dtype != q.dtype:
            keys, values = keys.to(q.dtype), values.to(q.dtype)
        batch, heads, head_dim = q.shape
        grouped = q.reshape(batch, m.kv_heads, heads // m.kv_heads, head_dim)  # [B, kvh, group, d]
        out = F.scaled_dot_product_attention(grouped, keys, values, attn_mask=self.mask, scale=self.scale)
        return out.view(batch, heads, -1)  # [B, heads, d_v]
