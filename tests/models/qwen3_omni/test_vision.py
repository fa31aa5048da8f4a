"""Qwen3-Omni's `vision_enc`: the resize rule and patches against transformers' Qwen2-VL image
processor as the checkpoint configures it, the tower and each deepstack feature against transformers
5.24 `Qwen3OmniMoeVisionEncoder` on the same random weights, videos, and bad inputs failing their own
call only."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
import torch
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil, smart_resize
from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import Qwen3OmniMoeVisionEncoderConfig
from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import (
    Qwen3OmniMoePreTrainedModelForConditionalGeneration,
    Qwen3OmniMoeVisionEncoder,
)
from wgc.models.qwen3_omni.vision import VisionEncoder, VisionTower, random_tower
from wgc.models.qwen3_omni.vision_config import ResizeBounds, VisionConfig
from wgc.models.qwen3_omni.vision_transform import llm_positions, prepare_image, prepare_video
from wgc.runtime.components.base import Call, CallError

from wgc.plan.model import ComponentSpec

TINY = VisionConfig.preset("tiny")
# three blocks, deepstack from the last two, head_dim 16: more of the real tower's structure
DEEPER = dataclasses.replace(TINY, name="deeper", depth=3, deepstack=(1, 2))


def spec() -> ComponentSpec:
    return ComponentSpec("vision_enc", "wgc.models.qwen3_omni.VisionEncoder", "stateless", [], {}, [],
                         {"dtype": "bf16"}, [0], 1, {})


def image(height: int, width: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (height, width, 3), dtype=torch.uint8, generator=g)  # [H, W, 3] u8


def processor(bounds: ResizeBounds) -> Qwen2VLImageProcessorPil:
    """The checkpoint's image processor (preprocessor_config.json: patch 16, temporal 2, merge 2, mean and
    std 0.5) with these pixel bounds."""
    return Qwen2VLImageProcessorPil(min_pixels=bounds.min_pixels, max_pixels=bounds.max_pixels, patch_size=16,
                                    temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3)


def randomised(c: VisionConfig, seed: int = 1) -> VisionTower:
    """Random weights with LayerNorm scales and biases off their defaults and a position table of unit
    scale, so that a skipped norm or a misplaced position shows."""
    model = random_tower(c, seed).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.copy_(1 + 0.2 * torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(0.2 * torch.randn(m.bias.shape, generator=g))
    return model


def reference(c: VisionConfig, model: VisionTower) -> Qwen3OmniMoeVisionEncoder:
    hf = Qwen3OmniMoeVisionEncoder._from_config(Qwen3OmniMoeVisionEncoderConfig(**c.hf_config()),
                                                attn_implementation="sdpa").eval()
    hf.load_state_dict(model.state_dict(), strict=True)  # the checkpoint's names, less `thinker.visual.`
    return hf


def test_resize_rule_is_smart_resize() -> None:
    sides = [1, 7, 31, 32, 33, 50, 100, 224, 333, 640, 1000, 2000, 5000]
    for bounds in (VisionConfig().image, VisionConfig().video, TINY.image):
        for h, w in itertools.product(sides, sides):
            if max(h, w) / min(h, w) > 200:
                with pytest.raises(ValueError, match="aspect ratio"):
                    bounds.size(h, w)
                continue
            assert bounds.size(h, w) == smart_resize(h, w, 32, bounds.min_pixels, bounds.max_pixels)
    assert VisionConfig().image.size(1080, 1920) == (1088, 1920)  # multiples of patch x merge = 32


@pytest.mark.parametrize("c", [TINY, VisionConfig()], ids=lambda c: c.name)
@pytest.mark.parametrize("size", [(50, 70), (20, 30), (300, 451), (17, 900), (128, 128)])
def test_patches_are_the_processor_s(c: VisionConfig, size: tuple[int, int]) -> None:
    img = image(*size)
    ref = processor(c.image)(images=[img.numpy()], return_tensors="pt")
    ours = prepare_image(img, c)
    assert [list(ours.grid)] == ref["image_grid_thw"].tolist()
    torch.testing.assert_close(ours.patches, ref["pixel_values"], rtol=0, atol=0)


@pytest.mark.parametrize("c", [TINY, DEEPER], ids=lambda c: c.name)
@pytest.mark.parametrize("grids", [[(1, 4, 6)], [(2, 8, 4)], [(1, 4, 6), (3, 6, 8), (1, 2, 2)]], ids=str)
def test_tower_and_each_deepstack_feature_match_transformers(c: VisionConfig, grids: list) -> None:
    model = randomised(c)
    hf = reference(c, model)
    patches = torch.randn(sum(t * h * w for t, h, w in grids), c.patch_features,
                          generator=torch.Generator().manual_seed(len(grids)))
    with torch.no_grad():
        ref = hf(patches, grid_thw=torch.tensor(grids))
        embeds, deepstack = model(patches, grids)
    torch.testing.assert_close(embeds, ref.pooler_output, rtol=1e-5, atol=1e-5)
    assert len(deepstack) == len(ref.deepstack_features) == len(c.deepstack)
    for ours, theirs in zip(deepstack, ref.deepstack_features):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


def test_encode_image_matches_the_processor_and_tower() -> None:
    enc = VisionEncoder(spec(), 0, "cpu", config=DEEPER, seed=2)
    hf = reference(DEEPER, enc.model)
    imgs = [image(50, 70, 1), image(300, 451, 2), image(64, 64, 3)]
    outs = enc.encode_image([Call(i, "", (img,)) for i, img in enumerate(imgs)])
    ref = processor(DEEPER.image)(images=[i.numpy() for i in imgs], return_tensors="pt")
    with torch.no_grad():
        theirs = hf(ref["pixel_values"], grid_thw=ref["image_grid_thw"])
    sizes = (ref["image_grid_thw"].prod(-1) // 4).tolist()
    for k, out in enumerate(outs):
        assert out["grid_thw"].tolist() == ref["image_grid_thw"][k].tolist() and out["second_per_grid"] == 1.0
        assert out["kind"] == "image"
        assert out["embeds"].shape == (sizes[k], 64) and out["deepstack"].shape == (2, sizes[k], 64)
    torch.testing.assert_close(torch.cat([o["embeds"] for o in outs]), theirs.pooler_output, rtol=1e-5, atol=1e-5)
    for j, feature in enumerate(theirs.deepstack_features):
        torch.testing.assert_close(torch.cat([o["deepstack"][j] for o in outs]), feature, rtol=1e-5, atol=1e-5)


def test_batched_calls_equal_each_alone() -> None:
    enc = VisionEncoder(spec(), 0, "cpu", config=DEEPER, seed=4)
    imgs = [image(50, 70, 1), image(128, 96, 2), image(50, 70, 3)]
    together = enc.encode_image([Call(i, "", (img,)) for i, img in enumerate(imgs)])
    for img, out in zip(imgs, together):
        alone = enc.encode_image([Call(0, "", (img,))])[0]
        for key in ("embeds", "deepstack"):
            torch.testing.assert_close(out[key], alone[key], rtol=1e-5, atol=1e-5)


def test_video_patches_are_frames_in_time_order() -> None:
    """A video's temporal patch holds its two frames as the Conv3d's time axis; three frames pad to four
    with the last repeated; two equal frames encode as the image does."""
    frames = torch.stack([image(64, 96, s) for s in range(3)])  # [3, H, W, 3]
    video = prepare_video({"frames": frames, "fps": 4.0}, TINY)
    assert video.grid == (2, 4, 6) and video.second_per_grid == 0.5
    per_patch = video.patches.view(2, 24, 3, 2, 16, 16)  # [t, h*w, C, T, p, p]
    for slot, frame in [(0, 0), (1, 1), (2, 2), (3, 2)]:
        still = prepare_image(frames[frame], TINY).patches.view(24, 3, 2, 16, 16)[:, :, 0]  # [h*w, C, p, p]
        torch.testing.assert_close(per_patch[slot // 2, :, :, slot % 2], still, rtol=0, atol=0)
    enc = VisionEncoder(spec(), 0, "cpu", config=DEEPER, seed=5)
    pair = enc.encode_video([Call(0, "", (frames[:1].expand(2, -1, -1, -1),))])[0]
    still = enc.encode_image([Call(0, "", (frames[0],))])[0]
    torch.testing.assert_close(pair["embeds"], still["embeds"], rtol=0, atol=0)
    assert pair["second_per_grid"] == 2 / TINY.video_fps and pair["kind"] == "video"


def test_encode_video_matches_transformers() -> None:
    enc = VisionEncoder(spec(), 0, "cpu", config=DEEPER, seed=6)
    hf = reference(DEEPER, enc.model)
    frames = torch.stack([image(60, 100, s) for s in range(5)])  # resized to 64 x 96, padded to 6 frames
    out = enc.encode_video([Call(0, "", (frames,))])[0]
    prepared = prepare_video(frames, DEEPER)
    with torch.no_grad():
        ref = hf(prepared.patches, grid_thw=torch.tensor([prepared.grid]))
    assert out["grid_thw"].tolist() == [3, 4, 6]
    torch.testing.assert_close(out["embeds"], ref.pooler_output, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out["deepstack"], torch.stack(ref.deepstack_features), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("grid, seconds", [((1, 4, 6), 1.0), ((3, 8, 4), 0.5), ((2, 2, 2), 2.0)])
def test_llm_positions_are_get_rope_index_s(grid: tuple[int, int, int], seconds: float) -> None:
    t_index = (torch.arange(grid[0]) * seconds * 13).float()
    ref = Qwen3OmniMoePreTrainedModelForConditionalGeneration.get_llm_pos_ids_for_vision(
        None, 0, 0, 2, t_index, torch.tensor([grid[1]]), torch.tensor([grid[2]]))
    torch.testing.assert_close(llm_positions(grid, 2, seconds, 13), ref, rtol=0, atol=0)


def test_the_30b_tower_has_the_checkpoint_names_and_shapes() -> None:
    c = VisionConfig()
    with torch.device("meta"):
        ours = VisionTower(c)
        hf = Qwen3OmniMoeVisionEncoder._from_config(Qwen3OmniMoeVisionEncoderConfig(**c.hf_config()))
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in hf.state_dict().items()}
    assert VisionConfig.from_hf(c.hf_config()) == dataclasses.replace(c, name="checkpoint")
    assert "merger_list.2.mlp.2.weight" in ours.state_dict() and ours.merger.mlp[2].out_features == 2048


@pytest.mark.parametrize("entry, bad, says", [
    ("encode_image", "a cat", "got str"),
    ("encode_image", torch.zeros(32, 32, 3), "got torch.float32 [32, 32, 3]"),
    ("encode_image", torch.zeros(32, 32, dtype=torch.uint8), "got torch.uint8 [32, 32]"),
    ("encode_image", np.zeros((32, 32, 4), dtype=np.uint8), "got torch.uint8 [32, 32, 4]"),
    ("encode_image", torch.zeros(16000), "got torch.float32 [16000]"),  # audio, not an image
    ("encode_image", image(2, 500), "aspect ratio is over 200"),
    ("encode_video", image(32, 32), "a video is a uint8 tensor [T, H, W, 3]"),
    ("encode_video", {"frames": torch.zeros(2, 32, 32, 3, dtype=torch.uint8), "fps": 0}, "fps is a positive"),
])
def test_bad_input_fails_its_own_call(entry: str, bad: object, says: str) -> None:
    enc = VisionEncoder.tiny(spec(), 0, "cpu")
    good = image(64, 64) if entry == "encode_image" else torch.stack([image(64, 64)] * 2)
    with pytest.raises(CallError) as err:
        getattr(enc, entry)([Call(3, "", (good,)), Call(5, "", (bad,))])
    assert err.value.request == 5 and str(err.value).startswith(f"vision_enc.{entry}: ") and says in str(err.value)
    assert getattr(enc, entry)([Call(3, "", (good,))])[0]["embeds"].shape == (4, 64)  # the rest runs again


def test_warm_up_resets_the_counters() -> None:
    enc = VisionEncoder.tiny(spec(), 0, "cpu")
    lines: list[str] = []
    enc.warm_up(lines.append)
    assert lines and enc.counters() == {"images": 0, "videos": 0, "tokens": 0, "forwards": 0}
    assert "deepstack [0, 1]" in enc.describe()


def test_the_thinker_reads_what_the_encoder_returns() -> None:
    """The contract with thinker.prefill_embeds (thinker_media.py): grid, deepstack levels, time step."""
    from wgc.models.qwen3_omni.config import ThinkerConfig
    from wgc.models.qwen3_omni.thinker_media import parse

    enc = VisionEncoder.tiny(spec(), 0, "cpu")
    thinker = ThinkerConfig.preset("tiny")
    still = parse(enc.encode_image([Call(0, "", (image(100, 60),))])[0], thinker)
    assert (still.kind, still.grid, tuple(still.deepstack.shape)) == ("image", (1, 3, 2), (2, 6, 64))
    frames = {"frames": torch.stack([image(64, 64, s) for s in range(5)]), "fps": 1.0}
    clip = parse(enc.encode_video([Call(0, "", (frames,))])[0], thinker)
    assert (clip.kind, clip.grid, clip.second_per_grid) == ("video", (3, 2, 2), 2.0)
