"""Lowering as a flat list of named passes over one state, from a checked program and a placement to a Plan.

    build → place → fuse → flatten → comm → flows → kv → partition → liveness → captures → assemble

Each pass is a function of `LowerState` that declares the IR properties it requires and the ones
it produces (wgc/lower/verify_ir.py names and checks them); `PASSES` is the order, checked against
those declarations before lowering starts; after every pass the IR verifier checks what it
produced, and at the end every property again (no pass undid an earlier one's work). `fuse` is optional: `lower(..., skip={"fuse"})` gives a plan with one
call per parallel branch, the same values. Lowering assumes checked input: the checker and the
placement loader have already rejected anything these passes would have to guess about.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wgc.check import CheckResult
from wgc.check.context import Symbols
from wgc.lang import ast
from wgc.lower.build import build_walks
from wgc.lower.comm import plan_comm
from wgc.lower.flatten import flatten_walk
from wgc.lower.flows import build_flows, successors
from wgc.lower.fuse import fuse_walk
from wgc.lower.ir import WalkIR
from wgc.lower.kv import ship_labels
from wgc.lower.liveness import insert_frees
from wgc.lower.place import place_walk
from wgc.lower.project import project, rank_inputs, value_homes, with_next
from wgc.lower.specs import component_specs, memory_rows, param_specs, setting_rows, stream_specs, walk_specs
from wgc.lower.verify_ir import CHECKS, verify
from wgc.placement.memory import MemoryTable, estimate_memory
from wgc.placement.schema import Placement
from wgc.plan.model import CaptureSpec, FlowSpec, HostSpec, Instr, Plan, RankSpec, Run, TransportSpec, WalkSchedule


class LoweringOrderError(RuntimeError):
    """A pass read what no pass before it produced, or the pass list is out of order: a bug in lowering."""


def _product(name: str, producer: str) -> Any:
    """A LowerState field that exists once `producer` has run: reading it earlier is an error naming both."""

    def get(self: LowerState) -> Any:
        try:
            return self.products[name]
        except KeyError:
            raise LoweringOrderError(f"`{name}` was read before pass `{producer}` produced it") from None

    def put(self: LowerState, value: Any) -> None:
        self.products[name] = value

    return property(get, put, doc=f"produced by pass `{producer}`")


class LowerState:
    """The inputs (given) and what the passes make (each field produced by one pass, named below)."""

    if TYPE_CHECKING:
        walks: list[WalkIR]  # build; place, fuse, flatten, comm and kv rewrite them in place
        flows: list[FlowSpec]  # flows
        schedules: dict[int, list[WalkSchedule]]  # partition; liveness and captures rewrite them
        captures: list[CaptureSpec]  # captures
        memory: MemoryTable  # assemble
        plan: Plan  # assemble
    else:
        walks = _product("walks", "build")
        flows = _product("flows", "flows")
        schedules = _product("schedules", "partition")
        captures = _product("captures", "captures")
        memory = _product("memory", "assemble")
        plan = _product("plan", "assemble")

    def __init__(self, program: ast.Program, symbols: Symbols, placement: Placement, source_name: str,
                 placement_name: str) -> None:
        self.program = program
        self.symbols = symbols
        self.placement = placement
        self.source_name = source_name
        self.placement_name = placement_name
        self.products: dict[str, Any] = {}

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


def pass_flatten(s: LowerState) -> None:
    for w in s.walks:
        flatten_walk(w)


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
    s.captures = []
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


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[LowerState], None]
    requires: frozenset[str]  # IR properties (verify_ir.CHECKS) that must hold before it runs
    produces: frozenset[str]  # the ones that hold after it
    optional: bool = False  # a plan without it is still right (see `lower`'s `skip`)


def _pass(name: str, run: Callable[[LowerState], None], requires: str = "", produces: str = "",
          optional: bool = False) -> Pass:
    return Pass(name, run, frozenset(requires.split()), frozenset(produces.split()), optional)


PASSES: tuple[Pass, ...] = (
    _pass("build", pass_build, "", "walks"),
    _pass("place", pass_place, "walks", "placed"),
    _pass("fuse", pass_fuse, "placed", "fused", optional=True),  # needs the parallel blocks flatten removes
    _pass("flatten", pass_flatten, "placed", "flat"),
    _pass("comm", pass_comm, "placed flat", "transfers"),
    _pass("flows", pass_flows, "walks", "flows"),
    _pass("kv", pass_kv, "transfers flows", "kv"),
    _pass("partition", pass_partition, "transfers kv flows", "schedules"),
    _pass("liveness", pass_liveness, "schedules", "frees"),
    _pass("captures", pass_captures, "schedules", "captures"),
    _pass("assemble", pass_assemble, "frees captures flows", "plan"),
)


def check_order(passes: Collection[Pass]) -> None:
    """Every pass's requirements are produced by passes before it; fuse comes before flatten."""
    have: set[str] = set()
    names = [p.name for p in passes]
    for p in passes:
        unknown = (p.requires | p.produces) - set(CHECKS)
        if unknown:
            raise LoweringOrderError(f"pass `{p.name}` names properties no check knows: {sorted(unknown)}")
        missing = p.requires - have
        if missing:
            raise LoweringOrderError(f"pass `{p.name}` requires {sorted(missing)}, which no pass before it produces")
        have |= p.produces
    if "fuse" in names and "flatten" in names and names.index("fuse") > names.index("flatten"):
        raise LoweringOrderError("pass `fuse` merges parallel branches: it must run before `flatten` removes them")


def lower(checked: CheckResult, placement: Placement, source_name: str, placement_name: str,
          skip: Collection[str] = ()) -> Plan:
    """The plan; `skip` names optional passes to leave out (`{"fuse"}`: one call per parallel branch)."""
    assert checked.program is not None and checked.symbols is not None and checked.ok  # callers check first
    unknown = set(skip) - {p.name for p in PASSES if p.optional}
    if unknown:
        raise ValueError(f"only optional passes can be skipped: {sorted(unknown)}")
    passes = [p for p in PASSES if p.name not in skip]
    check_order(passes)
    state = LowerState(checked.program, checked.symbols, placement, source_name, placement_name)
    established: set[str] = set()
    for p in passes:
        p.run(state)
        verify(state, set(p.produces))  # what the pass promised
        established |= p.produces
    verify(state, established)  # and no later pass undid an earlier one's work
    return state.plan
