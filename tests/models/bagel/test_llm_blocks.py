"""BAGEL's LLM component: image blocks at one rope position, velocity queries that write nothing,
and both against a dense recompute of the whole sequence with BAGEL's block mask (models-wave2.md
§1.2, §1.8): context causal, each image block bidirectional, latents through the gen expert."""

from __future__ import annotations

import pytest
import torch
from wgc.models.bagel.config import IM_END, IM_START, VISION_END, VISION_START
from wgc.models.bagel.latents import latent_ids
from wgc.runtime.components.base import CallError
from wgc.runtime.engines.kv_engine import Write

from tests.models.bagel.helpers import DenseAttention, block_mask, block_positions, call, tiny_llm


def state(m, request: int, label: str) -> tuple[int, int]:
    seq = m.kv.seq(request, label)
    return m.kv.length(request, label), 0 if seq is None else seq.position


class Dense:
    """The same model recomputed over the whole sequence, segment by segment."""

    def __init__(self, m) -> None:
        self.m = m
        self.rows: list[torch.Tensor] = []
        self.gen: list[torch.Tensor] = []
        self.segments: list[tuple[int, bool]] = []

    def ids(self, qwen_ids: list[int]) -> torch.Tensor:
        return self.m.language_model.embed(torch.tensor([self.m.map.to_model(t) for t in qwen_ids]))

    def text(self, text: bytes) -> None:
        self._add(self.ids([IM_START, *text, IM_END]), False, block=False)

    def tokens(self, qwen_ids: list[int]) -> None:
        self._add(self.ids(qwen_ids), False, block=False)

    def block(self, middle: torch.Tensor, gen: bool) -> None:
        start, end = self.ids([VISION_START, VISION_END])
        rows = torch.cat([start[None], middle, end[None]])
        self._add(rows, torch.tensor([False] + [gen] * middle.shape[0] + [False]), block=True)

    def _add(self, rows: torch.Tensor, gen: bool | torch.Tensor, block: bool) -> None:
        self.rows.append(rows)
        self.gen.append(gen if isinstance(gen, torch.Tensor) else torch.full((rows.shape[0],), gen))
        self.segments.append((rows.shape[0], block))

    def hidden(self) -> torch.Tensor:
        attn = DenseAttention(block_mask(self.segments))
        with torch.no_grad():
            return self.m.language_model(torch.cat(self.rows), block_positions(self.segments), attn, torch.cat(self.gen))


def test_velocity_and_decode_equal_a_dense_recompute() -> None:
    m = tiny_llm(seed=11)
    gen = torch.Generator().manual_seed(1)
    vae, vit = torch.randn(4, 64, generator=gen), torch.randn(6, 64, generator=gen)
    m.prefill_text([call(1, "main", "a cat")])
    m.prefill_vae([call(1, "main", vae)])
    m.prefill_vit([call(1, "main", vit)])
    m.prefill_text([call(1, "main", "on a mat")])
    z = m.init_latents([call(1, "", 128, 256)])[0]  # an 8 x 16 token grid
    v = m.velocity([call(1, "main", z, 0.7)])[0]

    dense = Dense(m)
    dense.text(b"a cat")
    dense.block(vae, gen=True)
    dense.block(vit, gen=False)
    dense.text(b"on a mat")
    with torch.no_grad():
        dense.block(m.adapter.embed(z, 0.7, latent_ids(8, 16, 16)), gen=True)
        expect = m.adapter.velocity(dense.hidden()[-129:-1]).to(v.dtype)  # the tiny preset computes in float64
    assert v.shape == (128, 64) and torch.allclose(v, expect, atol=2e-5, rtol=1e-4)

    # the next token after the images sits at position 7 + 6 + 1 + 1 + 10, not at the KV length
    logits = m.text_logits([Write(1, "main", [m.map.to_model(IM_START)], 1)])[0]
    dense.rows.pop(), dense.gen.pop(), dense.segments.pop()
    dense.tokens([IM_START])
    with torch.no_grad():
        expect_logits = m.language_model.logits(dense.hidden()[-1]).float()  # text_logits are float32
    assert torch.allclose(logits, expect_logits, atol=2e-5, rtol=1e-4)


def test_velocity_over_an_empty_label_is_the_block_alone() -> None:
    m = tiny_llm(seed=12)
    z = m.init_latents([call(3, "", 256, 256)])[0]
    v = m.velocity([call(3, "cfg_text", z, 0.3)])[0]
    dense = Dense(m)
    with torch.no_grad():
        dense.block(m.adapter.embed(z, 0.3, latent_ids(16, 16, 16)), gen=True)
        expect = m.adapter.velocity(dense.hidden()[1:-1]).to(v.dtype)
    assert torch.allclose(v, expect, atol=2e-5, rtol=1e-4)
    assert state(m, 3, "cfg_text") == (0, 0) and m.kv.pages.used_pages == 0


def test_image_blocks_take_one_position() -> None:
    m = tiny_llm(seed=13)
    m.prefill_text([call(1, "main", "ab")])
    assert state(m, 1, "main") == (4, 4)
    m.prefill_vit([call(1, "main", torch.randn(5, 64))])
    assert state(m, 1, "main") == (11, 5)  # KV length +N+2, position +1
    m.prefill_vae([call(1, "main", torch.randn(3, 64))])
    assert state(m, 1, "main") == (16, 6)
    m.prefill_text([call(1, "main", "c")])
    assert state(m, 1, "main") == (19, 9)
    assert m.decode([call(1, "main", IM_START, 0.0)]) and state(m, 1, "main") == (20, 10)


def test_velocity_writes_nothing() -> None:
    m = tiny_llm(seed=14)
    m.prefill_text([call(1, "main", "a dog"), call(1, "cfg_img", "a dog")])
    m.prefill_vit([call(1, "main", torch.randn(7, 64))])
    m.fork(1, "cfg_text", "main")
    before = {lab: (state(m, 1, lab), list(m.kv.pages.page_table(1, lab))) for lab in ("main", "cfg_text", "cfg_img")}
    used, k, v = m.kv.pages.used_pages, m.kv.storage.k.clone(), m.kv.storage.v.clone()
    z = m.init_latents([call(1, "", 256, 256)])[0]
    out = m.velocity([call(1, lab, z, 0.5) for lab in ("main", "cfg_text", "cfg_img")])  # one batched forward
    assert [o.shape for o in out] == [(256, 64)] * 3
    after = {lab: (state(m, 1, lab), list(m.kv.pages.page_table(1, lab))) for lab in ("main", "cfg_text", "cfg_img")}
    assert after == before and m.kv.pages.used_pages == used
    assert torch.equal(m.kv.storage.k, k) and torch.equal(m.kv.storage.v, v)
    alone = [m.velocity([call(1, lab, z, 0.5)])[0] for lab in ("main", "cfg_text", "cfg_img")]
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(out, alone))
    assert not torch.allclose(out[0], out[2], atol=1e-3)  # cfg_img holds no image: another context


def test_block_calls_batch_across_requests() -> None:
    gen = torch.Generator().manual_seed(2)
    xs = {1: torch.randn(5, 64, generator=gen), 2: torch.randn(9, 64, generator=gen)}
    together, apart = tiny_llm(seed=15), tiny_llm(seed=15)
    for m in (together, apart):
        m.prefill_text([call(1, "main", "one"), call(2, "main", "second prompt")])
    together.prefill_vae([call(r, "main", x) for r, x in xs.items()])
    for r, x in xs.items():
        apart.prefill_vae([call(r, "main", x)])
    for r in xs:
        k1, v1 = together.kv._read(r, "main")
        k2, v2 = apart.kv._read(r, "main")
        assert torch.allclose(k1, k2, atol=1e-5) and torch.allclose(v1, v2, atol=1e-5)
    z = {r: together.init_latents([call(r, "", 256, 256)])[0] for r in xs}
    apart.init_latents([call(r, "", 256, 256) for r in xs])
    both = together.velocity([call(r, "main", z[r], 0.9) for r in xs])
    for r, got in zip(xs, both):
        assert torch.allclose(got, apart.velocity([call(r, "main", z[r], 0.9)])[0], atol=1e-5)


def test_bad_block_inputs_fail_their_request() -> None:
    m = tiny_llm(seed=16)
    with pytest.raises(CallError, match=r"`x` must be a tensor \[N, 64\]"):
        m.prefill_vit([call(4, "main", torch.randn(3, 32))])
    with pytest.raises(CallError, match=r"`z` must be a tensor \[N, 64\]"):
        m.velocity([call(4, "main", torch.randn(3), 0.5)])
    m.init_latents([call(4, "", 256, 256)])
    with pytest.raises(CallError, match="do not match"):
        m.velocity([call(4, "main", torch.randn(100, 64), 0.5)])
