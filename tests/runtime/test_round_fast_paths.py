"""The decode round's one-pass paths against the general ones they stand for: the scheduler's
`fits_whole` against its group-by-group rules, a kv component's `demands` against the engine's
per-call `pages_for` and `limit_error`, and the interpreter's compiled expressions against the
evaluator (values, and the error a missing value gives)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from wgc.runtime.components.base import Call
from wgc.runtime.engines.kv_component import KVComponent
from wgc.runtime.engines.kv_engine import Geometry, KVCacheEngine, Write
from wgc.runtime.worker.interpret import Interpreter, StepError
from wgc.runtime.worker.scheduler import Demand, Group, by_groups, fits_whole, schedule

from wgc.plan import model as m
from wgc.plan.model import ComponentSpec

PS = 4


@st.composite
def batches(draw: Any) -> tuple[list[Demand], int, int]:
    n = draw(st.integers(1, 8))
    demands = [Demand(request, draw(st.integers(0, 12)), draw(st.booleans()), PS, draw(st.integers(0, PS - 1)),
                      draw(st.integers(0, 2)), "" if draw(st.integers(0, 9)) else "never fits")
               for request in draw(st.permutations(range(n)))]
    return demands, draw(st.integers(0, 30)), draw(st.integers(0, 60))


@settings(max_examples=400, deadline=None)
@given(batches())
def test_a_round_that_fits_whole_is_decided_as_the_rules_decide_it(batch: tuple[list[Demand], int, int]) -> None:
    demands, free, budget = batch
    groups = [Group((i,), waited) for i, waited in zip(range(len(demands)), [0, 3, 1, 2, 0, 5, 0, 1])]
    slow = by_groups(demands, groups, free, budget, {d.request: 1 for d in demands})
    fast = fits_whole(demands, free, budget)
    if fast is not None:
        assert fast == slow
        assert not slow.deferred and not slow.failed and not slow.preempted
    elif not slow.deferred and not slow.failed and not slow.preempted:  # it ran whole all the same:
        # only a call larger than the whole budget, run because nothing had run yet
        assert sum(d.tokens for d in demands) > budget or sum(d.pages(d.tokens) for d in demands) > free
    assert schedule(demands, groups, free, budget, {d.request: 1 for d in demands}) == slow


def test_a_round_over_the_budget_or_the_pages_or_with_a_failing_call_is_not_decided_whole() -> None:
    decodes = [Demand(r, 1, False, PS) for r in range(3)]
    assert fits_whole(decodes, 3, 3) is not None
    assert fits_whole(decodes, 2, 3) is None  # three pages, two free
    assert fits_whole(decodes, 3, 2) is None  # three tokens, a budget of two
    assert fits_whole([*decodes[:2], Demand(9, 1, False, PS, error="too long")], 9, 9) is None


G = Geometry(layers=1, heads=1, kv_heads=1, head_dim=4, max_positions=40)


class Pool(KVComponent):
    """A kv component with an engine and no model: `write` takes a call's tokens, `decode` one."""

    chunked_entries = frozenset({"write"})

    def __init__(self, pages: int) -> None:
        spec = ComponentSpec("pool", "x.Pool", "kv", [], {}, [], {}, [0], 1, {})
        super().__init__(spec, 0, "cpu")
        self.kv = KVCacheEngine(G, pages, PS, torch.device("cpu"))

    def input_tokens(self, entry: str, call: Call) -> int:
        return len(call.args[0]) if entry == "write" else 1


def reference(comp: Pool, entry: str, calls: list[Call]) -> list[Demand]:
    """`demands` as it was written before: the engine asked per call."""
    kv, out = comp.kv, []
    for c in calls:
        label = comp.label_of(c)
        total = comp.input_tokens(entry, c)
        seq = kv.seq(c.request, label)
        left = total - (seq.progress if seq is not None else 0)
        setup, slack = kv.pages_for(c.request, label, left)
        out.append(Demand(c.request, left, entry in comp.chunked_entries, PS, slack, setup,
                          comp.limit_error(c.request, label, total, left)))
    return out


def test_demands_equal_the_engines_per_call_answers() -> None:
    comp = Pool(pages=7)
    kv = comp.kv
    for request, n in ((1, 3), (2, 4), (3, 6)):
        prepared = kv.prepare([Write(request, "a", list(range(n)), n)])
        kv.commit(prepared)
    kv.fork(1, "b", "a")  # shares request 1's partial page: a write copies it (a setup page)
    prepared = kv.prepare([Write(4, "a", list(range(10)), 10, budget=5)])  # a chunk in progress
    kv.commit(prepared)
    kv.preempt(3)  # swapped out: its pages come back first
    prompts = [Call(1, "b", ([0, 1, 2],)), Call(4, "a", (list(range(10)),)), Call(5, "a", (list(range(45)),)),
               Call(6, "a", (list(range(30)),)), Call(3, "a", ([1, 2],))]
    decodes = [Call(1, "a", (0,)), Call(1, "b", (0,)), Call(2, "a", (0,)), Call(3, "a", (0,)), Call(9, "a", (0,))]
    for entry, calls in (("write", prompts), ("decode", decodes)):
        assert comp.demands(entry, calls) == reference(comp, entry, calls)
    errors = [d.error for d in comp.demands("write", prompts)]
    assert "more than the model's 40 positions" in errors[2]  # 45 tokens
    assert "more than the whole pool" in errors[3]  # 30 tokens: 8 pages of a 7-page pool
    assert not errors[0] and not errors[1]


class _Options:
    fake_inputs = False


class _Host:
    """What the interpreter reads of an executor, for evaluating expressions only."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.options = _Options()
        self.rank = 0
        init = type("Init", (), {"params": params})()
        self.states = {7: type("State", (), {"init": init})()}
        plan = type("Plan", (), {"components": [ComponentSpec("lm", "x.Lm", "kv", [], {"eos": -1}, [], {}, [0], 1, {})],
                                 "source_name": "t.walk"})()
        self.rp = type("RankPlan", (), {"plan": plan})()


def instance(frame: dict[str, Any]) -> Any:
    src = m.Src(3, 5, 3, 20)
    return type("Inst", (), {"request": 7, "frame": frame, "walk": "w", "pc": 0,
                             "code": [m.Eval("out", m.ELit(0), src)]})()


EXPRS = [
    m.EBinary("==", m.EVal("tok"), m.EConst("lm", "eos")),
    m.EBinary("!=", m.EVal("tok"), m.EConst("lm", "eos")),
    m.EBinary("-", m.EParam("max_tokens"), m.ELit(1)),
    m.EBinary("/", m.EParam("max_tokens"), m.ELit(3)),
    m.EBinary("<", m.EBinary("*", m.EVal("tok"), m.ELit(2.5)), m.EParam("top_p")),
    m.EParam("top_p"),
    m.EConst("lm", "eos"),
]


@pytest.mark.parametrize("expr", EXPRS, ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("tok", [-1, 0, 5])
def test_a_compiled_expression_equals_the_evaluator(expr: m.Expr, tok: int) -> None:
    interp = Interpreter(_Host({"max_tokens": 10, "top_p": 0.9}))  # type: ignore[arg-type]
    inst = instance({"tok": tok})
    compiled = interp._compile(expr)
    assert compiled is not None
    want = interp.eval(expr, inst)
    assert compiled(inst) == want and type(compiled(inst)) is type(want)


def test_an_eval_of_a_missing_value_fails_as_the_evaluator_does() -> None:
    interp = Interpreter(_Host({"max_tokens": 10}))  # type: ignore[arg-type]
    evals = [(name, m.Eval("out", expr, m.Src(3, 5, 3, 20))) for name, expr in (("tok", EXPRS[0]), ("top_p", EXPRS[5]))]
    for name, ins in evals * 2:  # the second time from the cache
        inst = instance({})
        with pytest.raises(StepError) as general:
            interp.eval(ins.expr, inst)
        with pytest.raises(StepError) as compiled:
            interp._eval(inst, ins)
        assert str(compiled.value) == str(general.value) and f"value `{name}` is not available" in str(general.value)


def test_expressions_outside_the_compiled_kinds_and_fake_inputs_use_the_evaluator() -> None:
    interp = Interpreter(_Host({}))  # type: ignore[arg-type]
    assert interp._compile(m.EBinary("and", m.ELit(True), m.ELit(False))) is None  # short circuit
    assert interp._compile(m.EReq("task")) is None
    host = _Host({})
    host.options.fake_inputs = True  # type: ignore[misc]
    assert Interpreter(host)._compile(m.EParam("x")) is None  # type: ignore[arg-type]


def test_a_cached_eval_is_used_only_for_its_own_instruction() -> None:
    """The cache is keyed by id(): an entry left by another instruction (an id reused) is not taken."""
    interp = Interpreter(_Host({"max_tokens": 10}))  # type: ignore[arg-type]
    src = m.Src(3, 5, 3, 20)
    first, second = m.Eval("out", m.ELit(1), src), m.Eval("out", m.EParam("max_tokens"), src)
    inst = instance({})
    interp._eval(inst, first)
    interp._evals[id(second)] = interp._evals[id(first)]  # as if `second` had `first`'s old id
    interp._eval(inst, second)
    assert inst.frame["out"] == 10
