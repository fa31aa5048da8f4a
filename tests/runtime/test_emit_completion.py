"""A request ends only after every output of it has reached the caller, whichever rank emitted it.

A walk's NEXT runs on its end rank and does not wait for the walk's other ranks, so a flow can finish
while another rank is still running (and emitting in) one of its walks; a stream's consumer walk can
likewise still be emitting on a rank other than the stream's consumer rank when that rank reports
the stream done. Those outputs travel on their rank's own socket, which nothing orders against the
end rank's. Each scenario here is one task of one program, on two ranks (`gen` on rank 0, `post` on
rank 1), run in the in-process cluster and in worker processes; the last test compares the runtime
with the simulator on mock components for three placements.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from wgc.runtime.api import DoneEvent, OutputEvent, Runtime
from wgc.runtime.components.base import Call, Component
from wgc.runtime.coordinator.request import RequestSpec
from wgc.runtime.process.local import LocalCluster
from wgc.runtime.protocol.messages import Data, StartWalk
from wgc.runtime.worker.executor import COORDINATOR

from tests.runtime.cluster import ToyCluster, compile_text, cpu_placement
from wgc.plan.model import Emit, Plan
from wgc.sim.request import make_request
from wgc.sim.simulator import simulate

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


class Gen(Component):
    def first(self, calls: list[Call]) -> list[Any]:
        return [len(str(c.args[0])) for c in calls]

    def step(self, calls: list[Call]) -> list[Any]:
        return [c.args[0] + 1 for c in calls]

    def scale(self, calls: list[Call]) -> list[Any]:
        return [c.args[0] * 10 for c in calls]


class Post(Component):
    def add(self, calls: list[Call]) -> list[Any]:
        return [c.args[0] + c.args[1] for c in calls]

    def num(self, calls: list[Call]) -> list[Any]:
        return [c.args[0] for c in calls]

    def shift(self, calls: list[Call]) -> list[Any]:
        return [c.args[0] + 100 for c in calls]

    def sum(self, calls: list[Call]) -> list[Any]:
        return [sum(x for x in c.args[0] if x is not None) for c in calls]


PROGRAM = """
model emits
import tests.runtime.test_emit_completion as te
param n: int = 3 in 0..20
param stop_at: int = 1000 in 0..1000
component gen: te.Gen engine stateless {
    first(prompt: text) -> token
    step(x: token) -> token
    scale(x: scalar) -> scalar
}
component post: te.Post engine stateless {
    add(x: token, d: scalar) -> token
    num(x: token) -> scalar
    shift(x: token) -> scalar
    sum(c: token[_]) -> scalar
}
stream codes: token from gen to post fixed(2) at_end flush
stream frames: token from gen to post fixed(2) at_end flush

# The loop runs on rank 1 only; its last instruction there is the EMIT. Rank 0 ends the walk without
# waiting for it.
walk in_loop(prompt: text) {
    tok = gen.first(prompt)
    emit text tok
    loop n carry x = tok {
        x = post.add(x, 2)
        emit tensor post.num(x)
    }
    gen.step(tok)
}

# Rank 1 emits once, after its loop; rank 0 emits and ends the walk meanwhile.
walk after_loop(prompt: text) {
    tok = gen.first(prompt)
    loop n carry x = tok {
        x = post.add(x, 2)
    } yield terminal x
    emit tensor post.num(x)
    emit text gen.step(tok)
}

# Both ranks emit every iteration; rank 0 decides the stop and runs ahead of rank 1 (its SENDs to
# rank 1 queue up), then ends the walk.
walk interleaved(prompt: text) {
    tok = gen.first(prompt)
    loop until t == stop_at max n carry t = tok {
        t = gen.step(t)
        emit text t
        emit tensor post.shift(t)
    }
    gen.step(tok)
}

# The flow moves on (to `second`, on rank 0) while rank 1 is still emitting in `first`.
walk first(prompt: text) -> token {
    tok = gen.first(prompt)
    loop n carry x = tok {
        x = post.add(x, 2)
        emit tensor post.num(x)
    }
    return tok
}
walk second(tok: token) {
    emit text gen.step(tok)
}

# A consumer walk on rank 1 emits after the producer's walk, and its flow, ended on rank 0.
walk produce(prompt: text) {
    tok = gen.first(prompt)
    loop n carry t = tok {
        t = gen.step(t)
        emit text t
        send t -> codes
    }
}
walk speak(c: token[_]) on codes {
    emit tensor post.sum(c)
}

# A consumer walk over both ranks: its chunk arrives on rank 1 (the consumer rank), it emits on rank 0.
walk produce_frames(prompt: text) {
    tok = gen.first(prompt)
    loop n carry t = tok {
        t = gen.step(t)
        send t -> frames
    }
}
walk scaled(c: token[_]) on frames {
    s = post.sum(c)
    emit tensor gen.scale(s)
}

flow f_in_loop when request.task == "in_loop" { start -> in_loop -> done }
flow f_after_loop when request.task == "after_loop" { start -> after_loop -> done }
flow f_interleaved when request.task == "interleaved" { start -> interleaved -> done }
flow f_two_walks when request.task == "two_walks" { start -> first -> second -> done }
flow f_consumer when request.task == "consumer" { start -> produce -> done }
flow f_split_consumer when request.task == "split_consumer" { start -> produce_frames -> done }
"""

TWO_RANKS = cpu_placement(2, "[components.post]\nranks = [1]\n")
SWAPPED = cpu_placement(2, "[components.gen]\nranks = [1]\n")
OUTPUTS = ["tensor", "text"]

# (task, params) → the outputs per modality, exactly, for the prompt "abc" (first = 3).
CASES: list[tuple[str, dict[str, int], dict[str, list[Any]]]] = [
    ("in_loop", {"n": 3}, {"text": [3], "tensor": [5, 7, 9]}),
    ("in_loop", {"n": 12}, {"text": [3], "tensor": [5 + 2 * i for i in range(12)]}),
    ("after_loop", {"n": 3}, {"text": [4], "tensor": [9]}),
    ("interleaved", {"n": 5}, {"text": [4, 5, 6, 7, 8], "tensor": [104, 105, 106, 107, 108]}),
    ("interleaved", {"n": 8, "stop_at": 6}, {"text": [4, 5, 6], "tensor": [104, 105, 106]}),
    ("two_walks", {"n": 3}, {"text": [4], "tensor": [5, 7, 9]}),
    ("consumer", {"n": 3}, {"text": [4, 5, 6], "tensor": [9, 6]}),
    ("consumer", {"n": 6}, {"text": [4, 5, 6, 7, 8, 9], "tensor": [9, 13, 17]}),
    ("split_consumer", {"n": 3}, {"tensor": [90, 60]}),
]
IDS = [f"{task}-{'-'.join(f'{k}{v}' for k, v in params.items())}" for task, params, _ in CASES]


def spec(task: str, params: dict[str, int]) -> RequestSpec:
    return RequestSpec(params=dict(params), task=task, inputs={"prompt": "abc"}, output_modalities=list(OUTPUTS))


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory) -> Plan:
    return compile_text(tmp_path_factory.mktemp("emits"), PROGRAM, TWO_RANKS)


def test_each_scenario_emits_where_it_claims(plan: Plan) -> None:
    """The plan's shape is what the scenarios rely on: emits on rank 1, walks ending on rank 0."""
    walks = {w.name: w for w in plan.walks}
    emits = {(r.rank, ws.walk) for r in plan.ranks for ws in r.schedules
             if any(isinstance(i, Emit) for i in ws.instructions)}
    for walk in ("in_loop", "after_loop", "interleaved", "first"):
        assert walks[walk].ranks == [0, 1] and walks[walk].end_rank == 0, walk
        assert (1, walk) in emits, walk
    in_loop = next(ws for ws in plan.ranks[1].schedules if ws.walk == "in_loop").instructions
    effects = [type(i).__name__ for i in in_loop if type(i).__name__ not in ("EndLoop", "Free")]
    assert effects[-2:] == ["Run", "Emit"]  # rank 1's last effect, in the loop: the EMIT
    streams = {s.name: s for s in plan.streams}
    assert streams["codes"].consumer_rank == 1 and walks["speak"].ranks == [1]
    assert streams["frames"].consumer_rank == 1 and walks["scaled"].ranks == [0, 1]
    assert (0, "scaled") in emits and (1, "scaled") not in emits


def by_modality(outputs: list[Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for o in outputs:
        out.setdefault(o.modality, []).append(o.value if hasattr(o, "value") else o.payload)
    return out


# ---- one process ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("task", "params", "expected"), CASES, ids=IDS)
def test_in_process_every_output_arrives_before_the_end(plan: Plan, task: str, params: dict[str, int],
                                                       expected: dict[str, list[Any]]) -> None:
    cluster = ToyCluster(plan)
    request = cluster.submit(spec(task, params))
    cluster.pump()
    events = [e for e in cluster.take_events() if e.request == request]
    assert [e.kind for e in events][-1] == "done"
    assert [e.kind for e in events[:-1]] == ["output"] * (len(events) - 1)  # nothing after the end
    assert by_modality([e.output for e in events[:-1]]) == expected
    assert not cluster.leftovers() and not cluster.coordinator.live


def test_in_process_many_requests_at_once(plan: Plan) -> None:
    """Every scenario, several times over, in one batch: each request gets all of its own outputs."""
    cluster = ToyCluster(plan)
    specs = [spec(task, params) for task, params, _ in CASES] * 4
    got = cluster.run(specs)
    assert list(got.values()) == [expected for _, _, expected in CASES] * 4
    assert not cluster.leftovers() and not cluster.coordinator.live


def deliver(cluster: ToyCluster, rank: int) -> int:
    """Hand every message waiting for `rank` to it, without running it; the rest stay on the wire."""
    mine = [m for d, m in cluster.wire if d == rank]
    cluster.wire = deque((d, m) for d, m in cluster.wire if d != rank)
    for msg in mine:
        cluster.executors[rank].handle(msg)
    return len(mine)


def test_a_flow_end_that_overtakes_its_walks_start_still_waits_for_them(plan: Plan) -> None:
    """Messages from different senders may arrive in any order: rank 1 hears that the flow ended before
    it has even received the walk it must finish first. It reports only once that walk is done."""
    cluster = ToyCluster(plan)
    request = cluster.submit(spec("in_loop", {"n": 3}))
    held = [(d, m) for d, m in cluster.wire if d == 1 and isinstance(m, StartWalk)]
    assert len(held) == 1
    cluster.wire = deque(x for x in cluster.wire if x not in held)
    cluster.pump()  # rank 0 ran the walk and ended the flow; rank 1 has not started it
    assert [e.kind for e in cluster.take_events()] == ["output"]  # rank 0's text only: not done
    assert request in cluster.coordinator.live
    assert cluster.executors[1].states[request].flow_ends  # the FlowEnded waits for the walk
    cluster.wire.extend(held)
    cluster.pump()
    events = cluster.take_events()
    assert [e.kind for e in events] == ["output"] * 3 + ["done"]
    assert by_modality([e.output for e in events[:-1]]) == {"tensor": [5, 7, 9]}
    assert not cluster.leftovers()


def test_values_sent_ahead_of_their_recv_queue_up_in_order(plan: Plan) -> None:
    """Rank 0 runs the whole `interleaved` loop before rank 1 takes one step: rank 1's mailbox holds
    every iteration's value and stop for the same tags, in order, and ends empty."""
    cluster = ToyCluster(plan)
    request = cluster.submit(spec("interleaved", {"n": 6}))
    while deliver(cluster, 0):
        cluster.executors[0].run()
    assert not cluster.executors[0].states[request].instances  # rank 0 finished the walk
    deliver(cluster, 1)
    assert cluster.executors[1].counters()["mailbox"] == 12  # 6 values of `t`, 6 stop decisions
    cluster.pump()
    assert request not in cluster.coordinator.live
    assert by_modality([e.output for e in cluster.take_events() if e.kind == "output"]) == {
        "text": [4, 5, 6, 7, 8, 9], "tensor": [104, 105, 106, 107, 108, 109]}
    assert not cluster.leftovers()


def test_consumer_walks_on_another_rank_run_in_chunk_order(plan: Plan) -> None:
    """`scaled` fires on rank 1 and emits on rank 0. Rank 0 gets chunk 1's StartWalk while chunk 0's
    instance waits for its value; both values then come at once. Chunk 0 still emits first, and the
    request ends only after rank 0 has finished both."""
    cluster = ToyCluster(plan)
    request = cluster.submit(spec("split_consumer", {"n": 3}))
    held: list[Any] = []
    while cluster.wire:  # run everything except what rank 1 sends rank 0 for the consumer walk
        destination, msg = cluster.wire.popleft()
        if destination == 0 and isinstance(msg, (StartWalk, Data)) and msg.instance.startswith("frames/"):
            held.append(msg)
        elif destination == COORDINATOR:
            cluster.coordinator.on_message(msg)
        else:
            cluster.executors[destination].handle(msg)
            cluster.executors[destination].run()
    assert [(type(m).__name__, m.instance[-1]) for m in held] == \
        [("StartWalk", "0"), ("Data", "0"), ("StartWalk", "1"), ("Data", "1")]
    assert request in cluster.coordinator.live  # the stream is done on rank 1, rank 0 has not drained
    rank0 = cluster.executors[0]
    rank0.handle(held[0])
    rank0.run()  # chunk 0's instance waits for its value
    for msg in (held[2], held[1], held[3]):
        rank0.handle(msg)
    cluster.pump()
    events = [e for e in cluster.take_events() if e.request == request]
    assert [e.kind for e in events] == ["output", "output", "done"]
    assert [e.output.value for e in events[:2]] == [90, 60]
    assert not cluster.leftovers()


# ---- worker processes --------------------------------------------------------------------------------


def run(coro: Awaitable[T], timeout: float = 60.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def test_worker_processes_deliver_every_output_before_the_end(plan: Plan, monkeypatch: pytest.MonkeyPatch) -> None:
    # The workers import this module's components; a PYTHONPATH already set keeps its precedence.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p))
    specs = [spec(task, params) for task, params, _ in CASES] * 3

    async def body() -> tuple[list[list[Any]], Any]:
        async with await Runtime.start(plan, allow_modules=["tests.runtime"]) as runtime:
            handles = [runtime.submit_spec(s) for s in specs]  # all in flight together
            events = [[e async for e in h.events()] for h in handles]
            await asyncio.sleep(0.2)  # an output arriving after the end would be dropped, not seen
            return events, await runtime.health()

    all_events, report = run(body())
    for events, (task, params, expected) in zip(all_events, [c for c in CASES] * 3):
        end = events[-1]
        outputs = events[:-1]
        assert isinstance(end, DoneEvent), (task, params, end)
        assert all(isinstance(e, OutputEvent) for e in outputs)
        assert end.outputs == len(outputs)
        assert by_modality(outputs) == expected, (task, params)
        for e in outputs:  # where each came from: text from rank 0, tensor from rank 1 (`scaled`: rank 0)
            assert e.rank == (0 if e.modality == "text" or e.walk == "scaled" else 1), e
    assert report.ok and report.requests_in_flight == 0
    for rank in report.ranks:
        left = {k: v for k, v in rank.counters.items()
                if v and k in ("instances", "requests", "mailbox", "stream_ends")}
        assert not left, f"rank {rank.rank} still holds {left}"


# ---- the runtime against the simulator -------------------------------------------------------------


@pytest.mark.parametrize("placement", ["one rank", "two ranks", "swapped"])
def test_runtime_outputs_equal_the_simulator_for_emits_off_the_end_rank(tmp_path: Path, placement: str) -> None:
    """Mock components (the simulator's semantics) in the in-process cluster, every scenario."""
    place = {"one rank": cpu_placement(1), "two ranks": TWO_RANKS, "swapped": SWAPPED}[placement]
    plan = compile_text(tmp_path, PROGRAM, place)
    requests = [make_request(outputs=OUTPUTS, params=params, task=task, named={"prompt": "abc"})
                for task, params, _ in CASES]
    expected = [simulate(plan, r) for r in requests]
    specs = [RequestSpec(params=dict(r.params), task=r.task, inputs=dict(r.named), output_modalities=OUTPUTS)
             for r in requests]
    got = LocalCluster(plan).run(specs)
    assert list(got.values()) == expected
    assert all(e.get("tensor") for e in expected)  # every scenario emitted off its end rank
