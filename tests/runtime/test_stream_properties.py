"""Property-based tests of the three chunk policies against the seed's formulas, final fragments
included, and of credit-based backpressure in the running system."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from wgc.runtime.coordinator.request import RequestSpec

from tests.runtime.cluster import ToyCluster, compile_text, cpu_placement
from wgc.semantics.stream_buffer import StreamBuffer
from wgc.semantics.stream_policy import make_policy


def drain(buf: StreamBuffer) -> list:
    out = []
    while (chunk := buf.poll()) is not None:
        out.append(chunk.value)
    return out


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 80), window=st.integers(1, 12), stride=st.integers(1, 12),
       at_end=st.sampled_from(["flush", "pad", "drop"]))
def test_sliding_windows_follow_the_formula(n: int, window: int, stride: int, at_end: str) -> None:
    if stride > window:
        stride = window
    buf = StreamBuffer(make_policy("sliding", {"window": window, "stride": stride}), at_end)
    items = list(range(n))
    for x in items:
        buf.push(x)
    full = drain(buf)
    assert len(full) == (0 if n < window else 1 + (n - window) // stride)  # windows = 1 + floor((n - W)/S)
    assert full == [items[i * stride:i * stride + window] for i in range(len(full))]
    buf.close()
    tail = drain(buf)
    covered = (len(full) - 1) * stride + window if full else 0
    leftover = n > covered and (not full or n > covered)
    if at_end == "drop" or not leftover:
        assert tail == []
    else:
        assert len(tail) == 1
        start = len(full) * stride
        expected = items[start:n]
        assert tail[0][:len(expected)] == expected
        if at_end == "pad":
            assert len(tail[0]) == window and all(x is None for x in tail[0][len(expected):])


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 80), left=st.integers(0, 10), chunk=st.integers(1, 10),
       at_end=st.sampled_from(["flush", "pad", "drop"]))
def test_left_context_chunks_carry_left_old_items_and_chunk_new_ones(n: int, left: int, chunk: int,
                                                                     at_end: str) -> None:
    buf = StreamBuffer(make_policy("left_context", {"left": left, "chunk": chunk}), at_end)
    items = list(range(n))
    for x in items:
        buf.push(x)
    buf.close()
    chunks = drain(buf)
    full = n // chunk
    for j, c in enumerate(chunks[:full]):
        assert c == items[max(0, j * chunk - left):(j + 1) * chunk]  # L old (none for the first) + C new
    rest = n - full * chunk
    assert len(chunks) == full + (1 if rest and at_end != "drop" else 0)
    if rest and at_end != "drop":
        last = chunks[-1]
        assert last[:len(items[max(0, full * chunk - left):])] == items[max(0, full * chunk - left):]


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 60), size=st.integers(1, 9), at_end=st.sampled_from(["flush", "pad", "drop"]))
def test_fixed_chunks_are_consecutive_and_the_fragment_follows_at_end(n: int, size: int, at_end: str) -> None:
    buf = StreamBuffer(make_policy("fixed", {"size": size}), at_end)
    items = list(range(n))
    for x in items:
        buf.push(x)
    buf.close()
    chunks = drain(buf)
    whole = [items[i:i + size] for i in range(0, n - n % size, size)]
    if size == 1:
        whole = items  # fixed(1) delivers the item itself
    assert chunks[:len(whole)] == whole
    rest = n % size
    if rest and at_end != "drop":
        assert chunks[len(whole):][0][:rest] == items[n - rest:]
        assert len(chunks[len(whole):][0]) == (size if at_end == "pad" else rest)
    else:
        assert len(chunks) == len(whole)


BOUNDED = """
model bounded
import tests.runtime.toys as toy
param n: int = 60 in 1..1000
component llm: toy.Counter engine kv {
    decode(prev: token) -> token
}
component mix: toy.Mixer engine stateless {
    chunk(c: token[4]) -> tokens
}
stream codes: token from llm to mix fixed(4) at_end drop capacity 6
walk decode() {
    loop n carry tok = 0 {
        tok = llm.decode(tok)
        send tok -> codes
    }
}
walk speak(c: token[4]) on codes {
    emit text mix.chunk(c)
}
flow { start -> decode -> done }
"""


def test_a_bounded_stream_holds_its_producer_back_instead_of_growing(tmp_path: Path) -> None:
    cluster = ToyCluster(compile_text(tmp_path, BOUNDED, cpu_placement(2, "[components.mix]\nranks = [1]\n")))
    cluster.submit(RequestSpec(params={"n": 200}))
    most = 0
    while cluster.wire:
        cluster.pump(limit=1)
        for ex in cluster.executors:
            for state in ex.states.values():
                for end in state.producers.values():
                    most = max(most, end.in_flight)
                for end in state.consumers.values():
                    assert end.buffer.pending <= 6
    assert most == 6  # the producer filled its window and waited for credit, many times over
    windows = [c for e in cluster.take_events() if e.output is not None for c in [e.output.value]]
    assert windows == [list(range(i, i + 4)) for i in range(1, 201, 4)]
