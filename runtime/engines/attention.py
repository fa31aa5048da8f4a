"""Paged attention: the KV page layout, writing new keys/values into pages, and attention over a
ragged batch whose keys live in pages. This module is the pure-torch path (CPU, and any device);
`attention_cuda.py` is FlashInfer's, imported only by `attention_backend` for a CUDA device.

Layout, per layer: k_pages, v_pages: [num_pages, page_size, kv_heads, head_dim] (FlashInfer's NHD).
A sequence's token at position p lives in page page_table[p // page_size], slot p % page_size.

One step's batch: sequence b has L_b tokens cached in its pages and n_b new tokens, packed in
q: [sum n_b, heads, head_dim]; new token i sits at position L_b + i.
- mode "causal": token i attends to positions <= L_b + i (a bottom-right aligned causal mask, which
  covers decode, appends and chunked prefill alike); mode "prefix": to all L_b + n_b positions.
- write=True: the new keys/values go into the pages at L_b .. L_b + n_b - 1, then attention reads
  the pages. write=False (a frozen prefix): the pages are only read; the new tokens' own keys and
  values are passed in directly and attended after the L_b cached positions, and nothing is written.
A decode step (one written token per sequence, the common case) has its own plan, `plan_decode`:
fewer host ops, no query gather or output scatter, grouped queries laid out per kv head (profiled on
CPU: the general plan was a tenth of a small model's step; bench/engine_speed.py).
Backends plan once per step (host-side metadata, shared by every layer) and attend once per layer;
both also have `plan_async` (the plan on a side thread), which `plan_ahead.py` uses to plan decode
step N+1 while step N runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

Mode = Literal["causal", "prefix"]


@dataclass(frozen=True)
class KVStorage:
    """Every layer's pages of one pool; `layer(i)` gives that layer's (k_pages, v_pages) views."""

    k: Tensor  # [layers, num_pages, page_size, kv_heads, head_dim]
    v: Tensor  # [layers, num_pages, page_size, kv_heads, head_dim]
    # each layer's (k_pages, v_pages) views, made once: a step asks for them every layer, and two
    # `select`s a layer were a measurable share of a small model's decode step (~1 us each)
    layers: tuple[tuple[Tensor, Tensor], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(zip(self.k.unbind(0), self.v.unbind(0))))

    @staticmethod
    def allocate(layers: int, num_pages: int, page_size: int, kv_heads: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> KVStorage:
        shape = (layers, num_pages, page_size, kv_heads, head_dim)
        return KVStorage(torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))

    @property
    def page_size(self) -> int:
        return self.k.shape[2]

    def layer(self, index: int) -> tuple[Tensor, Tensor]:
        return self.layers[index]  # each [num_pages, page_size, kv_heads, head_dim]


@dataclass(frozen=True)
class AttentionBatch:
    """Host-side description of one step: per sequence its page table, cached length and new tokens."""

    page_tables: Sequence[Sequence[int]]
    cached_lengths: Sequence[int]
    q_lengths: Sequence[int]
    page_size: int
    mode: Mode = "causal"
    write: bool = True

    def __post_init__(self) -> None:
        if not len(self.page_tables) == len(self.cached_lengths) == len(self.q_lengths):
            raise ValueError("page_tables, cached_lengths and q_lengths must have one entry per sequence")
        if self.mode not in ("causal", "prefix"):
            raise ValueError(f"unknown attention mode {self.mode!r}")
        for table, length in zip(self.page_tables, self.kv_lengths):
            if len(table) * self.page_size < length:
                raise ValueError(f"{len(table)} pages of {self.page_size} cannot hold {length} tokens")

    @property
    def kv_lengths(self) -> list[int]:
        """Tokens read from the pages: the cached ones, plus the new ones when they are written."""
        if not self.write:
            return list(self.cached_lengths)
        return [c + n for c, n in zip(self.cached_lengths, self.q_lengths)]

    def positions(self) -> Tensor:
        """The position of every new token, packed like q."""
        ranges = [torch.arange(c, c + n) for c, n in zip(self.cached_lengths, self.q_lengths)]
        return torch.cat(ranges) if ranges else torch.empty(0, dtype=torch.int64)  # [sum n]


class AttentionBackend(Protocol):
    def plan(self, batch: AttentionBatch) -> Any: ...

    def attend(self, plan: Any, q: Tensor, k: Tensor, v: Tensor, k_pages: Tensor, v_pages: Tensor) -> Tensor: ...


@dataclass(frozen=True)
class KVStep:
    """What one forward needs to use a paged cache: the pages, the backend and this step's plan."""

    storage: KVStorage
    backend: AttentionBackend
    plan: Any

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        k_pages, v_pages = self.storage.layer(layer)
        return self.backend.attend(self.plan, q, k, v, k_pages, v_pages)


@dataclass(frozen=True)
class TorchPlan:
    """Index tensors for one step of the torch path; B sequences, Q = max n_b, K = keys per row."""

    write: bool  # True: the new tokens are in the pages; False: they come in as k_new/v_new (frozen prefix)
    write_slots: Tensor  # [sum n] int64: flat slot (page * page_size + offset) of each new token
    key_slots: Tensor  # [B, K_pages] int64: flat slot of each key read from the pages (0 where padding)
    q_index: Tensor  # [B, Q] int64: packed row of each (sequence, new token) (0 where padding)
    out_index: Tensor  # [sum n] int64: row of the padded [B * Q] output holding each packed token
    mask: Tensor | None  # [B, 1, Q, K] bool, True = attend; K = K_pages (+ Q when not writing); None = all
    decode: bool = False  # one new token per sequence, written: q_index and out_index are the identity
    key_rows: Tensor | None = None  # decode: key_slots flattened [B * K], made once for every layer
    # Every sequence a whole prompt (nothing cached, written, causal), as runs of (sequences, tokens
    # each) of equal length in row order: its queries, keys and values are the step's own rows, and
    # each run's mask is SDPA's causal one (attend_prompts). Empty: not such a step.
    fresh: tuple[tuple[int, int], ...] = ()


def plan_torch(batch: AttentionBatch, device: torch.device | str = "cpu", fast_decode: bool = True) -> TorchPlan:
    """Build the gather/scatter indices and the explicit mask for one step (vectorised, on the host);
    a decode step through `plan_decode` unless `fast_decode` is False (the general plan, for tests
    and the bench's baseline)."""
    if fast_decode and batch.write and batch.q_lengths and all(n == 1 for n in batch.q_lengths):
        return plan_decode(batch, device)
    size = batch.page_size
    cached = torch.tensor(batch.cached_lengths, dtype=torch.int64)  # [B]
    q_len = torch.tensor(batch.q_lengths, dtype=torch.int64)  # [B]
    kv_len = torch.tensor(batch.kv_lengths, dtype=torch.int64)  # [B]
    tables = _pad_tables(batch.page_tables)  # [B, P]
    batch_size, max_q, max_kv = len(q_len), max(batch.q_lengths, default=0), max(batch.kv_lengths, default=0)

    new = torch.arange(max_q)  # [Q]
    q_valid = new[None, :] < q_len[:, None]  # [B, Q]
    q_pos = cached[:, None] + new[None, :]  # [B, Q]
    starts = torch.cumsum(q_len, 0) - q_len  # [B]
    q_index = torch.where(q_valid, starts[:, None] + new[None, :], 0)  # [B, Q]
    out_index = torch.nonzero(q_valid.reshape(-1)).reshape(-1)  # [sum n]

    key = torch.arange(max_kv)  # [K_pages]
    key_valid = key[None, :] < kv_len[:, None]  # [B, K_pages]
    key_slots = torch.where(key_valid, _slots(tables, key.expand(batch_size, -1), size), 0)  # [B, K_pages]
    key_pos = key.expand(batch_size, -1)  # [B, K_pages]
    if not batch.write:
        key_valid = torch.cat([key_valid, q_valid], dim=1)  # [B, K_pages + Q]
        key_pos = torch.cat([key_pos, q_pos], dim=1)  # [B, K_pages + Q]
    write_slots = _slots(tables, q_pos, size)[q_valid] if batch.write else torch.empty(0, dtype=torch.int64)

    allowed = key_valid[:, None, :].expand(-1, max_q, -1)  # [B, Q, K]
    if batch.mode == "causal":
        allowed = allowed & (key_pos[:, None, :] <= q_pos[:, :, None])  # [B, Q, K]
    allowed = allowed | ~q_valid[:, :, None]  # padded query rows attend to everything (and are dropped)
    mask = None if bool(allowed.all()) else allowed[:, None].to(device)  # [B, 1, Q, K]
    fresh = _runs(batch.q_lengths) if (batch.write and batch.mode == "causal" and not any(batch.cached_lengths)) \
        else ()
    return TorchPlan(batch.write, write_slots.to(device), key_slots.to(device), q_index.to(device),
                     out_index.to(device), mask, fresh=fresh)


def plan_decode(batch: AttentionBatch, device: torch.device | str = "cpu") -> TorchPlan:
    """`plan_torch` of a decode step (every sequence one new token, written), in a dozen tensor ops
    instead of forty (half the host time, measured): a token attends to every key of its row
    (causal and prefix agree), the query and output rows are the packed ones, and each row's key
    slots are its pages' consecutive slots, those past its length masked. The same fields as the
    general plan (tests/engines/test_cpu_fast_paths.py holds them equal)."""
    size = batch.page_size
    lengths = [c + 1 for c in batch.cached_lengths]  # keys per row, the new one included
    width = max(lengths)  # K
    pages = -(-width // size)
    rows = len(lengths)
    table = torch.tensor([[*t[:pages], *[0] * (pages - len(t[:pages]))] for t in batch.page_tables],
                         dtype=torch.int64)  # [B, P]
    slots = (table[:, :, None] * size + torch.arange(size)).reshape(rows, -1)  # [B, P * size]
    kv_len = torch.tensor(lengths, dtype=torch.int64)  # [B]
    valid = torch.arange(pages * size)[None, :] < kv_len[:, None]  # [B, P * size]
    key_slots = slots[:, :width].masked_fill(~valid[:, :width], 0)  # [B, K]
    write_slots = slots.gather(1, (kv_len - 1)[:, None])[:, 0]  # [B]
    order = torch.arange(rows)  # [B]
    mask = None if min(lengths) == width else valid[:, None, None, :width].to(device)  # [B, 1, 1, K]
    key_slots = key_slots.to(device)
    return TorchPlan(True, write_slots.to(device), key_slots, order[:, None].to(device),
                     order.to(device), mask, decode=True, key_rows=key_slots.reshape(-1))


def _runs(lengths: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """Consecutive equal lengths as (how many, length): [5, 5, 7] -> ((2, 5), (1, 7))."""
    runs: list[list[int]] = []
    for n in lengths:
        if runs and runs[-1][1] == n:
            runs[-1][0] += 1
        else:
            runs.append([1, n])
    return tuple((count, n) for count, n in runs)


def _pad_tables(tables: Sequence[Sequence[int]]) -> Tensor:
    width = max(1, max((len(t) for t in tables), default=0))
    return torch.tensor([[*t, *[0] * (width - len(t))] for t in tables], dtype=torch.int64)  # [B, P]


def _slots(tables: Tensor, positions: Tensor, page_size: int) -> Tensor:
    """Flat slot of each position: page_table[p // page_size] * page_size + p % page_size."""
    page_col = (positions // page_size).clamp(max=tables.shape[1] - 1)  # [B, X]
    return tables.gather(1, page_col) * page_size + positions % page_size  # [B, X]


def write_kv(k_pages: Tensor, v_pages: Tensor, k: Tensor, v: Tensor, slots: Tensor) -> None:
    """Scatter new keys/values k, v: [N, kv_heads, head_dim] into the pages at flat slots [N]."""
    kv_heads, head_dim = k_pages.shape[2:]
    if k.dtype != k_pages.dtype:  # a cast only when needed: a decode step writes every layer (one dispatch each)
        k, v = k.to(k_pages.dtype), v.to(v_pages.dtype)
    k_pages.view(-1, kv_heads, head_dim).index_copy_(0, slots, k)  # [pages * size, kvh, d]
    v_pages.view(-1, kv_heads, head_dim).index_copy_(0, slots, v)  # [pages * size, kvh, d]


def run_torch(plan: TorchPlan, q: Tensor, k_pages: Tensor, v_pages: Tensor,
              k_new: Tensor | None = None, v_new: Tensor | None = None, scale: float | None = None) -> Tensor:
    """Attention of packed q: [sum n, heads, head_dim] over the pages (+ k_new/v_new when not writing)."""
    batch_size, max_q = plan.q_index.shape
    heads, head_dim = q.shape[1:]
    kv_heads = k_pages.shape[2]
    if plan.decode:
        return _attend_decode(plan, q, k_pages, v_pages, scale)
    keys = _gather(k_pages.view(-1, kv_heads, head_dim), plan.key_slots)  # [B, K_pages, kv_heads, head_dim]
    values = _gather(v_pages.view(-1, kv_heads, v_pages.shape[3]), plan.key_slots)  # [B, K_pages, kv_heads, d]
    if not plan.write:
        if k_new is None or v_new is None:
            raise ValueError("a frozen-prefix step needs the new tokens' k_new and v_new")
        keys = torch.cat([keys, k_new.to(keys.dtype)[plan.q_index]], dim=1)  # [B, K_pages + Q, kv_heads, head_dim]
        values = torch.cat([values, v_new.to(values.dtype)[plan.q_index]], dim=1)  # [B, K_pages + Q, kv_heads, d]
    padded = q[plan.q_index].transpose(1, 2)  # [B, heads, Q, head_dim]
    out = F.scaled_dot_product_attention(
        padded, keys.transpose(1, 2).to(q.dtype), values.transpose(1, 2).to(q.dtype),
        attn_mask=plan.mask, scale=scale, enable_gqa=heads != kv_heads,
    )  # [B, heads, Q, head_dim]
    return out.transpose(1, 2).reshape(batch_size * max_q, heads, -1)[plan.out_index]  # [sum n, heads, head_dim]


def attend_fresh(n: int, q: Tensor, k: Tensor, v: Tensor, scale: float | None = None) -> Tensor:
    """Causal attention of prompts of n tokens each, nothing cached: q [B * n, heads, d] over k, v
    [B * n, kv_heads, d] -> [B * n, heads, d_v], their rows in order.

    A prompt's step otherwise gathers its queries into a padded [B, Q] layout, its keys and values
    back out of the pages just written, and scatters the output back: here the rows are already in
    that layout (a view), and SDPA's own causal mask replaces the explicit one, skipping the blocks
    above the diagonal. Bitwise the general path's result (tests/engines/test_attention.py); one
    prompt of 700 tokens (8 heads, 64 dims): 6.5 against 9.2 ms of SDPA, an Intel Xeon."""
    rows, heads, _ = q.shape
    batch_size = rows // n
    out = F.scaled_dot_product_attention(
        q.unflatten(0, (batch_size, n)).transpose(1, 2), k.unflatten(0, (batch_size, n)).transpose(1, 2),
        v.unflatten(0, (batch_size, n)).transpose(1, 2), is_causal=True, scale=scale,
        enable_gqa=heads != k.shape[1],
    )  # [B, heads, n, d_v]
    return out.transpose(1, 2).reshape(rows, heads, -1)  # [B * n, heads, d_v]


def attend_prompts(runs: tuple[tuple[int, int], ...], q: Tensor, k: Tensor, v: Tensor, scale: float | None = None
                   ) -> Tensor:
    """Whole prompts, nothing cached (TorchPlan.fresh): each run of prompts of one length attends on its
    own rows (attend_fresh), [sum n, heads, d] -> [sum n, heads, d_v]. Prompts of other lengths share no
    padded batch, whose masked padding would give a prompt other bits than it has alone (~3e-7 on the
    tiny Llama's logits): a prompt's attention is then the same whatever is prefilled beside it."""
    if len(runs) == 1:
        return attend_fresh(runs[0][1], q, k, v, scale)
    out, start = [], 0
    for count, n in runs:
        end = start + count * n
        out.append(attend_fresh(n, q[start:end], k[start:end], v[start:end], scale))  # [count * n, heads, d_v]
        start = end
    return torch.cat(out)


def _gather(rows: Tensor, index: Tensor) -> Tensor:
    """rows[index] for index [B, X] over the first axis: index_select copies whole rows (3.5x faster on
    CPU than advanced indexing's element-wise kernel, measured on a decode batch's pages)."""
    return rows.index_select(0, index.reshape(-1)).view(*index.shape, *rows.shape[1:])  # [B, X, ...]


def _attend_decode(plan: TorchPlan, q: Tensor, k_pages: Tensor, v_pages: Tensor, scale: float | None) -> Tensor:
    """A decode step's attention: no query gather or output scatter (both the identity), and grouped
    queries laid out as their kv head's rows (q [B, kv_heads, group, d] against keys [B, kv_heads,
    K, d]: query head h reads kv head h // group, SDPA's enable_gqa pairing) so no key is repeated.
    (Gathering whole pages instead of slots was tried: no faster, and it reads the last page's padding;
    so was gathering head-major rows of head_dim into buffers kept across layers, for a contiguous
    [B, kv_heads, K, d]: no faster in the decode step, though faster alone.)
    Every layer of every step runs this, so it issues as few operators as it can: the flat key
    slots come with the plan, each gathered [B * K, kv_heads, d] is seen as [B, kv_heads, K, d] by one
    as_strided (not a view and a transpose), and nothing is cast that already has q's dtype."""
    batch_size, heads, head_dim = q.shape
    kv_heads = k_pages.shape[2]
    rows = plan.key_rows if plan.key_rows is not None else plan.key_slots.reshape(-1)  # [B * K]
    keys = _gather_heads(k_pages, rows, batch_size)  # [B, kv_heads, K, d]
    values = _gather_heads(v_pages, rows, batch_size)  # [B, kv_heads, K, d_v]
    if keys.dtype != q.dtype:
        keys, values = keys.to(q.dtype), values.to(q.dtype)
    grouped = q.reshape(batch_size, kv_heads, heads // kv_heads, head_dim)  # [B, kv_heads, group, d]
    out = F.scaled_dot_product_attention(grouped, keys, values, attn_mask=plan.mask, scale=scale)  # [B, kvh, g, d_v]
    return out.view(batch_size, heads, -1)  # [B, heads, d_v]


def _gather_heads(pages: Tensor, rows: Tensor, batch_size: int) -> Tensor:
    """pages [num_pages, page_size, kv_heads, d] at flat slots `rows` [B * K] -> [B, kv_heads, K, d], a
    strided view of the one gathered [B * K, kv_heads, d] tensor."""
    kv_heads, dim = pages.shape[2:]
    width = rows.shape[0] // batch_size
    gathered = pages.view(-1, kv_heads, dim).index_select(0, rows)  # [B * K, kv_heads, d]
    return gathered.as_strided((batch_size, kv_heads, width, dim), (width * kv_heads * dim, dim, kv_heads * dim, 1))


def paged_attention(q: Tensor, k_pages: Tensor, v_pages: Tensor, page_tables: Sequence[Sequence[int]],
                    kv_lengths: Sequence[int], q_lengths: Sequence[int], mode: Mode = "causal",
                    k_new: Tensor | None = None, v_new: Tensor | None = None, scale: float | None = None) -> Tensor:
    """One-shot paged attention; kv_lengths counts the tokens in the pages (new ones included if written).

    Without k_new/v_new the last q_lengths[b] tokens in the pages are the new ones. With them, the
    pages are a read-only prefix of kv_lengths[b] tokens and the new tokens' keys follow it.
    """
    frozen = k_new is not None
    cached = list(kv_lengths) if frozen else [t - n for t, n in zip(kv_lengths, q_lengths)]
    batch = AttentionBatch(page_tables, cached, q_lengths, k_pages.shape[1], mode, write=not frozen)
    return run_torch(plan_torch(batch, q.device), q, k_pages, v_pages, k_new, v_new, scale)


def dense_attention(q: Tensor, k: Tensor, v: Tensor, mode: Mode = "causal", scale: float | None = None) -> Tensor:
    """Attention without a cache: q [B, T, heads, d], k, v [B, T, kv_heads, d] -> [B, T, heads, d]."""
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
        is_causal=mode == "causal", scale=scale, enable_gqa=q.shape[2] != k.shape[2],
    )  # [B, heads, T, d]
    return out.transpose(1, 2)  # [B, T, heads, d]


class TorchAttention:
    """The pure-torch backend: plan = index tensors; attend = write (unless frozen), gather, SDPA.

    A plan is immutable tensors, so any number may be kept; `plan_async` plans on one side thread
    (started on first use), on CUDA under the stream current when it is called (the one that uses it).
    """

    def __init__(self, device: torch.device | str = "cpu", scale: float | None = None, fast_decode: bool = True) -> None:
        self.device = torch.device(device)
        self.scale = scale
        self.fast_decode = fast_decode  # decode steps planned by plan_decode (False: the general plan)
        self._planner: ThreadPoolExecutor | None = None

    def plan(self, batch: AttentionBatch) -> TorchPlan:
        return plan_torch(batch, self.device, self.fast_decode)

    def plan_async(self, batch: AttentionBatch) -> Future[TorchPlan]:
        """`plan` on the side thread (plan_ahead.py calls it once step N's forward has been issued)."""
        if self._planner is None:
            self._planner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wgc-attention-plan")
        if self.device.type == "cuda":
            return self._planner.submit(self._plan_on, torch.cuda.current_stream(self.device), batch)
        return self._planner.submit(self.plan, batch)

    def _plan_on(self, stream: torch.cuda.Stream, batch: AttentionBatch) -> TorchPlan:
        with torch.cuda.stream(stream):
            return self.plan(batch)

    def close(self) -> None:
        if self._planner is not None:
            self._planner.shutdown(wait=True)
            self._planner = None

    def attend(self, plan: TorchPlan, q: Tensor, k: Tensor, v: Tensor, k_pages: Tensor, v_pages: Tensor) -> Tensor:
        if plan.write:
            write_kv(k_pages, v_pages, k, v, plan.write_slots)
            if plan.fresh and k.dtype == k_pages.dtype == q.dtype:  # the pages hold k and v as they are
                return attend_prompts(plan.fresh, q, k, v, self.scale)
            return run_torch(plan, q, k_pages, v_pages, scale=self.scale)
        return run_torch(plan, q, k_pages, v_pages, k, v, scale=self.scale)


def attention_backend(device: torch.device | str, heads: int, kv_heads: int, head_dim: int, page_size: int,
                      dtype: torch.dtype = torch.float16, prefer_flashinfer: bool = True) -> AttentionBackend:
    """FlashInfer on a CUDA device when it is installed and wanted; the torch path otherwise."""
    device = torch.device(device)
    if device.type == "cuda" and prefer_flashinfer:
        from wgc.runtime.engines.attention_cuda import FlashInferAttention, flashinfer_available

        if flashinfer_available():
            return FlashInferAttention(device, heads, kv_heads, head_dim, page_size, dtype)
    return TorchAttention(device)
