"""A plan indexed for interpretation: each (rank, walk) schedule with its loop jump table.

Building it checks the plan's shape: every LOOP has one ENDLOOP after it with
the same loop id, properly nested; a NEXT is the last instruction of its
schedule (the runtime reports a flow finished at its NEXT, and counts on the
end rank's outputs being sent by then); every rank a walk names has a schedule
for it and no other rank does; streams and consumer walks exist.
"""

from __future__ import annotations

from dataclasses import dataclass

from wgc.plan.model import EndLoop, Instr, Loop, Next, Plan, WalkSchedule, WalkSpec
from wgc.sim.errors import Location, SimulationError


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


class PlanIndex:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.walks: dict[str, WalkSpec] = {w.name: w for w in plan.walks}
        self.schedules: dict[tuple[int, str], Schedule] = {}
        for rank in plan.ranks:
            for s in rank.schedules:
                if s.walk not in self.walks:
                    raise SimulationError(f"rank {rank.rank} has a schedule for `{s.walk}`, which is not a walk")
                if (rank.rank, s.walk) in self.schedules:
                    raise SimulationError(f"rank {rank.rank} has two schedules for walk `{s.walk}`")
                self.schedules[(rank.rank, s.walk)] = Schedule(rank.rank, s.walk, list(s.inputs),
                                                               list(s.instructions), self._jumps(rank.rank, s))
        self._check_walks()
        self._check_streams()

    def schedule(self, rank: int, walk: str) -> Schedule:
        return self.schedules[(rank, walk)]

    def stream_users(self, instr_kind: type) -> dict[str, set[str]]:
        """Stream → walks whose schedules have a PUSH (or POP) of it, on any rank."""
        out: dict[str, set[str]] = {}
        for (_, walk), s in self.schedules.items():
            for instr in s.code:
                if isinstance(instr, instr_kind):
                    out.setdefault(instr.stream, set()).add(walk)
        return out

    def _jumps(self, rank: int, s: WalkSchedule) -> dict[int, int]:
        jumps: dict[int, int] = {}
        open_loops: list[tuple[int, int]] = []  # (loop_id, index)
        for i, instr in enumerate(s.instructions):
            if isinstance(instr, Loop):
                open_loops.append((instr.loop_id, i))
            elif isinstance(instr, EndLoop):
                if not open_loops or open_loops[-1][0] != instr.loop_id:
                    raise SimulationError(f"ENDLOOP {instr.loop_id} does not close the innermost open LOOP",
                                          locate(self.plan, rank, s.walk, i, instr))
                loop_id, start = open_loops.pop()
                jumps[start], jumps[i] = i, start
            elif isinstance(instr, Next) and i != len(s.instructions) - 1:
                raise SimulationError("NEXT is not the last instruction of the schedule",
                                      locate(self.plan, rank, s.walk, i, instr))
        if open_loops:
            loop_id, start = open_loops[-1]
            raise SimulationError(f"LOOP {loop_id} has no ENDLOOP", locate(self.plan, rank, s.walk, start,
                                                                           s.instructions[start]))
        return jumps

    def _check_walks(self) -> None:
        for w in self.plan.walks:
            if not w.ranks:
                raise SimulationError(f"walk `{w.name}` runs on no rank")
            if w.end_rank not in w.ranks:
                raise SimulationError(f"walk `{w.name}` ends on rank {w.end_rank}, which does not run it")
            for r in w.ranks:
                if (r, w.name) not in self.schedules:
                    raise SimulationError(f"walk `{w.name}` runs on rank {r}, which has no schedule for it")
        for (r, walk) in self.schedules:
            if r not in self.walks[walk].ranks:
                raise SimulationError(f"rank {r} has a schedule for walk `{walk}`, which does not list that rank")

    def _check_streams(self) -> None:
        for s in self.plan.streams:
            if s.consumer_walk is not None and s.consumer_walk not in self.walks:
                raise SimulationError(f"stream `{s.name}` fires `{s.consumer_walk}`, which is not a walk")
