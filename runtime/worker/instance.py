"""One walk instance on one rank: its program counter, its values, and the loops it is inside."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wgc.runtime.protocol.messages import FlowState

from wgc.plan.model import Instr

FREED = object()  # a freed value's marker: reading it is a use-after-free


@dataclass
class LoopState:
    loop_id: int
    head: int  # pc of LOOP
    tail: int  # pc of ENDLOOP
    bound: int
    dynamic: bool
    speculative: bool
    index: str | None
    count: int = 0
    accumulated: dict[str, list[Any]] = field(default_factory=dict)
    # Speculation: the stop decision of the previous iteration, not applied yet, and what to restore.
    pending_stop: bool | None = None
    saved: dict[str, Any] = field(default_factory=dict)
    checkpoints: dict[tuple[str, str], Any] = field(default_factory=dict)
    step_run: int | None = -1  # lockstep.py: pc of the body's first RUN when iterations go in step (-1: not known)


@dataclass
class Instance:
    request: int
    key: str  # the same on every rank of the walk
    walk: str
    code: list[Instr]
    flow: FlowState | None
    frame: dict[str, Any] = field(default_factory=dict)
    pc: int = 0
    loops: list[LoopState] = field(default_factory=list)
    waiting: tuple[str, ...] | None = None  # why it cannot run: ("recv", tag), ("pop", stream), ("credit", stream)
    dispatched: bool = False  # its RUN is in a batch being executed
    pending: int = 0  # loops whose previous stop is not applied yet (speculation), for a cheap check
    prior: int = 0  # walks of its flow that must finish on this rank before it may start
    admitted: bool = False  # its flow's turn has come on this rank (it may run)
    alive: bool = True  # false once finished or dropped: a stale entry in a queue is skipped
    waited: int = 0  # rounds its current RUN has been put off by the scheduler (batching.py)
    cut: bool = False  # a dynamic loop of it stopped at its `max` bound, not its condition

    @property
    def finished(self) -> bool:
        return self.pc >= len(self.code)

    @property
    def flow_name(self) -> str | None:
        return self.flow.flow if self.flow is not None else None

    def speculating(self) -> LoopState | None:
        """The innermost loop whose previous stop decision is still pending, if any."""
        for loop in reversed(self.loops):
            if loop.pending_stop is not None:
                return loop
        return None
