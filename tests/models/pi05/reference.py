"""transformers 5.24's PI0 at a pi05 config's dims (the parity reference), and its weights mapped to
lerobot's checkpoint names (the layout models/pi05/weights.py reads)."""

from __future__ import annotations

from functools import cache

import torch
from torch import Tensor
from transformers import PI0Config, PI0ForConditionalGeneration
from wgc.models.layers.config import LlamaConfig
from wgc.models.pi05.config import Pi05Config


def _gemma(c: LlamaConfig) -> dict:
    return {"model_type": "gemma", "hidden_size": c.hidden, "num_hidden_layers": c.layers,
            "intermediate_size": c.intermediate, "num_attention_heads": c.heads, "num_key_value_heads": c.kv_heads,
            "head_dim": c.head_dim, "vocab_size": c.vocab, "rms_norm_eps": c.norm_eps, "hidden_activation": "gelu_pytorch_tanh"}


def pi0_config(c: Pi05Config) -> PI0Config:
    v = c.vision
    vision = {"model_type": "siglip_vision_model", "hidden_size": v.hidden, "num_hidden_layers": v.layers,
              "num_attention_heads": v.heads, "intermediate_size": v.intermediate, "image_size": v.image_size,
              "patch_size": v.patch, "vision_use_head": False, "layer_norm_eps": v.eps}
    vlm = {"model_type": "paligemma", "text_config": _gemma(c.prefix), "vision_config": vision,
           "projection_dim": c.prefix.hidden, "image_token_id": c.prefix.vocab - 1}
    return PI0Config(vlm_config=vlm, dit_config=_gemma(c.expert), chunk_size=c.chunk, max_state_dim=c.action_dim,
                     max_action_dim=c.action_dim, num_inference_steps=c.steps)


@cache
def reference(c: Pi05Config, seed: int = 0) -> PI0ForConditionalGeneration:
    """A PI0 with random weights (norms perturbed off zero so that (1 + w) is exercised), eager attention."""
    torch.manual_seed(seed)
    model = PI0ForConditionalGeneration(pi0_config(c)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and p.dim() == 1:
                p.normal_(0.0, 0.1)
    return model


def lerobot_state_dict(model: PI0ForConditionalGeneration) -> dict[str, Tensor]:
    """transformers' PI0 names -> lerobot's pi0 checkpoint names (transformers' conversion, backwards)."""
    out: dict[str, Tensor] = {}
    for name, t in model.state_dict().items():
        if name.startswith("model.vlm.language_model.embed_tokens."):
            out["paligemma_with_expert.paligemma.lm_head.weight"] = t
        elif name.startswith("model.vlm.language_model."):
            out["paligemma_with_expert.paligemma.model.language_model." + name.removeprefix("model.vlm.language_model.")] = t
        elif name.startswith("model.vlm.vision_tower."):  # lerobot keeps SiglipVisionModel's `vision_model.`
            rest = name.removeprefix("model.vlm.vision_tower.")
            out["paligemma_with_expert.paligemma.model.vision_tower.vision_model." + rest] = t
        elif name.startswith("model.vlm."):
            out["paligemma_with_expert.paligemma.model." + name.removeprefix("model.vlm.")] = t
        elif name.startswith("model.dit.embed_tokens."):
            continue  # the expert's embedding is never used (lerobot drops it)
        elif name.startswith("model.dit."):
            out["paligemma_with_expert.gemma_expert.model." + name.removeprefix("model.dit.")] = t
        elif name.startswith("embed_action_time."):
            out[name.removeprefix("embed_action_time.")] = t
        elif name.startswith("model.") or "sinusoid" in name:
            continue
        else:
            out[name] = t
    return {k: v.contiguous().clone() for k, v in out.items()}
