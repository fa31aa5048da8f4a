"""transformers 5.24's Qwen3-Omni thinker on our tiny thinker's weights: the reference of the thinker
tests. `reference(thinker)` builds `Qwen3OmniMoeThinkerForConditionalGeneration` from the tiny
preset's dims and ids (model ids: the compact vocabulary's remapped specials), copies our weights
across (our per-expert MoE into its fused [E, 2I, H] / [E, H, I] experts) and casts it to our dtype."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor, nn
from wgc.models.qwen3_omni.config import ThinkerConfig, VocabMap
from wgc.models.qwen3_omni.thinker import Thinker

from wgc.plan.model import ComponentSpec


def spec(page_size: int = 4, kv_memory: int = 4 << 20) -> ComponentSpec:
    return ComponentSpec("thinker", "wgc.models.qwen3_omni.Thinker", "kv", [], {"eos": 151645}, ["main"],
                         {"dtype": "bf16"}, [0], 1, {"page_size": page_size, "max_batch": 16, "kv_memory": kv_memory})


def lively(module: nn.Module, seed: int, std: float = 0.2) -> None:
    """Larger random weights than the preset's (norms near 1), so that every difference shows."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            noise = torch.randn(param.shape, generator=gen, dtype=torch.float64).to(param.dtype)
            param.copy_(1.0 + 0.1 * noise if "norm" in name.split(".")[-2] else std * noise)


def tiny_thinker(seed: int = 0, **settings: Any) -> Thinker:
    m = Thinker(spec(**settings), 0, "cpu", preset="tiny", seed=seed)
    lively(m.model, seed)
    return m


def hf_config(c: ThinkerConfig) -> Any:
    cfg = pytest.importorskip("transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe")
    ids = VocabMap(c)
    t = c.tokens
    text = dict(vocab_size=c.vocab, hidden_size=c.hidden, num_hidden_layers=c.layers, num_attention_heads=c.heads,
                num_key_value_heads=c.kv_heads, head_dim=c.head_dim, num_experts=c.experts,
                num_experts_per_tok=c.top_k, moe_intermediate_size=c.moe_intermediate, norm_topk_prob=c.norm_topk_prob,
                rms_norm_eps=c.norm_eps, max_position_embeddings=c.max_positions,
                rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta,
                                 "mrope_section": list(c.mrope_section), "interleaved": True})
    vision = dict(depth=2, hidden_size=32, num_heads=2, intermediate_size=64, patch_size=16, temporal_patch_size=2,
                  spatial_merge_size=c.spatial_merge, out_hidden_size=c.hidden, num_position_embeddings=64,
                  deepstack_visual_indexes=list(range(c.deepstack_layers)))
    audio = dict(num_mel_bins=128, d_model=32, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=64,
                 downsample_hidden_size=16, output_dim=c.hidden, n_window=50)
    config = cfg.Qwen3OmniMoeThinkerConfig(
        text_config=text, vision_config=vision, audio_config=audio, position_id_per_seconds=int(c.position_per_second),
        audio_token_id=ids.to_model(t.audio), image_token_id=ids.to_model(t.image),
        video_token_id=ids.to_model(t.video), audio_start_token_id=ids.to_model(t.audio_start),
        vision_start_token_id=ids.to_model(t.vision_start), user_token_id=ids.to_model(t.user))
    for part in (config, config.text_config):  # the eager paths: float64 runs, as ours does on CPU
        part._attn_implementation = "eager"
        part._experts_implementation = "eager"
    return config


def reference(m: Thinker) -> Any:
    mod = pytest.importorskip("transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe")
    torch.manual_seed(0)
    hf = mod.Qwen3OmniMoeThinkerForConditionalGeneration(hf_config(m.config)).to(m.dtype).eval()
    ours = m.model.state_dict()
    state = {}
    for name, value in ours.items():
        if ".mlp.experts." in name:
            continue
        state[("model.language_model." + name.removeprefix("model.")) if name.startswith("model.") else name] = value
    for i in range(m.config.layers):
        experts = m.model.model.layers[i].mlp.experts
        state[f"model.language_model.layers.{i}.mlp.experts.gate_up_proj"] = torch.stack(
            [torch.cat([e.gate_proj.weight, e.up_proj.weight]) for e in experts])
        state[f"model.language_model.layers.{i}.mlp.experts.down_proj"] = torch.stack([e.down_proj.weight for e in experts])
    missing, unexpected = hf.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert all(k.startswith(("model.audio_tower.", "model.visual.")) for k in missing), missing
    return hf


def forward(hf: Any, embeds: Tensor, position_ids: Tensor, visual: Tensor | None = None,
            deepstack: list[Tensor] | None = None) -> tuple[Tensor, tuple[Tensor, ...]]:
    """transformers' text model over one whole sequence: (logits [T, vocab], hidden_states)."""
    with torch.no_grad():
        out = hf.model.language_model(inputs_embeds=embeds[None], position_ids=position_ids,
                                      visual_pos_masks=None if visual is None else visual[None],
                                      deepstack_visual_embeds=deepstack, output_hidden_states=True, use_cache=False)
        return hf.lm_head(out.last_hidden_state)[0], tuple(h[0] for h in out.hidden_states)
