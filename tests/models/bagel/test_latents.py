"""The latent adapter against closed forms: patch order, position ids, the sin-cos tables, the
timestep embedding and LatentAdapter's sum (models-wave2.md §1.4)."""

from __future__ import annotations

import math

import pytest
import torch
from wgc.models.bagel.latents import (
    LatentAdapter,
    PositionTable,
    TimestepEmbedder,
    latent_ids,
    patchify,
    sincos_2d,
    timestep_features,
    unpatchify,
)


def test_patchify_round_trip_and_order() -> None:
    z = torch.randn(16, 6, 10)  # [C, h*2, w*2]: a 3 x 5 token grid
    tokens = patchify(z)
    assert tokens.shape == (15, 64)
    assert torch.equal(unpatchify(tokens, 3, 5), z)
    for h, w, p, q, c in [(0, 0, 0, 0, 0), (2, 4, 1, 1, 15), (1, 3, 0, 1, 7), (2, 0, 1, 0, 3)]:
        assert tokens[h * 5 + w, (p * 2 + q) * 16 + c] == z[c, 2 * h + p, 2 * w + q]
    # BAGEL's own formula, "chpwq->hwpqc"
    ref = torch.einsum("chpwq->hwpqc", z.reshape(16, 3, 2, 5, 2)).reshape(-1, 64)
    assert torch.equal(tokens, ref)


def test_patchify_refuses_odd_shapes() -> None:
    with pytest.raises(ValueError, match="2x2 patches"):
        patchify(torch.zeros(16, 5, 4))
    with pytest.raises(ValueError, match="expected tokens"):
        unpatchify(torch.zeros(14, 64), 3, 5)


def test_latent_ids_top_left_of_the_grid() -> None:
    assert latent_ids(2, 3, 8).tolist() == [0, 1, 2, 8, 9, 10]
    assert latent_ids(64, 64, 64).tolist() == list(range(4096))
    with pytest.raises(ValueError, match="does not fit"):
        latent_ids(3, 9, 8)


def test_sincos_2d_closed_form() -> None:
    dim, grid = 16, 5
    table = sincos_2d(dim, grid)
    assert table.shape == (25, 16) and table.dtype == torch.float32
    quarter = dim // 4
    for row, col in [(0, 0), (1, 3), (4, 2), (3, 4)]:
        entry = table[row * grid + col].double()
        for i in range(quarter):
            omega = 10000 ** (-i / quarter)
            expect = [math.sin(col * omega), math.cos(col * omega), math.sin(row * omega), math.cos(row * omega)]
            got = [entry[i], entry[quarter + i], entry[2 * quarter + i], entry[3 * quarter + i]]
            assert torch.allclose(torch.tensor(got, dtype=torch.float64), torch.tensor(expect, dtype=torch.float64),
                                  atol=1e-6)


def test_position_table_is_frozen_and_indexed() -> None:
    table = PositionTable(4, 8)
    assert not table.pos_embed.requires_grad
    assert list(dict(table.named_parameters()).keys()) == ["pos_embed"]
    ids = torch.tensor([5, 0, 15])
    assert torch.equal(table(ids), sincos_2d(8, 4)[ids])


def test_timestep_features_closed_form() -> None:
    t = torch.tensor([0.0, 0.25, 1.0])
    feats = timestep_features(t, 256)
    assert feats.shape == (3, 256)
    assert torch.equal(feats[0], torch.cat([torch.ones(128), torch.zeros(128)]))  # t = 0: cos 1, sin 0
    for j in (0, 1, 64, 127):
        f = math.exp(-math.log(10000) * j / 128)
        assert feats[1, j].item() == pytest.approx(math.cos(0.25 * f), abs=1e-6)  # t itself, not 1000 t
        assert feats[1, 128 + j].item() == pytest.approx(math.sin(0.25 * f), abs=1e-6)


def test_timestep_embedder_is_its_mlp() -> None:
    emb = TimestepEmbedder(32)
    assert sorted(k for k in emb.state_dict()) == ["mlp.0.bias", "mlp.0.weight", "mlp.2.bias", "mlp.2.weight"]
    t = torch.tensor([0.3, 0.9])
    x = timestep_features(t)
    ref = emb.mlp[2](torch.nn.functional.silu(emb.mlp[0](x)))
    assert torch.allclose(emb(t), ref)


def test_latent_adapter_sum_and_names() -> None:
    torch.manual_seed(0)
    adapter = LatentAdapter(32, grid=4)
    names = set(adapter.state_dict())
    assert {"vae2llm.weight", "vae2llm.bias", "llm2vae.weight", "llm2vae.bias", "time_embedder.mlp.0.weight",
            "time_embedder.mlp.2.bias", "latent_pos_embed.pos_embed"} <= names
    tokens, ids = torch.randn(6, 64), latent_ids(2, 3, 4)
    out = adapter.embed(tokens, 0.5, ids)
    ref = adapter.vae2llm(tokens) + adapter.time_embedder(torch.full((6,), 0.5)) + sincos_2d(32, 4)[ids]
    assert out.shape == (6, 32) and torch.allclose(out, ref, atol=1e-6)
    hidden = torch.randn(6, 32)
    assert torch.allclose(adapter.velocity(hidden), hidden @ adapter.llm2vae.weight.T + adapter.llm2vae.bias)
