"""The V-JEPA 2 encoder and masked predictor against transformers' VJEPA2Model on the same tiny random
weights: a clip encoded jointly, a frame alone, the masked predictor's output; the AC path encodes
each frame alone and layer-norms it (not the clip's tubelet tokens); the preprocessing by its
closed form."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from wgc.models.vjepa2_ac.video import MEAN, STD, prepare
from wgc.runtime.components.base import CallError

from tests.models.vjepa2_ac.helpers import call
from tests.models.vjepa2_ac.hf import hf_encode, hf_model, tiny_encoder, tiny_masked


def pixels(t: int, seed: int) -> torch.Tensor:
    return torch.randn(1, t, 3, 64, 64, generator=torch.Generator().manual_seed(seed))


def video(t: int, seed: int, h: int = 72, w: int = 96) -> torch.Tensor:
    return torch.randint(0, 256, (t, h, w, 3), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8)


def test_the_encoder_equals_transformers_on_a_clip_and_on_one_frame() -> None:
    net = tiny_encoder().net
    for t in (4, 1):
        x = pixels(t, seed=t)
        with torch.no_grad():
            got = net(x)
        want = hf_encode(x)
        assert got.shape == want.shape == (1, 16 * max(1, t // 2), 96)
        assert torch.allclose(got, want, atol=1e-5), float((got - want).abs().max())


def test_the_masked_predictor_equals_transformers() -> None:
    x = pixels(4, seed=5)
    with torch.no_grad():
        want = hf_model()(x).predictor_output.last_hidden_state
    z = hf_encode(x)[0]
    (got,) = tiny_masked().predict([call(1, z)])
    assert got.shape == want[0].shape == (32, 96)
    assert torch.allclose(got, want[0], atol=1e-5), float((got - want[0]).abs().max())


def test_the_preprocessing_resizes_the_short_edge_crops_the_centre_and_normalises() -> None:
    # transformers' VJEPA2VideoProcessor needs torchvision, which this environment lacks: the closed form
    img = torch.zeros(64, 128, 3, dtype=torch.uint8)
    img[:, :32, 0] = 255  # red left and right bands, outside the centre crop
    img[:, 96:, 0] = 255
    img[:, 32:96, 2] = 200  # a blue middle, which the crop keeps
    got = prepare(img, 64)  # short edge 64 -> int(64 * 256 / 224) = 73, then 64 x 64 from the centre
    assert got.shape == (1, 3, 64, 64)
    want = (torch.tensor([0.0, 0.0, 200 / 255]) - torch.tensor(MEAN)) / torch.tensor(STD)
    assert torch.allclose(got[0, :, :, 8:-8], want[:, None, None].expand(3, 64, 48), atol=1e-5)
    clip = video(3, seed=1)
    assert prepare(clip, 64).shape == (3, 3, 64, 64)


def test_frames_encode_each_frame_alone_layer_normed() -> None:
    enc = tiny_encoder()
    clip = video(3, seed=2)
    (tokens,) = enc.frames([call(1, clip)])
    assert tokens.shape == (3 * 16, 96)
    x = prepare(clip, 64)
    for t in range(3):
        alone = F.layer_norm(hf_encode(x[t:t + 1][None])[0], (96,))  # frame t, repeated to a tubelet
        assert torch.allclose(tokens[16 * t:16 * (t + 1)], alone, atol=1e-5), t
    (joint,) = enc.encode([call(2, clip[:2])])
    assert joint.shape == (16, 96) and not torch.allclose(joint, tokens[:16], atol=0.1)  # two frames a tubelet
    (goal,) = enc.frame([call(3, clip[1])])
    assert torch.allclose(goal, tokens[16:32], atol=1e-5)


def test_a_bad_clip_fails_its_request_naming_the_input() -> None:
    enc = tiny_encoder()
    with pytest.raises(CallError, match=r"`clip`.*\[T, H, W, 3\]"):
        enc.frames([call(1, torch.zeros(4, 64, 64))])
    with pytest.raises(CallError, match="smaller than 16 px"):
        enc.frame([call(1, torch.zeros(8, 8, 3, dtype=torch.uint8))])
