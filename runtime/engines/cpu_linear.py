"""The CPU decode step's matrix products through oneDNN over weights packed once, not MKL's sgemm.

Why: profiling a decode step on CPU (torch.profiler, one thread, `bench/engine_speed.py --profile`)
puts 82-85% of the 34M-parameter shape's time in `aten::mm`, and on an AVX-512 host (AMD EPYC) MKL's
sgemm for the few rows of a decode batch runs at 40-70 GFLOP/s. oneDNN's `mkldnn._linear_pointwise`
over a weight reordered once into its blocked layout (`mkldnn._reorder_linear_weight`) does the same
product 2-2.7x faster there at 3..64 rows and as fast at one row; on an AVX2-only host (Zen 3) ~1.2x
at 8 rows and 0.9-1.0x at one. It is the kernel vLLM's CPU build uses too (`_C.onednn_mm`, packed
for 32 rows: the same brgemm kernel and weight layout, bitwise the same outputs;
bench/peer/step_floor.py). It is also batch-invariant from two rows on: a row's result is bitwise the
same at any count (MKL's is not at a few rows: see the padding below), which keeps a request's tokens
the same whatever it is batched with. At one row some shapes take another kernel (the 34M Llama's
[512, 1536] down projection on an AMD EPYC gave a row alone other bits than in any batch; its other
products did not), so the packed path pads the counts `pad_step` finds computed otherwise, as
below. On small weights (the 0.7M shape's 128 x 256) oneDNN's fixed cost of about 10 us is more
than the product: those keep `F.linear`, but at a forward's prompt rows, where oneDNN is the
faster (prompt_rows.py: `small_linear`).

`pack_linears(model)` gives every `nn.Linear` of a model (and any module whose class sets
`packs_weight`, as the shared `LMHead` does, calling `linear` with its `packed`) this forward, and a
module whose class sets `fuses_projections` a `FusedWeight` (`fused`) for its projections of one input;
a kv component calls it once for its model on CPU (`KVComponent.use_graphs`). What it keeps:
- the module's own `weight` and `bias` Parameters, untouched: state dicts, loaders, `.to()` and
  tied weights see no difference;
- one packed copy of the weight per module (memory: the weights once more), made on first use and
  made again whenever the weight changed since (another tensor, or the same one written in place:
  keyed on its storage pointer and its version counter), so a weight loaded after packing is used;
- `F.linear` whenever the packed path does not apply: autograd wanted, not float32 on CPU, a
  weight under `MIN_PACKED_WEIGHT` elements, or oneDNN missing from this torch build. For a small
  weight on CPU (MKL's sgemm) a product of fewer than `PAD_BELOW` rows is padded with zero
  rows to the next multiple of a step found for the shape: which rows MKL computes alike depends
  on the host. On an AMD EPYC
  (AVX-512) a row's bits were the same at any count from 4 on at one thread, but not at 1 (a gemv)
  or 2-3 rows, and at two threads not at 5-7 or 9-11 rows either, so padding to a multiple of 4
  sufficed there; on an Intel Xeon with AMX they differed at 1-5 rows (128 inputs) and 1-10 (256)
  against any larger count, multiples of 4 included (tests/engines/test_cpu_fast_paths.py caught it
  on that host), while padded to 16 rows every count from 1 to 299 agreed at one and two threads.
  Padding every host to 16 cost the 0.7M shape 8% at one row on the Intel host (a 16-row product
  for each of its small products), so the step is found per shape and thread count on first use
  (`pad_step`: 4, 8 or 16, the smallest at which every count below 16 agrees with a 48-row product
  on random values, about a millisecond once). Without it a request's tokens could change with
  what it is batched with (a decode row alone, or beside other rows and a prompt's chunk in one
  mixed forward). More cores may split rows otherwise: unverified.
Results are float32 products summed in another order than MKL's: equal to rounding (the parity
tests' tolerances), the same greedy tokens. WGC_CPU_PACKED_LINEAR=0 turns it off (the bench's
baseline).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from wgc.runtime.engines import prompt_rows

from wgc import settings

MIN_PACKED_WEIGHT = 1 << 16  # elements: below, oneDNN's fixed cost exceeds what it saves (128 x 256 at 1-32 rows)
PACK_ROWS_HINT = 32  # the rows oneDNN is told to expect when it reorders: fast from 1 to 64 rows (measured)
PAD_BELOW = 16  # products of fewer rows may be padded (pad_step; see the docstring)


class PackedWeight:
    """One module's packed copy of its weight, and what it was packed from."""

    __slots__ = ("key", "tensor")

    def __init__(self) -> None:
        self.key: tuple[int, int] | None = None
        self.tensor: Tensor | None = None

    def get(self, weight: Tensor) -> Tensor:
        key = (weight.data_ptr(), weight._version)
        if self.key != key or self.tensor is None:
            self.tensor = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACK_ROWS_HINT)
            self.key = key
        return self.tensor

    def __deepcopy__(self, memo: dict[int, Any]) -> PackedWeight:
        return PackedWeight()  # a copied module packs its own weight (a oneDNN tensor does not copy)


def packed_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


def linear(x: Tensor, weight: Tensor, bias: Tensor | None, packed: PackedWeight | None) -> Tensor:
    """x @ weight.T + bias: through the packed weight when it applies, else batch-invariant MKL on CPU
    (see the module docstring)."""
    if (x.dtype != torch.float32 or weight.dtype != torch.float32 or not x.is_cpu
            or (torch.is_grad_enabled() and (weight.requires_grad or x.requires_grad))):
        return F.linear(x, weight, bias)
    if packed is None or weight.numel() < MIN_PACKED_WEIGHT:
        return small_linear(x, weight, bias, packed)
    return packed_linear(x, weight, bias, packed)


def small_linear(x: Tensor, weight: Tensor, bias: Tensor | None, packed: PackedWeight | None) -> Tensor:
    """A small weight's product (float32 on CPU): MKL, batch-invariant (`invariant_linear`), except at the
    prompt rows of the forward running (prompt_rows.py), which take oneDNN over `packed`."""
    split = prompt_rows.current()
    width = x.shape[-1]
    if split is None or packed is None or x.numel() != split.rows * width:  # packed: oneDNN is there
        return invariant_linear(x, weight, bias)
    flat = x.reshape(split.rows, width)  # [rows, in]
    if split.other is None:
        return _unflat(packed_linear(flat, weight, bias, packed), x)
    out = flat.new_empty(split.rows, weight.shape[0])  # [rows, out]
    out[split.prompt] = packed_linear(flat[split.prompt], weight, bias, packed)
    out[split.other] = invariant_linear(flat[split.other], weight, bias)
    return _unflat(out, x)


def packed_linear(x: Tensor, weight: Tensor, bias: Tensor | None, packed: PackedWeight) -> Tensor:
    """oneDNN over the packed weight. Its rows are the same at any count from 2 on, but for some shapes
    not at one row (the 34M Llama's down projection, [512, 1536], on an AMD EPYC: another kernel), so
    a count `pad_step` finds computed otherwise is padded like MKL's (one zero row, ~2 us of a ~100 us
    product)."""
    x = x.contiguous()
    width = x.shape[-1]
    rows = x.numel() // width if width else 0
    pad = -rows % pad_step(weight.shape[0], width, bias is not None, x.dtype, packed=True) \
        if 0 < rows < PAD_BELOW else 0
    if pad == 0:
        return _onednn(x, packed.get(weight), bias)
    out = _onednn(_pad_rows(x, rows, pad), packed.get(weight), bias)[:rows]  # [rows, out]
    return _unflat(out, x)


def _onednn(x: Tensor, packed: Tensor, bias: Tensor | None) -> Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


_ZERO_ROWS: dict[tuple[int, int, torch.dtype], Tensor] = {}  # (rows, width, dtype) -> zeros, never written


def _zero_rows(rows: int, width: int, dtype: torch.dtype) -> Tensor:
    key = (rows, width, dtype)
    zeros = _ZERO_ROWS.get(key)
    if zeros is None:
        zeros = _ZERO_ROWS[key] = torch.zeros(rows, width, dtype=dtype)  # [rows, width] on CPU
    return zeros


def invariant_linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """F.linear on CPU over a row count MKL gives each row the same bits at (zero rows added below
    PAD_BELOW to the next multiple of this shape's `pad_step`, their outputs dropped). The
    padding is one `cat` with zero rows made once (F.pad was three kernels and an allocation: ~2 us
    of a ~9 us one-row product), and without a bias the product is F.linear's own `mm` over the
    transposed view."""
    width = x.shape[-1]
    rows = x.numel() // width if width else 0
    if rows >= PAD_BELOW or rows == 0:
        return F.linear(x, weight, bias)
    pad = -rows % pad_step(weight.shape[0], width, bias is not None, x.dtype)
    if pad == 0:
        return F.linear(x, weight, bias)
    return _padded_linear(x, weight, bias, rows, pad)


def _padded_linear(x: Tensor, weight: Tensor, bias: Tensor | None, rows: int, pad: int) -> Tensor:
    padded = _pad_rows(x, rows, pad)  # [rows + pad, in]
    out = (torch.mm(padded, weight.t()) if bias is None else F.linear(padded, weight, bias))[:rows]  # [rows, out]
    return _unflat(out, x)


def _pad_rows(x: Tensor, rows: int, pad: int) -> Tensor:
    """x's rows as [rows, in] and `pad` zero rows after them: [rows + pad, in]."""
    width = x.shape[-1]
    flat = x if x.dim() == 2 else x.reshape(rows, width)  # [rows, in]: the decode step's is already
    return torch.cat((flat, _zero_rows(pad, width, x.dtype)))


def _unflat(out: Tensor, x: Tensor) -> Tensor:
    """A product's [rows, out] in x's leading shape: [..., out]."""
    return out if x.dim() == 2 else out.reshape(*x.shape[:-1], out.shape[-1])


PAD_STEPS = (1, 2, 4, 8, PAD_BELOW)  # tried in turn; the last pads every small product to PAD_BELOW rows
_PROBE_ROWS = 48
_PAD_STEP: dict[tuple[int, int, bool, torch.dtype, int, bool], int] = {}  # (out, in, bias, dtype, threads, packed)


def pad_step(out_features: int, in_features: int, has_bias: bool, dtype: torch.dtype, packed: bool = False) -> int:
    """The smallest step of PAD_STEPS at which this host's kernel (MKL's sgemm, or oneDNN's over a
    packed weight) gives every row of a product of this shape the bits it has in a larger one, found
    once per shape and thread count by trying it on random values (which rows agree depends on the
    host's kernels, not on the values: the module docstring). A small product is padded to the next
    multiple of it; 1: never."""
    key = (out_features, in_features, has_bias, dtype, torch.get_num_threads(), packed)
    step = _PAD_STEP.get(key)
    if step is None:
        step = _PAD_STEP[key] = _probe_pad_step(out_features, in_features, has_bias, dtype, packed)
    return step


def _probe_pad_step(out_features: int, in_features: int, has_bias: bool, dtype: torch.dtype, packed: bool) -> int:
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(out_features, in_features, generator=g).to(dtype)
    bias = torch.randn(out_features, generator=g).to(dtype) if has_bias else None
    x = torch.randn(_PROBE_ROWS, in_features, generator=g).to(dtype)
    with torch.no_grad():
        if packed:
            weights = torch.ops.mkldnn._reorder_linear_weight(weight, PACK_ROWS_HINT)
            full = _onednn(x, weights, bias)  # [_PROBE_ROWS, out]: a count computed like any larger one

            def product(r: int, pad: int) -> Tensor:  # packed_linear's own calls
                return _onednn(_pad_rows(x[:r], r, pad), weights, bias)[:r] if pad else _onednn(x[:r], weights, bias)
        else:
            full = F.linear(x, weight, bias)

            def product(r: int, pad: int) -> Tensor:  # invariant_linear's own calls
                return _padded_linear(x[:r], weight, bias, r, pad) if pad else F.linear(x[:r], weight, bias)
        for step in PAD_STEPS[:-1]:
            if all(torch.equal(product(r, -r % step), full[:r]) for r in range(1, PAD_BELOW)):
                return step
    return PAD_STEPS[-1]


class FusedWeight:
    """Several projections of one input as one product: their weights (and biases) concatenated along
    the output axis, made on first use and again whenever one of them changed (keyed like
    PackedWeight). A module that sets `fuses_projections` gets one per group from `pack_linears`
    (SelfAttention: q/k/v; SwiGLU: gate/up, its `fusable_parts()`). The fused product takes the path
    its parts would: packed through oneDNN when every part is at least MIN_PACKED_WEIGHT (`packs`),
    else F.linear (MKL) over the concatenation. One call instead of three (two) saves their fixed
    cost: ~10 us each on oneDNN (the 34M shape: 1.5-6% of a decode step), ~1-2 us each on MKL, where
    the 0.7M shape's gate/up as one [512, 128] product ran 5.2 us against 2 x 3.4 at one row and
    15.3 against 2 x 8.5 at eight (bench/engine_speed.py's shapes; microbenchmarked, one thread).
    The concatenation must not decide the path: the 0.7M gate/up, 65,536 elements fused, would cross
    the threshold onto oneDNN, 9% slower at one row (measured when fusing was tried that way; again with
    the cheaper padding: 0.87x the step at batch 1, 0.95x at 8, 1.05x at 32)."""

    __slots__ = ("key", "weight", "bias", "packed", "packs")

    def __init__(self, packs: bool = True) -> None:
        self.packs = packs  # every part is packed on its own: the fused product is too
        self.key: tuple[Any, ...] | None = None
        self.weight: Tensor | None = None
        self.bias: Tensor | None = None
        self.packed = PackedWeight()

    def get(self, parts: tuple[nn.Linear, ...]) -> tuple[Tensor, Tensor | None]:
        key = tuple(_part_key(p._parameters) for p in parts)
        if self.key != key or self.weight is None:
            self.weight = torch.cat([p.weight.detach() for p in parts])  # [sum out, in]
            has_bias = [p.bias is not None for p in parts]
            if any(has_bias) and not all(has_bias):
                raise ValueError("fused projections must all have a bias or none")
            self.bias = torch.cat([p.bias.detach() for p in parts]) if all(has_bias) else None  # type: ignore[union-attr]
            self.packed = PackedWeight()  # a new tensor may reuse the old one's address: pack it afresh
            self.key = key
        return self.weight, self.bias

    def __deepcopy__(self, memo: dict[int, Any]) -> FusedWeight:
        return FusedWeight(self.packs)


def _part_key(params: dict[str, Any]) -> tuple[Any, ...]:
    """What identifies a part's weight and bias now: storage and version counter of each. Read from the
    module's `_parameters` (a Module attribute lookup costs ~0.4 us, and a fused product looked up
    six a call: ~5 us of a ~13 us one-row q/k/v product)."""
    weight, bias = params["weight"], params.get("bias")
    return weight.data_ptr(), weight._version, None if bias is None else (bias.data_ptr(), bias._version)


def fused_linear(x: Tensor, parts: tuple[nn.Linear, ...], fused: FusedWeight) -> Tensor:
    """x through every projection of `parts` at once: [..., sum of their out_features], in their order."""
    if torch.is_grad_enabled() and (x.requires_grad or any(p.weight.requires_grad for p in parts)):
        return torch.cat([p(x) for p in parts], dim=-1)  # autograd: the modules' own products
    weight, bias = fused.get(parts)
    if fused.packs:
        return linear(x, weight, bias, fused.packed)
    if x.dtype != torch.float32 or weight.dtype != torch.float32 or not x.is_cpu:
        return F.linear(x, weight, bias)
    return small_linear(x, weight, bias, fused.packed)  # by its parts' size, whatever the concatenation's


class PackedLinear(nn.Linear):
    """nn.Linear whose forward is `linear` over its packed weight (set by `pack_linears`)."""

    packed: PackedWeight

    def forward(self, x: Tensor) -> Tensor:
        params = self._parameters  # not `self.weight`: a Module attribute lookup is ~0.4 us, 16 a step
        return linear(x, params["weight"], params["bias"], self.packed)  # [..., out_features]


def pack_linears(model: nn.Module) -> int:
    """Give every nn.Linear of `model` and its LM head the packed forward; how many modules now have it.
    Nothing when WGC_CPU_PACKED_LINEAR=0 or this torch has no oneDNN."""
    if not settings.cpu_packed_linear() or not packed_available():
        return 0
    count = 0
    for module in model.modules():
        if getattr(type(module), "fuses_projections", False) and not isinstance(getattr(module, "fused", None),
                                                                               FusedWeight):
            packs = all(p.weight.numel() >= MIN_PACKED_WEIGHT for p in module.fusable_parts())
            module.fused = FusedWeight(packs)  # type: ignore[assignment]
        if type(module) is nn.Linear:
            module.__class__ = PackedLinear  # same Parameters, same state dict: only the forward differs
        elif not isinstance(module, PackedLinear) and not getattr(type(module), "packs_weight", False):
            continue
        if not isinstance(getattr(module, "packed", None), PackedWeight):
            module.packed = PackedWeight()  # type: ignore[assignment]
        count += 1
    return count


def warm_packed(model: nn.Module, rows: Iterable[int]) -> int:
    """Pack now every weight `pack_linears` gave the packed forward (fused groups included), and run one
    product of each distinct packed weight shape at each count of `rows`; how many products ran.

    Why: both costs otherwise fall on the first requests. Packing is made on first use (the 34M shape's
    ~117 MB of weights: ~0.3 s, paid by the first prompt), and oneDNN builds a kernel for each (weight
    shape, row count) the first time it sees one (~1 ms each, shared by every weight of that shape:
    five shapes a Llama layer stack, so ~5 ms the first time a decode batch has a new size). A kv
    component calls it at start-up with its decode row counts (KVComponent.warm_up)."""
    shapes: dict[tuple[Any, ...], tuple[Tensor, Tensor | None, PackedWeight]] = {}
    parts: set[int] = set()  # a fused group's parts run only as the group: packing them would cost memory
    for module in model.modules():
        fused = getattr(module, "fused", None)
        if isinstance(fused, FusedWeight):
            group = tuple(module.fusable_parts())  # type: ignore[operator]
            parts.update(id(p) for p in group)
            if fused.packs:
                weight, bias = fused.get(group)
                shapes.setdefault((tuple(weight.shape), bias is not None), (weight, bias, fused.packed))
                fused.packed.get(weight)
    for module in model.modules():
        if id(module) in parts:
            continue
        packed = getattr(module, "packed", None)
        weight = getattr(module, "weight", None)
        if isinstance(packed, PackedWeight) and isinstance(weight, Tensor) and weight.numel() >= MIN_PACKED_WEIGHT:
            bias = getattr(module, "bias", None)
            shapes.setdefault((tuple(weight.shape), bias is not None), (weight, bias, packed))
            packed.get(weight)
    count = 0
    with torch.no_grad():
        for weight, bias, packed in shapes.values():
            for n in rows:
                linear(torch.zeros(n, weight.shape[1], dtype=weight.dtype), weight, bias, packed)
                count += 1
    return count
