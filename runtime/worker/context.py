"""What a rank knows about the plan, prepared once at start-up: code per walk, flows, streams."""

from __future__ import annotations

from dataclasses import dataclass, field

from wgc.runtime.flows.table import FlowTable

from wgc.plan.model import Emit, EndLoop, FlowSpec, Loop, Plan, Pop, Push, StreamSpec, WalkSchedule, WalkSpec


def loop_tails(code: list) -> dict[int, int]:
    """pc of each LOOP → pc of its ENDLOOP."""
    tails, stack = {}, []
    for i, ins in enumerate(code):
        if isinstance(ins, Loop):
            stack.append(i)
        elif isinstance(ins, EndLoop):
            tails[stack.pop()] = i
    return tails


@dataclass
class RankPlan:
    plan: Plan
    rank: int
    code: dict[str, WalkSchedule] = field(default_factory=dict)
    tails: dict[str, dict[int, int]] = field(default_factory=dict)
    walks: dict[str, WalkSpec] = field(default_factory=dict)
    flows: dict[str, FlowTable] = field(default_factory=dict)
    streams: dict[str, StreamSpec] = field(default_factory=dict)
    walk_flows: dict[str, list[str]] = field(default_factory=dict)  # walk → flows it can run in
    fed_by_flow: dict[str, list[str]] = field(default_factory=dict)  # flow → streams its walks push to
    read_by_flow: dict[str, list[str]] = field(default_factory=dict)  # flow → streams its walks pop
    inputs: dict[tuple[int, str], list[str]] = field(default_factory=dict)  # (rank, walk) → inputs it needs
    # Who must hear that a flow ended, or a stream's consumer walks did (messages.FlowEnded, ConsumersEnded):
    flow_producers: dict[str, list[int]] = field(default_factory=dict)  # flow → ranks pushing to its streams
    flow_emitters: dict[str, list[int]] = field(default_factory=dict)  # flow → ranks with an EMIT in its walks
    consumer_emitters: dict[str, list[int]] = field(default_factory=dict)  # stream → other ranks its walk emits on
    # Consumer walk → its stream, when this rank runs the walk but is not the stream's consumer rank: here
    # its instances run one at a time in chunk order (StartWalk.prior), and are counted (ConsumersEnded).
    other_consumers: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def build(plan: Plan, rank: int) -> RankPlan:
        rp = RankPlan(plan, rank)
        rp.walks = {w.name: w for w in plan.walks}
        rp.streams = {s.name: s for s in plan.streams}
        for r in plan.ranks:
            for ws in r.schedules:
                rp.inputs[(r.rank, ws.walk)] = list(ws.inputs)
                if r.rank == rank:
                    rp.code[ws.walk] = ws
                    rp.tails[ws.walk] = loop_tails(ws.instructions)
        rp.flows = {f.name: FlowTable(f, rp.walks) for f in plan.flows}
        emitters = _emitting_ranks(plan)
        for f in plan.flows:
            members = _flow_walks(f)
            for w in members:
                rp.walk_flows.setdefault(w, []).append(f.name)
            rp.fed_by_flow[f.name] = sorted(_streams_touched(plan, members, Push))
            rp.read_by_flow[f.name] = sorted(_streams_touched(plan, members, Pop))
            rp.flow_producers[f.name] = sorted({r for s in rp.fed_by_flow[f.name] for r in rp.streams[s].producer_ranks})
            rp.flow_emitters[f.name] = sorted({r for w in members for r in emitters.get(w, ())})
        for s in plan.streams:
            if s.consumer_walk is not None:
                rp.consumer_emitters[s.name] = sorted(emitters.get(s.consumer_walk, set()) - {s.consumer_rank})
                if rank != s.consumer_rank and s.consumer_walk in rp.code:
                    rp.other_consumers[s.consumer_walk] = s.name
        return rp


def _emitting_ranks(plan: Plan) -> dict[str, set[int]]:
    """walk → ranks whose schedule for it has an EMIT."""
    out: dict[str, set[int]] = {}
    for r in plan.ranks:
        for ws in r.schedules:
            if any(isinstance(ins, Emit) for ins in ws.instructions):
                out.setdefault(ws.walk, set()).add(r.rank)
    return out


def _flow_walks(f: FlowSpec) -> set[str]:
    out = {t.target for outs in f.transitions.values() for t in outs}
    out |= {w for e in f.eaches for arm in e.arms for w in arm.walks}
    return out - {"done"} - {e.name for e in f.eaches}


def _streams_touched(plan: Plan, walks: set[str], kind: type) -> set[str]:
    return {ins.stream for r in plan.ranks for ws in r.schedules if ws.walk in walks
            for ins in ws.instructions if isinstance(ins, kind)}
