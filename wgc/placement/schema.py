"""A placement after loading and checking: frozen dataclasses, every program component placed.

Spans (`compare=False`) point back into the TOML file (or its base) so later passes can report
placement problems at the line that caused them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wgc.diag.diagnostic import Diagnostic
from wgc.lang.span import Span
from wgc.placement.tables import DEFAULT_MAX_BATCH, DEFAULT_PREFILL_TOKEN_BUDGET, DEFAULT_TOKEN_BUDGET

Ranks = tuple[int, ...]


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    ranks: Ranks
    span: Span = field(compare=False, repr=False)
    env: tuple[tuple[str, str], ...] = ()  # (name, value) for this host's workers, as the placement gives them


@dataclass(frozen=True)
class Cluster:
    device: str  # "cpu" | "cuda"
    ranks: int
    gpu: str | None  # GPU model, cuda only
    memory: int | None  # bytes per rank; None: an unbounded CPU rank (no fit check)
    memory_source: str  # "H100" (the GPU table), "cluster.memory" or "unbounded"
    hosts: tuple[Host, ...]  # one host "localhost" with every rank unless given
    memory_span: Span = field(compare=False, repr=False)  # where the budget comes from


@dataclass(frozen=True)
class Engine:
    """Engine settings of one component (its own table over `[defaults.engine]`); the defaults
    are those of a component no table sets (spec.py's EngineTable reads them from here)."""

    kv_memory_fraction: float | None = None  # of the rank's memory (kv components)
    kv_memory: int | None = None  # absolute KV pool bytes (kv components)
    page_size: int = 16  # tokens per KV page (kv components)
    cuda_graph_buckets: tuple[int, ...] = ()  # batch sizes captured as CUDA graphs (cuda)
    max_batch: int = DEFAULT_MAX_BATCH  # most requests batched in one call
    token_budget: int = DEFAULT_TOKEN_BUDGET["cpu"]  # tokens per scheduling round (kv components; by device)
    prefill_token_budget: int = DEFAULT_PREFILL_TOKEN_BUDGET["cpu"]  # a round of prompt chunks alone (by device)
    prefix_caching: bool = True  # share KV pages of equal prompt prefixes (kv components)


@dataclass(frozen=True)
class ComponentPlacement:
    name: str
    engine_kind: str  # "kv" | "stateless", from the program
    ranks: Ranks  # every rank holding the component (a full copy, or a TP shard)
    tp: int  # tensor-parallel degree: one copy per `tp` consecutive ranks of `ranks`
    routing: str | None  # how requests choose among copies, when there are several
    engine: Engine
    span: Span = field(compare=False, repr=False)  # where it is placed (its table or the default)

    @property
    def copies(self) -> tuple[Ranks, ...]:
        return tuple(self.ranks[i : i + self.tp] for i in range(0, len(self.ranks), self.tp))


@dataclass(frozen=True)
class Pin:
    """A component (in one walk) or a branch pinned to ranks: whole copies of what it calls."""

    target: str
    ranks: Ranks
    span: Span = field(compare=False, repr=False)


@dataclass(frozen=True)
class WalkPlacement:
    name: str
    components: tuple[Pin, ...]
    branches: tuple[Pin, ...]
    span: Span = field(compare=False, repr=False)

    def component_pin(self, name: str) -> Pin | None:
        return next((p for p in self.components if p.target == name), None)

    def branch_pin(self, name: str) -> Pin | None:
        return next((p for p in self.branches if p.target == name), None)


@dataclass(frozen=True)
class StreamSettings:
    name: str
    capacity: int | None  # items buffered per request; None: the program's, else the default
    item_bytes: int | None  # overrides the size computed from the item type
    dims: tuple[tuple[str, int], ...]  # values of the item type's symbolic dims
    span: Span = field(compare=False, repr=False)


@dataclass(frozen=True)
class Transport:
    intra_host: str  # "shm" | "cuda_ipc" | "zmq"
    inter_host: str  # "nccl" | "gloo" | "zmq"
    bind: str
    port: int


@dataclass(frozen=True)
class Serve:
    """`[serve]`: how `wgc run` serves the plan."""

    allow_modules: tuple[str, ...] = ()  # module prefixes component classes may come from, beside wgc.models
    limits: tuple[tuple[str, int | float], ...] = ()  # request limits given (spec.py ServeTable), name and value


@dataclass(frozen=True)
class Placement:
    file: str
    sources: tuple[str, ...]  # every file read, bases first
    model: str | None
    cluster: Cluster
    components: tuple[ComponentPlacement, ...]  # one per program component, in program order
    walks: tuple[WalkPlacement, ...]
    streams: tuple[StreamSettings, ...]
    transport: Transport
    serve: Serve = Serve()
    warnings: tuple[Diagnostic, ...] = field(default=(), compare=False, repr=False)  # W codes, e.g. W101

    def component(self, name: str) -> ComponentPlacement | None:
        return next((c for c in self.components if c.name == name), None)

    def walk(self, name: str) -> WalkPlacement | None:
        return next((w for w in self.walks if w.name == name), None)

    def stream(self, name: str) -> StreamSettings | None:
        return next((s for s in self.streams if s.name == name), None)

    def on_rank(self, rank: int) -> tuple[ComponentPlacement, ...]:
        return tuple(c for c in self.components if rank in c.ranks)
