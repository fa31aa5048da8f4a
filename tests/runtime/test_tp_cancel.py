"""A cancel that reaches a TP follower before its leader's decision cannot stall the group
(runtime/worker/tp_agree.py): the follower keeps the request until the leader's release comes
behind its last decision, so it runs every batch the leader ran, with the same lanes in the same
order, which is what the group's collectives need (a missing lane would leave the leader's
all-reduce waiting until the Gloo timeout).

In-process, deterministic: both ranks of llama-tp2-hosts.toml's TP copy in one thread on fake
components that record each batch they run, and a wire stepped message by message, so the
follower's Cancel can be put ahead of a decision naming the cancelled request."""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

from wgc.runtime.components.base import Call
from wgc.runtime.components.fake import FakeComponent
from wgc.runtime.coordinator.request import RequestSpec
from wgc.runtime.process.local import LocalCluster
from wgc.runtime.protocol.messages import COORDINATOR, Cancel, TpBatch
from wgc.runtime.worker.instance import Instance
from wgc.runtime.worker.tp_agree import TpAgreement

from tests.runtime.hosts import compiled
from wgc.plan.file import load_plan
from wgc.plan.model import ComponentSpec


class Recording(FakeComponent):
    """A fake lm that records every batch it runs: (entry, the lanes' requests in order)."""

    def __init__(self, spec: ComponentSpec, rank: int) -> None:
        super().__init__(spec, rank, "cpu")
        self.batches: list[tuple[str, list[int]]] = []

    def call(self, entry: str, calls: list[Call]) -> list[Any]:
        self.batches.append((entry, [c.request for c in calls]))
        return super().call(entry, calls)


def cluster(tmp_path: Path) -> tuple[LocalCluster, list[Recording]]:
    made: list[Recording] = []

    def factory(spec: ComponentSpec, rank: int) -> FakeComponent:
        made.append(Recording(spec, rank))
        return made[-1]

    plan = load_plan(compiled(tmp_path, "llama", "llama-tp2-hosts.toml"))[1]
    return LocalCluster(plan, factory, rounds=1), sorted(made, key=lambda c: c.rank)


def cycle(c: LocalCluster) -> None:
    """One cycle of LocalCluster.pump: every message now on the wire delivered, then one round per rank
    (as a worker process runs), so requests submitted together share batches."""
    for _ in range(len(c.wire)):
        destination, msg = c.wire.popleft()
        if destination == COORDINATOR:
            c.coordinator.on_message(msg)
        else:
            c.executors[destination].handle(msg)
    for ex in c.executors:
        ex.run(1)


def request(tokens: int) -> RequestSpec:
    return RequestSpec(params={"max_tokens": tokens, "temperature": 0.0}, inputs={"prompt": [256, 72, 105]})


def follower_cancelled_before_a_decision(c: LocalCluster, victim: int, entry: str) -> None:
    """Step the wire until a decision naming `victim` at `entry` is on its way to the follower, cancel
    the request, and hand the follower its Cancel before that decision."""
    for _ in range(1_000):
        at = next((i for i, (d, m) in enumerate(c.wire) if d == 1 and isinstance(m, TpBatch) and m.entry == entry
                   and any(int(r) == victim for r, _ in m.instances)), None)
        if at is not None:
            break
        cycle(c)
    else:
        raise AssertionError(f"no decision naming request {victim} at {entry}")
    c.coordinator.cancel(victim)
    cancel = next(i for i, (d, m) in enumerate(c.wire) if d == 1 and isinstance(m, Cancel))
    item = c.wire[cancel]
    del c.wire[cancel]
    c.wire.insert(at, item)


def test_a_cancel_on_the_follower_before_the_decision_does_not_stall_the_group(tmp_path: Path) -> None:
    c, (leader, follower) = cluster(tmp_path)
    victim, other = c.submit(request(12)), c.submit(request(8))
    follower_cancelled_before_a_decision(c, victim, "decode")
    c.pump()
    events = c.take_events()
    assert {e.request: e.kind for e in events if e.kind != "output"} == {victim: "cancelled", other: "done"}
    # the collectives' invariant: the follower ran exactly the leader's batches, lanes in the same order
    assert follower.batches == leader.batches
    assert any(victim in lanes for entry, lanes in leader.batches if entry == "decode")
    assert sum(n for _, lanes in leader.batches for n in [lanes.count(other)]) == 8  # prefill + 7 decodes
    for ex in c.executors:  # nothing left behind: the victim dropped on both ranks, no decision waiting
        assert ex.states == {} and not ex.deferred, c.stuck()
    assert not c.executors[1].tp.decisions["lm"]


def test_a_cancel_on_the_follower_before_its_first_decision_does_not_stall_the_group(tmp_path: Path) -> None:
    """The follower's Cancel ahead of the prefill decision: the request has not run anything yet."""
    c, (leader, follower) = cluster(tmp_path)
    victim, other = c.submit(request(12)), c.submit(request(8))
    follower_cancelled_before_a_decision(c, victim, "prefill")
    c.pump()
    kinds = {e.request: e.kind for e in c.take_events() if e.kind != "output"}
    assert kinds == {victim: "cancelled", other: "done"}
    assert follower.batches == leader.batches and leader.batches[0] == ("prefill", [victim, other])
    for ex in c.executors:
        assert ex.states == {} and not ex.deferred, c.stuck()


# ---- the rule itself, on the agreement objects --------------------------------------------------

def agreements(tmp_path: Path) -> tuple[TpAgreement, TpAgreement]:
    plan = load_plan(compiled(tmp_path, "llama", "llama-tp2-hosts.toml"))[1]
    return TpAgreement(plan, 0), TpAgreement(plan, 1)


def test_a_leader_releases_what_it_will_not_decide_again(tmp_path: Path) -> None:
    leader, _ = agreements(tmp_path)
    sent: list[tuple[int, Any]] = []
    assert not leader.end(7, "cancelled", lambda dest, msg: sent.append((dest, msg)))  # a leader drops at once
    assert sent == [(1, TpBatch("lm", "", [], [7]))]
    sent.clear()
    assert leader.failed(8, lambda dest, msg: sent.append((dest, msg))) is None
    assert sent == [(1, TpBatch("lm", "", [], [8]))]


def test_a_follower_drops_a_cancelled_request_only_behind_its_leaders_release(tmp_path: Path) -> None:
    _, follower = agreements(tmp_path)
    nothing: Any = lambda dest, msg: None  # noqa: E731
    a, b = Instance(1, "main/decode#1", "decode", [], None), Instance(2, "main/decode#1", "decode", [], None)
    assert follower.end(1, "cancelled", nothing)  # kept: the leader may still decide on it
    follower.decided(TpBatch("lm", "decode", [[1, "main/decode#1"], [2, "main/decode#1"]]))
    follower.decided(TpBatch("lm", "", [], [1]))
    assert follower.settle() == []  # the decision naming it has not run yet
    batches = {("lm", "decode"): [b, a]}
    held, order = follower.agree(batches, [("lm", "decode")], nothing)
    assert order == [("lm", "decode")] and batches[("lm", "decode")] == [a, b] and held == []
    assert follower.settle() == [(1, "cancelled")] and not follower.ending and not follower.released


def test_a_release_that_came_first_lets_the_cancel_drop_at_once(tmp_path: Path) -> None:
    _, follower = agreements(tmp_path)
    nothing: Any = lambda dest, msg: None  # noqa: E731
    follower.decided(TpBatch("lm", "", [], [3]))
    assert not follower.end(3, "done", nothing) and not follower.released and not follower.decisions["lm"]


def test_a_failure_while_the_cancel_waits_hands_back_the_cancel(tmp_path: Path) -> None:
    _, follower = agreements(tmp_path)
    sent: list[Any] = []
    assert follower.end(4, "cancelled", lambda dest, msg: sent.append(msg))
    assert follower.failed(4, lambda dest, msg: sent.append(msg)) == "cancelled"  # acknowledged as it drops
    assert not follower.ending and sent == []  # a follower leads nothing: it releases nothing
    follower.decided(TpBatch("lm", "", [], [4]))
    follower.dead.add(4)
    assert follower.settle() == [] and not follower.released  # a release for a dropped request is let go


def test_a_leader_that_also_follows_decides_no_lane_of_a_request_it_keeps(tmp_path: Path) -> None:
    """Rank 0 leads `lm` and (here, by hand) follows another copy led by rank 5: a cancelled request
    waits for rank 5's release, and meanwhile its lanes stay out of rank 0's decisions."""
    leader, _ = agreements(tmp_path)
    leader.follows["other"] = 5
    leader.decisions["other"] = deque()
    sent: list[tuple[int, Any]] = []
    assert leader.end(1, "cancelled", lambda dest, msg: sent.append((dest, msg)))
    assert sent == [(1, TpBatch("lm", "", [], [1]))]  # released at once: two copies never wait for each other
    a, b = Instance(1, "main/decode#1", "decode", [], None), Instance(2, "main/decode#1", "decode", [], None)
    sent.clear()
    batches = {("lm", "decode"): [a, b]}
    held, order = leader.agree(batches, [("lm", "decode")], lambda dest, msg: sent.append((dest, msg)))
    assert held == [a] and batches[("lm", "decode")] == [b] and order == [("lm", "decode")]
    assert sent == [(1, TpBatch("lm", "decode", [[2, "main/decode#1"]]))]


def test_a_decided_lane_of_a_request_failed_here_is_left_out_not_waited_for(tmp_path: Path) -> None:
    """The request failed on both ranks in one batch (the same error everywhere); a decision the leader
    made before that names its other instance: the follower runs the rest, as the leader does."""
    _, follower = agreements(tmp_path)
    follower.dead.add(1)
    b = Instance(2, "main/decode#1", "decode", [], None)
    follower.decided(TpBatch("lm", "decode", [[1, "main/decode#1"], [2, "main/decode#1"]]))
    batches = {("lm", "decode"): [b]}
    held, order = follower.agree(batches, [("lm", "decode")], lambda dest, msg: None)
    assert order == [("lm", "decode")] and batches[("lm", "decode")] == [b] and held == []
