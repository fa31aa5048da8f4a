"""Health probes (runtime/process/probes.py): a health report carries the rank's counters; an ordering
barrier (a multi-rank plan's probe of every rank per flow or stream end) asks for none, and the
executor then builds none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wgc.runtime.process.probes import Probes
from wgc.runtime.protocol.messages import Health, HealthQuery, Message
from wgc.runtime.worker.executor import Executor

from tests.runtime.cluster import ToyCluster, compile_text, cpu_placement
from tests.runtime.test_out_batch import TOKENS


def test_a_barrier_asks_every_rank_for_no_counters_and_a_health_probe_for_them() -> None:
    sent: list[tuple[int, bool]] = []
    probes = Probes(lambda rank, counters: sent.append((rank, counters)))
    done: list[Any] = []
    probes.ask_all([1, 0], done.append)
    probes.ask(0, lambda rank, counters: done.append(("health", counters)))
    assert sent == [(0, False), (1, False), (0, True)]
    probes.answer(Health(0, {}))
    probes.answer(Health(1, {}))
    probes.answer(Health(0, {"runs": 3}))
    assert done == [{0: {}, 1: {}}, ("health", {"runs": 3})]


def test_the_executor_builds_its_counters_only_when_asked(tmp_path: Path) -> None:
    plan = compile_text(tmp_path, TOKENS, cpu_placement(1))
    lm = ToyCluster(plan).component("lm")
    replies: list[Message] = []
    ex = Executor(plan, 0, {"lm": lm}, lambda _to, msg: replies.append(msg))
    built: list[int] = []
    plain = ex.counters
    ex.counters = lambda: (built.append(1), plain())[1]  # type: ignore[method-assign]
    ex.handle(HealthQuery(counters=False))
    ex.handle(HealthQuery())
    assert [(m.rank, bool(m.counters)) for m in replies if isinstance(m, Health)] == [(0, False), (0, True)]
    assert built == [1]
