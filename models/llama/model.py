"""`lm` of models/llama.walk: any Llama-architecture chat model over the paged KV engine.

    prefill(prompt: tokens, temperature, top_p) -> token   the prompt's ids (the frontend tokenized
                                                            the rendered chat template) and the first
                                                            reply token;
    decode(prev: token, temperature, top_p) -> token        the next token.

Everything but the prompt and the end tokens is the shared Llama component's
(`wgc.models.layers.paged_llama.PagedLlama`, also the base of Orpheus's language model): batching,
chunked prefill, per-request sampling, CUDA-graph decode. A sampled stop id of the checkpoint (any of
its `eos_token_id`s, config.py) leaves as the walk's `eos` const, so one loop condition ends a reply
whichever stop token the model wrote.

Weights: `weights=` (a Hugging Face directory), else random ones for `preset` or `config`, else
WGC_LLAMA_DIR, else the tiny preset. Float32 on CPU, the declared dtype on CUDA. At tp > 1 the
component is one rank's shard of its TP group (`component_group`): from a checkpoint each rank reads
only its own parts (`load_llama(..., group=)`); random weights are made whole from the seed on every
rank and cut in place (`shard_llama`), so every rank holds its part of the same model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from wgc.models.layers.dtypes import compute_dtype
from wgc.models.layers.llama_weights import load_llama
from wgc.models.layers.paged_llama import PagedLlama, random_llama
from wgc.models.layers.presets import TinyPreset
from wgc.models.layers.tensor_parallel import component_group, shard_label, shard_llama
from wgc.models.layers.tp_cuts import check_degree
from wgc.models.llama.config import LlamaChatConfig
from wgc.models.weights_io import announce, choose
from wgc.runtime.components.base import Call, CallError
from wgc.runtime.engines.decode_graphs import GRAPH_CONTEXT

from wgc.plan.model import ComponentSpec

KNOB = "WGC_LLAMA_DIR"


class ChatModel(TinyPreset, PagedLlama):
    """A Llama chat model as a kv component (see the module docstring)."""

    def __init__(self, spec: ComponentSpec, rank: int, device: str, *, weights: str | Path | None = None,
                 preset: str | None = None, seed: int | None = None, config: LlamaChatConfig | None = None,
                 graph_context: int = GRAPH_CONTEXT, plan_ahead: bool | None = None) -> None:
        super().__init__(spec, rank, device)
        self.torch_device = torch.device(device)
        dtype = compute_dtype(spec, self.torch_device)
        directory, fallback = choose(weights, preset is not None or config is not None, KNOB)
        if directory is not None:
            self.config = LlamaChatConfig.from_directory(directory)
        else:
            self.config = config if config is not None else LlamaChatConfig.preset(preset or "tiny")
        c = self.config.llama  # a degree the layers cannot be split by: one line, before anything is read
        check_degree(f"llama {spec.name}", spec.tp, c.heads, c.kv_heads, c.intermediate)
        group = component_group(spec)  # tp > 1: this rank's shard (models/layers/tensor_parallel.py)
        if directory is not None:
            model = load_llama(directory, c, self.torch_device, dtype, group)  # its own parts only
            self.source = str(directory)
        else:
            model = random_llama(c, self.torch_device, dtype, seed or 0)
            model = model if group is None else shard_llama(model, group)  # the whole model, cut in place
            self.source = f"{self.config.name} {'config' if config is not None else 'preset'}, random weights"
        eos = spec.consts.get("eos")
        if not isinstance(eos, int):
            raise ValueError(f"llama {spec.name}: the walk must declare `const eos: token` (the end every stop "
                             "id is reported as)")
        self.eos = eos
        self.stops = frozenset(self.config.stop_ids)
        self.seed = seed
        self.start_engine(model, dtype, graph_context, plan_ahead)
        self.shard = shard_label(getattr(model, "tp", None))  # the group the split left on the model, if it split
        announce("llama", spec.name, KNOB if fallback else None, "the tiny preset", self.source,
                 self.shard + self.where)

    def describe(self) -> str:
        return f"{self.source}; {self.shard}{self.where}"

    def prompt_ids(self, call: Call) -> list[int]:
        """The prompt's token ids (asked by the scheduler too, so it never raises: `prefill` checks them)."""
        value = call.args[0]
        ids = value.tolist() if hasattr(value, "tolist") else value
        return list(ids) if isinstance(ids, list | tuple) else []

    def check_prompt(self, call: Call) -> None:
        """CallError (this request fails, the batch runs on) for a prompt that is not token ids of this model."""
        value = call.args[0]
        ids = self._prompt_ids(call)
        if not ids:
            what = "no tokens" if isinstance(value, list | tuple) or hasattr(value, "tolist") else \
                f"expected token ids, found {type(value).__name__}"
            raise CallError(call.request, f"prompt: {what}")
        vocab = self.config.llama.vocab
        for i, t in enumerate(ids):
            if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab:
                raise CallError(call.request, f"prompt[{i}]: {t!r} is not a token id of this model (0..{vocab - 1})")

    def sampling_args(self, entry: str, call: Call) -> tuple[Any, ...]:
        """(temperature, top_p): after the prompt, or after `prev`."""
        return tuple(call.args[1:3])

    def token_in(self, prev: Any) -> int:
        """A token fed back as a model id. The walk's `eos` (-1, no id of the model) comes back only in
        a decode the runtime ran speculatively past the end, whose result it discards: it is fed as
        the checkpoint's first stop id (or 0), so that step runs and nothing fails."""
        token = int(prev)
        return (self.config.stop_ids[0] if self.config.stop_ids else 0) if token == self.eos else token

    def token_out(self, token: int, generated: int) -> Any:
        return self.eos if token in self.stops else int(token)
