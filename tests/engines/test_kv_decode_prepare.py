"""The KV engine's one-pass decode step (`kv_decode.prepare_decode`, with the allocator's
`append_one_each`) against the general `prepare`: the same Prepared, the same pages, copies and
prefix cache, the same K/V and attention, the same state after an abort; and the cases it must
leave to the general path (a swapped row, a chunk in progress, a fresh label, several tokens)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from wgc.runtime.engines import kv_engine
from wgc.runtime.engines.kv_engine import Geometry, KVCacheEngine, KVExhausted, Prepared, Write

G = Geometry(layers=2, heads=2, kv_heads=1, head_dim=4, max_positions=64)
PS = 4


def general_only(monkeypatch: pytest.MonkeyPatch, e: KVCacheEngine) -> None:
    """`e` (only) takes the general path for every step."""
    real = kv_engine.prepare_decode
    monkeypatch.setattr(kv_engine, "prepare_decode", lambda engine, *a: None if engine is e else real(engine, *a))


def built(num_pages: int = 24) -> KVCacheEngine:
    """Rows at every page phase: lengths 3, 4 (full page), 5, 7; a fork sharing request 2's partial
    last page (its next write copies); prefix caching on (full pages published at commit), and a
    published page made partial again by a cut (its next write unpublishes it)."""
    e = KVCacheEngine(G, num_pages, PS, torch.device("cpu"))
    writes = [Write(1, "a", list(range(10, 13)), 3), Write(2, "a", list(range(20, 24)), 4),
              Write(3, "a", list(range(30, 35)), 5), Write(4, "a", list(range(40, 48)), 8)]
    run(e, writes, seed=1)
    run(e, [Write(2, "a", [99], 1)], seed=2)  # request 2 at 5 tokens: a partial last page
    e.fork(2, "b", "a")  # label b shares it
    e.seqs[(1, "a")].data["generated"] = 3
    cut = e.seqs[(4, "a")].copy()  # request 4 cut back into its second page, published when full
    assert cut.tokens is not None and cut.published == 2
    cut.tokens, cut.position = cut.tokens[:7], 7
    e.restore(4, "a", (7, cut))  # its next write must unpublish that page
    return e


def run(e: KVCacheEngine, writes: list[Write], seed: int) -> tuple[Prepared, list[torch.Tensor]]:
    prepared = e.prepare(writes)
    n = sum(prepared.lengths)
    gen = torch.Generator().manual_seed(seed)
    kv = e.step(prepared)
    outs = []
    for layer in range(G.layers):
        q = torch.randn(n, G.heads, G.head_dim, generator=gen)
        k = torch.randn(n, G.kv_heads, G.head_dim, generator=gen)
        v = torch.randn(n, G.kv_heads, G.head_dim, generator=gen)
        outs.append(kv.attend(layer, q, k, v))
    e.commit(prepared)
    return prepared, outs


def snapshot(e: KVCacheEngine) -> dict[str, Any]:
    seqs = {key: (s.position, None if s.tokens is None else list(s.tokens), s.progress, s.published, s.digest,
                  dict(s.data), e.pages.page_table(*key), e.length(*key)) for key, s in e.seqs.items()}
    refs = [e.pages.refcount(p) for p in range(e.pages.num_pages)]
    k = {key: e.export_label(*key)["k"] for key in e.seqs}
    return {"seqs": seqs, "refs": refs, "free": e.pages.next_free(e.pages.num_pages), "k": k,
            "counters": e.pages.counters()}


def same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["seqs"] == b["seqs"] and a["refs"] == b["refs"] and a["free"] == b["free"]
    assert a["counters"] == b["counters"]
    assert a["k"].keys() == b["k"].keys() and all(torch.equal(a["k"][key], b["k"][key]) for key in a["k"])


DECODE = [Write(1, "a", [7], 1), Write(2, "a", [8], 1), Write(2, "b", [9], 1), Write(3, "a", [6], 1),
          Write(4, "a", [5], 1)]


def test_a_decode_step_equals_the_general_path(monkeypatch: pytest.MonkeyPatch) -> None:
    fast, slow = built(), built()
    general_only(monkeypatch, slow)
    for step in range(6):  # across page boundaries; the fork's copy-on-write on the first step
        p_fast, out_fast = run(fast, DECODE, seed=10 + step)
        p_slow, out_slow = run(slow, DECODE, seed=10 + step)
        assert (p_fast.starts, p_fast.lengths, p_fast.final, p_fast.copies) == \
            (p_slow.starts, p_slow.lengths, p_slow.final, p_slow.copies)
        assert list(p_fast.batch.page_tables) == list(p_slow.batch.page_tables)
        assert list(p_fast.batch.cached_lengths) == list(p_slow.batch.cached_lengths)
        assert torch.equal(p_fast.positions, p_slow.positions) and p_fast.positions.dtype == torch.int64
        assert p_fast.token_ids() == p_slow.token_ids() == [7, 8, 9, 6, 5]
        assert all(torch.equal(x, y) for x, y in zip(out_fast, out_slow))
        same(snapshot(fast), snapshot(slow))
        if step == 0:
            assert p_fast.copies  # the shared partial page was copied for the first writer
    fast.pages.check()


def test_an_aborted_decode_step_leaves_everything_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    fast, slow = built(), built()
    general_only(monkeypatch, slow)
    before = snapshot(fast)
    for e in (fast, slow):
        prepared = e.prepare(DECODE)
        assert prepared.copies and e.seqs[(1, "a")].position == 4
        e.abort(prepared)
        e.pages.check()
    same(snapshot(fast), snapshot(slow))  # pages freed back in the same order, the same counters
    after = snapshot(fast)
    assert after["seqs"] == before["seqs"] and after["refs"] == before["refs"]
    assert sorted(after["free"]) == sorted(before["free"])


def test_an_exhausted_decode_step_changes_nothing() -> None:
    e = built(num_pages=12)  # 10 pages held: the step needs 3 (request 3's new page... and the copy)
    free = e.pages.free_pages
    before = snapshot(e)
    take = [Write(9, "x", list(range(4 * free)), 4 * free)]
    e.prepare(take)  # every free page taken
    after_take = snapshot(e)
    with pytest.raises(KVExhausted):
        e.prepare(DECODE)
    same(snapshot(e), after_take)
    assert before["seqs"].keys() < after_take["seqs"].keys()


@pytest.mark.parametrize("case", ["swapped", "chunk in progress", "fresh label", "two tokens"])
def test_other_steps_take_the_general_path(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    e = built()
    writes = list(DECODE)
    if case == "swapped":
        e.preempt(3)
    elif case == "chunk in progress":
        run(e, [Write(5, "a", list(range(9)), 9, budget=4)], seed=3)
        writes.append(Write(5, "a", list(range(9)), 9))
    elif case == "fresh label":
        writes.append(Write(6, "a", [1], 1))
    else:
        writes[0] = Write(1, "a", [7, 7], 2)
    calls = []
    original = e.pages.append_one_each
    monkeypatch.setattr(e.pages, "append_one_each", lambda keys: calls.append(keys) or original(keys))
    prepared = e.prepare(writes)
    assert not calls  # decided before the allocator is asked: nothing to undo
    e.commit(prepared)
    e.pages.check()


def test_a_row_cut_back_to_nothing_takes_the_general_path() -> None:
    e = built()
    checkpoint = e.checkpoint(3, "a")
    e.restore(3, "a", (0, checkpoint[1]))  # the sequence stays, its pages are gone
    before = e.pages.free_pages
    prepared = e.prepare([Write(3, "a", [6], 1), Write(4, "a", [5], 1)])
    assert list(prepared.batch.cached_lengths) == [0, 7] and e.pages.free_pages == before - 1
    e.abort(prepared)
    assert e.pages.free_pages == before
    e.pages.check()
