"""`snac` of models/orpheus.walk: the SNAC 24 kHz decoder (the `snac` package) on windows of 28 tokens.

Orpheus's token → code mapping: a frame is 7 tokens; token t at position p (mod 7) is the code
t - 128266 - 4096 * p. The positions split into SNAC's three levels as

    level 0 (1 code per frame):  position 0
    level 1 (2 codes per frame): positions 1, 4
    level 2 (4 codes per frame): positions 2, 3, 5, 6

so a window of 4 frames decodes from codes of shapes [B, 4], [B, 8], [B, 16]. A frame is 4
latent steps of the finest level; SNAC 24 kHz upsamples each step 512 times, so the window is
8192 samples and the component keeps [2048:4096], the second frame: 2048 samples = 85 ms per 7
new tokens, decoded with one frame of context before it and two after.

A window holding any token outside the audio range (a stray text or control token, the
end-of-speech token) has no codes: the component returns silence of the kept length for it (the
reference implementation emits nothing) and counts it in `invalid_windows`.

Presets. With WGC_SNAC_DIR (config.json + pytorch_model.bin or model.safetensors) the real
weights; without, the tiny config below with random weights (seed 0): SNAC's own classes at a
smaller size, noise off (deterministic), and one upsampling stage of 128 whose receptive field
fits the window's context, so that a window's kept frame equals the same samples of the whole
utterance decoded at once (tests/models/orpheus check this, sample for sample). Its frame is 512
samples, and its nominal sampling rate 6000 Hz gives a frame the real 85.3 ms, so audio-seconds
mean the same with either preset.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from snac import SNAC
from torch import Tensor, nn
from wgc.models.layers.presets import TinyPreset
from wgc.models.orpheus.config import AUDIO_BASE, CODEBOOK, FRAME
from wgc.models.orpheus.knobs import snac_whole_windows
from wgc.models.orpheus.snac_region import RegionUnsupported, region_decoder
from wgc.models.weights_io import WeightsError, announce, choose, one_line
from wgc.runtime.components.base import Call, Component

from wgc.plan.model import ComponentSpec

WINDOW = 28  # tokens per window: 4 frames
LEVEL_POSITIONS = ((0,), (1, 4), (2, 3, 5, 6))  # frame positions feeding SNAC levels 0, 1, 2

SNAC_24KHZ: dict[str, Any] = {  # hubertsiuzdak/snac_24khz config.json
    "sampling_rate": 24000, "encoder_dim": 48, "encoder_rates": [2, 4, 8, 8], "decoder_dim": 1024,
    "decoder_rates": [8, 8, 4, 2], "attn_window_size": None, "codebook_size": 4096, "codebook_dim": 8,
    "vq_strides": [4, 2, 1], "noise": True, "depthwise": True,
}
SNAC_TINY: dict[str, Any] = {
    "sampling_rate": 6000, "encoder_dim": 8, "encoder_rates": [2, 2], "decoder_dim": 16,
    "decoder_rates": [128], "attn_window_size": None, "codebook_size": 4096, "codebook_dim": 8,
    "vq_strides": [4, 2, 1], "noise": False, "depthwise": True,
}


def token_codes(tokens: Sequence[int] | Tensor) -> Tensor:
    """Codes of whole frames of Orpheus tokens: [..., 7F] → [..., 7F] (t - 128266 - 4096 * (i mod 7))."""
    t = torch.as_tensor(tokens, dtype=torch.int64)
    position = torch.arange(t.shape[-1]) % FRAME  # [7F]
    return t - AUDIO_BASE - CODEBOOK * position


def split_levels(codes: Tensor) -> list[Tensor]:
    """[B, 7F] codes → SNAC's levels [B, F], [B, 2F], [B, 4F] in time order."""
    frames = codes.reshape(codes.shape[0], -1, FRAME)  # [B, F, 7]
    return [frames[:, :, list(pos)].reshape(codes.shape[0], -1) for pos in LEVEL_POSITIONS]


def valid_rows(codes: Tensor) -> Tensor:
    """[B, N] codes → [B] bool: every code in [0, 4096)."""
    return ((codes >= 0) & (codes < CODEBOOK)).all(-1)


def frame_samples(model: SNAC) -> int:
    """Samples per frame: the finest level's 4 latent steps, each upsampled by the decoder's rates."""
    hop = 1
    for rate in model.decoder_rates:
        hop *= rate
    return hop * max(model.vq_strides)


def strip_weight_norm(model: nn.Module) -> nn.Module:
    """Fold SNAC's weight-norm parametrizations into plain weights (the same values; no recompute per call)."""
    from torch.nn.utils import parametrize

    for module in model.modules():
        if parametrize.is_parametrized(module, "weight"):
            parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)
    return model


def load_snac(directory: Path) -> SNAC:
    """SNAC from a local directory (config.json + model.safetensors or pytorch_model.bin)."""
    directory = Path(directory)
    config = directory / "config.json"
    if not config.is_file():
        raise WeightsError(f"{directory}: no config.json for SNAC")
    try:
        model = SNAC(**json.loads(config.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, TypeError, UnicodeDecodeError) as err:
        raise WeightsError(f"{config}: not a SNAC config ({one_line(err)})") from None
    safetensors, pickle = directory / "model.safetensors", directory / "pytorch_model.bin"
    try:
        if safetensors.is_file():
            from safetensors.torch import load_file

            state = load_file(str(safetensors))
        elif pickle.is_file():
            state = torch.load(pickle, map_location="cpu", weights_only=True)
        else:
            raise WeightsError(f"{directory}: no model.safetensors or pytorch_model.bin for SNAC")
    except WeightsError:
        raise
    except Exception as err:  # noqa: BLE001 - corrupt files raise whatever their reader raises
        raise WeightsError(f"{directory}: SNAC weights are unreadable ({type(err).__name__}: {one_line(err)})") from None
    result = model.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        kind, names = ("missing", result.missing_keys) if result.missing_keys else ("unexpected", result.unexpected_keys)
        raise WeightsError(f"{directory}: {kind} SNAC tensor {', '.join(names[:3])}"
                           f"{f' (and {len(names) - 3} more)' if len(names) > 3 else ''}")
    return model


def tiny_snac(seed: int = 0) -> SNAC:
    """The tiny SNAC: SNAC_TINY with random weights drawn from `seed` (global RNG state untouched)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = SNAC(**SNAC_TINY)
    return model


class SnacDecoder(TinyPreset, Component):
    """Stateless: decode(codes: token[28]) -> audio, the kept frame of each window (1-D float32)."""

    def __init__(self, spec: ComponentSpec, rank: int, device: str, *, weights: str | Path | None = None,
                 preset: str | None = None) -> None:
        super().__init__(spec, rank, device)
        self.torch_device = torch.device(device)
        weights, fallback = choose(weights, preset is not None, "WGC_SNAC_DIR")
        if weights is None:
            preset = preset or "tiny"
        if weights is not None:
            model, self.source = load_snac(Path(weights)), str(weights)
        elif preset == "tiny":
            model, self.source = tiny_snac(), "tiny preset, random weights"
        elif preset == "24khz":
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                model = SNAC(**SNAC_24KHZ)
            self.source = "24khz preset, random weights"
        else:
            raise ValueError(f"unknown SNAC preset {preset!r} (known: tiny, 24khz)")
        self.model = strip_weight_norm(model).to(self.torch_device).eval()  # float32 always (the codec is f32)
        self.frame = frame_samples(self.model)
        self.sample_rate = int(self.model.sampling_rate)
        self.keep = (self.frame, 2 * self.frame)  # [2048:4096] at 24 kHz
        self.stats = {"windows": 0, "invalid_windows": 0}
        self.region = None if snac_whole_windows() else kept_region(self.model, self.keep)
        self.buckets = batch_buckets(int(spec.settings.get("max_batch", 0) or 0) or DEFAULT_MAX_BATCH)
        self.what = f"{self.frame} samples per frame at {self.sample_rate} Hz on {device}"
        announce("orpheus", spec.name, "WGC_SNAC_DIR" if fallback else None, "the tiny SNAC", f"SNAC {self.source}",
                 self.what)

    def describe(self) -> str:
        return f"{self.source}; {self.what}"

    def decode(self, calls: list[Call]) -> list[Tensor]:
        windows = [_tokens(c.args[0]) for c in calls]
        for w in windows:
            if len(w) != WINDOW:
                raise ValueError(f"a SNAC window is {WINDOW} tokens, got {len(w)}")
        kept = self.decode_windows(torch.tensor(windows, dtype=torch.int64))  # [B, frame]
        return list(kept.unbind(0))

    def decode_windows(self, tokens: Tensor) -> Tensor:
        """[B, 28] Orpheus tokens → [B, frame] float32: each window's kept frame (silence where invalid)."""
        codes = token_codes(tokens)  # [B, 28]
        ok = valid_rows(codes)  # [B]
        out = torch.zeros(tokens.shape[0], self.frame, dtype=torch.float32)
        self.stats["windows"] += tokens.shape[0]
        self.stats["invalid_windows"] += int((~ok).sum())
        if ok.any():
            out[ok] = self.decode_kept(codes[ok]).float().cpu()
        return out

    def decode_kept(self, codes: Tensor) -> Tensor:
        """[B, 28] valid codes → [B, frame]: each window's kept frame, computed over the kept
        region's receptive field only (models/orpheus/snac_region.py) where the decoder allows,
        else sliced out of the whole window's decode."""
        if self.region is None:
            return self.decode_codes(codes)[:, self.keep[0]:self.keep[1]]
        rows, codes = self._padded(codes)
        levels = [lv.to(self.torch_device) for lv in split_levels(codes)]
        with torch.no_grad():
            return self.region(self.model.quantizer.from_codes(levels))[:rows, 0]

    def decode_codes(self, codes: Tensor) -> Tensor:
        """[B, 7F] valid codes → [B, F * frame] samples: SNAC's decode of the whole sequence at once.

        The batch is padded (with copies of its first row, dropped after) to the next of a few
        batch sizes (`batch_buckets`), so that the convolutions see few shapes, each built once at
        warm-up rather than on a request's path (a new batch size costs 100-200 ms on CPU)."""
        rows, codes = self._padded(codes)
        levels = [lv.to(self.torch_device) for lv in split_levels(codes)]
        with torch.no_grad():
            return self.model.decode(levels)[:rows, 0]  # [B, F * frame]

    def _padded(self, codes: Tensor) -> tuple[int, Tensor]:
        rows = codes.shape[0]
        padded = next((b for b in self.buckets if b >= rows), rows)
        if padded > rows:
            codes = torch.cat([codes, codes[:1].expand(padded - rows, -1)])
        return rows, codes

    def warm_up(self, progress: Callable[[str], None]) -> None:
        """Decode one window at every batch bucket (silence's codes), largest first."""
        window = torch.tensor([AUDIO_BASE + CODEBOOK * (k % FRAME) for k in range(WINDOW)])
        for bucket in sorted(self.buckets, reverse=True):
            self.decode_kept(token_codes(window.expand(bucket, -1)))
        progress(f"decoded batch sizes {','.join(str(b) for b in self.buckets)}")

    def counters(self) -> dict[str, int]:
        return dict(self.stats)


DEFAULT_MAX_BATCH = 16  # when the plan sets no max_batch for the codec


def batch_buckets(max_batch: int) -> list[int]:
    """The batch sizes the codec runs at: 1, 2, 4, 8, then every multiple of 8, up to max_batch
    (which is always one): padding wastes at most a few rows, and there are few shapes to warm."""
    sizes = [b for b in (1, 2, 4) if b < max_batch] + list(range(8, max_batch, 8))
    return [*sizes, max_batch]


def kept_region(model: SNAC, keep: tuple[int, int]) -> Callable[[Tensor], Tensor] | None:
    """SNAC's decoder over a window's kept samples only, or None where its layers do not allow it
    (then the whole window is decoded and sliced)."""
    steps = WINDOW // FRAME * max(model.vq_strides)  # latent steps of a window: 4 frames
    try:
        return region_decoder(model.decoder, steps, keep)
    except RegionUnsupported:
        return None


def _tokens(chunk: Any) -> list[int]:
    if isinstance(chunk, Tensor):
        return [int(t) for t in chunk.reshape(-1).tolist()]
    return [int(t) for t in chunk]
