"""The compiler's last pass: run the plan's schedules on synthetic requests and report what goes wrong.

    problems = verify(plan)   # [] when every schedule matches up; else Problem(message, src) each

Requests are derived from the flows: one per combination of the tasks, output
and input modalities, `think` and bool params the flow conditions test, each
with one input part of every kind an each-arm names. Each request runs twice:
DynamicLoops stopped naturally but capped at 3 iterations, then forced to run
exactly enough iterations for every stream to fill two chunks (so consumer
walks fire). Only plan problems (PlanError) are reported; a request that
cannot complete by its nature (no flow transition holds for that task) is not.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from wgc.plan.model import EBinary, EIndex, ELit, EParam, EReq, EUnary, Expr, FlowSpec, Plan, Src
from wgc.semantics.plan_index import PlanError, PlanIndex
from wgc.semantics.stream_policy import make_policy
from wgc.sim.driver import LoopPolicy
from wgc.sim.errors import RequestError, SimulationError
from wgc.sim.request import MockRequest, make_request
from wgc.sim.simulator import simulate

KINDS = ("text", "image", "audio", "video")
NATURAL_CAP = 3
MAX_REQUESTS = 16


@dataclass(frozen=True)
class Problem:
    """One plan bug: the message names rank, walk and instruction; `src` is its position in Plan.source_name."""

    message: str
    src: Src | None

    @staticmethod
    def of(e: PlanError) -> Problem:
        if e.at is None:
            return Problem(e.detail, None)
        return Problem(f"{e.at.short()}: {e.detail}", e.at.src)


def verify(plan: Plan, max_requests: int = MAX_REQUESTS) -> list[Problem]:
    try:
        index = PlanIndex(plan)
    except PlanError as e:
        return [Problem.of(e)]
    policies = [LoopPolicy(NATURAL_CAP)]
    fill = stream_fill(plan)
    if fill > NATURAL_CAP:
        policies.append(LoopPolicy(fill, ignore_stop=True))
    problems: list[Problem] = []
    for request in synthetic_requests(plan)[:max_requests]:
        for loops in policies:
            try:
                simulate(index, request, loops)
            except SimulationError as e:
                if Problem.of(e) not in problems:
                    problems.append(Problem.of(e))
            except RequestError:
                pass
    return problems


def stream_fill(plan: Plan) -> int:
    """Iterations after which every stream has had two complete chunks and a fragment."""
    return max((make_policy(s.policy, s.policy_args).end(1) + 1 for s in plan.streams), default=0)


def synthetic_requests(plan: Plan) -> list[MockRequest]:
    exprs = list(_flow_exprs(plan.flows))
    tasks = sorted(_compared(exprs, "task")) or [""]
    outputs = sorted(_tested(exprs, "outputs"))
    inputs = sorted(_tested(exprs, "inputs"))
    thinks = [False, True] if any(isinstance(e, EReq) and e.field == "think" for x in exprs for e in _walk(x)) \
        else [False]
    bools = sorted({e.name for x in exprs for e in _walk(x) if isinstance(e, EParam)}
                   & {p.name for p in plan.params if p.type == "bool"})
    defaults = {p.name: p.default for p in plan.params}
    kinds = _part_kinds(plan.flows)
    out = []
    for task, outs, ins, think, flags in itertools.product(
            tasks, _subsets(outputs), _subsets(inputs), thinks,
            itertools.product(*[(defaults[b], not defaults[b]) for b in bools])):
        modalities = set(outs) | ({"text"} if "text" not in outputs else set())
        request = make_request(kinds, outputs=sorted(modalities), task=task, think=think,
                               params=dict(zip(bools, flags)))
        if ins:
            request = MockRequest(request.params, task, request.parts, request.inputs | set(ins), request.outputs,
                                  think, request.named)
        out.append(request)
    return out


def _subsets(items: list[str]) -> list[tuple[str, ...]]:
    return [c for n in range(len(items) + 1) for c in itertools.combinations(items, n)]


def _part_kinds(flows: list[FlowSpec]) -> list[str]:
    named = {arm.kind for f in flows for each in f.eaches for arm in each.arms}
    return [k for k in KINDS if k in named] or ["text"]


def _flow_exprs(flows: list[FlowSpec]) -> Iterator[Expr]:
    for f in flows:
        if f.when is not None:
            yield f.when
        for outs in f.transitions.values():
            yield from (t.when for t in outs if t.when is not None)
        for each in f.eaches:
            yield from (a.when for a in each.arms if a.when is not None)


def _walk(e: Expr) -> Iterator[Expr]:
    yield e
    if isinstance(e, EUnary):
        yield from _walk(e.operand)
    elif isinstance(e, EBinary):
        yield from _walk(e.left)
        yield from _walk(e.right)
    elif isinstance(e, EIndex):
        yield from _walk(e.base)
        yield from _walk(e.index)


def _compared(exprs: list[Expr], field: str) -> set[str]:
    """String literals compared with `request.FIELD`."""
    out: set[str] = set()
    for x in exprs:
        for e in _walk(x):
            if isinstance(e, EBinary) and e.op in ("==", "!="):
                for a, b in ((e.left, e.right), (e.right, e.left)):
                    if isinstance(a, EReq) and a.field == field and isinstance(b, ELit) and isinstance(b.value, str):
                        out.add(b.value)
    return out


def _tested(exprs: list[Expr], field: str) -> set[str]:
    """Modalities tested with `"m" in request.FIELD`."""
    return {e.left.value for x in exprs for e in _walk(x)
            if isinstance(e, EBinary) and e.op == "in" and isinstance(e.right, EReq) and e.right.field == field
            and isinstance(e.left, ELit) and isinstance(e.left.value, str)}
