"""Paged attention equals dense attention: random page layouts, GQA ratios, appends, prefix mode,
mixed lengths in one batch, a frozen prefix left byte-for-byte unchanged; FlashInfer on CUDA."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from wgc.runtime.engines.attention import (
    AttentionBatch,
    KVStorage,
    TorchAttention,
    dense_attention,
    paged_attention,
    plan_torch,
    run_torch,
    write_kv,
)

from tests.engines.cuda import flashinfer_attention

HEAD_DIM = 16
PAGE = 4
NUM_PAGES = 64


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cached: int, mode: str) -> torch.Tensor:
    """Softmax attention by definition: q [n, H, d] at positions cached.., k, v [T, Hkv, d] -> [n, H, d]."""
    n, heads, _ = q.shape
    group = heads // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # [T, H, d]
    scores = torch.einsum("nhd,thd->hnt", q, k) / HEAD_DIM**0.5  # [H, n, T]
    if mode == "causal":
        allowed = torch.arange(k.shape[0])[None, :] <= cached + torch.arange(n)[:, None]  # [n, T]
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.einsum("hnt,thd->nhd", scores.softmax(-1), v)  # [n, H, d]


def random_tables(lengths: list[int], gen: torch.Generator) -> list[list[int]]:
    """Each sequence gets enough pages, drawn from a shuffled pool (plus a spare page or none)."""
    pool = torch.randperm(NUM_PAGES, generator=gen).tolist()
    tables = []
    for length in lengths:
        count = -(-length // PAGE) + int(torch.randint(0, 2, (1,), generator=gen))
        tables.append([pool.pop() for _ in range(count)])
    return tables


def make_batch(cached: list[int], new: list[int], heads: int, kv_heads: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    full_k = [torch.randn(c + n, kv_heads, HEAD_DIM, generator=gen) for c, n in zip(cached, new)]
    full_v = [torch.randn(c + n, kv_heads, HEAD_DIM, generator=gen) for c, n in zip(cached, new)]
    q = torch.randn(sum(new), heads, HEAD_DIM, generator=gen)  # [sum n, H, d]
    tables = random_tables([c + n for c, n in zip(cached, new)], gen)
    return q, full_k, full_v, tables


def fill_pages(k_pages, v_pages, tables, keys, values, upto: list[int]) -> None:
    for table, k, v, length in zip(tables, keys, values, upto):
        slots = torch.tensor([table[p // PAGE] * PAGE + p % PAGE for p in range(length)], dtype=torch.int64)
        write_kv(k_pages, v_pages, k[:length], v[:length], slots)


def expected(q, keys, values, cached, new, mode) -> torch.Tensor:
    rows = torch.split(q, new)
    return torch.cat([reference(r, k, v, c, mode) for r, k, v, c in zip(rows, keys, values, cached)])


MIXED = ([0, 5, 17, 3, 8], [7, 1, 4, 9, 1])  # prefill, decode, append, chunk, decode — one batch


def cached_step(cached: list[int], new: list[int], heads: int, kv_heads: int, seed: int):
    """A batch with each sequence's first `cached` tokens in one layer's pages: q, the full keys and
    values, the page tables, the pages (k, v) and the new tokens' keys and values (k, v)."""
    q, keys, values, tables = make_batch(cached, new, heads, kv_heads, seed)
    k_pages, v_pages = KVStorage.allocate(1, NUM_PAGES, PAGE, kv_heads, HEAD_DIM).layer(0)
    fill_pages(k_pages, v_pages, tables, keys, values, cached)
    k_new = torch.cat([k[c:] for k, c in zip(keys, cached)])  # [sum n, Hkv, d]
    v_new = torch.cat([v[c:] for v, c in zip(values, cached)])  # [sum n, Hkv, d]
    return q, keys, values, tables, (k_pages, v_pages), (k_new, v_new)


@pytest.mark.parametrize("group", [1, 2, 4])
@pytest.mark.parametrize("mode", ["causal", "prefix"])
def test_step_writes_then_attends_like_dense(group: int, mode: str) -> None:
    cached, new = MIXED
    kv_heads = 2
    q, keys, values, tables, (k_pages, v_pages), (k_new, v_new) = cached_step(cached, new, kv_heads * group,
                                                                              kv_heads, group)
    backend = TorchAttention()
    plan = backend.plan(AttentionBatch(tables, cached, new, PAGE, mode))
    out = backend.attend(plan, q, k_new, v_new, k_pages, v_pages)
    torch.testing.assert_close(out, expected(q, keys, values, cached, new, mode), atol=1e-5, rtol=1e-5)
    gathered = torch.cat([k_pages[t].reshape(-1, kv_heads, HEAD_DIM)[: c + n] for t, c, n in zip(tables, cached, new)])
    assert torch.equal(gathered, torch.cat(keys))  # the new keys landed at their (page, slot)


@pytest.mark.parametrize(("cached", "new", "mode", "write", "fresh"), [
    ([0], [9], "causal", True, ((1, 9),)), ([0, 0, 0], [5, 5, 5], "causal", True, ((3, 5),)),  # one length
    ([0, 0, 0], [5, 6, 6], "causal", True, ((1, 5), (2, 6))),  # whole prompts of two lengths: two runs
    ([0, 3], [5, 5], "causal", True, ()),  # a prefix cached
    ([0], [9], "prefix", True, ()), ([0], [9], "causal", False, ()),  # not causal, not written
])
def test_a_step_of_whole_prompts_attends_on_its_own_rows_bitwise_as_the_general_path(
        cached: list[int], new: list[int], mode: str, write: bool, fresh: tuple[tuple[int, int], ...]) -> None:
    """`TorchPlan.fresh`: the rows as they are and SDPA's causal mask (attend_prompts), per run of one
    length the same bits as gathering them from the pages with the explicit mask; only for such steps."""
    q, keys, values, tables, (k_pages, v_pages), (k_new, v_new) = cached_step(cached, new, 4, 2, len(new))
    backend = TorchAttention()
    plan = backend.plan(AttentionBatch(tables, cached, new, PAGE, mode, write))
    assert plan.fresh == fresh
    out = backend.attend(plan, q, k_new, v_new, k_pages, v_pages)
    torch.testing.assert_close(out, expected(q, keys, values, cached, new, mode), atol=1e-5, rtol=1e-5)
    if len(fresh) == 1:
        assert torch.equal(out, run_torch(plan, q, k_pages, v_pages))  # the general path, pages now written


def test_a_whole_prompt_attends_alike_whatever_the_lengths_prefilled_beside_it() -> None:
    """Prompts of 5, 9, 9 and 3 tokens in one step: each one's output bitwise its output alone (one
    padded batch with a mask gave the shorter ones other bits)."""
    new = [5, 9, 9, 3]
    q, _, _, tables, (k_pages, v_pages), (k_new, v_new) = cached_step([0] * 4, new, 4, 2, 4)
    backend = TorchAttention()
    together = backend.attend(backend.plan(AttentionBatch(tables, [0] * 4, new, PAGE, "causal", True)),
                              q, k_new, v_new, k_pages, v_pages)
    start = 0
    for i, n in enumerate(new):
        rows = slice(start, start + n)
        alone = backend.attend(backend.plan(AttentionBatch([tables[i]], [0], [n], PAGE, "causal", True)),
                               q[rows], k_new[rows], v_new[rows], k_pages, v_pages)
        assert torch.equal(together[rows], alone), i
        start += n


@pytest.mark.parametrize("seed", range(4))
def test_one_shot_paged_attention_over_random_layouts(seed: int) -> None:
    gen = torch.Generator().manual_seed(100 + seed)
    batch = int(torch.randint(1, 6, (1,), generator=gen))
    cached = torch.randint(0, 20, (batch,), generator=gen).tolist()
    new = torch.randint(1, 6, (batch,), generator=gen).tolist()
    group = [1, 2, 4][seed % 3]
    q, keys, values, tables = make_batch(cached, new, 2 * group, 2, seed)
    k_pages = torch.randn(NUM_PAGES, PAGE, 2, HEAD_DIM)  # garbage outside the written slots
    v_pages = torch.randn(NUM_PAGES, PAGE, 2, HEAD_DIM)
    lengths = [c + n for c, n in zip(cached, new)]
    fill_pages(k_pages, v_pages, tables, keys, values, lengths)
    mode = "causal" if seed % 2 == 0 else "prefix"
    out = paged_attention(q, k_pages, v_pages, tables, lengths, new, mode)
    torch.testing.assert_close(out, expected(q, keys, values, cached, new, mode), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", ["causal", "prefix"])
def test_frozen_prefix_is_read_not_written(mode: str) -> None:
    prefix, new = [12, 5, 9], [4, 4, 4]  # e.g. a robot policy's action tokens over its frozen prefix
    q, keys, values, tables = make_batch(prefix, new, 4, 1, seed=7)
    storage = KVStorage.allocate(2, NUM_PAGES, PAGE, 1, HEAD_DIM)
    k_pages, v_pages = storage.layer(1)
    fill_pages(k_pages, v_pages, tables, keys, values, prefix)
    before = (storage.k.clone(), storage.v.clone())
    k_new = torch.cat([k[p:] for k, p in zip(keys, prefix)])  # [sum n, 1, d]
    v_new = torch.cat([v[p:] for v, p in zip(values, prefix)])

    backend = TorchAttention()
    plan = backend.plan(AttentionBatch(tables, prefix, new, PAGE, mode, write=False))
    for _ in range(3):  # several denoising steps over the same prefix
        out = backend.attend(plan, q, k_new, v_new, k_pages, v_pages)
    torch.testing.assert_close(out, expected(q, keys, values, prefix, new, mode), atol=1e-5, rtol=1e-5)
    assert torch.equal(storage.k, before[0]) and torch.equal(storage.v, before[1])
    one_shot = paged_attention(q, k_pages, v_pages, tables, prefix, new, mode, k_new=k_new, v_new=v_new)
    torch.testing.assert_close(one_shot, out)


def test_decode_batch_and_dense_prefill_agree() -> None:
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(3, 8, 4, HEAD_DIM, generator=gen)  # [B, T, H, d] — dense prefill of 3 sequences
    k = torch.randn(3, 8, 2, HEAD_DIM, generator=gen)
    v = torch.randn(3, 8, 2, HEAD_DIM, generator=gen)
    dense = dense_attention(q, k, v)  # [B, T, H, d]
    tables = random_tables([8, 8, 8], gen)
    k_pages, v_pages = torch.zeros(NUM_PAGES, PAGE, 2, HEAD_DIM), torch.zeros(NUM_PAGES, PAGE, 2, HEAD_DIM)
    backend = TorchAttention()
    prefill = backend.plan(AttentionBatch(tables, [0, 0, 0], [7, 7, 7], PAGE))
    first = backend.attend(prefill, q[:, :7].flatten(0, 1), k[:, :7].flatten(0, 1), v[:, :7].flatten(0, 1),
                           k_pages, v_pages)  # [B * 7, H, d]
    torch.testing.assert_close(first, dense[:, :7].flatten(0, 1), atol=1e-5, rtol=1e-5)
    decode = backend.plan(AttentionBatch(tables, [7, 7, 7], [1, 1, 1], PAGE))
    out = backend.attend(decode, q[:, 7], k[:, 7], v[:, 7], k_pages, v_pages)  # [B, H, d]
    torch.testing.assert_close(out, dense[:, 7], atol=1e-5, rtol=1e-5)


def test_plan_indices_and_mask_shape() -> None:
    batch = AttentionBatch([[5, 2], [9]], [3, 0], [2, 1], PAGE)
    plan = plan_torch(batch)
    assert plan.write_slots.tolist() == [5 * PAGE + 3, 2 * PAGE + 0, 9 * PAGE + 0]
    assert plan.key_slots.tolist()[0] == [20, 21, 22, 23, 8]
    assert plan.mask is not None and plan.mask.shape == (2, 1, 2, 5)
    assert batch.positions().tolist() == [3, 4, 0]
    with pytest.raises(ValueError, match="cannot hold"):
        AttentionBatch([[1]], [4], [1], PAGE)


def test_csr_indices_for_flashinfer_are_host_int32() -> None:
    from wgc.runtime.engines.attention_cuda import host_indices  # imports no flashinfer itself

    idx = host_indices(AttentionBatch([[5, 2, 7], [9], [4, 1]], [3, 0, 4], [2, 1, 3], PAGE))
    assert idx.qo_indptr.tolist() == [0, 2, 3, 6] and idx.qo_indptr.dtype == torch.int32
    assert idx.kv_indptr.tolist() == [0, 2, 3, 5] and idx.kv_indices.tolist() == [5, 2, 9, 4, 1]
    assert idx.last_page_len.tolist() == [1, 1, 3] and idx.kv_indices.device.type == "cpu"
    assert idx.write_slots.tolist() == [23, 8, 36, 4, 5, 6]


def test_importing_attention_imports_no_cuda_stack() -> None:
    code = (
        "import sys, torch\n"
        "before = set(sys.modules)\n"
        "import wgc.runtime.engines.attention, wgc.models.layers\n"
        "new = {m.split('.')[0] for m in set(sys.modules) - before}\n"
        "bad = new & {'flashinfer', 'triton', 'wgc.runtime.engines.attention_cuda'}\n"
        "bad |= {m for m in set(sys.modules) - before if m.endswith('attention_cuda')}\n"
        "assert not bad, bad\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["append", "decode", "prefix", "frozen"])
def test_flashinfer_matches_torch(case: str) -> None:
    attention_class = flashinfer_attention()
    cached, new = {"append": MIXED, "decode": ([5, 17, 30], [1, 1, 1])}.get(case, ([12, 5, 9], [4, 3, 4]))
    head_dim, page, kv_heads, heads = 128, 16, 2, 8
    gen = torch.Generator().manual_seed(0)
    dev, dtype = torch.device("cuda"), torch.float16
    pool = torch.randperm(64, generator=gen).tolist()
    tables = [[pool.pop() for _ in range(-(-(c + n) // page))] for c, n in zip(cached, new)]
    q = torch.randn(sum(new), heads, head_dim, generator=gen).to(dev, dtype)
    k = torch.randn(sum(new), kv_heads, head_dim, generator=gen).to(dev, dtype)
    v = torch.randn(sum(new), kv_heads, head_dim, generator=gen).to(dev, dtype)
    pages = torch.randn(2, 64, page, kv_heads, head_dim, generator=gen).to(dev, dtype)
    mode = "prefix" if case == "prefix" else "causal"
    batch = AttentionBatch(tables, cached, new, page, mode, write=case != "frozen")
    ours = attention_class(dev, heads, kv_heads, head_dim, page, dtype)
    try:
        pages_fi = pages.clone()
        out = ours.attend(ours.plan_async(batch).result(), q, k, v, pages_fi[0], pages_fi[1])
    finally:
        ours.close()
    torch_backend = TorchAttention(dev)
    want = torch_backend.attend(torch_backend.plan(batch), q, k, v, pages[0], pages[1])
    torch.testing.assert_close(out, want, atol=2e-3, rtol=2e-3)
    assert torch.equal(pages_fi, pages)  # both wrote the same slots (or, frozen, none)
