"""Paged decode attention with static shapes, for CUDA graphs: no shape depends on the data.

A decode step of B rows (a batch bucket), each one new token. Per row, as device tensors of fixed
shape: the block table padded to P pages ([B, P]) and the sequence length counting the new token
([B]). The new token's key and value are written at position seq_len - 1; the row attends to the
keys 0 .. seq_len - 1 of its P * page_size gathered slots through a length mask. Nothing is read
back to the host, so the step can be captured once per bucket and replayed with new values.

Padding rows (seq_len 0, as GraphRunner leaves them: zeros) write to a scratch slot the allocator
never hands out, and attend to one key; their outputs are dropped by the caller.

The same plain torch runs on any device: on CPU it is what the tests compare with the dynamic path
(attention.TorchAttention) to prove a captured graph computes the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from wgc.runtime.engines.attention import write_kv


@dataclass(frozen=True)
class StaticPlan:
    write_slots: Tensor  # [B] int64: flat slot of each row's new token (the scratch slot for padding)
    key_slots: Tensor  # [B, K] int64, K = P * page_size: flat slot of every key a row may read
    mask: Tensor  # [B, 1, 1, K] bool: True = attend (keys below the row's length)


def plan_static(block_table: Tensor, seq_lens: Tensor, page_size: int, scratch_slot: int) -> StaticPlan:
    """block_table [B, P] int64, seq_lens [B] int64 (new token included; 0 = padding), on the device."""
    width = block_table.shape[1] * page_size
    key = torch.arange(width, device=block_table.device)  # [K]
    key_slots = block_table[:, key // page_size] * page_size + key % page_size  # [B, K]
    last = (seq_lens - 1).clamp(min=0)  # [B]: the new token's position
    page = block_table.gather(1, (last // page_size)[:, None]).squeeze(1)  # [B]
    write_slots = torch.where(seq_lens > 0, page * page_size + last % page_size, scratch_slot)  # [B]
    mask = key[None, :] < seq_lens.clamp(min=1)[:, None]  # [B, K]
    return StaticPlan(write_slots, key_slots, mask[:, None, None, :])


class StaticAttention:
    """The backend interface (plan/attend) over a StaticPlan: write the new keys, gather, masked SDPA.

    Grouped-query attention without repeating keys: the query heads sharing a kv head are laid out
    as that head's query rows (q [B, kv_heads, group, d] against keys [B, kv_heads, K, d]), the same
    pairing as SDPA's enable_gqa (query head h reads kv head h // group).
    """

    def __init__(self, scale: float | None = None) -> None:
        self.scale = scale

    def plan(self, plan: StaticPlan) -> StaticPlan:
        return plan  # built on the device by plan_static, inside the captured step

    def attend(self, plan: StaticPlan, q: Tensor, k: Tensor, v: Tensor, k_pages: Tensor, v_pages: Tensor) -> Tensor:
        """q: [B, heads, d]; k, v: [B, kv_heads, d]; pages [num_pages, page_size, kv_heads, d] -> [B, heads, d]."""
        write_kv(k_pages, v_pages, k, v, plan.write_slots)
        batch, heads, head_dim = q.shape
        kv_heads = k_pages.shape[2]
        keys = k_pages.view(-1, kv_heads, head_dim)[plan.key_slots]  # [B, K, kv_heads, d]
        values = v_pages.view(-1, kv_heads, v_pages.shape[3])[plan.key_slots]  # [B, K, kv_heads, d]
        grouped = q.view(batch, kv_heads, heads // kv_heads, head_dim)  # [B, kv_heads, group, d]
        out = F.scaled_dot_product_attention(
            grouped, keys.transpose(1, 2).to(q.dtype), values.transpose(1, 2).to(q.dtype),
            attn_mask=plan.mask, scale=self.scale,
        )  # [B, kv_heads, group, d]
        return out.reshape(batch, heads, -1)  # [B, heads, d]
