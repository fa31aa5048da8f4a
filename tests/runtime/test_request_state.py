"""One state object per request on each rank: what a request leaves behind, and what runs after it failed."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

from wgc.runtime.components.base import Call
from wgc.runtime.coordinator.request import RequestSpec

from tests.runtime.cluster import ToyCluster, compile_text, cpu_placement
from tests.runtime.toys import Recording


class Flaky(Recording):
    """Counts the calls it gets per request; a batch with a call at the request's step `fail_at` raises."""

    def __init__(self, spec, rank, device) -> None:
        super().__init__(spec, rank, device)
        self.per_request: Counter[int] = Counter()

    def _check(self, calls: list[Call]) -> None:
        self.per_request.update(c.request for c in calls)
        if any(c.args[1] == c.args[2] for c in calls):
            raise RuntimeError("flaky step")

    def velocity(self, calls: list[Call]) -> list[Any]:
        self._check(calls)
        return [c.args[0] + (1 if c.label == "main" else 10) for c in calls]

    def decode(self, calls: list[Call]) -> list[Any]:
        self._check(calls)
        return [c.args[0] + 1 for c in calls]

    def add(self, calls: list[Call]) -> list[Any]:
        return [c.args[0] + c.args[1] for c in calls]

    def chunk(self, calls: list[Call]) -> list[Any]:
        return [sum(c.args[0]) for c in calls]


LANES = """
model lanes
import tests.runtime.test_request_state as t
param steps: int = 3 in 1..10
param fail_at: int = -1 in -1..10
component llm: t.Flaky engine kv {
    velocity(z: scalar, t: scalar, f: scalar) -> scalar
    labels main, cfg
}
component mix: t.Flaky engine stateless {
    add(a: scalar, b: scalar) -> scalar
}
walk gen() {
    loop steps as t carry z = 0 {
        parallel {
            branch main { a = llm.velocity(z, t, fail_at, cache=main) }
            branch cfg { b = llm.velocity(z, t, fail_at, cache=cfg) }
        }
        z = mix.add(a, b)
    } yield terminal z
    emit tensor z
}
flow { start -> gen -> done }
"""


def test_a_request_that_fails_in_one_chunk_has_its_calls_in_later_chunks_dropped(tmp_path: Path) -> None:
    """max_batch 1: request A's two lanes are two chunks of one batch. A's first lane raises at step 1;
    its second lane, already built, must never reach the component. B, in the same batch, runs on."""
    place = cpu_placement(1, '[components.llm]\nranks = [0]\nengine = { kv_memory = "64MiB", max_batch = 1 }\n')
    cluster = ToyCluster(compile_text(tmp_path, LANES, place))
    a = cluster.submit(RequestSpec(params={"steps": 3, "fail_at": 1}))
    b = cluster.submit(RequestSpec(params={"steps": 3}))
    cluster.pump()
    events = cluster.take_events()
    kinds = {e.request: e.kind for e in events if e.kind in ("done", "error")}
    assert kinds == {a: "error", b: "done"}
    assert "flaky step" in next(e.error for e in events if e.kind == "error")
    llm = cluster.component("llm")
    assert llm.per_request[a] == 2 + 1  # step 0's two lanes, then step 1's first lane (it raised)
    assert llm.per_request[b] == 2 * 3
    assert [e.output.value for e in events if e.output is not None] == [77]  # z -> (z + 1) + (z + 10), 3 times
    assert not cluster.leftovers()


RELAY = """
model relay
import tests.runtime.test_request_state as t
param n: int = 6 in 1..100
param fail_at: int = -1 in -1..100
param poison: int = -1 in -1..100
component llm: t.Flaky engine kv {
    decode(x: token, t: scalar, f: scalar, d: scalar) -> token
}
component mix: t.Flaky engine stateless {
    add(a: token, b: token) -> token
}
component out: t.Flaky engine stateless {
    chunk(c: token[2]) -> tokens
}
stream codes: token from mix to out fixed(2) at_end drop capacity 4
walk decode() {
    loop n as t carry x = 0 {
        d = 1.0 / (t - poison)
        y = llm.decode(x, t, fail_at, d)
        x = mix.add(y, y)
        send x -> codes
    } yield terminal x
    emit text x
}
walk speak(c: token[2]) on codes {
    emit text out.chunk(c)
}
flow { start -> decode -> done }
"""


def test_finished_cancelled_and_failed_requests_leave_no_state_on_any_rank(tmp_path: Path) -> None:
    """Three ranks (a loop relayed between two, a stream read on the third): whatever way each of
    many requests ends (done, cancelled, failed in a step of its own or with the component batch it was
    in), every rank's `states` ends empty and its counters at zero."""
    rng = random.Random(12)
    extra = "[components.mix]\nranks = [1]\n[components.out]\nranks = [2]\n"
    cluster = ToyCluster(compile_text(tmp_path, RELAY, cpu_placement(3, extra)))
    ids, failing = [], set()
    for i in range(90):
        n = rng.randint(2, 30)
        fail_at = rng.randrange(n) if i % 30 == 7 else -1  # the whole batch fails: rarely
        poison = rng.randrange(n) if i % 5 == 1 else -1
        ids.append(cluster.submit(RequestSpec(params={"n": n, "fail_at": fail_at, "poison": poison})))
        if max(fail_at, poison) >= 0:
            failing.add(ids[-1])
    doomed = [i for i in ids if i not in failing and rng.random() < 0.3]
    pending = list(doomed)
    while pending:
        cluster.pump(limit=rng.randint(1, 300))
        if rng.random() < 0.5:
            cluster.coordinator.cancel(pending.pop(rng.randrange(len(pending))))
    cluster.pump()
    ended = {e.request: e.kind for e in cluster.take_events() if e.kind in ("done", "cancelled", "error")}
    assert set(ended) == set(ids)
    assert {ended[i] for i in failing} == {"error"}  # (and whoever shared the raising batch with them)
    assert set(ended.values()) == {"done", "cancelled", "error"}
    for ex in cluster.executors:
        assert ex.states == {} and not ex.ready
        counters = ex.counters()
        assert counters["instances"] == counters["requests"] == counters["mailbox"] == 0
        assert counters["stream_ends"] == 0
    assert not cluster.leftovers()
