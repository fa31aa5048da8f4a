"""π0.5's action expert where no installable reference runs it whole: the adaRMS reduction (dense
weight 0, bias [w, 0, 1] makes every adaptive norm Gemma's RMSNorm with weight w and every gated
residual plain, so the π0.5 expert must equal transformers' GemmaModel, final norm included), the
gate itself, the sin-cos time embedding and the time MLP against their closed forms, and the
frozen prefix: `velocity` never writes it."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from transformers import GemmaConfig, GemmaModel
from wgc.models.layers.norm import AdaptiveRMSNorm
from wgc.models.pi05.config import Pi05Config
from wgc.models.pi05.expert import ActionExpert, ActionHeads, time_embedding
from wgc.runtime.components.base import Call

from tests.models.pi05.helpers import components, images

TINY = Pi05Config.preset("tiny")


def reduce_to_plain(norm: AdaptiveRMSNorm, weight: torch.Tensor) -> None:
    with torch.no_grad():
        norm.dense.weight.zero_()
        norm.dense.bias.copy_(torch.cat([weight, torch.zeros_like(weight), torch.ones_like(weight)]))


def test_adarms_expert_with_the_reduction_weights_equals_a_plain_gemma_model() -> None:
    c = TINY.expert
    theirs = GemmaModel(GemmaConfig(vocab_size=c.vocab, hidden_size=c.hidden, num_hidden_layers=c.layers,
                                    intermediate_size=c.intermediate, num_attention_heads=c.heads,
                                    num_key_value_heads=c.kv_heads, head_dim=c.head_dim, rms_norm_eps=c.norm_eps,
                                    hidden_activation="gelu_pytorch_tanh")).eval()
    ours = ActionExpert(TINY).eval()
    state = theirs.state_dict()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in ours.named_parameters():
            if ".dense." in name:
                continue
            p.copy_(state[name])
        for layer, ref in zip(ours.layers, theirs.layers):
            for norm, plain in ((layer.input_layernorm, ref.input_layernorm),
                                (layer.post_attention_layernorm, ref.post_attention_layernorm)):
                plain.weight.normal_(0.0, 0.3, generator=gen)
                reduce_to_plain(norm, plain.weight)
        theirs.norm.weight.normal_(0.0, 0.3, generator=gen)
        reduce_to_plain(ours.norm, theirs.norm.weight)
        x = torch.randn(2, 9, c.hidden, generator=gen)
        positions = torch.arange(9).expand(2, -1)
        cond = torch.randn(2, 1, c.hidden, generator=gen)  # any condition: the dense weight is zero
        expected = theirs(inputs_embeds=x, position_ids=positions).last_hidden_state
        got = ours(x, positions, None, cond)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    with torch.no_grad():  # gate 0 in every layer: the residual branches vanish, x reaches the final norm
        for layer in ours.layers:
            for norm in (layer.input_layernorm, layer.post_attention_layernorm):
                norm.dense.bias[2 * c.hidden:] = 0.0
        torch.testing.assert_close(ours(x, positions, None, cond), theirs.norm(x), rtol=1e-5, atol=1e-5)
    ours.norm.dense.bias.data[c.hidden:2 * c.hidden] += 0.5  # a shift in the final norm must show
    assert not torch.allclose(ours(x, positions, None, cond), expected, atol=1e-3)


def test_a_zero_gate_removes_the_residual_branch_and_the_condition_sets_scale_and_shift() -> None:
    norm = AdaptiveRMSNorm(8, 4)
    x, cond = torch.randn(3, 8), torch.randn(1, 4)
    with torch.no_grad():
        norm.dense.weight.zero_()
        norm.dense.bias.copy_(torch.cat([torch.full((8,), 0.5), torch.full((8,), 2.0), torch.full((8,), 0.25)]))
    h, gate = norm(x, cond)
    plain = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(h, plain * 1.5 + 2.0)
    torch.testing.assert_close(gate, torch.full((1, 8), 0.25))
    packed, g2 = norm(x, torch.randn(2, 4), rows=torch.tensor([0, 1, 1]))  # one condition per sequence
    assert packed.shape == x.shape and g2.shape == x.shape


def test_time_embedding_and_time_mlp_match_their_closed_forms() -> None:
    t, dim = torch.tensor([1.0, 0.7, 0.1]), 16
    got = time_embedding(t, dim, 4e-3, 4.0)
    for i, ti in enumerate(t.tolist()):
        for j in range(dim // 2):
            period = 4e-3 * (4.0 / 4e-3) ** (j / (dim // 2 - 1))
            assert math.isclose(got[i, j].item(), math.sin(2 * math.pi * ti / period), abs_tol=1e-12)
            assert math.isclose(got[i, dim // 2 + j].item(), math.cos(2 * math.pi * ti / period), abs_tol=1e-12)
    heads = ActionHeads(TINY)
    emb = time_embedding(t, TINY.expert.hidden, 4e-3, 4.0).float()
    expected = F.silu(heads.time_mlp_out(F.silu(heads.time_mlp_in(emb))))
    torch.testing.assert_close(heads.condition(t, torch.float32), expected)


def test_velocity_never_writes_the_prefix() -> None:
    vit, llm = components(TINY)
    x = vit.encode([Call(3, "", (images(2, TINY.vision.image_size),))])[0]
    llm.prefill([Call(3, "", (x, "wipe the table", torch.zeros(8)))])
    label = llm.default_label()
    length, k_before = llm.kv.length(3, label), llm.kv._read(3, label)[0].clone()
    pages = llm.kv.counters()["kv_pages_used"]
    a = llm.noise([Call(3, "", (5,))])[0]
    first = llm.velocity([Call(3, "", (a, 1.0))])[0]
    for k in range(10):
        a = a - llm.velocity([Call(3, "", (a, 1.0 - k / 10))])[0] / 10
    assert llm.kv.length(3, label) == length == 2 * TINY.vision.tokens + len(llm.tokenizer.encode(
        "Task: wipe the table, State: " + " ".join(["128"] * 32) + ";\nAction: ").ids)
    assert llm.kv.seq(3, label).position == length and llm.kv.counters()["kv_pages_used"] == pages
    assert torch.equal(llm.kv._read(3, label)[0], k_before)
    torch.testing.assert_close(llm.velocity([Call(3, "", (llm.noise([Call(3, "", (5,))])[0], 1.0))])[0], first)
    llm.release(3)
    assert llm.kv.counters()["kv_pages_used"] == 0


def test_a_batch_of_velocity_calls_plans_once_and_equals_each_call_alone() -> None:
    vit, llm = components(TINY)
    tasks = {4: "wipe the table", 5: "open the top drawer of the cabinet"}  # prefixes of different lengths
    for r, task in tasks.items():
        x = vit.encode([Call(r, "", (images(1 + r % 2, TINY.vision.image_size, seed=r),))])[0]
        llm.prefill([Call(r, "", (x, task, torch.zeros(8)))])
    a = {r: llm.noise([Call(r, "", (r,))])[0] for r in tasks}
    alone = {r: llm.velocity([Call(r, "", (a[r], 0.6))])[0] for r in tasks}
    llm._plans.clear()
    for _ in range(3):
        together = llm.velocity([Call(r, "", (a[r], 0.6)) for r in tasks])
    assert len(llm._plans) == 1  # three steps of one batch: one plan
    for r, v in zip(tasks, together):
        torch.testing.assert_close(v, alone[r], rtol=1e-5, atol=1e-6)
    fresh = llm.kv.step  # the engine's own planning, every step
    llm._frozen_step = fresh  # type: ignore[method-assign]
    torch.testing.assert_close(llm.velocity([Call(4, "", (a[4], 0.6))])[0], alone[4], rtol=0, atol=0)
