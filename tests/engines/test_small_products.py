"""Small products (runtime/engines/cpu_linear.invariant_linear: MKL, padded with zero rows made once)
give a row the same bits at every row count from 1 to 64, alone or beside others, at one and two
threads, with and without a bias, for a [rows, in] input and a [..., rows, in] one; the padding
rows never leak into the output and the shared zero rows are never written."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
import torch.nn.functional as F
from wgc.runtime.engines import cpu_linear
from wgc.runtime.engines.cpu_linear import invariant_linear


@contextmanager
def threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("out_features, in_features, bias", [(256, 128, False), (128, 256, False),
                                                             (512, 128, True), (128, 128, False)])
def test_a_small_products_row_has_its_bits_at_every_row_count(n_threads: int, out_features: int,
                                                              in_features: int, bias: bool) -> None:
    torch.manual_seed(out_features + in_features)
    weight = torch.randn(out_features, in_features) * 0.05
    b = torch.randn(out_features) if bias else None
    x = torch.randn(64, in_features)
    with threads(n_threads), torch.no_grad():
        alone = torch.cat([invariant_linear(x[r:r + 1], weight, b) for r in range(64)])  # [64, out]
        for rows in range(1, 65):
            got = invariant_linear(x[:rows], weight, b)
            assert got.shape == (rows, out_features)
            assert torch.equal(got, alone[:rows]), rows
        assert torch.equal(invariant_linear(x[:3].view(1, 3, in_features), weight, b)[0], alone[:3])
    torch.testing.assert_close(alone, F.linear(x, weight, b), atol=1e-5, rtol=1e-5)


def test_the_padding_rows_stay_zero_and_out_of_the_result() -> None:
    weight, bias = torch.randn(64, 32), torch.randn(64)
    for rows in (1, 2, 3, 5):
        out = invariant_linear(torch.randn(rows, 32), weight, bias)
        assert out.shape == (rows, 64)
        out.add_(1.0)  # the caller writes its result in place: the shared zero rows are not it
    assert cpu_linear._ZERO_ROWS and all(not z.any() for z in cpu_linear._ZERO_ROWS.values())


def test_a_fused_product_follows_each_parts_weight_and_bias_however_they_change() -> None:
    """FusedWeight keys its concatenation on every part's weight and bias (storage and version,
    read from the modules' parameters): each kind of change is seen."""
    from torch import nn
    from wgc.runtime.engines.cpu_linear import FusedWeight, fused_linear

    torch.manual_seed(5)
    parts = (nn.Linear(32, 16), nn.Linear(32, 8))
    fused, x = FusedWeight(packs=False), torch.randn(3, 32)

    def want() -> torch.Tensor:
        return torch.cat([F.linear(x, p.weight, p.bias) for p in parts], dim=-1)

    with torch.no_grad():
        torch.testing.assert_close(fused_linear(x, parts, fused), want(), atol=1e-6, rtol=1e-6)
        parts[1].bias.add_(1.0)  # a bias written in place
        torch.testing.assert_close(fused_linear(x, parts, fused), want(), atol=1e-6, rtol=1e-6)
        parts[0].weight.data = torch.randn(16, 32)  # another storage under the same Parameter
        torch.testing.assert_close(fused_linear(x, parts, fused), want(), atol=1e-6, rtol=1e-6)
        parts[1].bias.data = torch.randn(8)  # another storage under the bias
        torch.testing.assert_close(fused_linear(x, parts, fused), want(), atol=1e-6, rtol=1e-6)
        parts[0].bias = nn.Parameter(torch.randn(16))  # another Parameter
        torch.testing.assert_close(fused_linear(x, parts, fused), want(), atol=1e-6, rtol=1e-6)
