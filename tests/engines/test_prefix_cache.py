"""Prefix caching in the allocator: chain digests, publish/match/attach with reference counts, the
cached free list (revived by attach, handed out after the plain free pages, least recently used
first, unpublished on eviction), writes into a published page, and the invariants under random
operation sequences that mix prefix caching with appends, forks, truncations and frees."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wgc.runtime.engines.kv_pages import PageAllocator
from wgc.runtime.engines.prefix_cache import ROOT, PrefixIndex, chain_digests

from tests.engines.test_kv_pages import OPS, Harness


@settings(max_examples=100, deadline=None)
@given(tokens=st.lists(st.integers(-2**40, 2**40), min_size=4, max_size=20), page_size=st.integers(1, 4),
       data=st.data())
def test_a_page_digest_names_its_whole_prefix(tokens: list[int], page_size: int, data: st.DataObject) -> None:
    digests = chain_digests(tokens, page_size)
    assert len(digests) == len(tokens) // page_size and len(set(digests)) == len(digests)
    assert all(len(d) == 16 for d in digests)
    where = data.draw(st.integers(0, len(tokens) - 1))
    changed = [*tokens[:where], tokens[where] + 1, *tokens[where + 1:]]
    other = chain_digests(changed, page_size)
    page = where // page_size
    assert other[:page] == digests[:page]  # pages before the change keep their names
    assert all(a != b for a, b in zip(other[page:], digests[page:]))  # it and every later page differ
    start = data.draw(st.integers(0, len(digests)))
    parent = digests[start - 1] if start else ROOT
    assert chain_digests(tokens, page_size, start, parent) == digests[start:]  # continuing a chain


def test_the_chain_depends_on_order_and_ignores_a_partial_page() -> None:
    assert chain_digests([1, 2, 3, 4], 2) != chain_digests([3, 4, 1, 2], 2)[::-1]
    assert chain_digests([1, 2, 3], 2) == chain_digests([1, 2, 9], 2)
    assert chain_digests([1], 2) == []


def test_the_index_holds_one_page_per_digest_and_matches_a_prefix() -> None:
    a, b, c = chain_digests([1, 2, 3], 1)
    index = PrefixIndex()
    assert index.publish(5, a) and index.publish(6, b)
    assert not index.publish(7, a) and not index.publish(5, c)  # digest taken; page taken
    assert len(index) == 2 and index.has(5) and not index.has(7)
    assert index.match([a, b, c]) == [5, 6]
    assert index.match([b, a]) == [6, 5] and index.match([c, a]) == []
    index.forget(5)
    index.forget(5)  # twice: nothing left to forget
    assert index.match([a, b]) == [] and len(index) == 1 and index.publish(7, a)


def published(num_pages: int = 8, page_size: int = 4, tokens: int = 9) -> tuple[PageAllocator, list[bytes]]:
    """Request 1 holds `tokens` tokens whose full pages are published."""
    alloc = PageAllocator(num_pages, page_size)
    alloc.append(1, "x", tokens)
    digests = chain_digests(list(range(tokens)), page_size)
    assert alloc.publish(1, "x", digests) == len(digests)
    return alloc, digests


def test_publish_match_and_attach_count_references() -> None:
    a, digests = published()
    assert a.page_table(1, "x") == [0, 1, 2] and len(digests) == 2
    assert a.publish(1, "x", digests) == 0  # already published
    assert a.match(digests) == [0, 1] and a.match(chain_digests([9, *range(1, 8)], 4)) == []
    assert a.match(chain_digests([*range(4), 9, 5, 6, 7], 4)) == [0]
    assert a.counters()["prefix_cached_pages"] == 2
    a.attach(2, "y", a.match(digests))
    assert a.page_table(2, "y") == [0, 1] and a.length(2, "y") == 8
    assert [a.refcount(p) for p in range(3)] == [2, 2, 1] and a.used_pages == 3
    assert a.counters()["prefix_hit_pages"] == 2 and a.counters()["kv_pages_shared"] == 2
    with pytest.raises(ValueError, match="holds tokens"):
        a.attach(2, "y", [0])
    a.attach(2, "z", [])
    assert a.labels(2) == ["y"]
    a.check()


def test_publish_names_only_full_pages_from_start() -> None:
    a = PageAllocator(8, 4)
    a.append(1, "x", 6)
    digests = chain_digests(list(range(12)), 4)  # three names, one full page
    assert a.publish(1, "x", digests) == 1 and a.match(digests) == [0]
    a.append(1, "x", 6)
    assert a.publish(1, "x", digests[1:], start=1) == 2 and a.match(digests) == [0, 1, 2]
    assert a.publish(9, "none", digests) == 0
    a.check()


def test_a_released_published_page_is_cached_and_revived_by_attach() -> None:
    a, digests = published()
    a.free_request(1)
    assert a.used_pages == 0 and a.free_pages == 8
    assert a.match(digests) == [0, 1]  # still named: their content is kept
    a.check()
    a.attach(3, "x", a.match(digests))
    assert a.used_pages == 2 and [a.refcount(0), a.refcount(1)] == [1, 1]
    assert a.next_free(8) == [3, 4, 5, 6, 7, 2]  # the revived pages left the free lists
    a.check()
    assert a.append(3, "x", 1).slots == [(3, 0)]  # the label grows past its attached prefix
    a.check()


def test_plain_free_pages_go_before_cached_ones_and_eviction_unpublishes() -> None:
    a, digests = published(num_pages=4, tokens=8)
    a.free_request(1)  # pages 0, 1 cached (0 least recently used); 2, 3 plain
    assert a.next_free(4) == [2, 3, 0, 1]
    a.attach(2, "x", [0])
    a.free_request(2)  # page 0 used again: now 1 is the least recently used
    assert a.next_free(4) == [2, 3, 1, 0]
    assert a.append(3, "x", 8).slots[0] == (2, 0) and a.match(digests) == [0, 1]
    assert a.counters()["prefix_evictions"] == 0
    assert a.append(3, "x", 1).slots == [(1, 0)]  # plain pages spent: the LRU cached page is evicted
    assert a.match(digests) == [0] and a.counters()["prefix_evictions"] == 1
    assert a.counters()["prefix_cached_pages"] == 1
    a.append(3, "x", 4)
    assert a.match(digests) == [] and len(a.prefix) == 0 and a.free_pages == 0
    a.check()


def test_writing_into_a_published_partial_page_unpublishes_it() -> None:
    a, digests = published(tokens=8)
    a.truncate(1, "x", 6)  # into page 1, held by no one else: still published until written
    assert a.match(digests) == [0, 1]
    assert a.append(1, "x", 1) == ([(1, 2)], [])
    assert a.match(digests) == [0] and a.counters()["prefix_cached_pages"] == 1
    a.free_request(1)
    assert a.next_free(8) == [2, 3, 4, 5, 6, 7, 1, 0]  # page 1 went back to the plain free list
    a.check()


def test_writing_into_a_shared_published_page_copies_it_and_keeps_it_named() -> None:
    a, digests = published(tokens=8)
    a.attach(2, "y", a.match(digests))
    a.truncate(1, "x", 6)
    step = a.append(1, "x", 1)
    assert step.copies == [(1, 2)] and a.match(digests) == [0, 1] and a.page_table(2, "y") == [0, 1]
    a.check()


def test_exhaustion_counts_cached_pages_as_free() -> None:
    a, digests = published(num_pages=3, tokens=8)
    a.free_request(1)
    assert a.can_append(2, "x", 12) and not a.can_append(2, "x", 13)
    a.append(2, "x", 12)
    assert a.match(digests) == [] and a.counters()["prefix_evictions"] == 2
    a.check()


PREFIX_OPS = st.one_of(
    OPS,
    st.tuples(st.sampled_from(["publish", "publish", "attach", "attach", "rewrite"]), st.integers(0, 1), st.integers(0, 7),
              st.integers(0, 6)),
)


class PrefixHarness(Harness):
    """The allocator harness with prefix caching: a label publishes its full pages under digests of
    the values it holds (each written token is a unique value, so the values are its tokens), and a
    label attaches the published pages of a recorded chain. Every page a digest names must still
    hold the values it was published with, so a cached page handed out, or written, while still
    named shows; and so does an attached label reading anything but the chain's values."""

    def __init__(self, num_pages: int, page_size: int) -> None:
        super().__init__(num_pages, page_size)
        self.chains: list[list[int]] = []  # the values of every label ever published

    def apply(self, op: str, request: int, pick: int, arg: int) -> None:
        match op:
            case "publish":
                self.publish(request, self.held(request, pick))
            case "attach":
                self.attach(request, self.label(request, pick), arg)
            case "rewrite":  # a rejected speculative token rolled back, another written in its place
                label = self.held(request, pick)
                length = self.alloc.length(request, label)
                if length:
                    self.truncate(request, label, max(0, length - 1 - arg % 3))
                    self.append(request, label, 1 + arg % 2)
            case _:
                super().apply(op, request, pick, arg)

    def held(self, request: int, pick: int) -> str:
        """A label that holds tokens, when the request has one."""
        held = [label for label in self.alloc.labels(request) if self.alloc.length(request, label)]
        return held[pick % len(held)] if held else self.label(request, pick)

    def publish(self, request: int, label: str) -> None:
        values = self.model.get((request, label), [])
        full = len(values) // self.alloc.page_size
        before = len(self.alloc.prefix)
        new = self.alloc.publish(request, label, chain_digests(values, self.alloc.page_size))
        assert len(self.alloc.prefix) == before + new and new <= full
        if full:
            self.chains.append(list(values))

    def attach(self, request: int, label: str, pick: int) -> None:
        if not self.chains:
            return
        values = self.chains[pick % len(self.chains)]
        pages = self.alloc.match(chain_digests(values, self.alloc.page_size))
        self.free_label(request, label)
        used = self.alloc.used_pages
        revived = sum(1 for p in pages if self.alloc.refcount(p) == 0)
        self.alloc.attach(request, label, pages)
        assert self.alloc.used_pages == used + revived  # attach allocates nothing: it revives or shares
        if pages:
            self.model[(request, label)] = values[:len(pages) * self.alloc.page_size]

    def consistent(self) -> None:
        super().consistent()
        ps = self.alloc.page_size
        for values in self.chains:
            for i, page in enumerate(self.alloc.match(chain_digests(values, ps))):
                assert self.memory[page] == values[i * ps:(i + 1) * ps], (page, values)


@settings(max_examples=200, deadline=None)
@given(num_pages=st.integers(0, 16), page_size=st.integers(1, 4),
       ops=st.lists(PREFIX_OPS, min_size=10, max_size=60))
def test_prefix_caching_keeps_the_invariants_under_random_operation_sequences(
        num_pages: int, page_size: int, ops: list[tuple[str, int, int, int]]) -> None:
    h = PrefixHarness(num_pages, page_size)
    for op in ops:
        h.apply(*op)
        h.consistent()
    for request in h.alloc.requests():
        h.alloc.free_request(request)
    h.alloc.check()
    assert h.alloc.free_pages == h.alloc.num_pages and h.alloc.used_pages == 0
    assert h.alloc.counters()["prefix_cached_pages"] == len(h.alloc._cached)
