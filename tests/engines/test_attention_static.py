"""Static-shaped decode attention (the CUDA-graph path) equals the dynamic torch path, padding included."""

from __future__ import annotations

import torch
from wgc.runtime.engines.attention import AttentionBatch, KVStorage, TorchAttention
from wgc.runtime.engines.attention_static import StaticAttention, plan_static


def test_static_decode_attention_equals_paged_attention_with_padding_rows() -> None:
    gen = torch.Generator().manual_seed(0)
    page, pages, heads, kv_heads, d = 4, 40, 8, 2, 16
    cached = [0, 5, 12, 3]  # tokens already in the pages; the new one goes at that position
    tables = [[7], [3, 9], [1, 2, 4, 30], [11]]
    dynamic, static = (KVStorage.allocate(1, pages + 1, page, kv_heads, d) for _ in range(2))
    for s in (dynamic, static):
        s.k.copy_(torch.randn(s.k.shape, generator=gen.manual_seed(1)))
        s.v.copy_(torch.randn(s.v.shape, generator=gen.manual_seed(2)))
    q = torch.randn(4, heads, d, generator=gen)
    k, v = torch.randn(4, kv_heads, d, generator=gen), torch.randn(4, kv_heads, d, generator=gen)

    torch_path = TorchAttention()
    want = torch_path.attend(torch_path.plan(AttentionBatch(tables, cached, [1] * 4, page)), q, k, v,
                             *dynamic.layer(0))  # [4, heads, d]

    bucket, width = 6, 5  # two padding rows; block tables padded to 5 pages
    table = torch.zeros(bucket, width, dtype=torch.int64)
    for b, t in enumerate(tables):
        table[b, : len(t)] = torch.tensor(t)
    seq_lens = torch.tensor([*(c + 1 for c in cached), 0, 0])
    scratch = pages * page
    plan = plan_static(table, seq_lens, page, scratch)
    pad = torch.zeros(2, heads, d)
    got = StaticAttention().attend(plan, torch.cat([q, pad]), torch.cat([k, pad[:, :kv_heads]]),
                                   torch.cat([v, pad[:, :kv_heads]]), *static.layer(0))  # [6, heads, d]
    torch.testing.assert_close(got[:4], want, atol=1e-5, rtol=1e-5)
    assert torch.isfinite(got).all()
    # the new keys went to the same slots; padding rows wrote only to the scratch page
    torch.testing.assert_close(static.k[:, :pages], dynamic.k[:, :pages])
    assert plan.write_slots[4:].tolist() == [scratch, scratch]
    assert plan.key_slots.shape == (bucket, width * page) and plan.mask.shape == (bucket, 1, 1, width * page)
