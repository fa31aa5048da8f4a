"""runtime/engines/prompt_rows.py and cpu_linear.small_linear: within a forward, a small weight's
product takes oneDNN at the prompt rows and MKL at the others, each row bitwise what its own kernel
gives it alone, and nothing changes outside such a forward or for a product over another row count."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from wgc.runtime.engines import cpu_linear
from wgc.runtime.engines.cpu_linear import PackedWeight, invariant_linear, pack_linears, packed_available, packed_linear
from wgc.runtime.engines.prompt_rows import current, prompt_rows, split_of

needs_onednn = pytest.mark.skipif(not packed_available(), reason="this torch has no oneDNN")


def test_the_split_is_a_slice_for_one_run_of_prompt_rows_and_indices_otherwise() -> None:
    assert split_of([]) is None and split_of([False, False]) is None
    every = split_of([True, True, True])
    assert every is not None and every.prompt == slice(0, 3) and every.other is None
    after = split_of([False, False, True, True])  # a mixed step: decodes first
    assert after is not None and after.prompt == slice(2, 4) and after.other == slice(0, 2)
    before = split_of([True, False])
    assert before is not None and before.prompt == slice(0, 1) and before.other == slice(1, 2)
    inside = split_of([False, True, True, False])
    assert inside is not None and inside.prompt == slice(1, 3) and isinstance(inside.other, torch.Tensor)
    assert inside.other.tolist() == [0, 3]
    apart = split_of([True, False, True])
    assert apart is not None and isinstance(apart.prompt, torch.Tensor) and isinstance(apart.other, torch.Tensor)
    assert (apart.prompt.tolist(), apart.other.tolist(), apart.rows) == ([0, 2], [1], 3)


def test_the_context_is_restored_after_a_forward_and_after_a_failure() -> None:
    assert current() is None
    with prompt_rows([True, False]):
        inner = current()
        with prompt_rows([True]):
            assert current() is not None and current().rows == 1  # type: ignore[union-attr]
        assert current() is inner
    with pytest.raises(RuntimeError), prompt_rows([True]):
        raise RuntimeError("a failed forward")
    assert current() is None


@needs_onednn
@pytest.mark.parametrize("kinds", [
    [True] * 40, [False] * 5 + [True] * 35, [True] * 30 + [False] * 3,
    [False, True, True, False] * 10, [True, False, False] * 11,
], ids=["prompts", "decodes-first", "decodes-last", "interleaved-run", "scattered"])
def test_each_row_gets_the_bits_its_own_kernel_gives_it_alone(kinds: list[bool]) -> None:
    layer = nn.Linear(128, 256)  # under MIN_PACKED_WEIGHT: MKL outside a forward
    pack_linears(layer)
    x = torch.randn(len(kinds), 128)
    with torch.no_grad():
        with prompt_rows(kinds):
            got = layer(x)  # [rows, 256]
            head = layer(x[:3])  # another row count: not the forward's token rows
        for i, prompt in enumerate(kinds):
            want = packed_linear(x[i:i + 1], layer.weight, layer.bias, layer.packed) if prompt else \
                invariant_linear(x[i:i + 1], layer.weight, layer.bias)
            assert torch.equal(got[i:i + 1], want), i
        assert torch.equal(head, invariant_linear(x[:3], layer.weight, layer.bias))
        assert torch.equal(layer(x), invariant_linear(x, layer.weight, layer.bias))  # outside: MKL, as before
        assert torch.equal(layer(x.view(len(kinds), 1, 128)).view(len(kinds), 256), layer(x))


@needs_onednn
def test_a_small_fused_group_splits_like_its_parts_and_a_large_weight_is_unchanged(
        monkeypatch: pytest.MonkeyPatch) -> None:
    parts = (nn.Linear(128, 256, bias=False), nn.Linear(128, 256, bias=False))  # fused: 65,536 elements
    fused = cpu_linear.FusedWeight(packs=False)
    large = nn.Linear(512, 1024, bias=False)
    pack_linears(large)
    x = torch.randn(12, 128)
    calls: list[tuple[int, int]] = []
    real = cpu_linear.packed_linear
    monkeypatch.setattr(cpu_linear, "packed_linear",
                        lambda x, w, b, p: calls.append(tuple(w.shape)) or real(x, w, b, p))  # type: ignore[func-returns-value]
    with torch.no_grad():
        outside = cpu_linear.fused_linear(x, parts, fused)
        assert calls == []  # MKL, as before
        with prompt_rows([True] * 12):
            inside = cpu_linear.fused_linear(x, parts, fused)
            y = torch.randn(12, 512)
            big = large(y)
        assert calls == [(512, 128), (1024, 512)]
        torch.testing.assert_close(inside, outside, atol=1e-5, rtol=1e-5)
        assert torch.equal(big, large(y))  # packed at any row kind: the same product
    assert isinstance(large.packed, PackedWeight)
