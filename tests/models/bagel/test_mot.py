"""BAGEL's MoT decoder: the und (text) path against transformers' Qwen3 (QK-norm, q/k/v biases, o_proj
bias zeroed: models-wave2.md §1.8), prefill and paged decode steps; the routing analytically."""

from __future__ import annotations

import pytest
import torch
from wgc.models.bagel.config import IM_END, IM_START
from wgc.models.bagel.mot import MoTLM
from wgc.runtime.engines.kv_engine import Write

from tests.models.bagel.helpers import DenseAttention, call, gen_from_und, tiny_llm


def qwen3_reference(lm: MoTLM) -> torch.nn.Module:
    """transformers' Qwen3ForCausalLM with the und expert's weights (o_proj bias zero: BAGEL has none)."""
    transformers = pytest.importorskip("transformers")
    c = lm.config
    config = transformers.Qwen3Config(
        vocab_size=c.vocab, hidden_size=c.hidden, intermediate_size=c.intermediate, num_hidden_layers=c.layers,
        num_attention_heads=c.heads, num_key_value_heads=c.kv_heads, head_dim=c.head_dim, rms_norm_eps=c.norm_eps,
        rope_theta=c.rope_theta, attention_bias=True, tie_word_embeddings=False, max_position_embeddings=c.max_positions)
    ref = transformers.Qwen3ForCausalLM(config).eval()
    ours = lm.state_dict()
    state = {}
    for name, tensor in ref.state_dict().items():
        state[name] = torch.zeros_like(tensor) if name.endswith("o_proj.bias") else ours[name]
    ref.load_state_dict(state, strict=True)
    return ref


def reference_logits(ref: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return ref(torch.tensor([ids])).logits[0]  # [T, vocab]


def test_prefill_and_paged_decode_match_qwen3() -> None:
    m = tiny_llm(seed=3)
    ref = qwen3_reference(m.language_model)
    gen = torch.Generator().manual_seed(0)
    prompts = {1: torch.randint(0, 260, (11,), generator=gen).tolist(), 2: torch.randint(0, 260, (6,), generator=gen).tolist()}
    seqs = {r: list(p) for r, p in prompts.items()}
    logits = m.text_logits([Write(r, "main", p, len(p)) for r, p in prompts.items()])  # ragged, one forward
    for step in range(5):  # page size 4: the decode steps cross pages
        for row, r in enumerate(prompts):
            expect = reference_logits(ref, seqs[r])[-1]
            assert torch.allclose(logits[row], expect, atol=2e-5, rtol=1e-4), (step, r)
        nxt = {r: int(logits[row].argmax()) for row, r in enumerate(prompts)}
        for r, t in nxt.items():
            seqs[r].append(t)
        logits = m.text_logits([Write(r, "main", [t], 1) for r, t in nxt.items()])
    assert m.kv.length(1, "main") == 16 and m.kv.seq(1, "main").position == 16


def test_text_entries_decode_greedily_like_qwen3() -> None:
    m = tiny_llm(seed=4)
    ref = qwen3_reference(m.language_model)
    m.prefill_text([call(7, "main", "a red cube")])
    ids = [m.map.to_model(t) for t in [IM_START, *b"a red cube", IM_END]]
    prev, out = IM_START, []
    for _ in range(4):
        prev = m.decode([call(7, "main", prev, 0.0)])[0]
        out.append(prev)
    expect, seq = [], ids + [m.map.to_model(IM_START)]
    for _ in range(4):
        token = int(reference_logits(ref, seq)[-1].argmax())
        expect.append(m.map.from_model(token))
        seq.append(token)
    assert out == expect
    assert m.kv.length(7, "main") == len(ids) + 4


def _mixed_inputs(m, n: int = 12) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(n, m.config.hidden, generator=gen)  # [n, hidden]
    positions = torch.tensor([0, 1, 2, 3, 4, 4, 4, 4, 4, 4, 4, 5])[:n]
    mask = torch.zeros(n, dtype=torch.bool)
    mask[5:10] = True  # a block's latents; its markers (4, 10) und
    return x, positions, mask


def test_gen_weights_copied_from_und_give_the_und_output() -> None:
    m = tiny_llm(seed=5)
    gen_from_und(m.language_model)
    x, positions, mask = _mixed_inputs(m)
    attn = DenseAttention(torch.ones(12, 12, dtype=torch.bool))
    with torch.no_grad():
        und = m.language_model(x, positions, attn, None)
        mixed = m.language_model(x, positions, attn, mask)
        all_gen = m.language_model(x, positions, attn, torch.ones(12, dtype=torch.bool))
    assert torch.allclose(mixed, und, atol=1e-6) and torch.allclose(all_gen, und, atol=1e-6)


def test_each_row_goes_through_its_own_expert() -> None:
    """With attention to itself only, a row's output depends on its own expert alone: in a mixed step,
    und rows equal an all-und step's and gen rows an all-gen step's (different gen weights)."""
    m = tiny_llm(seed=6)
    x, positions, mask = _mixed_inputs(m)
    attn = DenseAttention(torch.eye(12, dtype=torch.bool))
    with torch.no_grad():
        mixed = m.language_model(x, positions, attn, mask)
        und = m.language_model(x, positions, attn, None)
        gen = m.language_model(x, positions, attn, torch.ones(12, dtype=torch.bool))
    assert torch.allclose(mixed[~mask], und[~mask], atol=1e-6)
    assert torch.allclose(mixed[mask], gen[mask], atol=1e-6)
    assert not torch.allclose(mixed[mask], und[mask], atol=1e-3)


def test_experts_run_only_on_their_rows() -> None:
    m = tiny_llm(seed=7)
    rows: dict[str, list[int]] = {"und": [], "gen": []}
    layer = m.language_model.model.layers[0]
    layer.mlp.register_forward_hook(lambda mod, args, out: rows["und"].append(args[0].shape[0]))
    layer.mlp_moe_gen.register_forward_hook(lambda mod, args, out: rows["gen"].append(args[0].shape[0]))
    m.prefill_text([call(1, "main", "hi")])
    assert rows == {"und": [4], "gen": []}  # an und step never touches the gen expert
    z = m.init_latents([call(1, "", 256, 256)])[0]
    m.velocity([call(1, "main", z, 0.5)])
    assert rows == {"und": [4, 2], "gen": [256]}  # the two markers und, the 256 latents gen


def test_perturbing_gen_weights_leaves_text_unchanged() -> None:
    a, b = tiny_llm(seed=8), tiny_llm(seed=8)
    noise = torch.Generator().manual_seed(99)
    with torch.no_grad():
        for name, param in b.language_model.named_parameters():
            if "_moe_gen" in name:
                param.add_(0.1 * torch.randn(param.shape, generator=noise))
    for m in (a, b):
        m.prefill_text([call(1, "main", "a photo of a dog"), call(2, "main", "x")])
    assert torch.equal(a.kv.storage.k, b.kv.storage.k) and torch.equal(a.kv.storage.v, b.kv.storage.v)
    assert a.decode([call(1, "main", IM_START, 0.0)]) == b.decode([call(1, "main", IM_START, 0.0)])
    z = a.init_latents([call(1, "", 256, 256)])[0]
    b.init_latents([call(1, "", 256, 256)])
    assert not torch.allclose(a.velocity([call(1, "main", z, 0.5)])[0], b.velocity([call(1, "main", z, 0.5)])[0])
