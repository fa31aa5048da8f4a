"""BAGEL's `vit` component: SigLIP parity with transformers, and each ViT pitfall of models-wave2.md
§1.10 as a test (patch order, post-LayerNorm, aspect ratio, extrapolated ids, the stride)."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest
import torch
from transformers import SiglipVisionConfig, SiglipVisionModel
from wgc.models.bagel.latents import latent_ids, sincos_2d
from wgc.models.bagel.resize import fit
from wgc.models.bagel.vit import BagelVit, VitConfig, VitEncoder, pack, random_vit
from wgc.models.bagel.vit_transform import Resize, patchify, prepare, resize, target_size
from wgc.runtime.components.base import Call, CallError
from wgc.runtime.http.media.decode import MediaLimits, decode_image

from wgc.plan.model import ComponentSpec

TINY = VitConfig.preset("tiny")
# head_dim 72 as in So400m, two layers, a 5 x 5 grid: the 7B's shapes in miniature
NARROW = dataclasses.replace(TINY, name="narrow", hidden=144, heads=2, intermediate=288, layers=2, grid=5,
                             llm_hidden=96, resize=Resize(max_size=70, min_size=28, stride=14, max_pixels=70 * 70))


def spec() -> ComponentSpec:
    return ComponentSpec("vit", "wgc.models.bagel.VitEncoder", "stateless", [], {}, [], {"dtype": "bf16"}, [0], 1, {})


def image(height: int, width: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (height, width, 3), dtype=torch.uint8, generator=g)  # [H, W, 3] u8


def reference(c: VitConfig, model: BagelVit, side: int | None = None, rows: list[int] | None = None) -> SiglipVisionModel:
    """transformers' SigLIP at image size `side` patches (default: the full grid) with `model`'s weights:
    the Linear patch weight viewed [D, P, P, C] and permuted to the Conv2d's [D, C, P, P]; position
    embedding rows `rows` of ours (default: all)."""
    side = side or c.grid
    hf = SiglipVisionModel(SiglipVisionConfig(
        hidden_size=c.hidden, intermediate_size=c.intermediate, num_hidden_layers=c.layers,
        num_attention_heads=c.heads, image_size=side * c.patch, patch_size=c.patch, layer_norm_eps=c.eps,
        hidden_act="gelu_pytorch_tanh", vision_use_head=False)).eval()
    state = {k.removeprefix("vision_model."): v for k, v in model.state_dict().items() if k.startswith("vision_model.")}
    w = state["embeddings.patch_embedding.weight"]  # [D, P*P*C]
    state["embeddings.patch_embedding.weight"] = w.view(c.hidden, c.patch, c.patch, c.channels).permute(0, 3, 1, 2)
    if rows is not None:
        state["embeddings.position_embedding.weight"] = state["embeddings.position_embedding.weight"][rows]
    hf.load_state_dict(state, strict=True)
    return hf


def pixel_values(img: torch.Tensor) -> torch.Tensor:
    return ((img.float() / 255 - 0.5) / 0.5).permute(2, 0, 1)[None]  # [1, 3, H, W]


def randomised(c: VitConfig, seed: int = 1) -> BagelVit:
    """Random weights with LayerNorm scales and biases off their defaults, so that a skipped norm shows."""
    model = random_vit(c, seed).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.5 * torch.randn(p.shape, generator=g))
    return model


def ours(c: VitConfig, model: BagelVit, img: torch.Tensor) -> torch.Tensor:
    patches, ids, _ = prepare(img, c.resize, c.patch, c.grid)
    with torch.no_grad():
        return model.vision_model(patches, ids, [(1, patches.shape[0])])  # [N, hidden]


@pytest.mark.parametrize("c", [TINY, NARROW], ids=lambda c: c.name)
def test_siglip_matches_transformers_at_full_size(c: VitConfig) -> None:
    model = randomised(c)
    img = image(c.grid * c.patch, c.grid * c.patch)
    with torch.no_grad():
        expected = reference(c, model)(pixel_values=pixel_values(img)).last_hidden_state[0]  # [grid^2, hidden]
    torch.testing.assert_close(ours(c, model, img), expected, atol=2e-5, rtol=1e-5)


def test_patches_in_c_p_q_order_fail_the_parity() -> None:
    """vllm-omni #6702: the [1152, 588] weight read as (c, p, q). The right order matches; that one does not."""
    c, model = NARROW, randomised(NARROW)
    img = image(70, 70)
    with torch.no_grad():
        expected = reference(c, model)(pixel_values=pixel_values(img)).last_hidden_state[0]
        pixels = resize(img, c.resize)  # [70, 70, 3]
        wrong = pixels.reshape(5, 14, 5, 14, 3).permute(0, 2, 4, 1, 3).reshape(25, 588)  # (c, p, q) in a patch
        ids = latent_ids(5, 5, 5)
        right = model.vision_model(patchify(pixels, 14), ids, [(1, 25)])
        bad = model.vision_model(wrong, ids, [(1, 25)])
    torch.testing.assert_close(right, expected, atol=2e-5, rtol=1e-5)
    assert (bad - expected).abs().max() > 0.1


def test_post_layernorm_is_applied() -> None:
    """vllm-omni #6702: post_layernorm skipped. Ours is SigLIP's post-LN output, not the encoder's."""
    c, model = TINY, randomised(TINY)
    img = image(56, 56)
    with torch.no_grad():
        hf = reference(c, model)
        out = hf(pixel_values=pixel_values(img), output_hidden_states=True)
        before = out.hidden_states[-1][0]  # [16, hidden]: the last layer's output, before post_layernorm
        got = ours(c, model, img)
        torch.testing.assert_close(got, hf.post_layernorm(before), atol=2e-5, rtol=1e-5)
    assert (got - before).abs().max() > 0.1


def test_a_2_to_1_image_gives_a_2_to_1_patch_grid() -> None:
    """vllm-omni #6702: every image stretched to 980 x 980. The resize keeps the aspect ratio."""
    assert target_size(1960, 980, Resize.preset("7b")) == (980, 490)  # 70 x 35 patches, not 70 x 70
    assert target_size(500, 1000, Resize.preset("7b")) == (490, 980)
    vit = VitEncoder.tiny(spec(), 0, "cpu")
    wide, tall = vit.encode([Call(1, "", (image(56, 112),)), Call(2, "", (image(112, 56),))])
    assert wide.shape == tall.shape == (8, TINY.llm_hidden)  # 2 x 4 and 4 x 2 patches, not 4 x 4
    _, ids, grid = prepare(image(56, 112), TINY.resize, TINY.patch, TINY.grid)
    assert grid == (2, 4)
    assert ids.tolist() == [0, 1, 2, 3, 4, 5, 6, 7]


def test_ids_extrapolate_from_the_top_left() -> None:
    """A smaller image uses the table's top-left block (row * grid + col), not rows spread over it."""
    _, ids, grid = prepare(image(56, 28), TINY.resize, TINY.patch, TINY.grid)
    assert grid == (4, 2)
    assert ids.tolist() == [0, 1, 4, 5, 8, 9, 12, 13]
    c, model = TINY, randomised(TINY)
    img = image(28, 28)  # 2 x 2 patches of the 4 x 4 grid
    top_left, spread = [0, 1, 4, 5], [0, 2, 8, 10]  # extrapolated; what interpolation would pick
    with torch.no_grad():
        got = ours(c, model, img)
        want = reference(c, model, side=2, rows=top_left)(pixel_values=pixel_values(img)).last_hidden_state[0]
        other = reference(c, model, side=2, rows=spread)(pixel_values=pixel_values(img)).last_hidden_state[0]
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-5)
    assert (got - other).abs().max() > 0.1


def test_the_stride_is_a_multiple_of_the_patch() -> None:
    """UniRL #194: a stride of 7 gives odd multiples of 7 that patchify cannot cut."""
    with pytest.raises(ValueError, match="not a multiple of the patch"):
        dataclasses.replace(TINY, resize=Resize(max_size=56, min_size=28, stride=7, max_pixels=5880))
    r = Resize.preset("7b")
    rng = np.random.default_rng(0)
    sizes = [(231, 231), (7, 4000), (4000, 7), (981, 223), (1, 1)] + [tuple(rng.integers(1, 3000, 2)) for _ in range(200)]
    for w, h in sizes:
        tw, th = target_size(int(w), int(h), r)
        assert tw % 14 == 0 and th % 14 == 0 and max(tw, th) <= 980, (w, h, tw, th)
        assert min(tw, th) >= 224 or max(tw, th) == 980, (w, h, tw, th)  # short only when the long edge binds
    with pytest.raises(ValueError, match="14-pixel patches"):
        patchify(torch.zeros(231, 224, 3), 14)


def test_resize_follows_bagels_rule() -> None:
    r = Resize.preset("7b")
    assert target_size(640, 480, r) == (644, 476)  # no scaling; each side to the nearest multiple of 14
    assert target_size(100, 50, r) == (448, 224)  # the shortest edge up to 224
    assert target_size(100, 2000, r) == (56, 980)  # up to 224 x 4480, then the long edge back to 980
    white = resize(torch.full((30, 40, 3), 255, dtype=torch.uint8), r)
    assert white.shape == (224, 294, 3) and torch.allclose(white, torch.ones(()))
    assert torch.equal(resize(torch.zeros(224, 224, 3, dtype=torch.uint8), r), -torch.ones(224, 224, 3))


def test_the_output_is_connector_plus_the_sincos_table() -> None:
    vit = VitEncoder.tiny(spec(), 0, "cpu")
    img = image(56, 28)
    (got,) = vit.encode([Call(1, "", (img,))])
    patches, ids, _ = prepare(img, TINY.resize, TINY.patch, TINY.grid, TINY.first)
    m = vit.model
    with torch.no_grad():
        want = m.connector(m.vision_model(patches, ids, [(1, 8)])) + sincos_2d(TINY.llm_hidden, TINY.grid)[ids]
    torch.testing.assert_close(got, want)
    assert torch.equal(m.vit_pos_embed.pos_embed, sincos_2d(64, 4)) and not m.vit_pos_embed.pos_embed.requires_grad


def test_images_in_one_batch_do_not_attend_across() -> None:
    vit = VitEncoder.tiny(spec(), 0, "cpu")
    imgs = [image(56, 56, 1), image(28, 56, 2), image(56, 56, 3), image(56, 28, 4), image(14, 56, 5)]
    together = vit.encode([Call(i, "", (img,)) for i, img in enumerate(imgs)])
    alone = [vit.encode([Call(i, "", (img,))])[0] for i, img in enumerate(imgs)]
    assert [t.shape[0] for t in together] == [16, 8, 16, 8, 4]
    for a, b in zip(together, alone, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    _, _, groups, order = pack([prepare(img, TINY.resize, TINY.patch, TINY.grid, TINY.first) for img in imgs])
    assert groups == [(1, 4), (2, 8), (2, 16)] and order == [4, 1, 3, 0, 2]
    changed = vit.encode([Call(i, "", (img,)) for i, img in enumerate([imgs[0], imgs[1], image(56, 56, 9)])])
    torch.testing.assert_close(changed[0], together[0])  # a neighbour in the same group changed, this did not
    assert vit.counters() == {"images": 13, "tokens": 52 + 52 + 40, "forwards": 7}


def test_encode_takes_the_image_the_runtime_hands_over() -> None:
    """runtime/http/media/decode.py decodes an image part into a uint8 tensor [H, W, 3]; that is what arrives."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image(30, 60).numpy()).save(buf, format="PNG")
    decoded = decode_image(buf.getvalue(), "image", MediaLimits())
    vit = VitEncoder.tiny(spec(), 0, "cpu")
    (out,) = vit.encode([Call(3, "", (decoded,))])
    assert out.shape == (8, 64) and out.dtype == torch.float32
    for bad in (decoded.float(), decoded[..., 0], buf.getvalue()):
        with pytest.raises(CallError, match="uint8 tensor") as err:
            vit.encode([Call(3, "", (decoded,)), Call(7, "", (bad,))])
        assert err.value.request == 7


def test_parameter_names_and_shapes_follow_the_checkpoint() -> None:
    with torch.device("meta"):
        model = BagelVit(VitConfig.preset("7b"))
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert shapes["vision_model.embeddings.patch_embedding.weight"] == (1152, 588)
    assert shapes["vision_model.embeddings.position_embedding.weight"] == (4900, 1152)
    assert shapes["vision_model.encoder.layers.25.self_attn.out_proj.weight"] == (1152, 1152)
    assert shapes["vision_model.encoder.layers.25.mlp.fc1.weight"] == (4304, 1152)
    assert "vision_model.encoder.layers.26.mlp.fc1.weight" not in shapes  # 26 of the checkpoint's 27 run
    assert shapes["vision_model.post_layernorm.weight"] == (1152,)
    assert shapes["connector.fc1.weight"] == (3584, 1152) and shapes["connector.fc2.weight"] == (3584, 3584)
    assert shapes["vit_pos_embed.pos_embed"] == (4900, 3584)
    layer = {k.split("layers.0.")[1] for k in shapes if ".layers.0." in k}
    assert layer == {f"{m}.{p}" for m in ("layer_norm1", "layer_norm2", "self_attn.q_proj", "self_attn.k_proj",
                                          "self_attn.v_proj", "self_attn.out_proj", "mlp.fc1", "mlp.fc2")
                     for p in ("weight", "bias")}


def test_tiny_component_warms_up_and_describes_itself() -> None:
    vit = VitEncoder.tiny(spec(), 0, "cpu")
    lines: list[str] = []
    vit.warm_up(lines.append)
    assert lines == ["encoded a 56x56 image"] and vit.counters() == {"images": 0, "tokens": 0, "forwards": 0}
    assert "tiny preset, random weights" in vit.describe()


def test_an_input_image_goes_through_the_vae_resize_before_the_vits() -> None:
    """BAGEL's interleave_inference resizes every input image with the VAE's rule (1024/512/16) first,
    understanding included: a 300 x 200 image reaches the ViT as 768 x 512, then 770 x 518."""
    seven = VitConfig.preset("7b")
    first = fit(300, 200, seven.first)
    assert first == (768, 512)
    assert target_size(*first, seven.resize) == (770, 518)
    assert target_size(300, 200, seven.resize) == (336, 224)  # the ViT rule alone gives another size
