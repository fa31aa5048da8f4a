"""The decode attention's leaner operators (runtime/engines/attention.py) keep its meaning: the
storage's per-layer views made once alias the pool (a write through either is seen by the other, each
layer its own), a write casts only when the pages' dtype differs, the plan's flat key slots are its
key slots, and the strided head-major view of the gathered keys attends like the general plan at
every grouping, for ragged rows, and over pages of another dtype than the queries."""

from __future__ import annotations

import pytest
import torch
from wgc.runtime.engines.attention import AttentionBatch, KVStorage, TorchAttention, plan_torch, write_kv

from tests.engines.test_attention import HEAD_DIM, NUM_PAGES, PAGE, expected, fill_pages, make_batch


def test_the_layer_views_alias_the_pool_one_layer_each() -> None:
    storage = KVStorage.allocate(3, 4, PAGE, 2, HEAD_DIM)
    for index in range(3):
        k_pages, v_pages = storage.layer(index)
        assert k_pages.shape == (4, PAGE, 2, HEAD_DIM)
        k_pages[1, 2].fill_(float(index + 1))  # written through the view: seen in the pool, in that layer only
        v_pages[0].fill_(-1.0)
        assert torch.all(storage.k[index, 1, 2] == index + 1) and torch.all(storage.v[index, 0] == -1)
    assert [float(storage.k[i].sum()) for i in range(3)] == [float((i + 1) * 2 * HEAD_DIM) for i in range(3)]
    storage.k[2].zero_()  # and a write to the pool is seen through the view
    assert float(storage.layer(2)[0].abs().sum()) == 0.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_write_casts_to_the_pages_dtype_only_when_it_differs(dtype: torch.dtype) -> None:
    k_pages = torch.zeros(4, PAGE, 2, HEAD_DIM, dtype=dtype)
    v_pages = torch.zeros_like(k_pages)
    k, v = torch.randn(3, 2, HEAD_DIM), torch.randn(3, 2, HEAD_DIM)
    write_kv(k_pages, v_pages, k, v, torch.tensor([0, 5, 9]))
    flat_k, flat_v = k_pages.view(-1, 2, HEAD_DIM), v_pages.view(-1, 2, HEAD_DIM)
    assert torch.equal(flat_k[[0, 5, 9]], k.to(dtype)) and torch.equal(flat_v[[0, 5, 9]], v.to(dtype))


def test_the_plans_flat_key_slots_are_its_key_slots() -> None:
    plan = plan_torch(AttentionBatch([[3, 1], [2], [7, 0, 5]], [17, 3, 40], [1, 1, 1], 16))
    assert plan.decode and plan.key_rows is not None
    assert torch.equal(plan.key_rows, plan.key_slots.reshape(-1))


@pytest.mark.parametrize("group", [1, 2, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_strided_gather_attends_like_the_general_plan(group: int, dtype: torch.dtype) -> None:
    cached = [0, 5, 17, 3, 8, 11]
    new = [1] * len(cached)
    heads, kv_heads = 2 * group, 2
    q, keys, values, tables = make_batch(cached, new, heads, kv_heads, seed=40 + group)
    keys, values = [k.to(dtype).float() for k in keys], [v.to(dtype).float() for v in values]  # what the pages hold
    k_new = torch.stack([k[c] for k, c in zip(keys, cached)])
    v_new = torch.stack([v[c] for v, c in zip(values, cached)])
    outs = []
    for fast in (True, False):
        storage = KVStorage.allocate(1, NUM_PAGES, PAGE, kv_heads, HEAD_DIM, dtype=dtype)
        k_pages, v_pages = storage.layer(0)
        fill_pages(k_pages, v_pages, tables, keys, values, cached)
        backend = TorchAttention(fast_decode=fast)
        plan = backend.plan(AttentionBatch(tables, cached, new, PAGE))
        assert plan.decode is fast
        outs.append(backend.attend(plan, q, k_new, v_new, k_pages, v_pages))  # [B, heads, d]
    assert outs[0].dtype == q.dtype == torch.float32
    torch.testing.assert_close(outs[0], outs[1], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(outs[0], expected(q, keys, values, cached, new, "causal"), atol=1e-5, rtol=1e-4)
