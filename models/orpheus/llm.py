"""`llm` of models/orpheus.walk: Orpheus's Llama-3.2-3B (or the tiny preset) over the paged KV engine.

Entries, batched across requests (one forward per entry call over every call; ragged lengths go
through the page tables):
    prefill(prompt, voice, temperature, top_p, repetition_penalty) -> token
        tokenizes `"{voice}: {text}"` in Orpheus's prompt format, writes it to the request's KV
        and samples the first generated token;
    decode(prev, temperature, top_p, repetition_penalty) -> token
        writes `prev` (the token sampled last) and samples the next.
Tokens in and out are Orpheus ids (`vocab.py` maps the tiny preset's compact ids at this boundary).

Sampling is `wgc.runtime.engines.sampling` per request: repetition penalty over the request's
prompt and generated tokens, temperature, top-p, and a draw keyed by (seed, step) (rejection sampling, no sort), the seed
derived from the request id (and label) unless the component was given a base seed; a request
draws the same tokens whatever it is batched with.

KV state is the shared KV engine's (runtime/engines/kv_engine.py, through KVComponent): one pool
per component per rank sized from the plan's engine settings, pages, positions and the token ids
per (request, label) — the ids in the cache are exactly the repetition penalty's history when a
token is sampled — with fork, export/import, checkpoint/restore, release, preemption and prefix
caching. This component keeps one value of its own per sequence: `generated`, the tokens sampled
so far (the next one's position in its 7-token frame). `prefill` is chunkable: under the
scheduler's token budget (`Call.budget`) a long prompt is written over several rounds, and only
the last chunk samples.

CUDA graphs (runtime/engines/decode_graphs.py): on CUDA, `capture("decode", ...)` captures a static-shaped decode
step per batch bucket at start-up; `decode` replays the nearest bucket when the batch fits (no more
rows than the largest bucket, every sequence within the graph context) and runs eagerly otherwise.
`prefill` always runs eagerly (its token counts vary). The pool has one page more than the
allocator hands out: the padding rows of a replay write there.

Planning ahead (`runtime/engines/plan_ahead.py`): after an eager decode step's forward has been
issued, the next step's batch is predicted (the same rows, one token longer, new pages taken from
the allocator's free list) and its attention planned on a side thread; the next eager step uses
that plan when its batch is the one predicted and plans synchronously otherwise. Every plan goes
through `self.planner`; it is on by default on CUDA only, and `plan_ahead=False` plans every step
synchronously. Graph replays don't plan.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from wgc.models.layers import LlamaModel
from wgc.models.layers.dtypes import declared_dtype
from wgc.models.orpheus.config import OrpheusConfig
from wgc.models.orpheus.vocab import TokenMap, encode_prompt, load_tokenizer, tiny_tokenizer
from wgc.models.orpheus.weights import load_llama, read_config
from wgc.models.weights_io import announce, choose
from wgc.runtime.component import PARTIAL, Call, CallError
from wgc.runtime.engines.attention import AttentionBackend, KVStorage
from wgc.runtime.engines.decode_graphs import GRAPH_CONTEXT
from wgc.runtime.engines.kv_component import KVComponent, in_waves
from wgc.runtime.engines.kv_engine import Geometry, KVCacheEngine, KVExhausted, Prepared, Write, kv_budget
from wgc.runtime.engines.kv_pages import PageAllocator
from wgc.runtime.engines.plan_ahead import PlanAhead
from wgc.runtime.engines.sampling import SamplingParams, sample

from wgc.plan.model import ComponentSpec

DEFAULT_PAGE_SIZE = 16

__all__ = ["KVExhausted", "LanguageModel", "kv_budget", "tiny_init"]

Row = tuple[int, str, list[int], tuple[Any, Any, Any], int]  # request, label, ids, sampling, budget


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


class LanguageModel(KVComponent):
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
        if spec.tp > 1:
            raise ValueError(f"orpheus {spec.name}: tensor parallelism (tp = {spec.tp}) is not implemented; "
                             "place a whole model on each rank")
        self.torch_device = torch.device(device)
        weights, fallback = choose(weights, preset is not None or config is not None, "WGC_ORPHEUS_DIR")
        if weights is None and config is None:
            preset = preset or "tiny"
        if weights is not None:
            self.config = OrpheusConfig.from_hf_config(read_config(weights), name=str(weights))
            self.dtype = self._dtype()
            self.model = load_llama(weights, self.config.llama, self.torch_device, self.dtype)
            tokenizer_file = weights / "tokenizer.json"
            compact = self.config.vocab == "compact"
            self.tokenizer = tiny_tokenizer() if compact and not tokenizer_file.is_file() else load_tokenizer(weights)
            self.source = str(weights)
        else:
            assert preset is not None or config is not None
            self.config = config if config is not None else OrpheusConfig.preset(str(preset))
            self.dtype = self._dtype()
            self.model = self._random_model(seed or 0)
            self.tokenizer = tiny_tokenizer()
            self.source = f"{self.config.name} {'config' if config is not None else 'preset'}, random weights"
        self.map = TokenMap(self.config.vocab)
        self.seed = seed
        c = self.config.llama
        geometry = Geometry(c.layers, c.heads, c.kv_heads, c.head_dim, c.max_positions, self.dtype)
        self.kv = KVCacheEngine.for_spec(spec.settings, geometry, self.torch_device, DEFAULT_PAGE_SIZE, plan_ahead)
        self.page_size = self.kv.page_size
        num_pages = self.kv.pages.num_pages
        self.use_graphs(self.model, graph_context)
        self._prompts: dict[tuple[int, str], list[int]] = {}  # a chunked prefill's ids, until its last chunk
        self.stats = {"forwards": 0, "tokens_in": 0, "tokens_out": 0}
        self.where = f"{num_pages} KV pages of {self.page_size} tokens on {device}"
        announce("orpheus", spec.name, "WGC_ORPHEUS_DIR" if fallback else None, "the tiny preset", self.source,
                 self.where)

    @classmethod
    def tiny(cls, spec: ComponentSpec, rank: int, device: str) -> LanguageModel:
        return cls(spec, rank, device, preset="tiny")

    def describe(self) -> str:
        return f"{self.source}; {self.where}"

    @property
    def pages(self) -> PageAllocator:
        return self.kv.pages

    @property
    def storage(self) -> KVStorage:
        return self.kv.storage

    @property
    def planner(self) -> PlanAhead:
        return self.kv.planner

    @property
    def backend(self) -> AttentionBackend:
        """The attention backend of the eager path (planned through `self.planner`)."""
        return self.planner.backend

    @backend.setter
    def backend(self, backend: AttentionBackend) -> None:
        self.planner.use(backend)

    def _dtype(self) -> torch.dtype:
        if self.torch_device.type != "cuda" or self.config.vocab == "compact":
            return torch.float32
        return declared_dtype(self.spec)

    def _random_model(self, seed: int) -> LlamaModel:
        if self.config.vocab == "compact":
            model = LlamaModel(self.config.llama)
            tiny_init(model, self.config, seed)
            return model.to(self.torch_device, self.dtype).eval()
        torch.manual_seed(seed)
        with self.torch_device:
            model = LlamaModel(self.config.llama).to(self.dtype)
        with torch.no_grad():
            for name, param in model.named_parameters():
                param.fill_(1.0) if name.endswith("norm.weight") else param.normal_(0.0, 0.02)
        return model.eval()

    # ---- the forward over a batch of sequences ---------------------------------------------------

    def forward(self, items: list[Write] | list[tuple[int, str, list[int]]], graphs: bool = False) -> Tensor:
        """Append each item's model-id tokens to its (request, label) KV and run one forward over all of
        them; the logits at the last token each item wrote, [len(items), vocab] float32. An item is
        (request, label, tokens), all written now, or a `Write` (a chunk of its tokens under a budget).
        KVExhausted (nothing allocated) when the pool is short. A (request, label) appears at most
        once. With `graphs`, a decode batch (one token per item) replays a captured CUDA graph when
        one fits it."""
        writes = [w if isinstance(w, Write) else Write(w[0], w[1], w[2], len(w[2])) for w in items]
        for w in writes:
            if not w.count:
                raise CallError(w.request, "nothing to run: the input has no tokens")
        with self.kv.stepping(writes) as prepared, torch.no_grad():
            cached = list(prepared.batch.cached_lengths)
            if graphs and all(n == 1 for n in prepared.lengths) and self.graphs.fits(cached):
                logits = self.graphs.replay([prepared.chunk(i)[0] for i in range(len(writes))],
                                            prepared.batch.page_tables, cached,
                                            prepared.positions.tolist())  # [B, vocab]
            else:
                logits = self._dynamic(prepared)  # [B, vocab]
        self.stats["forwards"] += 1
        self.stats["tokens_in"] += sum(prepared.lengths)
        return logits.float()

    def forward_static(self, items: list[tuple[int, str, list[int]]], bucket: int) -> Tensor:
        """`forward` of a decode batch through the static-shaped step a CUDA graph captures, run eagerly
        and padded to `bucket` rows (any device): the tests hold it equal to the dynamic path."""
        with self.kv.stepping([Write(r, lab, toks, len(toks)) for r, lab, toks in items]) as prepared, torch.no_grad():
            logits = self.graphs.eager([toks[0] for _, _, toks in items], prepared.batch.page_tables,
                                       list(prepared.batch.cached_lengths), bucket,
                                       prepared.positions.tolist())  # [B, vocab]
        return logits.float()

    def _dynamic(self, prepared: Prepared) -> Tensor:
        """The eager forward over ragged items (the attention backend plans this step's shapes)."""
        dev = self.torch_device
        ids = [t for i in range(len(prepared.items)) for t in prepared.chunk(i)]
        tokens = torch.tensor(ids, dtype=torch.int64, device=dev)  # [N]
        last = torch.cumsum(torch.tensor(prepared.lengths, device=dev), 0) - 1  # [B]
        step = self.kv.step(prepared)
        logits = self.model(tokens, prepared.positions.to(dev), step, logits_at=last)  # [B, vocab]
        self.kv.issued(prepared)  # a decode step, issued: plan the next one while it runs
        return logits

    # ---- entries ---------------------------------------------------------------------------------

    chunked_entries = frozenset({"prefill"})
    graph_entries = frozenset({"decode"})

    def input_tokens(self, entry: str, call: Call) -> int:
        return len(self._prompt_ids(call)) if entry == "prefill" else 1

    def _prompt_ids(self, call: Call) -> list[int]:
        """The prefill's model ids, tokenized once per call (a chunked one is asked every round)."""
        key = (call.request, self.label_of(call))
        ids = self._prompts.get(key)
        if ids is None:
            prompt, voice = call.args[0], call.args[1]
            text = prompt.decode() if isinstance(prompt, bytes) else str(prompt)
            ids = self._prompts[key] = [self.map.to_model(t) for t in encode_prompt(self.tokenizer, str(voice), text)]
        return ids

    def prefill(self, calls: list[Call]) -> list[Any]:
        rows: list[Row] = []
        for c in calls:
            ids = self._prompt_ids(c)
            self._check_limit(c, len(ids))
            rows.append((c.request, self.label_of(c), ids, tuple(c.args[2:5]), c.budget))
        out = self._run(rows, fresh=True)
        for c, token in zip(calls, out):
            if token is not PARTIAL:
                self._prompts.pop((c.request, self.label_of(c)), None)
        return out

    def decode(self, calls: list[Call]) -> list[Any]:
        rows: list[Row] = []
        for c in calls:
            prev, temperature, top_p, penalty = c.args
            label = self.label_of(c)
            if self.kv.seq(c.request, label) is None:
                raise CallError(c.request, f"decode on label {label!r} before its prefill")
            self._check_limit(c, 1)
            rows.append((c.request, label, [self.map.to_model(int(prev))], (temperature, top_p, penalty), 0))
        return self._run(rows, fresh=False)

    def _check_limit(self, call: Call, total: int) -> None:
        label = self.label_of(call)
        seq = self.kv.seq(call.request, label)
        error = self.limit_error(call.request, label, total, total - (seq.progress if seq is not None else 0))
        if error:
            raise CallError(call.request, error)

    def _run(self, rows: list[Row], fresh: bool) -> list[Any]:
        """`_wave` over waves in which each (request, label) appears once (normally one wave)."""
        return in_waves(rows, lambda row: row[:2], lambda wave: self._wave(wave, fresh))

    def _wave(self, rows: list[Row], fresh: bool) -> list[Any]:
        writes = [Write(r, lab, toks, len(toks), budget) for r, lab, toks, _, budget in rows]
        logits = self.forward(writes, graphs=not fresh)  # decode: graphs
        final = [self.kv.seq(r, lab) for r, lab, *_ in rows]
        done = [i for i, (r, lab, toks, _, _) in enumerate(rows) if self.kv.seq(r, lab).progress == 0]  # type: ignore[union-attr]
        out: list[Any] = [PARTIAL] * len(rows)
        if not done:
            return out
        seqs = [final[i] for i in done]
        params = [self._params(rows[i][0], rows[i][1], *rows[i][3]) for i in done]
        histories = [s.tokens or [] for s in seqs]  # type: ignore[union-attr]
        generated = [int(s.data.get("generated", 0)) for s in seqs]  # type: ignore[union-attr]
        drawn = sample(logits[done], params, histories, generated).tolist()
        for i, seq, token, count in zip(done, seqs, drawn, generated):
            out[i] = int(self.map.from_model(token, count))
            seq.data["generated"] = count + 1  # type: ignore[union-attr]
        self.stats["tokens_out"] += len(done)
        return out

    def _params(self, request: int, label: str, temperature: Any, top_p: Any, penalty: Any) -> SamplingParams:
        return SamplingParams(temperature=max(0.0, float(temperature)), top_p=min(1.0, max(1e-6, float(top_p))),
                              repetition_penalty=max(1e-6, float(penalty)), seed=self.request_seed(request, label))

    def request_seed(self, request: int, label: str) -> int:
        """The sampling seed of (request, label): from the request id, mixed with the base seed if given."""
        base = 0 if self.seed is None else self.seed
        return (base * 0x9E3779B97F4A7C15 + request * 0x100000001B3 + zlib.crc32(label.encode())) % 2**63

    # ---- per-request state beyond the engine's -----------------------------------------------------

    def release(self, request: int) -> None:
        self.kv.release(request)
        for key in [k for k in self._prompts if k[0] == request]:
            del self._prompts[key]

    def counters(self) -> dict[str, int]:
        return {**self.kv.counters(), "requests": len({r for r, _ in self.kv.seqs}), **self.stats,
                **self.graphs.counters()}
