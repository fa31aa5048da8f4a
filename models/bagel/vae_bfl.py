"""BFL's names for the FLUX autoencoder (`ae.safetensors`, models-wave2.md §1.9) and their mapping onto
diffusers' `AutoencoderKL`, which vae.py runs.

    bfl_shapes(config)        every tensor BFL's `AutoEncoder` holds for a configuration, by name
    bfl_architecture(found)   ch, ch_mult, num_res_blocks, z_channels read off a file's header
    bfl_mapping(vae, shapes)  BFL name -> the module's parameter name, from diffusers' own
                              `convert_ldm_vae_checkpoint` run on meta tensors (nothing is read)
    load_bfl_state(vae, state)  BFL-named tensors in memory into the module

The mapping is diffusers' conversion applied to shapes alone: the converter renames tensors and
views the 1x1 attention convs as linears, so each converted meta tensor is a source tensor or a view
of one, which names its source. A loader then reads each BFL tensor once, straight into its parameter
(reshaped where the converter took a view).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from wgc.models.weights_io import Found, WeightsError

if TYPE_CHECKING:
    from wgc.models.bagel.vae import VaeConfig

Shapes = dict[str, tuple[int, ...]]


def bfl_shapes(c: VaeConfig) -> Shapes:
    """name -> shape of every tensor in BFL's layout: encoder.down.{l}.block.{b}.*, downsample on all but
    the last level, mid.{block_1,attn_1,block_2}, norm_out, conv_out; the decoder's mirror with
    up.{l}.block.{b} (one block more) and upsample on all but level 0."""
    out: Shapes = {}

    def conv(name: str, c_out: int, c_in: int, k: int = 3) -> None:
        out[f"{name}.weight"], out[f"{name}.bias"] = (c_out, c_in, k, k), (c_out,)

    def norm(name: str, width: int) -> None:
        out[f"{name}.weight"], out[f"{name}.bias"] = (width,), (width,)

    def resnet(name: str, c_in: int, c_out: int) -> None:
        norm(f"{name}.norm1", c_in)
        conv(f"{name}.conv1", c_out, c_in)
        norm(f"{name}.norm2", c_out)
        conv(f"{name}.conv2", c_out, c_out)
        if c_in != c_out:
            conv(f"{name}.nin_shortcut", c_out, c_in, 1)

    def middle(half: str, width: int) -> None:
        resnet(f"{half}.mid.block_1", width, width)
        norm(f"{half}.mid.attn_1.norm", width)
        for proj in ("q", "k", "v", "proj_out"):
            conv(f"{half}.mid.attn_1.{proj}", width, width, 1)
        resnet(f"{half}.mid.block_2", width, width)

    widths = [c.ch * m for m in c.ch_mult]
    top, levels = widths[-1], len(widths)
    conv("encoder.conv_in", c.ch, 3)
    width = c.ch
    for level, w in enumerate(widths):
        for b in range(c.num_res_blocks):
            resnet(f"encoder.down.{level}.block.{b}", width, w)
            width = w
        if level != levels - 1:
            conv(f"encoder.down.{level}.downsample.conv", w, w)
    middle("encoder", top)
    norm("encoder.norm_out", top)
    conv("encoder.conv_out", 2 * c.z_channels, top)
    conv("decoder.conv_in", top, c.z_channels)
    middle("decoder", top)
    width = top
    for level in reversed(range(levels)):
        for b in range(c.num_res_blocks + 1):
            resnet(f"decoder.up.{level}.block.{b}", width, widths[level])
            width = widths[level]
        if level != 0:
            conv(f"decoder.up.{level}.upsample.conv", width, width)
    norm("decoder.norm_out", widths[0])
    conv("decoder.conv_out", 3, widths[0])
    return out


def bfl_architecture(found: Found, where: object) -> dict[str, Any]:
    """VaeConfig's architecture fields read off a BFL header: ch (conv_in's width), one level per
    `encoder.down.{l}` (ch_mult from each level's first conv), num_res_blocks (level 0's blocks),
    z_channels (half of conv_out's, which holds the mean and the log-variance)."""

    def width(name: str) -> int:
        entry = found.get(name)
        if entry is None:
            raise WeightsError(f"{where}: missing tensor {name}")
        if not entry.shape or entry.shape[0] < 1:
            raise WeightsError(f"{where}: tensor {name} has shape {list(entry.shape)}, not a convolution's")
        return int(entry.shape[0])

    def count(pattern: str) -> int:
        seen = {int(m[1]) for n in found if (m := re.match(pattern, n))}
        return max(seen) + 1 if seen else 0

    ch = width("encoder.conv_in.weight")
    levels = count(r"encoder\.down\.(\d+)\.")
    mult = tuple(width(f"encoder.down.{level}.block.0.conv1.weight") // ch for level in range(levels))
    blocks = count(r"encoder\.down\.0\.block\.(\d+)\.")
    if not mult or blocks < 1:
        raise WeightsError(f"{where}: missing tensor encoder.down.0.block.0.conv1.weight")
    return {"ch": ch, "ch_mult": mult, "num_res_blocks": blocks, "z_channels": width("encoder.conv_out.weight") // 2}


def bfl_mapping(vae: nn.Module, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, str]:
    """BFL name -> `vae`'s parameter name, for the halves `vae` keeps (a half set to None is skipped).
    Every BFL tensor must be recognised and every parameter filled with its shape, or WeightsError
    names the first few."""
    from diffusers.loaders.single_file_utils import convert_ldm_vae_checkpoint

    meta = {name: torch.empty(shape, device="meta") for name, shape in shapes.items()}
    converted = convert_ldm_vae_checkpoint(dict(meta), vae.config)
    source = {id(t): name for name, t in meta.items()}
    origin = {key: source.get(id(t), source.get(id(t._base))) for key, t in converted.items()}  # a view's base
    used = set(origin.values())
    _refuse("unrecognised BFL VAE", [name for name in shapes if name not in used])
    kept = {key: t for key, t in converted.items() if getattr(vae, key.split(".", 1)[0], None) is not None}
    own = vae.state_dict()
    _refuse("missing VAE", sorted(own.keys() - kept.keys()))
    _refuse("unexpected VAE", sorted(kept.keys() - own.keys()))
    _refuse("wrongly shaped VAE", [f"{key} {list(t.shape)} (expected {list(own[key].shape)})"
                                   for key, t in kept.items() if t.shape != own[key].shape])
    return {str(origin[key]): key for key in kept}


def _refuse(kind: str, names: list[str]) -> None:
    if names:
        more = f" (and {len(names) - 3} more)" if len(names) > 3 else ""
        raise WeightsError(f"{kind} tensor {', '.join(names[:3])}{more}")


def load_bfl_state(vae: nn.Module, state: Mapping[str, Tensor]) -> None:
    """Load BFL-named FLUX VAE tensors (the whole `ae.safetensors` may be given) into `vae`'s halves."""
    mapping = bfl_mapping(vae, {name: tuple(t.shape) for name, t in state.items()})
    own = vae.state_dict(keep_vars=True)
    with torch.no_grad():
        for bfl, key in mapping.items():
            own[key].copy_(state[bfl].reshape(own[key].shape))
