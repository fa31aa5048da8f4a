"""A miniature lerobot pi05_base-layout directory: config.json, model.safetensors in lerobot's names
(optionally under an outer `model.`), a PaliGemma-like tokenizer.json (<bos> = 2) and the two
processor statistics files. Its head geometry is the real variants' (8 query heads, 1 KV head of
256; SigLIP heads of 72), which the loader cannot read off shapes; widths and depths are tiny."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
from wgc.models.layers.config import LlamaConfig
from wgc.models.layers.tokenizer import bytes_to_unicode
from wgc.models.pi05.config import Pi05Config, SiglipConfig
from wgc.models.pi05.weights import checkpoint_name

from tests.models.pi05.helpers import components

STATE_DIM, ACTION_DIM = 8, 7


def mini_config() -> Pi05Config:
    vision = SiglipConfig(hidden=72, layers=1, heads=1, intermediate=64, image_size=56, patch=14, projection=64)
    prefix = LlamaConfig.gemma(vocab=260, hidden=64, layers=2, heads=8, kv_heads=1, head_dim=256, intermediate=128)
    expert = LlamaConfig.gemma(vocab=260, hidden=32, layers=2, heads=8, kv_heads=1, head_dim=256, intermediate=64)
    return Pi05Config("mini", vision, prefix, expert)


def paligemma_like_tokenizer(post_processor: bool = True) -> Tokenizer:
    """<pad> 0, <eos> 1, <bos> 2 (prepended by the post-processor, unless told), then the 256 byte symbols."""
    alphabet = bytes_to_unicode()
    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, **{alphabet[b]: 3 + b for b in range(256)}}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(n, special=True) for n in ("<pad>", "<eos>", "<bos>")])
    if post_processor:
        tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    return tok


def state_dict(config: Pi05Config) -> dict[str, torch.Tensor]:
    """Random components' parameters under lerobot's names (the expert's unused lm_head added)."""
    vit, llm = components(config)
    out = {}
    for part, module in (("tower", vit.model), ("prefix", llm.prefix), ("expert", llm.expert), ("heads", llm.heads)):
        name = checkpoint_name(part)
        out.update({name(n): p.detach().clone() for n, p in module.named_parameters()})
    out["paligemma_with_expert.gemma_expert.lm_head.weight"] = torch.zeros(config.expert.vocab, config.expert.hidden)
    return out


OLDER = (("paligemma_with_expert.paligemma.model.language_model.", "paligemma_with_expert.paligemma.language_model.model."),
         ("paligemma_with_expert.paligemma.lm_head.", "paligemma_with_expert.paligemma.language_model.lm_head."),
         ("paligemma_with_expert.paligemma.model.", "paligemma_with_expert.paligemma."))


def older_name(name: str) -> str:
    """transformers' PaliGemma names before 4.52 (paligemma.language_model.model.*, paligemma.vision_tower.*)."""
    for new, old in OLDER:
        if name.startswith(new):
            return old + name[len(new):]
    return name


def write(directory: Path, config: Pi05Config | None = None, outer: bool = True,
          older: bool = False) -> dict[str, torch.Tensor]:
    """The miniature directory; returns the tensors written (lerobot's current names, no outer prefix)."""
    config = config or mini_config()
    directory.mkdir(parents=True, exist_ok=True)
    tensors = state_dict(config)
    stored = {("model." if outer else "") + (older_name(k) if older else k): v for k, v in tensors.items()}
    save_file(stored, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps({
        "type": "pi05", "chunk_size": config.chunk, "max_state_dim": 32, "max_action_dim": 32,
        "num_inference_steps": 10, "tokenizer_max_length": 200, "image_resolution": [56, 56],
        "paligemma_variant": "gemma_2b", "action_expert_variant": "gemma_300m"}))
    paligemma_like_tokenizer().save(str(directory / "tokenizer.json"))
    gen = torch.Generator().manual_seed(9)
    low_s = torch.randn(STATE_DIM, generator=gen)
    low_a = torch.randn(ACTION_DIM, generator=gen)
    save_file({"observation.state.q01": low_s, "observation.state.q99": low_s + 2.0,
               "action.q01": low_a, "action.q99": low_a + 3.0},
              str(directory / "policy_preprocessor_step_2_normalizer_processor.safetensors"))
    save_file({"action.q01": low_a, "action.q99": low_a + 3.0},
              str(directory / "policy_postprocessor_step_0_unnormalizer_processor.safetensors"))
    return tensors
