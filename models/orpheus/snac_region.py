"""SNAC's decoder computed over one interval of its output only: the kept frame of a window.

A window of 4 frames decodes to 4 frames of samples, of which the component keeps one. Almost all
of the decoder's work is at the finest time resolution, after the last upsampling, where each
output sample depends only on a few dozen samples around it. So instead of decoding the whole
window and slicing, this module walks SNAC's decoder back from the wanted output interval to the
interval each layer's input must cover (its receptive field, clipped to the signal), then runs
every layer forward over just that interval. Where the interval reaches past the signal's ends
it pads with zeros, exactly as the layer's own padding does in the full decode, so the result
equals the full decode's slice (to f32 rounding: the products are the same, summed in another
order by other kernel shapes) — tests/models/orpheus/test_snac_region.py checks it against the
`snac` package.

Supported layers: stride-1 `Conv1d` and `ConvTranspose1d` (zero padding), SNAC's `ResidualUnit`
of equal input and output length, and the layers that act on each time step alone (`Snake1d`,
`Tanh`, `NoiseBlock`: its noise is drawn for the computed interval only, the same distribution
as the full decode's). Anything else (`LocalMHA`, a config with attention) raises
`RegionUnsupported`, and the codec falls back to decoding whole windows.

The weights are SNAC's own modules' (weight norm folded); convolutions go through
`torch.nn.functional` with padding 0 on explicitly padded inputs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from snac.layers import NoiseBlock, ResidualUnit, Snake1d
from torch import Tensor, nn

Interval = tuple[int, int]  # [start, end) in time steps of one layer's signal


class RegionUnsupported(ValueError):
    """The decoder holds a layer whose dependence on time this module does not model."""


def _children(module: nn.Module) -> list[nn.Module] | None:
    """The layers in order of a container (SNAC's Decoder, DecoderBlock, Sequential), else None."""
    if isinstance(module, nn.Sequential):
        return list(module)
    for name in ("model", "block"):  # snac.layers.Decoder.model, DecoderBlock.block
        inner = getattr(module, name, None)
        if isinstance(inner, nn.Sequential) and not isinstance(module, ResidualUnit):
            return list(inner)
    return None


def _pointwise(module: nn.Module) -> bool:
    return isinstance(module, (Snake1d, nn.Tanh, nn.Identity, NoiseBlock))


def _conv_geometry(conv: nn.Conv1d | nn.ConvTranspose1d) -> tuple[int, int, int, int]:
    """kernel, stride, padding, dilation of a zero-padded 1-D convolution."""
    if conv.padding_mode != "zeros" or isinstance(conv.padding, str):
        raise RegionUnsupported(f"{type(conv).__name__} with padding {conv.padding!r}/{conv.padding_mode}")
    return conv.kernel_size[0], conv.stride[0], conv.padding[0], conv.dilation[0]


def out_length(module: nn.Module, length: int) -> int:
    """Time steps of `module`'s output for an input of `length` steps."""
    layers = _children(module)
    if layers is not None:
        for layer in layers:
            length = out_length(layer, length)
        return length
    if _pointwise(module):
        return length
    if isinstance(module, ResidualUnit):
        if out_length(module.block, length) != length:
            raise RegionUnsupported("a ResidualUnit that crops its input")
        return length
    if isinstance(module, nn.ConvTranspose1d):
        k, s, p, d = _conv_geometry(module)
        if d != 1:
            raise RegionUnsupported("a dilated ConvTranspose1d")
        return (length - 1) * s - 2 * p + (k - 1) + module.output_padding[0] + 1
    if isinstance(module, nn.Conv1d):
        k, s, p, d = _conv_geometry(module)
        if s != 1:
            raise RegionUnsupported("a strided Conv1d")
        return length + 2 * p - d * (k - 1)
    raise RegionUnsupported(f"no region rule for {type(module).__name__}")


def needed(module: nn.Module, length: int, want: Interval) -> Interval:
    """The interval of `module`'s input (of `length` steps) that its output over `want` reads,
    clipped to [0, length): outside it the full decode reads zero padding."""
    a, b = want
    layers = _children(module)
    if layers is not None:
        lengths = _lengths(layers, length)
        for layer, size in zip(reversed(layers), reversed(lengths[:-1]), strict=True):
            a, b = needed(layer, size, (a, b))
        return a, b
    if _pointwise(module):
        return a, b
    if isinstance(module, ResidualUnit):
        c, d = needed(module.block, length, want)
        return min(a, c), max(b, d)
    if isinstance(module, nn.ConvTranspose1d):
        k, s, p, _ = _conv_geometry(module)
        return max(0, -((k - 1 - a - p) // s)), min(length, (b - 1 + p) // s + 1)
    if isinstance(module, nn.Conv1d):
        k, _, p, dil = _conv_geometry(module)
        return max(0, a - p), min(length, b - p + dil * (k - 1))
    raise RegionUnsupported(f"no region rule for {type(module).__name__}")


def _lengths(layers: list[nn.Module], length: int) -> list[int]:
    sizes = [length]
    for layer in layers:
        sizes.append(out_length(layer, sizes[-1]))
    return sizes


Step = Callable[[Tensor], Tensor]


def build(module: nn.Module, length: int, want: Interval) -> Step:
    """A function from `module`'s input over needed(module, length, want) to its output over
    `want` ([B, C, b - a]); every interval and padding is worked out here, once, not per call."""
    layers = _children(module)
    if layers is not None:
        return _chain(layers, length, want)
    if isinstance(module, Snake1d):
        return _snake(module.alpha.detach())
    if _pointwise(module):
        return module
    if isinstance(module, ResidualUnit):
        start = needed(module, length, want)[0]
        c, d = needed(module.block, length, want)
        block = build(module.block, length, want)
        inner, keep = slice(c - start, d - start), slice(want[0] - start, want[1] - start)
        return lambda x: x[..., keep] + block(x[..., inner])
    if isinstance(module, nn.ConvTranspose1d):
        return _transposed(module, length, want)
    if isinstance(module, nn.Conv1d):
        return _conv(module, length, want)
    raise RegionUnsupported(f"no region rule for {type(module).__name__}")


def _snake(alpha: Tensor) -> Step:
    """SNAC's x + sin²(αx) / (α + 1e-9), the same operations in place on one temporary (the
    package's scripted version allocates five; ~15% faster, the same bits)."""
    inverse = (alpha + 1e-9).reciprocal()

    def snake(x: Tensor) -> Tensor:
        y = torch.mul(x, alpha)
        y.sin_().square_().mul_(inverse)
        return y.add_(x)

    return snake


def _chain(layers: list[nn.Module], length: int, want: Interval) -> Step:
    lengths = _lengths(layers, length)
    wants = [want]
    for layer, size in zip(reversed(layers[1:]), reversed(lengths[1:-1]), strict=True):
        wants.append(needed(layer, size, wants[-1]))
    steps = [build(layer, size, target) for layer, size, target in zip(layers, lengths[:-1], reversed(wants),
                                                                        strict=True)]

    def chained(x: Tensor) -> Tensor:
        for step in steps:
            x = step(x)
        return x

    return chained


def _conv(conv: nn.Conv1d, length: int, want: Interval) -> Step:
    k, _, p, dil = _conv_geometry(conv)
    a, b = want
    first, last = a - p, b - p + dil * (k - 1)  # the unclipped input interval
    c, d = max(0, first), min(length, last)
    pad = (c - first, last - d)  # the zeros the full decode's padding reads
    weight, bias, groups = conv.weight, conv.bias, conv.groups
    if k == 1 and groups == 1:
        # oneDNN's 1x1 convolution over SNAC's few channels is ~3x slower than a matrix product
        # from batch 4 on (and a few microseconds faster at batch 1)
        matrix = weight[:, :, 0]
        column = None if bias is None else bias[:, None]
        return lambda x: torch.matmul(matrix, x) if column is None else torch.matmul(matrix, x) + column

    def convolve(x: Tensor) -> Tensor:
        if pad != (0, 0):
            x = F.pad(x, pad)
        return F.conv1d(x, weight, bias, 1, 0, dil, groups)

    return convolve


def _transposed(conv: nn.ConvTranspose1d, length: int, want: Interval) -> Step:
    k, s, p, _ = _conv_geometry(conv)
    start = needed(conv, length, want)[0]
    # z[u] is output step u + start * s - p of the full layer: every input that reaches it is in x
    lo, hi = want[0] - start * s + p, want[1] - start * s + p
    steps = needed(conv, length, want)[1] - start
    if lo < 0 or hi > (steps - 1) * s + k:
        raise RegionUnsupported(f"ConvTranspose1d geometry {conv} leaves {want} uncovered")
    weight, bias, groups = conv.weight, conv.bias, conv.groups
    if groups == 1 and k % s == 0:
        return lambda x: _overlap_add(x, weight, bias, s)[..., lo:hi]
    return lambda x: F.conv_transpose1d(x, weight, bias, s, 0, 0, groups, 1)[..., lo:hi]


def _overlap_add(x: Tensor, weight: Tensor, bias: Tensor | None, stride: int) -> Tensor:
    """conv_transpose1d (padding 0) for a kernel of q whole strides: one matrix product gives each
    input step's kernel-long output piece, and the pieces are added q strides apart. oneDNN's
    kernel is 2-20x slower on CPU for SNAC's shapes (few steps, a long kernel)."""
    batch, cin, steps = x.shape
    cout, q = weight.shape[1], weight.shape[-1] // stride
    pieces = torch.matmul(x.transpose(1, 2), weight.reshape(cin, -1))  # [B, n, cout * q * s]
    pieces = pieces.reshape(batch, steps, cout, q, stride)
    out = x.new_zeros(batch, steps + q - 1, cout, stride)
    for h in range(q):
        out[:, h:h + steps] += pieces[:, :, :, h]
    out = out.permute(0, 2, 1, 3).reshape(batch, cout, (steps + q - 1) * stride)
    return out if bias is None else out + bias[:, None]


def region_decoder(decoder: nn.Module, length: int, want: Interval) -> Callable[[Tensor], Tensor]:
    """A function of the decoder's input [B, C, length] giving its output over `want`. Checks the
    geometry once (raises RegionUnsupported) so that a call never meets an unsupported layer."""
    total = out_length(decoder, length)
    if not 0 <= want[0] < want[1] <= total:
        raise ValueError(f"interval {want} is outside the decoder's {total} output steps")
    lo, hi = needed(decoder, length, want)
    step = build(decoder, length, want)

    def decode(latent: Tensor) -> Tensor:
        if latent.shape[-1] != length:
            raise ValueError(f"the region decoder was built for {length} latent steps, got {latent.shape[-1]}")
        with torch.no_grad():
            return step(latent[..., lo:hi])

    return decode
