"""A miniature BAGEL-7B-MoT directory in the real files' layout (models-wave2.md §1.9), written for the
loader's tests: tiny sizes, the real names. The names are spelled out here from the reference, not
taken from our modules, so a renamed parameter fails the load.

    ema.safetensors   language_model.* (both experts: `*_moe_gen`), vit_model.* with one layer more
                      than run, connector.*, vit_pos_embed.pos_embed, latent_pos_embed.pos_embed,
                      time_embedder.mlp.{0,2}.*, vae2llm.*, llm2vae.*  (bf16, as the real file)
    ae.safetensors    a FLUX VAE in BFL's names (from diffusers' AutoencoderKL, renamed here)
    llm_config.json, vit_config.json   JSON with the real files' keys
    tokenizer.json    byte-level, BAGEL's four specials at their Qwen ids
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import Tensor
from wgc.models.bagel.vae import VAE_TINY
from wgc.models.bagel.vocab import tiny_tokenizer

# Sizes: the LLM's vocabulary is the real one's kind (it must hold the specials, ids up to 151653).
VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, INTER = 151680, 32, 2, 2, 1, 16, 64
VIT_HIDDEN, VIT_LAYERS, VIT_HEADS, VIT_INTER, PATCH, VIT_GRID = 16, 2, 2, 32, 14, 4  # VIT_LAYERS in the file
LATENT_GRID, FEATURES = 16, 256

LLM_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645,
    "hidden_act": "silu", "hidden_size": HIDDEN, "initializer_range": 0.02, "intermediate_size": INTER,
    "max_position_embeddings": 4096, "max_window_layers": LAYERS, "model_type": "qwen2",
    "num_attention_heads": HEADS, "num_hidden_layers": LAYERS, "num_key_value_heads": KV_HEADS,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": True, "use_sliding_window": False,
    "vocab_size": VOCAB,
}
VIT_CONFIG = {
    "architectures": ["SiglipVisionModel"], "attention_dropout": 0.0, "hidden_act": "gelu_pytorch_tanh",
    "hidden_size": VIT_HIDDEN, "image_size": PATCH * VIT_GRID, "intermediate_size": VIT_INTER,
    "layer_norm_eps": 1e-06, "model_type": "siglip_vision_model", "num_attention_heads": VIT_HEADS,
    "num_channels": 3, "num_hidden_layers": VIT_LAYERS, "patch_size": PATCH, "torch_dtype": "bfloat16",
}


def ema_shapes() -> dict[str, tuple[int, ...]]:
    """Every tensor of the miniature ema.safetensors, by its real name (§1.2 table, §1.9)."""
    h, q, kv, d = HIDDEN, HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, HEAD_DIM
    out: dict[str, tuple[int, ...]] = {"language_model.model.embed_tokens.weight": (VOCAB, h)}
    for i in range(LAYERS):
        p = f"language_model.model.layers.{i}."
        for gen in ("", "_moe_gen"):
            out.update({
                f"{p}input_layernorm{gen}.weight": (h,), f"{p}post_attention_layernorm{gen}.weight": (h,),
                f"{p}self_attn.q_proj{gen}.weight": (q, h), f"{p}self_attn.q_proj{gen}.bias": (q,),
                f"{p}self_attn.k_proj{gen}.weight": (kv, h), f"{p}self_attn.k_proj{gen}.bias": (kv,),
                f"{p}self_attn.v_proj{gen}.weight": (kv, h), f"{p}self_attn.v_proj{gen}.bias": (kv,),
                f"{p}self_attn.o_proj{gen}.weight": (h, q),
                f"{p}self_attn.q_norm{gen}.weight": (d,), f"{p}self_attn.k_norm{gen}.weight": (d,),
                f"{p}mlp{gen}.gate_proj.weight": (INTER, h), f"{p}mlp{gen}.up_proj.weight": (INTER, h),
                f"{p}mlp{gen}.down_proj.weight": (h, INTER),
            })
    out.update({"language_model.model.norm.weight": (h,), "language_model.model.norm_moe_gen.weight": (h,),
                "language_model.lm_head.weight": (VOCAB, h)})
    v, vi, cells = VIT_HIDDEN, VIT_INTER, VIT_GRID * VIT_GRID
    e = "vit_model.vision_model.embeddings."
    out.update({f"{e}patch_embedding.weight": (v, PATCH * PATCH * 3), f"{e}patch_embedding.bias": (v,),
                f"{e}position_embedding.weight": (cells, v)})
    for i in range(VIT_LAYERS):
        p = f"vit_model.vision_model.encoder.layers.{i}."
        for name, shape in {"layer_norm1": (v,), "layer_norm2": (v,), "self_attn.q_proj": (v, v),
                            "self_attn.k_proj": (v, v), "self_attn.v_proj": (v, v), "self_attn.out_proj": (v, v),
                            "mlp.fc1": (vi, v), "mlp.fc2": (v, vi)}.items():
            out[f"{p}{name}.weight"], out[f"{p}{name}.bias"] = shape, shape[:1]
    out.update({
        "vit_model.vision_model.post_layernorm.weight": (v,), "vit_model.vision_model.post_layernorm.bias": (v,),
        "connector.fc1.weight": (h, v), "connector.fc1.bias": (h,), "connector.fc2.weight": (h, h),
        "connector.fc2.bias": (h,), "vit_pos_embed.pos_embed": (cells, h),
        "latent_pos_embed.pos_embed": (LATENT_GRID * LATENT_GRID, h),
        "time_embedder.mlp.0.weight": (h, FEATURES), "time_embedder.mlp.0.bias": (h,),
        "time_embedder.mlp.2.weight": (h, h), "time_embedder.mlp.2.bias": (h,),
        "vae2llm.weight": (h, 64), "vae2llm.bias": (h,), "llm2vae.weight": (64, h), "llm2vae.bias": (64,),
    })
    return out


def random_tensors(shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, Tensor]:
    """bf16 tensors: norms near 1, everything else small, so that a forward stays finite."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in shapes.items():
        noise = torch.randn(shape, generator=gen)
        out[name] = (1 + 0.1 * noise if "norm" in name else 0.05 * noise).to(torch.bfloat16)
    return out


# ---- BFL names (§1.9), written from diffusers' names as the inverse of the conversion ----------

ATTN = {"group_norm": "norm", "to_q": "q", "to_k": "k", "to_v": "v", "to_out.0": "proj_out"}


def bfl_name(key: str, levels: int) -> str:
    half, rest = key.split(".", 1)
    if m := re.fullmatch(r"(down|up)_blocks\.(\d+)\.resnets\.(\d+)\.(.+)", rest):
        level = int(m[2]) if m[1] == "down" else levels - 1 - int(m[2])  # BFL counts up.* from the top
        rest = f"{m[1]}.{level}.block.{m[3]}.{m[4]}"
    elif m := re.fullmatch(r"down_blocks\.(\d+)\.downsamplers\.0\.conv\.(.+)", rest):
        rest = f"down.{m[1]}.downsample.conv.{m[2]}"
    elif m := re.fullmatch(r"up_blocks\.(\d+)\.upsamplers\.0\.conv\.(.+)", rest):
        rest = f"up.{levels - 1 - int(m[1])}.upsample.conv.{m[2]}"
    elif m := re.fullmatch(r"mid_block\.resnets\.(\d+)\.(.+)", rest):
        rest = f"mid.block_{int(m[1]) + 1}.{m[2]}"
    elif m := re.fullmatch(r"mid_block\.attentions\.0\.(group_norm|to_q|to_k|to_v|to_out\.0)\.(.+)", rest):
        rest = f"mid.attn_1.{ATTN[m[1]]}.{m[2]}"
    rest = rest.replace("conv_norm_out.", "norm_out.").replace("conv_shortcut.", "nin_shortcut.")
    return f"{half}.{rest}"


def bfl_state(vae: torch.nn.Module) -> dict[str, Tensor]:
    """The module's tensors under BFL's names; the attention projections as BFL's 1x1 convs."""
    levels = len(vae.config.block_out_channels)
    out = {}
    for key, t in vae.state_dict().items():
        conv = re.search(r"attentions\.0\.(to_q|to_k|to_v|to_out\.0)\.weight$", key)
        out[bfl_name(key, levels)] = (t[:, :, None, None] if conv else t).clone()
    return out


def reference_vae(seed: int = 3) -> torch.nn.Module:
    """diffusers' AutoencoderKL in the tiny FLUX configuration, its own random init from `seed`."""
    from diffusers import AutoencoderKL

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return AutoencoderKL(**VAE_TINY.diffusers_kwargs()).eval()


def write_miniature(directory: Path, seed: int = 0) -> tuple[dict[str, Tensor], torch.nn.Module]:
    """Write the miniature into `directory`: (the ema tensors as written, the VAE whose weights ae holds)."""
    directory.mkdir(parents=True, exist_ok=True)
    ema = random_tensors(ema_shapes(), seed)
    save_file(ema, str(directory / "ema.safetensors"), metadata={"format": "pt"})
    vae = reference_vae(seed + 3)
    save_file(bfl_state(vae), str(directory / "ae.safetensors"), metadata={"format": "pt"})
    (directory / "llm_config.json").write_text(json.dumps(LLM_CONFIG, indent=2) + "\n", encoding="utf-8")
    (directory / "vit_config.json").write_text(json.dumps(VIT_CONFIG, indent=2) + "\n", encoding="utf-8")
    tiny_tokenizer().save(str(directory / "tokenizer.json"))
    return ema, vae
