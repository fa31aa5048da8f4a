"""The compiled plan: typed msgspec structs, the one format between the compiler and the runtime.

Everything a worker needs is here: per-rank instruction schedules, the flow
table, streams, components with their engine settings. No Python objects, no
pickle: the plan encodes to msgpack deterministically (see wgc/plan/file.py).
"""

from __future__ import annotations

from msgspec import Struct

# ---- source positions ---------------------------------------------------------


class Src(Struct, array_like=True, frozen=True):
    """Where an instruction came from in the .walk source (the file is Plan.source_name)."""

    line: int
    column: int
    end_line: int
    end_column: int


# ---- expressions (conditions, bounds, arithmetic) -------------------------------


class ELit(Struct, tag="lit", frozen=True):
    value: int | float | str | bool


class EVal(Struct, tag="val", frozen=True):
    """A value in the running walk's frame (on this rank)."""

    name: str


class EParam(Struct, tag="param", frozen=True):
    name: str


class EConst(Struct, tag="const", frozen=True):
    component: str
    name: str


class EReq(Struct, tag="req", frozen=True):
    """A request field: task, parts, inputs, outputs, think."""

    field: str


class EResult(Struct, tag="result", frozen=True):
    """The result of the last run of a walk (flow conditions only)."""

    walk: str


class EPartKind(Struct, tag="part_kind", frozen=True):
    """The kind of the input part an each-arm is matching."""


class EUnary(Struct, tag="unary", frozen=True):
    op: str
    operand: Expr


class EBinary(Struct, tag="binary", frozen=True):
    op: str
    left: Expr
    right: Expr


class EIndex(Struct, tag="index", frozen=True):
    base: Expr
    index: Expr


Expr = ELit | EVal | EParam | EConst | EReq | EResult | EPartKind | EUnary | EBinary | EIndex


# ---- instructions ------------------------------------------------------------------


class Run(Struct, tag="run", frozen=True):
    """Call a component entry. Fused parallel branches make several lanes in one batched call."""

    component: str
    entry: str
    outputs: list[str]  # one per lane; "" when the entry returns nothing
    args: list[list[Expr]]  # one argument list per lane
    labels: list[str]  # one cache label per lane; "" for the component's default
    buckets: list[int]  # CUDA-graph batch buckets; [] runs eagerly
    graph_id: int  # index into Plan.captures, -1 when eager
    src: Src


class Eval(Struct, tag="eval", frozen=True):
    output: str
    expr: Expr
    src: Src


class Send(Struct, tag="send", frozen=True):
    value: str
    peer: int
    tag: str
    src: Src


class Recv(Struct, tag="recv", frozen=True):
    value: str
    peer: int
    tag: str
    src: Src


class Carry(Struct, frozen=True):
    name: str
    init: Expr | None


class Loop(Struct, tag="loop", frozen=True):
    loop_id: int
    bound: Expr  # the static count, or a DynamicLoop's `max`
    dynamic: bool
    index: str | None
    carries: list[Carry]
    nospec: bool
    src: Src


class YieldOut(Struct, frozen=True):
    kind: str  # terminal | accumulated
    name: str  # the value inside the loop
    exposed: str  # its name after the loop


class EndLoop(Struct, tag="endloop", frozen=True):
    loop_id: int
    stop: str | None  # value holding the DynamicLoop's stop decision on this rank
    yields: list[YieldOut]
    src: Src


class Push(Struct, tag="push", frozen=True):
    """STREAM push: append an item to a stream (forwarded to the consumer's rank)."""

    stream: str
    value: str
    src: Src


class Pop(Struct, tag="pop", frozen=True):
    """STREAM pop: take the next chunk of a stream, as the chunk policy forms it."""

    stream: str
    output: str
    src: Src


class Emit(Struct, tag="emit", frozen=True):
    modality: str
    value: str
    src: Src


class Fork(Struct, tag="fork", frozen=True):
    component: str
    target: str
    source: str
    src: Src


class KvSend(Struct, tag="kv_send", frozen=True):
    """Ship a snapshot of a cache label to the rank that uses the forked label."""

    component: str
    label: str
    peer: int
    tag: str
    src: Src


class KvRecv(Struct, tag="kv_recv", frozen=True):
    component: str
    label: str
    peer: int
    tag: str
    src: Src


class Free(Struct, tag="free", frozen=True):
    values: list[str]
    src: Src


class Next(Struct, tag="next", frozen=True):
    """The walk ends on this rank: evaluate the flow table and start what comes next."""

    result: str | None
    src: Src


Instr = Run | Eval | Send | Recv | Loop | EndLoop | Push | Pop | Emit | Fork | KvSend | KvRecv | Free | Next


# ---- declarations carried into the plan ------------------------------------------------


class ParamSpec(Struct, frozen=True):
    name: str
    type: str
    default: int | float | str | bool | None
    low: int | float | None = None
    high: int | float | None = None
    choices: list[int | float | str | bool] | None = None


class EntrySpec(Struct, frozen=True):
    name: str
    args: list[str]  # types as written, e.g. "tensor[N, 64; bf16]"
    returns: str | None


class ComponentSpec(Struct, frozen=True):
    name: str
    cls: str
    engine: str
    entries: list[EntrySpec]
    consts: dict[str, int | float | str | bool | None]
    labels: list[str]
    attrs: dict[str, int | float | str]
    ranks: list[int]
    tp: int
    settings: dict[str, int | float | str | bool | list[int]]


class StreamSpec(Struct, frozen=True):
    name: str
    item: str
    chunk: str
    policy: str
    policy_args: dict[str, int]
    at_end: str
    after_end: str
    capacity: int
    producer_ranks: list[int]
    consumer_rank: int
    consumer_walk: str | None


class Transition(Struct, frozen=True):
    target: str  # a walk, an each-block, or "done"
    when: Expr | None


class EachArm(Struct, frozen=True):
    kind: str
    walks: list[str]
    when: Expr | None


class EachSpec(Struct, frozen=True):
    name: str
    arms: list[EachArm]


class FlowSpec(Struct, frozen=True):
    name: str
    when: Expr | None
    transitions: dict[str, list[Transition]]  # node → candidates in source order
    eaches: list[EachSpec]


class WalkSchedule(Struct, frozen=True):
    walk: str
    inputs: list[str]  # the walk inputs this rank needs when the walk starts
    instructions: list[Instr]


class RankSpec(Struct, frozen=True):
    rank: int
    device: str  # "cpu" or "cuda:N", N the rank's position among its host's ranks (a device index on that host)
    host: str
    schedules: list[WalkSchedule]


class HostSpec(Struct, frozen=True):
    """One machine of the plan (`[[cluster.hosts]]`): where its ranks listen, and its workers' environment."""

    name: str
    address: str  # an IP address: every listener of this host binds it, never all interfaces
    ranks: list[int]
    env: dict[str, str] = {}  # set in this host's workers' environment (NCCL_SOCKET_IFNAME, ...)


class TransportSpec(Struct, frozen=True):
    """`[transport]`: the wires, and the base port every deterministic port is derived from
    (runtime/process/endpoints.py: store = port, coordinator = port + 1, membership = port + 2,
    rank r = port + 10 + r)."""

    intra_host: str
    inter_host: str
    port: int


class WalkSpec(Struct, frozen=True):
    name: str
    args: list[str]  # input types
    returns: str | None
    on: str | None
    ranks: list[int]  # ranks with instructions for this walk
    end_rank: int  # where the walk ends and its NEXT runs
    inputs: list[str] = []  # input names, in order


class CaptureSpec(Struct, frozen=True):
    graph_id: int
    rank: int
    component: str
    entry: str
    walk: str
    buckets: list[int]


class MemoryRow(Struct, frozen=True):
    rank: int
    capacity_bytes: int
    weights_bytes: int
    kv_bytes: int
    graph_bytes: int
    stream_bytes: int
    mirror_bytes: int = 0  # a CPU rank's decode mirrors of its KV pools, at most (a plan written before: 0)


class Setting(Struct, frozen=True):
    """The effective value of a setting and where it came from: default, model or placement."""

    key: str
    value: int | float | str | bool | list[int]
    source: str


class Plan(Struct, frozen=True):
    model: str
    source_name: str
    placement_name: str
    params: list[ParamSpec]
    components: list[ComponentSpec]
    streams: list[StreamSpec]
    flows: list[FlowSpec]
    walks: list[WalkSpec]
    ranks: list[RankSpec]
    captures: list[CaptureSpec]
    memory: list[MemoryRow]
    settings: list[Setting]
    hosts: list[HostSpec] = []  # in [[cluster.hosts]] order: node rank k is hosts[k], the head is hosts[0]
    transport: TransportSpec | None = None
