"""The talker's config and parameter names: the published checkpoint's `talker_config` read by
`from_hf` gives the 30b preset (the real codec and speaker ids, not transformers' class defaults),
and the 30b model's parameters are the checkpoint's `talker.*` tensors, name for name and shape for
shape (transformers' fused experts spelled per expert, as the shards store them)."""

from __future__ import annotations

from dataclasses import replace

import torch
from wgc.models.qwen3_omni.talker_config import TalkerConfig
from wgc.models.qwen3_omni.talker_model import TalkerModel

from tests.models.qwen3_omni.talker_helpers import hf_config, hf_modeling

# The keys from_hf reads, with the values of Qwen/Qwen3-Omni-30B-A3B-Instruct's config.json.
PUBLISHED = {
    "im_start_token_id": 151644, "im_end_token_id": 151645, "assistant_token_id": 77091, "user_token_id": 872,
    "system_token_id": 8948, "tts_pad_token_id": 151671, "tts_bos_token_id": 151672, "tts_eos_token_id": 151673,
    "thinker_config": {"text_config": {"vocab_size": 152064, "hidden_size": 2048, "num_hidden_layers": 48,
                                       "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
                                       "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768}},
    "talker_config": {
        "accept_hidden_layer": 24, "codec_bos_id": 2149, "codec_eos_token_id": 2150, "codec_nothink_id": 2155,
        "codec_pad_id": 2148, "codec_think_bos_id": 2156, "codec_think_eos_id": 2157, "num_code_groups": 16,
        "thinker_hidden_size": 2048, "speaker_id": {"aiden": 2303, "chelsie": 2301, "ethan": 2302},
        "code_predictor_config": {"head_dim": 128, "hidden_size": 1024, "intermediate_size": 3072,
                                  "num_attention_heads": 16, "num_code_groups": 16, "num_hidden_layers": 5,
                                  "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "vocab_size": 2048,
                                  "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"}},
        "text_config": {"head_dim": 128, "hidden_size": 1024, "intermediate_size": 2048,
                        "max_position_embeddings": 65536, "moe_intermediate_size": 384, "norm_topk_prob": True,
                        "num_attention_heads": 16, "num_experts_per_tok": 6, "num_hidden_layers": 20,
                        "num_key_value_heads": 2, "num_local_experts": 128, "rms_norm_eps": 1e-06,
                        "rope_parameters": {"interleaved": True, "mrope_section": [24, 20, 20], "rope_theta": 1000000,
                                            "rope_type": "default"},
                        "shared_expert_intermediate_size": 768, "vocab_size": 3072}},
}


def test_from_hf_reads_the_checkpoints_ids() -> None:
    c = TalkerConfig.from_hf(PUBLISHED)
    assert replace(c, name="30b") == TalkerConfig.preset("30b")
    assert (c.codec_eos, c.codec_pad, c.codec_bos, c.codec_nothink) == (2150, 2148, 2149, 2155)  # not 4198, ...
    assert c.speaker_id("Ethan") == 2302 and c.speaker_id("CHELSIE") == 2301 and c.speaker_id("x") is None
    assert c.top_k == 6 and c.predictor.groups == 16 and c.thinker.tts_pad == 151671 and c.thinker.newline == 198
    assert list(c.suppressed()) == list(range(2048, 3072))


def test_30b_parameters_are_the_checkpoints() -> None:
    c = TalkerConfig.preset("30b")
    config = hf_config(c)
    with torch.device("meta"):
        ours = TalkerModel(c)
        theirs = hf_modeling.Qwen3OmniMoeTalkerForConditionalGeneration(config)
    want = {}
    for name, p in theirs.state_dict().items():
        if name.endswith("mlp.experts.gate_up_proj"):
            pre = name.removesuffix("gate_up_proj")
            for e in range(c.experts):
                want[f"{pre}{e}.gate_proj.weight"] = want[f"{pre}{e}.up_proj.weight"] = (c.moe_intermediate, c.hidden)
        elif name.endswith("mlp.experts.down_proj"):
            pre = name.removesuffix("down_proj")
            want.update({f"{pre}{e}.down_proj.weight": (c.hidden, c.moe_intermediate) for e in range(c.experts)})
        else:
            want[name] = tuple(p.shape)
    got = {name: tuple(p.shape) for name, p in ours.state_dict().items()}
    assert got == want
    assert len(got) == 20 * (4 + 2 + 2 + 1 + 3 * 128 + 3 + 1) + 2 + 2 * 4 + 1 + 5 * (4 + 2 + 2 + 3) + 1 + 15 * 2
