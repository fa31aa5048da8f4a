"""Shared transformer layers, written once for every model family: RMSNorm, rotary embeddings with
Llama-3 scaling, grouped-query attention over the paged KV engine, SwiGLU, a sparse mixture of
SwiGLU experts, embedding and LM head, and the Llama decoder built from them."""

from wgc.models.layers.attention import SelfAttention
from wgc.models.layers.config import LlamaConfig
from wgc.models.layers.embedding import Embedding, LMHead
from wgc.models.layers.init import init_random
from wgc.models.layers.llama import LlamaBlock, LlamaModel, load_hf_state_dict
from wgc.models.layers.mlp import SwiGLU
from wgc.models.layers.moe import SparseMoE
from wgc.models.layers.norm import RMSNorm
from wgc.models.layers.rope import Llama3Scaling, RotaryEmbedding, apply_rotary, inverse_frequencies, llama3_scale

__all__ = [
    "Embedding",
    "LMHead",
    "Llama3Scaling",
    "LlamaBlock",
    "LlamaConfig",
    "LlamaModel",
    "RMSNorm",
    "RotaryEmbedding",
    "SelfAttention",
    "SparseMoE",
    "SwiGLU",
    "apply_rotary",
    "init_random",
    "inverse_frequencies",
    "llama3_scale",
    "load_hf_state_dict",
]
