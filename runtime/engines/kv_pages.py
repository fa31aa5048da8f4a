"""The KV page allocator of one kv component on one rank: a pure object over plain data (no torch).

The pool is `num_pages` pages of `page_size` token slots, sized from memory (`pages_for_budget`),
never a constant. Per request the allocator keeps several labels (guidance contexts over one
pool); each label is a sequence: the page ids its tokens live in and its length in tokens. Token
i of a sequence lives at slot `i % page_size` of page `pages[i // page_size]`. A label that holds
nothing and an absent label are the same thing.

Sharing. Each page has a reference count, the number of sequences that hold it. `fork` makes the
target hold exactly the source's pages, its partial last page included, and allocates nothing:
it can never run out (and `Component.fork` has no way to say so). A sequence writes only at its
end, so the one page it ever writes is its partial last page (or a fresh one). `append` copies
that page first when another sequence still holds it (copy-on-write), and reports the copy as
(old page, new page) for the engine to perform on the device before the write. Full pages are
never copied: every holder only reads them. Copying lazily rather than at fork time: no copy for
a snapshot never written to, one rule also covers `truncate` back into a shared page, and a fork
whose two sides both grow costs one copy (the second writer then owns the old page alone).

Prefix caching. A full page whose tokens the engine knows is published under the digest of its whole
token prefix (`prefix_cache.py`). A page whose last holder lets go keeps its content: it waits on a
second free list, least recently used first, still named by its digest, and is handed out only once
the plain free pages run out. A fresh label whose prompt starts with published pages `attach`es them
(shared, reference-counted, revived from the free list when no one held them) and computes only the
rest. A published page is only ever read: writing into it (a truncated label growing again in a page
nobody else holds) unpublishes it first, and a shared one is copied as above.

Stamps. Each sequence carries a stamp, (uid, edits): `uid` is new for every sequence object the
allocator makes (a first append, a fork's target, an attached prefix, an import), `edits` counts
every change of its pages or length (append, truncate, undoing a copy). A reader that keeps a copy
of a sequence's tokens outside the pages (the CPU decode mirror, kv_mirror.py) records the stamp
its copy is of and trusts the copy only while the stamp says nothing else happened: whatever path
writes a sequence's pages (a prefill chunk, a swap-in, an import, a rollback, a fork) goes through
one of these changes, so no caller has to remember to tell it.

Exhaustion is a value, not an exception: `append` and `import_` return `Exhausted` and change
nothing (never half-allocate); `can_append` and `pages_needed` let the scheduler check first.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from itertools import chain, islice
from typing import NamedTuple

from wgc.runtime.engines.prefix_cache import PrefixIndex


def page_bytes(page_size: int, kv_layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """Bytes of one page: K and V of every layer, `kv_heads` being this rank's share of the heads."""
    return 2 * kv_layers * kv_heads * head_dim * dtype_bytes * page_size


def pages_for_budget(budget_bytes: int, page_size: int, kv_layers: int, kv_heads: int, head_dim: int,
                     dtype_bytes: int) -> int:
    """How many whole pages fit in `budget_bytes` (the same arithmetic as the placement's memory table)."""
    for name, value in (("page_size", page_size), ("kv_layers", kv_layers), ("kv_heads", kv_heads),
                        ("head_dim", head_dim), ("dtype_bytes", dtype_bytes)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, found {value}")
    if budget_bytes < 0:
        raise ValueError(f"the KV budget must not be negative, found {budget_bytes}")
    return budget_bytes // page_bytes(page_size, kv_layers, kv_heads, head_dim, dtype_bytes)


def budget_bytes(kv_memory: int | None, fraction: float | None, capacity_bytes: int | None) -> int:
    """The pool's bytes from the engine settings: `kv_memory` as given, else `fraction` of the rank's
    capacity (the device's memory on GPU, the placement's cluster.memory on CPU)."""
    if kv_memory is not None:
        return kv_memory
    if fraction is None or capacity_bytes is None:
        raise ValueError("a KV pool needs kv_memory, or kv_memory_fraction and the rank's memory capacity")
    if not 0 < fraction <= 1:
        raise ValueError(f"kv_memory_fraction must be in (0, 1], found {fraction}")
    return int(fraction * capacity_bytes)


class Appended(NamedTuple):
    """Where appended tokens go, and the page copies the engine must do first (whole pages)."""

    slots: list[tuple[int, int]]  # (page, slot) of each appended token, in order
    copies: list[tuple[int, int]]  # (old page, new page): copy-on-write of a shared partial page


class OneEach(NamedTuple):
    """`append_one_each`'s result, per row in the keys' order."""

    lengths: list[int]  # each label's length before the token
    tables: list[list[int]]  # each label's page table after it (a copy)
    copies: list[tuple[int, int, int]]  # (row, old page, new page): copy-on-write of a shared partial page
    stamps: list[Stamp]  # each label's stamp after the token


@dataclass(frozen=True)
class Exhausted:
    """Not enough free pages: nothing was allocated. The scheduler defers or rejects the request."""

    needed: int
    free: int


@dataclass(frozen=True)
class LabelExport:
    """A label's metadata for moving it to another rank: read its tokens from these pages, in order."""

    length: int
    page_size: int
    pages: tuple[int, ...]


Stamp = tuple[int, int]  # (uid, edits) of a sequence: see the module docstring

_UIDS = itertools.count(1)  # one counter for every allocator: a uid is never reused, even across pools


@dataclass(slots=True)
class _Sequence:
    pages: list[int]
    length: int
    uid: int = field(default_factory=lambda: next(_UIDS))
    edits: int = 0  # changes of pages or length since the sequence was made


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class PageAllocator:
    """Pages of one pool: reference-counted, shared between the labels of a request by fork."""

    def __init__(self, num_pages: int, page_size: int) -> None:
        if num_pages < 0:
            raise ValueError(f"num_pages must not be negative, found {num_pages}")
        if page_size < 1:
            raise ValueError(f"page_size must be at least 1, found {page_size}")
        self.num_pages = num_pages
        self.page_size = page_size
        self._refs = [0] * num_pages  # page → number of sequences holding it
        self._free: deque[int] = deque(range(num_pages))  # refcount 0, no published content
        self._cached: OrderedDict[int, None] = OrderedDict()  # refcount 0, published content; LRU first
        self._seqs: dict[int, dict[str, _Sequence]] = {}  # request → label → sequence
        self.prefix = PrefixIndex()
        self._events = {"kv_exhausted": 0, "kv_copies": 0, "kv_forks": 0, "prefix_hit_pages": 0,
                        "prefix_evictions": 0}

    # ---- queries -----------------------------------------------------------------------

    @property
    def free_pages(self) -> int:
        return len(self._free) + len(self._cached)

    @property
    def used_pages(self) -> int:
        return self.num_pages - self.free_pages

    def requests(self) -> list[int]:
        return list(self._seqs)

    def labels(self, request: int) -> list[str]:
        return list(self._seqs.get(request, ()))

    def length(self, request: int, label: str) -> int:
        seq = self._get(request, label)
        return 0 if seq is None else seq.length

    def page_table(self, request: int, label: str) -> list[int]:
        seq = self._get(request, label)
        return [] if seq is None else list(seq.pages)

    def refcount(self, page: int) -> int:
        return self._refs[page]

    def pages_needed(self, request: int, label: str, n_tokens: int) -> int:
        """Free pages `append(request, label, n_tokens)` takes now, a copy-on-write page included;
        summed over a batch, an upper bound (after one side of a fork copies, the other needn't)."""
        seq = self._get(request, label)
        return _ceil_div(n_tokens, self.page_size) if seq is None else self._needed(seq, n_tokens)

    def tails(self, keys: list[tuple[int, str]]) -> list[tuple[int, bool]]:
        """Per (request, label): its length and whether its partial last page is shared (a write there
        copies it first), in one pass: a batch's rows asked one call each was a dozen lookups a row."""
        seqs, refs, ps = self._seqs, self._refs, self.page_size
        out: list[tuple[int, bool]] = []
        for request, label in keys:
            labels = seqs.get(request)
            seq = None if labels is None else labels.get(label)
            if seq is None:
                out.append((0, False))
            else:
                out.append((seq.length, bool(seq.length % ps) and refs[seq.pages[-1]] > 1))
        return out

    def stamps(self, keys: list[tuple[int, str]]) -> list[Stamp | None]:
        """Per (request, label): its stamp now, None when it holds nothing."""
        out: list[Stamp | None] = []
        for request, label in keys:
            seq = self._get(request, label)
            out.append(None if seq is None else (seq.uid, seq.edits))
        return out

    def append_one_each(self, keys: list[tuple[int, str]]) -> OneEach | Exhausted:
        """`append(request, label, 1)` for every key (a decode step: distinct labels that each hold
        tokens), whole or nothing, in one pass. Exhausted, and no change, when the pages needed
        exceed the free ones; KeyError, and no change, when a key holds nothing (the caller then
        takes the general path)."""
        seqs, refs, ps = self._seqs, self._refs, self.page_size
        rows = [seqs[request][label] for request, label in keys]
        needed = sum(1 for s in rows if not s.length % ps or refs[s.pages[-1]] > 1)
        if needed > self.free_pages:  # not counted in kv_exhausted: the engine checks a step's room first
            return Exhausted(needed, self.free_pages)
        copies: list[tuple[int, int, int]] = []
        tables: list[list[int]] = []
        stamps: list[Stamp] = []
        lengths = [s.length for s in rows]
        for i, seq in enumerate(rows):
            if not seq.length % ps:
                seq.pages.append(self._take())
            elif refs[seq.pages[-1]] > 1:
                old, new = seq.pages[-1], self._take()
                refs[old] -= 1  # still held by another sequence
                seq.pages[-1] = new
                copies.append((i, old, new))
                self._events["kv_copies"] += 1
            else:
                self.prefix.forget(seq.pages[-1])  # about to be written: its published content goes stale
            seq.length += 1
            seq.edits += 1
            tables.append(list(seq.pages))
            stamps.append((seq.uid, seq.edits))
        return OneEach(lengths, tables, copies, stamps)

    def can_append(self, request: int, label: str, n_tokens: int) -> bool:
        return self.pages_needed(request, label, n_tokens) <= self.free_pages

    def next_free(self, count: int) -> list[int]:
        """The (up to) `count` pages the next allocations take, in the order they take them; a
        prediction only: any allocation or free in between may change it (plan_ahead.py checks)."""
        return list(islice(chain(self._free, self._cached), max(count, 0)))

    # ---- changes -----------------------------------------------------------------------

    def append(self, request: int, label: str, n_tokens: int) -> Appended | Exhausted:
        """Room for `n_tokens` more tokens at the label's end, or Exhausted and no change at all."""
        if n_tokens < 0:
            raise ValueError(f"cannot append {n_tokens} tokens")
        if n_tokens == 0:
            return Appended([], [])
        seq = self._get(request, label)
        if seq is None:
            seq = _Sequence([], 0)
        needed = self._needed(seq, n_tokens)
        if needed > self.free_pages:
            self._events["kv_exhausted"] += 1
            return Exhausted(needed, self.free_pages)
        ps = self.page_size
        copies: list[tuple[int, int]] = []
        if seq.length % ps and self._refs[seq.pages[-1]] > 1:
            old, new = seq.pages[-1], self._take()
            self._refs[old] -= 1  # still held by another sequence
            seq.pages[-1] = new
            copies.append((old, new))
            self._events["kv_copies"] += 1
        elif seq.length % ps:
            self.prefix.forget(seq.pages[-1])  # about to be written: its published content goes stale
        end = seq.length + n_tokens
        seq.pages.extend(self._take() for _ in range(_ceil_div(end, ps) - len(seq.pages)))
        slots = [(seq.pages[i // ps], i % ps) for i in range(seq.length, end)]
        seq.length = end
        seq.edits += 1
        self._seqs.setdefault(request, {})[label] = seq
        return Appended(slots, copies)

    def fork(self, request: int, target: str, source: str) -> None:
        """Make `target` a snapshot of `source`: it holds the same pages (shared, nothing copied)."""
        if target == source:
            return
        src = self._get(request, source)
        self.free_label(request, target)
        if src is None:
            return
        for page in src.pages:
            self._refs[page] += 1
        self._seqs.setdefault(request, {})[target] = _Sequence(list(src.pages), src.length)
        self._events["kv_forks"] += 1

    def truncate(self, request: int, label: str, n_tokens: int) -> None:
        """Keep the first `n_tokens` tokens (undo a speculative step); pages past them are released."""
        seq = self._get(request, label)
        length = 0 if seq is None else seq.length
        if not 0 <= n_tokens <= length:
            raise ValueError(f"cannot truncate label {label!r} of request {request} to {n_tokens} tokens: "
                             f"it holds {length}")
        if seq is None or n_tokens == 0:
            self.free_label(request, label)  # empty and absent are the same
            return
        keep = _ceil_div(n_tokens, self.page_size)
        self._drop(seq.pages[keep:])
        del seq.pages[keep:]
        seq.length = n_tokens
        seq.edits += 1

    def undo_copy(self, request: int, label: str, old: int, new: int) -> None:
        """Take back `append`'s copy-on-write (old page, new page), the step that wrote it aborted: the
        label holds `old` again, still shared, and `new` is released."""
        seq = self._get(request, label)
        if seq is None or new not in seq.pages:
            return
        seq.pages[seq.pages.index(new)] = old
        seq.edits += 1
        self._refs[old] += 1
        self._drop([new])

    def free_label(self, request: int, label: str) -> None:
        labels = self._seqs.get(request)
        if labels is None or label not in labels:
            return
        self._drop(labels.pop(label).pages)
        if not labels:
            del self._seqs[request]

    def free_request(self, request: int) -> None:
        """The request finished or was cancelled: every label's pages are released."""
        for seq in self._seqs.pop(request, {}).values():
            self._drop(seq.pages)

    # ---- prefix caching ----------------------------------------------------------------------

    def publish(self, request: int, label: str, digests: list[bytes], start: int = 0) -> int:
        """Name the label's full pages from page `start` on by their prefix digests (digests[i]: page
        start + i); a page or digest already published is left as it is. Returns how many were new."""
        seq = self._get(request, label)
        if seq is None:
            return 0
        full = min(start + len(digests), seq.length // self.page_size)
        return sum(self.prefix.publish(seq.pages[i], digests[i - start]) for i in range(start, full))

    def match(self, digests: list[bytes]) -> list[int]:
        """The published pages of the longest prefix of `digests` (read-only: nothing is held)."""
        return self.prefix.match(digests)

    def attach(self, request: int, label: str, pages: list[int]) -> None:
        """Make an empty label hold these published full pages (from `match`), shared."""
        if self.length(request, label):
            raise ValueError(f"cannot attach a prefix to label {label!r} of request {request}: it holds tokens")
        if not pages:
            return
        for page in pages:
            if self._refs[page] == 0:
                del self._cached[page]  # revived: its content is still there
            self._refs[page] += 1
        self._seqs.setdefault(request, {})[label] = _Sequence(list(pages), len(pages) * self.page_size)
        self._events["prefix_hit_pages"] += len(pages)

    # ---- moving a label between ranks ----------------------------------------------------

    def export(self, request: int, label: str) -> LabelExport:
        """What the receiving rank needs; the label stays here until the caller frees it."""
        seq = self._get(request, label)
        if seq is None:
            return LabelExport(0, self.page_size, ())
        return LabelExport(seq.length, self.page_size, tuple(seq.pages))

    def import_(self, request: int, label: str, state: LabelExport) -> Appended | Exhausted:
        """Room for an exported label here: token i of `state` goes to `slots[i]` (page sizes may differ)."""
        if self.length(request, label):
            raise ValueError(f"cannot import into label {label!r} of request {request}: it holds tokens")
        return self.append(request, label, state.length)

    # ---- accounting ----------------------------------------------------------------------

    def counters(self) -> dict[str, int]:
        labels = [seq for per in self._seqs.values() for seq in per.values()]
        return {
            "kv_pages": self.num_pages,
            "kv_pages_used": self.used_pages,
            "kv_pages_free": self.free_pages,
            "kv_pages_shared": sum(1 for r in self._refs if r > 1),
            "kv_requests": len(self._seqs),
            "kv_labels": len(labels),
            "kv_tokens": sum(seq.length for seq in labels),
            "prefix_cached_pages": len(self.prefix),
            **self._events,
        }

    def check(self) -> None:
        """Raise AssertionError unless every page is free or owned, never both, none lost, and each
        page's reference count is the number of sequences holding it."""
        problems: list[str] = []
        held = [0] * self.num_pages
        for request, labels in self._seqs.items():
            if not labels:
                problems.append(f"request {request} has an empty label table")
            for label, seq in labels.items():
                where = f"request {request} label {label!r}"
                if not seq.length:
                    problems.append(f"{where} is kept though empty")
                if len(seq.pages) != _ceil_div(seq.length, self.page_size):
                    problems.append(f"{where}: {len(seq.pages)} pages for {seq.length} tokens")
                if len(set(seq.pages)) != len(seq.pages):
                    problems.append(f"{where} holds a page twice: {seq.pages}")
                for page in seq.pages:
                    if not 0 <= page < self.num_pages:
                        problems.append(f"{where} holds page {page}, outside the pool")
                    else:
                        held[page] += 1
        for page, (refs, count) in enumerate(zip(self._refs, held)):
            if refs != count:
                problems.append(f"page {page}: refcount {refs} but held by {count} sequences")
        free = [*self._free, *self._cached]
        if len(set(free)) != len(free):
            problems.append("a page is on the free lists twice")
        if any(not self.prefix.has(page) for page in self._cached):
            problems.append("a page waits on the cached free list with no published content")
        if any(self.prefix.has(page) for page in self._free):
            problems.append("a published page is on the plain free list")
        unowned = {page for page, refs in enumerate(self._refs) if refs == 0}
        if set(free) != unowned:
            lost, both = sorted(unowned - set(free)), sorted(set(free) - unowned)
            problems.append(f"pages neither free nor owned: {lost}; pages both free and owned: {both}")
        if problems:
            raise AssertionError("; ".join(problems))

    # ---- internals -----------------------------------------------------------------------

    def _get(self, request: int, label: str) -> _Sequence | None:
        labels = self._seqs.get(request)
        return None if labels is None else labels.get(label)

    def _needed(self, seq: _Sequence, n_tokens: int) -> int:
        if n_tokens <= 0:
            return 0
        cow = 1 if seq.length % self.page_size and self._refs[seq.pages[-1]] > 1 else 0
        return cow + _ceil_div(seq.length + n_tokens, self.page_size) - len(seq.pages)

    def _take(self) -> int:
        """A free page: a plain one, else the least recently used cached one (its content dropped)."""
        if self._free:
            page = self._free.popleft()
        else:
            page, _ = self._cached.popitem(last=False)
            self.prefix.forget(page)
            self._events["prefix_evictions"] += 1
        self._refs[page] = 1
        return page

    def _drop(self, pages: list[int]) -> None:
        for page in pages:
            self._refs[page] -= 1
            if self._refs[page] == 0:
                if self.prefix.has(page):
                    self._cached[page] = None
                else:
                    self._free.append(page)
