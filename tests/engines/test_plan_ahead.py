"""Planning decode step N+1 while step N runs (runtime/engines/plan_ahead.py): the prediction equals
what the page allocator really does, page crossings included; any difference is seen; a plan made
ahead is used only for the batch it was made for; at most one plan is ever in flight; both
backends plan on a side thread (FlashInfer on CUDA: alternating wrapper sets, stale plans refused)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

import pytest
import torch
from wgc.runtime.engines.attention import AttentionBatch, TorchAttention
from wgc.runtime.engines.kv_pages import Appended, PageAllocator
from wgc.runtime.engines.plan_ahead import PlanAhead, predict_next, same_batch

from tests.engines.cuda import flashinfer_attention

PAGE = 4


def decode_batch(pages: PageAllocator, rows: list[int]) -> AttentionBatch:
    """What a component does for a decode step: one token appended per row, then the step's batch."""
    cached = []
    for r in rows:
        cached.append(pages.length(r, "x"))
        out = pages.append(r, "x", 1)
        assert isinstance(out, Appended) and not out.copies
    return AttentionBatch([pages.page_table(r, "x") for r in rows], cached, [1] * len(rows), pages.page_size)


def prefilled(lengths: dict[int, int], num_pages: int = 64) -> PageAllocator:
    pages = PageAllocator(num_pages, PAGE)
    for r, n in lengths.items():
        pages.append(r, "x", n)
    return pages


class Recorder:
    """A backend whose plan is ("plan", batch); it records every plan and how many ran at once."""

    def __init__(self, delay: float = 0.0, fail: bool = False) -> None:
        self.delay, self.fail = delay, fail
        self.planned: list[AttentionBatch] = []
        self.async_calls = 0
        self.running = self.most_running = 0
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1)

    def plan(self, batch: AttentionBatch) -> tuple[str, AttentionBatch]:
        with self._lock:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        time.sleep(self.delay)
        with self._lock:
            self.running -= 1
            self.planned.append(batch)
        if self.fail and threading.current_thread() is not threading.main_thread():
            raise RuntimeError("planning ahead failed")
        return ("plan", batch)

    def plan_async(self, batch: AttentionBatch) -> Future:
        self.async_calls += 1
        return self._pool.submit(self.plan, batch)

    def attend(self, *args: object) -> torch.Tensor:
        raise AssertionError("not used")


def test_the_prediction_is_what_the_allocator_does_across_page_boundaries() -> None:
    pages = prefilled({1: 3, 2: 8, 3: 6, 4: 1})  # rows at every offset within a 4-token page
    rows = [3, 1, 4, 2]
    batch = decode_batch(pages, rows)
    crossings = 0
    for _ in range(12):
        predicted = predict_next(batch, pages.next_free(len(rows)))
        assert predicted is not None
        actual = decode_batch(pages, rows)
        crossings += sum(len(a) > len(b) for a, b in zip(actual.page_tables, batch.page_tables))
        assert same_batch(predicted, actual), (predicted, actual)
        batch = actual
    assert crossings == 12  # each row crossed into a new page 3 times


def test_a_crossing_takes_the_next_free_pages_rows_in_order() -> None:
    batch = AttentionBatch([[5, 2], [9], [7]], [7, 2, 3], [1, 1, 1], PAGE)  # kv 8, 3, 4: rows 0 and 2 full
    predicted = predict_next(batch, [11, 12, 13])
    assert predicted is not None
    assert predicted.page_tables == [[5, 2, 11], [9], [7, 12]]
    assert predicted.cached_lengths == [8, 3, 4] and predicted.q_lengths == [1, 1, 1]
    assert predict_next(batch, [11]) is None  # two rows need a page, one is free
    frozen = AttentionBatch([[5]], [3], [2], PAGE, write=False)
    assert predict_next(frozen, [1, 2]) is None  # a frozen prefix writes nothing: no next step
    after_prefill = predict_next(AttentionBatch([[5, 2]], [0], [6], PAGE), [])
    assert after_prefill is not None and after_prefill.cached_lengths == [6] and after_prefill.q_lengths == [1]


def test_every_kind_of_difference_is_seen() -> None:
    base = AttentionBatch([[5, 2], [9]], [5, 2], [1, 1], PAGE)
    assert same_batch(base, AttentionBatch([[5, 2], [9]], [5, 2], [1, 1], PAGE))
    different = {
        "joined": AttentionBatch([[5, 2], [9], [4]], [5, 2, 0], [1, 1, 1], PAGE),
        "left": AttentionBatch([[5, 2]], [5], [1], PAGE),
        "reordered": AttentionBatch([[9], [5, 2]], [2, 5], [1, 1], PAGE),
        "rolled back": AttentionBatch([[5, 2], [9]], [4, 2], [1, 1], PAGE),
        "page copied on write": AttentionBatch([[5, 3], [9]], [5, 2], [1, 1], PAGE),
        "more tokens": AttentionBatch([[5, 2], [9]], [5, 2], [1, 2], PAGE),
        "prefix mode": replace(base, mode="prefix"),
        "frozen": replace(base, write=False),
        "page size": AttentionBatch([[5], [9]], [5, 2], [1, 1], 8),
    }
    for what, batch in different.items():
        assert not same_batch(base, batch), what


def test_a_plan_made_ahead_is_used_only_for_its_batch() -> None:
    backend = Recorder()
    planner = PlanAhead(backend)
    pages = prefilled({1: 3, 2: 6})
    batch = decode_batch(pages, [1, 2])
    assert planner.plan(batch) == ("plan", batch)
    for _ in range(6):  # steady: every step uses the plan made ahead, made for an equal batch
        planner.ahead(batch, pages.next_free(2))
        batch = decode_batch(pages, [1, 2])
        kind, planned = planner.plan(batch)
        assert same_batch(planned, batch)
    assert planner.counters() == {"plan_ahead_hits": 6, "plan_ahead_misses": 0, "plan_ahead_unpredicted": 1}
    planner.ahead(batch, pages.next_free(2))
    pages.append(3, "x", 2)  # someone else's prefill takes the free page row 1 was predicted to get
    pages.append(1, "x", 1)  # ... and row 1 goes on by two tokens: its length differs too
    actual = decode_batch(pages, [1, 2])
    assert planner.plan(actual) == ("plan", actual)  # planned now, for the actual batch
    assert planner.counters()["plan_ahead_misses"] == 1
    assert backend.async_calls == 7 and backend.most_running == 1


def test_at_most_one_plan_is_in_flight_and_a_discarded_one_is_finished_first() -> None:
    backend = Recorder(delay=0.05)
    planner = PlanAhead(backend)
    one = AttentionBatch([[1]], [0], [1], PAGE)
    planner.ahead(one, [2])  # planning [[1]], 1 cached on the side thread (50 ms)
    other = AttentionBatch([[3]], [0], [2], PAGE)  # a prefill arrives: a miss
    assert planner.plan(other) == ("plan", other)
    assert backend.most_running == 1  # the side thread's plan was done before this one began
    planner.ahead(one, [2])
    planner.discard()
    planner.ahead(one, [2])
    planner.use(Recorder())  # another backend: the pending prediction is dropped, counted nowhere
    assert backend.most_running == 1  # (a prediction not yet started is cancelled instead)
    assert planner.counters() == {"plan_ahead_hits": 0, "plan_ahead_misses": 1, "plan_ahead_unpredicted": 0}


def test_a_failed_plan_ahead_is_planned_again_and_a_disabled_planner_never_plans_ahead() -> None:
    backend = Recorder(fail=True)
    planner = PlanAhead(backend)
    batch = AttentionBatch([[1]], [0], [1], PAGE)
    planner.ahead(batch, [2])
    nxt = AttentionBatch([[1]], [1], [1], PAGE)
    assert planner.plan(nxt) == ("plan", nxt)  # the side thread raised: planned on this thread
    assert planner.counters()["plan_ahead_misses"] == 1
    off = PlanAhead(backend, enabled=False)
    off.ahead(batch, [2])
    assert off.plan(nxt) == ("plan", nxt) and backend.async_calls == 1
    assert off.counters() == {"plan_ahead_hits": 0, "plan_ahead_misses": 0, "plan_ahead_unpredicted": 1}

    class SyncOnly:
        def plan(self, batch: AttentionBatch) -> str:
            return "sync"

    bare = PlanAhead(SyncOnly())  # type: ignore[arg-type]
    bare.ahead(batch, [2])
    assert not bare.active and bare.plan(nxt) == "sync"


def test_torch_plan_async_plans_on_a_side_thread_the_same_plan() -> None:
    backend = TorchAttention()
    batch = AttentionBatch([[5, 2, 7], [9]], [9, 2], [1, 1], PAGE)
    try:
        ahead = backend.plan_async(batch).result()
    finally:
        backend.close()
    now = backend.plan(batch)
    for field in ("write_slots", "key_slots", "q_index", "out_index"):
        assert torch.equal(getattr(ahead, field), getattr(now, field)), field
    assert (ahead.mask is None) == (now.mask is None)


# ---- on CUDA ------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_flashinfer_planned_ahead_attends_like_torch_and_refuses_a_stale_plan() -> None:
    attention_class = flashinfer_attention()
    heads, kv_heads, head_dim, page = 8, 2, 128, 16
    dev, dtype = torch.device("cuda"), torch.float16
    gen = torch.Generator().manual_seed(0)
    pages = torch.randn(2, 64, page, kv_heads, head_dim, generator=gen).to(dev, dtype)
    alloc = PageAllocator(64, page)
    for r, n in {1: 17, 2: 31, 3: 15}.items():
        alloc.append(r, "x", n)
    ours = attention_class(dev, heads, kv_heads, head_dim, page, dtype)
    reference = TorchAttention(dev)
    planner = PlanAhead(ours)
    try:
        fi_pages, torch_pages = pages.clone(), pages.clone()
        rows = [1, 2, 3]
        for step in range(6):
            if step == 4:
                rows = [1, 3]  # request 2 left: a miss, planned now (the prediction finished first)
            batch = decode_batch(alloc, rows)
            q = torch.randn(len(rows), heads, head_dim, generator=gen).to(dev, dtype)
            k = torch.randn(len(rows), kv_heads, head_dim, generator=gen).to(dev, dtype)
            v = torch.randn(len(rows), kv_heads, head_dim, generator=gen).to(dev, dtype)
            out = ours.attend(planner.plan(batch), q, k, v, fi_pages[0], fi_pages[1])
            want = reference.attend(reference.plan(batch), q, k, v, torch_pages[0], torch_pages[1])
            torch.testing.assert_close(out, want, atol=2e-3, rtol=2e-3)
            planner.ahead(batch, alloc.next_free(len(rows)))  # the step is issued: plan the next one
        planner.discard()
        assert planner.counters() == {"plan_ahead_hits": 4, "plan_ahead_misses": 1, "plan_ahead_unpredicted": 1}
        assert torch.equal(fi_pages, torch_pages)
        first = ours.plan(batch)
        ours.plan(batch)  # the other set
        ours.plan(batch)  # first's set again: first is stale
        with pytest.raises(RuntimeError, match="stale FlashInfer plan"):
            ours.attend(first, q, k, v, fi_pages[0], fi_pages[1])
    finally:
        ours.close()
        reference.close()
