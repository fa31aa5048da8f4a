"""Loop iterations in step (runtime/worker/lockstep.py): a request arriving while another is mid-way
through a loop of several RUNs shares its batches from its first iteration on."""

from __future__ import annotations

from pathlib import Path

from wgc.runtime.coordinator.request import RequestSpec
from wgc.runtime.worker.lockstep import Lockstep

from tests.runtime.cluster import ToyCluster, compile_text, cpu_placement
from wgc.semantics.loops import loop_tails

STEPS = """
model lock
import tests.runtime.toys as toy
param steps: int = 10 in 2..100
component llm: toy.Counter engine kv {
    velocity(z: scalar, t: scalar) -> scalar
    decode(prev: token) -> token
    labels main, cfg_text
}
component mix: toy.Mixer engine stateless {
    add(z: scalar, a: scalar) -> scalar
    step(z: scalar, a: scalar, b: scalar) -> scalar
}
walk gen() {
    loop steps - 1 as t carry z = 0 {
        u = mix.add(z, t)
        parallel {
            branch main { a = llm.velocity(u, t, cache=main) }
            branch cfg_text { b = llm.velocity(u, t, cache=cfg_text) }
        }
        z = mix.step(z, a, b)
    } yield terminal z
    emit tensor z
}
flow { start -> gen -> done }
"""


def expected(steps: int) -> int:
    return sum(11 + 2 * t for t in range(steps - 1))  # velocity main 1 + t, cfg_text 10 + t


def test_a_late_request_joins_the_running_iterations(tmp_path: Path) -> None:
    cluster = ToyCluster(compile_text(tmp_path, STEPS, cpu_placement(1)))
    cluster.rounds = 1  # as a worker runs: messages (the late request) are read between rounds
    llm = cluster.component("llm")
    velocity, later = llm.velocity, []

    def arrive(calls):
        out = velocity(calls)
        if len([b for b in llm.batches if b[0] == "velocity"]) == 3 and not later:
            later.append(cluster.submit(RequestSpec(params={"steps": 5})))  # arrives mid-iteration
        return out

    llm.velocity = arrive
    first = cluster.submit(RequestSpec())
    cluster.pump()
    events = cluster.take_events()
    assert {e.request for e in events if e.kind == "done"} == {first, *later}
    outputs = {e.request: e.output.value for e in events if e.kind == "output"}
    assert outputs == {first: expected(10), later[0]: expected(5)}
    sizes = [n for entry, n in llm.batches if entry == "velocity"]
    assert sizes == [2] * 3 + [4] * 4 + [2] * 2  # the late request's 4 steps all in the first one's batches
    assert cluster.executors[0].counters()["held_for_step"] >= 1
    assert not cluster.leftovers()


def test_only_counted_loops_of_several_runs_are_kept_in_step(tmp_path: Path) -> None:
    one_run = STEPS.replace("walk gen() {", "walk talk() {\n    loop steps carry tok = 0 {\n"
                            "        tok = llm.decode(tok)\n    } yield terminal tok\n    emit text tok\n}\n\nwalk gen() {")
    one_run = one_run.replace("flow { start -> gen -> done }", "flow { start -> talk -> gen -> done }")
    cluster = ToyCluster(compile_text(tmp_path, one_run, cpu_placement(1)))
    rp = cluster.executors[0].rp
    rule = Lockstep()
    found = {}
    for walk, schedule in rp.code.items():
        code = schedule.instructions
        for head, tail in loop_tails(code).items():
            found[walk] = rule.first_run(code, head, tail)
    assert found["talk"] is None and found["gen"] is not None
