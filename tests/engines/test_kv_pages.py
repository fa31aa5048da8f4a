"""The KV page allocator: layout, sharing with copy-on-write, exhaustion as a value, and its
invariants under random operation sequences checked against a simulated device memory."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wgc.runtime.engines.kv_pages import (
    Appended,
    Exhausted,
    LabelExport,
    PageAllocator,
    budget_bytes,
    page_bytes,
    pages_for_budget,
)

GIB = 1 << 30


def test_pool_size_derives_from_the_budget() -> None:
    assert page_bytes(16, 32, 8, 128, 2) == 2 << 20  # K and V × 32 layers × 8 heads × 128 × 2 B × 16 slots
    assert pages_for_budget(GIB, 16, 32, 8, 128, 2) == 512
    assert pages_for_budget(GIB + (2 << 20) - 1, 16, 32, 8, 128, 2) == 512  # whole pages only
    assert pages_for_budget(GIB // 2, 16, 32, 8, 128, 2) == 256
    assert pages_for_budget(0, 16, 32, 8, 128, 2) == 0
    with pytest.raises(ValueError, match="kv_heads"):
        pages_for_budget(GIB, 16, 32, 0, 128, 2)
    with pytest.raises(ValueError, match="negative"):
        pages_for_budget(-1, 16, 32, 8, 128, 2)


def test_budget_is_kv_memory_or_a_fraction_of_capacity() -> None:
    assert budget_bytes(123, 0.5, GIB) == 123
    assert budget_bytes(None, 0.25, 80 * GIB) == 20 * GIB
    with pytest.raises(ValueError, match="kv_memory"):
        budget_bytes(None, 0.5, None)
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        budget_bytes(None, 1.5, GIB)


def test_append_lays_tokens_out_page_by_page() -> None:
    a = PageAllocator(4, 4)
    first = a.append(7, "cond", 6)
    assert first == Appended([(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)], [])
    assert a.append(7, "cond", 3).slots == [(1, 2), (1, 3), (2, 0)]
    assert a.page_table(7, "cond") == [0, 1, 2] and a.length(7, "cond") == 9
    assert (a.used_pages, a.free_pages) == (3, 1)
    assert a.append(7, "cond", 0) == Appended([], [])
    a.check()


def test_fork_shares_pages_and_the_first_writer_copies_the_partial_one() -> None:
    a = PageAllocator(8, 4)
    a.append(1, "cond", 6)  # pages 0 (full), 1 (2 of 4)
    a.fork(1, "uncond", "cond")
    assert a.page_table(1, "uncond") == [0, 1] and a.used_pages == 2
    assert a.refcount(0) == a.refcount(1) == 2
    assert a.pages_needed(1, "uncond", 1) == 1
    step = a.append(1, "uncond", 1)
    assert step == Appended([(2, 2)], [(1, 2)])  # copy page 1 into page 2, then write slot 2
    assert a.page_table(1, "uncond") == [0, 2] and a.refcount(1) == 1
    assert a.append(1, "cond", 1) == Appended([(1, 2)], [])  # page 1 is now cond's alone
    assert a.refcount(0) == 2 and a.counters()["kv_copies"] == 1
    a.check()


def test_fork_at_a_page_boundary_copies_nothing() -> None:
    a = PageAllocator(8, 4)
    a.append(1, "cond", 8)
    a.fork(1, "uncond", "cond")
    assert a.append(1, "uncond", 2) == Appended([(2, 0), (2, 1)], [])
    assert a.append(1, "cond", 1) == Appended([(3, 0)], [])
    a.check()


def test_truncate_releases_pages_and_into_a_shared_page_means_copy_on_write() -> None:
    a = PageAllocator(8, 4)
    a.append(1, "x", 6)
    a.fork(1, "snap", "x")
    assert a.append(1, "x", 5).copies == [(1, 2)]  # x's partial page 1 is shared: copied to 2
    assert a.page_table(1, "x") == [0, 2, 3] and a.used_pages == 4
    a.truncate(1, "x", 4)  # back to the shared full page 0
    assert a.page_table(1, "x") == [0] and a.used_pages == 2
    a.truncate(1, "snap", 3)  # into shared page 0: the next write must not touch x's copy
    assert a.append(1, "snap", 1).copies == [(0, a.page_table(1, "snap")[0])]
    with pytest.raises(ValueError, match="holds 4"):
        a.truncate(1, "snap", 5)
    a.check()


def test_exhaustion_is_reported_and_changes_nothing() -> None:
    a = PageAllocator(3, 4)
    a.append(1, "cond", 7)
    a.fork(1, "uncond", "cond")
    before = a.counters()
    assert a.can_append(1, "cond", 1)  # page 1 is shared: writing it needs the last free page
    assert not a.can_append(1, "cond", 2)
    assert a.append(1, "cond", 2) == Exhausted(needed=2, free=1)
    assert not a.can_append(2, "new", 5)
    assert a.append(2, "new", 5) == Exhausted(needed=2, free=1)
    after = a.counters()
    assert after.pop("kv_exhausted") == 2
    before.pop("kv_exhausted")
    assert after == before and a.requests() == [1]
    a.check()


def test_shared_pages_are_freed_when_their_last_owner_goes() -> None:
    a = PageAllocator(6, 2)
    a.append(1, "a", 5)
    a.fork(1, "b", "a")
    a.free_label(1, "a")
    assert a.used_pages == 3 and a.labels(1) == ["b"]
    a.append(2, "a", 2)
    a.free_request(1)
    assert a.used_pages == 1 and a.requests() == [2]
    a.free_request(2)
    a.free_request(3)  # unknown: nothing to do
    assert a.free_pages == 6 and a.counters()["kv_labels"] == 0
    a.check()


def test_a_label_moves_between_ranks_of_different_page_sizes() -> None:
    src, dst = PageAllocator(4, 4), PageAllocator(8, 2)
    src.append(5, "cond", 7)
    state = src.export(5, "cond")
    assert state == LabelExport(7, 4, (0, 1))
    placed = dst.import_(5, "cond", state)
    assert isinstance(placed, Appended) and len(placed.slots) == 7 and placed.copies == []
    assert dst.length(5, "cond") == 7 and dst.used_pages == 4
    src.free_label(5, "cond")
    assert src.free_pages == 4
    with pytest.raises(ValueError, match="holds tokens"):
        dst.import_(5, "cond", state)
    assert PageAllocator(1, 2).import_(5, "cond", state) == Exhausted(needed=4, free=1)
    assert src.export(9, "none") == LabelExport(0, 4, ())


def test_an_empty_pool_reports_exhaustion_without_raising() -> None:
    a = PageAllocator(0, 16)
    assert a.append(1, "x", 1) == Exhausted(1, 0)
    a.fork(1, "y", "x")
    a.truncate(1, "x", 0)
    a.free_request(1)
    assert a.counters()["kv_pages"] == 0
    a.check()


def test_check_finds_corruption() -> None:
    a = PageAllocator(4, 2)
    a.append(1, "x", 3)
    a._refs[0] = 2  # a refcount that no sequence accounts for
    with pytest.raises(AssertionError, match="refcount 2 but held by 1"):
        a.check()
    a._refs[0] = 1
    a._free.append(0)  # both free and owned
    with pytest.raises(AssertionError, match="both free and owned"):
        a.check()


LABELS = ("cond", "uncond", "draft")
# (operation, request, pick among the request's labels, argument); weighted towards growth and forks
OPS = st.tuples(
    st.sampled_from(["append"] * 3 + ["decode_step"] * 2 + ["fork"] * 3 + ["truncate"] * 2
                    + ["move", "free_label", "free_request"]),
    st.integers(0, 1),
    st.integers(0, 7),
    st.integers(0, 6),
)


class Harness:
    """An allocator driven like a kv engine drives it, over a simulated device memory: every token
    written is a unique value, copies are performed, and every label must read back exactly the
    values it was given, so a page shared wrongly or written twice shows."""

    def __init__(self, num_pages: int, page_size: int) -> None:
        self.alloc = PageAllocator(num_pages, page_size)
        self.memory: dict[int, list[int | None]] = {p: [None] * page_size for p in range(num_pages)}
        self.model: dict[tuple[int, str], list[int]] = {}
        self.next_value = 0

    def label(self, request: int, pick: int) -> str:
        """Mostly a label that holds tokens, so that forks and writes meet shared pages."""
        held = [label for label in self.alloc.labels(request) if self.alloc.length(request, label)]
        choices = held * 2 + list(LABELS)
        return choices[pick % len(choices)]

    def apply(self, op: str, request: int, pick: int, arg: int) -> None:
        label, other = self.label(request, pick), LABELS[arg % len(LABELS)]
        match op:
            case "append":
                self.append(request, label, arg)
            case "decode_step":  # every label of the request grows, as in a batched guidance step
                for each in self.alloc.labels(request):
                    self.append(request, each, 1 + arg % 3)
            case "fork":
                self.fork(request, other, label)
            case "truncate":  # roll back a speculative step of up to 6 tokens
                self.truncate(request, label, max(0, self.alloc.length(request, label) - arg))
            case "move":
                self.move(request, label, other)
            case "free_label":
                self.free_label(request, label)
            case "free_request":
                self.free_request(request)

    def append(self, request: int, label: str, n: int) -> None:
        a = self.alloc
        needed, free, table = a.pages_needed(request, label, n), a.free_pages, a.page_table(request, label)
        can = a.can_append(request, label, n)
        placed = a.append(request, label, n)
        if isinstance(placed, Exhausted):
            assert not can and placed == Exhausted(needed, free) and needed > free
            assert a.free_pages == free and a.page_table(request, label) == table
            return
        assert can and a.free_pages == free - needed and len(placed.slots) == n
        for old, new in placed.copies:
            self.memory[new] = list(self.memory[old])
        for page, slot in placed.slots:
            self.memory[page][slot] = self.next_value
            self.model.setdefault((request, label), []).append(self.next_value)
            self.next_value += 1

    def fork(self, request: int, into: str, source: str) -> None:
        free = self.alloc.free_pages
        self.alloc.fork(request, into, source)
        assert self.alloc.free_pages >= free  # fork allocates nothing
        if into != source:
            self.model.pop((request, into), None)
            if (request, source) in self.model:
                self.model[(request, into)] = list(self.model[(request, source)])

    def truncate(self, request: int, label: str, n: int) -> None:
        self.alloc.truncate(request, label, n)
        if (request, label) in self.model:
            del self.model[(request, label)][n:]

    def move(self, request: int, src: str, dst: str) -> None:
        if src == dst:
            return
        self.free_label(request, dst)
        state = self.alloc.export(request, src)
        placed = self.alloc.import_(request, dst, state)
        if isinstance(placed, Exhausted):
            return
        assert placed.copies == []
        ps = state.page_size
        for i, (page, slot) in enumerate(placed.slots):
            self.memory[page][slot] = self.memory[state.pages[i // ps]][i % ps]
        if state.length:
            self.model[(request, dst)] = list(self.model[(request, src)])
        self.free_label(request, src)

    def free_label(self, request: int, label: str) -> None:
        self.alloc.free_label(request, label)
        self.model.pop((request, label), None)

    def free_request(self, request: int) -> None:
        self.alloc.free_request(request)
        for key in [k for k in self.model if k[0] == request]:
            del self.model[key]

    def consistent(self) -> None:
        a = self.alloc
        a.check()
        ps = a.page_size
        for (request, label), values in self.model.items():
            table = a.page_table(request, label)
            assert a.length(request, label) == len(values)
            assert [self.memory[table[i // ps]][i % ps] for i in range(len(values))] == values
        held = {(request, label) for request in a.requests() for label in a.labels(request)}
        assert held == {key for key, values in self.model.items() if values}


@settings(max_examples=200, deadline=None)
@given(num_pages=st.integers(0, 24), page_size=st.integers(1, 4), ops=st.lists(OPS, min_size=10, max_size=60))
def test_invariants_hold_under_random_operation_sequences(num_pages: int, page_size: int,
                                                          ops: list[tuple[str, int, int, int]]) -> None:
    h = Harness(num_pages, page_size)
    for op in ops:
        h.apply(*op)  # a valid call never raises, exhaustion included
        h.consistent()
    for request in h.alloc.requests():
        h.alloc.free_request(request)
    h.alloc.check()
    assert h.alloc.free_pages == h.alloc.num_pages and h.alloc.counters()["kv_labels"] == 0
