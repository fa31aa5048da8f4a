"""Chunk policies and the stream buffer: formulas checked exhaustively against direct slicing."""

from __future__ import annotations

import pytest

from wgc.check.policies import first_chunk_items
from wgc.placement.facts import FIRST_CHUNK_ITEMS
from wgc.semantics.stream_buffer import ENDED, PAD, WAITING, Chunk, StreamBuffer
from wgc.semantics.stream_policy import make_policy

N = 13  # streams of 0..N items


def expected(policy: str, n: int, at_end: str, **a: int) -> list[object]:
    """Every chunk of an n-item stream (items 0..n-1), written straight from the definitions."""
    items = list(range(n))
    chunks: list[object] = []
    if policy == "fixed":
        k = a["size"]
        full = n // k
        chunks = [items[j * k:(j + 1) * k] for j in range(full)]
        frag, size = items[full * k:], k
    elif policy == "sliding":
        w, s = a["window"], a["stride"]
        full = 0 if n < w else 1 + (n - w) // s
        chunks = [items[i * s:i * s + w] for i in range(full)]
        last_end = (full - 1) * s + w if full else 0
        frag, size = (items[full * s:] if n > last_end else []), w
    else:
        left, c = a["left"], a["chunk"]
        full = n // c
        chunks = [items[max(0, j * c - left):(j + 1) * c] for j in range(full)]
        frag = items[max(0, full * c - left):] if n > full * c else []
        size = len(frag) + (c - (n - full * c)) if frag else 0
    if frag and at_end == "flush":
        chunks.append(frag)
    elif frag and at_end == "pad":
        chunks.append(frag + [PAD] * (size - len(frag)))
    if policy == "fixed" and a["size"] == 1:
        chunks = [c[0] for c in chunks]  # type: ignore[index]
    return chunks


def drain(policy: str, n: int, at_end: str, **a: int) -> list[object]:
    buf = StreamBuffer(make_policy(policy, a), at_end)
    out: list[object] = []
    for i in range(n):
        buf.push(i)
        while (c := buf.poll()) is not None:  # chunks come out as soon as they are ready
            out.append(c.value)
    buf.close()
    while (c := buf.poll()) is not None:
        out.append(c.value)
    assert buf.drained
    return out


CASES = (
    [("fixed", {"size": k}) for k in range(1, 6)]
    + [("sliding", {"window": w, "stride": s}) for w in range(1, 6) for s in range(1, w + 1)]
    + [("left_context", {"left": left, "chunk": c}) for left in range(0, 5) for c in range(1, 5)]
)


@pytest.mark.parametrize("at_end", ["flush", "pad", "drop"])
@pytest.mark.parametrize(("policy", "args"), CASES, ids=lambda v: str(v))
def test_chunks_match_definitions(policy: str, args: dict[str, int], at_end: str) -> None:
    for n in range(N):
        assert drain(policy, n, at_end, **args) == expected(policy, n, at_end, **args), n


@pytest.mark.parametrize(("policy", "args"), CASES, ids=lambda v: str(v))
def test_complete_chunk_count(policy: str, args: dict[str, int]) -> None:
    p = make_policy(policy, args)
    for n in range(N):
        if policy == "fixed":
            want = n // args["size"]
        elif policy == "sliding":
            want = 0 if n < args["window"] else 1 + (n - args["window"]) // args["stride"]
        else:
            want = n // args["chunk"]
        assert p.complete(n) == want
        assert len(drain(policy, n, "drop", **args)) == want
        if n:  # the n-th item completes a chunk exactly when n items make one more than n - 1 do
            assert p.ends_chunk(n) == (len(drain(policy, n, "drop", **args)) > len(drain(policy, n - 1, "drop", **args)))


def test_fixed_one_delivers_items_themselves() -> None:
    assert drain("fixed", 3, "flush", size=1) == [0, 1, 2]


def test_left_context_first_chunk_has_no_context() -> None:
    assert drain("left_context", 7, "flush", left=2, chunk=3) == [[0, 1, 2], [1, 2, 3, 4, 5], [4, 5, 6]]
    assert drain("left_context", 7, "pad", left=2, chunk=3) == [[0, 1, 2], [1, 2, 3, 4, 5], [4, 5, 6, PAD, PAD]]


def test_sliding_fragment_starts_at_the_next_stride() -> None:
    assert drain("sliding", 6, "flush", window=4, stride=2) == [[0, 1, 2, 3], [2, 3, 4, 5]]
    assert drain("sliding", 7, "flush", window=4, stride=2) == [[0, 1, 2, 3], [2, 3, 4, 5], [4, 5, 6]]
    assert drain("sliding", 7, "pad", window=4, stride=2)[-1] == [4, 5, 6, PAD]
    assert drain("sliding", 3, "flush", window=4, stride=2) == [[0, 1, 2]]


def test_final_chunk_is_marked() -> None:
    buf = StreamBuffer(make_policy("fixed", {"size": 2}), "flush")
    for i in range(3):
        buf.push(i)
    buf.close()
    assert buf.poll() == Chunk([0, 1], 0)
    assert buf.poll() == Chunk([2], 1, final=True)


def test_pop_waits_then_ends() -> None:
    buf = StreamBuffer(make_policy("fixed", {"size": 2}), "flush", "stop")
    assert buf.pop() is WAITING
    buf.push("a")
    assert buf.pop() is WAITING
    buf.close()
    assert buf.pop() == Chunk(["a"], 0, final=True)
    assert buf.pop() is ENDED
    assert buf.pop() is ENDED


def test_after_end_continue_gives_empty_items() -> None:
    buf = StreamBuffer(make_policy("fixed", {"size": 1}), "flush", "continue")
    buf.push("x")
    buf.close()
    assert buf.pop().value == "x"
    for _ in range(3):
        got = buf.pop()
        assert isinstance(got, Chunk) and got.value is None


def test_capacity_signals_full_until_a_chunk_is_taken() -> None:
    buf = StreamBuffer(make_policy("fixed", {"size": 2}), capacity=3)
    assert buf.push(0) == "ok"
    assert buf.push(1) == "ok"
    assert buf.push(2) == "full"
    assert buf.full and buf.pending == 3
    assert buf.poll() is not None
    assert not buf.full and buf.pending == 1


def test_capacity_counts_unconsumed_items_only() -> None:
    """A sliding window keeps W - S items as context; only the S new ones count against capacity."""
    buf = StreamBuffer(make_policy("sliding", {"window": 4, "stride": 1}), capacity=4)
    for i in range(4):
        buf.push(i)
    assert buf.full
    assert buf.poll() is not None
    assert buf.pending == 0
    assert buf.push(4) == "ok"


@pytest.mark.parametrize(("name", "args"), [("fixed", {"size": 3}), ("sliding", {"window": 5, "stride": 2}),
                                           ("left_context", {"left": 4, "chunk": 3}),
                                           ("left_context", {"left": 0, "chunk": 2})])
def test_the_smallest_capacity_the_checkers_accept_is_what_the_buffer_needs_to_form_every_chunk(
        name: str, args: dict[str, int]) -> None:
    policy = make_policy(name, args)
    least = policy.first  # items unconsumed when the first chunk forms; a left context was consumed before
    assert first_chunk_items(name, args) == FIRST_CHUNK_ITEMS[name](args) == least
    buf = StreamBuffer(policy, capacity=least)
    taken = 0
    for i in range(40):
        assert not buf.full  # the producer always has room: every chunk forms within the capacity
        buf.push(i)
        while buf.poll() is not None:
            taken += 1
    assert taken == policy.complete(40)
    short = StreamBuffer(policy, capacity=least - 1) if least > 1 else None
    while short is not None and not short.full:
        short.push(0)
    assert short is None or not short.ready()  # one below: full before the first chunk, forever


def test_unbounded_by_default() -> None:
    buf = StreamBuffer(make_policy("fixed", {"size": 1}))
    for i in range(1000):
        assert buf.push(i) == "ok"


def test_long_stream_keeps_only_what_future_chunks_need() -> None:
    buf = StreamBuffer(make_policy("left_context", {"left": 3, "chunk": 2}))
    got = []
    for i in range(1000):
        buf.push(i)
        while (c := buf.poll()) is not None:
            got.append(c.value)
    assert got[-1] == [995, 996, 997, 998, 999]
    assert len(buf._items) <= 16


def test_push_after_close_is_refused() -> None:
    buf = StreamBuffer(make_policy("fixed", {"size": 1}))
    buf.close()
    with pytest.raises(ValueError, match="closed"):
        buf.push(1)


@pytest.mark.parametrize(("name", "args", "message"), [
    ("chunky", {}, "unknown chunk policy"),
    ("fixed", {}, "needs `size`"),
    ("fixed", {"size": 0}, "valid"),
    ("sliding", {"window": 2, "stride": 0}, "valid"),
])
def test_bad_policies(name: str, args: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_policy(name, args)


def test_bad_end_rules() -> None:
    with pytest.raises(ValueError, match="at_end"):
        StreamBuffer(make_policy("fixed", {"size": 1}), at_end="keep")
    with pytest.raises(ValueError, match="after_end"):
        StreamBuffer(make_policy("fixed", {"size": 1}), after_end="loop")
