"""Qwen3-Omni's code2wav network (transformers `Qwen3OmniMoeCode2Wav`), in the checkpoint's names.

    codes [B, T, 16] → mean of the 16 codebook embeddings (quantizer q's codes at rows q·codebook_size..)
        → pre_transformer: `layers` × (RMSNorm, sliding-window causal attention with RoPE, layer scale;
          RMSNorm, SwiGLU, layer scale), final RMSNorm                                     [B, T, hidden]
        → upsample: per ratio r, a transposed conv ×r (kernel r) and a ConvNeXt block     [B, hidden, 4T]
        → decoder: a causal conv to decoder_dim; per rate r a block (SnakeBeta, transposed conv ×r with
          kernel 2r trimming r on each side, three residual units dilated 1, 3, 9), halving channels;
          SnakeBeta; a causal conv to 1 channel; clamp to [−1, 1]                  [B, 1920·T − 555]

Parameter names are the checkpoint's without its `code2wav.` prefix (`code_embedding.weight`,
`pre_transformer.layers.0.self_attn.q_proj.weight`, `upsample.0.1.dwconv.conv.weight`,
`decoder.1.block.1.conv.weight`, `decoder.5.alpha`, ...), so a state dict moves either way unchanged.
code2wav_config.py derives the sample arithmetic from the same stages.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from wgc.models.layers import RMSNorm, RotaryEmbedding, SelfAttention, SwiGLU
from wgc.models.qwen3_omni.code2wav_config import CONV_KERNEL, DILATIONS, Code2WavConfig


class CausalConv(nn.Module):
    """Conv1d (stride 1) padded on the left only: output t reads inputs t − (k−1)·d .. t."""

    def __init__(self, cin: int, cout: int, kernel: int, dilation: int = 1, groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel, dilation=dilation, groups=groups)
        self.left = (kernel - 1) * dilation

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(F.pad(x, (self.left, 0)))  # [B, cout, T]


class CausalTransConv(nn.Module):
    """ConvTranspose1d ×stride with `kernel − stride` samples cut from each side: T → stride·T − (kernel − stride)."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(cin, cout, kernel, stride=stride)
        self.cut = kernel - stride

    def forward(self, x: Tensor) -> Tensor:
        y = self.conv(x)  # [B, cout, (T − 1)·stride + kernel]
        return y[..., self.cut:y.shape[-1] - self.cut]  # [B, cout, stride·T − cut]


class SnakeBeta(nn.Module):
    """x + sin²(x·e^alpha) / e^beta, per channel (alpha and beta stored as logs)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: Tensor) -> Tensor:
        alpha = self.alpha.exp()[:, None]  # [C, 1]
        beta = self.beta.exp()[:, None]  # [C, 1]
        return x + torch.sin(x * alpha).pow(2) / (beta + 1e-9)  # [B, C, T]


class ConvNeXt(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = CausalConv(dim, dim, CONV_KERNEL, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x: Tensor) -> Tensor:
        h = self.norm(self.dwconv(x).transpose(1, 2))  # [B, T, dim]
        h = self.gamma * self.pwconv2(F.gelu(self.pwconv1(h)))  # [B, T, dim]
        return x + h.transpose(1, 2)  # [B, dim, T]


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int) -> None:
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv(dim, dim, CONV_KERNEL, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv(dim, dim, 1)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.conv2(self.act2(self.conv1(self.act1(x))))  # [B, dim, T]


class DecoderBlock(nn.Module):
    def __init__(self, cin: int, rate: int) -> None:
        super().__init__()
        cout = cin // 2
        self.block = nn.ModuleList([SnakeBeta(cin), CausalTransConv(cin, cout, 2 * rate, rate),
                                    *(ResidualUnit(cout, d) for d in DILATIONS)])

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.block:
            x = layer(x)
        return x  # [B, cin / 2, rate·T − rate]


class LayerScale(nn.Module):
    def __init__(self, dim: int, initial: float) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((dim,), initial))

    def forward(self, x: Tensor) -> Tensor:
        return self.scale * x


class TransformerLayer(nn.Module):
    def __init__(self, c: Code2WavConfig, index: int) -> None:
        super().__init__()
        self.self_attn = SelfAttention(index, c.hidden, c.heads, c.kv_heads, c.head_dim)
        self.mlp = SwiGLU(c.hidden, c.intermediate)
        self.input_layernorm = RMSNorm(c.hidden, c.rms_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden, c.rms_eps)
        self.self_attn_layer_scale = LayerScale(c.hidden, c.layer_scale)
        self.mlp_layer_scale = LayerScale(c.hidden, c.layer_scale)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor) -> Tensor:
        attn = self.self_attn
        q, k, v = attn.qkv(self.input_layernorm(x), cos, sin)  # [B, T, heads | kv_heads, head_dim]
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask,
                                             enable_gqa=attn.heads != attn.kv_heads)  # [B, heads, T, head_dim]
        x = x + self.self_attn_layer_scale(attn.out(out.transpose(1, 2)))  # [B, T, hidden]
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))  # [B, T, hidden]


class PreTransformer(nn.Module):
    def __init__(self, c: Code2WavConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(TransformerLayer(c, i) for i in range(c.layers))
        self.norm = RMSNorm(c.hidden, c.rms_eps)
        self.rotary = RotaryEmbedding(c.head_dim, c.rope_theta)
        self.window = c.sliding_window

    def forward(self, x: Tensor) -> Tensor:
        t = x.shape[1]
        positions = torch.arange(t, device=x.device)  # [T]: every window counts from 0 (RoPE is relative)
        cos, sin = self.rotary(positions, x.dtype)  # [T, head_dim] each
        gap = positions[:, None] - positions[None, :]  # [T, T]: query − key
        mask = (gap >= 0) & (gap < self.window)  # [T, T]: causal, the last `window` positions
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.norm(x)  # [B, T, hidden]


class Code2WavNet(nn.Module):
    def __init__(self, c: Code2WavConfig) -> None:
        super().__init__()
        self.config = c
        self.code_embedding = nn.Embedding(c.codebook_size * c.num_quantizers, c.hidden)
        offsets = torch.arange(c.num_quantizers, device="cpu") * c.codebook_size  # [Q]: real even when built on meta
        self.register_buffer("code_offset", offsets, persistent=False)
        self.pre_transformer = PreTransformer(c)
        self.upsample = nn.ModuleList(nn.ModuleList([CausalTransConv(c.hidden, c.hidden, r, r), ConvNeXt(c.hidden)])
                                      for r in c.upsampling_ratios)
        dims = [c.decoder_dim // 2**i for i in range(len(c.upsample_rates) + 1)]
        self.decoder = nn.ModuleList([CausalConv(c.hidden, c.decoder_dim, CONV_KERNEL),
                                      *(DecoderBlock(dims[i], r) for i, r in enumerate(c.upsample_rates)),
                                      SnakeBeta(dims[-1]), CausalConv(dims[-1], 1, CONV_KERNEL)])

    def forward(self, codes: Tensor) -> Tensor:
        """codes [B, T, num_quantizers] (each in [0, codebook_size)) → audio [B, hop·T − trim] in [−1, 1]."""
        x = self.code_embedding(codes + self.code_offset).mean(2)  # [B, T, hidden]
        x = self.pre_transformer(x).transpose(1, 2)  # [B, hidden, T]
        for stage in self.upsample:
            for layer in stage:
                x = layer(x)  # [B, hidden, r·T]
        for layer in self.decoder:
            x = layer(x)  # ... → [B, 1, hop·T − trim]
        return x[:, 0].clamp(-1.0, 1.0)  # [B, hop·T − trim]


def tiny_init(net: Code2WavNet, seed: int = 0) -> Code2WavNet:
    """Random weights that make every part matter: the module's default draws, then codebook rows
    N(0, 1), norms and layer scales around 1 and 0.3 (transformers starts them at 0.01 and 1e-6, which
    would hide the attention and the ConvNeXt blocks), and SnakeBeta's logs N(0, 0.1). The global RNG
    is left untouched."""
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        for module in net.modules():
            if isinstance(module, (nn.Linear, nn.Conv1d, nn.ConvTranspose1d, nn.Embedding, nn.LayerNorm)):
                module.reset_parameters()
        nn.init.normal_(net.code_embedding.weight)
        for name, p in net.named_parameters():
            if name.endswith(("layernorm.weight", "norm.weight")):
                p.normal_(1.0, 0.1)
            elif name.endswith((".scale", ".gamma")):
                p.uniform_(0.2, 0.4)
            elif name.endswith((".alpha", ".beta")):
                p.normal_(0.0, 0.1)
    return net
