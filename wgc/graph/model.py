"""The drawing model: clusters of nodes and the edges between them, independent of any output format.

Writers (DOT, Mermaid, SVG) only read this; everything about the program is decided when it is built.
Labels are tuples of lines, so each writer picks its own line break and escaping.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

# Node kinds: what a node stands for (writers style them through tables keyed by kind).
CALL = "call"  # a component call site: `component.entry [label]`
FORK = "fork"  # `fork NEW from OLD` on a kv component
INPUT = "input"  # a walk argument
RECV = "recv"  # `recv stream`: the receiving end of a stream inside a loop
SEND = "send"  # a `send` whose value comes from no call (a literal, a param)
EMIT = "emit"  # `emit MODALITY value`: an output sink
RETURN = "return"  # a walk's `return`
EMPTY = "empty"  # stands in for a cluster with nothing else in it
START, DONE, STATE, EACH = "start", "done", "state", "each"  # flow state machines
LEGEND = "legend"  # one swatch per rank

# Cluster kinds.
WALK, LOOP, PARALLEL, BRANCH, FLOW, EACH_BLOCK, PLACEMENT = (
    "walk", "loop", "parallel", "branch", "flow", "each", "placement")

# Edge kinds.
DATA = "data"  # a value from one node to the next, labelled with the names it flows through
BACK = "back"  # a loop-carried value read by the next iteration
STREAM = "stream"  # a stream from a send site to a receiving end, labelled with its policy
TRANSITION = "transition"  # a flow transition, labelled with its condition
NEXT_PART = "next"  # back to an each-block for the next input part


@dataclass(frozen=True)
class GNode:
    id: str
    kind: str
    lines: tuple[str, ...]
    fill: str | None = None  # a "#rrggbb" colour (the rank of a placed call), else the kind's default


@dataclass(frozen=True)
class GEdge:
    src: str
    dst: str
    kind: str
    label: str = ""


@dataclass
class GCluster:
    id: str
    kind: str
    lines: tuple[str, ...]
    nodes: list[GNode] = field(default_factory=list)
    children: list[GCluster] = field(default_factory=list)

    def row(self) -> tuple[str, ...]:
        """Nodes drawn side by side, left to right: the first of each branch of a `parallel`,
        the swatches of a legend; empty for other clusters."""
        if self.kind == PARALLEL:
            return tuple(n.id for n in (c.first_node() for c in self.children) if n is not None)
        if self.kind == PLACEMENT:
            return tuple(n.id for n in self.nodes)
        return ()

    def all_nodes(self) -> Iterator[GNode]:
        yield from self.nodes
        for child in self.children:
            yield from child.all_nodes()

    def first_node(self) -> GNode | None:
        return next(self.all_nodes(), None)

    def all_clusters(self) -> Iterator[GCluster]:
        yield self
        for child in self.children:
            yield from child.all_clusters()


@dataclass(frozen=True)
class Graph:
    name: str  # the model's name
    clusters: tuple[GCluster, ...]
    edges: tuple[GEdge, ...]

    def nodes(self) -> Iterator[GNode]:
        for c in self.clusters:
            yield from c.all_nodes()

    def all_clusters(self) -> Iterator[GCluster]:
        for c in self.clusters:
            yield from c.all_clusters()


class Ids:
    """Sequential ids (`n0`, `c0`, ...): the same program always gets the same ids.

    `mark`/`reset` let a builder try a pass over a loop body and take it back.
    """

    def __init__(self) -> None:
        self._next = {"n": 0, "c": 0}

    def node(self) -> str:
        return self._take("n")

    def cluster(self) -> str:
        return self._take("c")

    def _take(self, prefix: str) -> str:
        n = self._next[prefix]
        self._next[prefix] = n + 1
        return f"{prefix}{n}"

    def mark(self) -> dict[str, int]:
        return dict(self._next)

    def reset(self, mark: dict[str, int]) -> None:
        self._next = dict(mark)
