"""The flow state machine: transitions in order, each-blocks over parts, walk inputs, reachability."""

from __future__ import annotations

import pytest

from wgc.check.flows import PART_KINDS as CHECKED_KINDS
from wgc.plan.model import (
    EachArm,
    EachSpec,
    EBinary,
    ELit,
    EPartKind,
    EReq,
    EResult,
    Expr,
    FlowSpec,
    Transition,
    WalkSpec,
)
from wgc.semantics.flows import ANY_KIND, PART_KINDS, Finished, FlowCursor, FlowError, FlowTable, RunWalk


def walk(name: str, args: tuple[str, ...] = (), returns: str | None = None) -> WalkSpec:
    return WalkSpec(name, ["token"] * len(args), returns, None, [0], 0, list(args))


WALKS = {w.name: w for w in [
    walk("a"), walk("b", ("x",)), walk("c", ("x",), "token"), walk("d", ("y",)), walk("e", ("p", "q")),
    walk("t", ("part",)), walk("i", ("img",), "image"), walk("v", ("img",)),
]}


class Env:
    """Conditions over request.task, part.kind and walk results, for the tests."""

    def __init__(self, task: str = "", results: dict[str, object] | None = None) -> None:
        self.task = task
        self.results = results or {}

    def __call__(self, e: Expr, kind: str | None) -> object:
        if isinstance(e, ELit):
            return e.value
        if isinstance(e, EReq):
            return self.task
        if isinstance(e, EPartKind):
            return kind
        if isinstance(e, EResult):
            return self.results.get(e.walk)
        assert isinstance(e, EBinary)
        left, right = self(e.left, kind), self(e.right, kind)
        return {"==": lambda: left == right, "and": lambda: left and right}[e.op]()


def task_is(name: str) -> Expr:
    return EBinary("==", EReq("task"), ELit(name))


def chain(*nodes: str, when: Expr | None = None) -> dict[str, list[Transition]]:
    return {a: [Transition(b, when if i == 0 else None)] for i, (a, b) in enumerate(zip(nodes, nodes[1:]))}


def table(transitions: dict[str, list[Transition]], eaches: list[EachSpec] = (), when: Expr | None = None) -> FlowTable:
    return FlowTable(FlowSpec("f", when, transitions, list(eaches)), WALKS)


def steps(cursor: FlowCursor) -> list[RunWalk]:
    out = []
    step = cursor.begin()
    while isinstance(step, RunWalk):
        out.append(step)
        step = cursor.finished(step.walk)
    assert isinstance(step, Finished) and cursor.done
    return out


def test_chain_and_inputs() -> None:
    t = table(chain("start", "a", "b", "c", "d", "done"))
    got = steps(t.cursor([], Env()))
    assert [(s.walk, s.feed) for s in got] == [("a", "named"), ("b", "named"), ("c", "named"), ("d", "result")]


def test_result_feeds_only_single_input_walks() -> None:
    t = table(chain("start", "c", "e", "done"))
    assert [s.feed for s in steps(t.cursor([], Env()))] == ["named", "named"]


def test_first_holding_transition_wins() -> None:
    tr = {"start": [Transition("a", task_is("x")), Transition("b", task_is("y")), Transition("d", None)],
          "a": [Transition("done", None)], "b": [Transition("done", None)], "d": [Transition("done", None)]}
    t = table(tr)
    assert [s.walk for s in steps(t.cursor([], Env("x")))] == ["a"]
    assert [s.walk for s in steps(t.cursor([], Env("y")))] == ["b"]
    assert [s.walk for s in steps(t.cursor([], Env("z")))] == ["d"]


def test_no_transition_holds_names_flow_and_node() -> None:
    t = table({"start": [Transition("a", task_is("x"))], "a": [Transition("done", None)]})
    with pytest.raises(FlowError, match="flow `f`, at `start`: no transition out of it holds"):
        t.cursor([], Env("y")).begin()
    t2 = table({"start": [Transition("a", None)]})
    cursor = t2.cursor([], Env())
    cursor.begin()
    with pytest.raises(FlowError, match="at `a`: it has no transitions"):
        cursor.finished("a")


def test_flow_when() -> None:
    t = table(chain("start", "a", "done"), when=task_is("go"))
    assert t.starts(Env("go")) and not t.starts(Env("stop"))


def test_each_block_runs_first_matching_arm_per_part() -> None:
    each = EachSpec("prompt", [
        EachArm("text", ["t"], None),
        EachArm("image", ["i", "v"], EBinary("==", EReq("task"), ELit("edit"))),
        EachArm("image", ["v"], None),
    ])
    tr = {**chain("start", "prompt"), **chain("prompt", "a", "done")}
    t = table(tr, [each])
    parts = ["text", "image", "audio", "image"]
    got = [(s.walk, s.feed, s.part) for s in steps(t.cursor(parts, Env("edit")))]
    assert got == [("t", "part", 0), ("i", "part", 1), ("v", "result", 1), ("i", "part", 3), ("v", "result", 3),
                   ("a", "named", None)]
    got = [(s.walk, s.part) for s in steps(t.cursor(parts, Env("")))]
    assert got == [("t", 0), ("v", 1), ("v", 3), ("a", None)]


def test_a_cursor_resumed_from_its_position_takes_the_same_steps() -> None:
    """What the runtime does when a walk ends on another rank: position() travels, seek() resumes there."""
    each = EachSpec("prompt", [EachArm("text", ["t"], None), EachArm("image", ["i", "v"], None)])
    t = table({**chain("start", "prompt"), **chain("prompt", "a", "done")}, [each])
    parts = ["text", "image", "image"]
    whole = [(s.walk, s.feed, s.part) for s in steps(t.cursor(parts, Env()))]
    for stop in range(1, len(whole) + 1):  # walk `stop` steps, hand over, finish on a fresh cursor
        first = t.cursor(parts, Env())
        step, seen = first.begin(), []
        for _ in range(stop):
            assert isinstance(step, RunWalk)
            seen.append((step.walk, step.feed, step.part))
            at, walk = first.position(), step.walk
            step = first.finished(walk)
        resumed = t.cursor(parts, Env())
        resumed.seek(at)
        assert resumed.position() == at if at.each is not None else resumed.position().node == at.node
        assert resumed.may_run({"a"}) == (walk != "a")
        step = resumed.finished(walk)
        while isinstance(step, RunWalk):
            seen.append((step.walk, step.feed, step.part))
            step = resumed.finished(step.walk)
        assert seen == whole and resumed.done


def test_each_arm_conditions_see_the_part_kind_and_wildcard() -> None:
    each = EachSpec("all", [EachArm("_", ["t"], EBinary("==", EPartKind(), ELit("audio")))])
    t = table({**chain("start", "all"), **chain("all", "done")}, [each])
    assert [s.part for s in steps(t.cursor(["text", "audio", "video", "audio"], Env()))] == [1, 3]
    assert steps(t.cursor([], Env())) == []


def test_conditions_read_results() -> None:
    tr = {"start": [Transition("c", None)],
          "c": [Transition("a", EBinary("==", EResult("c"), ELit(7))), Transition("done", None)],
          "a": [Transition("done", None)]}
    t = table(tr)
    assert [s.walk for s in steps(t.cursor([], Env(results={"c": 7})))] == ["c", "a"]
    assert [s.walk for s in steps(t.cursor([], Env(results={"c": 1})))] == ["c"]


def test_finished_checks_the_running_walk() -> None:
    cursor = table(chain("start", "a", "done")).cursor([], Env())
    cursor.begin()
    with pytest.raises(FlowError, match="walk `b` ended"):
        cursor.finished("b")


def test_reachability_and_may_run() -> None:
    each = EachSpec("prompt", [EachArm("text", ["t"], None), EachArm("image", ["i", "v"], None)])
    tr = {**chain("start", "a", "prompt"), **chain("prompt", "b", "done")}
    t = table(tr, [each])
    assert t.reachable("start") == {"a", "t", "i", "v", "b"}
    assert t.reachable("i") == {"v", "t", "i", "b"}
    assert t.reachable("b") == frozenset()
    cursor = t.cursor(["image"], Env())
    assert cursor.begin() == RunWalk("a", "named")
    assert cursor.may_run({"v"}) and not cursor.may_run({"a"})
    assert cursor.finished("a") == RunWalk("i", "part", 0)
    assert cursor.may_run({"v"})
    cursor.finished("i")
    assert cursor.finished("v") == RunWalk("b", "named")
    assert not cursor.may_run({"t", "i", "v", "a"})
    assert isinstance(cursor.finished("b"), Finished)
    assert not cursor.may_run({"b"})


def test_the_part_kinds_the_runtime_admits_are_the_ones_the_checker_lets_an_each_arm_name() -> None:
    assert set(PART_KINDS) == set(CHECKED_KINDS) - {ANY_KIND}
