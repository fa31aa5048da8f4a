"""A miniature Qwen3-Omni-30B-A3B-Instruct directory in the real files' layout (models-wave2.md §2.7),
written for the loader's tests: tiny sizes, the real names and files.

    model-0000{1..5}-of-00005.safetensors   every tensor, bf16 as the real shards, each component's
                                            spread over several shards
    model.safetensors.index.json            the weight_map of every tensor to its shard
    config.json               the published file's structure (the chat ids at the top level;
                              thinker_config with text_config, audio_config, vision_config and the media
                              ids; talker_config with text_config, code_predictor_config, the codec and
                              speaker ids; code2wav_config) with tiny values. Every special id is moved
                              (chat and media ids to 300..314 of a 512-token vocabulary, codec ids to
                              1030..1042), away from transformers' class defaults and the tiny preset's
    tokenizer.json            byte-level ("\\n" is byte 10), the chat markers at config.json's ids
    preprocessor_config.json  the processor's keys (WhisperFeatureExtractor, Qwen2VLImageProcessor)

The names and shapes are transformers 5.24's own (`Qwen3OmniMoeForConditionalGeneration` built on meta
from this config.json), taken back to the checkpoint's layout, the inverse of its load-time
conversion: its `thinker.model.language_model.` / `thinker.model.audio_tower.` / `thinker.model.visual.`
are the file's `thinker.model.` / `thinker.audio_tower.` / `thinker.visual.`, and its fused experts
(`gate_up_proj` [E, 2I, H], gate rows first; `down_proj` [E, H, I]) are stored one per expert as
`...mlp.experts.{e}.{gate,up,down}_proj.weight`. None of it comes from our modules, so a renamed
parameter fails the load.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import Tensor
from wgc.models.layers.tokenizer import byte_tokenizer

SHARDS = 5
VOCAB, HIDDEN = 512, 32
IDS = {  # config.json's special ids: (sub-config, key) -> id
    ("", "im_start_token_id"): 300, ("", "im_end_token_id"): 301, ("", "system_token_id"): 302,
    ("", "user_token_id"): 303, ("", "assistant_token_id"): 304, ("thinker", "audio_start_token_id"): 305,
    ("thinker", "audio_end_token_id"): 306, ("thinker", "audio_token_id"): 307,
    ("thinker", "vision_start_token_id"): 308, ("thinker", "vision_end_token_id"): 309,
    ("thinker", "image_token_id"): 310, ("thinker", "video_token_id"): 311, ("", "tts_pad_token_id"): 312,
    ("", "tts_bos_token_id"): 313, ("", "tts_eos_token_id"): 314,
}
MARKERS = {"<|im_start|>": 300, "<|im_end|>": 301, "<|audio_start|>": 305, "<|audio_end|>": 306,
           "<|audio_pad|>": 307, "<|vision_start|>": 308, "<|vision_end|>": 309, "<|image_pad|>": 310,
           "<|video_pad|>": 311}
CODEC = {"codec_pad_id": 1030, "codec_bos_id": 1031, "codec_eos_token_id": 1032, "codec_nothink_id": 1033,
         "codec_think_bos_id": 1034, "codec_think_eos_id": 1035}
SPEAKERS = {"chelsie": 1040, "ethan": 1041, "aiden": 1042}
MROPE = {"interleaved": True, "mrope_interleaved": True, "mrope_section": [4, 2, 2], "rope_type": "default"}


def config_json() -> dict[str, Any]:
    """config.json: the published keys, tiny values."""
    text = {"vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "num_experts": 4,
            "num_experts_per_tok": 2, "moe_intermediate_size": 16, "norm_topk_prob": True, "rms_norm_eps": 1e-06,
            "max_position_embeddings": 4096, "rope_scaling": MROPE, "rope_theta": 1000000, "decoder_sparse_step": 1,
            "mlp_only_layers": [], "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": False}
    audio = {"num_mel_bins": 128, "d_model": 16, "encoder_layers": 1, "encoder_attention_heads": 2,
             "encoder_ffn_dim": 32, "downsample_hidden_size": 8, "output_dim": HIDDEN, "n_window": 50,
             "n_window_infer": 800, "max_source_positions": 1500, "conv_chunksize": 500,
             "activation_function": "gelu", "scale_embedding": False, "model_type": "qwen3_omni_moe_audio_encoder"}
    vision = {"depth": 2, "hidden_size": 16, "num_heads": 2, "intermediate_size": 32, "patch_size": 16,
              "temporal_patch_size": 2, "spatial_merge_size": 2, "out_hidden_size": HIDDEN,
              "num_position_embeddings": 16, "deepstack_visual_indexes": [0, 1], "in_channels": 3,
              "hidden_act": "gelu_pytorch_tanh", "model_type": "qwen3_omni_moe_vision_encoder"}
    thinker = {"model_type": "qwen3_omni_moe_thinker", "position_id_per_seconds": 13, "user_token_id": 303,
               "text_config": text, "audio_config": audio, "vision_config": vision,
               **{key: v for (sub, key), v in IDS.items() if sub == "thinker"}}
    talker_text = {**{k: text[k] for k in ("num_attention_heads", "num_key_value_heads", "head_dim", "num_experts",
                                           "num_experts_per_tok", "norm_topk_prob", "rms_norm_eps",
                                           "max_position_embeddings", "rope_theta")},
                   "vocab_size": 1088, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                   "moe_intermediate_size": 16, "shared_expert_intermediate_size": 32,
                   "rope_scaling": {k: v for k, v in MROPE.items() if k != "mrope_interleaved"}}
    predictor = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                 "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "num_code_groups": 16,
                 "rms_norm_eps": 1e-06, "rope_theta": 1000000}
    talker = {"accept_hidden_layer": 1, "num_code_groups": 16, "thinker_hidden_size": HIDDEN, "spatial_merge_size": 2,
              "position_id_per_seconds": 13, "speaker_id": SPEAKERS, **CODEC, "text_config": talker_text,
              "code_predictor_config": predictor}
    code2wav = {"codebook_size": 64, "num_quantizers": 16, "hidden_size": 32, "num_hidden_layers": 1,
                "num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 64, "sliding_window": 8,
                "rope_theta": 10000, "rms_norm_eps": 1e-05, "layer_scale_initial_scale": 0.01, "decoder_dim": 32,
                "upsample_rates": [8, 5, 4, 3], "upsampling_ratios": [2, 2], "hidden_act": "silu",
                "attention_bias": False}
    return {"architectures": ["Qwen3OmniMoeForConditionalGeneration"], "model_type": "qwen3_omni_moe",
            "enable_audio_output": True, **{key: v for (sub, key), v in IDS.items() if not sub},
            "thinker_config": thinker, "talker_config": talker, "code2wav_config": code2wav,
            "torch_dtype": "bfloat16", "transformers_version": "4.57.0.dev0"}


PROCESSOR = {
    "chunk_length": 300, "dither": 0.0, "feature_extractor_type": "WhisperFeatureExtractor", "feature_size": 128,
    "hop_length": 160, "image_mean": [0.5, 0.5, 0.5], "image_processor_type": "Qwen2VLImageProcessor",
    "image_std": [0.5, 0.5, 0.5], "max_pixels": 128 * 128, "merge_size": 2, "min_pixels": 3136, "n_fft": 400,
    "n_samples": 4800000, "nb_max_frames": 30000, "padding_side": "right", "padding_value": 0.0, "patch_size": 16,
    "processor_class": "Qwen3OmniMoeProcessor", "return_attention_mask": True, "sampling_rate": 16000,
    "temporal_patch_size": 2,
}
RENAMES = (("thinker.model.language_model.", "thinker.model."), ("thinker.model.audio_tower.", "thinker.audio_tower."),
           ("thinker.model.visual.", "thinker.visual."))


def checkpoint_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Every tensor of the checkpoint by its stored name, from transformers' model for `config`."""
    from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import Qwen3OmniMoeConfig
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import Qwen3OmniMoeForConditionalGeneration

    with torch.device("meta"):
        model = Qwen3OmniMoeForConditionalGeneration(Qwen3OmniMoeConfig(**config))
    out: dict[str, tuple[int, ...]] = {}
    for name, tensor in model.state_dict().items():
        for theirs, stored in RENAMES:
            if name.startswith(theirs):
                name = stored + name.removeprefix(theirs)
        shape = tuple(tensor.shape)
        if name.endswith(".mlp.experts.gate_up_proj"):
            experts, inner, hidden = shape[0], shape[1] // 2, shape[2]
            base = name.removesuffix("gate_up_proj")
            for e in range(experts):
                out[f"{base}{e}.gate_proj.weight"] = out[f"{base}{e}.up_proj.weight"] = (inner, hidden)
        elif name.endswith(".mlp.experts.down_proj"):
            base = name.removesuffix("down_proj")
            out.update({f"{base}{e}.down_proj.weight": shape[1:] for e in range(shape[0])})
        else:
            out[name] = shape
    return out


def random_tensor(name: str, shape: tuple[int, ...], gen: torch.Generator) -> Tensor:
    """Weights a forward runs on: norms near 1, layer scales small, the rest normal(0, 0.05); bf16."""
    noise = torch.randn(shape, generator=gen)
    leaf = name.rsplit(".", 2)[-2]
    if name.endswith(".weight") and ("norm" in leaf or leaf.startswith("ln_")):
        noise = 1.0 + 0.1 * noise
    elif name.endswith(".scale"):
        noise = 0.01 + 0.001 * noise
    else:
        noise = 0.05 * noise
    return noise.to(torch.bfloat16)


def write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")


def write_miniature(directory: Path) -> dict[str, Tensor]:
    """Write the directory; returns every tensor written, by name."""
    directory.mkdir(parents=True, exist_ok=True)
    config = config_json()
    gen = torch.Generator().manual_seed(0)
    state = {n: random_tensor(n, s, gen) for n, s in sorted(checkpoint_shapes(config).items())}
    names = list(state)
    per = -(-len(names) // SHARDS)
    weight_map: dict[str, str] = {}
    for i in range(SHARDS):
        part = names[i * per:(i + 1) * per]
        file = f"model-{i + 1:05d}-of-{SHARDS:05d}.safetensors"
        save_file({n: state[n] for n in part}, str(directory / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, file))
    total = sum(t.numel() * t.element_size() for t in state.values())
    write_json(directory / "model.safetensors.index.json", {"metadata": {"total_size": total}, "weight_map": weight_map})
    write_json(directory / "config.json", config)
    write_json(directory / "preprocessor_config.json", PROCESSOR)
    byte_tokenizer({i: text for text, i in MARKERS.items()}).save(str(directory / "tokenizer.json"))
    return state
