"""Where values come from while a walk is drawn: the nodes behind each name, and what the walk adds.

A name maps to the nodes whose results it holds (`dt = t - combine.timestep(...)` holds the
node behind `t` and the timestep call). Reading a name yields those nodes with the name, so an
edge is labelled with the value it carries. `back` marks a loop-carried value from the previous
iteration: the edge it makes runs against the flow of the loop body.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wgc.graph.model import BACK, DATA, GEdge


@dataclass(frozen=True)
class Origin:
    node: str
    back: bool = False


@dataclass(frozen=True)
class Read:
    """A value read by a node: where it comes from and the name it was read through (if any)."""

    origin: Origin
    via: str | None


Scope = dict[str, tuple[Origin, ...]]


def origins(reads: list[Read]) -> tuple[Origin, ...]:
    """The distinct origins of `reads`, in first-seen order."""
    return tuple(dict.fromkeys(r.origin for r in reads))


def settled(values: tuple[Origin, ...]) -> tuple[Origin, ...]:
    """The same nodes seen from after the loop: no longer a previous iteration's value."""
    return tuple(dict.fromkeys(Origin(o.node) for o in values))


@dataclass(frozen=True)
class SendSite:
    stream: str
    sources: tuple[str, ...]  # the nodes whose results are sent


@dataclass
class Sink:
    """What drawing walks adds besides nodes: edges, send sites and the receiving ends of streams."""

    _edges: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)
    sends: list[SendSite] = field(default_factory=list)
    receivers: dict[str, list[str]] = field(default_factory=dict)  # stream → receiving nodes

    def edge(self, src: str, dst: str, kind: str, label: str | None = None) -> None:
        """One edge per (src, dst, kind); labels of repeated edges are merged."""
        labels = self._edges.setdefault((src, dst, kind), [])
        if label and label not in labels:
            labels.append(label)

    def reads(self, dst: str, reads: list[Read]) -> None:
        for r in reads:
            self.edge(r.origin.node, dst, BACK if r.origin.back else DATA, r.via)

    def receiver(self, stream: str, node: str) -> None:
        self.receivers.setdefault(stream, []).append(node)

    def edges(self) -> list[GEdge]:
        return [GEdge(src, dst, kind, ", ".join(labels)) for (src, dst, kind), labels in self._edges.items()]
