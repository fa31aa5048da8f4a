"""A worker's round of Outputs, and the ends of the requests it finished, leave as one `Outputs` message,
in the order sent, and nothing it sends later overtakes them (runtime/process/out_batch.py); the codec
carries the batch; the coordinator routes each item as if it came alone; and a round's outputs leave
before its forward runs (the executor's `flush`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from wgc.runtime.coordinator.core import CoordinatorCore
from wgc.runtime.coordinator.request import RequestSpec
from wgc.runtime.process.coordinator import Coordinator
from wgc.runtime.process.out_batch import OutBatch
from wgc.runtime.protocol.codec import Codec
from wgc.runtime.protocol.messages import (
    COORDINATOR,
    Drained,
    Failed,
    FlowDone,
    Message,
    Output,
    Outputs,
    StartWalk,
    StreamDone,
)
from wgc.runtime.worker.executor import Executor

from tests.runtime.cluster import ToyCluster, compile_text, cpu_placement


def _out(request: int, seq: int) -> Output:
    return Output(request, "text", 100 * request + seq, "decode", 0, seq)


def test_a_round_of_outputs_is_one_message_in_emission_order() -> None:
    sent: list[tuple[int, Message]] = []
    batch = OutBatch(0, lambda d, m: sent.append((d, m)))
    emitted = [_out(r, s) for s in range(3) for r in (1, 2, 3)]
    for o in emitted:
        batch.send(COORDINATOR, o)
    assert sent == []  # held until the round ends
    batch.flush()
    assert sent == [(COORDINATOR, Outputs(emitted))]
    batch.flush()
    assert len(sent) == 1  # nothing held: nothing sent


def test_a_lone_output_goes_as_itself() -> None:
    sent: list[tuple[int, Message]] = []
    batch = OutBatch(0, lambda d, m: sent.append((d, m)))
    batch.send(COORDINATOR, _out(1, 0))
    batch.flush()
    assert sent == [(COORDINATOR, _out(1, 0))]


def test_any_other_message_sends_the_held_outputs_first() -> None:
    sent: list[tuple[int, Message]] = []
    batch = OutBatch(0, lambda d, m: sent.append((d, m)))
    walk = StartWalk(1, "k", "decode", {}, None, 0)
    batch.send(COORDINATOR, _out(1, 0))
    batch.send(COORDINATOR, _out(2, 0))
    batch.send(0, walk)  # to itself: stays in the process, the outputs stay held
    assert sent == [(0, walk)]
    batch.send(1, walk)  # to another rank: whatever it causes comes after the outputs
    batch.send(COORDINATOR, _out(1, 1))
    batch.send(COORDINATOR, Failed(1, 0, "boom"))  # not held: what it follows goes first
    batch.flush()
    assert sent == [(0, walk), (COORDINATOR, Outputs([_out(1, 0), _out(2, 0)])), (1, walk),
                    (COORDINATOR, _out(1, 1)), (COORDINATOR, Failed(1, 0, "boom"))]


def test_request_ends_wait_behind_the_outputs_in_the_same_message() -> None:
    """The FlowDone, StreamDone and Drained of requests that end in a round travel in the round's
    Outputs, in the order sent: B requests ending together were 2B sends (each end flushed its lone
    output, then went alone)."""
    sent: list[tuple[int, Message]] = []
    batch = OutBatch(0, lambda d, m: sent.append((d, m)))
    held: list[Message] = []
    for r in (1, 2, 3):
        held += [_out(r, 5), FlowDone(r, "decode", [1]), Drained(r, 0, flow="f"), StreamDone(r, "s")]
    for m in held:
        batch.send(COORDINATOR, m)
    assert sent == []
    batch.flush()
    assert sent == [(COORDINATOR, Outputs(held))]
    codec = Codec()
    assert codec.decode(codec.encode(Outputs(held))) == Outputs(held)


class _Core:
    def __init__(self) -> None:
        self.seen: list[Message] = []

    def on_message(self, msg: Message) -> None:
        self.seen.append(msg)


class _Probes:
    def __init__(self) -> None:
        self.waiting: list[Any] = []

    def ask_all(self, ranks: list[int], done: Any) -> None:
        self.waiting.append(done)


def _coordinator(n_ranks: int) -> tuple[Coordinator, _Core, _Probes]:
    """The process coordinator's routing alone (no sockets): its core and probes recorded."""
    coord = Coordinator.__new__(Coordinator)
    core, probes = _Core(), _Probes()
    coord.n_ranks, coord.core, coord.probes, coord.down = n_ranks, core, probes, {}  # type: ignore[assignment]
    return coord, core, probes


def test_the_coordinator_routes_each_item_of_an_outputs_as_a_lone_message() -> None:
    """In order; with several ranks a FlowDone in the batch waits for every rank's probe, as it does
    alone (another rank's outputs may still be on their way), while the items after it go on."""
    items: list[Any] = [_out(1, 0), FlowDone(1, "decode"), _out(2, 0), Drained(2, 0, flow="f"), StreamDone(3, "s")]
    coord, core, probes = _coordinator(1)
    coord.route(Outputs(items))
    assert core.seen == items
    coord, core, probes = _coordinator(2)
    coord.route(Outputs(items))
    assert core.seen == [_out(1, 0), _out(2, 0), Drained(2, 0, flow="f")] and len(probes.waiting) == 2
    for done in probes.waiting:
        done({})
    assert core.seen[3:] == [FlowDone(1, "decode"), StreamDone(3, "s")]


def test_the_codec_carries_a_batch_with_tensors() -> None:
    codec = Codec()
    items = [_out(1, 0), Output(2, "audio", torch.arange(6, dtype=torch.float32).reshape(2, 3), "w", 0, 0)]
    back = codec.decode(codec.encode(Outputs(items)))
    assert isinstance(back, Outputs) and back.items[0] == items[0]
    assert torch.equal(back.items[1].value, items[1].value) and back.items[1].request == 2


TOKENS = """
model tokens
import tests.runtime.toys as toy
param n: int = 4 in 1..10
component lm: toy.Counter engine kv {
    prefill(prompt: text) -> token
    decode(prev: token) -> token
}
walk prefill(prompt: text) -> token {
    tok = lm.prefill(prompt)
    emit text tok
    return tok
}
walk decode(first: token) {
    loop n carry t = first {
        t = lm.decode(t)
        emit text t
    }
}
flow { start -> prefill -> decode -> done }
"""


def test_a_rounds_tokens_leave_before_its_forward_not_after_it(tmp_path: Path) -> None:
    """A worker's executor flushes the Outputs its instances emitted as they advanced (the tokens of
    the last forward) before it runs the round's batches: held until the round's end, every token
    (the first included) reached the coordinator one forward late."""
    plan = compile_text(tmp_path, TOKENS, cpu_placement(1))
    log: list[Any] = []  # the component's calls (entry names) and what reaches the coordinator, in order
    wire: list[Message] = []  # to this rank
    lm = ToyCluster(plan).component("lm")
    plain_call = lm.call
    lm.call = lambda entry, calls: (log.append(entry), plain_call(entry, calls))[1]  # type: ignore[method-assign]
    out = OutBatch(0, lambda d, msg: (wire if d == 0 else log).append(msg))
    ex = Executor(plan, 0, {"lm": lm}, out.send, flush=out.flush)
    CoordinatorCore(plan, lambda rank, msg: wire.append(msg)).submit(RequestSpec(inputs={"prompt": "abc"}))
    for _ in range(50):  # a worker's loop: the messages here, one round, then what the round still holds
        taken, wire[:] = list(wire), []
        for msg in taken:
            ex.handle(msg)
        ex.run(max_rounds=1)
        out.flush()
        if not wire and not ex.ready:
            break
    flat = [y for x in log for y in (x.items if isinstance(x, Outputs) else [x])]
    order = [x if isinstance(x, str) else x.value for x in flat if isinstance(x, str | Output)]
    assert order == ["prefill", 3, "decode", 4, "decode", 5, "decode", 6, "decode", 7]
