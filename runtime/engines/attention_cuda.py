"""FlashInfer paged attention on CUDA: the same plan/attend interface as attention.TorchAttention.

Imported only by attention.attention_backend for a CUDA device (importing this module imports no
flashinfer either; FlashInferAttention does, when constructed). Planning takes host-side int32 CSR
arrays (pinned), so it never synchronises the device; `plan_async` plans step N+1 on a side thread
while step N runs (plan_ahead.py drives it). Two wrapper sets alternate, so planning one never
touches the one in use. What keeps that safe when a planned-ahead step is discarded:
- the turn flips under a lock and each set has its own lock: two plans in flight take different
  sets, and a set is never planned by two threads at once;
- a set's device index buffers are replaced by copies on the model's stream, ordered after every
  kernel already issued that reads them; its pinned host buffer is reused only once the set's
  previous copies have landed (an event per set);
- a plan is valid until its set is planned again: each plan carries its set's generation and
  `attend` raises on a stale one instead of attending with another step's indices. With two sets a
  plan survives exactly one later plan; plan_ahead.py uses a prediction only if nothing else was
  planned since, and plans ahead only once the step in use has issued every attend.
Steps: decode (one new token each, written) -> the decode wrapper; otherwise the paged prefill
wrapper with a bottom-right causal mask (or none, mode "prefix"); a frozen prefix (write=False) ->
paged prefill over the prefix pages + ragged prefill over the new tokens' own keys, merged by
their log-sum-exp (flashinfer.merge_state), nothing written.
"""

from __future__ import annotations

import importlib.util
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor
from wgc.runtime.engines.attention import AttentionBatch, write_kv

WORKSPACE_BYTES = 128 * 1024 * 1024


def flashinfer_available() -> bool:
    return torch.cuda.is_available() and importlib.util.find_spec("flashinfer") is not None


@dataclass(frozen=True)
class HostIndices:
    """FlashInfer's CSR page table for one step, on the host."""

    qo_indptr: Tensor  # [B + 1] int32: packed rows of each sequence's new tokens
    kv_indptr: Tensor  # [B + 1] int32: each sequence's slice of kv_indices
    kv_indices: Tensor  # [total pages] int32: page ids, sequence after sequence
    last_page_len: Tensor  # [B] int32: tokens in each sequence's last page (0 when it has none)
    write_slots: Tensor  # [sum n] int64: flat slot of each new token (empty when not writing)


def host_indices(batch: AttentionBatch, pin: bool = False) -> HostIndices:
    size = batch.page_size
    qo, kv, pages, last, slots = [0], [0], [], [], []
    for table, cached, new, length in zip(batch.page_tables, batch.cached_lengths, batch.q_lengths, batch.kv_lengths):
        used = -(-length // size)
        pages.extend(table[:used])
        qo.append(qo[-1] + new)
        kv.append(kv[-1] + used)
        last.append(length - (used - 1) * size if used else 0)
        if batch.write:
            slots.extend(table[p // size] * size + p % size for p in range(cached, cached + new))

    def host(values: list[int], dtype: torch.dtype) -> Tensor:
        tensor = torch.tensor(values, dtype=dtype)
        return tensor.pin_memory() if pin else tensor

    return HostIndices(host(qo, torch.int32), host(kv, torch.int32), host(pages, torch.int32),
                       host(last, torch.int32), host(slots, torch.int64))


@dataclass(frozen=True)
class FlashInferPlan:
    write: bool
    slots: Tensor  # [sum n] int64 on the device
    paged: Any  # the planned decode or paged-prefill wrapper
    ragged: Any | None  # frozen prefix: the planned ragged wrapper over the new tokens' keys
    wrappers: int = 0  # the wrapper set planned (0 or 1)
    generation: int = 0  # that set's plan count when planned: a later plan of the set makes this one stale


@dataclass(frozen=True)
class _Wrappers:
    prefill: Any
    decode: Any
    ragged: Any


class FlashInferAttention:
    """Plan once per step (host arrays, no device sync), attend once per layer."""

    def __init__(self, device: torch.device | str, heads: int, kv_heads: int, head_dim: int, page_size: int,
                 dtype: torch.dtype = torch.float16, scale: float | None = None,
                 workspace_bytes: int = WORKSPACE_BYTES) -> None:
        import flashinfer

        self._fi = flashinfer
        self.device = torch.device(device)
        self.heads, self.kv_heads, self.head_dim, self.page_size = heads, kv_heads, head_dim, page_size
        self.dtype, self.scale = dtype, scale
        self.workspace = torch.zeros(workspace_bytes, dtype=torch.uint8, device=self.device)
        self._sets = [self._wrappers(), self._wrappers()]
        self._events: list[torch.cuda.Event | None] = [None, None]
        self._generations = [0, 0]  # plans made on each set
        self._set_locks = [threading.Lock(), threading.Lock()]
        self._turn = 0
        self._lock = threading.Lock()
        self._stream = torch.cuda.current_stream(self.device)
        self._planner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wgc-attention-plan")

    def _wrappers(self) -> _Wrappers:
        fi = self._fi
        return _Wrappers(
            prefill=fi.BatchPrefillWithPagedKVCacheWrapper(self.workspace, "NHD"),
            decode=fi.BatchDecodeWithPagedKVCacheWrapper(
                self.workspace, "NHD", use_tensor_cores=self.heads // self.kv_heads >= 4),
            ragged=fi.BatchPrefillWithRaggedKVCacheWrapper(self.workspace, "NHD"),
        )

    def plan_async(self, batch: AttentionBatch) -> Future[FlashInferPlan]:
        """Plan on the side thread. It takes the set of the plan before last: call it once every attend
        with that plan has been issued (for step N+1, once step N-1's forward has; plan_ahead.py waits
        for step N's)."""
        return self._planner.submit(self.plan, batch)

    def plan(self, batch: AttentionBatch) -> FlashInferPlan:
        with self._lock:
            turn, self._turn = self._turn, self._turn ^ 1
        with self._set_locks[turn]:
            self._generations[turn] += 1  # from here on, the set's previous plan is stale
            generation = self._generations[turn]
            previous = self._events[turn]
            if previous is not None:
                previous.synchronize()  # this set's last pinned-to-device copies have landed
            with torch.cuda.stream(self._stream):
                plan = self._plan_on(self._sets[turn], batch)
                done = torch.cuda.Event()
                done.record(self._stream)
            self._events[turn] = done
        return replace(plan, wrappers=turn, generation=generation)

    def _plan_on(self, wrappers: _Wrappers, batch: AttentionBatch) -> FlashInferPlan:
        if not batch.write and min(batch.cached_lengths, default=1) == 0:
            raise ValueError("a frozen-prefix step needs a non-empty prefix in every sequence")
        idx = host_indices(batch, pin=True)
        slots = idx.write_slots.to(self.device, non_blocking=True)
        heads = (self.heads, self.kv_heads, self.head_dim)  # positional: stable across FlashInfer versions
        types: dict[str, Any] = {"q_data_type": self.dtype, "kv_data_type": self.dtype}
        if self.scale is not None:
            types["sm_scale"] = self.scale
        if batch.write and all(n == 1 for n in batch.q_lengths):
            wrappers.decode.plan(idx.kv_indptr, idx.kv_indices, idx.last_page_len, *heads, self.page_size, **types)
            return FlashInferPlan(True, slots, wrappers.decode, None)
        wrappers.prefill.plan(idx.qo_indptr, idx.kv_indptr, idx.kv_indices, idx.last_page_len, *heads, self.page_size,
                              causal=batch.write and batch.mode == "causal", **types)
        if batch.write:
            return FlashInferPlan(True, slots, wrappers.prefill, None)
        wrappers.ragged.plan(idx.qo_indptr, idx.qo_indptr, *heads, causal=batch.mode == "causal", **types)
        return FlashInferPlan(False, slots, wrappers.prefill, wrappers.ragged)

    def attend(self, plan: FlashInferPlan, q: Tensor, k: Tensor, v: Tensor, k_pages: Tensor, v_pages: Tensor) -> Tensor:
        """q: [sum n, heads, head_dim]; k, v: [sum n, kv_heads, head_dim]; pages NHD -> [sum n, heads, head_dim]."""
        if plan.generation != self._generations[plan.wrappers]:
            raise RuntimeError(f"stale FlashInfer plan: wrapper set {plan.wrappers} was planned again since "
                               f"(plan {plan.generation}, now {self._generations[plan.wrappers]})")
        if plan.write:
            write_kv(k_pages, v_pages, k, v, plan.slots)
            return plan.paged.run(q, (k_pages, v_pages))  # [sum n, heads, head_dim]
        out_prefix, lse_prefix = plan.paged.run(q, (k_pages, v_pages), return_lse=True)  # [sum n, heads, d], [sum n, heads]
        out_new, lse_new = plan.ragged.run(q, k, v, return_lse=True)  # [sum n, heads, d], [sum n, heads]
        out, _ = self._fi.merge_state(out_prefix, lse_prefix, out_new, lse_new)  # [sum n, heads, head_dim]
        return out

    def close(self) -> None:
        self._planner.shutdown(wait=True)
