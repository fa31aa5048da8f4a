"""The CPU fast paths of the engine compute what the plain paths compute: the decode plan
(`plan_decode`, grouped queries) against the general plan and the definition,
the positions of a decode step, and the products over packed weights (`cpu_linear.py`) against
F.linear — including a weight written after it was packed, two modules never sharing a pack, a
copied model, autograd, and the kv component setting it up on CPU; and a failed step's undo, which
keeps each row's history by reference and cuts what the step appended."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from wgc.models.layers import LlamaConfig, LlamaModel
from wgc.runtime.engines.attention import AttentionBatch, KVStorage, TorchAttention, plan_torch
from wgc.runtime.engines.cpu_linear import (
    MIN_PACKED_WEIGHT,
    PackedLinear,
    PackedWeight,
    invariant_linear,
    linear,
    pack_linears,
    packed_available,
)
from wgc.runtime.engines.kv_engine import Geometry, KVCacheEngine, Write

from tests.engines.test_attention import HEAD_DIM, NUM_PAGES, PAGE, expected, fill_pages, make_batch

needs_onednn = pytest.mark.skipif(not packed_available(), reason="this torch has no oneDNN")


@pytest.mark.parametrize("group", [1, 2, 4])
@pytest.mark.parametrize("cached", [[0, 5, 17, 3, 8], [7, 7, 7], [15, 3], [3]])
def test_decode_plan_attends_like_the_general_plan_and_the_definition(group: int, cached: list[int]) -> None:
    new = [1] * len(cached)
    heads, kv_heads = 2 * group, 2
    q, keys, values, tables = make_batch(cached, new, heads, kv_heads, seed=sum(cached) + group)
    k_new = torch.stack([k[c] for k, c in zip(keys, cached)])  # [B, kv_heads, d]
    v_new = torch.stack([v[c] for v, c in zip(values, cached)])
    batch = AttentionBatch(tables, cached, new, PAGE)
    outs = []
    for fast in (True, False):
        storage = KVStorage.allocate(1, NUM_PAGES, PAGE, kv_heads, HEAD_DIM)
        k_pages, v_pages = storage.layer(0)
        fill_pages(k_pages, v_pages, tables, keys, values, cached)
        backend = TorchAttention(fast_decode=fast)
        plan = backend.plan(batch)
        assert plan.decode is fast
        outs.append(backend.attend(plan, q, k_new, v_new, k_pages, v_pages))  # [B, heads, d]
    torch.testing.assert_close(outs[0], outs[1], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(outs[0], expected(q, keys, values, cached, new, "causal"), atol=1e-5, rtol=1e-4)


def test_decode_plan_writes_and_reads_the_general_plans_slots() -> None:
    cached = [0, 5, 17, 3, 8, 16]
    gen = torch.Generator().manual_seed(3)
    tables = [torch.randperm(NUM_PAGES, generator=gen)[: -(-(c + 1) // PAGE) + 1].tolist() for c in cached]
    batch = AttentionBatch(tables, cached, [1] * len(cached), PAGE)
    fast, general = plan_torch(batch), plan_torch(batch, fast_decode=False)
    assert torch.equal(fast.write_slots, general.write_slots)
    assert torch.equal(fast.key_slots, general.key_slots)
    assert torch.equal(fast.q_index, general.q_index) and torch.equal(fast.out_index, general.out_index)
    assert fast.mask is not None and general.mask is not None
    assert torch.equal(fast.mask[:, 0, 0], general.mask[:, 0, 0])
    uniform = plan_torch(AttentionBatch(tables[:1] * 2, [cached[0]] * 2, [1, 1], PAGE))
    assert uniform.mask is None  # rows of one length attend to every key: no mask at all


def test_a_prefill_or_a_frozen_step_keeps_the_general_plan() -> None:
    assert not plan_torch(AttentionBatch([[1, 2]], [0], [5], PAGE)).decode
    assert not plan_torch(AttentionBatch([[1, 2]], [5], [1], PAGE, write=False)).decode


def test_decode_positions_are_the_rope_positions_and_a_mixed_step_keeps_them() -> None:
    engine = KVCacheEngine(Geometry(1, 2, 2, 8, 1024), 32, PAGE, torch.device("cpu"), prefix_caching=False)
    with engine.stepping([Write(1, "m", [5, 6, 7], 3), Write(2, "m", [1] * 6, 6, block=True)]) as p:
        assert p.positions.tolist() == [0, 1, 2, 0, 0, 0, 0, 0, 0]
    with engine.stepping([Write(1, "m", [8], 1), Write(2, "m", [9], 1)]) as p:
        assert p.positions.dtype == torch.int64 and p.positions.tolist() == [3, 1]  # the block took one position
    with engine.stepping([Write(1, "m", [8, 9], 2), Write(2, "m", [9], 1)]) as p:
        assert p.positions.tolist() == [4, 5, 2]


@needs_onednn
@pytest.mark.parametrize("rows", [1, 2, 8, 33])
def test_packed_products_equal_f_linear(rows: int) -> None:
    layer = nn.Linear(256, 512)
    x = torch.randn(rows, 256)
    with torch.no_grad():
        want = F.linear(x, layer.weight, layer.bias)
        pack_linears(layer)
        assert isinstance(layer, PackedLinear)
        torch.testing.assert_close(layer(x), want, atol=1e-3, rtol=1e-4)
        torch.testing.assert_close(layer(x.view(rows, 1, 256)), want.view(rows, 1, 512), atol=1e-3, rtol=1e-4)


@needs_onednn
def test_a_weight_written_after_packing_is_the_one_used() -> None:
    layer = nn.Linear(256, 512, bias=False)
    pack_linears(layer)
    x = torch.randn(8, 256)
    with torch.no_grad():
        layer(x)  # packed now
        layer.load_state_dict({"weight": torch.randn(512, 256)})  # written in place
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight), atol=1e-3, rtol=1e-4)
        layer.weight = nn.Parameter(torch.randn(512, 256))  # another tensor
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight), atol=1e-3, rtol=1e-4)


@needs_onednn
def test_modules_and_copies_never_share_a_pack() -> None:
    model = nn.Sequential(nn.Linear(256, 256, bias=False), nn.Linear(256, 256, bias=False))
    assert pack_linears(model) == 2
    x = torch.randn(4, 256)
    with torch.no_grad():
        torch.testing.assert_close(model(x), F.linear(F.linear(x, model[0].weight), model[1].weight),
                                   atol=1e-3, rtol=1e-4)
        twin = copy.deepcopy(model)
        twin[0].weight.mul_(2.0)
        torch.testing.assert_close(twin(x), 2 * model(x), atol=1e-4, rtol=1e-4)
    assert model[0].packed is not twin[0].packed


@needs_onednn
def test_autograd_and_small_or_other_dtype_products_take_f_linear(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    packed = PackedWeight()
    monkeypatch.setattr(PackedWeight, "get", lambda self, w: calls.append(w) or torch.ops.mkldnn._reorder_linear_weight(w, 32))
    weight = torch.randn(512, 256, requires_grad=True)
    x = torch.randn(8, 256)
    linear(x, weight, None, packed).sum().backward()  # autograd wanted: F.linear, and a gradient
    assert weight.grad is not None and not calls
    linear(torch.randn(8, 64), torch.randn(64, 64), None, packed)  # 4096 elements: below MIN_PACKED_WEIGHT
    linear(x.double(), weight.detach().double(), None, packed)
    assert not calls
    linear(x, weight.detach(), None, packed)
    assert len(calls) == 1


@needs_onednn
@pytest.mark.parametrize("in_features, out_features, bias", [
    (128, 4365, False),  # the tiny Orpheus head
    (512, 1024, False), (512, 3072, False), (1536, 512, False), (512, 8192, False),  # the 34M Llama's products
    (1536, 512, True),
])
def test_a_packed_row_is_bitwise_the_same_at_any_batch_size(in_features: int, out_features: int, bias: bool) -> None:
    """oneDNN gives one row alone other bits than in a batch for some shapes on some hosts (the 34M
    shape's down projection, 1536 inputs, on an AMD EPYC): the product pads such counts."""
    layer = nn.Linear(in_features, out_features, bias=bias)
    pack_linears(layer)
    x = torch.randn(70, in_features)
    with torch.no_grad():
        full = layer(x)
        for rows in (1, 2, 3, 5, 8, 17, 33):
            assert torch.equal(layer(x[:rows]), full[:rows]), rows
            assert torch.equal(layer(x[rows:rows + 1])[0], full[rows]), rows  # alone
        assert layer(x[:1].reshape(1, 1, in_features)).shape == (1, 1, out_features)


@pytest.mark.parametrize("out_features, in_features", [(128, 128), (512, 128), (128, 256), (64, 128)])
def test_a_small_weights_row_is_bitwise_the_same_at_any_batch_size(out_features: int, in_features: int) -> None:
    """Under MIN_PACKED_WEIGHT (and for a small module's fused gate/up, [512, 128]) the product is
    MKL's, padded to 16 rows: a row's bits do not depend on how many rows it shares the
    product with (one alone, a few, or a long prompt), at this host's thread count."""
    weight, bias = torch.randn(out_features, in_features) * 0.05, torch.randn(out_features)
    x = torch.randn(70, in_features)
    with torch.no_grad():
        full = invariant_linear(x, weight, bias)  # [70, out]
        for rows in (1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 15, 16, 33):
            assert torch.equal(invariant_linear(x[:rows], weight, bias), full[:rows]), rows
            assert torch.equal(invariant_linear(x[rows:rows + 1], weight, bias)[0], full[rows]), rows  # alone
        assert invariant_linear(x[:1].reshape(1, 1, in_features), weight, bias).shape == (1, 1, out_features)
        torch.testing.assert_close(full, F.linear(x, weight, bias), atol=1e-6, rtol=1e-6)
        layer = nn.Linear(128, 128)  # a small module takes this product once packed
        pack_linears(layer)
        assert layer.weight.numel() < MIN_PACKED_WEIGHT
        assert torch.equal(layer(x[:1, :128]), invariant_linear(x[:1, :128], layer.weight, layer.bias))


def test_a_cpu_kv_component_packs_its_model_unless_told_not_to(monkeypatch: pytest.MonkeyPatch) -> None:
    from wgc.models.orpheus.llm import LanguageModel

    from tests.models.orpheus.helpers import llm_spec

    lm = LanguageModel(llm_spec(), 0, "cpu", preset="tiny")
    packs = [m for m in lm.model.modules() if isinstance(getattr(m, "packed", None), PackedWeight)]
    assert len(packs) == (lm.config.llama.layers * 7 + 1 if packed_available() else 0)  # 7 per block and the head
    monkeypatch.setenv("WGC_CPU_PACKED_LINEAR", "0")
    lm = LanguageModel(llm_spec(), 0, "cpu", preset="tiny")
    assert not any(isinstance(m, PackedLinear) for m in lm.model.modules())


@needs_onednn
def test_a_packed_llama_decodes_the_plain_ones_greedy_tokens() -> None:
    config = LlamaConfig.preset("tiny")
    torch.manual_seed(0)
    plain = LlamaModel(config).eval()
    fast = copy.deepcopy(plain)
    pack_linears(fast)
    x = torch.randint(0, config.vocab, (4, 24))
    positions = torch.arange(24).expand(4, -1)
    with torch.no_grad():
        a, b = plain(x, positions), fast(x, positions)  # [4, 24, vocab]
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    assert torch.equal(a.argmax(-1), b.argmax(-1))



@pytest.mark.parametrize("block", [False, True])
def test_a_failed_step_restores_the_history_it_appended_to_without_copying_it(block: bool) -> None:
    engine = KVCacheEngine(Geometry(1, 2, 2, 8, 1024), 32, PAGE, torch.device("cpu"), prefix_caching=False)
    with engine.stepping([Write(1, "m", list(range(40)), 40)]):
        pass
    seq = engine.seq(1, "m")
    assert seq is not None
    history = seq.tokens
    seq.data["generated"] = 7
    with pytest.raises(RuntimeError), engine.stepping([Write(1, "m", [5, 6, 7], 3, block=block)]):
        seq.data["generated"] = 8  # the family's value, changed by a forward that then fails
        raise RuntimeError("forward failed")
    after = engine.seq(1, "m")
    assert after is not None and after.tokens is history and history == list(range(40))
    assert (after.position, after.progress, after.data, engine.length(1, "m")) == (40, 0, {"generated": 7}, 40)
    with engine.stepping([Write(1, "m", [5], 1)]) as p:  # and the row goes on where it was
        assert p.positions.tolist() == [40] and p.batch.cached_lengths == [40]
    assert engine.seq(1, "m").tokens == [*range(40), 5]  # type: ignore[union-attr]
