"""A producer rank holds stream items back until they complete a chunk at the consumer's rank, and
sends them as one StreamItems then (runtime/worker/held_items.py): what the consumer computes is
unchanged, only the messages that could not make it fire are merged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from wgc.runtime.coordinator.request import RequestSpec
from wgc.runtime.protocol.messages import Message, StreamCredit, StreamItems
from wgc.runtime.worker.held_items import HeldItems

from tests.runtime.cluster import ToyCluster, compile_text, cpu_placement
from tests.runtime.test_semantics import SLIDING


def _sent() -> tuple[list[tuple[int, Message]], HeldItems]:
    sent: list[tuple[int, Message]] = []
    return sent, HeldItems(0, lambda to, msg: sent.append((to, msg)))


def test_items_wait_for_the_push_that_completes_a_chunk_and_leave_with_it_in_order() -> None:
    sent, held = _sent()
    held.push(1, 7, "codes", "a", completes=False)
    held.push(1, 7, "codes", "b", completes=False)
    assert sent == []
    held.push(1, 7, "codes", "c", completes=True)
    assert sent == [(1, StreamItems(7, "codes", 0, ["a", "b", "c"]))]
    assert (held.messages, held.items) == (1, 3)


def test_a_completing_push_sends_its_own_stream_only() -> None:
    sent, held = _sent()
    held.push(1, 7, "codes", "a", completes=False)
    held.push(2, 8, "codes", "x", completes=False)
    held.push(1, 7, "codes", "b", completes=True)
    assert sent == [(1, StreamItems(7, "codes", 0, ["a", "b"]))]
    held.release()
    assert sent[1:] == [(2, StreamItems(8, "codes", 0, ["x"]))]
    assert held.held == {}


def test_any_other_message_sends_what_is_held_first() -> None:
    sent, held = _sent()
    held.push(1, 7, "codes", "a", completes=False)
    credit = StreamCredit(9, "other", 1)
    held.send(2, credit)
    assert sent == [(1, StreamItems(7, "codes", 0, ["a"])), (2, credit)]


def _rank0(cluster: ToyCluster) -> dict[str, Any]:
    return cluster.executors[0].counters()


@pytest.mark.parametrize(("n", "messages"), [(10, 4), (11, 5), (3, 1)])
def test_a_sliding_stream_to_another_rank_sends_one_message_per_window(tmp_path: Path, n: int, messages: int) -> None:
    """window=4, stride=2: windows complete at items 4, 6, 8, 10; an item after the last (n = 11) or
    before the first (n = 3) leaves when the producer's rank has nothing left to run."""
    cluster = ToyCluster(compile_text(tmp_path, SLIDING, cpu_placement(2, "[components.mix]\nranks = [1]\n")))
    out = cluster.run([RequestSpec(params={"n": n})])
    tokens = list(range(1, n + 1))
    assert next(iter(out.values())).get("text", []) == [tokens[i * 2:i * 2 + 4] for i in
                                                        range(0 if n < 4 else 1 + (n - 4) // 2)]
    counters = _rank0(cluster)
    assert (counters["held_stream_messages"], counters["held_stream_items"]) == (messages, n)
    assert not cluster.leftovers()


def test_a_stream_whose_consumer_is_on_the_same_rank_is_not_held(tmp_path: Path) -> None:
    cluster = ToyCluster(compile_text(tmp_path, SLIDING, cpu_placement(1)))
    cluster.run([RequestSpec(params={"n": 10})])
    assert cluster.executors[0].rp.held_streams == {}
    assert _rank0(cluster)["held_stream_messages"] == 0


def test_a_dropped_requests_items_are_never_sent() -> None:
    sent, held = _sent()
    held.push(1, 7, "codes", "a", completes=False)
    held.push(1, 8, "codes", "x", completes=False)
    held.push(2, 7, "audio", "b", completes=False)
    held.drop(7)
    credit = StreamCredit(9, "other", 1)
    held.send(2, credit)
    assert sent == [(1, StreamItems(8, "codes", 0, ["x"])), (2, credit)]
    assert held.held == {}


def test_the_executor_drops_a_cancelled_requests_held_items(tmp_path: Path) -> None:
    """`drop_request` (a cancel, a failure) forgets them: else the cancel's acknowledgement, sent
    next, would first carry them to a consumer that has dropped the request."""
    cluster = ToyCluster(compile_text(tmp_path, SLIDING, cpu_placement(2, "[components.mix]\nranks = [1]\n")))
    executor = cluster.executors[0]
    executor.held.push(1, 7, "code", 1, completes=False)
    executor.held.push(1, 8, "code", 2, completes=False)
    executor.drop_request(7)
    assert list(executor.held.held) == [(1, 8, "code")]
