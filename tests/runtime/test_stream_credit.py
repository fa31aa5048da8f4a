"""A stream's capacity bounds what its producer may push ahead of the reader, and every item the
reader takes (`recv s` in a walk body, a POP) gives its producer a credit back: a producer that pushes
many times the capacity still runs to its end (without the credits it waits for ever)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from wgc.runtime.coordinator.request import RequestSpec

from tests.runtime.cluster import ToyCluster, compile_text, cpu_placement

PROGRAM = """
model credits
import tests.runtime.test_split_stop as ts
param n: int = 12 in 1..50
component judge: ts.Judge engine stateless {
    same(x: token) -> token
}
component post: ts.Post engine stateless {
    add(x: token, d: scalar) -> token
    num(x: token) -> scalar
}
stream s: token from post to judge fixed(1) capacity 2
walk produce(first: token) {
    loop n carry x = first {
        x = post.add(x, 1)
        send x -> s
    }
}
walk consume() {
    loop n {
        v = recv s
        emit tensor post.num(judge.same(v))
    }
}
flow a {
    start -> produce -> done
}
flow b {
    start -> consume -> done
}
"""


@pytest.mark.parametrize("ranks", [1, 2])
def test_a_producer_pushing_six_times_the_capacity_runs_to_its_end(tmp_path: Path, ranks: int) -> None:
    extra = "" if ranks == 1 else "[components.post]\nranks = [1]\n"
    cluster = ToyCluster(compile_text(tmp_path, PROGRAM, cpu_placement(ranks, extra)))
    request = cluster.submit(RequestSpec(params={"n": 12}, inputs={"first": 0}, output_modalities=["tensor"]))
    cluster.pump(limit=10_000)  # bounded: a producer left without credits hangs, and the pump stops
    events = [e for e in cluster.take_events() if e.request == request]
    assert events and events[-1].kind == "done", f"no end after {[e.kind for e in events]}: {cluster.stuck()}"
    values: list[Any] = [e.output.value for e in events if e.kind == "output" and e.output is not None]
    assert values == list(range(1, 13))
    assert not cluster.leftovers()
