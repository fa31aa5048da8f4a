"""V-JEPA 2's 3D RoPE (models/vjepa2_ac/rope.py) against its closed form, element by element: the
checkpoint's layout tiles the cos/sin tables (dim k turns by frequency k mod D/2), so the pair
(2j, 2j+1) mixes two frequencies; an interleaved ("fixed") layout is a different function. And the AC
predictor's positions: patches by (frame, row, col), the action and state tokens by the frame only."""

from __future__ import annotations

import math

import torch
from wgc.models.vjepa2_ac.ac_net import ACPredictorNet
from wgc.models.vjepa2_ac.config import ACConfig, rope_part
from wgc.models.vjepa2_ac.rope import Rope3D, grid_positions


def closed_form(x: list[float], angle_of: list[float]) -> list[float]:
    """One part of D dims at one position: out[k] = x[k] cos(a_{k mod D/2}) + y[k] sin(a_{k mod D/2}),
    y[2j] = -x[2j+1], y[2j+1] = x[2j]."""
    d = len(x)
    out = []
    for k in range(d):
        a = angle_of[k % (d // 2)]
        y = -x[k + 1] if k % 2 == 0 else x[k - 1]
        out.append(x[k] * math.cos(a) + y * math.sin(a))
    return out


def test_the_rotation_matches_its_closed_form_part_by_part() -> None:
    head_dim = 32  # 3 parts of 10 dims, 2 left unrotated
    part = rope_part(head_dim)
    assert part == 10 and rope_part(64) == 20
    pos = torch.tensor([[3.0, 1.0, 2.0], [0.0, 0.0, 0.0], [7.0, 3.0, 0.0]])
    x = torch.randn(3, 2, head_dim, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    got = Rope3D(pos, head_dim, dtype=torch.float64)(x)
    for n in range(3):
        for h in range(2):
            for axis in range(3):
                angles = [float(pos[n, axis]) / 10000 ** (i / (part / 2)) for i in range(part // 2)]
                want = closed_form(x[n, h, axis * part:(axis + 1) * part].tolist(), angles)
                assert torch.allclose(got[n, h, axis * part:(axis + 1) * part], torch.tensor(want, dtype=torch.float64),
                                      rtol=0, atol=1e-12)
            assert torch.equal(got[n, h, 3 * part:], x[n, h, 3 * part:])  # the rest is not rotated
    assert torch.equal(got[1], x[1])  # position 0 is the identity


def test_the_tiled_layout_is_not_the_interleaved_one() -> None:
    """The closed form above would pass an interleaved table only if the two agreed: they do not."""
    part, head_dim = 10, 32
    x = torch.randn(1, 1, head_dim, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    got = Rope3D(torch.tensor([[4.0, 0.0, 0.0]]), head_dim)(x)[0, 0, :part]
    angles = [4.0 / 10000 ** (i / 5) for i in range(5)]
    v = x[0, 0, :part].tolist()
    interleaved = [v[k] * math.cos(angles[k // 2]) + (-v[k + 1] if k % 2 == 0 else v[k - 1]) * math.sin(angles[k // 2])
                   for k in range(part)]
    assert float((got - torch.tensor(interleaved, dtype=torch.float64)).abs().max()) > 0.1


def test_ac_positions_rotate_patches_by_frame_row_col_and_the_action_state_tokens_by_frame() -> None:
    c = ACConfig.preset("tiny")
    pos = ACPredictorNet(c).positions(first_frame=5, frames=2)  # [2 * 18, 3]
    assert pos.shape == (2 * c.block, 3)
    for f in range(2):
        block = pos[f * c.block:(f + 1) * c.block]
        assert block[:2].tolist() == [[5.0 + f, 0.0, 0.0]] * 2
        assert torch.equal(block[2:], grid_positions(1, c.grid, c.grid, first_frame=5 + f))
    assert pos[2 + 4 * 2 + 3].tolist() == [5.0, 2.0, 3.0]  # frame 5, row 2, col 3
