"""Every message between the coordinator and the workers, and between workers: small typed structs.

Values (`Any` fields) are ints, floats, strings, bools, None, lists of those, or
tensors; `runtime/protocol/codec.py` moves tensors as separate zero-copy frames.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, get_args

from msgspec import Struct
from wgc.runtime.engines.capture_report import EntryCapture


class Part(Struct, frozen=True):
    kind: str  # text, image, audio, video
    payload: Any


class RequestInit(Struct, tag="init", frozen=True):
    """Everything a rank needs to know about a request, sent once to every rank."""

    request: int
    params: dict[str, Any]
    task: str
    parts: list[Part]
    inputs: dict[str, Any]  # named inputs for walks started from `start`
    input_modalities: list[str]
    output_modalities: list[str]
    think: bool


class FlowState(Struct, frozen=True):
    """Where one flow of one request stands, carried with the walk it starts (flows move between ranks)."""

    flow: str
    node: str
    each: str | None = None
    part: int = 0
    arm: list[str] = []
    pos: int = 0
    started: int = 0  # walks this flow has started: numbers the next walk instance
    results: dict[str, Any] = {}
    on_rank: dict[int, int] = {}  # walks of this flow started so far on each rank
    cut: list[str] = []  # walks of this flow whose dynamic loop stopped at its `max` bound (docs/plan.md)


class StartWalk(Struct, tag="start", frozen=True):
    request: int
    instance: str  # "flow/walk#seq" or "stream/walk#chunk": the same on every rank of the walk
    walk: str
    inputs: dict[str, Any]
    flow: FlowState | None  # None for stream-fired walks
    # Walks of this flow that must finish on the destination rank before this one starts there.
    # Walks of one flow are started by different senders (the coordinator, then each walk's end
    # rank), whose messages may arrive in any order; this number restores the flow's order. For a
    # stream-fired walk sent to a rank other than the stream's consumer rank: its chunk number (the
    # instances of one stream run there one at a time, in chunk order).
    prior: int = 0


class Data(Struct, tag="data", frozen=True):
    """A SEND's value, for the matching RECV of the same request and walk instance."""

    request: int
    instance: str
    tag: str
    value: Any


class KvData(Struct, tag="kv", frozen=True):
    request: int
    instance: str
    tag: str
    component: str
    label: str
    state: Any


class StreamItems(Struct, tag="items", frozen=True):
    """Items pushed to a stream, on their way to the consumer's rank; `closed` ends the stream."""

    request: int
    stream: str
    source: int  # the producing rank (credits go back to it)
    items: list[Any]
    closed: bool = False


class StreamCredit(Struct, tag="credit", frozen=True):
    """The consumer took `n` items off a stream: the producer may push that many more (backpressure)."""

    request: int
    stream: str
    n: int


class FlowEnded(Struct, tag="flow_ended", frozen=True):
    """A flow of the request finished (its last walk ran NEXT on the sender): no walk of it starts any more.

    Sent by that end rank to every rank that pushes to the flow's streams or emits in its walks. Walks of
    the flow may still be running there (a walk's NEXT does not wait for its other ranks), and their
    StartWalks may even be behind this message (another sender), so the rank waits until it has finished
    `walks` instances of the flow (`FlowState.on_rank`). Then it closes the flow's streams behind its last
    items and, with `report`, sends `Drained` to the coordinator, behind every Output it sent.
    """

    request: int
    flow: str
    walks: int = 0
    report: bool = False


class ConsumersEnded(Struct, tag="consumers_ended", frozen=True):
    """A stream's consumer rank fired its last consumer walk (`walks` in all) and finished its part of each.

    Sent to the other ranks of the consumer walk that emit: each reports `Drained` to the coordinator once
    it has finished `walks` instances of it (their StartWalks came from the same sender, before this)."""

    request: int
    stream: str
    walks: int


class Cancel(Struct, tag="cancel", frozen=True):
    request: int
    reason: str


class TpBatch(Struct, tag="tp_batch", frozen=True):
    """A TP copy's leader ran (is about to run) this batch: its followers run the same one, these
    (request, instance) lanes in this order (runtime/worker/tp_agree.py). A release (no entry, no
    lanes, `released` set) says the leader will decide none of those requests again: a follower
    drops a cancelled request only once the releases of its leaders came, behind their decisions."""

    component: str
    entry: str
    instances: list[list[Any]]  # [request, instance key] per lane
    released: list[int] = []
    joined: bool = False  # the component's next decision is of the same round (run in one round with it)


class Shutdown(Struct, tag="shutdown", frozen=True):
    pass


class HealthQuery(Struct, tag="health?", frozen=True):
    # False: an ordering barrier (coordinator.py), answered with no counters: a multi-rank plan sends
    # one to every rank per flow or stream end, and building the counters each time was paid for nothing
    counters: bool = True


class Output(Struct, tag="output", frozen=True):
    request: int
    modality: str
    value: Any
    walk: str
    rank: int
    seq: int  # per (request, rank), so the coordinator can order outputs of one rank


class FlowDone(Struct, tag="flow_done", frozen=True):
    """A flow finished on its end rank. Its walks' other ranks that emit may not have finished yet: the
    request is not complete before a `Drained` of this flow has come from each rank in `drains`."""

    request: int
    flow: str
    drains: list[int] = []
    cut: list[str] = []  # the flow's walks whose dynamic loop stopped at its `max` bound, not its condition


class StreamDone(Struct, tag="stream_done", frozen=True):
    """A stream that fires a walk per chunk is closed, drained, and every walk it fired has ended on the
    consumer rank; the consumer walk's other ranks that emit report `Drained` each (`drains`)."""

    request: int
    stream: str
    drains: list[int] = []


class Drained(Struct, tag="drained", frozen=True):
    """Every instance of a finished flow's walks (or of a stream's consumer walk) has finished on `rank`.

    It travels on the rank's own socket, behind every Output the rank sent for them: once it is in,
    no output of theirs from that rank can still be on its way."""

    request: int
    rank: int
    flow: str = ""
    stream: str = ""


class Failed(Struct, tag="failed", frozen=True):
    request: int
    rank: int
    error: str


class CancelAck(Struct, tag="cancel_ack", frozen=True):
    request: int
    rank: int


class Health(Struct, tag="health", frozen=True):
    rank: int
    counters: dict[str, int]


class Progress(Struct, tag="progress", frozen=True):
    """One start-up line of a rank (loading, capturing CUDA graphs), sent before its Ready; with a
    phase, where the rank stands in it (`done` of `total`: runtime/worker/startup.py's Step)."""

    rank: int
    line: str  # "" when the message only moves the phase on
    phase: str = ""  # load, warm or capture; "" for a line outside the count
    done: int = 0
    total: int = 0


class Ready(Struct, tag="ready", frozen=True):
    """The rank has loaded its components and captured its CUDA graphs: it serves from now on."""

    rank: int
    pid: int
    captures: list[EntryCapture] = []  # one per CaptureSpec of the plan on this rank


ToWorker = (RequestInit | StartWalk | Data | KvData | StreamItems | StreamCredit | FlowEnded | ConsumersEnded
            | Cancel | TpBatch | Shutdown
            | HealthQuery)


class Inbound(Struct, tag="inbound", frozen=True):
    """What the process coordinator sent one rank in one turn of its event loop, in the order sent, as
    one message (runtime/process/coordinator.py): a burst of submits (`LLM.generate`'s shape: 32
    requests at once, each a RequestInit and a StartWalk) reaches the worker whole, so its first round
    prefills them together instead of whichever had arrived when it woke. The worker takes each item
    in order as if it had come alone."""

    items: list[ToWorker]

# What a worker process holds until its round ends and sends as one Outputs (runtime/process/out_batch.py)
Held = Output | FlowDone | StreamDone | Drained


class Outputs(Struct, tag="outputs", frozen=True):
    """Every Output a worker process emitted in one round, and the request ends (FlowDone, StreamDone,
    Drained) it reported, in the order it sent them, as one message: a decode round of 32 requests is
    one encode, one send and one decode instead of 32 of each (the per-message cost was about a
    millisecond a round at batch 32). The process coordinator routes each item in order."""

    items: list[Held]


ToCoordinator = Output | Outputs | FlowDone | StreamDone | Drained | Failed | CancelAck | Health | Progress | Ready
Message = ToWorker | Inbound | ToCoordinator

COORDINATOR = -1  # the coordinator's address, beside the ranks 0, 1, ... (a `send` destination)


def check_handlers(handlers: Mapping[type, object], messages: object, elsewhere: Collection[type], owner: str) -> None:
    """At import of a dispatcher: each type of the union `messages` has a handler in `handlers` or is
    one the caller hands on (`elsewhere`), and no handler is for a type the union does not hold."""
    expected = set(get_args(messages)) - set(elsewhere)
    missing = sorted(t.__name__ for t in expected - set(handlers))
    extra = sorted(t.__name__ for t in set(handlers) - expected)
    if missing or extra:
        raise TypeError(f"{owner}: no handler for {', '.join(missing) or '-'}; "
                        f"handlers for messages it is never sent: {', '.join(extra) or '-'}")
