"""The TP agreement rule in-process: the leader announces each batch of a TP component in dispatch
order; a follower runs exactly the decided lanes, in the decided order, one decision at a time, and
holds back what has not been decided (runtime/worker/tp_agree.py). The cross-host run is
tests/runtime/test_tensor_parallel_hosts.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wgc.runtime.protocol.messages import Message, TpBatch
from wgc.runtime.worker.instance import Instance
from wgc.runtime.worker.tp_agree import TpAgreement

from tests.runtime.hosts import compiled
from wgc.plan.file import load_plan


def inst(request: int, key: str = "main/decode#0") -> Instance:
    return Instance(request, key, "decode", [], None)


def agreements(tmp_path: Path) -> tuple[TpAgreement, TpAgreement]:
    plan = load_plan(compiled(tmp_path, "orpheus", "orpheus-tp2-hosts.toml"))[1]
    return TpAgreement(plan, 0), TpAgreement(plan, 1)


def test_the_leader_announces_its_batches_in_dispatch_order(tmp_path: Path) -> None:
    leader, _ = agreements(tmp_path)
    sent: list[tuple[int, Message]] = []
    a, b, c = inst(1), inst(2), inst(3, "main/prefill#0")
    batches = {("llm", "decode"): [b, a], ("llm", "prefill"): [c], ("snac", "decode"): [inst(4)]}
    held, order = leader.agree(batches, [("llm", "decode"), ("llm", "prefill"), ("snac", "decode")],
                               lambda dest, msg: sent.append((dest, msg)))
    assert held == [] and order == [("llm", "decode"), ("llm", "prefill"), ("snac", "decode")]
    assert sent == [(1, TpBatch("llm", "decode", [[2, "main/decode#0"], [1, "main/decode#0"]], joined=True)),
                    (1, TpBatch("llm", "prefill", [[3, "main/prefill#0"]]))]  # snac is not TP: nothing


def test_a_follower_runs_only_what_was_decided_in_the_decided_order(tmp_path: Path) -> None:
    _, follower = agreements(tmp_path)
    a, b, late = inst(1), inst(2), inst(5)
    nothing: Any = lambda dest, msg: None  # noqa: E731
    batches = {("llm", "decode"): [a, late, b]}
    held, order = follower.agree(batches, [("llm", "decode")], nothing)
    assert order == [] and set(map(id, held)) == {id(a), id(b), id(late)}  # no decision yet: all wait
    follower.decided(TpBatch("llm", "decode", [[2, "main/decode#0"], [1, "main/decode#0"]]))
    batches = {("llm", "decode"): [a, late, b]}
    held, order = follower.agree(batches, [("llm", "decode")], nothing)
    assert order == [("llm", "decode")] and batches[("llm", "decode")] == [b, a]  # the leader's lane order
    assert held == [late]


def test_a_decision_matches_only_instances_at_its_own_entry(tmp_path: Path) -> None:
    """The same instance may sit at the component's other RUN on the follower: it is not taken into the
    decided batch (it would run a RUN it is not at)."""
    _, follower = agreements(tmp_path)
    a = inst(1)
    follower.decided(TpBatch("llm", "prefill", [[1, "main/decode#0"]]))
    batches = {("llm", "decode"): [a]}
    held, order = follower.agree(batches, [("llm", "decode")], lambda dest, msg: None)
    assert order == [] and held == [a] and batches[("llm", "decode")] == []


def test_decisions_run_one_after_another_and_a_missing_lane_blocks_those_behind(tmp_path: Path) -> None:
    _, follower = agreements(tmp_path)
    a, c = inst(1), inst(3, "main/prefill#0")
    follower.decided(TpBatch("llm", "decode", [[1, "main/decode#0"], [9, "main/decode#0"]]))  # 9 not here yet
    follower.decided(TpBatch("llm", "prefill", [[3, "main/prefill#0"]]))
    batches = {("llm", "decode"): [a], ("llm", "prefill"): [c]}
    held, order = follower.agree(batches, [("llm", "prefill"), ("llm", "decode")], lambda dest, msg: None)
    assert order == [] and {id(i) for i in held} == {id(a), id(c)}  # prefill waits behind decode


def test_speculation_is_off_in_loops_with_a_tp_run_only(tmp_path: Path) -> None:
    plan = load_plan(compiled(tmp_path, "orpheus", "orpheus-tp2-hosts.toml"))[1]
    leader = TpAgreement(plan, 0)
    code = next(ws.instructions for ws in plan.ranks[0].schedules if ws.walk == "decode")
    assert leader.no_speculation(code, 0, len(code))
    snac = next(ws.instructions for ws in plan.ranks[0].schedules if ws.walk == "snac_chunk")
    assert not leader.no_speculation(snac, 0, len(snac))


def test_a_leaders_round_runs_in_one_round_of_the_follower_or_not_at_all(tmp_path: Path) -> None:
    """The leader's decode and prefill of one round may have been one forward (runtime/worker/mixed.py):
    the follower runs neither until it can run both in one round, so it makes the same forwards."""
    _, follower = agreements(tmp_path)
    nothing: Any = lambda dest, msg: None  # noqa: E731
    a, c = inst(1), inst(3, "main/prefill#0")
    follower.decided(TpBatch("llm", "decode", [[1, "main/decode#0"]], joined=True))
    batches = {("llm", "decode"): [a]}
    held, order = follower.agree(batches, [("llm", "decode")], nothing)
    assert order == [] and held == [a]  # the rest of the leader's round has not come yet
    follower.decided(TpBatch("llm", "prefill", [[3, "main/prefill#0"]]))
    batches = {("llm", "decode"): [a]}
    held, order = follower.agree(batches, [("llm", "decode")], nothing)
    assert order == [] and held == [a]  # its prefill lane is not here: the decode does not run alone
    batches = {("llm", "decode"): [a], ("llm", "prefill"): [c]}
    held, order = follower.agree(batches, [("llm", "decode"), ("llm", "prefill")], nothing)
    assert order == [("llm", "decode"), ("llm", "prefill")] and held == [] and not follower.decisions["llm"]
