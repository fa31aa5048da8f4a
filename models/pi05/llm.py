"""`llm` of models/pi05.walk: PaliGemma's Gemma-2B prefix and the Gemma-300M action expert over one
paged KV engine (models-wave2.md §4.2, §4.3).

Entries, each batched over its calls:
    prefill(images [C, T, W], prompt, state [S])   images then the prompt's tokens, one block: every
        prefix token attends to every other (prefix-LM, mode `prefix`), written. π0.5 writes the
        discretised state into the prompt (prompt.py); π0 writes a state token after it through the
        expert, in a block of its own (it sees the prefix, the actions never change it)
    noise(seed) -> [50, 32]                         N(0, 1) from a CPU generator (the request's seed)
    velocity(x [50, 32], t) -> [50, 32]            the expert over the 50 action tokens, read only:
        they attend to the cached prefix and to each other and write nothing (`write=False`), so
        the prefix's length never changes however many steps run
    to_actions(x [50, 32]) -> [50, D]               unnormalised with the checkpoint's statistics

Only valid tokens are written: no padding, so positions (the engine's: 0..n-1 for the prefix, n..
for the actions) are the reference's cumulative count of valid tokens. The flow loop (10 Euler
steps, x ← x − v/10 from t = 1) is the walk's; `velocity` is one step's field.

Weights: `self.prefix` holds `paligemma.model.language_model.*` (its tied embedding from
`paligemma.lm_head`), `self.expert` `gemma_expert.model.*`, `self.heads` the action/time heads; from
a lerobot pi05_base-layout directory (`weights=`, else WGC_PI05_DIR: weights.py) with its
tokenizer.json and statistics; the tiny preset and `config=` get random ones.

Tensor parallelism (the plan's tp > 1): the prefix and the expert are cut by the one walker of the
shared layers (layers/tp_shard.py): q/k/v and gate/up column-parallel, o and down row-parallel, the
prefix's embedding (and its tied head) vocab-parallel, every norm whole. The expert has the prefix's
KV heads and head_dim (config.py checks it), so the same cut keeps, on each rank, the expert's query
heads whose KV heads are that rank's: its cache holds that rank's KV heads of both. The action and
time heads (a few small linears) stay whole on every rank. A checkpoint is read per shard, random
weights are cut in place, a degree the layers cannot be split by is refused before anything is read.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from wgc.models.layers.dtypes import compute_dtype
from wgc.models.layers.init import init_random
from wgc.models.layers.llama import LlamaModel
from wgc.models.layers.presets import TinyPreset
from wgc.models.layers.tensor_parallel import component_group, shard_label, shard_llama
from wgc.models.layers.tp_cuts import check_degree, local_heads
from wgc.models.layers.tp_shard import shard_in_place
from wgc.models.pi05.config import Pi05Config
from wgc.models.pi05.expert import ActionExpert, ActionHeads
from wgc.models.pi05.prompt import discretize, encode, pi05_prompt, tiny_tokenizer
from wgc.models.pi05.stats import Stats
from wgc.models.pi05.vision import KNOB
from wgc.models.weights_io import announce, choose
from wgc.runtime.components.base import Call, CallError
from wgc.runtime.engines.attention import KVStep, TorchAttention
from wgc.runtime.engines.kv_component import KVComponent
from wgc.runtime.engines.kv_engine import Geometry, KVCacheEngine, Prepared, Write
from wgc.runtime.worker.scheduler import Demand

from wgc.plan.model import ComponentSpec

DEFAULT_PAGE_SIZE = 16
TINY_STATS = Stats.identity(state_dim=8, action_dim=7)  # the tiny preset acts like a 7-dof arm with 8 joints
POOL_FREE = frozenset({"noise", "to_actions"})
PLANS_KEPT = 64  # read-only attention plans kept (one per batch of velocity calls in flight)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def check_pi05_degree(spec: ComponentSpec, c: Pi05Config) -> None:
    """ValueError (one line naming the component and the part) for a tp the prefix or the expert cannot
    be split by; the expert's KV heads are the prefix's, so one cut serves both caches."""
    check_degree(f"pi05 {spec.name} prefix", spec.tp, c.prefix.heads, c.prefix.kv_heads, c.prefix.intermediate)
    check_degree(f"pi05 {spec.name} action expert", spec.tp, c.expert.heads, c.expert.kv_heads, c.expert.intermediate)


class PaliGemmaWithExpert(TinyPreset, KVComponent):
    """π0.5's language model and action expert as a kv component (see the module docstring)."""

    read_only_entries = frozenset({"velocity"})

    def __init__(self, spec: ComponentSpec, rank: int, device: str, *, weights: str | Path | None = None,
                 preset: str | None = None, config: Pi05Config | None = None, stats: Stats | None = None,
                 seed: int | None = None, plan_ahead: bool | None = None) -> None:
        """Weights from `weights` (a pi05_base-layout directory), else random ones for `config` or
        `preset`, else from WGC_PI05_DIR, else the tiny preset's; `seed` the base of every request's
        noise seed (and of the random weights)."""
        from wgc.models.pi05.weights import Checkpoint

        super().__init__(spec, rank, device)
        self.group = component_group(spec)  # tp > 1: this rank holds a shard of the prefix and the expert
        self.torch_device = torch.device(device)
        self.dtype = compute_dtype(spec, self.torch_device)
        directory, fallback = choose(weights, preset is not None or config is not None, KNOB)
        if directory is not None:
            checkpoint = Checkpoint(directory)  # the config and the header only: no tensor read yet
            self.config = c = checkpoint.config
            check_pi05_degree(spec, c)
            self.prefix, self.expert, self.heads = checkpoint.language(self.torch_device, self.dtype, self.group)
            self.tokenizer = checkpoint.tokenizer()
            self.norm_stats = stats or checkpoint.stats
            self.source = str(directory)
        else:
            self.config = c = config if config is not None else Pi05Config.preset(preset or "tiny")
            check_pi05_degree(spec, c)
            self.prefix, self.expert, self.heads = LlamaModel(c.prefix), ActionExpert(c), ActionHeads(c)
            for i, part in enumerate((self.prefix, self.expert, self.heads)):
                init_random(part, (seed or 0) + i)
            if self.group is not None:  # the whole model from the seed on every rank, then this rank's cut
                shard_llama(self.prefix, self.group)
                shard_in_place(self.expert, self.group)
            for part in (self.prefix, self.expert, self.heads):
                part.to(self.torch_device, self.dtype).eval()
            self.tokenizer = tiny_tokenizer()
            self.norm_stats = stats or TINY_STATS
            self.source = f"{c.name} {'config' if config is not None else 'preset'}, random weights"
        self.seed = seed
        p = c.prefix
        heads, kv_heads = local_heads(p.heads, p.kv_heads, spec.tp)  # this rank's share of the KV cache
        geometry = Geometry(p.layers, heads, kv_heads, p.head_dim, p.max_positions, self.dtype)
        self.kv = KVCacheEngine.for_spec(spec.settings, geometry, self.torch_device, DEFAULT_PAGE_SIZE, plan_ahead)
        self._prompts: dict[tuple[int, str], list[int]] = {}  # a prefill's prompt ids, from demands to the call
        self._plans: dict[tuple[Any, ...], Any] = {}  # read-only steps' attention plans (_frozen_step)
        self.stats = {"prefills": 0, "velocities": 0, "prefix_tokens": 0}
        announce("pi05", spec.name, KNOB if fallback else None, "the tiny preset", self.source, self._where())

    def describe(self) -> str:
        return f"{self.source}; {self._where()}"

    def _where(self) -> str:
        mode = "pi0.5" if self.config.pi05 else "pi0"
        return (f"{shard_label(self.group)}{mode}, state {self.norm_stats.state_dim} -> actions [{self.config.chunk}, "
                f"{self.norm_stats.action_dim}] ({self.norm_stats.source} statistics); "
                f"{self.kv.pages.num_pages} KV pages of {self.kv.page_size} tokens on {self.device}")

    # ---- inputs ------------------------------------------------------------------------------

    def _images(self, call: Call) -> Tensor:
        x, width = call.args[0], self.config.prefix.hidden
        if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[2] != width or not 1 <= x.shape[0] <= self.config.cameras:
            shape = list(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise CallError(call.request, f"`images` must be image features "
                                          f"[1..{self.config.cameras}, tokens, {width}], found {shape}")
        return x.reshape(-1, width).to(self.torch_device, self.dtype)  # [C * T, W]

    def _state(self, call: Call) -> Tensor:
        """The call's state, normalised and padded to the model's width [action_dim]."""
        state, want = call.args[2], self.norm_stats.state_dim
        if not isinstance(state, Tensor) or state.dim() != 1 or state.shape[0] != want:
            shape = list(state.shape) if isinstance(state, Tensor) else type(state).__name__
            raise CallError(call.request, f"`state` must be [{want}] (this checkpoint's "
                                          f"state dims), found {shape}")
        if not bool(torch.isfinite(state).all()):
            raise CallError(call.request, "`state` holds a NaN or infinite value")
        return self.norm_stats.normalize_state(state.cpu(), self.config.action_dim)  # [action_dim]

    def prompt_ids(self, call: Call) -> list[int]:
        """The prompt's token ids (π0.5: with the discretised state), tokenized once per call."""
        key = (call.request, self.label_of(call))
        ids = self._prompts.get(key)
        if ids is None:
            task = _text(call.args[1])
            text = pi05_prompt(task, discretize(self._state(call))) if self.config.pi05 else task
            ids = encode(self.tokenizer, text, self.config.bos)
            if len(ids) > self.config.max_prompt_tokens:
                raise CallError(call.request, f"task: the prompt (the task and the discretised state) is "
                                              f"{len(ids)} tokens, more than the model's "
                                              f"{self.config.max_prompt_tokens}")
            self._prompts[key] = ids
        return ids

    def input_tokens(self, entry: str, call: Call) -> int:
        if entry == "prefill":
            images = call.args[0]
            rows = int(images.shape[0] * images.shape[1]) if isinstance(images, Tensor) and images.dim() == 3 else 0
            return rows + len(self.prompt_ids(call)) + (0 if self.config.pi05 else 1)
        if entry == "velocity":
            return self.config.chunk
        return 0

    def demands(self, entry: str, calls: list[Call]) -> list[Demand] | None:
        if entry in POOL_FREE:
            return None
        errors: dict[int, str] = {}
        for i, c in enumerate(calls):
            try:
                self.input_tokens(entry, c)
            except CallError as err:  # a bad prompt or state: that call fails alone, with this message
                errors[i] = str(err)
        found = iter(super().demands(entry, [c for i, c in enumerate(calls) if i not in errors]) or [])
        return [Demand(c.request, 0, False, self.kv.page_size, error=errors[i]) if i in errors else next(found)
                for i, c in enumerate(calls)]

    # ---- entries -----------------------------------------------------------------------------

    def prefill(self, calls: list[Call]) -> list[Any]:
        def run(wave: list[Call]) -> list[Any]:
            rows = []
            for c in wave:
                if self.kv.length(c.request, self.label_of(c)):
                    raise CallError(c.request, "this request's prefix is already written")
                with torch.no_grad():
                    text = self.prefix.embed_tokens(torch.tensor(self.prompt_ids(c), device=self.torch_device))
                rows.append(torch.cat([self._images(c), text.to(self.dtype)]))  # [n, W]: images first
            writes = [Write(c.request, self.label_of(c), None, r.shape[0]) for c, r in zip(wave, rows)]
            with self.kv.stepping(writes, "prefix", True) as prepared, torch.no_grad():
                positions = prepared.positions.to(self.torch_device)  # [N]
                self.prefix.hidden_states(torch.cat(rows), positions, self.kv.step(prepared))
            if not self.config.pi05:
                self._state_tokens(wave)
            for c in wave:
                self._prompts.pop((c.request, self.label_of(c)), None)
            self.stats["prefills"] += len(wave)
            self.stats["prefix_tokens"] += sum(r.shape[0] for r in rows)
            return [None] * len(wave)

        return self.waves(calls, run)

    def _state_tokens(self, wave: list[Call]) -> None:
        """π0: each call's state token, through the expert, in a block after its prefix."""
        states = torch.stack([self._state(c) for c in wave]).to(self.torch_device, self.dtype)  # [B, d]
        writes = [Write(c.request, self.label_of(c), None, 1) for c in wave]
        with self.kv.stepping(writes, "prefix", True) as prepared, torch.no_grad():
            positions = prepared.positions.to(self.torch_device)  # [B]
            self.expert(self.heads.state_proj(states), positions, self.kv.step(prepared))

    def request_seed(self, request: int, label: str = "") -> int:
        base = 0 if self.seed is None else self.seed
        return (base * 0x9E3779B97F4A7C15 + request * 0x100000001B3 + zlib.crc32(label.encode())) % 2**63

    def noise(self, calls: list[Call]) -> list[Any]:
        out = []
        for c in calls:
            given = c.args[0] if c.args else None  # the walk's `seed`: -1 (its default) derives one
            seed = self.request_seed(c.request) if given is None or int(given) < 0 else int(given) % 2**63
            gen = torch.Generator().manual_seed(seed)
            out.append(torch.randn(self.config.chunk, self.config.action_dim, generator=gen))  # [chunk, d] f32
        return out

    def _chunk(self, call: Call) -> Tensor:
        x, shape = call.args[0], [self.config.chunk, self.config.action_dim]
        if not isinstance(x, Tensor) or list(x.shape) != shape:
            found = list(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise CallError(call.request, f"`x` must be an action chunk {shape}, found {found}")
        return x

    def velocity(self, calls: list[Call]) -> list[Any]:
        def run(wave: list[Call]) -> list[Any]:
            for c in wave:
                if not self.kv.length(c.request, self.label_of(c)):
                    raise CallError(c.request, "no prefix (prefill first)")
            xs = torch.stack([self._chunk(c) for c in wave]).to(self.torch_device, self.dtype)  # [B, chunk, d]
            ts = torch.tensor([float(c.args[1]) for c in wave], device=self.torch_device)  # [B]
            return list(self.field(wave, xs, ts).float().unbind(0))

        return self.waves(calls, run)

    def field(self, wave: list[Call], xs: Tensor, ts: Tensor) -> Tensor:
        """The velocity of each call's chunk xs [B, chunk, d] at ts [B], against its frozen prefix."""
        b, chunk, _ = xs.shape
        writes = [Write(c.request, self.label_of(c), None, chunk) for c in wave]
        with self.kv.stepping(writes, "prefix", False) as prepared, torch.no_grad():
            rows = self.heads.actions_in(xs, ts).reshape(b * chunk, -1)  # [B * chunk, width]
            cond = self.heads.condition(ts, rows.dtype) if self.config.pi05 else None  # [B, width]
            which = torch.arange(b, device=self.torch_device).repeat_interleave(chunk)  # [B * chunk]
            positions = prepared.positions.to(self.torch_device)  # [B * chunk]: after each prefix
            hidden = self.expert(rows, positions, self._frozen_step(prepared), cond, which)  # [B * chunk, width]
            v = self.heads.action_out_proj(hidden).view(b, chunk, -1)  # [B, chunk, d]
        self.stats["velocities"] += b
        return v

    def _frozen_step(self, prepared: Prepared) -> KVStep:
        """A read-only step's attention. The 10 velocity steps of one batch attend over the same frozen
        pages, so their host-side plans are equal: on the torch backend, whose plan is immutable index
        tensors (any number may be kept), it is made once per batch and reused (a third of a tiny
        step's time). Other backends plan every step, as the engine does."""
        backend, batch = self.kv.planner.backend, prepared.batch
        if batch.write or not isinstance(backend, TorchAttention):
            return self.kv.step(prepared)
        key = (tuple(map(tuple, batch.page_tables)), tuple(batch.cached_lengths), tuple(batch.q_lengths), batch.mode)
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) >= PLANS_KEPT:
                self._plans.clear()
            plan = self._plans[key] = backend.plan(batch)
        return KVStep(self.kv.storage, backend, plan)

    def to_actions(self, calls: list[Call]) -> list[Any]:
        return [self.norm_stats.actions(self._chunk(c).cpu()) for c in calls]  # each [chunk, D] float32

    def warm_up(self, progress: Callable[[str], None]) -> None:
        """One chunk's shapes before the rank reports ready (a control loop's first call should cost
        what every other does): a prefix of one camera and a short prompt, one velocity step."""
        c, request = self.config, -1
        images = torch.zeros(1, c.vision.tokens, c.prefix.hidden, device=self.torch_device, dtype=self.dtype)
        state = torch.zeros(self.norm_stats.state_dim)
        try:
            self.prefill([Call(request, "", (images, "warm up", state))])
            self.velocity([Call(request, "", (self.noise([Call(request, "", (0,))])[0], 1.0))])
        finally:
            self.release(request)
        self.stats = dict.fromkeys(self.stats, 0)  # counters count requests' work only
        progress(f"ran a prefix of {c.vision.tokens} image tokens and one velocity step")

    # ---- per-request state -------------------------------------------------------------------

    def release(self, request: int) -> None:
        self.kv.release(request)
        for key in [k for k in self._prompts if k[0] == request]:
            del self._prompts[key]

    def counters(self) -> dict[str, int]:
        return {**self.kv.counters(), "requests": len({r for r, _ in self.kv.seqs}), **self.stats}
