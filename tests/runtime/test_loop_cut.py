"""Why a request's loops ended: a dynamic loop stopped by its `max` bound, not by its `until`
condition, is named in the request's end (`Event.cut`, `DoneEvent.cut`), carried with the flow
across ranks to the rank that finishes it (docs/plan.md, Loops)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from wgc.runtime.coordinator.core import Event
from wgc.runtime.coordinator.request import RequestSpec
from wgc.runtime.process.events import DoneEvent
from wgc.runtime.process.handle import RequestHandle

from tests.runtime.cluster import ToyCluster, compile_text, cpu_placement
from tests.runtime.test_semantics import decode_program

TWO_RANKS = """
model toyllm
import tests.runtime.toys as toy
param max_tokens: int = 8 in 1..100
component llm: toy.Counter engine kv {
    prefill(prompt: text) -> token
    decode(prev: token) -> token
}
component other: toy.Counter engine kv {
    history(x: token) -> tokens
}
walk prefill(prompt: text) -> token {
    return llm.prefill(prompt)
}
walk decode(first: token) -> token {
    loop until tok == 6 max max_tokens carry tok = first {
        tok = llm.decode(tok)
    } yield terminal tok
    return tok
}
walk after(x: token) {
    emit text other.history(x)
}
flow { start -> prefill -> decode -> after -> done }
"""


def ends(cluster: ToyCluster, specs: list[RequestSpec]) -> list[list[str]]:
    ids = [cluster.submit(s) for s in specs]
    cluster.pump()
    done = {e.request: e.cut for e in cluster.take_events() if e.kind == "done"}
    assert not cluster.leftovers()
    return [done[i] for i in ids]


@pytest.mark.parametrize("nospec", [False, True])
def test_the_end_names_a_loop_its_bound_stopped_and_only_that(tmp_path: Path, nospec: bool) -> None:
    cluster = ToyCluster(compile_text(tmp_path, decode_program(nospec), cpu_placement(1)))
    specs = [RequestSpec(params={"stop_at": 6}, inputs={"prompt": "abc"}),  # 4, 5, 6: the condition
             RequestSpec(params={"max_tokens": 3}, inputs={"prompt": "abc"}),  # 4, 5, 6 too, but the bound
             RequestSpec(params={"stop_at": 6, "max_tokens": 3}, inputs={"prompt": "abc"})]  # both at once
    assert ends(cluster, specs) == [[], ["decode"], []]  # a condition that holds at the bound is not a cut


def test_a_cut_travels_with_the_flow_to_the_rank_that_ends_it(tmp_path: Path) -> None:
    plan = compile_text(tmp_path, TWO_RANKS, cpu_placement(2, "[components.other]\nranks = [1]\n"))
    assert {w.name: w.end_rank for w in plan.walks}["after"] == 1
    cluster = ToyCluster(plan)
    specs = [RequestSpec(params={"max_tokens": 2}, inputs={"prompt": "abc"}), RequestSpec(inputs={"prompt": "abc"})]
    assert ends(cluster, specs) == [["decode"], []]


def test_the_api_done_event_carries_the_cut() -> None:
    handle = RequestHandle(None, 7, time.perf_counter())  # type: ignore[arg-type]
    handle.deliver(Event(7, "done", cut=["talker_decode"]))
    assert isinstance(handle.final, DoneEvent) and handle.final.cut == ("talker_decode",)
