"""What a rank knows about the plan, prepared once at start-up: code per walk, flows, streams.

The plan index (wgc/semantics/plan_index.py, shared with the simulator) checks the plan's shape and
matches its loops; this adds what the runtime's messages need: who pushes to, reads and emits in each flow.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wgc.plan.model import Plan, Pop, Push, StreamSpec, WalkSchedule, WalkSpec
from wgc.semantics.flows import FlowTable, flow_walks
from wgc.semantics.plan_index import PlanIndex
from wgc.semantics.stream_policy import ChunkPolicy, make_policy


@dataclass
class RankPlan:
    plan: Plan
    rank: int
    code: dict[str, WalkSchedule] = field(default_factory=dict)
    tails: dict[str, dict[int, int]] = field(default_factory=dict)  # walk → pc of each LOOP → pc of its ENDLOOP
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
    # Streams this rank alone produces for a consumer on another rank: their chunk policies, by which
    # it holds items back until they complete a chunk there (held_items.py).
    held_streams: dict[str, ChunkPolicy] = field(default_factory=dict)

    @staticmethod
    def build(plan: Plan, rank: int) -> RankPlan:
        """`rank` is this rank's number; the coordinator passes its own address for the plan-wide tables."""
        index = PlanIndex(plan)  # raises PlanError on a plan of the wrong shape
        rp = RankPlan(plan, rank, walks=index.walks, streams={s.name: s for s in plan.streams})
        rp.inputs = {key: s.inputs for key, s in index.schedules.items()}
        for r in plan.ranks:
            for ws in r.schedules:
                if r.rank == rank:
                    rp.code[ws.walk] = ws
                    rp.tails[ws.walk] = index.schedule(rank, ws.walk).tails
        rp.flows = {f.name: FlowTable(f, rp.walks) for f in plan.flows}
        emitters = index.emitting_ranks()
        for f in plan.flows:
            members = flow_walks(f)
            for w in members:
                rp.walk_flows.setdefault(w, []).append(f.name)
            rp.fed_by_flow[f.name] = sorted(index.stream_users(Push, members))
            rp.read_by_flow[f.name] = sorted(index.stream_users(Pop, members))
            rp.flow_producers[f.name] = sorted({r for s in rp.fed_by_flow[f.name] for r in rp.streams[s].producer_ranks})
            rp.flow_emitters[f.name] = sorted({r for w in members for r in emitters.get(w, ())})
        for s in plan.streams:
            if s.consumer_walk is not None:
                rp.consumer_emitters[s.name] = sorted(emitters.get(s.consumer_walk, set()) - {s.consumer_rank})
                if rank != s.consumer_rank and s.consumer_walk in rp.code:
                    rp.other_consumers[s.consumer_walk] = s.name
            if s.producer_ranks == [rank] and s.consumer_rank != rank:
                rp.held_streams[s.name] = make_policy(s.policy, s.policy_args)
        return rp
