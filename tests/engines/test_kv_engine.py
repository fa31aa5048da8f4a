"""The KV cache engine (runtime/engines/kv_engine.py) over tiny random tensors and the Orpheus tiny LM:
rope positions apart from the KV length (blocks), steps that write nothing, abort, chunked writes,
swap-out preemption and swap-in, a swapped label restored, forked and exported without pages, prefix
caching end to end, exhaustion; and KVComponent's demands and limits on the Orpheus tiny LM."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from wgc.models.orpheus import LanguageModel
from wgc.models.orpheus.vocab import CODE_START
from wgc.runtime.components.base import PARTIAL, Call
from wgc.runtime.engines.kv_engine import Geometry, KVCacheEngine, KVExhausted, Prepared, Write

from tests.models.orpheus.helpers import llm_spec

G = Geometry(layers=2, heads=2, kv_heads=1, head_dim=4, max_positions=64)
PS = 4
DEFAULT = "default"  # the Orpheus LM's label
GREEDY = (0.0, 1.0, 1.0)  # temperature (0: the argmax), top_p, repetition penalty
TEXT_40 = "a prompt of forty tokens, al"  # "tara: " + this, with 6 special tokens: 40 tokens


def engine(num_pages: int = 16, **options: Any) -> KVCacheEngine:
    return KVCacheEngine(G, num_pages, PS, torch.device("cpu"), **options)


def step(e: KVCacheEngine, writes: list[Write], mode: str = "causal", write: bool = True,
         seed: int = 0) -> tuple[Prepared, list[torch.Tensor]]:
    """One step with random q, k, v per layer (from `seed`), committed; each layer's attention output."""
    prepared = e.prepare(writes, mode, write)  # type: ignore[arg-type]
    n = sum(prepared.lengths)
    gen = torch.Generator().manual_seed(seed)
    kv = e.step(prepared)
    outs = []
    for layer in range(G.layers):
        q = torch.randn(n, G.heads, G.head_dim, generator=gen)  # [n, heads, head_dim]
        k = torch.randn(n, G.kv_heads, G.head_dim, generator=gen)  # [n, kv_heads, head_dim]
        v = torch.randn(n, G.kv_heads, G.head_dim, generator=gen)  # [n, kv_heads, head_dim]
        outs.append(kv.attend(layer, q, k, v))
    e.commit(prepared)
    return prepared, outs


def state(e: KVCacheEngine) -> tuple[dict[tuple[int, str], tuple[Any, ...]], int, int]:
    """Every sequence's length, position, tokens, progress, swapped-ness and page table; pages used, free."""
    seqs = {key: (e.length(*key), s.position, s.tokens and list(s.tokens), s.progress, s.swapped is not None, e.pages.page_table(*key))
            for key, s in e.seqs.items()}
    return seqs, e.pages.used_pages, e.pages.free_pages


def contents(e: KVCacheEngine) -> dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]]:
    """Every label's K and V, [layers, length, kv_heads, head_dim] each (from host memory when swapped)."""
    out = {}
    for key in e.seqs:
        label = e.export_label(*key)
        out[key] = (label["k"].clone(), label["v"].clone())
    return out


def same_contents(a: dict[Any, tuple[torch.Tensor, torch.Tensor]], b: dict[Any, tuple[torch.Tensor, torch.Tensor]]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k][0], b[k][0]) and torch.equal(a[k][1], b[k][1]) for k in a)


# ---- positions, blocks, steps that write nothing ----------------------------------------------------


def test_sequential_tokens_take_one_position_each_and_a_block_takes_one() -> None:
    e = engine()
    p, _ = step(e, [Write(1, "x", [1, 2, 3], 3)])
    assert p.positions.tolist() == [0, 1, 2] and list(p.batch.cached_lengths) == [0]
    p, _ = step(e, [Write(1, "x", None, 5, budget=2, block=True)])  # a block is written whole
    assert p.positions.tolist() == [3] * 5 and list(p.batch.cached_lengths) == [3] and p.lengths == [5]
    seq = e.seq(1, "x")
    assert seq is not None and seq.position == 4 and e.length(1, "x") == 8 and seq.tokens is None
    p, _ = step(e, [Write(1, "x", [7], 1), Write(2, "y", None, 3, block=True)])
    assert p.positions.tolist() == [4, 0, 0, 0] and list(p.batch.cached_lengths) == [8, 0]
    assert (e.length(1, "x"), e.seq(1, "x").position) == (9, 5)  # type: ignore[union-attr]
    assert (e.length(2, "y"), e.seq(2, "y").position) == (3, 1)  # type: ignore[union-attr]
    assert p.positions.dtype == torch.int64 and e.counters()["prefix_cached_pages"] == 0  # blocks: not a token prefix
    e.pages.check()


def test_a_step_that_does_not_write_leaves_the_cache_as_it_was() -> None:
    e = engine(2)
    step(e, [Write(1, "x", list(range(6)), 6)])
    e.fork(1, "y", "x")  # the pool is full, and y shares x's partial page: a write would need a copy
    before, kv, storage = state(e), contents(e), e.storage.k.clone()
    p, outs = step(e, [Write(1, "x", None, 3)], mode="prefix", write=False)
    assert p.positions.tolist() == [6, 7, 8] and list(p.batch.cached_lengths) == [6] and not p.batch.write
    assert outs[0].shape == (3, G.heads, G.head_dim)
    assert state(e) == before and same_contents(contents(e), kv) and torch.equal(e.storage.k, storage)
    e.pages.check()
    e.preempt(1)
    _, again = step(e, [Write(1, "x", None, 3)], mode="prefix", write=False)  # x is brought back first
    for out, want in zip(again, outs):
        torch.testing.assert_close(out, want, atol=0, rtol=0)
    assert e.seq(1, "x").swapped is None and e.seq(1, "y").swapped is not None  # type: ignore[union-attr]
    assert e.length(1, "x") == 6 and e.pages.used_pages == 2
    e.pages.check()


# ---- abort ---------------------------------------------------------------------------------------


def test_abort_puts_every_sequence_back_as_it_was() -> None:
    e = engine()
    step(e, [Write(1, "x", list(range(6)), 6), Write(2, "a", list(range(10)), 10)])  # 2 + 3 pages, 2's published
    e.fork(1, "y", "x")  # y shares x's partial page: writing x copies it
    step(e, [Write(3, "c", list(range(5)), 5)])
    e.preempt(3)  # swapped out: writing it brings it back first
    step(e, [Write(4, "p", list(range(10)), 10, budget=3)])  # a chunked prompt in progress
    before, kv = state(e), contents(e)
    p = e.prepare([Write(1, "x", [9], 1), Write(2, "a", None, 4, block=True), Write(3, "c", [5], 1),
                   Write(4, "p", list(range(10)), 10, budget=3), Write(5, "new", [1, 2], 2),
                   Write(6, "hit", list(range(10)), 10)])  # attaches request 2's published pages
    assert e.counters()["kv_copies"] == 1 and (p.starts[5], p.lengths[5]) == (8, 2)
    assert e.seq(3, "c").swapped is None  # type: ignore[union-attr]
    e.abort(p)
    e.pages.check()
    assert state(e) == before and same_contents(contents(e), kv)
    assert e.seq(5, "new") is None and e.seq(6, "hit") is None
    step(e, [Write(1, "x", [9], 1)])  # and the step can run again
    e.pages.check()


# ---- chunked writes (Orpheus tiny LM) ---------------------------------------------------------------


@pytest.fixture(scope="module")
def plain() -> LanguageModel:
    return LanguageModel.tiny(llm_spec(page_size=PS, prefix_caching=False), 0, "cpu")


@pytest.fixture(scope="module")
def cached() -> LanguageModel:
    return LanguageModel.tiny(llm_spec(page_size=PS), 0, "cpu")


def release(lm: LanguageModel, *requests: int) -> None:
    for r in requests:
        lm.release(r)
    lm.pages.check()
    assert lm.pages.used_pages == 0


def model_ids(n: int, seed: int) -> list[int]:
    return torch.randint(0, CODE_START, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_a_prompt_written_in_chunks_gives_the_same_cache_and_logits(plain: LanguageModel) -> None:
    ids = model_ids(23, seed=1)
    whole = plain.forward([Write(1, "", ids, len(ids))])
    rounds = []
    while True:
        logits = plain.forward([Write(2, "", ids, len(ids), budget=3)])
        seq = plain.kv.seq(2, "")
        assert seq is not None
        rounds.append(plain.kv.length(2, ""))
        if seq.progress == 0:
            break
        assert seq.progress == rounds[-1]
    assert rounds == [3, 6, 9, 12, 15, 18, 21, 23]
    torch.testing.assert_close(logits, whole, atol=1e-5, rtol=1e-5)
    one, chunked = plain.kv.export_label(1, ""), plain.kv.export_label(2, "")
    torch.testing.assert_close(chunked["k"], one["k"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(chunked["v"], one["v"], atol=1e-5, rtol=1e-5)
    assert chunked["position"] == one["position"] == 23 and chunked["tokens"] == one["tokens"] == ids
    release(plain, 1, 2)


def test_a_chunked_prefill_answers_partial_until_its_last_chunk(plain: LanguageModel) -> None:
    call = Call(3, "", (TEXT_40, "tara", *GREEDY))
    outs = [plain.prefill([call._replace(budget=16)])[0] for _ in range(3)]
    assert outs[:2] == [PARTIAL, PARTIAL] and outs[2] is not PARTIAL
    assert outs[2] == plain.prefill([Call(4, "", (TEXT_40, "tara", *GREEDY))])[0]
    release(plain, 3, 4)


# ---- preemption ------------------------------------------------------------------------------------


def twins() -> tuple[KVCacheEngine, KVCacheEngine]:
    """Two engines in the same state: request 1 (labels x, and y forked from it), request 2."""
    pair = engine(8), engine(8)
    for e in pair:
        step(e, [Write(1, "x", list(range(6)), 6), Write(2, "x", list(range(9)), 9)], seed=1)
        e.fork(1, "y", "x")
    return pair


def test_preemption_swaps_out_and_the_next_step_brings_the_kv_back_bitwise() -> None:
    e, twin = twins()
    kv = contents(e)
    assert e.preempt(1) == 2  # x's two pages, shared with y: freed once
    assert e.pages.used_pages == 3 and e.holders() == {2: 3} and e.length(1, "x") == e.length(1, "y") == 6
    assert e.counters()["kv_swapped_labels"] == 2 and e.counters()["kv_preemptions"] == 1
    assert e.pages_for(1, "x", 1) == (2, 2)  # two pages to bring it back, two free slots in the last
    assert e.preempt(1) == 0 and e.counters()["kv_preemptions"] == 1 and same_contents(contents(e), kv)
    e.pages.check()
    _, outs = step(e, [Write(1, "x", [6], 1), Write(2, "x", [9], 1)], seed=2)
    _, expected = step(twin, [Write(1, "x", [6], 1), Write(2, "x", [9], 1)], seed=2)
    for out, want in zip(outs, expected):
        torch.testing.assert_close(out, want, atol=0, rtol=0)
    assert e.pages.used_pages == 3 + 2 and e.seq(1, "y").swapped is not None  # type: ignore[union-attr]
    assert e.counters()["kv_swapped_in"] == 1
    k, v = e.export_label(1, "x")["k"], e.export_label(1, "x")["v"]
    assert torch.equal(k[:, :6], kv[(1, "x")][0]) and torch.equal(v[:, :6], kv[(1, "x")][1])
    assert torch.equal(k, twin.export_label(1, "x")["k"])
    step(e, [Write(1, "y", [7], 1)])
    assert torch.equal(e.export_label(1, "y")["k"][:, :6], kv[(1, "y")][0]) and e.pages.used_pages == 7
    e.pages.check()


def test_a_swapped_label_is_restored_forked_and_exported_without_taking_pages() -> None:
    e = engine(8)
    step(e, [Write(1, "x", list(range(5)), 5)])
    mark = e.checkpoint(1, "x")
    step(e, [Write(1, "x", [5, 6, 7], 3)])
    full = contents(e)[(1, "x")]
    e.preempt(1)
    assert e.pages.used_pages == 0
    e.restore(1, "x", mark)  # a speculative step rolled back while swapped out
    seq = e.seq(1, "x")
    assert seq is not None and seq.swapped is not None and (e.length(1, "x"), seq.position) == (5, 5)
    assert seq.tokens == [0, 1, 2, 3, 4] and e.pages.used_pages == 0
    e.fork(1, "y", "x")
    assert e.length(1, "y") == 5 and e.pages.used_pages == 0
    state_y = e.export_label(1, "y")
    assert e.pages.used_pages == 0 and state_y["length"] == 5 and state_y["position"] == 5
    assert torch.equal(state_y["k"], full[0][:, :5]) and torch.equal(state_y["v"], full[1][:, :5])
    other = engine(4)
    other.import_label(1, "x", state_y)
    assert torch.equal(other.export_label(1, "x")["k"], full[0][:, :5]) and other.pages.used_pages == 2
    step(e, [Write(1, "y", [9], 1)])  # y comes back with its five tokens; x stays in host memory
    assert torch.equal(e.export_label(1, "y")["k"][:, :5], full[0][:, :5])
    assert e.pages.used_pages == 2 and e.seq(1, "x").swapped is not None  # type: ignore[union-attr]
    e.release(1)
    assert e.seqs == {} and e.pages.used_pages == 0


# ---- exhaustion ------------------------------------------------------------------------------------


def test_kv_exhausted_from_prepare_changes_nothing() -> None:
    e = engine(4)
    step(e, [Write(1, "x", list(range(7)), 7)])  # 2 pages
    e.fork(1, "y", "x")
    step(e, [Write(2, "z", list(range(3)), 3)])
    e.preempt(2)  # 2 pages free
    before, kv, counters = state(e), contents(e), e.counters()
    writes = [Write(3, "a", [1, 2], 2), Write(2, "z", [3], 1), Write(1, "x", [8], 1)]  # 1 + 1 + 1 (a copy)
    with pytest.raises(KVExhausted, match="3 pages needed, 2 free of 4"):
        e.prepare(writes)
    assert state(e) == before and same_contents(contents(e), kv) and e.counters() == counters
    step(e, writes[:2])
    e.pages.check()


def test_a_step_that_writes_nothing_but_cannot_bring_its_labels_back_changes_nothing() -> None:
    e = engine(4)
    step(e, [Write(1, "x", list(range(6)), 6), Write(2, "x", list(range(6)), 6)])
    e.preempt(1)
    e.preempt(2)
    step(e, [Write(3, "x", list(range(6)), 6)])  # 2 pages free: room to bring back one of them
    before, kv = state(e), contents(e)
    with pytest.raises(KVExhausted):
        e.prepare([Write(1, "x", None, 1), Write(2, "x", None, 1)], mode="prefix", write=False)
    assert state(e) == before and same_contents(contents(e), kv)
    e.pages.check()


# ---- prefix caching (Orpheus tiny LM) ----------------------------------------------------------------


def greedy(lm: LanguageModel, request: int, steps: int = 20) -> list[int]:
    out = lm.prefill([Call(request, "", (TEXT_40, "tara", *GREEDY))])
    for _ in range(steps):
        out += lm.decode([Call(request, "", (out[-1], *GREEDY))])
    return out


def test_a_second_request_with_the_same_prompt_attaches_the_cached_pages(cached: LanguageModel,
                                                                       plain: LanguageModel) -> None:
    ids = cached._prompt_ids(Call(1, "", (TEXT_40, "tara", *GREEDY)))
    assert len(ids) == 40
    first = greedy(cached, 1)
    assert cached.counters()["prefix_hit_tokens"] == 0 and cached.counters()["prefix_cached_pages"] >= 10
    hits, tokens_in = cached.counters()["prefix_hit_tokens"], cached.stats["tokens_in"]
    second = greedy(cached, 2)
    assert cached.counters()["prefix_hit_tokens"] - hits == 36  # 9 whole pages; the 10th is recomputed
    assert cached.stats["tokens_in"] - tokens_in == 4 + 20
    assert cached.pages.page_table(2, DEFAULT)[:9] == cached.pages.page_table(1, DEFAULT)[:9]
    assert second == first == greedy(plain, 2)
    torch.testing.assert_close(cached.forward([(3, DEFAULT, ids)]), plain.forward([(3, DEFAULT, ids)]),
                               atol=1e-5, rtol=1e-5)
    assert cached.counters()["prefix_hit_tokens"] - hits == 2 * 36
    assert cached.kv.seq(2, DEFAULT).tokens == plain.kv.seq(2, DEFAULT).tokens == [*ids, *map(cached.map.to_model, second[:-1])]  # type: ignore[union-attr]
    for key in ("k", "v"):
        torch.testing.assert_close(cached.kv.export_label(2, DEFAULT)[key], plain.kv.export_label(2, DEFAULT)[key],
                                   atol=1e-5, rtol=1e-5)
    release(cached, 1, 2, 3)
    release(plain, 2, 3)


def test_a_released_prompt_is_revived_and_a_fully_cached_one_still_computes_its_last_token(
        cached: LanguageModel, plain: LanguageModel) -> None:
    ids = model_ids(40, seed=2)
    cached.forward([Write(10, DEFAULT, ids, len(ids), budget=6)])
    while cached.kv.seq(10, DEFAULT).progress:  # type: ignore[union-attr]
        cached.forward([Write(10, DEFAULT, ids, len(ids), budget=6)])  # its pages published a few at a time
    release(cached, 10)  # its pages wait on the cached free list
    for request, prompt, computed in ((11, ids, 4), (12, [*ids, 5], 1)):
        hits, tokens_in = cached.counters()["prefix_hit_tokens"], cached.stats["tokens_in"]
        logits = cached.forward([(request, DEFAULT, prompt)])
        assert cached.stats["tokens_in"] - tokens_in == computed
        assert cached.counters()["prefix_hit_tokens"] - hits == len(prompt) - computed
        assert cached.kv.length(request, DEFAULT) == len(prompt)
        torch.testing.assert_close(logits, plain.forward([(request, DEFAULT, prompt)]), atol=1e-5, rtol=1e-5)
    release(cached, 11, 12)
    release(plain, 11, 12)


def test_a_hit_takes_no_more_pages_than_the_step_was_checked_for() -> None:
    e = engine(4)
    step(e, [Write(1, "x", list(range(12)), 12)])
    e.release(1)  # 3 pages cached, 1 plain
    # a chunk of 4 was counted 1 page and the step leaves 1 spare: it may revive one cached page, not
    # two (that would leave request 3 short)
    p, _ = step(e, [Write(2, "x", list(range(12)), 12, budget=4), Write(3, "y", list(range(20, 28)), 8)])
    assert p.starts == [4, 0] and e.counters()["prefix_hit_tokens"] == 4 and e.pages.used_pages == 4
    assert e.counters()["prefix_evictions"] == 2  # request 3 took the other two cached pages
    e.release(2)
    e.release(3)
    p, _ = step(e, [Write(4, "x", list(range(12)), 12)])  # written whole: it may revive what it was counted for
    assert p.starts == [8] and e.counters()["prefix_hit_tokens"] == 4 + 8  # request 2's two pages, named again
    e.pages.check()


def test_without_prefix_caching_nothing_is_published(plain: LanguageModel) -> None:
    ids = model_ids(12, seed=3)
    plain.forward([(20, DEFAULT, ids)])
    plain.forward([(21, DEFAULT, ids)])
    assert plain.counters()["prefix_cached_pages"] == 0 and plain.counters()["prefix_hit_tokens"] == 0
    release(plain, 20, 21)


# ---- KVComponent: demands and limits (Orpheus tiny LM) ------------------------------------------------


def test_a_prompt_past_the_positions_or_the_pool_fails_with_its_limit(plain: LanguageModel) -> None:
    long = Call(1, "", ("x" * 4100, "tara", *GREEDY))
    (demand,) = plain.demands("prefill", [long])
    assert demand.error == "the input is 4112 tokens, more than the model's 4096 positions"
    at_limit = [d.error for d in plain.demands("prefill", [Call(r, "", ("x" * n, "tara", *GREEDY)) for r, n in ((6, 4084), (7, 4085))])]
    assert at_limit == ["", "the input is 4097 tokens, more than the model's 4096 positions"]
    small = LanguageModel.tiny(llm_spec(page_size=PS, kv_memory=4 * 2 * 4 * 2 * 32 * 4 * PS), 0, "cpu")  # 4 pages
    assert small.pages.num_pages == 4
    big, fits = Call(2, "", ("x" * 8, "tara", *GREEDY)), Call(3, "", ("x" * 4, "tara", *GREEDY))  # 20, 16 tokens
    errors = [d.error for d in small.demands("prefill", [big, fits])]
    assert errors == ["the input needs 5 KV pages of 4 tokens, more than the whole pool (4 pages) of llm", ""]
    small.prefill([fits])  # the whole pool: its next token can never have a page
    (demand,) = small.demands("decode", [Call(3, "", (0, *GREEDY))])
    assert "needs 5 KV pages" in demand.error and demand.tokens == 1
    for r in (1, 6, 7):
        plain.release(r)


def test_demands_of_a_chunked_prefill_shrink_and_a_decode_asks_for_one_token(plain: LanguageModel) -> None:
    call = Call(5, "", (TEXT_40, "tara", *GREEDY))
    (demand,) = plain.demands("prefill", [call])
    assert (demand.request, demand.tokens, demand.chunkable, demand.page_size) == (5, 40, True, PS)
    assert (demand.slack, demand.setup_pages, demand.error) == (0, 0, "")
    assert plain.prefill([call._replace(budget=15)]) == [PARTIAL]
    (demand,) = plain.demands("prefill", [call])
    assert (demand.tokens, demand.chunkable, demand.slack) == (25, True, 1)  # 15 written: 1 slot left in page 4
    assert plain.prefill([call._replace(budget=25)]) != [PARTIAL]
    (demand,) = plain.demands("decode", [Call(5, "", (0, *GREEDY))])
    assert (demand.tokens, demand.chunkable, demand.slack, demand.setup_pages) == (1, False, 0, 0)
    plain.fork(5, "copy", DEFAULT)
    plain.forward([(5, DEFAULT, [CODE_START])])  # 41 tokens: the last page is partial and shared
    (demand,) = plain.demands("decode", [Call(5, "copy", (0, *GREEDY))])
    assert (demand.tokens, demand.setup_pages, demand.slack) == (1, 0, 0)
    plain.forward([(5, "copy", [CODE_START])])
    plain.fork(5, "third", "copy")
    (demand,) = plain.demands("decode", [Call(5, "third", (0, *GREEDY))])
    assert (demand.setup_pages, demand.slack) == (1, 3)  # a copy of the shared partial page, 3 slots in it
    plain.preempt(5)
    (demand,) = plain.demands("decode", [Call(5, "", (0, *GREEDY))])
    assert (demand.tokens, demand.setup_pages, demand.slack) == (1, 11, 3)  # 41 tokens to bring back
    assert plain.pool_holders() == {} and plain.pool_free() == plain.pages.num_pages
    release(plain, 5)


def test_a_query_on_a_label_never_written_leaves_no_sequence() -> None:
    e = engine(4)
    e.prepare([Write(1, "ghost", None, 3, block=True)], mode="prefix", write=False)
    assert e.seq(1, "ghost") is None and e.pages.used_pages == 0
