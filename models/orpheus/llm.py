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

KV state: one pool per component per rank, sized with `pages_for_budget` from the plan's engine
settings (kv_memory; or kv_memory_fraction of the device's memory, of the machine's RAM on CPU;
neither, on CPU only: WGC_CPU_KV_MEMORY, default 256 MiB). Per (request, label) the allocator
keeps the pages; this component keeps the token history and the count of generated tokens.
checkpoint/restore truncate both (a speculative decode step rolled back), release frees the
request's pages, and fork/export_label/import_label share, ship and install a label.

CUDA graphs (`decode_graph.py`): on CUDA, `capture("decode", ...)` captures a static-shaped decode
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

import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from wgc.models.layers import LlamaModel
from wgc.models.orpheus import knobs
from wgc.models.orpheus.config import OrpheusConfig
from wgc.models.orpheus.decode_graph import GRAPH_CONTEXT, DecodeGraphs, DecodeStep
from wgc.models.orpheus.vocab import TokenMap, encode_prompt, load_tokenizer, tiny_tokenizer
from wgc.models.orpheus.weights import load_llama, read_config
from wgc.runtime.component import Call, Component
from wgc.runtime.engines.attention import AttentionBackend, AttentionBatch, KVStep, KVStorage, attention_backend
from wgc.runtime.engines.capture_report import CaptureReport
from wgc.runtime.engines.kv_pages import Exhausted, LabelExport, PageAllocator, budget_bytes, pages_for_budget
from wgc.runtime.engines.plan_ahead import PlanAhead
from wgc.runtime.engines.sampling import SamplingParams, sample

from wgc.plan.model import ComponentSpec

_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
DEFAULT_PAGE_SIZE = 16


class KVExhausted(RuntimeError):
    """The pool has too few free pages for this batch; nothing was allocated."""


@dataclass(slots=True)
class _Seq:
    history: list[int]  # model ids: the prompt, then every sampled token
    generated: int  # tokens sampled so far (the next one is at frame position generated % 7)


def kv_budget(settings: dict[str, Any], device: torch.device) -> int:
    """The pool's bytes from the plan's engine settings (see the module docstring)."""
    kv, fraction = settings.get("kv_memory"), settings.get("kv_memory_fraction")
    if kv is None and fraction is None:
        if device.type != "cpu":  # a compiled plan always sizes the pool; only a hand-made spec gets here
            raise ValueError(f"a KV pool on {device} needs kv_memory or kv_memory_fraction in the engine settings")
        return knobs.cpu_kv_memory()
    capacity = None
    if fraction is not None:
        if device.type == "cuda":
            capacity = torch.cuda.get_device_properties(device).total_memory
        else:
            capacity = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return budget_bytes(None if kv is None else int(kv), None if fraction is None else float(fraction), capacity)


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


class LanguageModel(Component):
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
        fallback = weights is None and preset is None and config is None and knobs.orpheus_dir() is None
        if weights is None and preset is None and config is None:
            weights = knobs.orpheus_dir()
            preset = "tiny" if weights is None else None
        if weights is not None:
            weights = Path(weights)
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
        self.page_size = int(spec.settings.get("page_size") or DEFAULT_PAGE_SIZE)
        dtype_bytes = torch.empty((), dtype=self.dtype).element_size()
        budget = kv_budget(spec.settings, self.torch_device)
        num_pages = pages_for_budget(budget, self.page_size, c.layers, c.kv_heads, c.head_dim, dtype_bytes)
        self.pages = PageAllocator(num_pages, self.page_size)
        # one page more than the allocator's: page num_pages is the scratch page of a replay's padding rows
        self.storage = KVStorage.allocate(c.layers, num_pages + 1, self.page_size, c.kv_heads, c.head_dim,
                                          self.dtype, self.torch_device)
        max_pages = -(-min(c.max_positions, graph_context) // self.page_size)
        step = DecodeStep(self.model, self.storage, self.page_size, num_pages * self.page_size)
        self.graphs = DecodeGraphs(step, max_pages, self.torch_device)
        # FlashInfer's kernels take fp16/bf16: a float32 model (the tiny preset) keeps the torch path
        self.planner = PlanAhead(attention_backend(self.torch_device, c.heads, c.kv_heads, c.head_dim,
                                                   self.page_size, self.dtype,
                                                   prefer_flashinfer=self.dtype != torch.float32),
                                 self.torch_device.type == "cuda" if plan_ahead is None else plan_ahead)
        self.seqs: dict[tuple[int, str], _Seq] = {}
        self.stats = {"forwards": 0, "tokens_in": 0, "tokens_out": 0}
        self.where = f"{num_pages} KV pages of {self.page_size} tokens on {device}"
        knobs.announce(spec.name, "WGC_ORPHEUS_DIR" if fallback else None, "the tiny preset", self.source, self.where)

    @classmethod
    def tiny(cls, spec: ComponentSpec, rank: int, device: str) -> LanguageModel:
        return cls(spec, rank, device, preset="tiny")

    def describe(self) -> str:
        return f"{self.source}; {self.where}"

    @property
    def backend(self) -> AttentionBackend:
        """The attention backend of the eager path (planned through `self.planner`)."""
        return self.planner.backend

    @backend.setter
    def backend(self, backend: AttentionBackend) -> None:
        self.planner.use(backend)

    def capture(self, entry: str, walk: str, buckets: list[int], progress: Callable[[str], None]) -> CaptureReport:
        """CUDA graphs of the decode step, one per bucket (largest first); every other entry runs eagerly."""
        if entry != "decode":
            return CaptureReport.eager_only(f"{entry} takes a varying number of tokens per call: runs eagerly")
        if self.torch_device.type != "cuda":
            return CaptureReport.eager_only(f"on {self.device}: decode runs eagerly")
        self.planner.discard()  # no side-thread planning while a graph is captured
        return self.graphs.capture(buckets, progress)

    def _dtype(self) -> torch.dtype:
        if self.torch_device.type != "cuda" or self.config.vocab == "compact":
            return torch.float32
        return _DTYPES.get(str(self.spec.attrs.get("dtype", "bf16")), torch.bfloat16)

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

    def forward(self, items: list[tuple[int, str, list[int]]], graphs: bool = False) -> Tensor:
        """Append each item's model-id tokens to its (request, label) KV and run one forward over all of
        them; the logits at each item's last token, [len(items), vocab] float32. KVExhausted (nothing
        allocated) when the pool is short. A (request, label) appears at most once. With `graphs`, a
        decode batch (one token per item) replays a captured CUDA graph when one fits it."""
        cached = self._reserve(items)
        tables = [self.pages.page_table(r, lab) for r, lab, _ in items]
        with torch.no_grad():
            if graphs and all(len(toks) == 1 for _, _, toks in items) and self.graphs.fits(cached):
                logits = self.graphs.replay([toks[0] for _, _, toks in items], tables, cached)  # [B, vocab]
            else:
                logits = self._dynamic(items, tables, cached)  # [B, vocab]
        self.stats["forwards"] += 1
        self.stats["tokens_in"] += sum(len(toks) for _, _, toks in items)
        return logits.float()

    def forward_static(self, items: list[tuple[int, str, list[int]]], bucket: int) -> Tensor:
        """`forward` of a decode batch through the static-shaped step a CUDA graph captures, run eagerly
        and padded to `bucket` rows (any device): the tests hold it equal to the dynamic path."""
        cached = self._reserve(items)
        tables = [self.pages.page_table(r, lab) for r, lab, _ in items]
        with torch.no_grad():
            logits = self.graphs.eager([toks[0] for _, _, toks in items], tables, cached, bucket)  # [B, vocab]
        return logits.float()

    def _reserve(self, items: list[tuple[int, str, list[int]]]) -> list[int]:
        """Room in the pages for every item's new tokens (copy-on-write done); each item's cached length."""
        pages = self.pages
        needed = sum(pages.pages_needed(r, lab, len(toks)) for r, lab, toks in items)  # an upper bound
        if needed > pages.free_pages:
            raise KVExhausted(f"KV pool exhausted: {needed} pages needed, {pages.free_pages} free "
                              f"of {pages.num_pages}")
        limit = self.config.llama.max_positions
        cached: list[int] = []
        copies: list[tuple[int, int]] = []
        for r, lab, toks in items:
            if not toks:
                raise ValueError(f"request {r}: nothing to run")
            length = pages.length(r, lab)
            if length + len(toks) > limit:
                raise ValueError(f"request {r}: {length + len(toks)} tokens exceed the model's {limit} positions")
            cached.append(length)
            out = pages.append(r, lab, len(toks))
            assert not isinstance(out, Exhausted), out  # the sum of pages_needed above is an upper bound
            copies.extend(out.copies)
        for old, new in copies:  # copy-on-write of a shared partial page, before the write
            self.storage.k[:, new] = self.storage.k[:, old]
            self.storage.v[:, new] = self.storage.v[:, old]
        return cached

    def _dynamic(self, items: list[tuple[int, str, list[int]]], tables: list[list[int]], cached: list[int]) -> Tensor:
        """The eager forward over ragged items (the attention backend plans this step's shapes)."""
        lengths = [len(toks) for _, _, toks in items]
        batch = AttentionBatch(tables, cached, lengths, self.page_size)
        dev = self.torch_device
        tokens = torch.tensor([t for _, _, toks in items for t in toks], dtype=torch.int64, device=dev)  # [N]
        last = torch.cumsum(torch.tensor(lengths, device=dev), 0) - 1  # [B]
        step = KVStep(self.storage, self.backend, self.planner.plan(batch))
        logits = self.model(tokens, batch.positions().to(dev), step, logits_at=last)  # [B, vocab]
        if all(n == 1 for n in lengths):  # a decode step, issued: plan the next one while it runs
            self.planner.ahead(batch, self.pages.next_free(len(lengths)))
        return logits

    # ---- entries ---------------------------------------------------------------------------------

    def prefill(self, calls: list[Call]) -> list[int]:
        rows = []
        for c in calls:
            prompt, voice, temperature, top_p, penalty = c.args
            text = prompt.decode() if isinstance(prompt, bytes) else str(prompt)
            ids = [self.map.to_model(t) for t in encode_prompt(self.tokenizer, str(voice), text)]
            rows.append((c.request, self._label(c), ids, (temperature, top_p, penalty)))
        return self._run(rows, fresh=True)

    def decode(self, calls: list[Call]) -> list[int]:
        rows = []
        for c in calls:
            prev, temperature, top_p, penalty = c.args
            label = self._label(c)
            seq = self.seqs.get((c.request, label))
            if seq is None:
                raise ValueError(f"request {c.request}: decode on label {label!r} before its prefill")
            rows.append((c.request, label, [self.map.to_model(int(prev))], (temperature, top_p, penalty)))
        return self._run(rows, fresh=False)

    def _label(self, c: Call) -> str:
        return c.label or self.default_label()

    def _run(self, rows: list[tuple[int, str, list[int], tuple[Any, Any, Any]]], fresh: bool) -> list[int]:
        out: list[int | None] = [None] * len(rows)
        pending = list(range(len(rows)))
        while pending:  # waves in which each (request, label) appears once (normally one wave)
            seen: set[tuple[int, str]] = set()
            wave, later = [], []
            for i in pending:
                key = rows[i][:2]
                (later if key in seen else wave).append(i)
                seen.add(key)
            for i, token in zip(wave, self._wave([rows[i] for i in wave], fresh)):
                out[i] = token
            pending = later
        return [int(t) for t in out if t is not None]

    def _wave(self, rows: list[tuple[int, str, list[int], tuple[Any, Any, Any]]], fresh: bool) -> list[int]:
        logits = self.forward([(r, lab, toks) for r, lab, toks, _ in rows], graphs=not fresh)  # decode: graphs
        seqs = []
        for r, lab, toks, _ in rows:
            seq = self.seqs.get((r, lab))
            if seq is None:
                seq = self.seqs[(r, lab)] = _Seq([], 0)
            if fresh:
                seq.history.extend(toks)
            seqs.append(seq)
        params = [self._params(r, lab, *sampling) for r, lab, _, sampling in rows]
        drawn = sample(logits, params, [s.history for s in seqs], [s.generated for s in seqs]).tolist()
        out = []
        for seq, token in zip(seqs, drawn):
            out.append(self.map.from_model(token, seq.generated))
            seq.history.append(token)
            seq.generated += 1
        self.stats["tokens_out"] += len(out)
        return out

    def _params(self, request: int, label: str, temperature: Any, top_p: Any, penalty: Any) -> SamplingParams:
        return SamplingParams(temperature=max(0.0, float(temperature)), top_p=min(1.0, max(1e-6, float(top_p))),
                              repetition_penalty=max(1e-6, float(penalty)), seed=self.request_seed(request, label))

    def request_seed(self, request: int, label: str) -> int:
        """The sampling seed of (request, label): from the request id, mixed with the base seed if given."""
        base = 0 if self.seed is None else self.seed
        return (base * 0x9E3779B97F4A7C15 + request * 0x100000001B3 + zlib.crc32(label.encode())) % 2**63

    # ---- per-request state ------------------------------------------------------------------------

    def fork(self, request: int, target: str, source: str) -> None:
        self.pages.fork(request, target, source)
        seq = self.seqs.get((request, source))
        if seq is None:
            self.seqs.pop((request, target), None)
        elif target != source:
            self.seqs[(request, target)] = _Seq(list(seq.history), seq.generated)

    def checkpoint(self, request: int, label: str) -> Any:
        seq = self.seqs.get((request, label))
        return (self.pages.length(request, label), 0 if seq is None else len(seq.history),
                0 if seq is None else seq.generated)

    def restore(self, request: int, label: str, checkpoint: Any) -> None:
        length, history, generated = checkpoint
        self.pages.truncate(request, label, length)
        seq = self.seqs.get((request, label))
        if seq is None:
            return
        if history == 0 and length == 0:
            del self.seqs[(request, label)]
            return
        del seq.history[history:]
        seq.generated = generated

    def export_label(self, request: int, label: str) -> Any:
        seq = self.seqs.get((request, label))
        meta = self.pages.export(request, label)
        slots = self._slots(meta.pages, meta.length)
        c = self.config.llama
        k = self.storage.k.view(c.layers, -1, c.kv_heads, c.head_dim)[:, slots].cpu()  # [layers, length, kvh, d]
        v = self.storage.v.view(c.layers, -1, c.kv_heads, c.head_dim)[:, slots].cpu()  # [layers, length, kvh, d]
        return {"length": meta.length, "history": [] if seq is None else list(seq.history),
                "generated": 0 if seq is None else seq.generated, "k": k, "v": v}

    def import_label(self, request: int, label: str, state: Any) -> None:
        length = int(state["length"])
        self.pages.free_label(request, label)
        self.seqs.pop((request, label), None)
        if length:
            out = self.pages.import_(request, label, LabelExport(length, self.page_size, ()))
            if isinstance(out, Exhausted):
                raise KVExhausted(f"KV pool exhausted importing request {request}: {out.needed} pages needed, "
                                  f"{out.free} free")
            slots = self._slots(self.pages.page_table(request, label), length)
            c = self.config.llama
            k_flat = self.storage.k.view(c.layers, -1, c.kv_heads, c.head_dim)
            v_flat = self.storage.v.view(c.layers, -1, c.kv_heads, c.head_dim)
            k_flat[:, slots] = state["k"].to(self.storage.k.device, self.storage.k.dtype)
            v_flat[:, slots] = state["v"].to(self.storage.v.device, self.storage.v.dtype)
        if length or state["history"]:
            self.seqs[(request, label)] = _Seq(list(state["history"]), int(state["generated"]))

    def _slots(self, pages: Any, length: int) -> Tensor:
        ps = self.page_size
        table = torch.tensor(list(pages), dtype=torch.int64)
        pos = torch.arange(length)
        return (table[pos // ps] * ps + pos % ps).to(self.storage.k.device)  # [length]

    def release(self, request: int) -> None:
        self.pages.free_request(request)
        for key in [k for k in self.seqs if k[0] == request]:
            del self.seqs[key]

    def counters(self) -> dict[str, int]:
        return {**self.pages.counters(), "requests": len({r for r, _ in self.seqs}), **self.stats,
                **self.graphs.counters(), **self.planner.counters()}
