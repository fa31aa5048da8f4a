"""`llm` of models/bagel.walk: BAGEL's Mixture-of-Transformers LLM (mot.py) over the paged KV engine.

Entries, each batched over its calls (one forward per entry call; ragged lengths go through the
page tables; a (request, label) twice in one call list runs in a second wave):
    prefill_text(prompt)          `<|im_start|> text <|im_end|>`, und, causal, written; chunkable
    prefill_vit(x [N, hidden])    `<|vision_start|> x <|vision_end|>` as one block, und
    prefill_vae(x [N, hidden])    the same block; the N latent rows through the gen expert
    decode(prev, temperature) -> token   one token, und, causal, written; greedy at 0
    init_latents(height, width[, seed]) -> [N, 64]   the flow's starting noise
    velocity(z [N, 64], t, needed) -> [N, 64]   `<|vision_start|> latents <|vision_end|>` in gen mode,
                                  read only; a call with needed 0 (a guidance branch combine.step will
                                  not read: combine.reads_text / reads_image) runs no forward and gives
                                  [0, 64]; only the needed calls of a batch go into the forward
Every entry takes `cache=` (the call's label: main, cfg_text, cfg_img). Tokens in and out are Qwen
ids (`vocab.py` maps the tiny preset's compact ids at this boundary).

Positions come from the engine (`Prepared.positions`), never from the KV length: an image block
(`Write(block=True)`) puts its markers and all N tokens at the label's one current position, which
then advances by 1 while the KV length grows by N + 2 (BAGEL's `curr_rope` vs `curr_kvlens`). Blocks
attend in mode `prefix`: bidirectionally inside the block, and to all earlier context.

`velocity` queries the block at the label's current position with `write=False`: nothing is
written and the label's length, position and pages stay as they were. Its latents enter as
`vae2llm(z) + time_embedder(t) + latent_pos_embed(ids)` and leave as `llm2vae(hidden)` at the latent
rows: BAGEL's velocity, which points from data to noise (the update is z - v dt, dt > 0).

The starting noise is drawn on the CPU from a generator seeded per request, so a request's image is
the same wherever the component is placed and whatever it is batched with: the seed is the call's
third argument when given and not negative (a request's `seed`), else derived from the request id and the
component's base seed (`request_seed`). The latent grid (h, w in tokens) is remembered per request
and in every label's data (it travels with an exported label), since z alone gives only N.

Weights: `self.language_model` holds the checkpoint's `language_model.*` names, `self.adapter` its
`vae2llm.*`, `llm2vae.*`, `time_embedder.*` and `latent_pos_embed.*`, loaded from a BAGEL directory
(`weights=`, else WGC_BAGEL_DIR: weights.py) with its tokenizer.json; the tiny preset and `config=`
get random ones.

Tensor parallelism (the plan's tp > 1): each rank holds its shard of the MoT (layers/tp_shard.py:
both experts' q/k/v, o, gate/up and down cut alike, the embedding and head by vocabulary rows, the
norms whole) and a KV cache of its own heads; a checkpoint is read per shard, random weights are
made whole from the seed and cut. The adapter, the latents and the sampling are the same on every
rank (the head's logits are gathered whole), so every rank returns the same values.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from numbers import Real
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from wgc.models.bagel.config import VISION_END, VISION_START, BagelLLMConfig
from wgc.models.bagel.latents import TOKEN_DIM, LatentAdapter, initial_noise, latent_grid, latent_ids
from wgc.models.bagel.mot import MoTLM, init_random
from wgc.models.bagel.vocab import TokenMap, encode_prompt, tiny_tokenizer
from wgc.models.bagel.weights import KNOB, Checkpoint
from wgc.models.layers.dtypes import declared_dtype
from wgc.models.layers.presets import TinyPreset
from wgc.models.layers.tensor_parallel import component_group, shard_label
from wgc.models.layers.tp_cuts import check_degree, local_heads
from wgc.models.layers.tp_shard import shard_in_place
from wgc.models.weights_io import announce, choose
from wgc.runtime.components.base import PARTIAL, Call, CallError
from wgc.runtime.engines.attention import Mode
from wgc.runtime.engines.kv_component import KVComponent
from wgc.runtime.engines.kv_engine import Geometry, KVCacheEngine, Prepared, Write
from wgc.runtime.engines.sampling import SamplingParams, sample
from wgc.runtime.worker.scheduler import Demand

from wgc.plan.model import ComponentSpec

DEFAULT_PAGE_SIZE = 16
BLOCK_ENTRIES = frozenset({"prefill_vit", "prefill_vae", "velocity"})

def _rows(call: Call) -> int:
    """Rows of a block call's tensor argument (0 when it is not one: the entry itself then fails it)."""
    x = call.args[0] if call.args else None
    return int(x.shape[0]) if isinstance(x, Tensor) and x.dim() >= 1 else 0


def _is_needed(call: Call) -> bool:
    """A velocity call's `needed` (its third argument; absent: needed): 1 or 0, else a CallError."""
    if len(call.args) < 3:
        return True
    flag = call.args[2]
    if not isinstance(flag, Real) or float(flag) not in (0.0, 1.0):
        raise CallError(call.request, f"velocity: `needed` must be 1 or 0, found {flag!r}")
    return bool(flag)


Build = Callable[[Prepared], tuple[Tensor, Tensor | None]]  # a step's input rows [N, hidden], gen mask [N]


class LanguageModel(TinyPreset, KVComponent):
    """BAGEL's LLM as a kv component (see the module docstring)."""

    chunked_entries = frozenset({"prefill_text"})
    read_only_entries = frozenset({"velocity"})

    def __init__(self, spec: ComponentSpec, rank: int, device: str, *, weights: str | Path | None = None,
                 preset: str | None = None, config: BagelLLMConfig | None = None, seed: int | None = None,
                 plan_ahead: bool | None = None) -> None:
        """Weights from `weights` (a BAGEL directory), else random ones for `config` or `preset`, else
        from WGC_BAGEL_DIR, else the tiny preset's; `seed` the base of every request's seeds (and of
        the random weights)."""
        super().__init__(spec, rank, device)
        self.group = component_group(spec)  # tp > 1: this rank holds a shard of the MoT (layers/tp_shard.py)
        self.torch_device = torch.device(device)
        directory, fallback = choose(weights, preset is not None or config is not None, KNOB)
        checkpoint = None if directory is None else Checkpoint(directory)
        if checkpoint is not None:
            self.config = c = checkpoint.llm_config
        else:
            self.config = c = config if config is not None else BagelLLMConfig.preset(preset or "tiny")
        check_degree(f"bagel {spec.name}", spec.tp, c.heads, c.kv_heads, c.intermediate)
        self.dtype = self._dtype()
        self.out_dtype = torch.float32 if self.dtype == torch.float64 else self.dtype  # of the latents it returns
        if checkpoint is not None:
            self.language_model = checkpoint.language_model(self.torch_device, self.dtype, self.group)
            self.adapter = checkpoint.adapter(self.torch_device, self.dtype)
            self.tokenizer = checkpoint.tokenizer()
        else:
            self._random_weights(seed or 0)
        self.map = TokenMap(c.vocab_kind)
        self.seed = seed
        heads, kv_heads = local_heads(c.heads, c.kv_heads, spec.tp)  # this rank's share of the KV cache
        geometry = Geometry(c.layers, heads, kv_heads, c.head_dim, c.max_positions, self.dtype)
        self.kv = KVCacheEngine.for_spec(spec.settings, geometry, self.torch_device, DEFAULT_PAGE_SIZE, plan_ahead)
        self._prompts: dict[tuple[int, str], list[int]] = {}  # a chunked prefill's model ids, until its last chunk
        self._latent_hw: dict[int, tuple[int, int]] = {}  # request -> latent grid (h, w) in tokens
        # velocities / velocities_skipped: velocity calls computed, and those whose `needed` was 0
        self.stats = {"forwards": 0, "tokens_in": 0, "tokens_out": 0, "velocities": 0, "velocities_skipped": 0}
        random = f"{c.name} {'config' if config is not None else 'preset'}, random weights"
        self.source = random if directory is None else str(directory)
        announce("bagel", spec.name, KNOB if fallback else None, "the tiny preset", self.source, self._where())

    def _random_weights(self, seed: int) -> None:
        c = self.config
        self.language_model = MoTLM(c)
        self.adapter = LatentAdapter(c.hidden, c.latent_grid, TOKEN_DIM, c.timestep_features)
        init_random(self.language_model, seed)
        init_random(self.adapter, seed + 1)
        if self.group is not None:  # the whole model from the seed on every rank, then this rank's cut
            shard_in_place(self.language_model, self.group)
        self.language_model.to(self.torch_device, self.dtype).eval()
        self.adapter.to(self.torch_device, self.dtype).eval()
        self.tokenizer = tiny_tokenizer()

    def describe(self) -> str:
        return f"{self.source}; {self._where()}"

    def _where(self) -> str:
        pages = f"{self.kv.pages.num_pages} KV pages of {self.kv.page_size} tokens on {self.device}"
        return shard_label(self.group) + pages

    def _dtype(self) -> torch.dtype:
        """bf16 (the walk's) on CUDA, float32 on CPU; the tiny preset computes in float64 on CPU, so that
        a batch's shape changes a velocity only below float32's rounding (the same image on every
        placement and in every batch: docs/models/bagel.md, End to end)."""
        if self.torch_device.type != "cuda" and self.config.vocab_kind == "compact":
            return torch.float64
        if self.torch_device.type != "cuda" or self.config.vocab_kind == "compact":
            return torch.float32
        return declared_dtype(self.spec)

    # ---- one step ----------------------------------------------------------------------------

    def _step(self, writes: list[Write], mode: Mode, write: bool, build: Build) -> tuple[Prepared, Tensor]:
        """Reserve, run the decoder over the rows `build` makes from the reserved step, commit (or
        undo everything and re-raise): (the step, its final hidden states [N, hidden])."""
        with self.kv.stepping(writes, mode, write) as prepared, torch.no_grad():
            x, gen = build(prepared)  # [N, hidden], [N] bool or None
            positions = prepared.positions.to(self.torch_device)  # [N]: the engine's, not the KV length
            hidden = self.language_model(x, positions, self.kv.step(prepared), gen)  # [N, hidden]
            self.kv.issued(prepared)
        self.stats["forwards"] += 1
        self.stats["tokens_in"] += sum(prepared.lengths)
        return prepared, hidden

    def _embed(self, ids: Sequence[int]) -> Tensor:
        tokens = torch.tensor(list(ids), dtype=torch.int64, device=self.torch_device)  # [n]
        return self.language_model.embed(tokens)  # [n, hidden]

    def _block_rows(self, middles: list[Tensor], gen_middle: bool) -> tuple[Tensor, Tensor | None]:
        """[vision_start, middle, vision_end] per item, packed: rows [sum(n + 2), hidden], gen mask."""
        start, end = self._embed([self.map.to_model(VISION_START), self.map.to_model(VISION_END)])  # each [hidden]
        rows = torch.cat([torch.cat([start[None], m, end[None]]) for m in middles])  # [sum(n + 2), hidden]
        if not gen_middle:
            return rows, None
        mask = torch.cat([torch.tensor([False] + [True] * m.shape[0] + [False]) for m in middles])  # [sum(n + 2)]
        return rows, mask

    # ---- what the scheduler asks -------------------------------------------------------------

    def input_tokens(self, entry: str, call: Call) -> int:
        if entry == "prefill_text":
            return len(self._prompt_ids(call))
        if entry in BLOCK_ENTRIES:
            return _rows(call) + 2
        return 1

    def demands(self, entry: str, calls: list[Call]) -> list[Demand] | None:
        if entry == "init_latents":
            return None  # takes no pool memory
        out = super().demands(entry, calls)
        if out is None or entry not in BLOCK_ENTRIES - self.read_only_entries:
            return out
        # a block takes N + 2 slots but one position: the base class counted N + 2 positions
        return [replace(d, error=self._limit(c, _rows(c) + 2)) for d, c in zip(out, calls)]

    def _limit(self, call: Call, tokens: int, positions: int = 1) -> str:
        """Why writing `tokens` slots at `positions` new positions can never succeed, or ''."""
        label = self.label_of(call)
        seq = self.kv.seq(call.request, label)
        position, limit = (seq.position if seq is not None else 0), self.kv.geometry.max_positions
        if position + positions > limit:
            return f"the sequence would reach {position + positions} positions, past the model's {limit}"
        pages = -(-(self.kv.length(call.request, label) + tokens) // self.kv.page_size)
        if pages > self.kv.pages.num_pages:
            return (f"the input needs {pages} KV pages of {self.kv.page_size} tokens, more than the whole pool "
                    f"({self.kv.pages.num_pages} pages) of {self.spec.name}")
        return ""

    def _check(self, call: Call, tokens: int, positions: int) -> None:
        error = self._limit(call, tokens, positions)
        if error:
            raise CallError(call.request, error)

    # ---- text ----------------------------------------------------------------------------------

    def _prompt_ids(self, call: Call) -> list[int]:
        """The text part's model ids, tokenized once per call (a chunked one is asked every round)."""
        key = (call.request, self.label_of(call))
        ids = self._prompts.get(key)
        if ids is None:
            prompt = call.args[0]
            text = prompt.decode() if isinstance(prompt, bytes) else str(prompt)
            ids = self._prompts[key] = [self.map.to_model(t) for t in encode_prompt(self.tokenizer, text)]
        return ids

    def prefill_text(self, calls: list[Call]) -> list[Any]:
        def run(wave: list[Call]) -> list[Any]:
            writes = []
            for c in wave:
                ids = self._prompt_ids(c)
                seq = self.kv.seq(c.request, self.label_of(c))
                left = len(ids) - (seq.progress if seq is not None else 0)
                self._check(c, left, left)
                writes.append(Write(c.request, self.label_of(c), ids, len(ids), c.budget))
            prepared, _ = self._step(writes, "causal", True, lambda p: (
                self._embed([t for i in range(len(p.items)) for t in p.chunk(i)]), None))
            for c, done in zip(wave, prepared.final):
                if done:
                    self._prompts.pop((c.request, self.label_of(c)), None)
            return [None if done else PARTIAL for done in prepared.final]

        return self.waves(calls, run)

    def decode(self, calls: list[Call]) -> list[Any]:
        def run(wave: list[Call]) -> list[Any]:
            for c in wave:
                self._check(c, 1, 1)
            writes = [Write(c.request, self.label_of(c), [self.map.to_model(int(c.args[0]))], 1) for c in wave]
            logits = self.text_logits(writes)  # [B, vocab]
            seqs = [self.kv.seq(c.request, self.label_of(c)) for c in wave]
            steps = [int(s.data.get("generated", 0)) for s in seqs]  # type: ignore[union-attr]
            params = [SamplingParams(temperature=max(0.0, float(c.args[1])),
                                     seed=self.request_seed(c.request, self.label_of(c))) for c in wave]
            drawn = sample(logits, params, [[] for _ in wave], steps).tolist()
            for seq, step in zip(seqs, steps):
                seq.data["generated"] = step + 1  # type: ignore[union-attr]
            self.stats["tokens_out"] += len(wave)
            return [self.map.from_model(t) for t in drawn]

        return self.waves(calls, run)

    def text_logits(self, writes: list[Write]) -> Tensor:
        """Write each item's chunk of model-id tokens (und, causal): the logits at the last row each
        item wrote, [B, vocab] float32."""
        prepared, hidden = self._step(writes, "causal", True, lambda p: (
            self._embed([t for i in range(len(p.items)) for t in p.chunk(i)]), None))
        last = torch.tensor(prepared.lengths, device=hidden.device).cumsum(0) - 1  # [B]
        with torch.no_grad():  # the head outside `_step`'s no_grad would record a graph every token
            return self.language_model.logits(hidden.index_select(0, last)).float()  # [B, vocab]

    def request_seed(self, request: int, label: str = "") -> int:
        """A request's seed from its id (and label), mixed with the component's base seed if given."""
        base = 0 if self.seed is None else self.seed
        return (base * 0x9E3779B97F4A7C15 + request * 0x100000001B3 + zlib.crc32(label.encode())) % 2**63

    # ---- images --------------------------------------------------------------------------------

    def prefill_vit(self, calls: list[Call]) -> list[Any]:
        return self._prefill_block(calls, gen_middle=False)

    def prefill_vae(self, calls: list[Call]) -> list[Any]:
        return self._prefill_block(calls, gen_middle=True)

    def _prefill_block(self, calls: list[Call], gen_middle: bool) -> list[Any]:
        def run(wave: list[Call]) -> list[Any]:
            middles = [self._rows_arg(c, self.config.hidden, "x") for c in wave]
            for c, m in zip(wave, middles):
                self._check(c, m.shape[0] + 2, 1)
            writes = [Write(c.request, self.label_of(c), None, m.shape[0] + 2, block=True) for c, m in zip(wave, middles)]
            self._step(writes, "prefix", True, lambda p: self._block_rows(middles, gen_middle))
            return [None] * len(wave)

        return self.waves(calls, run)

    def init_latents(self, calls: list[Call]) -> list[Any]:
        out = []
        for c in calls:
            try:
                h, w = latent_grid(int(c.args[0]), int(c.args[1]), self.config.latent_grid)
            except ValueError as err:
                raise CallError(c.request, str(err)) from None
            given = c.args[2] if len(c.args) > 2 else None  # the walk's `seed`: -1 (its default) derives one
            seed = self.request_seed(c.request) if given is None or int(given) < 0 else int(given) % 2**63
            self._latent_hw[c.request] = (h, w)
            for (request, _), seq in self.kv.seqs.items():
                if request == c.request:
                    seq.data["latent_hw"] = [h, w]
            out.append(initial_noise(h * w, seed).to(self.torch_device, self.out_dtype))  # [N, 64]
        return out

    def velocity(self, calls: list[Call]) -> list[Any]:
        """The needed calls' velocities from one forward (per wave); a skipped call's is `not_computed`."""
        needed = []
        for c in calls:
            self._checked_rows(c, TOKEN_DIM, "z")  # a bad z fails its call whether it is needed or not
            needed.append(_is_needed(c))
        run = [c for c, n in zip(calls, needed) if n]
        self.stats["velocities_skipped"] += len(calls) - len(run)
        computed = iter(self.waves(run, self._velocities) if run else [])
        return [next(computed) if n else self.not_computed() for n in needed]

    def not_computed(self) -> Tensor:
        """The value of a velocity nobody reads: [0, 64] in the output dtype (combine.step reads none)."""
        return torch.empty(0, TOKEN_DIM, dtype=self.out_dtype, device=self.torch_device)

    def _velocities(self, wave: list[Call]) -> list[Any]:
        zs = [self._rows_arg(c, TOKEN_DIM, "z") for c in wave]
        ids = [self._latent_ids(c, z.shape[0]) for c, z in zip(wave, zs)]
        writes = [Write(c.request, self.label_of(c), None, z.shape[0] + 2, block=True) for c, z in zip(wave, zs)]

        def build(_: Prepared) -> tuple[Tensor, Tensor | None]:
            latents = [self.adapter.embed(z, float(c.args[1]), i) for c, z, i in zip(wave, zs, ids)]  # [n, hidden]
            return self._block_rows(latents, gen_middle=True)

        _, hidden = self._step(writes, "prefix", False, build)
        self.stats["velocities"] += len(wave)
        sizes = [z.shape[0] for z in zs]
        blocks = hidden.split([n + 2 for n in sizes])  # each [n + 2, hidden]
        return [self.adapter.velocity(b[1:-1]).to(self.out_dtype) for b in blocks]  # each [n, 64]

    def _latent_ids(self, call: Call, n: int) -> Tensor:
        seq = self.kv.seq(call.request, self.label_of(call))
        hw = (seq.data.get("latent_hw") if seq is not None else None) or self._latent_hw.get(call.request)
        if hw is None:
            side = round(n**0.5)
            hw = (side, side) if side * side == n else None
        if hw is None or hw[0] * hw[1] != n:
            raise CallError(call.request, f"velocity: {n} latent tokens do not match the image's latent grid {hw}")
        return latent_ids(int(hw[0]), int(hw[1]), self.config.latent_grid).to(self.torch_device)

    def _rows_arg(self, call: Call, width: int, name: str) -> Tensor:
        return self._checked_rows(call, width, name).to(self.torch_device, self.dtype)

    def _checked_rows(self, call: Call, width: int, name: str) -> Tensor:
        """The call's first argument, a tensor [N > 0, width] as given, or its CallError."""
        x = call.args[0]
        if not isinstance(x, Tensor) or x.dim() != 2 or x.shape[1] != width or x.shape[0] == 0:
            shape = list(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise CallError(call.request, f"{self.spec.name}: `{name}` must be a tensor [N, {width}], found {shape}")
        return x

    # ---- batching, per-request state -----------------------------------------------------------

    def release(self, request: int) -> None:
        self.kv.release(request)
        self._latent_hw.pop(request, None)
        for key in [k for k in self._prompts if k[0] == request]:
            del self._prompts[key]

    def counters(self) -> dict[str, int]:
        return {**self.kv.counters(), "requests": len({r for r, _ in self.kv.seqs}), **self.stats}

