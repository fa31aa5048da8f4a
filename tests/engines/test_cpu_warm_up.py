"""A CPU kv component's start-up warm-up (cpu_linear.warm_packed, KVComponent.warm_up): every packed
weight is packed before the first request, each distinct packed shape runs once at every decode row
count, nothing is warmed when packing is off, and the products afterwards are the ones a cold model
computes (the zero rows of the warm-up leave no trace)."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch
from torch import Tensor, nn
from wgc.models.layers import LlamaConfig, LlamaModel
from wgc.runtime.engines.cpu_linear import (
    MIN_PACKED_WEIGHT,
    FusedWeight,
    PackedWeight,
    pack_linears,
    packed_available,
    warm_packed,
)

needs_onednn = pytest.mark.skipif(not packed_available(), reason="this torch has no oneDNN")


def _packs(model: nn.Module) -> list[tuple[PackedWeight, Tensor]]:
    """Every weight of `model` its forward packs, with the tensor it packs (a fused group's concatenation,
    not its parts)."""
    out = []
    fused_parts = {part for m in model.modules() if isinstance(getattr(m, "fused", None), FusedWeight)
                   for part in m.fusable_parts()}
    for module in model.modules():
        fused = getattr(module, "fused", None)
        if isinstance(fused, FusedWeight) and fused.packs:
            weight = fused.get(tuple(module.fusable_parts()))[0]  # first: a first build makes a new pack
            out.append((fused.packed, weight))
        packed, weight = getattr(module, "packed", None), getattr(module, "weight", None)
        if isinstance(packed, PackedWeight) and module not in fused_parts and isinstance(weight, Tensor) and weight.numel() >= MIN_PACKED_WEIGHT:
            out.append((packed, weight))
    return out


def _model() -> LlamaModel:
    """A Llama whose every product is over MIN_PACKED_WEIGHT (the tiny preset's layers are MKL's)."""
    config = replace(LlamaConfig.preset("tiny"), hidden=256, heads=4, kv_heads=4, head_dim=64, intermediate=512,
                     layers=2)
    torch.manual_seed(0)
    return LlamaModel(config).eval()


@needs_onednn
def test_warm_packed_packs_every_weight_and_runs_each_shape_at_every_row_count() -> None:
    model = _model()
    pack_linears(model)
    packs = _packs(model)
    assert packs and all(p.tensor is None for p, _ in packs)  # packing waits for the first product
    count = warm_packed(model, range(1, 6))
    for packed, weight in packs:
        assert packed.tensor is not None and packed.key == (weight.data_ptr(), weight._version)
    for module in model.modules():  # a fused group's parts run only as the group: never packed on their own
        if isinstance(getattr(module, "fused", None), FusedWeight):
            assert all(part.packed.tensor is None for part in module.fusable_parts())
    shapes = {tuple(w.shape) for _, w in packs}  # q/k/v, o, gate/up, down, the head: one product each
    assert len(shapes) == 5 and count == 5 * len(shapes)


@needs_onednn
def test_a_warmed_model_computes_what_a_cold_one_does() -> None:
    cold = _model()
    warm = copy.deepcopy(cold)
    pack_linears(cold), pack_linears(warm)
    warm_packed(warm, range(1, 9))
    x = torch.randint(0, cold.config.vocab, (3, 12))
    positions = torch.arange(12).expand(3, -1)
    with torch.no_grad():
        assert torch.equal(cold(x, positions), warm(x, positions))


def test_a_cpu_kv_component_warms_its_packed_model_at_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    from wgc.models.orpheus.llm import LanguageModel

    from tests.models.orpheus.helpers import llm_spec

    lm = LanguageModel(llm_spec(), 0, "cpu", preset="tiny")
    lines: list[str] = []
    packs = _packs(lm.model)
    lm.warm_up(lines.append)
    if packed_available():  # the tiny preset packs its head only (the layers' weights are MKL's)
        assert packs and all(p.tensor is not None for p, _ in packs)
        rows = int(lm.spec.settings.get("max_batch") or 1)
        assert lines == [f"packed weights ready, {len(packs) * rows} products run at 1-{rows} rows"]
    monkeypatch.setenv("WGC_CPU_PACKED_LINEAR", "0")
    lm = LanguageModel(llm_spec(), 0, "cpu", preset="tiny")
    lines.clear()
    lm.warm_up(lines.append)
    assert lines == [] and lm.packed_model is None
