"""The decode round's per-row shortcuts against what they stand for: the argument tuple of a RUN's lane
built by one closure (runtime/worker/compiled.py `tupler`) against its getters one by one; compiled
comparisons against `binary`; a round that fits whole giving each call its demand's tokens as its
budget (the batcher builds those calls rather than `_replace` them); a step's rows in waves (one run
when no key repeats); an EMIT's one lookup."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from wgc.runtime.components.base import Call
from wgc.runtime.engines.kv_component import in_waves
from wgc.runtime.protocol.messages import COORDINATOR, Output
from wgc.runtime.worker.batching import Batcher, CallBatch
from wgc.runtime.worker.compiled import compile_expr, tupler
from wgc.runtime.worker.interpret import Interpreter, StepError
from wgc.runtime.worker.scheduler import Demand

from wgc.plan import model as m
from wgc.semantics.python_exprs import binary


@pytest.mark.parametrize("arity", range(0, 7))
def test_a_lanes_argument_tuple_is_its_getters_values_in_order(arity: int) -> None:
    seen: list[int] = []

    def getter(i: int) -> Any:
        return lambda inst: (seen.append(i), inst.frame[f"v{i}"])[1]

    inst: Any = SimpleNamespace(frame={f"v{i}": 10 * i + 1 for i in range(arity)})
    assert tupler([getter(i) for i in range(arity)])(inst) == tuple(10 * i + 1 for i in range(arity))
    assert seen == list(range(arity))  # evaluated left to right, each once


def test_a_missing_value_in_an_argument_raises_as_its_getter_does() -> None:
    inst: Any = SimpleNamespace(frame={"a": 1})
    make = tupler([lambda i: i.frame["a"], lambda i: i.frame["gone"], lambda i: i.frame["a"]])
    with pytest.raises(KeyError, match="gone"):
        make(inst)


VALUES: list[Any] = [0, 1, -1, 2.5, True, False, "a", "b", torch.tensor(3), torch.tensor([1, 2]), torch.tensor([1, 1])]


@pytest.mark.parametrize("op", ["==", "!=", "<", "<=", ">", ">="])
def test_a_compiled_comparison_is_binarys(op: str) -> None:
    """A bool straight from the operator; a tensor's elementwise result through `binary` (all of it)."""
    e = m.EBinary(op, m.EVal("a"), m.EVal("b"))
    compiled = compile_expr(e, False, {}, {})
    assert compiled is not None
    for a in VALUES:
        for b in VALUES:
            try:
                want = binary(op, a, b)
            except (TypeError, RuntimeError) as err:
                with pytest.raises(type(err)):
                    compiled(SimpleNamespace(frame={"a": a, "b": b}))  # type: ignore[arg-type]
                continue
            got = compiled(SimpleNamespace(frame={"a": a, "b": b}))  # type: ignore[arg-type]
            assert type(got) is type(want) and got == want, (a, op, b)


def test_a_round_that_fits_whole_gives_each_call_its_tokens_as_its_budget() -> None:
    ex: Any = SimpleNamespace(components={}, failures=0, dead=set(), stats={})
    batcher = Batcher(ex)
    comp: Any = SimpleNamespace(spec=SimpleNamespace(settings={"token_budget": 100}), pool_free=lambda: 50)
    calls = [Call(1, "", (5,)), Call(2, "", ("prompt",)), Call(3, "", (7,), budget=1)]
    demands = [Demand(1, 1, False, 16), Demand(2, 40, True, 16), Demand(3, 1, False, 16)]
    batch, stays = batcher._schedule(comp, "lm", "decode", [], CallBatch(calls, [0, 1, 2], ["", "", ""]), demands)
    assert not stays
    assert [c.budget for c in batch.calls] == [1, 40, 1]
    assert [c[:3] for c in batch.calls] == [c[:3] for c in calls]
    assert batcher.budgets["lm"] == 100 - 42


def test_waves_of_unique_keys_are_one_run_of_the_items_as_given() -> None:
    runs: list[list[tuple[int, str]]] = []

    def run(wave: list[tuple[int, str]]) -> list[str]:
        runs.append(wave)
        return [f"{r}{lab}" for r, lab in wave]

    items = [(1, "a"), (2, "a"), (1, "b")]
    assert in_waves(items, lambda x: x, run) == ["1a", "2a", "1b"] and runs == [items]


def test_a_key_twice_runs_in_waves_each_key_once_results_in_the_items_order() -> None:
    runs: list[list[tuple[int, str]]] = []

    def run(wave: list[tuple[int, str]]) -> list[str]:
        runs.append(wave)
        return [f"{r}{lab}{len(runs)}" for r, lab in wave]

    items = [(1, "a"), (2, "a"), (1, "a"), (1, "a")]
    assert in_waves(items, lambda x: x, run) == ["1a1", "2a1", "1a2", "1a3"]
    assert runs == [[(1, "a"), (2, "a")], [(1, "a")], [(1, "a")]]


def test_an_emit_sends_the_value_and_a_missing_one_fails_with_its_name() -> None:
    sent: list[Any] = []
    state: Any = SimpleNamespace(next_output_seq=lambda: 4)
    interp: Any = SimpleNamespace(ex=SimpleNamespace(states={7: state}, send=lambda d, msg: sent.append((d, msg)),
                                                     rank=2),
                                  _error=lambda inst, message: StepError(message))
    ins = m.Emit("text", "tok", m.Src(1, 1, 1, 5))
    Interpreter._emit(interp, SimpleNamespace(request=7, frame={"tok": 9}, walk="decode"), ins)  # type: ignore[arg-type]
    assert sent == [(COORDINATOR, Output(7, "text", 9, "decode", 2, 4))]
    with pytest.raises(StepError, match="value `tok` is not available"):
        Interpreter._emit(interp, SimpleNamespace(request=7, frame={}, walk="decode"), ins)  # type: ignore[arg-type]
