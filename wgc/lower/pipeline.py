"""Lowering as a flat list of named passes over one state, from a checked program and a placement to a Plan.

    build → place → fuse → comm → kv → flows → partition → liveness → captures → assemble

Each pass is a function of `LowerState`; `PASSES` is the order. Lowering
assumes checked input: the checker and the placement loader have already
rejected anything these passes would have to guess about.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from wgc.check import CheckResult
from wgc.check.context import Symbols
from wgc.lang import ast
from wgc.lower.build import build_walks
from wgc.lower.comm import plan_comm
from wgc.lower.flows import build_flows, successors
from wgc.lower.fuse import fuse_walk
from wgc.lower.ir import WalkIR
from wgc.lower.kv import ship_labels
from wgc.lower.liveness import insert_frees
from wgc.lower.place import place_walk
from wgc.lower.project import project, rank_inputs, value_homes, with_next
from wgc.lower.specs import component_specs, memory_rows, param_specs, setting_rows, stream_specs, walk_specs
from wgc.placement.memory import MemoryTable, estimate_memory
from wgc.placement.schema import Placement
from wgc.plan.model import CaptureSpec, FlowSpec, HostSpec, Instr, Plan, RankSpec, Run, TransportSpec, WalkSchedule


@dataclass
class LowerState:
    program: ast.Program
    symbols: Symbols
    placement: Placement
    source_name: str
    placement_name: str
    walks: list[WalkIR] = field(default_factory=list)
    flows: list[FlowSpec] = field(default_factory=list)
    schedules: dict[int, list[WalkSchedule]] = field(default_factory=dict)
    captures: list[CaptureSpec] = field(default_factory=list)
    memory: MemoryTable | None = None
    plan: Plan | None = None

    @property
    def all_ranks(self) -> list[int]:
        return list(range(self.placement.cluster.ranks))


def pass_build(s: LowerState) -> None:
    s.walks = build_walks(s.symbols)


def pass_place(s: LowerState) -> None:
    for w in s.walks:
        place_walk(w, s.placement)


def pass_fuse(s: LowerState) -> None:
    for w in s.walks:
        fuse_walk(w)


def pass_comm(s: LowerState) -> None:
    for w in s.walks:
        plan_comm(w, s.all_ranks)


def pass_flows(s: LowerState) -> None:
    s.flows = build_flows(s.program, s.symbols)


def pass_kv(s: LowerState) -> None:
    ship_labels(s.walks, s.symbols, successors(s.flows))


def pass_partition(s: LowerState) -> None:
    in_flow = {t.target for f in s.flows for outs in f.transitions.values() for t in outs}
    in_flow |= {w for f in s.flows for e in f.eaches for arm in e.arms for w in arm.walks}
    s.schedules = {r: [] for r in s.all_ranks}
    for w in s.walks:
        homes = value_homes(w.body)
        for r in s.all_ranks:
            instrs = with_next(w, r, project(w.body, r, homes), w.name in in_flow)
            if instrs:
                s.schedules[r].append(WalkSchedule(w.name, rank_inputs(w, instrs), instrs))


def pass_liveness(s: LowerState) -> None:
    walks = {w.name: w for w in s.walks}
    for r, schedules in s.schedules.items():
        s.schedules[r] = [
            WalkSchedule(ws.walk, ws.inputs, insert_frees(ws.instructions, _keep(walks[ws.walk]), ws.inputs))
            for ws in schedules
        ]


def _keep(w: WalkIR) -> set[str]:
    return {w.result} if w.result else set()


def pass_captures(s: LowerState) -> None:
    """One CUDA graph per (rank, component entry, walk), captured for the component's batch buckets."""
    if s.placement.cluster.device != "cuda":
        return
    ids: dict[tuple[int, str, str, str], int] = {}
    for r, schedules in s.schedules.items():
        for i, ws in enumerate(schedules):
            instrs: list[Instr] = []
            for ins in ws.instructions:
                comp = s.placement.component(ins.component) if isinstance(ins, Run) else None
                if comp is not None and comp.engine.cuda_graph_buckets:
                    key = (r, ins.component, ins.entry, ws.walk)
                    if key not in ids:
                        ids[key] = len(ids)
                        s.captures.append(CaptureSpec(ids[key], r, ins.component, ins.entry, ws.walk,
                                                      list(comp.engine.cuda_graph_buckets)))
                    ins = Run(ins.component, ins.entry, ins.outputs, ins.args, ins.labels,
                              list(comp.engine.cuda_graph_buckets), ids[key], ins.src)
                instrs.append(ins)
            schedules[i] = WalkSchedule(ws.walk, ws.inputs, instrs)


def pass_assemble(s: LowerState) -> None:
    s.memory = estimate_memory(s.placement, s.program)
    cluster, transport = s.placement.cluster, s.placement.transport
    hosts = {r: h.name for h in cluster.hosts for r in h.ranks}
    local = {r: i for h in cluster.hosts for i, r in enumerate(sorted(h.ranks))}  # CUDA devices count per host
    ranks = [
        RankSpec(r, "cpu" if cluster.device == "cpu" else f"cuda:{local.get(r, r)}", hosts.get(r, "localhost"),
                 s.schedules[r])
        for r in s.all_ranks
    ]
    model = s.program.of(ast.Model)
    s.plan = Plan(
        model=model[0].name if model else "",
        source_name=s.source_name,
        placement_name=s.placement_name,
        params=param_specs(s.program),
        components=component_specs(s.program, s.placement),
        streams=stream_specs(s.program, s.symbols, s.placement, s.walks),
        flows=s.flows,
        walks=walk_specs(s.symbols, s.walks),
        ranks=ranks,
        captures=s.captures,
        memory=memory_rows(s.memory),
        settings=setting_rows(s.program, s.placement),
        hosts=[HostSpec(h.name, h.address, sorted(h.ranks), dict(h.env)) for h in cluster.hosts],
        transport=TransportSpec(transport.intra_host, transport.inter_host, transport.port),
    )


PASSES: tuple[tuple[str, Callable[[LowerState], None]], ...] = (
    ("build", pass_build),
    ("place", pass_place),
    ("fuse", pass_fuse),
    ("comm", pass_comm),
    ("flows", pass_flows),
    ("kv", pass_kv),
    ("partition", pass_partition),
    ("liveness", pass_liveness),
    ("captures", pass_captures),
    ("assemble", pass_assemble),
)


def lower(checked: CheckResult, placement: Placement, source_name: str, placement_name: str) -> Plan:
    assert checked.program is not None and checked.symbols is not None and checked.ok  # callers check first
    state = LowerState(checked.program, checked.symbols, placement, source_name, placement_name)
    for _, run_pass in PASSES:
        run_pass(state)
    assert state.plan is not None
    return state.plan
