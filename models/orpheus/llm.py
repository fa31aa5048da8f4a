"""`llm` of models/orpheus.walk: Orpheus's Llama-3.2-3B (or the tiny preset) over the paged KV engine.

Entries, batched across requests (one forward per entry call over every call; ragged lengths go
through the page tables):
    prefill(prompt, voice, temperature, top_p, repetition_penalty) -> token
        tokenizes `"{voice}: {text}"` in Orpheus's prompt format, writes it to the request's KV
        and samples the first generated token;
    decode(prev, temperature, top_p, repetition_penalty) -> token
        writes `prev` (the token sampled last) and samples the next.
Tokens in and out are Orpheus ids (`vocab.py` maps the tiny preset's compact ids at this boundary).

The prefill/decode machinery — batching over the paged KV engine, chunked prefill, sampling per
request (repetition penalty, temperature, top-p, a draw keyed by (seed, step), the seed derived from
the request id), CUDA-graph decode and planning ahead — is the shared Llama component's
(`wgc.models.layers.paged_llama.PagedLlama`, also the base of models/llama.walk's `lm`). This
module adds what is Orpheus's own: the prompt format, the compact vocabulary's map at the boundary,
and the per-sequence `generated` count giving a sampled code its position in its 7-token frame.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from wgc.models.layers import LlamaModel
from wgc.models.layers.dtypes import declared_dtype
from wgc.models.layers.llama_weights import load_llama, read_config
from wgc.models.layers.paged_llama import PagedLlama, random_llama
from wgc.models.layers.presets import TinyPreset
from wgc.models.layers.tensor_parallel import component_group, shard_llama
from wgc.models.orpheus.config import OrpheusConfig
from wgc.models.orpheus.vocab import TokenMap, encode_prompt, load_tokenizer, tiny_tokenizer
from wgc.models.weights_io import announce, choose
from wgc.runtime.components.base import Call
from wgc.runtime.engines.decode_graphs import GRAPH_CONTEXT
from wgc.runtime.engines.kv_engine import KVExhausted, kv_budget

from wgc.plan.model import ComponentSpec

__all__ = ["KVExhausted", "LanguageModel", "kv_budget", "tiny_init"]


def tiny_init(model: LlamaModel, config: OrpheusConfig, seed: int = 0) -> None:
    """The tiny preset's random weights: normal(0, 0.02) as transformers initialises Llama, unit norms,
    then a bias toward audio-code tokens, so that a random model speaks (its windows decode to audio):

    channel 0 of every token embedding is a constant 1, which the residual stream carries to the
    final norm; row v of the LM head reads channel 0 with weight beta for audio codes and 0 for the
    rest. beta is calibrated on random prompts so that code logits sit `config.code_bias` above the
    others on average (8 for tiny: a code is sampled with probability ~0.99998 per token).
    """
    gen = torch.Generator().manual_seed(seed)
    token_map = TokenMap(config.vocab)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.02)
        model.embed_tokens.weight[:, 0] = 1.0
        head = model.lm_head.weight
        head[:, 0] = 0.0
        codes = torch.tensor(token_map.code_ids())
        head[codes, 0] = 1.0
        if config.code_bias:
            probe = torch.randint(0, config.llama.vocab, (4, 24), generator=gen)
            hidden = model.norm(_hidden(model, probe))  # [4, 24, hidden]
            head[codes, 0] = config.code_bias / float(hidden[..., 0].mean())


def _hidden(model: LlamaModel, tokens: Tensor) -> Tensor:
    x = model.embed_tokens(tokens)
    positions = torch.arange(tokens.shape[1]).expand(tokens.shape[0], -1)
    cos, sin = model.rotary(positions, x.dtype)
    for layer in model.layers:
        x = layer(x, cos, sin, None)
    return x


class LanguageModel(TinyPreset, PagedLlama):
    """Orpheus's language model as a kv component (see the module docstring)."""

    def __init__(self, spec: ComponentSpec, rank: int, device: str, *, weights: str | Path | None = None,
                 preset: str | None = None, seed: int | None = None, config: OrpheusConfig | None = None,
                 graph_context: int = GRAPH_CONTEXT, plan_ahead: bool | None = None) -> None:
        """Weights from `weights` (a Hugging Face directory), else random ones for `preset` or `config`,
        else from WGC_ORPHEUS_DIR, else the tiny preset. `graph_context`: tokens a CUDA-graph decode covers.
        `plan_ahead`: plan an eager decode step's attention while the previous step runs; by default
        on CUDA only (on CPU the forward has finished before there is anything to overlap, and the
        side thread only contends with the runtime for the GIL: the bench's decode steps ran 20-50%
        slower with it)."""
        super().__init__(spec, rank, device)
        self.torch_device = torch.device(device)
        weights, fallback = choose(weights, preset is not None or config is not None, "WGC_ORPHEUS_DIR")
        group = component_group(spec)  # tp > 1: a checkpoint is read per shard (models/layers/tensor_parallel.py)
        if weights is None and config is None:
            preset = preset or "tiny"
        if weights is not None:
            self.config = OrpheusConfig.from_hf_config(read_config(weights), name=str(weights))
            dtype = self._dtype()
            model = load_llama(weights, self.config.llama, self.torch_device, dtype, group)
            tokenizer_file = weights / "tokenizer.json"
            compact = self.config.vocab == "compact"
            self.tokenizer = tiny_tokenizer() if compact and not tokenizer_file.is_file() else load_tokenizer(weights)
            self.source = str(weights)
        else:
            assert preset is not None or config is not None
            self.config = config if config is not None else OrpheusConfig.preset(str(preset))
            dtype = self._dtype()
            model = self._random_model(seed or 0, dtype)
            model = model if group is None else shard_llama(model, group)  # the whole model, cut in place
            self.tokenizer = tiny_tokenizer()
            self.source = f"{self.config.name} {'config' if config is not None else 'preset'}, random weights"
        self.map = TokenMap(self.config.vocab)
        self.seed = seed
        self.start_engine(model, dtype, graph_context, plan_ahead)
        announce("orpheus", spec.name, "WGC_ORPHEUS_DIR" if fallback else None, "the tiny preset", self.source,
                 self.where)

    def describe(self) -> str:
        return f"{self.source}; {self.where}"

    def _dtype(self) -> torch.dtype:
        if self.torch_device.type != "cuda" or self.config.vocab == "compact":
            return torch.float32
        return declared_dtype(self.spec)

    def _random_model(self, seed: int, dtype: torch.dtype) -> LlamaModel:
        if self.config.vocab == "compact":
            model = LlamaModel(self.config.llama)
            tiny_init(model, self.config, seed)
            return model.to(self.torch_device, dtype).eval()
        return random_llama(self.config.llama, self.torch_device, dtype, seed)

    # ---- what Orpheus adds to the shared Llama component ------------------------------------------

    def prompt_ids(self, call: Call) -> list[int]:
        """`"{voice}: {text}"` in Orpheus's prompt format, as model ids."""
        prompt, voice = call.args[0], call.args[1]
        text = prompt.decode() if isinstance(prompt, bytes) else str(prompt)
        return [self.map.to_model(t) for t in encode_prompt(self.tokenizer, str(voice), text)]

    def sampling_args(self, entry: str, call: Call) -> tuple[Any, ...]:
        """(temperature, top_p, repetition_penalty): after the prompt and voice, or after `prev`."""
        return tuple(call.args[2:5] if entry == "prefill" else call.args[1:4])

    def token_in(self, prev: Any) -> int:
        return self.map.to_model(int(prev))

    def token_out(self, token: int, generated: int) -> Any:
        """A model id as an Orpheus id; a compact code takes its frame position from `generated`."""
        return int(self.map.from_model(token, generated))
