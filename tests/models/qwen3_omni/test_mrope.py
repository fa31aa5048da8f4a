"""M-RoPE: the shared RotaryEmbedding's interleaved sections against transformers' thinker rotary,
and the thinker's part positions (positions.py) against `get_rope_index` for a prompt of text, an
image, an audio clip and a video."""

from __future__ import annotations

import pytest
import torch
from wgc.models.layers.rope import RotaryEmbedding, mrope_axes
from wgc.models.qwen3_omni import positions
from wgc.models.qwen3_omni.config import ThinkerConfig, VocabMap

from tests.models.qwen3_omni.thinker_reference import hf_config


def test_axes_interleave_the_checkpoints_sections() -> None:
    axes = mrope_axes((24, 20, 20)).tolist()  # 64 frequencies
    assert [j for j, a in enumerate(axes) if a == 1] == list(range(1, 60, 3))
    assert [j for j, a in enumerate(axes) if a == 2] == list(range(2, 60, 3))
    assert axes.count(0) == 24 and axes[60:] == [0, 0, 0, 0]
    assert mrope_axes((4, 2, 2)).tolist() == [0, 1, 2, 0, 1, 2, 0, 0]


@pytest.mark.parametrize("preset", ["tiny", "30b"])
def test_rotary_matches_transformers(preset: str) -> None:
    mod = pytest.importorskip("transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe")
    c = ThinkerConfig.preset(preset)
    hf = mod.Qwen3OmniMoeThinkerTextRotaryEmbedding(hf_config(c).text_config)
    ours = RotaryEmbedding(c.head_dim, c.rope_theta, mrope_section=c.mrope_section)
    pos = torch.randint(0, 5000, (3, 1, 17))  # distinct t, h, w per token
    cos, sin = hf(torch.zeros(1, dtype=torch.float32), pos)  # [1, 17, head_dim]
    our_cos, our_sin = ours(pos[:, 0])  # [17, head_dim]
    torch.testing.assert_close(our_cos, cos[0], atol=0, rtol=0)
    torch.testing.assert_close(our_sin, sin[0], atol=0, rtol=0)
    text = torch.arange(9)
    plain = RotaryEmbedding(c.head_dim, c.rope_theta)(text)  # equal t, h, w: plain RoPE
    torch.testing.assert_close(ours(text.expand(3, 9)), plain, atol=0, rtol=0)
    with pytest.raises(ValueError, match="positions \\[3"):
        ours(text)


def test_part_positions_match_get_rope_index() -> None:
    mod = pytest.importorskip("transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe")
    c = ThinkerConfig.preset("tiny")
    t, vocab = c.tokens, VocabMap(c)
    hf = mod.Qwen3OmniMoeThinkerForConditionalGeneration(hf_config(c))
    # text, an image (grid_thw 1 x 4 x 6: 1 x 2 x 3 tokens), text, audio (40 mel frames: 5 tokens),
    # a video (2 x 4 x 4: 2 x 2 x 2 tokens, 1 s per temporal patch), text
    layout = [("text", 5), ("image", (1, 4, 6)), ("text", 3), ("audio", 5), ("video", (2, 4, 4)), ("text", 4)]
    ids: list[int] = []
    ours = []
    pos = 0
    for kind, what in layout:
        if kind == "text":
            ids += [ord("a")] * what  # type: ignore[operator]
            placed = positions.text(pos, what)  # type: ignore[arg-type]
        elif kind == "audio":
            ids += [t.audio_start, *[t.audio] * what, t.audio_end]  # type: ignore[list-item]
            placed = positions.audio(pos, what)  # type: ignore[arg-type]
        else:
            grid = positions.merged_grid(what, c.spatial_merge)  # type: ignore[arg-type]
            pad = t.image if kind == "image" else t.video
            ids += [t.vision_start, *[pad] * (grid[0] * grid[1] * grid[2]), t.vision_end]
            placed = positions.vision(pos, grid, c.position_per_second)  # an image: one frame; the video: 1 s a patch
        ours.append(placed.positions)
        pos = placed.next
    input_ids = torch.tensor([[vocab.to_model(i) for i in ids]])
    expected, delta = hf.get_rope_index(input_ids, image_grid_thw=torch.tensor([[1, 4, 6]]),
                                        video_grid_thw=torch.tensor([[2, 4, 4]]),
                                        attention_mask=torch.ones_like(input_ids), audio_seqlens=torch.tensor([40]),
                                        second_per_grids=torch.tensor([1.0]))
    got = torch.cat(ours, dim=1)  # [3, T]
    torch.testing.assert_close(got, expected[:, 0].float(), atol=0, rtol=0)
    assert pos == input_ids.shape[1] + int(delta)  # the next text position: decode's, with rope_deltas
    # the video's frames are 13 positions apart (position_id_per_seconds), its rows and columns one
    video = ours[4][:, 1:-1]
    assert video[0].unique().tolist() == [float(video[0, 0]), float(video[0, 0]) + 13]


def test_merged_grid_rejects_an_odd_grid() -> None:
    with pytest.raises(ValueError, match="multiples of the spatial merge size 2"):
        positions.merged_grid((1, 3, 4), 2)
