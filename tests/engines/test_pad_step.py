"""`cpu_linear.pad_step` finds, per shape and thread count, the smallest padding step at which a
small product's rows get the bits they have in a larger one. Which row counts MKL computes
differently depends on the host, so the probe is checked here against simulated hosts: an
F.linear whose rows come out other below a given row count (as a gemv or a small-row kernel
would), whatever the host running the test."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor
from wgc.runtime.engines import cpu_linear


def _exact(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """A product whose rows do not depend on the row count: float64, rounded to float32."""
    out = x.double() @ weight.double().t()
    return (out if bias is None else out + bias.double()).float()


def _host_differing_below(rows_alike: int):  # type: ignore[no-untyped-def]
    """F.linear as on a host whose kernel rounds a product of fewer than `rows_alike` rows otherwise
    (and any larger count alike, whatever the real host's MKL does)."""
    def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        out = _exact(x, weight, bias)
        return out + 1e-3 if x.shape[0] < rows_alike else out
    return linear


@pytest.mark.parametrize(("rows_alike", "step"), [(1, 1), (2, 2), (3, 4), (4, 4), (5, 8), (8, 8), (9, 16), (16, 16)])
def test_the_step_is_the_smallest_that_pads_past_the_rows_computed_otherwise(
        monkeypatch: pytest.MonkeyPatch, rows_alike: int, step: int) -> None:
    monkeypatch.setattr(cpu_linear, "_PAD_STEP", {})
    monkeypatch.setattr(cpu_linear.F, "linear", _host_differing_below(rows_alike))
    monkeypatch.setattr(cpu_linear.torch, "mm", lambda a, b: cpu_linear.F.linear(a, b.t()))
    assert cpu_linear.pad_step(96, 128, True, torch.float32) == step
    assert cpu_linear.pad_step(96, 128, False, torch.float32) == step


def test_the_step_is_found_once_per_shape_and_thread_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_linear, "_PAD_STEP", {})
    probes: list[tuple[int, int]] = []
    real = cpu_linear._probe_pad_step
    monkeypatch.setattr(cpu_linear, "_probe_pad_step", lambda o, i, b, d, k: probes.append((o, i)) or real(o, i, b, d, k))
    for _ in range(3):
        cpu_linear.pad_step(64, 128, True, torch.float32)
    cpu_linear.pad_step(64, 256, True, torch.float32)
    assert probes == [(64, 128), (64, 256)]
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        cpu_linear.pad_step(64, 128, True, torch.float32)  # another thread count may split rows otherwise
    finally:
        torch.set_num_threads(threads)
    assert probes == [(64, 128), (64, 256), (64, 128)]


def _onednn_differing_below(rows_alike: int, seen: list[int]):  # type: ignore[no-untyped-def]
    """oneDNN's product as on a host whose kernel rounds fewer than `rows_alike` rows otherwise (one row
    alone, for the 34M Llama's down projection on an AMD EPYC); each call's row count into `seen`."""
    def product(x: Tensor, packed: Tensor, bias: Tensor | None) -> Tensor:
        seen.append(x.shape[0])
        out = x.double().sum(-1, keepdim=True).float()  # [rows, 1]: each row's own value
        return out + 1e-3 if x.shape[0] < rows_alike else out
    return product


@pytest.mark.parametrize(("rows_alike", "step"), [(1, 1), (2, 2), (3, 4), (9, 16)])
def test_a_packed_product_pads_the_row_counts_its_kernel_computes_otherwise(
        monkeypatch: pytest.MonkeyPatch, rows_alike: int, step: int) -> None:
    monkeypatch.setattr(cpu_linear, "_PAD_STEP", {})
    seen: list[int] = []
    monkeypatch.setattr(cpu_linear, "_onednn", _onednn_differing_below(rows_alike, seen))
    assert cpu_linear.pad_step(512, 1536, False, torch.float32, packed=True) == step
    weight = torch.randn(512, 1536)
    packed = cpu_linear.PackedWeight()
    monkeypatch.setattr(cpu_linear.PackedWeight, "get", lambda self, w: w)  # no real pack: the fake ignores it
    x = torch.randn(40, 1536)
    full = cpu_linear.packed_linear(x, weight, None, packed)
    seen.clear()
    for rows in (1, 2, 3, 5, 15):
        assert torch.equal(cpu_linear.packed_linear(x[:rows], weight, None, packed), full[:rows]), rows
    assert seen == [rows + (-rows % step) for rows in (1, 2, 3, 5, 15)]
