"""Planning the attention of decode step N+1 on a side thread while step N runs.

A decode loop's next batch is, most of the time, this one again with every sequence one token
longer: the same sequences in the same order, one new token each, the same page tables except
where a sequence crosses into a new page (it gets the allocator's next free page, rows in order).
After step N's forward has been issued, `PlanAhead.ahead` predicts that batch (`predict_next`) and
hands it to the backend's `plan_async` (one side thread). At step N+1, `PlanAhead.plan` compares
the actual batch with the prediction on the host (`same_batch`: plain list equality, no device
work): equal, the plan made ahead is used (a hit); different (a sequence joined, left, finished,
was rolled back by speculation, a page was copied on write or taken by someone else), it is
discarded and the step is planned now (a miss). A plan is a function of its AttentionBatch alone,
so an equal batch means an equal plan: a stale plan is never used.

Rules that keep it safe with a backend whose plans live in reusable state (FlashInfer's wrapper
sets, attention_cuda.py), whatever the backend:
- at most one plan is in flight: before any other plan, the pending one is finished or cancelled;
- a prediction is used only if nothing else was planned since it was made: every plan of the
  component goes through `plan`, and any plan other than the hit discards the prediction;
- `ahead` is called once step N's forward has been issued (every attend of the step called), so
  the side thread never plans state that an attend of the current step is still reading.

Counters (`counters`, shown by health through the component's counters): each `plan` is exactly
one of a hit, a miss (a prediction was pending and is discarded) or unpredicted (none pending: a
prefill, the first decode step of a batch, a step after a graph replay).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from wgc.runtime.engines.attention import AttentionBackend, AttentionBatch


def predict_next(batch: AttentionBatch, free_pages: Sequence[int]) -> AttentionBatch | None:
    """The decode step after `batch` if each sequence goes on by one token: cached lengths advance by
    the tokens `batch` wrote, one new token each; a sequence whose pages are full takes the next of
    `free_pages` (the allocator's next free pages, in the order it hands them out), rows in order.
    None when there is nothing to predict (a frozen prefix writes nothing) or too few free pages."""
    if not batch.write:
        return None
    size = batch.page_size
    free = iter(free_pages)
    tables: list[Sequence[int]] = []
    for table, length in zip(batch.page_tables, batch.kv_lengths):
        if len(table) * size < length + 1:
            page = next(free, None)
            if page is None:
                return None
            table = [*table, page]
        tables.append(table)  # an unchanged table is shared with `batch`: neither is ever mutated
    return AttentionBatch(tables, batch.kv_lengths, [1] * len(tables), size, batch.mode, write=True)


def same_batch(a: AttentionBatch, b: AttentionBatch) -> bool:
    """Whether the two batches plan the same: every field equal, compared as stored (cheapest first).
    A tuple never equals a list here: a false 'different' only costs a miss, never a wrong plan."""
    return (a.page_size == b.page_size and a.mode == b.mode and a.write == b.write
            and a.q_lengths == b.q_lengths and a.cached_lengths == b.cached_lengths
            and a.page_tables == b.page_tables)


def _settle(future: Future[Any]) -> None:
    """Cancel a plan not yet started, else wait for it to finish (its outcome is not used)."""
    if not future.cancel():
        future.exception()  # waits; the plan or the error it raised is dropped with the prediction


class PlanAhead:
    """A component's attention planning: `plan` each step, `ahead` after each decode step's forward.

    Works with any AttentionBackend; planning ahead needs its `plan_async(batch) -> Future`, and is
    off when the backend has none or `enabled` is False (every step is then planned in `plan`).
    Called from the component's thread only; the backend's side thread does the planning.
    """

    def __init__(self, backend: AttentionBackend, enabled: bool = True) -> None:
        self.backend = backend
        self.enabled = enabled
        self._predicted: AttentionBatch | None = None
        self._future: Future[Any] | None = None
        self.hits = 0
        self.misses = 0
        self.unpredicted = 0

    @property
    def active(self) -> bool:
        return self.enabled and callable(getattr(self.backend, "plan_async", None))

    def plan(self, batch: AttentionBatch) -> Any:
        """This step's plan: the one made ahead when its prediction equals `batch`, else planned now."""
        predicted, future = self._predicted, self._future
        self._predicted = self._future = None
        if future is None:
            self.unpredicted += 1
            return self.backend.plan(batch)
        if predicted is not None and same_batch(predicted, batch):
            if future.exception() is None:  # waits for the side thread if it is still planning
                self.hits += 1
                return future.result()
            # planning it failed: planned again below, where a real error raises
        else:
            _settle(future)
        self.misses += 1
        return self.backend.plan(batch)

    def ahead(self, batch: AttentionBatch, free_pages: Sequence[int]) -> None:
        """Step `batch`'s forward has been issued: predict the next step and plan it on the side thread.
        `free_pages`: the pool's next free pages in allocation order (PageAllocator.next_free)."""
        self.discard()
        if not self.active:
            return
        predicted = predict_next(batch, free_pages)
        if predicted is None:
            return
        self._predicted = predicted
        self._future = self.backend.plan_async(predicted)  # type: ignore[attr-defined]

    def discard(self) -> None:
        """Drop the pending prediction, if any (finishing or cancelling its plan); counts nothing."""
        future, self._future, self._predicted = self._future, None, None
        if future is not None:
            _settle(future)

    def use(self, backend: AttentionBackend) -> None:
        """Plan with another backend from now on (the pending prediction was the old one's)."""
        self.discard()
        self.backend = backend

    def counters(self) -> dict[str, int]:
        return {"plan_ahead_hits": self.hits, "plan_ahead_misses": self.misses,
                "plan_ahead_unpredicted": self.unpredicted}
