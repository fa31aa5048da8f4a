"""The shared layers: Llama-3 rope scaling, RMSNorm, rotary embeddings, and the tiny Llama decoding
through the paged KV path exactly as it computes by recomputing the whole prefix (and, where
transformers is installed, as transformers.LlamaForCausalLM computes on the same weights)."""

from __future__ import annotations

import math

import pytest
import torch
from wgc.models.layers import (
    Llama3Scaling,
    LlamaConfig,
    LlamaModel,
    RMSNorm,
    RotaryEmbedding,
    SelfAttention,
    apply_rotary,
    inverse_frequencies,
    load_hf_state_dict,
)
from wgc.runtime.engines.attention import AttentionBatch, KVStep, KVStorage, TorchAttention

PAGE = 4


def direct_llama3(head_dim: int, theta: float, s: Llama3Scaling) -> list[float]:
    """Meta's `apply_scaling`, one frequency at a time."""
    out = []
    for i in range(0, head_dim, 2):
        freq = 1.0 / theta ** (i / head_dim)
        wavelen = 2 * math.pi / freq
        if wavelen < s.original_max_positions / s.high_freq_factor:
            out.append(freq)
        elif wavelen > s.original_max_positions / s.low_freq_factor:
            out.append(freq / s.factor)
        else:
            smooth = (s.original_max_positions / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
            out.append((1 - smooth) * freq / s.factor + smooth * freq)
    return out


@pytest.mark.parametrize("preset", ["tiny", "3b"])
def test_llama3_rope_scaling_matches_the_direct_formula(preset: str) -> None:
    c = LlamaConfig.preset(preset)
    assert c.rope_scaling is not None
    ours = inverse_frequencies(c.head_dim, c.rope_theta, c.rope_scaling)
    want = torch.tensor(direct_llama3(c.head_dim, c.rope_theta, c.rope_scaling))
    torch.testing.assert_close(ours, want.float(), rtol=1e-5, atol=0)
    plain = inverse_frequencies(c.head_dim, c.rope_theta)
    assert (ours == plain).any() and (ours < plain).any()  # some bands kept, some scaled


def test_rmsnorm_matches_its_formula_and_keeps_dtype() -> None:
    norm = RMSNorm(8, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 2.0, 8))
    x = torch.randn(3, 5, 8)
    want = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * norm.weight
    torch.testing.assert_close(norm(x), want)
    assert norm(x.bfloat16()).dtype == torch.float32  # float32 weight times bf16: promoted, as in HF


@pytest.mark.parametrize("shape, eps", [((1, 128), 1e-5), ((32, 128), 1e-5), ((7, 512), 1e-6), ((2, 3, 64), 1e-2)])
def test_rmsnorm_float32_fast_path_is_bitwise_the_composite(shape: tuple[int, ...], eps: float) -> None:
    """float32 goes through F.rms_norm (one call): bitwise what the float32 composite (rms, then the
    weight times it) gives, so greedy tokens cannot move; a wrong eps or weight would show here."""
    from wgc.models.layers.norm import rms

    norm = RMSNorm(shape[-1], eps=eps)
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(*shape) * 3
    with torch.no_grad():
        assert torch.equal(norm(x), norm.weight * rms(x, eps))


def test_rotary_scores_depend_only_on_relative_position() -> None:
    rope = RotaryEmbedding(32, 500000.0, Llama3Scaling(original_max_positions=256))
    q, k = torch.randn(1, 2, 32), torch.randn(1, 2, 32)  # [1, heads, d]

    def score(m: int, n: int) -> torch.Tensor:
        cos_m, sin_m = rope(torch.tensor([m]))
        cos_n, sin_n = rope(torch.tensor([n]))
        return (apply_rotary(q, cos_m, sin_m) * apply_rotary(k, cos_n, sin_n)).sum(-1)  # [1, heads]

    torch.testing.assert_close(score(7, 3), score(104, 100), rtol=1e-4, atol=1e-4)
    cos, sin = rope(torch.arange(6))
    torch.testing.assert_close(apply_rotary(q.expand(6, -1, -1), cos, sin).norm(dim=-1), q.norm(dim=-1).expand(6, -1))


def test_attention_rejects_uneven_head_groups() -> None:
    with pytest.raises(ValueError, match="evenly"):
        SelfAttention(0, 64, heads=6, kv_heads=4, head_dim=16)


def test_3b_preset_has_llama_3_2_3b_shape() -> None:
    c = LlamaConfig.preset("3b")
    assert (c.layers, c.hidden, c.heads, c.kv_heads, c.head_dim, c.intermediate, c.vocab) == (
        28, 3072, 24, 8, 128, 8192, 156940)
    with torch.device("meta"):
        model = LlamaModel(c)
    per_layer = 3072 * (24 + 8 + 8 + 24) * 128 + 3 * 3072 * 8192 + 2 * 3072
    assert sum(p.numel() for p in model.parameters()) == 156940 * 3072 + 28 * per_layer + 3072  # tied head


def shuffled_tables(count: int, pages_each: int, seed: int) -> list[list[int]]:
    pool = torch.randperm(count * pages_each + 5, generator=torch.Generator().manual_seed(seed)).tolist()
    return [pool[i * pages_each:(i + 1) * pages_each] for i in range(count)]


def test_decode_through_the_kv_path_equals_full_recompute() -> None:
    torch.manual_seed(0)
    config = LlamaConfig.preset("tiny")
    model = LlamaModel(config).eval()
    seqs = [torch.randint(0, config.vocab, (n,)).tolist() for n in (5, 9, 2)]  # mixed prompt lengths
    storage = KVStorage.allocate(config.layers, 40, PAGE, config.kv_heads, config.head_dim)
    tables, backend = shuffled_tables(3, 8, seed=1), TorchAttention()
    cached, new = [0, 0, 0], [len(s) for s in seqs]
    with torch.no_grad():
        for _ in range(20):
            batch = AttentionBatch(tables, cached, new, PAGE)
            tokens = torch.tensor([t for s, c in zip(seqs, cached) for t in s[c:]])  # [sum n]
            last = torch.cumsum(torch.tensor(new), 0) - 1  # [B]
            logits = model(tokens, batch.positions(), KVStep(storage, backend, backend.plan(batch)), logits_at=last)
            lengths = [len(s) for s in seqs]
            padded = torch.tensor([s + [0] * (max(lengths) - len(s)) for s in seqs])  # [B, T], right-padded
            full = model(padded, torch.arange(max(lengths)).expand(3, -1))  # [B, T, vocab], causal: pads unseen
            torch.testing.assert_close(logits, full[torch.arange(3), torch.tensor(lengths) - 1], atol=1e-4, rtol=1e-4)
            for b, seq in enumerate(seqs):
                seq.append(int(logits[b].argmax()))
            cached, new = lengths, [1, 1, 1]


def test_chunked_prefill_equals_one_shot() -> None:
    torch.manual_seed(1)
    config = LlamaConfig.preset("tiny")
    model = LlamaModel(config).eval()
    prompt = torch.randint(0, config.vocab, (11,))
    storage = KVStorage.allocate(config.layers, 8, PAGE, config.kv_heads, config.head_dim)
    backend, table = TorchAttention(), [[6, 1, 4, 0]]
    with torch.no_grad():
        for start in range(0, 11, 4):
            n = min(4, 11 - start)
            batch = AttentionBatch(table, [start], [n], PAGE)
            out = model(prompt[start:start + n], batch.positions(), KVStep(storage, backend, backend.plan(batch)))
        want = model(prompt[None], torch.arange(11)[None])[0, 8:]  # [3, vocab]
    torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-4)


def test_frozen_prefix_step_through_the_model() -> None:
    torch.manual_seed(4)
    config = LlamaConfig.preset("tiny")
    model = LlamaModel(config).eval()
    seq = torch.randint(0, config.vocab, (10,))
    storage = KVStorage.allocate(config.layers, 8, PAGE, config.kv_heads, config.head_dim)
    backend, table = TorchAttention(), [[3, 7]]
    with torch.no_grad():
        prefill = AttentionBatch(table, [0], [7], PAGE)
        model(seq[:7], prefill.positions(), KVStep(storage, backend, backend.plan(prefill)))
        before = storage.k.clone()
        frozen = AttentionBatch(table, [7], [3], PAGE, write=False)  # 3 tokens over the 7, not stored
        out = model(seq[7:], frozen.positions(), KVStep(storage, backend, backend.plan(frozen)))
        want = model(seq[None], torch.arange(10)[None])[0, 7:]  # [3, vocab]
    torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-4)
    assert torch.equal(storage.k, before)


@pytest.mark.slow
@pytest.mark.parametrize("tied", [False, True])
def test_parity_with_transformers_llama(tied: bool) -> None:
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import _compute_llama3_parameters

    torch.manual_seed(2)
    c = LlamaConfig(**{**LlamaConfig.preset("tiny").__dict__, "tie_embeddings": tied})
    s = c.rope_scaling
    assert s is not None
    hf_config = transformers.LlamaConfig(
        vocab_size=c.vocab, hidden_size=c.hidden, intermediate_size=c.intermediate, num_hidden_layers=c.layers,
        num_attention_heads=c.heads, num_key_value_heads=c.kv_heads, head_dim=c.head_dim, rms_norm_eps=c.norm_eps,
        max_position_embeddings=c.max_positions, tie_word_embeddings=tied, attention_bias=False, mlp_bias=False,
        rope_parameters={"rope_type": "llama3", "rope_theta": c.rope_theta, "factor": s.factor,
                         "low_freq_factor": s.low_freq_factor, "high_freq_factor": s.high_freq_factor,
                         "original_max_position_embeddings": s.original_max_positions},
    )
    hf_inv_freq, _ = _compute_llama3_parameters(hf_config, "cpu")
    torch.testing.assert_close(inverse_frequencies(c.head_dim, c.rope_theta, s), hf_inv_freq)

    hf = transformers.LlamaForCausalLM(hf_config).eval()
    ours = LlamaModel(c).eval()
    load_hf_state_dict(ours, {k: v for k, v in hf.state_dict().items() if not (tied and k == "lm_head.weight")})
    tokens = torch.randint(0, c.vocab, (2, 13))
    positions = torch.arange(13).expand(2, -1)
    with torch.no_grad():
        want = hf(input_ids=tokens).logits  # [2, 13, vocab]
        torch.testing.assert_close(ours(tokens, positions), want, atol=1e-4, rtol=1e-4)
        storage = KVStorage.allocate(c.layers, 16, PAGE, c.kv_heads, c.head_dim)
        backend = TorchAttention()
        batch = AttentionBatch(shuffled_tables(2, 4, seed=3), [0, 0], [13, 13], PAGE)
        paged = ours(tokens.flatten(), batch.positions(), KVStep(storage, backend, backend.plan(batch)))
    torch.testing.assert_close(paged, want.flatten(0, 1), atol=1e-4, rtol=1e-4)


def test_casting_a_model_keeps_the_rotary_frequencies_in_float32() -> None:
    """model.to(bf16) must not round inv_freq: at position 4000 a bf16 frequency is off by whole radians."""
    from wgc.models.layers.rope import RotaryEmbedding, inverse_frequencies

    rope = RotaryEmbedding(64, 500000.0).to(torch.bfloat16)
    assert rope.inv_freq.dtype == torch.float32
    torch.testing.assert_close(rope.inv_freq, inverse_frequencies(64, 500000.0))
