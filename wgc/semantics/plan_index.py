"""A plan indexed for interpretation: each (rank, walk) schedule with its loop jumps, and where
each stream is pushed, popped and emitted from. Built once per plan by the simulator and by each rank.

Building it checks the plan's shape: every LOOP has one ENDLOOP after it with the same loop id,
properly nested; a NEXT is the last instruction of its schedule (the runtime reports a flow finished
at its NEXT, and counts on the end rank's outputs being sent by then); every rank a walk names has a
schedule for it and no other rank does; streams and consumer walks exist. A violation is a PlanError.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from wgc.plan.model import Emit, Instr, Next, Plan, Src, WalkSchedule, WalkSpec
from wgc.semantics.loops import LoopMismatch, loop_spans


@dataclass(frozen=True)
class Location:
    """An instruction of one rank's schedule for one walk (index None: the end of the schedule)."""

    source_name: str
    rank: int
    walk: str
    index: int | None = None
    kind: str = ""
    src: Src | None = None

    def short(self) -> str:
        if self.index is None:
            return f"rank {self.rank}, walk `{self.walk}`, end of schedule"
        return f"rank {self.rank}, walk `{self.walk}`, instruction {self.index} ({self.kind})"

    def __str__(self) -> str:
        if self.src is None:
            return self.short()
        return f"{self.short()} at {self.source_name}:{self.src.line}:{self.src.column}"


class PlanError(Exception):
    """The plan is wrong: its shape here; a deadlock, a misordered transfer, a use after free in the simulator.

    `at` is the instruction it names (rank, walk, index and kind, source position); None for a plan-wide problem.
    """

    def __init__(self, detail: str, at: Location | None = None) -> None:
        super().__init__(f"{at}: {detail}" if at is not None else detail)
        self.detail = detail
        self.at = at


def kind(instr: Instr) -> str:
    return str(type(instr).__struct_config__.tag)


def locate(plan: Plan, rank: int, walk: str, pc: int, instr: Instr | None) -> Location:
    if instr is None:
        return Location(plan.source_name, rank, walk)
    return Location(plan.source_name, rank, walk, pc, kind(instr), instr.src)


@dataclass(frozen=True)
class Schedule:
    rank: int
    walk: str
    inputs: list[str]
    code: list[Instr]
    jumps: dict[int, int]  # LOOP index → its ENDLOOP index, and ENDLOOP index → its LOOP index

    @property
    def tails(self) -> dict[int, int]:
        """LOOP index → its ENDLOOP index."""
        return {i: j for i, j in self.jumps.items() if i < j}


class PlanIndex:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.walks: dict[str, WalkSpec] = {w.name: w for w in plan.walks}
        self.schedules: dict[tuple[int, str], Schedule] = {}
        for rank in plan.ranks:
            for s in rank.schedules:
                if s.walk not in self.walks:
                    raise PlanError(f"rank {rank.rank} has a schedule for `{s.walk}`, which is not a walk")
                if (rank.rank, s.walk) in self.schedules:
                    raise PlanError(f"rank {rank.rank} has two schedules for walk `{s.walk}`")
                self.schedules[(rank.rank, s.walk)] = Schedule(rank.rank, s.walk, list(s.inputs),
                                                               list(s.instructions), self._jumps(rank.rank, s))
        self._check_walks()
        self._check_streams()

    def schedule(self, rank: int, walk: str) -> Schedule:
        return self.schedules[(rank, walk)]

    def on_rank(self, rank: int) -> dict[str, Schedule]:
        """walk → this rank's schedule for it."""
        return {walk: s for (r, walk), s in self.schedules.items() if r == rank}

    def stream_users(self, instr_kind: type, walks: Iterable[str] | None = None) -> dict[str, set[str]]:
        """Stream → walks whose schedules have a PUSH (or POP) of it, on any rank (of `walks` only, if given)."""
        only = None if walks is None else set(walks)
        out: dict[str, set[str]] = {}
        for (_, walk), s in self.schedules.items():
            if only is None or walk in only:
                for instr in s.code:
                    if isinstance(instr, instr_kind):
                        out.setdefault(instr.stream, set()).add(walk)
        return out

    def emitting_ranks(self) -> dict[str, set[int]]:
        """walk → ranks whose schedule for it has an EMIT."""
        out: dict[str, set[int]] = {}
        for (rank, walk), s in self.schedules.items():
            if any(isinstance(ins, Emit) for ins in s.code):
                out.setdefault(walk, set()).add(rank)
        return out

    def _jumps(self, rank: int, s: WalkSchedule) -> dict[int, int]:
        code = s.instructions
        try:
            spans = loop_spans(code)
        except LoopMismatch as e:
            raise PlanError(str(e), locate(self.plan, rank, s.walk, e.index, code[e.index])) from None
        for i, instr in enumerate(code[:-1]):
            if isinstance(instr, Next):
                raise PlanError("NEXT is not the last instruction of the schedule",
                                locate(self.plan, rank, s.walk, i, instr))
        jumps: dict[int, int] = {}
        for start, end in spans:
            jumps[start], jumps[end] = end, start
        return jumps

    def _check_walks(self) -> None:
        for w in self.plan.walks:
            if not w.ranks:
                raise PlanError(f"walk `{w.name}` runs on no rank")
            if w.end_rank not in w.ranks:
                raise PlanError(f"walk `{w.name}` ends on rank {w.end_rank}, which does not run it")
            for r in w.ranks:
                if (r, w.name) not in self.schedules:
                    raise PlanError(f"walk `{w.name}` runs on rank {r}, which has no schedule for it")
        for (r, walk) in self.schedules:
            if r not in self.walks[walk].ranks:
                raise PlanError(f"rank {r} has a schedule for walk `{walk}`, which does not list that rank")

    def _check_streams(self) -> None:
        for s in self.plan.streams:
            if s.consumer_walk is not None and s.consumer_walk not in self.walks:
                raise PlanError(f"stream `{s.name}` fires `{s.consumer_walk}`, which is not a walk")
