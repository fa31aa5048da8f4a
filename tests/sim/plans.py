"""Build small Plans by hand for the simulator tests."""

from __future__ import annotations

from wgc.plan import model as pm
from wgc.plan.model import EVal, Expr

S = pm.Src(1, 1, 1, 2)


def src(line: int) -> pm.Src:
    return pm.Src(line, 1, line, 2)


def v(name: str) -> EVal:
    return EVal(name)


def run(component: str, entry: str, out: str, *args: Expr, label: str = "", line: int = 1) -> pm.Run:
    return pm.Run(component, entry, [out], [list(args)], [label], [], -1, src(line))


def ev(out: str, expr: Expr, line: int = 1) -> pm.Eval:
    return pm.Eval(out, expr, src(line))


def send(value: str, peer: int, tag: str, line: int = 1) -> pm.Send:
    return pm.Send(value, peer, tag, src(line))


def recv(value: str, peer: int, tag: str, line: int = 1) -> pm.Recv:
    return pm.Recv(value, peer, tag, src(line))


def emit(modality: str, value: str, line: int = 1) -> pm.Emit:
    return pm.Emit(modality, value, src(line))


def nxt(result: str | None = None, line: int = 1) -> pm.Next:
    return pm.Next(result, src(line))


def free(*names: str, line: int = 1) -> pm.Free:
    return pm.Free(list(names), src(line))


def loop(loop_id: int, bound: Expr, *, dynamic: bool = False, index: str | None = None,
         carries: tuple[tuple[str, Expr | None], ...] = ()) -> pm.Loop:
    return pm.Loop(loop_id, bound, dynamic, index, [pm.Carry(n, i) for n, i in carries], False, S)


def endloop(loop_id: int, stop: str | None = None, *yields: tuple[str, str, str]) -> pm.EndLoop:
    return pm.EndLoop(loop_id, stop, [pm.YieldOut(k, n, e) for k, n, e in yields], S)


COMPONENTS = [
    pm.ComponentSpec("m", "x.M", "stateless", [], {"eos": 3}, [], {}, [0], 1, {}),
    pm.ComponentSpec("llm", "x.L", "kv", [], {"eos": 5}, ["main", "aux"], {}, [0], 1, {}),
]


def flow_chain(*walks: str, name: str = "main", when: Expr | None = None) -> pm.FlowSpec:
    nodes = ["start", *walks, "done"]
    return pm.FlowSpec(name, when, {a: [pm.Transition(b, None)] for a, b in zip(nodes, nodes[1:])}, [])


def make_plan(schedules: dict[str, dict[int, list[pm.Instr]]], *, flows: list[pm.FlowSpec] | None = None,
              streams: list[pm.StreamSpec] = (), params: list[pm.ParamSpec] = (),
              args: dict[str, list[str]] | None = None, returns: dict[str, str] | None = None,
              end_ranks: dict[str, int] | None = None, on: dict[str, str] | None = None) -> pm.Plan:
    """One walk per key, run on the ranks its schedule dict names; by default one flow runs them in order."""
    args, returns, end_ranks, on = args or {}, returns or {}, end_ranks or {}, on or {}
    ranks = sorted({r for per in schedules.values() for r in per})
    walks = [pm.WalkSpec(w, ["token"] * len(args.get(w, [])), returns.get(w), on.get(w), sorted(per),
                         end_ranks.get(w, _next_rank(per)), args.get(w, [])) for w, per in schedules.items()]
    rank_specs = [pm.RankSpec(r, "cpu", "localhost", [pm.WalkSchedule(w, args.get(w, []), code)
                                                     for w, per in schedules.items() for rr, code in per.items()
                                                     if rr == r]) for r in ranks]
    if flows is None:
        flows = [flow_chain(*[w for w in schedules if w not in on])]
    return pm.Plan("test", "t.walk", "p.toml", list(params), COMPONENTS, list(streams), flows, walks, rank_specs,
                   [], [], [])


def _next_rank(per: dict[int, list[pm.Instr]]) -> int:
    """The rank whose schedule has the NEXT (else the last rank)."""
    return next((r for r, code in per.items() if any(isinstance(i, pm.Next) for i in code)), max(per))


def stream(name: str, policy: str = "fixed", args: dict[str, int] | None = None, *, at_end: str = "flush",
           after_end: str = "stop", capacity: int = 0, consumer_walk: str | None = None,
           consumer_rank: int = 0) -> pm.StreamSpec:
    return pm.StreamSpec(name, "token", "token", policy, args or {"size": 1}, at_end, after_end, capacity, [0],
                         consumer_rank, consumer_walk)
