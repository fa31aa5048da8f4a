"""The KV cache engine: one paged pool per kv component per rank, and each request's sequences in it.

A family's kv component composes one `KVCacheEngine` (through `KVComponent`, kv_component.py) and
writes only its layers: the engine keeps, per (request, label),
- the pages (`PageAllocator`) and the K/V storage (`KVStorage`, one page more than the allocator
  hands out: the scratch page of a CUDA-graph replay's padding rows);
- the rope position of the next token, kept apart from the KV length: a block (`Write.block`, a
  BAGEL image) puts all of its tokens at one position and advances it by one;
- the token ids in the cache while it holds only tokens (a repetition penalty reads them, prefix
  caching hashes them, `None` once other content is written);
- the progress of a chunked call (a long prompt written over several rounds, `Write.budget`);
- while preempted, its K/V in host memory, brought back before its next step;
- the family's own per-sequence values (`data`: plain values, forked, checkpointed and shipped
  with the label).

A step is `prepare` (reserve pages for every item, whole or nothing; copy-on-write; attach cached
prefix pages; advance positions), the family's forward over `Prepared.batch` and
`Prepared.positions`, then `commit` (publish newly full pages for prefix caching) — or `abort`,
which undoes `prepare`, so that a failed batch can be retried call by call. Attention: mode
`causal` or `prefix` (bidirectional inside the new block); `write=False` reads the context and
writes nothing (a velocity query), its new keys passed to the backend directly.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor
from wgc.runtime.engines.attention import AttentionBatch, KVStep, KVStorage, Mode, attention_backend
from wgc.runtime.engines.kv_decode import SplitStep, mirror_in_use, mirror_step, prepare_decode, split_step
from wgc.runtime.engines.kv_mirror import DecodeMirror, MirrorStep
from wgc.runtime.engines.kv_pages import Exhausted, LabelExport, PageAllocator, budget_bytes, pages_for_budget
from wgc.runtime.engines.kv_types import Geometry, KVExhausted, KVSeq, Prepared, Swapped, Write
from wgc.runtime.engines.plan_ahead import PlanAhead
from wgc.runtime.engines.prefix_cache import chain_digests

from wgc import settings


def kv_budget(engine_settings: dict[str, Any], device: torch.device) -> int:
    """The pool's bytes from the plan's engine settings: kv_memory; or kv_memory_fraction of the
    device's memory (the machine's RAM on CPU); neither, on CPU only: WGC_CPU_KV_MEMORY."""
    kv, fraction = engine_settings.get("kv_memory"), engine_settings.get("kv_memory_fraction")
    if kv is None and fraction is None:
        if device.type != "cpu":  # a compiled plan always sizes the pool; only a hand-made spec gets here
            raise ValueError(f"a KV pool on {device} needs kv_memory or kv_memory_fraction in the engine settings")
        return settings.cpu_kv_memory()
    capacity = None
    if fraction is not None:
        if device.type == "cuda":
            capacity = torch.cuda.get_device_properties(device).total_memory
        else:
            capacity = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return budget_bytes(None if kv is None else int(kv), None if fraction is None else float(fraction), capacity)


class KVCacheEngine:
    def __init__(self, geometry: Geometry, num_pages: int, page_size: int, device: torch.device, *,
                 prefix_caching: bool = True, plan_ahead: bool | None = None, mirror: bool | None = None) -> None:
        g = geometry
        self.geometry = g
        self.page_size = page_size
        self.device = device
        self.pages = PageAllocator(num_pages, page_size)
        self.storage = KVStorage.allocate(g.layers, num_pages + 1, page_size, g.kv_heads, g.head_dim, g.dtype, device)
        # FlashInfer's kernels take fp16/bf16: a float32 cache keeps the torch path
        backend = attention_backend(device, g.heads, g.kv_heads, g.head_dim, page_size, g.dtype,
                                    prefer_flashinfer=g.dtype != torch.float32)
        self.planner = PlanAhead(backend, device.type == "cuda" if plan_ahead is None else plan_ahead)
        self.prefix_caching = prefix_caching
        # the CPU decode step reads a dense mirror of the batch's K/V instead of gathering it each layer
        # (kv_mirror.py): on CPU by default (WGC_CPU_KV_MIRROR=0 turns it off), at most the pool's bytes again
        if mirror is None:
            mirror = device.type == "cpu" and settings.cpu_kv_mirror()
        # its bound is the pool's own pages (not the scratch page): the "kv mirror" line of the placement's
        # memory table (wgc/placement/memory.py) counts the pool's bytes again, and this stays within it
        pool_bytes = 2 * num_pages * self.storage.k[:, 0].numel() * self.storage.k.element_size()
        self.mirror = DecodeMirror(g.layers, g.kv_heads, g.head_dim, page_size, g.dtype, pool_bytes) \
            if mirror and device.type == "cpu" else None
        self.seqs: dict[tuple[int, str], KVSeq] = {}
        self.events = {"kv_preemptions": 0, "kv_swapped_in": 0, "prefix_hit_tokens": 0, "prefix_queried_tokens": 0}

    @classmethod
    def for_spec(cls, engine_settings: dict[str, Any], geometry: Geometry, device: torch.device,
                 default_page_size: int = 16, plan_ahead: bool | None = None) -> KVCacheEngine:
        """Sized from the plan's engine settings (kv_memory, kv_memory_fraction, page_size, prefix_caching)."""
        page_size = int(engine_settings.get("page_size") or default_page_size)
        dtype_bytes = torch.empty((), dtype=geometry.dtype).element_size()
        num_pages = pages_for_budget(kv_budget(engine_settings, device), page_size, geometry.layers,
                                     geometry.kv_heads, geometry.head_dim, dtype_bytes)
        caching = engine_settings.get("prefix_caching", True)
        return cls(geometry, num_pages, page_size, device, prefix_caching=bool(caching), plan_ahead=plan_ahead)

    # ---- queries ---------------------------------------------------------------------------

    def seq(self, request: int, label: str) -> KVSeq | None:
        return self.seqs.get((request, label))

    def length(self, request: int, label: str) -> int:
        seq = self.seqs.get((request, label))
        if seq is not None and seq.swapped is not None:
            return seq.swapped.length
        return self.pages.length(request, label)

    def holders(self) -> dict[int, int]:
        """Per request holding pages (the preemptible ones, for the scheduler): the pages preempting it
        would free — those no other request holds (a prefix page shared with another request stays)."""
        out: dict[int, int] = {}
        pages = self.pages
        for request in pages.requests():
            held: dict[int, int] = {}
            for label in pages.labels(request):
                for page in pages.page_table(request, label):
                    held[page] = held.get(page, 0) + 1
            out[request] = sum(1 for page, n in held.items() if pages.refcount(page) == n)
        return out

    def pages_for(self, request: int, label: str, n_tokens: int) -> tuple[int, int]:
        """(pages to set up first, token slots free in the last page) for writing to this label now."""
        seq = self.seqs.get((request, label))
        if seq is not None and seq.swapped is not None:
            length = seq.swapped.length
            return -(-length // self.page_size), (-length) % self.page_size
        length = self.pages.length(request, label)
        cow = self.pages.pages_needed(request, label, 1) - (0 if length % self.page_size else 1)
        return cow, (-length) % self.page_size

    # ---- a step ----------------------------------------------------------------------------

    def prepare(self, writes: list[Write], mode: Mode = "causal", write: bool = True) -> Prepared:
        """Reserve room for every item's chunk (whole or nothing: KVExhausted changes nothing)."""
        keys = [(w.request, w.label) for w in writes]
        if len(set(keys)) != len(keys):
            raise ValueError("a (request, label) may appear once per step")
        if write:
            decode = prepare_decode(self, writes, keys, mode)
            if decode is not None:
                return decode
        spare = self._check_room(writes, write)  # free pages beyond what this step needs
        undo: list[tuple[int, str, KVSeq | None, Any, int]] = []
        starts, lengths, finals, cached = [], [], [], []
        positions: list[Tensor | int] = []
        copies: list[tuple[int, str, int, int]] = []
        for w in writes:
            seq = self.seqs.get((w.request, w.label))
            undo.append((w.request, w.label, seq, None if seq is None else seq.snapshot(),
                         self.length(w.request, w.label)))
            created = seq is None
            if seq is None:
                seq = self.seqs[(w.request, w.label)] = KVSeq()
            if seq.swapped is not None:
                self._swap_in(w.request, w.label, seq)
            if write and not seq.progress and w.tokens is not None and not w.block:
                spare -= self._attach_prefix(w, seq, spare)
            start = seq.progress
            n = w.count - start if w.budget <= 0 or w.block else min(w.budget, w.count - start)
            if n <= 0 and w.count:
                raise ValueError(f"request {w.request}: label {w.label!r} has no tokens left to write")
            cached.append(self.pages.length(w.request, w.label))
            positions.append(seq.position if n == 1 else  # a decode row: one int, no tensor of its own
                             torch.full((n,), seq.position) if w.block else torch.arange(seq.position, seq.position + n))
            if created and not write:  # a query on a label never written leaves no sequence behind
                del self.seqs[(w.request, w.label)]
            if write:
                out = self.pages.append(w.request, w.label, n)
                if isinstance(out, Exhausted):  # _check_room bounds the sum: never reached
                    raise KVExhausted(f"KV pool exhausted: {out.needed} pages needed, {out.free} free")
                copies.extend((w.request, w.label, old, new) for old, new in out.copies)
                seq.position += 1 if w.block else n
                if seq.tokens is not None:
                    if w.tokens is None or w.block:
                        seq.tokens = None
                    else:
                        seq.tokens.extend(w.tokens[start:start + n])
                seq.progress = 0 if start + n >= w.count else start + n
            starts.append(start)
            lengths.append(n)
            finals.append(start + n >= w.count)
        for _, _, old, new in copies:  # copy-on-write of a shared partial page, before the write
            self.storage.k[:, new] = self.storage.k[:, old]
            self.storage.v[:, new] = self.storage.v[:, old]
        tables = [self.pages.page_table(r, lab) for r, lab in keys]
        batch = AttentionBatch(tables, cached, lengths, self.page_size, mode, write)
        flat = _flat_positions(positions)
        return Prepared(writes, starts, lengths, finals, batch, flat.to(torch.int64), undo, copies)

    @contextmanager
    def stepping(self, writes: list[Write], mode: Mode = "causal", write: bool = True) -> Iterator[Prepared]:
        """`prepare`, the body (the family's forward), then `commit`; `abort` and re-raise when the
        body raises, so that a failed batch leaves every sequence as it was (and can be retried)."""
        prepared = self.prepare(writes, mode, write)
        try:
            yield prepared
        except BaseException:
            self.abort(prepared)
            raise
        self.commit(prepared)

    def step(self, prepared: Prepared) -> KVStep | SplitStep | MirrorStep:
        """What the family's forward attends through: this step planned (ahead when predicted); a
        mixed CPU step in two parts (kv_decode.split_step); a CPU decode step through the mirror
        (kv_decode.mirror_step)."""
        split = split_step(self, prepared)
        if split is not None:
            return split
        stamps = prepared.stamps
        if self.mirror is not None and stamps is None:
            stamps = self.pages.stamps([(w.request, w.label) for w in prepared.items])
        mirrored = None if stamps is None else mirror_step(self, prepared.batch, stamps)
        return mirrored or KVStep(self.storage, self.planner.backend, self.planner.plan(prepared.batch))

    def mirror_order(self, keys: list[tuple[int, str]]) -> list[int] | None:
        """The order to run the next decode step's rows `keys` in (one token each) so that the mirror
        keeps the rows it holds (DecodeMirror.order); None: the order given is as good (or no mirror)."""
        mirror = mirror_in_use(self)
        return None if mirror is None else mirror.order(self.pages.stamps(keys))

    def issued(self, prepared: Prepared) -> None:
        """The step's forward has been issued: a decode step plans the next one on the side thread."""
        if prepared.batch.write and all(n == 1 for n in prepared.lengths):
            self.planner.ahead(prepared.batch, self.pages.next_free(len(prepared.lengths)))

    def commit(self, prepared: Prepared) -> None:
        """The forward succeeded: publish the newly full pages of token sequences for prefix caching."""
        if not (self.prefix_caching and prepared.batch.write):
            return
        for w in prepared.items:
            seq = self.seqs[(w.request, w.label)]
            if seq.tokens is None or seq.position != len(seq.tokens):
                continue
            full = len(seq.tokens) // self.page_size
            if full > seq.published:
                digests = chain_digests(seq.tokens, self.page_size, seq.published, seq.digest)
                self.pages.publish(w.request, w.label, digests, start=seq.published)
                seq.published, seq.digest = full, digests[-1]

    def abort(self, prepared: Prepared) -> None:
        """Undo `prepare` (the forward failed): every sequence back as it was, its new pages freed."""
        for request, label, old, new in reversed(prepared.copies):
            self.pages.undo_copy(request, label, old, new)
        for request, label, seq, snapshot, length in reversed(prepared.undo):
            if seq is None:
                self.pages.free_label(request, label)
                self.seqs.pop((request, label), None)
                continue
            seq.restore(snapshot)
            if seq.swapped is not None:
                self.pages.free_label(request, label)
            else:
                self.pages.truncate(request, label, length)
            self.seqs[(request, label)] = seq

    # ---- preemption ------------------------------------------------------------------------

    def preempt(self, request: int) -> int:
        """Move every label of the request to host memory and free its pages; pages freed."""
        before = self.pages.used_pages
        for label in self.pages.labels(request):
            seq = self.seqs.setdefault((request, label), KVSeq(tokens=None))
            k, v = self._read(request, label)
            seq.swapped = Swapped(self.pages.length(request, label), k, v)
            self.pages.free_label(request, label)
        freed = before - self.pages.used_pages
        if freed:
            self.events["kv_preemptions"] += 1
        return freed

    def _swap_in(self, request: int, label: str, seq: KVSeq) -> None:
        state, seq.swapped = seq.swapped, None
        assert state is not None
        self._write(request, label, state.length, state.k, state.v)
        self.events["kv_swapped_in"] += 1

    # ---- per-request state -----------------------------------------------------------------

    def fork(self, request: int, target: str, source: str) -> None:
        if target == source:
            return
        src = self.seqs.get((request, source))
        if src is not None and src.swapped is not None:
            self.pages.free_label(request, target)  # both stay in host memory until used
        else:
            self.pages.fork(request, target, source)
        if src is None:
            self.seqs.pop((request, target), None)
        else:
            self.seqs[(request, target)] = src.copy()

    def checkpoint(self, request: int, label: str) -> Any:
        seq = self.seqs.get((request, label))
        return self.length(request, label), None if seq is None else seq.copy()

    def restore(self, request: int, label: str, checkpoint: Any) -> None:
        length, before = checkpoint
        seq = self.seqs.get((request, label))
        swapped = None if seq is None else seq.swapped
        if swapped is not None:  # preempted since: cut the host copy, take no pages
            swapped = Swapped(length, swapped.k[:, :length], swapped.v[:, :length])
        else:
            self.pages.truncate(request, label, length)
        if before is None:
            self.seqs.pop((request, label), None)
        else:
            before.swapped = swapped
            self.seqs[(request, label)] = before

    def export_label(self, request: int, label: str) -> dict[str, Any]:
        seq = self.seqs.get((request, label))
        if seq is not None and seq.swapped is not None:
            length, k, v = seq.swapped.length, seq.swapped.k, seq.swapped.v
        else:
            length = self.pages.length(request, label)
            k, v = self._read(request, label)
        plain = KVSeq() if seq is None else seq
        return {"length": length, "position": plain.position, "tokens": plain.tokens, "data": dict(plain.data),
                "k": k, "v": v}

    def import_label(self, request: int, label: str, state: dict[str, Any]) -> None:
        self.pages.free_label(request, label)
        self.seqs.pop((request, label), None)
        length = int(state["length"])
        if length:
            self._write(request, label, length, state["k"], state["v"])
        tokens = state.get("tokens")
        self.seqs[(request, label)] = KVSeq(int(state.get("position", length)),
                                            None if tokens is None else [int(t) for t in tokens],
                                            data=dict(state.get("data") or {}))

    def drop(self, request: int, label: str) -> None:
        """Forget one label of a request (its pages released; pages it shares stay with the others)."""
        self.pages.free_label(request, label)
        self.seqs.pop((request, label), None)

    def release(self, request: int) -> None:
        self.pages.free_request(request)
        for key in [k for k in self.seqs if k[0] == request]:
            del self.seqs[key]

    def counters(self) -> dict[str, int]:
        swapped = sum(1 for s in self.seqs.values() if s.swapped is not None)
        mirror = {} if self.mirror is None else {**self.mirror.events, "mirror_bytes": self.mirror.nbytes()}
        return {**self.pages.counters(), **self.events, "kv_swapped_labels": swapped, **self.planner.counters(), **mirror}

    # ---- internals ---------------------------------------------------------------------------

    def _check_room(self, writes: list[Write], write: bool) -> int:
        """Raise KVExhausted unless the step's pages fit; the free pages that remain beyond them."""
        needed = 0
        for w in writes:
            seq = self.seqs.get((w.request, w.label))
            if not write:  # nothing written: only a swapped-out label brought back takes pages
                needed += self.pages_for(w.request, w.label, 0)[0] if seq is not None and seq.swapped is not None else 0
                continue
            remaining = w.count - (seq.progress if seq is not None else 0)
            n = remaining if w.budget <= 0 or w.block else min(w.budget, remaining)
            setup, slack = self.pages_for(w.request, w.label, n)
            needed += setup + -(-max(0, n - slack) // self.page_size)
        if needed > self.pages.free_pages:
            raise KVExhausted(f"KV pool exhausted: {needed} pages needed, {self.pages.free_pages} free "
                              f"of {self.pages.num_pages}")
        return self.pages.free_pages - needed

    def _attach_prefix(self, w: Write, seq: KVSeq, spare: int) -> int:
        """A fresh token sequence: share the published pages its input starts with. At least one token
        is left to compute (the step must give logits). Reviving a cached page nobody holds takes a
        free page: no more are revived than the chunk would have taken without a hit (the room
        `_check_room` counted) plus `spare`. Returns how many of the spare pages it used."""
        if not self.prefix_caching or self.pages.length(w.request, w.label) or seq.tokens != [] or w.tokens is None:
            return 0
        digests = chain_digests(w.tokens[:w.count - 1], self.page_size)
        self.events["prefix_queried_tokens"] += w.count
        pages = self.pages.match(digests)
        ps = self.page_size
        counted = -(-(w.count if w.budget <= 0 else min(w.budget, w.count)) // ps)
        while pages:
            revived = sum(1 for p in pages if self.pages.refcount(p) == 0)
            rest = w.count - len(pages) * ps
            chunk = rest if w.budget <= 0 else min(w.budget, rest)
            if revived + -(-chunk // ps) <= counted + spare:
                break
            pages = pages[:-1]
        if not pages:
            return 0
        used = max(0, revived + -(-chunk // ps) - counted)
        self.pages.attach(w.request, w.label, pages)
        hit = len(pages) * ps
        seq.tokens = list(w.tokens[:hit])
        seq.position = seq.progress = hit
        seq.published, seq.digest = len(pages), digests[len(pages) - 1]
        self.events["prefix_hit_tokens"] += hit
        return used

    def _flat(self) -> tuple[Tensor, Tensor]:
        g = self.geometry
        return (self.storage.k.view(g.layers, -1, g.kv_heads, g.head_dim),
                self.storage.v.view(g.layers, -1, g.kv_heads, g.head_dim))

    def _slots(self, pages: list[int], length: int) -> Tensor:
        ps = self.page_size
        table = torch.tensor(pages, dtype=torch.int64)
        pos = torch.arange(length)
        return (table[pos // ps] * ps + pos % ps).to(self.storage.k.device)  # [length]

    def _read(self, request: int, label: str) -> tuple[Tensor, Tensor]:
        """The label's K/V on the host: [layers, length, kv_heads, head_dim] each."""
        slots = self._slots(self.pages.page_table(request, label), self.pages.length(request, label))
        k_flat, v_flat = self._flat()
        return k_flat[:, slots].cpu(), v_flat[:, slots].cpu()

    def _write(self, request: int, label: str, length: int, k: Tensor, v: Tensor) -> None:
        out = self.pages.import_(request, label, LabelExport(length, self.page_size, ()))
        if isinstance(out, Exhausted):
            raise KVExhausted(f"KV pool exhausted bringing request {request}'s label {label!r} in: "
                              f"{out.needed} pages needed, {out.free} free")
        slots = self._slots(self.pages.page_table(request, label), length)
        k_flat, v_flat = self._flat()
        k_flat[:, slots] = k.to(k_flat.device, k_flat.dtype)
        v_flat[:, slots] = v.to(v_flat.device, v_flat.dtype)


def _flat_positions(positions: list[Tensor | int]) -> Tensor:
    """The items' positions packed [sum n] int64: one torch.tensor for a decode step (every item one
    int), else each int as a one-element tensor and a cat."""
    if all(isinstance(p, int) for p in positions):
        return torch.tensor(positions, dtype=torch.int64)  # [B] (empty when no items)
    return torch.cat([torch.tensor([p]) if isinstance(p, int) else p for p in positions])  # [sum n]


def with_budget(write: Write, budget: int) -> Write:
    return replace(write, budget=budget)
