"""The walk-graph IR: each walk as a tree of operations over named values, before and after placement.

Nested calls are flattened into temporaries (`%3`), so every operation reads
and writes plain value names. Placement then gives every operation a rank;
the later passes project the tree onto each rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wgc.plan.model import EVal, Expr, Src


def expr_uses(e: Expr | None) -> list[str]:
    """Value names an expression reads, in order of first appearance."""
    if e is None:
        return []
    out: list[str] = []
    stack = [e]
    while stack:
        node = stack.pop()
        if isinstance(node, EVal):
            if node.name not in out:
                out.append(node.name)
            continue
        for child in ("operand", "left", "right", "base", "index"):
            sub = getattr(node, child, None)
            if sub is not None:
                stack.append(sub)
    return out


@dataclass
class Op:
    """One operation. `kind` selects the meaning of the other fields (see `lower/build.py`)."""

    kind: str  # run, eval, push, pop, emit, fork, return
    src: Src
    outputs: list[str] = field(default_factory=list)
    args: list[Expr] = field(default_factory=list)
    component: str = ""
    entry: str = ""
    label: str = ""
    stream: str = ""
    modality: str = ""
    fork: tuple[str, str] = ("", "")  # (target label, source label)
    branch: str | None = None
    ranks: list[int] = field(default_factory=list)  # set by placement; a TP group has several
    lanes: list[Op] = field(default_factory=list)  # fused parallel lanes (run ops only)

    def uses(self) -> list[str]:
        names: list[str] = []
        for op in self.lanes or [self]:
            for a in op.args:
                for n in expr_uses(a):
                    if n not in names:
                        names.append(n)
        return names

    def defines(self) -> list[str]:
        if self.lanes:
            return [o for lane in self.lanes for o in lane.outputs if o]
        return [o for o in self.outputs if o]

    @property
    def home(self) -> int:
        return self.ranks[0]


@dataclass
class LoopYield:
    kind: str
    name: str
    exposed: str


@dataclass
class LoopBlock:
    loop_id: int
    src: Src
    bound: Expr
    dynamic: bool
    until: Expr | None
    index: str | None
    carries: list[tuple[str, Expr | None]]
    nospec: bool
    body: list[Node]
    yields: list[LoopYield]
    stop: str | None = None  # the value the until-condition is evaluated into
    ranks: list[int] = field(default_factory=list)  # ranks taking part, set by placement


@dataclass
class ParallelBlock:
    src: Src
    branches: list[tuple[str, list[Node]]]


Node = Op | LoopBlock | ParallelBlock  # Transfer joins them after `comm`


def all_ops(body: list[Node]) -> list[Op]:
    """Every operation of a walk body in order, through loops and parallel branches."""
    out: list[Op] = []
    for node in body:
        if isinstance(node, Op):
            out.append(node)
        elif isinstance(node, LoopBlock):
            out.extend(all_ops(node.body))
        elif isinstance(node, ParallelBlock):
            for _, branch in node.branches:
                out.extend(all_ops(branch))
    return out


@dataclass
class WalkIR:
    name: str
    args: list[str]
    body: list[Node]
    result: str | None  # the returned value
    src: Src
    ranks: list[int] = field(default_factory=list)
    end_rank: int = 0


@dataclass
class Transfer:
    """A value (or, with `kv`, a cache label's state) moving between two ranks: SEND on one, RECV on the other."""

    value: str
    source: int
    target: int
    tag: str
    src: Src
    kv: tuple[str, str] | None = None  # (component, label)
    # "both": SEND and RECV at this point; "send" / "recv": the two halves of one transfer whose SEND
    # was hoisted to just after the value became available (comm.py), the RECV staying at its use
    part: str = "both"


Step = Op | LoopBlock | Transfer
