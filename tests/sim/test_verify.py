"""verify(plan): synthetic requests from the flows, plan problems as (message, src), stale cache labels."""

from __future__ import annotations

from tests.sim.plans import emit, endloop, ev, flow_chain, loop, make_plan, nxt, recv, run, send, src, stream, v
from wgc.plan import model as pm
from wgc.plan.model import EBinary, ELit, EParam, EReq, Src
from wgc.sim.request import make_request
from wgc.sim.simulator import simulate
from wgc.sim.simulator import verify as verify_from_simulator
from wgc.sim.verify import Problem, synthetic_requests, verify


def test_a_good_plan_has_no_problems() -> None:
    plan = make_plan({"w": {0: [run("m", "f", "a", ELit(1)), send("a", 1, "t")], 1: [recv("a", 0, "t"), nxt()]}})
    assert verify(plan) == []
    assert verify_from_simulator(plan) == []  # where wgc.compile looks for it


def test_problems_carry_message_and_source() -> None:
    plan = make_plan({"w": {0: [recv("a", 1, "t", line=4), nxt()], 1: [recv("b", 0, "u", line=6)]}})
    (problem,) = verify(plan)
    assert problem.src == Src(4, 1, 4, 2)
    assert problem.message.startswith("rank 0, walk `w`, instruction 0 (recv): deadlock: waits for `t` from rank 1")


def test_malformed_plans_are_one_problem() -> None:
    plan = make_plan({"w": {0: [loop(1, ELit(1)), nxt()]}})
    assert verify(plan) == [Problem("rank 0, walk `w`, instruction 0 (loop): LOOP 1 has no ENDLOOP", plan.ranks[0]
                                    .schedules[0].instructions[0].src)]


def test_requests_cover_what_the_flows_test() -> None:
    is_task = EBinary("==", EReq("task"), ELit("edit"))
    wants_audio = EBinary("in", ELit("audio"), EReq("outputs"))
    flag = EBinary("and", EParam("fast"), EReq("think"))
    flows = [pm.FlowSpec("a", wants_audio, {"start": [pm.Transition("w", is_task), pm.Transition("w", flag)],
                                            "w": [pm.Transition("done", None)]}, []),
             pm.FlowSpec("b", None, {"start": [pm.Transition("p", None)], "p": [pm.Transition("done", None)]},
                         [pm.EachSpec("p", [pm.EachArm("video", ["x"], None), pm.EachArm("text", ["x"], None)])])]
    plan = make_plan({"w": {0: [nxt()]}, "x": {0: [nxt()]}}, flows=flows,
                     params=[pm.ParamSpec("fast", "bool", False)])
    requests = synthetic_requests(plan)
    assert len(requests) == 2 * 2 * 2  # audio or not, think or not, fast or not; one task
    assert {r.task for r in requests} == {"edit"}
    assert {r.outputs for r in requests} == {frozenset({"text"}), frozenset({"text", "audio"})}
    assert {r.params["fast"] for r in requests} == {False, True}
    assert {r.think for r in requests} == {False, True}
    assert all([k for k, _ in r.parts] == ["text", "video"] for r in requests)


def test_forced_iterations_reach_consumer_walks() -> None:
    """A bug in a consumer walk of a fixed(4) stream shows only once four items arrive."""
    produce = [loop(1, EParam("n"), dynamic=True, index="i"), pm.Push("s", "i", src(2)),
               ev("%stop", EBinary(">=", v("i"), ELit(0))), endloop(1, "%stop"), nxt()]
    broken = [emit("audio", "undefined", line=9)]
    plan = make_plan({"produce": {0: produce}, "fire": {0: broken}},
                     streams=[stream("s", "fixed", {"size": 4}, at_end="drop", consumer_walk="fire")],
                     params=[pm.ParamSpec("n", "int", 100, 1, 100)], args={"fire": ["chunk"]}, on={"fire": "s"})
    assert simulate(plan, make_request()) == {}  # stops after one item: the consumer never runs
    (problem,) = verify(plan)
    assert "walk `fire`, instruction 0 (emit): `undefined` is not defined on rank 0" in problem.message


def test_a_label_never_shipped_is_stale() -> None:
    plan = make_plan({"prefill": {0: [run("llm", "p", "", ELit(1), label="main", line=3), nxt()]},
                      "decode": {1: [run("llm", "d", "t", ELit(1), label="main", line=8), emit("text", "t"), nxt()]}})
    (problem,) = verify(plan)
    assert problem.src == Src(8, 1, 8, 2)
    assert problem.message == (
        "rank 1, walk `decode`, instruction 0 (run): cache label `llm.main` on rank 1 is stale: its latest state "
        "was written on rank 0 (rank 0, walk `prefill`, instruction 0 (run) at t.walk:3:1) and never shipped to rank 1")


def test_a_shipped_label_and_a_tensor_parallel_group_are_fine() -> None:
    ship = make_plan({"prefill": {0: [run("llm", "p", "", ELit(1), label="main"),
                                      pm.KvSend("llm", "main", 1, "kv", src(2)), nxt()],
                                  1: [pm.KvRecv("llm", "main", 0, "kv", src(2))]},
                      "decode": {1: [run("llm", "d", "t", ELit(1), label="main"), emit("text", "t"), nxt()]}})
    assert verify(ship) == []
    body = [loop(1, ELit(3)), run("llm", "d", "t", ELit(1)), pm.Fork("llm", "aux", "main", src(3)),
            run("llm", "d", "u", ELit(2), label="aux"), endloop(1)]
    group = make_plan({"w": {0: [*body, nxt()], 1: list(body)}})
    assert verify(group) == []


def test_a_fork_from_a_stale_label() -> None:
    plan = make_plan({"a": {0: [run("llm", "p", "", ELit(1), label="main"), nxt()]},
                      "b": {1: [pm.Fork("llm", "aux", "main", src(5)), nxt()]}},
                     flows=[flow_chain("a", "b")])
    (problem,) = verify(plan)
    assert "instruction 0 (fork): cache label `llm.main` on rank 1 is stale" in problem.message
