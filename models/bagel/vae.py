"""`vae_enc` and `vae_dec` of models/bagel.walk: the FLUX autoencoder, as diffusers' `AutoencoderKL`
(models-wave2.md §1.1, §1.4, §1.8, §1.9).

    encode(img) -> [N, hidden]:  resize to multiples of 16 (vae_transform.py), [-1, 1] pixels,
                                 encoder, posterior mean, z' = (z - shift) * scale, 2x2 patches
                                 in (h, w, p, q, c) order -> [N, 64], then the LLM side:
                                 vae2llm(z') + time_embedder(t = 0) + latent_pos_embed(row * grid + col)
    decode(z, height, width):    [N, 64] -> [16, 2h, 2w] (h = height // 16, w = width // 16),
                                 z / scale + shift, decoder, (x * 0.5 + 0.5) clamped to [0, 1], * 255,
                                 cast to uint8 (truncated, as BAGEL's `decode_image` does) -> [H, W, 3]

The uint8 [H, W, 3] output is what runtime/http/media/png.py encodes as it is; the input is what
runtime/http/media/decode.py decodes an image to (uint8 [H, W, 3]).

The FLUX configuration in diffusers' terms: latent_channels 16, block_out_channels ch * mult, one
DownEncoderBlock2D / UpDecoderBlock2D per mult, no quant / post-quant convs, scaling 0.3611 and
shift 0.1159. Each component keeps only its own half (the other is dropped after construction).
Real weights are BFL's `ae.safetensors` (`weights=` or WGC_BAGEL_DIR, a BAGEL directory: weights.py):
vae_bfl.py maps BFL's names with diffusers' own `convert_ldm_vae_checkpoint` and checks that every
tensor is used and every parameter filled; `load_bfl` takes such tensors from memory.

The encoder's LLM-side adapter (`vae2llm`, `time_embedder`, `latent_pos_embed`) lives in BAGEL's
`ema.safetensors` beside the LLM's; the encoder holds its own `LatentAdapter`, which a loader fills
from the same tensors (the names are the checkpoint's, so the filtered state dict loads as is).

Same-size calls run as one batch; the VAE runs in float32 on CPU and in the walk's dtype on CUDA.
diffusers is imported only when a VAE is built (importing it takes seconds).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from wgc.models.bagel.latents import DOWNSAMPLE, LATENT_CHANNELS, LatentAdapter, latent_ids, patchify, unpatchify
from wgc.models.bagel.vae_bfl import load_bfl_state as load_bfl_state  # with the BFL names
from wgc.models.bagel.vae_transform import ResizeRule, vae_pixels
from wgc.models.layers.dtypes import compute_dtype
from wgc.models.layers.presets import TinyPreset
from wgc.models.weights_io import announce, choose
from wgc.runtime.components.base import Call, CallError, Component

from wgc.plan.model import ComponentSpec


@dataclass(frozen=True)
class VaeConfig:
    """The FLUX autoencoder (BFL's `AutoEncoderParams` names) and the LLM side of its latents."""

    ch: int = 128
    ch_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2
    z_channels: int = LATENT_CHANNELS
    scale: float = 0.3611  # BFL scale_factor
    shift: float = 0.1159  # BFL shift_factor
    llm_hidden: int = 3584
    latent_grid: int = 64  # BAGEL's max_latent_size (app.py): 64 tokens = 1024 px a side
    resize: ResizeRule = field(default_factory=ResizeRule)  # BAGEL's ImageTransform(1024, 512, 16)
    warm_sizes: tuple[tuple[int, int], ...] = ((1024, 1024),)  # (height, width) run at warm-up

    @property
    def downsample(self) -> int:
        return 2 ** (len(self.ch_mult) - 1)  # 8 for four levels

    def diffusers_kwargs(self) -> dict[str, Any]:
        n = len(self.ch_mult)
        return {"in_channels": 3, "out_channels": 3, "down_block_types": ("DownEncoderBlock2D",) * n,
                "up_block_types": ("UpDecoderBlock2D",) * n, "block_out_channels": tuple(self.ch * m for m in self.ch_mult),
                "layers_per_block": self.num_res_blocks, "act_fn": "silu", "latent_channels": self.z_channels,
                "norm_num_groups": 32, "scaling_factor": self.scale, "shift_factor": self.shift,
                "use_quant_conv": False, "use_post_quant_conv": False, "mid_block_add_attention": True}


VAE_7B = VaeConfig()
VAE_TINY = VaeConfig(ch=32, ch_mult=(1, 1, 1, 1), num_res_blocks=1, llm_hidden=64, latent_grid=16,
                     resize=ResizeRule(max_size=256, min_size=128, stride=16, max_pixels=256 * 256),
                     warm_sizes=((256, 256),))
PRESETS = {"7b": VAE_7B, "tiny": VAE_TINY}


def build_vae(config: VaeConfig, seed: int = 0, keep: tuple[str, ...] = ("encoder", "decoder")) -> nn.Module:
    """diffusers' AutoencoderKL for `config`, random weights from `seed` (global RNG untouched), with
    only the halves in `keep` ("encoder", "decoder"); the others are set to None."""
    from diffusers import AutoencoderKL

    if config.z_channels != LATENT_CHANNELS or config.downsample * 2 != DOWNSAMPLE:
        raise ValueError(f"the latent adapter takes z 16 at 8x (2x2 patches), not z {config.z_channels} "
                         f"at {config.downsample}x")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        vae = AutoencoderKL(**config.diffusers_kwargs())
    for half in ("encoder", "decoder"):
        if half not in keep:
            setattr(vae, half, None)
    return vae.eval()


def encode_latents(vae: nn.Module, x: Tensor, config: VaeConfig) -> Tensor:
    """x [B, 3, H, W] in [-1, 1] -> (mean - shift) * scale [B, 16, H/8, W/8].

    BAGEL's encoder draws a sample from the posterior (its `DiagonalGaussian` defaults to
    sample=True), which makes an edit differ run to run even with every seed fixed; we take the
    posterior mean (diffusers' `mode()`), the value the samples centre on, so an edit is reproducible."""
    z = vae.encode(x).latent_dist.mode()  # [B, 16, H/8, W/8]
    return (z - config.shift) * config.scale


def decode_latents(vae: nn.Module, z: Tensor, config: VaeConfig) -> Tensor:
    """z [B, 16, h, w] (scaled) -> uint8 pixels [B, 8h, 8w, 3]."""
    x = vae.decode(z / config.scale + config.shift).sample  # [B, 3, 8h, 8w] in about [-1, 1]
    x = (x.float() * 0.5 + 0.5).clamp(0, 1).permute(0, 2, 3, 1) * 255  # [B, 8h, 8w, 3] in [0, 255]
    return x.to(torch.uint8).cpu()  # truncated, as BAGEL's Image.fromarray(image.to(torch.uint8))


def by_size(sizes: list[tuple[int, ...]]) -> dict[tuple[int, ...], list[int]]:
    """Call indices grouped by size, in first-seen order: each group runs as one batch."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, size in enumerate(sizes):
        groups.setdefault(size, []).append(i)
    return groups


class _Vae(TinyPreset, Component):
    """What both halves share: the preset, the device and dtype, the half of the VAE they keep."""

    half = ""

    def __init__(self, spec: ComponentSpec, rank: int, device: str, *, weights: str | Path | None = None,
                 preset: str | None = None, config: VaeConfig | None = None, seed: int = 0) -> None:
        """Weights from `weights` (a BAGEL directory: ae.safetensors, and ema.safetensors for the
        encoder's adapter), else random ones for `config` or `preset`, else from WGC_BAGEL_DIR, else
        the tiny preset's."""
        from wgc.models.bagel.weights import KNOB, Checkpoint  # weights.py builds this module's classes

        super().__init__(spec, rank, device)
        self.torch_device = torch.device(device)
        self.dtype = compute_dtype(spec, self.torch_device)
        directory, fallback = choose(weights, preset is not None or config is not None, KNOB)
        checkpoint = None if directory is None else Checkpoint(directory)
        if checkpoint is not None:
            self.config = checkpoint.vae_config
            self.vae = checkpoint.vae(self.half, self.torch_device, self.dtype)
            self.source = str(directory)
        else:
            preset = preset or "tiny"
            if config is None and preset not in PRESETS:
                raise ValueError(f"unknown BAGEL VAE preset {preset!r} (known: {', '.join(PRESETS)})")
            self.config = config if config is not None else PRESETS[preset]
            # nn.Module.to: diffusers' own `to` warns about fp32-only modules whenever a dtype is given,
            # even when it lists none (AutoencoderKL has none)
            self.vae = nn.Module.to(build_vae(self.config, seed, keep=(self.half,)), self.torch_device, self.dtype)
            self.source = f"{preset if config is None else 'custom'} config, random weights"
        self._own_weights(checkpoint, seed)
        announce("bagel", spec.name, KNOB if fallback else None, "the tiny preset", self.source, self._what())

    def _own_weights(self, checkpoint: Any, seed: int) -> None:
        """What a half holds beside the VAE (the encoder: its adapter), from `checkpoint` or `seed`."""

    def load_bfl(self, state: Mapping[str, Tensor], source: str) -> None:
        """This half's weights from BFL-named tensors (the whole `ae.safetensors` may be given)."""
        load_bfl_state(self.vae, state)
        self.source = source

    def describe(self) -> str:
        return f"{self.source}; {self._what()}"

    def _what(self) -> str:
        params = sum(p.numel() for p in self.weights())
        c = self.config
        return (f"FLUX VAE {self.half}, ch {c.ch} x {c.ch_mult}, {params / 1e6:.1f}M params, "
                f"{str(self.dtype).removeprefix('torch.')} on {self.device}")

    def weights(self) -> list[nn.Parameter]:
        return list(self.vae.parameters())


class VaeEncoder(_Vae):
    """Stateless: encode(img: image) -> tensor[N, hidden], the image's latent tokens in LLM width."""

    half = "encoder"

    def _own_weights(self, checkpoint: Any, seed: int) -> None:
        """The adapter: ema.safetensors' vae2llm, time_embedder, latent_pos_embed (and llm2vae, unused
        here), the LLM's own tensors; random ones from `seed` without a checkpoint."""
        if checkpoint is not None:
            self.adapter = checkpoint.adapter(self.torch_device, self.dtype)
            return
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + 1)
            adapter = LatentAdapter(self.config.llm_hidden, self.config.latent_grid)
        self.adapter = adapter.to(self.torch_device, self.dtype).eval()

    def weights(self) -> list[nn.Parameter]:
        return [*self.vae.parameters(), *self.adapter.parameters()]

    def encode(self, calls: list[Call]) -> list[Tensor]:
        images = []
        for c in calls:
            try:
                images.append(vae_pixels(c.args[0], self.config.resize))  # [3, H, W] in [-1, 1]
            except (ValueError, TypeError, RuntimeError) as err:
                raise CallError(c.request, f"vae_enc.encode: {err}") from None
        return [self.embed(z) for z in self.latents(images)]

    @torch.inference_mode()
    def latents(self, images: list[Tensor]) -> list[Tensor]:
        """[3, H, W] pixels in [-1, 1] (sides multiples of 16) -> scaled latents [16, H/8, W/8], same-size
        images batched."""
        out: list[Tensor | None] = [None] * len(images)
        for indices in by_size([tuple(x.shape) for x in images]).values():
            x = torch.stack([images[i] for i in indices]).to(self.torch_device, self.dtype)  # [B, 3, H, W]
            z = encode_latents(self.vae, x, self.config)  # [B, 16, H/8, W/8]
            for i, zi in zip(indices, z.unbind(0), strict=True):
                out[i] = zi
        return [z for z in out if z is not None]

    @torch.inference_mode()
    def embed(self, z: Tensor) -> Tensor:
        """A scaled latent [16, 2h, 2w] -> [h*w, hidden]: vae2llm + time_embedder(0) + latent_pos_embed."""
        tokens = patchify(z)  # [h*w, 64], (p, q, c) within a token, tokens row-major
        ids = latent_ids(z.shape[1] // 2, z.shape[2] // 2, self.config.latent_grid)  # [h*w]
        return self.adapter.embed(tokens, 0.0, ids)  # [h*w, hidden]

    def warm_up(self, progress: Callable[[str], None]) -> None:
        """Encode a grey image at each warm size (as resized for the VAE)."""
        for h, w in self.config.warm_sizes:
            self.encode([Call(0, "", (torch.full((h, w, 3), 128, dtype=torch.uint8),))])
        progress(f"encoded {', '.join(f'{h}x{w}' for h, w in self.config.warm_sizes)}")


class VaeDecoder(_Vae):
    """Stateless: decode(z: tensor[N, 64], height, width) -> image, uint8 pixels [H, W, 3] with
    H = height // 16 * 16 and W = width // 16 * 16."""

    half = "decoder"

    def decode(self, calls: list[Call]) -> list[Tensor]:
        latents = []
        for c in calls:
            z, height, width = c.args
            h, w = int(height) // DOWNSAMPLE, int(width) // DOWNSAMPLE
            z = torch.as_tensor(z)
            if h < 1 or w < 1 or z.shape != (h * w, LATENT_CHANNELS * 4):
                raise CallError(c.request, f"vae_dec.decode: a {int(height)}x{int(width)} image takes latents "
                                f"[{h * w}, {LATENT_CHANNELS * 4}], found {list(z.shape)}")
            latents.append(unpatchify(z, h, w))  # [16, 2h, 2w]
        return self.pixels(latents)

    @torch.inference_mode()
    def pixels(self, latents: list[Tensor]) -> list[Tensor]:
        """Scaled latents [16, 2h, 2w] -> uint8 [16h, 16w, 3], same-size latents batched."""
        out: list[Tensor | None] = [None] * len(latents)
        for indices in by_size([tuple(z.shape) for z in latents]).values():
            z = torch.stack([latents[i] for i in indices]).to(self.torch_device, self.dtype)  # [B, 16, 2h, 2w]
            for i, img in zip(indices, decode_latents(self.vae, z, self.config).unbind(0), strict=True):
                out[i] = img
        return [img for img in out if img is not None]

    def warm_up(self, progress: Callable[[str], None]) -> None:
        """Decode zero latents once at each warm size."""
        for h, w in self.config.warm_sizes:
            self.pixels([torch.zeros(LATENT_CHANNELS, h // 8, w // 8)])
        progress(f"decoded {', '.join(f'{h}x{w}' for h, w in self.config.warm_sizes)}")
