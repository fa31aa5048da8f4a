"""The plan simulator on hand-built plans: every instruction, and every verification error."""

from __future__ import annotations

import pytest

from tests.sim.plans import (
    emit,
    endloop,
    ev,
    flow_chain,
    free,
    loop,
    make_plan,
    nxt,
    recv,
    run,
    send,
    src,
    stream,
    v,
)
from wgc.plan import model as pm
from wgc.plan.model import EBinary, EConst, ELit, EParam
from wgc.semantics.mock import MockComponent, MockEngine, small
from wgc.semantics.plan_index import PlanError
from wgc.sim.driver import LoopPolicy
from wgc.sim.errors import RequestError, SimulationError
from wgc.sim.request import make_request
from wgc.sim.simulator import simulate

REQ = make_request()
ENGINE = {"m": MockComponent("m", False), "llm": MockComponent("llm", True, ("main", "aux"), {"eos": 5})}


def mock_call(component: str, entry: str, *args: object) -> int:
    return MockEngine(ENGINE).call(component, entry, list(args))


def test_run_eval_emit_next() -> None:
    plan = make_plan({"w": {0: [run("m", "f", "a", ELit(1)), ev("b", EBinary("+", v("a"), ELit(1))),
                                emit("text", "a"), emit("text", "b"), nxt()]}})
    a = mock_call("m", "f", 1)
    assert simulate(plan, REQ) == {"text": [a, a + 1]}


def test_send_recv_between_ranks() -> None:
    plan = make_plan({"w": {
        0: [run("m", "f", "a", ELit(1)), send("a", 1, "t1")],
        1: [recv("a", 0, "t1"), emit("text", "a"), nxt()],
    }})
    assert simulate(plan, REQ) == {"text": [mock_call("m", "f", 1)]}


def test_fixed_loop_terminal_and_accumulated_yields() -> None:
    code = [ev("x", ELit(0)),
            loop(1, ELit(4), index="i", carries=(("x", None),)),
            ev("x", EBinary("+", v("x"), v("i"))),
            endloop(1, None, ("terminal", "x", "x"), ("accumulated", "x", "xs")),
            emit("text", "x"), emit("tensor", "xs"), nxt()]
    assert simulate(make_plan({"w": {0: code}}), REQ) == {"text": [6], "tensor": [[0, 1, 3, 6]]}


def test_dynamic_loop_stops_after_the_iteration_that_decided() -> None:
    # count up from 0; stop when the count reaches 2 → iterations 0, 1, 2
    code = [loop(1, EParam("n"), dynamic=True, index="i"),
            emit("text", "i"),
            ev("%stop1", EBinary("==", v("i"), ELit(2))),
            endloop(1, "%stop1"),
            nxt()]
    plan = make_plan({"w": {0: code}}, params=[pm.ParamSpec("n", "int", 10, 1, 10)])
    assert simulate(plan, REQ) == {"text": [0, 1, 2]}
    assert simulate(plan, REQ, LoopPolicy(cap=2)) == {"text": [0, 1]}
    assert simulate(plan, REQ, LoopPolicy(cap=5, ignore_stop=True)) == {"text": [0, 1, 2, 3, 4]}
    with_param = make_request(params={"n": 1})
    assert simulate(plan, with_param) == {"text": [0]}


def test_loop_with_zero_iterations_skips_its_body() -> None:
    code = [ev("x", ELit(7)), loop(1, ELit(0), carries=(("x", None),)), emit("text", "nope"),
            endloop(1, None, ("terminal", "x", "x"), ("accumulated", "x", "xs")), emit("text", "x"),
            emit("tensor", "xs"), nxt()]
    assert simulate(make_plan({"w": {0: code}}), REQ) == {"text": [7], "tensor": [[]]}


def test_nested_loops() -> None:
    code = [loop(1, ELit(2), index="i"), loop(2, ELit(3), index="j"),
            ev("k", EBinary("+", EBinary("*", v("i"), ELit(10)), v("j"))), emit("text", "k"), endloop(2),
            endloop(1), nxt()]
    assert simulate(make_plan({"w": {0: code}}), REQ) == {"text": [0, 1, 2, 10, 11, 12]}


def test_kv_labels_fork_and_transfer() -> None:
    main_then_aux = [run("llm", "p", "", ELit(1), label="main"), pm.Fork("llm", "aux", "main", src(2)),
                     run("llm", "d", "a", ELit(2), label="aux"), run("llm", "d", "b", ELit(2), label="main")]
    one_rank = make_plan({"w": {0: [*main_then_aux, emit("text", "a"), emit("text", "b"), nxt()]}})
    got = simulate(one_rank, REQ)["text"]
    assert got[0] == got[1]  # aux is a snapshot of main: the same call gives the same output
    shipped = make_plan({"w": {
        0: [run("llm", "p", "", ELit(1), label="main"), pm.KvSend("llm", "main", 1, "kv1", src(2))],
        1: [pm.KvRecv("llm", "main", 0, "kv1", src(3)), run("llm", "d", "b", ELit(2), label="main"),
            emit("text", "b"), nxt()],
    }})
    assert simulate(shipped, REQ)["text"] == [got[1]]
    not_shipped = make_plan({"w": {
        0: [run("llm", "p", "", ELit(1), label="main")],
        1: [run("llm", "d", "b", ELit(2), label="main"), emit("text", "b"), nxt()],
    }})
    with pytest.raises(SimulationError, match="cache label `llm.main` on rank 1 is stale"):
        simulate(not_shipped, REQ)


def test_default_label_is_the_first() -> None:
    plan = make_plan({"w": {0: [run("llm", "p", "", ELit(1)), run("llm", "d", "b", ELit(2), label="main"),
                                emit("text", "b"), nxt()]}})
    other = make_plan({"w": {0: [run("llm", "p", "", ELit(1), label="main"), run("llm", "d", "b", ELit(2)),
                                 emit("text", "b"), nxt()]}})
    assert simulate(plan, REQ) == simulate(other, REQ)


def test_fused_lanes() -> None:
    fused = pm.Run("llm", "v", ["a", "b"], [[ELit(1)], [ELit(1)]], ["main", "aux"], [1, 2], 0, src(1))
    plan = make_plan({"w": {0: [fused, emit("text", "a"), emit("text", "b"), nxt()]}})
    assert simulate(plan, REQ) == {"text": [mock_call("llm", "v", 1)] * 2}


def test_walk_result_feeds_the_next_walk() -> None:
    plan = make_plan({"a": {0: [ev("r", ELit(9)), nxt("r")]}, "b": {1: [emit("text", "x"), nxt()]}},
                     args={"b": ["x"]}, returns={"a": "token"})
    assert simulate(plan, REQ) == {"text": [9]}


def test_push_pop_and_consumer_walk() -> None:
    produce = [loop(1, ELit(5), index="i"), pm.Push("s", "i", src(1)), pm.Push("t", "i", src(1)), endloop(1), nxt()]
    consume = [loop(2, ELit(3)), pm.Pop("t", "c", src(2)), emit("text", "c"), endloop(2), nxt()]
    fired = [emit("audio", "chunk"), nxt()]
    plan = make_plan({"produce": {0: produce}, "consume": {1: consume}, "fire": {1: fired}},
                     flows=[flow_chain("produce", name="p"), flow_chain("consume", name="c")],
                     streams=[stream("s", "fixed", {"size": 2}, consumer_walk="fire", consumer_rank=1),
                              stream("t", consumer_rank=1)],
                     args={"fire": ["chunk"]}, on={"fire": "s"})
    assert simulate(plan, REQ) == {"text": [0, 1, 2], "audio": [[0, 1], [2, 3], [4]]}


def test_pop_after_end() -> None:
    produce = [ev("x", ELit(1)), pm.Push("s", "x", src(1)), nxt()]
    consume = [loop(1, ELit(3)), pm.Pop("s", "c", src(2)), emit("text", "c"), endloop(1), nxt()]
    streams = [stream("s", after_end="continue")]
    plan = make_plan({"produce": {0: produce}, "consume": {0: consume}}, streams=streams)
    assert simulate(plan, REQ) == {"text": [1, None, None]}
    stop = make_plan({"produce": {0: produce}, "consume": {0: consume}}, streams=[stream("s")])
    with pytest.raises(RequestError, match=r"rank 0, walk `consume`, instruction 1 \(pop\) at t.walk:2:1: "
                                           r"recv from stream `s` after it ended"):
        simulate(stop, REQ)


def test_full_stream_blocks_the_producer_until_consumed() -> None:
    produce = [loop(1, ELit(6), index="i"), pm.Push("s", "i", src(1)), endloop(1), nxt()]
    consume = [loop(2, ELit(6)), pm.Pop("s", "c", src(2)), emit("text", "c"), endloop(2), nxt()]
    plan = make_plan({"produce": {0: produce}, "consume": {1: consume}},
                     flows=[flow_chain("produce", name="p"), flow_chain("consume", name="c")],
                     streams=[stream("s", capacity=2)])
    assert simulate(plan, REQ) == {"text": [0, 1, 2, 3, 4, 5]}
    same_flow = make_plan({"produce": {0: produce}, "consume": {1: consume}}, streams=[stream("s", capacity=2)])
    with pytest.raises(SimulationError, match=r"rank 0, walk `produce`, instruction 1 \(push\) at t.walk:1:1: "
                                              r"deadlock: pushes to stream `s`, which is full"):
        simulate(same_flow, REQ)


def test_consts_params_and_request_fields() -> None:
    code = [ev("a", EConst("m", "eos")), ev("b", EParam("p")), ev("c", EBinary("in", ELit("audio"), pm.EReq("outputs"))),
            emit("text", "a"), emit("text", "b"), emit("text", "c"), nxt()]
    plan = make_plan({"w": {0: code}}, params=[pm.ParamSpec("p", "int", 4)])
    assert simulate(plan, make_request(outputs=["audio"])) == {"text": [3, 4, True]}


def test_flow_failure_is_a_request_error() -> None:
    when = EBinary("==", pm.EReq("task"), ELit("go"))
    flow = pm.FlowSpec("main", None, {"start": [pm.Transition("w", when)], "w": [pm.Transition("done", None)]}, [])
    plan = make_plan({"w": {0: [nxt()]}}, flows=[flow])
    assert simulate(plan, make_request(task="go")) == {}
    with pytest.raises(RequestError, match="flow `main`, at `start`"):
        simulate(plan, make_request(task="stop"))


def test_named_inputs_and_mock_inputs() -> None:
    plan = make_plan({"w": {0: [emit("text", "x"), emit("text", "y"), nxt()]}}, args={"w": ["x", "y"]})
    got = simulate(plan, make_request(named={"x": 42}))
    assert got == {"text": [42, small("input", "y")]}


# ---- verification errors ----------------------------------------------------------------


def test_deadlock_names_rank_walk_instruction_and_source() -> None:
    plan = make_plan({"w": {
        0: [recv("a", 1, "t1", line=3), send("a", 1, "t2"), nxt()],
        1: [recv("b", 0, "t2", line=7), send("b", 0, "t1")],
    }})
    with pytest.raises(SimulationError) as e:
        simulate(plan, REQ)
    assert str(e.value).startswith("rank 0, walk `w`, instruction 0 (recv) at t.walk:3:1: deadlock: waits for `t1`")
    assert "rank 1, walk `w`, instruction 0 (recv) at t.walk:7:1" in str(e.value)


def test_recv_that_can_never_be_matched() -> None:
    plan = make_plan({"w": {0: [nxt()], 1: [recv("a", 0, "t1", line=4)]}})
    with pytest.raises(SimulationError, match=r"rank 1, walk `w`, instruction 0 \(recv\) at t.walk:4:1: .*"
                                              r"rank 0 finished the walk without sending it"):
        simulate(plan, REQ)


def test_send_never_received() -> None:
    plan = make_plan({"w": {0: [ev("a", ELit(1)), send("a", 1, "t1", line=5), nxt()], 1: []}})
    with pytest.raises(SimulationError, match=r"rank 0, walk `w`, instruction 1 \(send\) at t.walk:5:1: "
                                              r"value `t1` to rank 1 is never received"):
        simulate(plan, REQ)


def test_misordered_tags() -> None:
    plan = make_plan({"w": {
        0: [ev("a", ELit(1)), send("a", 1, "ta"), send("a", 1, "tb"), nxt()],
        1: [recv("b", 0, "tb", line=8), recv("a", 0, "ta")],
    }})
    with pytest.raises(SimulationError, match=r"rank 1, walk `w`, instruction 0 \(recv\) at t.walk:8:1: "
                                              r"misordered transfer: expected value `tb` from rank 0, "
                                              r"the next message is value `ta`"):
        simulate(plan, REQ)


def test_kv_and_value_messages_do_not_mix() -> None:
    plan = make_plan({"w": {
        0: [ev("a", ELit(1)), send("a", 1, "t")],
        1: [pm.KvRecv("llm", "main", 0, "t", src(2)), nxt()],
    }})
    with pytest.raises(SimulationError, match="expected kv `t` from rank 0, the next message is value `t`"):
        simulate(plan, REQ)


def test_use_after_free() -> None:
    plan = make_plan({"w": {0: [ev("a", ELit(1)), free("a", line=2), emit("text", "a", line=3), nxt()]}})
    with pytest.raises(SimulationError, match=r"rank 0, walk `w`, instruction 2 \(emit\) at t.walk:3:1: "
                                              r"use after free: `a`"):
        simulate(plan, REQ)


def test_free_in_a_loop_before_the_next_iteration_reads() -> None:
    code = [ev("x", ELit(1)), loop(1, ELit(2), carries=(("x", None),)), ev("y", v("x")), free("x"),
            ev("x", v("y")), free("y"), endloop(1), nxt()]
    simulate(make_plan({"w": {0: code}}), REQ)  # frees then redefines: fine
    bad = [ev("x", ELit(1)), loop(1, ELit(2), carries=(("x", None),)), ev("y", v("x"), line=9), free("x"),
           endloop(1), nxt()]
    with pytest.raises(SimulationError, match=r"instruction 2 \(eval\) at t.walk:9:1: use after free: `x`"):
        simulate(make_plan({"w": {0: bad}}), REQ)


def test_double_free_and_undefined_reads() -> None:
    twice = make_plan({"w": {0: [ev("a", ELit(1)), free("a"), free("a"), nxt()]}})
    with pytest.raises(SimulationError, match="`a` is freed twice"):
        simulate(twice, REQ)
    undefined = make_plan({"w": {0: [emit("text", "ghost", line=6), nxt()]}})
    with pytest.raises(SimulationError, match=r"instruction 0 \(emit\) at t.walk:6:1: `ghost` is not defined on rank 0"):
        simulate(undefined, REQ)
    other_rank = make_plan({"w": {0: [ev("a", ELit(1)), nxt()], 1: [emit("text", "a")]}}, end_ranks={"w": 0})
    with pytest.raises(SimulationError, match="`a` is not defined on rank 1"):
        simulate(other_rank, REQ)


def test_next_problems() -> None:
    missing = make_plan({"w": {0: [ev("a", ELit(1))]}})
    with pytest.raises(SimulationError, match="end rank 0 never ran NEXT"):
        simulate(missing, REQ)
    wrong_rank = make_plan({"w": {0: [nxt()], 1: []}}, end_ranks={"w": 1})
    with pytest.raises(SimulationError, match="NEXT on rank 0, but walk `w` ends on rank 1"):
        simulate(wrong_rank, REQ)


def test_malformed_plans() -> None:
    with pytest.raises(PlanError, match="LOOP 1 has no ENDLOOP"):
        simulate(make_plan({"w": {0: [loop(1, ELit(1)), nxt()]}}), REQ)
    with pytest.raises(PlanError, match="ENDLOOP 2 does not close"):
        simulate(make_plan({"w": {0: [loop(1, ELit(1)), endloop(2), nxt()]}}), REQ)
    plan = make_plan({"w": {0: [nxt()]}})
    no_schedule = pm.Plan(**{f: getattr(plan, f) for f in plan.__struct_fields__ if f != "walks"},
                          walks=[pm.WalkSpec("w", [], None, None, [0, 3], 0)])
    with pytest.raises(PlanError, match="walk `w` runs on rank 3, which has no schedule for it"):
        simulate(no_schedule, REQ)
