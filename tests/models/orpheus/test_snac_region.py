"""The kept-region SNAC decoder (models/orpheus/snac_region.py) against the `snac` package.

The reference is the package's own `SNAC.decode` (weight norm in place, its own convolutions) of
the whole window, sliced: the region decoder must give the same samples to f32 rounding for any
interval — at the window's ends, where the full decode reads its layers' zero padding, as in the
middle — on the tiny preset and on decoders of other shapes (SNAC 24 kHz's four upsampling stages,
an odd stride with output padding, dense instead of depthwise convolutions, a noise block).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from snac import SNAC
from wgc.models.orpheus import SnacDecoder, split_levels, token_codes
from wgc.models.orpheus.codec import SNAC_24KHZ, SNAC_TINY, WINDOW, kept_region, strip_weight_norm, tiny_snac
from wgc.models.orpheus.config import AUDIO_BASE, CODEBOOK, FRAME
from wgc.models.orpheus.snac_region import RegionUnsupported, _overlap_add, out_length, region_decoder
from wgc.runtime.components.base import Call

from tests.models.orpheus.helpers import snac_spec

SHAPES = {
    "tiny": SNAC_TINY,
    "24khz-rates": {**SNAC_24KHZ, "decoder_dim": 64, "noise": False},
    "odd-stride-dense": {**SNAC_TINY, "decoder_rates": [3, 2], "decoder_dim": 16, "depthwise": False},
}


def reference_and_copy(config: dict, seed: int = 0) -> tuple[SNAC, SNAC]:
    """The package's SNAC (weight norm kept) and a copy with it folded, as the component holds it."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        reference = SNAC(**config).eval()
        torch.manual_seed(seed)
        folded = strip_weight_norm(SNAC(**config)).eval()
    return reference, folded


def random_levels(rows: int, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return split_levels(torch.randint(0, CODEBOOK, (rows, WINDOW), generator=gen))


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_interval_equals_the_package_decode_sliced(shape: str) -> None:
    reference, folded = reference_and_copy(SHAPES[shape])
    levels = random_levels(3, seed=1)
    with torch.no_grad():
        whole = reference.decode(levels)  # [3, 1, T]
        latent = folded.quantizer.from_codes(levels)
    total = whole.shape[-1]
    assert out_length(folded.decoder, latent.shape[-1]) == total
    frame = total // 4
    for want in [(frame, 2 * frame), (0, total), (0, 7), (total - 5, total), (frame + 3, frame + 4),
                 (total // 2 - total // 9, total // 2 + total // 13)]:
        got = region_decoder(folded.decoder, latent.shape[-1], want)(latent)
        assert got.shape == (3, 1, want[1] - want[0])
        torch.testing.assert_close(got, whole[..., want[0]:want[1]], rtol=1e-5, atol=1e-6,
                                   msg=lambda m, w=want: f"{shape} {w}: {m}")


def test_the_component_keeps_the_package_decodes_second_frame_of_each_window() -> None:
    snac = SnacDecoder.tiny(snac_spec(), 0, "cpu")
    assert snac.region is not None  # the tiny preset runs on the kept-region decoder
    gen = torch.Generator().manual_seed(5)
    codes = torch.randint(0, CODEBOOK, (5, WINDOW), generator=gen)
    tokens = codes + AUDIO_BASE + CODEBOOK * (torch.arange(WINDOW) % FRAME)
    assert torch.equal(token_codes(tokens), codes)
    out = snac.decode([Call(i, "", (row.tolist(),)) for i, row in enumerate(tokens)])
    with torch.no_grad():
        want = tiny_snac().decode(split_levels(codes))[:, 0, snac.frame:2 * snac.frame]
    torch.testing.assert_close(torch.stack(out), want, rtol=1e-5, atol=1e-6)


def test_whole_window_knob_decodes_whole_windows_with_the_same_result(monkeypatch: pytest.MonkeyPatch) -> None:
    codes = token_codes(AUDIO_BASE + CODEBOOK * (torch.arange(WINDOW) % FRAME) + torch.arange(WINDOW)[None] * 97)
    fast = SnacDecoder.tiny(snac_spec(), 0, "cpu")
    monkeypatch.setenv("WGC_SNAC_WHOLE_WINDOWS", "1")
    whole = SnacDecoder.tiny(snac_spec(), 0, "cpu")
    assert whole.region is None and fast.region is not None
    torch.testing.assert_close(fast.decode_kept(codes), whole.decode_kept(codes), rtol=1e-5, atol=1e-6)


def test_a_decoder_with_attention_falls_back_to_whole_windows() -> None:
    config = {**SNAC_TINY, "attn_window_size": 4}
    reference, folded = reference_and_copy(config)
    with pytest.raises(RegionUnsupported, match="LocalMHA"):
        region_decoder(folded.decoder, 16, (512, 1024))
    assert kept_region(folded, (512, 1024)) is None


def test_a_noise_block_is_a_per_step_layer() -> None:
    """With the noise's gain at zero the noisy decoder is deterministic: the region decode of a
    decoder holding NoiseBlocks must then equal the package's."""
    from snac.layers import NoiseBlock

    reference, folded = reference_and_copy({**SHAPES["24khz-rates"], "noise": True})
    for model in (reference, folded):
        blocks = [m for m in model.decoder.modules() if isinstance(m, NoiseBlock)]
        assert len(blocks) == 4
        for block in blocks:  # the package's: weight norm's magnitude g, which makes the weight 0
            gain = block.linear.parametrizations.weight.original0 if model is reference else block.linear.weight
            gain.data.zero_()
    levels = random_levels(2, seed=2)
    with torch.no_grad():
        whole = reference.decode(levels)
        latent = folded.quantizer.from_codes(levels)
    got = region_decoder(folded.decoder, latent.shape[-1], (2048, 4096))(latent)
    torch.testing.assert_close(got, whole[..., 2048:4096], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("stride", "taps"), [(128, 2), (3, 2), (4, 3), (1, 7)])
def test_overlap_add_equals_conv_transpose(stride: int, taps: int) -> None:
    gen = torch.Generator().manual_seed(stride)
    x = torch.randn(3, 5, 6, generator=gen)
    weight = torch.randn(5, 4, stride * taps, generator=gen)
    bias = torch.randn(4, generator=gen)
    torch.testing.assert_close(_overlap_add(x, weight, bias, stride), F.conv_transpose1d(x, weight, bias, stride),
                               rtol=1e-5, atol=1e-5)


def test_an_interval_outside_the_output_is_refused() -> None:
    folded = strip_weight_norm(tiny_snac())
    with pytest.raises(ValueError, match="outside"):
        region_decoder(folded.decoder, 16, (0, 2049))
    step = region_decoder(folded.decoder, 16, (512, 1024))
    with pytest.raises(ValueError, match="16 latent steps"):
        step(torch.zeros(1, 32, 12))
