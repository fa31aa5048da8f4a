"""The memory-aware scheduler (runtime/worker/scheduler.py), pure: order (starved, decodes, older),
the token budget and chunk grants, groups all or nothing, calls that fail alone, preemption of the
newest holder, and over random batches: pages never over-committed."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from wgc.runtime.worker.scheduler import STARVED, Decision, Demand, Group, schedule

PS = 4  # page size of every demand here


def decode(request: int, *, slack: int = 0, setup: int = 0) -> Demand:
    return Demand(request, 1, False, PS, slack, setup)


def prompt(request: int, tokens: int, *, slack: int = 0, setup: int = 0, error: str = "") -> Demand:
    return Demand(request, tokens, True, PS, slack, setup, error)


def run(demands: list[Demand], free: int = 100, budget: int = 100, holders: dict[int, int] | None = None,
        groups: list[Group] | None = None) -> Decision:
    """One group per call unless given."""
    groups = [Group((i,)) for i in range(len(demands))] if groups is None else groups
    return schedule(demands, groups, free, budget, {} if holders is None else holders)


def test_decodes_go_before_prompts_and_the_older_request_first() -> None:
    demands = [prompt(1, 10), decode(5), decode(3)]
    out = run(demands, budget=2)
    assert out.grants == {1: 1, 2: 1} and out.deferred == [0]  # the older prompt waits for both decodes
    out = run(demands, budget=1)
    assert out.grants == {2: 1} and out.deferred == [0, 1]  # request 3 before request 5
    out = run([prompt(7, 3), prompt(2, 3)], budget=3)
    assert out.grants == {1: 3} and out.deferred == [0]
    assert out.budget_used == 3


def test_a_prompt_larger_than_the_budget_gets_a_chunk() -> None:
    assert run([prompt(1, 10)], budget=6).grants == {0: 6}
    assert run([prompt(1, 10)], budget=0).grants == {0: PS}  # nothing ran yet: at least a page's worth
    assert run([prompt(1, 2)], budget=0).grants == {0: 2}  # or the rest of the prompt
    out = run([decode(1), prompt(2, 10)], budget=3)
    assert out.grants == {0: 1, 1: 2} and out.budget_used == 3
    out = run([decode(1), prompt(2, 10)], budget=1)  # the budget is spent: the prompt waits
    assert out.grants == {0: 1} and out.deferred == [1]


def test_a_call_that_is_not_chunkable_runs_whole_or_waits() -> None:
    big = Demand(1, 10, False, PS)
    out = run([big], budget=3)  # larger than the budget, but nothing ran yet
    assert out.grants == {0: 10} and out.budget_used == 10
    out = run([decode(0), Demand(1, 10, False, PS)], budget=3)
    assert out.grants == {0: 1} and out.deferred == [1]
    out = run([decode(0), Demand(1, 2, False, PS)], budget=3)
    assert out.grants == {0: 1, 1: 2}


def test_starved_groups_go_first() -> None:
    demands = [decode(1), prompt(9, 4)]
    fresh = run(demands, budget=4, groups=[Group((0,)), Group((1,), waited=STARVED - 1)])
    assert fresh.grants == {0: 1, 1: 3}
    starved = run(demands, budget=4, groups=[Group((0,)), Group((1,), waited=STARVED)])
    assert starved.grants == {1: 4} and starved.deferred == [0]
    both = run([decode(3), decode(2)], budget=1, groups=[Group((0,), waited=STARVED), Group((1,), waited=5)])
    assert both.grants == {1: 1}  # among the starved: the older request first


def test_the_lanes_of_a_group_run_or_wait_together() -> None:
    lanes = [decode(1), prompt(2, 6), prompt(2, 6)]
    groups = [Group((0,)), Group((1, 2))]
    out = run(lanes, budget=8, groups=groups)  # 7 tokens left: not one lane's chunk, both wait
    assert out.grants == {0: 1} and out.deferred == [1]
    assert run(lanes, budget=13, groups=groups).grants == {0: 1, 1: 6, 2: 6}
    out = run(lanes, free=3, holders={2: 1}, groups=groups)  # 1 + 2 + 2 pages; 3 free; request 2 is the newest
    assert out.grants == {0: 1} and out.preempted == [2] and out.deferred == [1]
    out = run(lanes, free=5, groups=groups)
    assert out.grants == {0: 1, 1: 6, 2: 6}


def test_a_call_with_an_error_fails_alone_with_its_group() -> None:
    demands = [prompt(1, 3), prompt(1, 9000, error="the input is 9000 tokens"), decode(2), decode(3)]
    groups = [Group((0, 1)), Group((2,)), Group((3,))]
    out = run(demands, groups=groups)
    assert out.failed == {0: "a call of the same instance cannot run", 1: "the input is 9000 tokens"}
    assert out.grants == {2: 1, 3: 1} and out.deferred == [] and out.preempted == []


def test_a_running_request_that_cannot_grow_preempts_the_newest_holder() -> None:
    out = run([decode(2)], free=0, holders={1: 3, 2: 2, 3: 1})
    assert out.preempted == [3] and out.grants == {0: 1}
    out = run([Demand(1, 5, False, PS)], free=0, holders={1: 3, 2: 1, 3: 1, 4: 0})  # 2 pages
    assert out.preempted == [4, 3, 2] and out.grants == {0: 5}
    out = run([decode(2)], free=0, holders={1: 3, 2: 2})  # the newest is itself: it is the one preempted
    assert out.preempted == [2] and out.grants == {} and out.deferred == [0]
    out = run([decode(2, slack=1)], free=0, holders={1: 3, 2: 2})  # room in its last page: no page needed
    assert out.preempted == [] and out.grants == {0: 1}


def test_a_request_holding_nothing_waits_and_preempts_no_one() -> None:
    out = run([prompt(2, 8)], free=0, holders={1: 3})
    assert out.preempted == [] and out.grants == {} and out.deferred == [0]
    out = run([prompt(2, 8)], free=1, holders={1: 3})  # a chunk fits in what is free
    assert out.preempted == [] and out.grants == {0: PS}
    out = run([decode(2, setup=2)], free=1, holders={1: 3})  # a swapped-out label to bring back first
    assert out.preempted == [] and out.deferred == [0]


def test_grants_are_revoked_from_a_victim() -> None:
    # request 5's decode goes first (decodes before prompts); request 1's prompt then needs its page
    out = run([prompt(1, 4), decode(5)], free=1, holders={1: 2, 5: 2})
    assert out.preempted == [5] and out.grants == {0: 4} and out.deferred == [1]
    assert out.budget_used == 4
    # a starved newer request went first; the older running one takes its page back
    out = run([decode(1), decode(5)], free=1, holders={1: 2, 5: 2}, groups=[Group((0,)), Group((1,), waited=STARVED)])
    assert out.preempted == [5] and out.grants == {0: 1} and out.deferred == [1] and out.budget_used == 1
    # a victim's later calls are refused too
    out = run([decode(1), decode(5), prompt(5, 3)], free=1, holders={1: 2, 5: 2},
              groups=[Group((0,)), Group((1,), waited=STARVED), Group((2,))])
    assert out.preempted == [5] and out.grants == {0: 1} and out.deferred == [1, 2]


def test_a_chunk_shrinks_to_the_free_pages_before_anyone_is_preempted() -> None:
    out = run([prompt(1, 12, slack=1)], free=2, holders={1: 1, 2: 4})
    assert out.grants == {0: 9} and out.preempted == []  # 1 slot in its page + 2 pages of 4


REQUESTS = st.integers(0, 6)
DEMANDS = st.builds(Demand, REQUESTS, st.integers(0, 12), st.booleans(), st.integers(1, 4), st.integers(0, 3),
                    st.integers(0, 2), st.sampled_from(["", "", "", "", "too long"]))


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[Demand], list[Group], int, int, dict[int, int]]:
    """Random calls in groups of one request each (lanes share the request), random holders."""
    demands: list[Demand] = []
    groups: list[Group] = []
    for request in draw(st.lists(REQUESTS, unique=True, max_size=6)):
        lanes = draw(st.lists(DEMANDS, min_size=1, max_size=3))
        groups.append(Group(tuple(range(len(demands), len(demands) + len(lanes))), draw(st.integers(0, 3))))
        demands.extend(replace(d, request=request) for d in lanes)
    holders = draw(st.dictionaries(REQUESTS, st.integers(0, 5), max_size=5))
    return demands, groups, draw(st.integers(0, 8)), draw(st.integers(0, 20)), holders


@settings(max_examples=400, deadline=None)
@given(batches())
def test_pages_are_never_over_committed(batch: tuple[list[Demand], list[Group], int, int, dict[int, int]]) -> None:
    demands, groups, free, budget, holders = batch
    out = schedule(demands, groups, free, budget, holders)
    granted = sum(demands[i].pages(n) for i, n in out.grants.items())
    assert granted <= free + sum(holders.get(v, 0) for v in out.preempted)
    assert not {demands[i].request for i in out.grants} & set(out.preempted)
    assert len(set(out.preempted)) == len(out.preempted) and len(set(out.deferred)) == len(out.deferred)
    if not {d.request for d in demands} & set(holders):
        assert out.preempted == []  # nobody running: nobody preempts
    for g, group in enumerate(groups):  # each group ran whole, waits whole, or failed whole
        ran, failed = [i in out.grants for i in group.calls], [i in out.failed for i in group.calls]
        assert (all(ran), all(failed), g in out.deferred).count(True) == 1, (g, out)
        assert all(failed) == any(demands[i].error for i in group.calls)
    for i, n in out.grants.items():
        d = demands[i]
        assert 0 <= n <= d.tokens and (n > 0 or d.tokens == 0)
        assert n == d.tokens or (d.chunkable and len(next(g for g in groups if i in g.calls).calls) == 1)
    assert out.budget_used == sum(out.grants.values())
    assert out.budget_used <= budget or len({demands[i].request for i in out.grants}) == 1
