"""The FLUX VAE components (models/bagel/vae.py) against diffusers' AutoencoderKL called directly,
BFL-named weights through the conversion, the shift/scale and the (h, w, p, q, c) token order, the
decoded image's form, batching and determinism (models-wave2.md §1.4, §1.8, §1.9)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image
from torch import Tensor
from wgc.models.bagel.vae import (
    VAE_7B,
    VAE_TINY,
    VaeDecoder,
    VaeEncoder,
    build_vae,
    encode_latents,
    load_bfl_state,
)
from wgc.models.bagel.vae_transform import ResizeRule, fit, vae_pixels
from wgc.models.weights_io import WeightsError
from wgc.runtime.components.base import Call, CallError
from wgc.runtime.http.media.png import encode_png, to_pixels

from tests.models.bagel.checkpoint import bfl_state
from wgc.plan.model import ComponentSpec

SCALE, SHIFT = 0.3611, 0.1159


def spec(name: str) -> ComponentSpec:
    cls = "VaeEncoder" if name == "vae_enc" else "VaeDecoder"
    return ComponentSpec(name, f"wgc.models.bagel.{cls}", "stateless", [], {}, [], {"dtype": "bf16"}, [0], 1, {})


# ---- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ref() -> torch.nn.Module:
    """The reference: diffusers' AutoencoderKL in the tiny FLUX configuration, its own random init."""
    from diffusers import AutoencoderKL

    torch.manual_seed(3)
    return AutoencoderKL(**VAE_TINY.diffusers_kwargs()).eval()


@pytest.fixture(scope="module")
def enc(ref: torch.nn.Module) -> VaeEncoder:
    e = VaeEncoder.tiny(spec("vae_enc"), 0, "cpu")
    e.load_bfl(bfl_state(ref), "the reference, as BFL tensors")
    return e


@pytest.fixture(scope="module")
def dec(ref: torch.nn.Module) -> VaeDecoder:
    d = VaeDecoder.tiny(spec("vae_dec"), 0, "cpu")
    d.load_bfl(bfl_state(ref), "the reference, as BFL tensors")
    return d


def image(h: int, w: int, seed: int = 0) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, generator=g)  # [h, w, 3] u8


def adapter_sum(e: VaeEncoder, tokens: Tensor, ids: Tensor) -> Tensor:
    a = e.adapter
    return a.vae2llm(tokens) + a.time_embedder(torch.zeros(len(tokens))) + a.latent_pos_embed.pos_embed[ids]


# ---- configuration -----------------------------------------------------------------------------


def test_configs_are_flux_in_diffusers_terms() -> None:
    kw = VAE_7B.diffusers_kwargs()
    assert kw["block_out_channels"] == (128, 256, 512, 512) and kw["layers_per_block"] == 2
    assert kw["latent_channels"] == 16 and (kw["scaling_factor"], kw["shift_factor"]) == (SCALE, SHIFT)
    assert not kw["use_quant_conv"] and not kw["use_post_quant_conv"]
    assert kw["down_block_types"] == ("DownEncoderBlock2D",) * 4 and kw["up_block_types"] == ("UpDecoderBlock2D",) * 4
    assert VAE_TINY.diffusers_kwargs()["block_out_channels"] == (32,) * 4 and VAE_TINY.num_res_blocks == 1
    assert VAE_7B.downsample == VAE_TINY.downsample == 8
    assert (VAE_TINY.llm_hidden, VAE_TINY.latent_grid, VAE_7B.llm_hidden, VAE_7B.latent_grid) == (64, 16, 3584, 64)


def test_7b_halves_are_the_walks_weights() -> None:
    from diffusers import AutoencoderKL

    with torch.device("meta"):
        vae = AutoencoderKL(**VAE_7B.diffusers_kwargs())
    encoder = sum(p.numel() for p in vae.encoder.parameters())
    decoder = sum(p.numel() for p in vae.decoder.parameters())
    assert round(encoder / 1e6) == 34 and round(decoder / 1e6) == 50  # models/bagel.walk: 34M, 50M


def test_each_component_keeps_its_half_and_is_seeded() -> None:
    a, b = VaeEncoder.tiny(spec("vae_enc"), 0, "cpu"), VaeEncoder.tiny(spec("vae_enc"), 0, "cpu")
    assert a.vae.decoder is None and a.vae.encoder is not None
    d = VaeDecoder.tiny(spec("vae_dec"), 0, "cpu")
    assert d.vae.encoder is None and d.vae.decoder is not None
    for x, y in zip(a.weights(), b.weights(), strict=True):
        assert torch.equal(x, y)
    assert "tiny config, random weights" in a.describe() and "float32 on cpu" in d.describe()


# ---- the VAE resize ----------------------------------------------------------------------------


def test_resize_rule_is_bagels() -> None:
    rule = ResizeRule()  # ImageTransform(1024, 512, 16)
    assert fit(1024, 1024, rule) == (1024, 1024)
    assert fit(2048, 1024, rule) == (1024, 512)  # shrunk to the long-edge cap
    assert fit(300, 200, rule) == (768, 512)  # grown to the short-edge floor
    assert fit(1000, 700, rule) == (992, 704)  # multiples of 16, Python rounding: 1000 / 16 = 62.5 -> 62
    w, h = fit(4000, 100, rule)  # the cap beats the floor
    assert max(w, h) <= 1024 and w % 16 == 0 and h % 16 == 0
    assert fit(300, 200, VAE_TINY.resize) == (256, 176)  # tiny: the 256 cap, 170.7 -> 176


def test_vae_pixels_resize_bicubic_and_normalise() -> None:
    img = image(100, 150)
    x = vae_pixels(img, VAE_TINY.resize)  # fit: 150x100 -> 192x128
    assert x.shape == (3, 128, 192) and x.dtype == torch.float32
    expected = np.array(Image.fromarray(img.numpy()).resize((192, 128), Image.Resampling.BICUBIC))
    assert torch.allclose(x, torch.from_numpy(expected).permute(2, 0, 1).float() / 127.5 - 1, atol=1e-6)
    same = image(128, 128)  # already a VAE size: untouched
    assert torch.allclose(vae_pixels(same, VAE_TINY.resize), same.permute(2, 0, 1).float() / 127.5 - 1, atol=1e-6)


# ---- against diffusers, and the BFL conversion ---------------------------------------------------


def test_bfl_names_are_flux_names(ref: torch.nn.Module) -> None:
    bfl = bfl_state(ref)
    for name in ("encoder.down.0.block.0.norm1.weight", "encoder.down.2.downsample.conv.weight",
                 "encoder.mid.block_2.conv1.weight", "encoder.norm_out.bias", "decoder.up.3.block.1.conv2.weight",
                 "decoder.up.1.upsample.conv.bias", "decoder.mid.attn_1.proj_out.weight", "decoder.conv_out.weight"):
        assert name in bfl, name
    assert bfl["encoder.mid.attn_1.q.weight"].shape == (32, 32, 1, 1)  # a 1x1 conv in BFL's layout
    assert not any("up.0.upsample" in k or "down.3.downsample" in k for k in bfl)


def test_bfl_conversion_loads_every_tensor(ref: torch.nn.Module) -> None:
    vae = build_vae(VAE_TINY, seed=7)
    load_bfl_state(vae, bfl_state(ref))
    want = ref.state_dict()
    got = vae.state_dict()
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in want)
    x = torch.rand(1, 3, 64, 64) * 2 - 1
    with torch.no_grad():
        assert torch.equal(vae.encode(x).latent_dist.mode(), ref.encode(x).latent_dist.mode())


def test_bfl_loading_refuses_bad_tensors(ref: torch.nn.Module) -> None:
    bfl = bfl_state(ref)
    vae = build_vae(VAE_TINY, seed=7)
    with pytest.raises(WeightsError, match=r"missing VAE tensor decoder\.mid_block\.resnets\.0\.conv1\.weight"):
        load_bfl_state(vae, {k: t for k, t in bfl.items() if k != "decoder.mid.block_1.conv1.weight"})
    with pytest.raises(WeightsError, match=r"unrecognised BFL VAE tensor encoder\.extra\.weight"):
        load_bfl_state(vae, {**bfl, "encoder.extra.weight": torch.zeros(3)})
    with pytest.raises(WeightsError, match=r"wrongly shaped VAE tensor encoder\.conv_in\.bias \[5\]"):
        load_bfl_state(vae, {**bfl, "encoder.conv_in.bias": torch.zeros(5)})
    half = build_vae(VAE_TINY, seed=7, keep=("encoder",))
    with pytest.raises(WeightsError, match="missing VAE tensor encoder"):  # the decoder half alone
        load_bfl_state(half, {k: t for k, t in bfl.items() if k.startswith("decoder.")})


def test_encode_matches_diffusers(ref: torch.nn.Module, enc: VaeEncoder) -> None:
    img = image(96, 160)  # resized for the VAE to 128x208 (tiny rule): an 8x13 token grid
    x = vae_pixels(img, VAE_TINY.resize)
    with torch.no_grad():
        z = (ref.encode(x[None]).latent_dist.mode()[0] - SHIFT) * SCALE  # [16, 16, 26]
        tokens = torch.einsum("chpwq->hwpqc", z.reshape(16, 8, 2, 13, 2)).reshape(-1, 64)  # BAGEL's order
        ids = (torch.arange(8)[:, None] * 16 + torch.arange(13)[None, :]).reshape(-1)  # row * grid + col
        want = adapter_sum(enc, tokens, ids)
    (got,) = enc.call("encode", [Call(1, "", (img,))])
    assert got.shape == (104, 64) and got.dtype == torch.float32
    assert torch.allclose(got, want, atol=1e-5)


def test_decode_matches_diffusers(ref: torch.nn.Module, dec: VaeDecoder) -> None:
    g = torch.Generator().manual_seed(1)
    tokens = torch.randn(4 * 6, 64, generator=g)  # a 64 x 96 px image
    z = torch.einsum("hwpqc->chpwq", tokens.reshape(4, 6, 2, 2, 16)).reshape(16, 8, 12)
    with torch.no_grad():
        x = ref.decode(z[None] / SCALE + SHIFT).sample[0]  # [3, 64, 96]
    want = ((x * 0.5 + 0.5).clamp(0, 1).permute(1, 2, 0) * 255).to(torch.uint8)
    (got,) = dec.call("decode", [Call(1, "", (tokens, 64, 96))])
    assert got.shape == (64, 96, 3) and got.dtype == torch.uint8
    assert torch.equal(got, want)


# ---- shift/scale and the token order, through stubs with known latents ---------------------------


def known_latent(h: int, w: int) -> Tensor:
    """z[c, y, x] = c + 100 y + 10000 x: every entry names its place. [16, h, w]"""
    c, y, x = torch.meshgrid(torch.arange(16.0), torch.arange(h * 1.0), torch.arange(w * 1.0), indexing="ij")
    return c + 100 * y + 10000 * x


def test_encode_shift_scale_and_token_order() -> None:
    e = VaeEncoder.tiny(spec("vae_enc"), 0, "cpu")
    latent = known_latent(4, 6)  # a 2 x 3 token grid
    e.vae = SimpleNamespace(encode=lambda x: SimpleNamespace(latent_dist=SimpleNamespace(mode=lambda: latent[None])))
    assert torch.equal(encode_latents(e.vae, torch.zeros(1, 3, 32, 48), VAE_TINY)[0], (latent - SHIFT) * SCALE)
    with torch.no_grad():  # the adapter as the identity (tiny hidden = 64 = token width): out = tokens
        e.adapter.vae2llm.weight.copy_(torch.eye(64))
        e.adapter.vae2llm.bias.zero_()
        e.adapter.time_embedder.mlp[2].weight.zero_()
        e.adapter.time_embedder.mlp[2].bias.zero_()
        e.adapter.latent_pos_embed.pos_embed.zero_()
        (out,) = [e.embed(z) for z in e.latents([torch.zeros(3, 32, 48)])]
    for r, col, p, q, c in [(0, 0, 0, 0, 0), (1, 2, 1, 1, 15), (0, 1, 1, 0, 7), (1, 0, 0, 1, 3)]:
        want = (latent[c, 2 * r + p, 2 * col + q] - SHIFT) * SCALE
        assert torch.isclose(out[r * 3 + col, p * 32 + q * 16 + c], want, rtol=1e-6)


def test_decode_shift_scale_and_token_order() -> None:
    d = VaeDecoder.tiny(spec("vae_dec"), 0, "cpu")
    seen = []
    d.vae = SimpleNamespace(decode=lambda z: seen.append(z) or SimpleNamespace(sample=torch.zeros(1, 3, 32, 48)))
    latent = known_latent(4, 6)
    tokens = torch.stack([latent[:, 2 * r:2 * r + 2, 2 * c:2 * c + 2].permute(1, 2, 0).reshape(64)
                          for r in range(2) for c in range(3)])  # (h, w) tokens, each (p, q, c)
    (img,) = d.call("decode", [Call(1, "", (tokens, 32, 48))])
    assert torch.allclose(seen[0][0], latent / SCALE + SHIFT)
    assert img.shape == (32, 48, 3) and bool((img == 127).all())  # zeros decode to grey: 0.5 * 255, truncated


# ---- the decoded image, batching, determinism, errors ------------------------------------------


def test_decoded_image_is_what_the_http_layer_encodes(dec: VaeDecoder) -> None:
    g = torch.Generator().manual_seed(2)
    (img,) = dec.call("decode", [Call(1, "", (torch.randn(16, 64, generator=g) * 50, 72, 70))])  # -> 64 x 64
    assert img.shape == (64, 64, 3) and img.dtype == torch.uint8 and img.device.type == "cpu"
    assert int(img.min()) == 0 and int(img.max()) == 255  # large latents saturate: clamped, not wrapped
    pixels = to_pixels(img, (64, 64))
    assert np.array_equal(pixels, img.numpy()) and encode_png(pixels).startswith(b"\x89PNG")


def test_decode_batches_same_sizes_and_is_deterministic(dec: VaeDecoder) -> None:
    g = torch.Generator().manual_seed(4)
    zs = [torch.randn(16, 64, generator=g), torch.randn(24, 64, generator=g), torch.randn(16, 64, generator=g)]
    sizes = [(64, 64), (64, 96), (64, 64)]
    calls = [Call(i, "", (z, h, w)) for i, (z, (h, w)) in enumerate(zip(zs, sizes, strict=True))]
    batched = dec.call("decode", calls)
    again = dec.call("decode", calls)
    assert all(torch.equal(a, b) for a, b in zip(batched, again, strict=True))
    for call, img in zip(calls, batched, strict=True):
        (alone,) = dec.call("decode", [call])
        assert img.shape == alone.shape and int((img.int() - alone.int()).abs().max()) <= 1


def test_encode_batches_same_sizes_and_is_deterministic(enc: VaeEncoder) -> None:
    imgs = [image(128, 128, 1), image(128, 192, 2), image(128, 128, 3)]
    calls = [Call(i, "", (img,)) for i, img in enumerate(imgs)]
    batched = enc.call("encode", calls)
    assert [tuple(t.shape) for t in batched] == [(64, 64), (96, 64), (64, 64)]
    assert all(torch.equal(a, b) for a, b in zip(batched, enc.call("encode", calls), strict=True))
    for call, out in zip(calls, batched, strict=True):
        assert torch.allclose(out, enc.call("encode", [call])[0], atol=1e-5)


def test_bad_calls_name_their_request(enc: VaeEncoder, dec: VaeDecoder) -> None:
    with pytest.raises(CallError, match=r"a 64x64 image takes latents \[16, 64\], found \[15, 64\]") as err:
        dec.call("decode", [Call(7, "", (torch.zeros(15, 64), 64, 64))])
    assert err.value.request == 7
    with pytest.raises(CallError, match="uint8") as err:
        enc.call("encode", [Call(9, "", (torch.zeros(32, 32, 3),))])
    assert err.value.request == 9


def test_warm_up_runs_the_tiny_sizes(enc: VaeEncoder, dec: VaeDecoder) -> None:
    lines: list[str] = []
    enc.warm_up(lines.append)
    dec.warm_up(lines.append)
    assert lines == ["encoded 256x256", "decoded 256x256"]


def test_the_walk_names_resolve() -> None:
    import wgc.models.bagel as bagel

    assert bagel.VaeEncoder is VaeEncoder and bagel.VaeDecoder is VaeDecoder
