"""Shared by the BAGEL LLM tests: the component spec, a tiny component with livelier random
weights, and the dense references (an explicit-mask attention, BAGEL's block mask)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from wgc.models.bagel.llm import LanguageModel
from wgc.runtime.components.base import Call

from wgc.plan.model import ComponentSpec

LABELS = ["main", "cfg_text", "cfg_img"]


def llm_spec(page_size: int = 4, kv_memory: int = 4 << 20, **settings: Any) -> ComponentSpec:
    return ComponentSpec("llm", "wgc.models.bagel.LanguageModel", "kv", [], {"bos": 151644, "eos": 151645}, LABELS,
                         {"dtype": "bf16"}, [0], 1, {"page_size": page_size, "max_batch": 16, "kv_memory": kv_memory,
                                                     **settings})


def lively(module: nn.Module, seed: int, std: float = 0.15) -> None:
    """Larger random weights than the preset's (norms near 1), so that every difference shows in the outputs."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            if not param.requires_grad:
                continue
            noise = torch.randn(param.shape, generator=gen)
            param.copy_(1.0 + 0.1 * noise if "norm" in name.split(".")[-2:][0] else std * noise)


def tiny_llm(seed: int = 0, **settings: Any) -> LanguageModel:
    model = LanguageModel(llm_spec(**settings), 0, "cpu", preset="tiny", seed=seed)
    lively(model.language_model, seed)
    lively(model.adapter, seed + 1)
    return model


def gen_from_und(model: nn.Module) -> None:
    """Every `X_moe_gen` weight set to its und counterpart `X` (what BAGEL's init_moe does)."""
    state = model.state_dict()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "_moe_gen" in name:
                param.copy_(state[name.replace("_moe_gen", "")])


def call(request: int, label: str, *args: Any) -> Call:
    return Call(request, label, tuple(args))


class DenseAttention:
    """Attention over a whole packed sequence with an explicit mask [T, T] (True: attend)."""

    def __init__(self, mask: Tensor) -> None:
        self.mask = mask

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                                             attn_mask=self.mask, enable_gqa=True)  # [1, heads, T, d]
        return out[0].transpose(0, 1)  # [T, heads, d]


def block_mask(segments: list[tuple[int, bool]]) -> Tensor:
    """BAGEL's mask over segments (length, is an image block): causal, and bidirectional inside a block."""
    ids = torch.cat([torch.full((n,), i) for i, (n, _) in enumerate(segments)])  # [T]: segment of each row
    block = torch.tensor([b for _, b in segments])[ids]  # [T]
    t = torch.arange(ids.numel())
    causal = t[None, :] <= t[:, None]  # [T, T]
    same = (ids[None, :] == ids[:, None]) & block[:, None]  # [T, T]
    return causal | same


def block_positions(segments: list[tuple[int, bool]]) -> Tensor:
    """Rope positions: a text segment's tokens one each, a whole block one."""
    out, pos = [], 0
    for n, is_block in segments:
        out.append(torch.full((n,), pos) if is_block else torch.arange(pos, pos + n))
        pos += 1 if is_block else n
    return torch.cat(out)  # [T]
