"""A DynamicLoop whose stop is decided on one rank while its carried value is updated (and emitted)
on another: speculation must still end the loop, and end it exactly.

The stop's rank speculates (it runs iteration N+1's kv step before applying the stop of N), but the
next thing its iteration needs is the carried value from the other rank, which knows the stop and
never runs that iteration. The stop is applied before that RECV: the wasted step is rolled back
and the request ends. Each case runs on two ranks (both ways round) and on one, with and without
`nospec`, in process and in worker processes.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from wgc.runtime.api import DoneEvent, OutputEvent, Runtime
from wgc.runtime.components.base import Call, Component
from wgc.runtime.coordinator.request import RequestSpec

from tests.runtime.cluster import ToyCluster, compile_text, cpu_placement
from wgc.plan.model import Plan

ROOT = Path(__file__).resolve().parents[2]


class Judge(Component):
    def same(self, calls: list[Call]) -> list[Any]:
        return [c.args[0] for c in calls]


class Post(Component):
    def add(self, calls: list[Call]) -> list[Any]:
        return [c.args[0] + c.args[1] for c in calls]

    def num(self, calls: list[Call]) -> list[Any]:
        return [c.args[0] for c in calls]


PROGRAM = """
model split_stop
import tests.runtime.toys as toy
import tests.runtime.test_split_stop as ts
param n: int = 5 in 1..20
param stop_at: int = 1000 in 0..1000
component llm: toy.Counter engine kv {
    prefill(prompt: text) -> token
    decode(prev: token) -> token
    history(x: token) -> tokens
}
component judge: ts.Judge engine stateless {
    same(x: token) -> token
}
component post: ts.Post engine stateless {
    add(x: token, d: scalar) -> token
    num(x: token) -> scalar
}
walk gen(prompt: text) {
    tok = llm.prefill(prompt)
    loop until s == stop_at max n carry x = tok carry h = tok NOSPEC {
        h = llm.decode(h)
        x = post.add(x, 2)
        emit tensor post.num(x)
        s = judge.same(x)
    } yield terminal h
    emit text llm.history(h)
}
flow { start -> gen -> done }
"""

PLACEMENTS = {
    "two ranks": cpu_placement(2, "[components.post]\nranks = [1]\n"),  # stop on rank 0, `x` on rank 1
    "swapped": cpu_placement(2, "[components.llm]\nranks = [1]\n[components.judge]\nranks = [1]\n"),
    "one rank": cpu_placement(1),
}

# (params, expected outputs) for the prompt "abc": x = 3 + 2 per iteration; the history is the kv
# label's tokens (prefill 3, one decode per kept iteration), so a wasted step would show in it.
CASES: list[tuple[dict[str, int], dict[str, list[Any]]]] = [
    ({"n": 5, "stop_at": 9}, {"tensor": [5, 7, 9], "text": [[3, 4, 5, 6]]}),  # before its bound
    ({"n": 3}, {"tensor": [5, 7, 9], "text": [[3, 4, 5, 6]]}),  # at its bound
    ({"n": 3, "stop_at": 9}, {"tensor": [5, 7, 9], "text": [[3, 4, 5, 6]]}),  # both at once
    ({"n": 5, "stop_at": 5}, {"tensor": [5], "text": [[3, 4]]}),  # at the first iteration
]
IDS = ["early", "bound", "early-at-bound", "first"]


def spec(params: dict[str, int]) -> RequestSpec:
    return RequestSpec(params=dict(params), inputs={"prompt": "abc"}, output_modalities=["tensor", "text"])


def compiled(tmp_path: Path, placement: str, nospec: bool) -> Plan:
    return compile_text(tmp_path, PROGRAM.replace("NOSPEC", "nospec" if nospec else ""), PLACEMENTS[placement])


def by_modality(outputs: list[Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for o in outputs:
        out.setdefault(o.modality, []).append(o.value if hasattr(o, "value") else o.payload)
    return out


@pytest.mark.parametrize("nospec", [False, True], ids=["spec", "nospec"])
@pytest.mark.parametrize("placement", list(PLACEMENTS))
@pytest.mark.parametrize(("params", "expected"), CASES, ids=IDS)
def test_the_loop_ends_exactly_wherever_its_stop_is_decided(tmp_path: Path, placement: str, nospec: bool,
                                                            params: dict[str, int],
                                                            expected: dict[str, list[Any]]) -> None:
    cluster = ToyCluster(compiled(tmp_path, placement, nospec))
    request = cluster.submit(spec(params))
    cluster.pump(limit=10_000)  # bounded: a request that hangs leaves its instance behind, not a wait
    events = [e for e in cluster.take_events() if e.request == request]
    assert events and events[-1].kind == "done", f"no end after {[e.kind for e in events]}: {cluster.stuck()}"
    assert [e.kind for e in events[:-1]] == ["output"] * (len(events) - 1)
    assert by_modality([e.output for e in events[:-1]]) == expected  # nothing of a wasted iteration
    kept = len(expected["tensor"])
    wasted = 0 if nospec or kept == params["n"] else 1  # speculation ran (and rolled back) one step
    llm_rank = 1 if placement == "swapped" else 0
    decodes = sum(k for entry, k in cluster.component("llm", llm_rank).batches if entry == "decode")
    assert decodes == kept + wasted
    assert not cluster.leftovers() and not cluster.coordinator.live


def test_worker_processes_end_every_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The workers import this module's components; a PYTHONPATH already set keeps its precedence.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p))
    plan = compiled(tmp_path, "two ranks", nospec=False)

    async def body() -> list[list[Any]]:
        async with await Runtime.start(plan, allow_modules=["tests.runtime"]) as runtime:
            handles = [runtime.submit_spec(spec(params)) for params, _ in CASES]
            return [[e async for e in h.events()] for h in handles]

    async def bounded() -> list[list[Any]]:
        return await asyncio.wait_for(body(), 30.0)

    for events, (params, expected) in zip(asyncio.run(bounded()), CASES):
        assert isinstance(events[-1], DoneEvent), (params, events[-1])
        assert all(isinstance(e, OutputEvent) for e in events[:-1])
        assert by_modality(events[:-1]) == expected, params
