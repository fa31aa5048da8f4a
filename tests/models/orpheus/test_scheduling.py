"""Memory-aware scheduling end to end on the real tiny Orpheus components (the walk as compiled for
placements/cpu.toml, in process): a pool too small for the load, preemption, chunked prefill under
a token budget, prefix caching, and the pages left after many requests."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from wgc.runtime.components.base import Component
from wgc.runtime.coordinator.request import RequestSpec
from wgc.runtime.process.local import LocalCluster

from tests.models.orpheus.scheduling import PAGE, cluster, lm_of, speech


def run_tokens(c: LocalCluster, made: list[Component], specs: list[RequestSpec]) -> list[list[int]]:
    out = c.run(specs)
    lm = lm_of(made)
    return [lm.tokens[r] for r in sorted(out)]


def alone(specs: list[RequestSpec]) -> list[list[int]]:
    """Each request on its own in a pool large enough for it."""
    got = []
    for spec in specs:
        c, made = cluster(pages=64)
        got.extend(run_tokens(c, made, [spec]))
    return got


def load(n: int) -> list[RequestSpec]:
    voices = ["tara", "leo", "zoe", "mia"]
    return [speech(f"request number {i} says hello" + " again" * (i % 3), 36 + 3 * i, voices[i % 4]) for i in range(n)]


def test_eight_requests_on_a_pool_too_small_for_them_all_finish_as_they_would_alone() -> None:
    specs = load(8)
    expected = alone(specs)
    c, made = cluster(pages=12)  # ~4-5 pages a request: three at most at once
    got = run_tokens(c, made, specs)
    assert got == expected
    lm = lm_of(made)
    stats = c.executors[0].counters()
    assert stats["preemptions"] > 0 and stats["deferred_calls"] > 0  # the pressure was real
    assert lm.counters()["kv_swapped_in"] > 0
    assert lm.counters()["kv_pages_used"] == 0 and stats["deferred"] == 0
    lm.pages.check()


def test_a_preempted_request_samples_the_same_tokens_at_temperature_too() -> None:
    specs = [replace(s, params={**s.params, "temperature": 0.8}) for s in load(6)]
    roomy, made_roomy = cluster(pages=64)
    expected = run_tokens(roomy, made_roomy, specs)
    tight, made_tight = cluster(pages=10)
    got = run_tokens(tight, made_tight, specs)
    assert tight.executors[0].counters()["preemptions"] > 0
    assert got == expected  # the draw is keyed by (request seed, step): preemption changes nothing


def test_two_hundred_random_requests_on_a_tight_pool_leave_every_page_free() -> None:
    rng = random.Random(7)
    specs = [speech("hi " * rng.randint(1, 30), rng.randint(2, 30), temperature=rng.choice([0.0, 0.7]))
             for _ in range(200)]
    c, made = cluster(pages=10, budget=64)
    out = c.run(specs)
    assert len(out) == 200
    lm = lm_of(made)
    assert all(len(lm.tokens[r]) >= 1 for r in out)
    counters = lm.counters()
    assert counters["kv_pages_used"] == 0 and counters["requests"] == 0 and counters["kv_swapped_labels"] == 0
    assert c.executors[0].counters()["requests"] == 0
    lm.pages.check()


def test_a_request_that_can_never_fit_fails_alone_naming_its_own_limit() -> None:
    c, made = cluster(pages=4)  # 64 tokens of KV
    ids = [c.submit(speech("hello", 20)), c.submit(speech("word " * 30, 20)), c.submit(speech("there", 20))]
    c.pump()
    events = {e.request: e for e in c.take_events() if e.kind in ("done", "error")}
    assert events[ids[0]].kind == events[ids[2]].kind == "done"
    bad = events[ids[1]]
    assert bad.kind == "error" and "KV pages" in bad.error and "(4 pages)" in bad.error
    assert "request" not in bad.error  # it names its own input's limit, never another request


def gaps(log: list[tuple[str, list[tuple[int, int]]]], decoders: set[int]) -> int:
    """The most prompt tokens any running decoder waited behind between two of its decode steps."""
    waited: dict[int, int] = {}
    worst = 0
    for entry, calls in log:
        if entry == "decode":
            for r, _ in calls:
                if r in decoders:
                    worst = max(worst, waited.get(r, 0))
                    waited[r] = 0
        else:
            tokens = sum(n for _, n in calls)
            for r in waited:
                waited[r] += tokens
    return worst


@pytest.mark.parametrize("budget", [48, None])
def test_a_long_prompt_is_prefilled_in_chunks_between_decode_steps(budget: int | None) -> None:
    c, made = cluster(pages=256, budget=budget)
    lm = lm_of(made)
    short = [c.submit(speech(f"short {i}", 60)) for i in range(8)]
    arrived: list[int] = []

    def arrive(batch: int) -> None:  # the long prompt arrives once all eight are decoding
        if batch == 8 and not arrived:
            arrived.append(c.submit(speech("word " * 150, 10)))  # ~760 tokens

    lm.on_decode = arrive
    c.pump()
    long = arrived[0]
    done = {e.request for e in c.take_events() if e.kind == "done"}
    assert done == {*short, long}
    chunks = [n for entry, calls in lm.log if entry == "prefill" for r, n in calls if r == long]
    worst = gaps(lm.log, set(short))
    if budget is None:
        assert len(chunks) == 1 and worst >= 700  # one forward of the whole prompt stalls every decode
    else:
        assert len(chunks) > 10 and max(chunks) <= budget
        assert worst <= budget  # no decode waited behind more than one budgeted step


def test_prefix_caching_shares_a_voice_prompt_and_changes_no_token() -> None:
    prompt = "a shared system prompt that is long enough to fill several pages of the cache " * 2
    specs = [speech(prompt + f"then part {i}", 20, temperature=0.6) for i in range(6)]
    results = {}
    for caching in (True, False):
        c, made = cluster(pages=128, caching=caching)
        first = run_tokens(c, made, specs[:1])  # publishes the shared pages
        rest = run_tokens(c, made, specs[1:])
        results[caching] = (first, rest, lm_of(made).counters())
    on, off = results[True], results[False]
    assert on[0] == off[0] and on[1] == off[1]
    assert on[2]["prefix_hit_tokens"] >= 5 * 4 * PAGE and off[2]["prefix_hit_tokens"] == 0


def test_a_request_running_past_the_positions_in_decode_fails_alone() -> None:
    c, made = cluster(pages=320)
    good = [c.submit(speech(f"good {i}", 30)) for i in range(3)]
    long = c.submit(speech("word " * 805, 120))  # ~4030 prompt tokens: decode crosses the 4096 positions
    c.pump()
    events = {e.request: e for e in c.take_events() if e.kind in ("done", "error")}
    assert all(events[r].kind == "done" for r in good)
    assert events[long].kind == "error" and "past the model's 4096 positions" in events[long].error
    lm = lm_of(made)
    assert all(len(lm.tokens[r]) == 30 for r in good)  # every stream of its batch ran to its end
    assert lm.counters()["kv_pages_used"] == 0


def test_requests_sharing_prefix_pages_on_a_tight_pool_all_finish_as_they_would_alone() -> None:
    """Preempting a request that shares prefix pages frees only the pages it holds alone: the scheduler
    must count those, or it preempts too little and a decode finds the pool empty."""
    prefix = "the same long voice prompt for everyone " * 3
    specs = [speech(prefix + f"then {i}", 40) for i in range(24)]
    expected = alone(specs[:4])
    c, made = cluster(pages=40, caching=True)
    got = run_tokens(c, made, specs)
    assert got[:4] == expected
    lm = lm_of(made)
    assert lm.counters()["prefix_hit_tokens"] > 0 and c.executors[0].counters()["preemptions"] > 0
    assert lm.counters()["kv_pages_used"] == 0
    lm.pages.check()


def test_the_pool_holders_are_counted_only_when_a_round_may_not_fit() -> None:
    counts = {}
    for pages in (64, 12):
        c, made = cluster(pages=pages)
        lm = lm_of(made)
        asked = [0]
        holders = lm.pool_holders

        def counting(holders=holders, asked=asked) -> dict[int, int]:
            asked[0] += 1
            return holders()

        lm.pool_holders = counting  # type: ignore[method-assign]
        run_tokens(c, made, load(8))
        counts[pages] = (asked[0], c.executors[0].counters()["preemptions"])
    assert counts[64] == (0, 0)  # a roomy pool: every round fits, no page table walked
    assert counts[12][0] > 0 and counts[12][1] > 0  # a tight one: asked, and preempted as before
