"""Shared by the talker tests: the component spec, a tiny talker with livelier random weights, its
twin in transformers 5.24 (`Qwen3OmniMoeTalkerForConditionalGeneration` with the same weights), the
thinker-side rows a request sends, and the whole model (`Qwen3OmniMoeForConditionalGeneration`) on
our thinker's, talker's and audio encoder's weights with its `generate` (the reference end to end)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from wgc.models.qwen3_omni.audio import AudioEncoder
from wgc.models.qwen3_omni.config import VocabMap
from wgc.models.qwen3_omni.talker import Talker
from wgc.models.qwen3_omni.talker_config import TalkerConfig
from wgc.models.qwen3_omni.thinker import Thinker
from wgc.runtime.components.base import Call

from tests.models.qwen3_omni import thinker_reference as tr
from wgc.plan.model import ComponentSpec

hf_configs = pytest.importorskip("transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe")
hf_modeling = pytest.importorskip("transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe")

WALK_EOS = 2150  # the walk's const codec_eos


def talker_spec(page_size: int = 4, kv_memory: int = 1 << 20) -> ComponentSpec:
    return ComponentSpec("talker", "wgc.models.qwen3_omni.talker.Talker", "kv", [], {"codec_eos": WALK_EOS}, [],
                         {"dtype": "bf16"}, [0], 1, {"page_size": page_size, "max_batch": 16, "kv_memory": kv_memory})


def lively(module: nn.Module, seed: int, std: float = 0.3) -> None:
    """Larger random weights than the preset's (norms near 1), so that codes vary and differences show."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            noise = torch.randn(param.shape, generator=gen, dtype=torch.float64).to(param.dtype)
            param.copy_(1.0 + 0.1 * noise if "norm" in name.split(".")[-2] else std * noise)
        module.thinker_rows.copy_(torch.randn(module.thinker_rows.shape, generator=gen, dtype=torch.float64))


def tiny_talker(seed: int = 0, **spec: Any) -> Talker:
    talker = Talker(talker_spec(**spec), 0, "cpu", preset="tiny", seed=seed)
    lively(talker.model, seed)
    return talker


def call(request: int, *args: Any) -> Call:
    return Call(request, "", args)


def thinker_rows(n: int, seed: int, width: int = 64) -> Tensor:
    """n thinker rows (input embeddings or accept-layer states) [n, width], float32 as the thinker sends them."""
    return torch.randn(n, width, generator=torch.Generator().manual_seed(seed))


# ---- transformers' twin ------------------------------------------------------------------------------


def hf_config(c: TalkerConfig) -> Any:
    p = c.predictor
    text = dict(vocab_size=c.vocab, hidden_size=c.hidden, intermediate_size=c.intermediate, num_hidden_layers=c.layers,
                num_attention_heads=c.heads, num_key_value_heads=c.kv_heads, head_dim=c.head_dim,
                num_experts=c.experts, num_experts_per_tok=c.top_k, moe_intermediate_size=c.moe_intermediate,
                shared_expert_intermediate_size=c.shared_intermediate, norm_topk_prob=c.norm_topk_prob,
                rms_norm_eps=c.norm_eps, max_position_embeddings=c.max_positions,
                rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta,
                                 "mrope_section": list(c.mrope_section), "interleaved": True})
    predictor = dict(vocab_size=p.vocab, hidden_size=p.hidden, intermediate_size=p.intermediate,
                     num_hidden_layers=p.layers, num_attention_heads=p.heads, num_key_value_heads=p.kv_heads,
                     head_dim=p.head_dim, num_code_groups=p.groups, rms_norm_eps=p.norm_eps,
                     rope_parameters={"rope_type": "default", "rope_theta": p.rope_theta})
    return hf_configs.Qwen3OmniMoeTalkerConfig(
        text_config=text, code_predictor_config=predictor, num_code_groups=p.groups, thinker_hidden_size=c.thinker_hidden,
        codec_eos_token_id=c.codec_eos, codec_nothink_id=c.codec_nothink, codec_think_bos_id=c.codec_think_bos,
        codec_think_eos_id=c.codec_think_eos, codec_pad_id=c.codec_pad, codec_bos_id=c.codec_bos,
        speaker_id=dict(c.speakers), accept_hidden_layer=1, spatial_merge_size=2)


def hf_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """Ours (the checkpoint's per-expert names) in transformers' fused layout: per layer
    `experts.gate_up_proj` [E, 2I, H] (gate rows first) and `experts.down_proj` [E, H, I]."""
    state = model.state_dict()
    out = {k: v for k, v in state.items() if ".mlp.experts." not in k}
    layers = model.config.layers
    for i in range(layers):
        pre = f"model.layers.{i}.mlp.experts"
        experts = range(model.config.experts)
        out[f"{pre}.gate_up_proj"] = torch.stack(
            [torch.cat([state[f"{pre}.{e}.gate_proj.weight"], state[f"{pre}.{e}.up_proj.weight"]]) for e in experts])
        out[f"{pre}.down_proj"] = torch.stack([state[f"{pre}.{e}.down_proj.weight"] for e in experts])
    return out


def hf_talker(talker: Talker) -> Any:
    """transformers' talker with our weights, float64 like the tiny component on CPU."""
    config = hf_config(talker.config)
    config._experts_implementation = "eager"  # the grouped-mm kernel takes no float64
    hf = hf_modeling.Qwen3OmniMoeTalkerForConditionalGeneration(config).double().eval()
    missing, unexpected = hf.load_state_dict(hf_state_dict(talker.model), strict=False)
    assert not unexpected and all("rotary" in k or "inv_freq" in k for k in missing), (missing, unexpected)
    return hf


def hf_parts(hf: Any, talker: Talker) -> Any:
    """What `Qwen3OmniMoeForConditionalGeneration._get_talker_*_parts` read of the whole model (as `self`)."""
    ids = talker.config.thinker
    config = SimpleNamespace(talker_config=hf.config, im_start_token_id=ids.im_start, tts_pad_token_id=ids.tts_pad)
    return SimpleNamespace(config=config, talker=hf)


# ---- the whole model ---------------------------------------------------------------------------------


def hf_omni(thinker: Thinker, talker: Talker, audio: AudioEncoder | None = None) -> Any:
    """transformers' whole model on our tiny weights, float64. `model.codes` collects what its `generate`
    hands code2wav (the frames, [1, 16, n]). With `audio`, its tower is the thinker's, and the talker's
    config gets the thinker's `audio_config`: 5.24's talker `get_rope_index` reads one it does not have
    when the prompt holds audio (models-wave2 §2.5)."""
    tokens, vmap = thinker.config.tokens, VocabMap(thinker.config)
    config = hf_configs.Qwen3OmniMoeConfig(
        thinker_config=tr.hf_config(thinker.config).to_dict(), talker_config=hf_config(talker.config).to_dict(),
        code2wav_config={"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                         "num_key_value_heads": 2, "intermediate_size": 64, "codebook_size": 64, "decoder_dim": 32},
        **{f"{name}_token_id": vmap.to_model(getattr(tokens, name))
           for name in ("im_start", "im_end", "tts_pad", "tts_bos", "tts_eos", "system", "user", "assistant")})
    for part in (config.thinker_config, config.thinker_config.text_config, config.talker_config,
                 config.talker_config.text_config):
        part._attn_implementation = "eager"
        part._experts_implementation = "eager"
    model = hf_modeling.Qwen3OmniMoeForConditionalGeneration(config).double().eval()
    model.thinker = tr.reference(thinker).double()
    model.talker = hf_talker(talker)
    if audio is not None:
        tower_config = hf_configs.Qwen3OmniMoeAudioEncoderConfig(**audio.config.hf_config())
        tower = hf_modeling.Qwen3OmniMoeAudioEncoder._from_config(tower_config, attn_implementation="sdpa")
        tower.load_state_dict(audio.model.state_dict(), strict=True)
        model.thinker.model.audio_tower = tower.double().eval()
        model.talker.config.audio_config = model.thinker.config.audio_config  # the workaround
    model.codes = []
    model.code2wav.chunked_decode = lambda c, **_: model.codes.append(c) or torch.zeros(1, 1, 1)
    return model


def hf_generate(model: Any, thinker: Thinker, ids: list[int], reply: int, frames: int,
                **inputs: Any) -> tuple[list[int], list[list[int]]]:
    """`generate` with greedy thinker and talker, speaker Ethan, the suppress list and repetition penalty
    1.05, over the prompt `ids` (Qwen ids): the reply (Qwen ids, up to `reply` tokens) and the frames
    code2wav gets (up to `frames` codebook-0 codes; all but a last one cut by the bound come whole)."""
    tokens, vmap = thinker.config.tokens, VocabMap(thinker.config)
    model.codes.clear()
    with torch.no_grad():
        seq, _ = model.generate(input_ids=torch.tensor([[vmap.to_model(i) for i in ids]]), speaker="Ethan",
                                thinker_max_new_tokens=reply, thinker_do_sample=False,
                                thinker_eos_token_id=vmap.to_model(tokens.im_end), talker_do_sample=False,
                                talker_max_new_tokens=frames, **inputs)
    return [vmap.from_model(t) for t in seq[0, len(ids):].tolist()], model.codes[0][0].T.tolist()
