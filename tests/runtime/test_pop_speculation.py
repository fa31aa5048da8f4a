"""A speculative iteration whose first step reads a stream (`recv s`): the pending stop is applied
before the POP, as before a RECV. Before, the wasted iteration read on past the stream's end and the
request failed with "stream `s` ended and has nothing more to read" (with `nospec` it finished)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from wgc.runtime.coordinator.request import RequestSpec

from tests.runtime.cluster import ToyCluster, compile_text, cpu_placement

PROGRAM = """
model popspec
import tests.runtime.test_split_stop as ts
param n: int = 4 in 1..20
component judge: ts.Judge engine stateless {
    same(x: token) -> token
}
component post: ts.Post engine stateless {
    add(x: token, d: scalar) -> token
    num(x: token) -> scalar
}
stream s: token from post to judge fixed(1)
walk produce(first: token) {
    loop n carry x = first {
        x = post.add(x, 1)
        send x -> s
    }
}
walk consume() {
    loop until y == n max 100 carry y = 0 NOSPEC {
        v = recv s
        y = judge.same(v)
        emit tensor post.num(y)
    }
}
flow a {
    start -> produce -> done
}
flow b {
    start -> consume -> done
}
"""


@pytest.mark.parametrize("nospec", [False, True], ids=["spec", "nospec"])
@pytest.mark.parametrize("ranks", [1, 2])
def test_a_loop_reading_a_stream_ends_exactly_when_the_stream_does(tmp_path: Path, nospec: bool, ranks: int) -> None:
    extra = "" if ranks == 1 else "[components.post]\nranks = [1]\n"
    plan = compile_text(tmp_path, PROGRAM.replace("NOSPEC", "nospec" if nospec else ""), cpu_placement(ranks, extra))
    cluster = ToyCluster(plan)
    request = cluster.submit(RequestSpec(params={"n": 4}, inputs={"first": 0}, output_modalities=["tensor"]))
    cluster.pump(limit=10_000)  # bounded: a request that hangs leaves its instance behind, not a wait
    events = [e for e in cluster.take_events() if e.request == request]
    assert events and events[-1].kind == "done", [(e.kind, e.error) for e in events]
    values: list[Any] = [e.output.value for e in events if e.kind == "output" and e.output is not None]
    assert values == [1, 2, 3, 4]
    assert not cluster.leftovers() and not cluster.coordinator.live
