"""A Llama decoder over the paged KV engine as a kv component: the part every Llama-architecture
family shares (Orpheus's language model, the plain chat LLM of models/llama.walk), written once.

Entries, batched across requests (one forward per entry call over every call; ragged lengths go
through the page tables):
    prefill(prompt, ...) -> token   writes the prompt's model ids to the request's KV and samples
                                    the first generated token; chunkable under the scheduler's token
                                    budget (`Call.budget`): a long prompt is written over several
                                    rounds and only the last chunk samples;
    decode(prev, ...) -> token      writes `prev` (the token sampled last) and samples the next.
A round's decode and prefill calls share one forward (`call_mixed`, the batcher's mixed dispatch).

A family subclass builds its `LlamaModel`, calls `start_engine`, and says what is its own:
    prompt_ids(call)       the model ids a prefill call writes (its prompt format, its tokenizer);
    sampling_args(entry, call)  (temperature, top_p, repetition_penalty) of a call;
    token_in(prev)         a generated token fed back, as a model id (default: the same id);
    token_out(token, n)    a sampled model id as the walk sees it, `n` tokens generated before it.

Sampling is `wgc.runtime.engines.sampling` per request: repetition penalty over the request's prompt
and generated tokens, temperature, top-p, and a draw keyed by (seed, step), the seed derived from the
request id (and label) unless the component was given a base seed; a request draws the same tokens
whatever it is batched with. On CPU its logits are bitwise its own too at a decode row and at a prompt
prefilled whole beside any others (tests/models/llama/test_prompt_rows.py), but not yet at a prompt
written in chunks or after a prefix-cache hit: it then attends over cached keys in another order, and
differs in the last bits (~3e-7 on the tiny preset), which can flip a near tie.
KV state is the shared engine's (runtime/engines/kv_engine.py through
KVComponent); this class keeps one value of its own per sequence: `generated`, the tokens sampled so
far. A penalised sequence's distinct seen tokens are a `SeenTokens` beside it (not in the sequence's
plain data): it follows the engine's token list, one append a step, instead of `sample` converting
the whole history every step. CUDA graphs (`graph_entries`) and planning ahead come with the engine (see those modules).
"""

from __future__ import annotations

import contextlib
import zlib
from typing import Any

import torch
from torch import Tensor
from wgc.models.layers.config import LlamaConfig
from wgc.models.layers.llama import LlamaModel
from wgc.runtime.components.base import PARTIAL, Call, CallError
from wgc.runtime.engines.attention import AttentionBackend, KVStorage
from wgc.runtime.engines.kv_component import KVComponent, in_waves
from wgc.runtime.engines.kv_engine import Geometry, KVCacheEngine, KVSeq, Prepared, Write
from wgc.runtime.engines.kv_pages import PageAllocator
from wgc.runtime.engines.plan_ahead import PlanAhead
from wgc.runtime.engines.prompt_rows import prompt_rows
from wgc.runtime.engines.sampling import SamplingParams, sample
from wgc.runtime.engines.seen_tokens import History, SeenTokens

DEFAULT_PAGE_SIZE = 16

Row = tuple[int, str, list[int], tuple[Any, ...], int]  # request, label, ids, sampling args, budget


def random_llama(config: LlamaConfig, device: torch.device, dtype: torch.dtype, seed: int) -> LlamaModel:
    """Random weights as transformers initialises a Llama: normal(0, 0.02), unit norms."""
    torch.manual_seed(seed)
    with device:
        model = LlamaModel(config).to(dtype)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.fill_(1.0) if name.endswith("norm.weight") else param.normal_(0.0, 0.02)
    return model.eval()


class PagedLlama(KVComponent):
    """The shared prefill/decode component of a Llama decoder (see the module docstring)."""

    model: LlamaModel
    seed: int | None = None
    chunked_entries = frozenset({"prefill"})
    graph_entries = frozenset({"decode"})

    @property
    def mixed_entries(self) -> frozenset[str]:  # type: ignore[override]
        """prefill and decode share a forward (`call_mixed`) on CPU, where it was measured
        (bench/mixed_step.py), unless a subclass overrides either entry (`call_mixed` would go around
        its override). Not on CUDA: a decode round with a prompt in it would give up its CUDA graph,
        a trade not measured on hardware."""
        own = type(self).prefill is PagedLlama.prefill and type(self).decode is PagedLlama.decode
        return frozenset({"prefill", "decode"}) if own and self.kv.device.type == "cpu" else frozenset()

    def start_engine(self, model: LlamaModel, dtype: torch.dtype, graph_context: int,
                     plan_ahead: bool | None) -> None:
        """The KV engine for `model` from the plan's engine settings, and the CUDA-graph decode step."""
        self.model = model
        self.dtype = dtype
        c = model.config
        geometry = Geometry(c.layers, c.heads, c.kv_heads, c.head_dim, c.max_positions, dtype)
        self.kv = KVCacheEngine.for_spec(self.spec.settings, geometry, self.torch_device, DEFAULT_PAGE_SIZE,
                                         plan_ahead)
        self.page_size = self.kv.page_size
        self.use_graphs(model, graph_context)
        self._prompts: dict[tuple[int, str], list[int]] = {}  # a chunked prefill's ids, until its last chunk
        # each sequence's SamplingParams and the arguments they were made from: a decode step asks for every
        # row's, and building and checking one per row per step was 5% of a batch-32 step of a small model
        self._sampling: dict[tuple[int, str], tuple[tuple[Any, ...], SamplingParams]] = {}
        # each penalised sequence's distinct seen tokens. It needs no hook into the engine's changes:
        # restore/fork/import give the sequence another token list (read again whole), an aborted step
        # cuts in place only what it appended after the last sample, preemption keeps the list
        self._seen: dict[tuple[int, str], SeenTokens] = {}
        self.stats = {"forwards": 0, "tokens_in": 0, "tokens_out": 0}
        self.where = f"{self.kv.pages.num_pages} KV pages of {self.page_size} tokens on {self.device}"

    # ---- what a family says -------------------------------------------------------------------

    def prompt_ids(self, call: Call) -> list[int]:
        raise NotImplementedError(f"{type(self).__name__} does not say how a prompt becomes token ids")

    def sampling_args(self, entry: str, call: Call) -> tuple[Any, ...]:
        raise NotImplementedError(f"{type(self).__name__} does not say how `{entry}` samples")

    def token_in(self, prev: Any) -> int:
        return int(prev)

    def token_out(self, token: int, generated: int) -> Any:
        return int(token)

    # ---- the engine's parts -----------------------------------------------------------------------

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
        ids = prepared.token_ids()
        tokens = torch.tensor(ids, dtype=torch.int64, device=dev)  # [N]
        # a decode step (one token a row) projects every row: no index of the rows' last tokens to build
        last = None if len(ids) == len(prepared.lengths) else \
            torch.cumsum(torch.tensor(prepared.lengths, device=dev), 0) - 1  # [B]
        step = self.kv.step(prepared)
        kinds = self._prompt_kinds(prepared)
        with prompt_rows(kinds) if kinds else contextlib.nullcontext():  # a decode step: no context to enter
            logits = self.model(tokens, prepared.positions.to(dev), step, logits_at=last)  # [B, vocab]
        self.kv.issued(prepared)  # a decode step, issued: plan the next one while it runs
        return logits

    def _prompt_kinds(self, prepared: Prepared) -> list[bool]:
        """Per token row of the step: written by an input of more than one token (a prompt's, whatever
        its chunk), which the CPU products take through oneDNN (runtime/engines/prompt_rows.py). Empty
        for a step of one-token inputs alone (a decode step: nothing to split)."""
        writes = prepared.items
        if self.torch_device.type != "cpu" or all(w.count == 1 for w in writes):
            return []
        return [k for w, n in zip(writes, prepared.lengths) for k in [w.count > 1] * n]

    # ---- entries ---------------------------------------------------------------------------------

    def input_tokens(self, entry: str, call: Call) -> int:
        return len(self._prompt_ids(call)) if entry == "prefill" else 1

    def _prompt_ids(self, call: Call) -> list[int]:
        """The prefill's model ids, computed once per call (a chunked one is asked every round)."""
        key = (call.request, self.label_of(call))
        ids = self._prompts.get(key)
        if ids is None:
            ids = self._prompts[key] = self.prompt_ids(call)
        return ids

    def check_prompt(self, call: Call) -> None:
        """A family's check of a prefill call's prompt: CallError (its request fails, the batch runs
        on) for one it cannot take. Default: none."""

    def prefill(self, calls: list[Call]) -> list[Any]:
        return self._prefill_done(calls, self._run(self._prefill_rows(calls), fresh=True))

    def decode(self, calls: list[Call]) -> list[Any]:
        return self._run(self._decode_rows(calls), fresh=False)

    def call_mixed(self, parts: list[tuple[str, list[Call]]]) -> list[list[Any]]:
        """Calls of several entries (`mixed_entries`) in one forward, as vLLM's scheduler batches them:
        decode rows beside prefill rows (each a chunk under its budget), one pass over the weights a
        round instead of one per entry. Per part, its calls' results in order."""
        rows: list[Row] = []
        spans: list[tuple[str, list[Call], int, int]] = []
        for entry, calls in parts:
            if entry not in self.mixed_entries:
                raise ValueError(f"{self.spec.name}.{entry} cannot share a forward")
            made = self._decode_rows(calls) if entry == "decode" else self._prefill_rows(calls)
            spans.append((entry, calls, len(rows), len(rows) + len(made)))
            rows.extend(made)
        out = self._run(rows, fresh=False)  # graphs only serve a batch of one token a row
        return [self._prefill_done(calls, out[a:b]) if entry == "prefill" else out[a:b]
                for entry, calls, a, b in spans]

    def _prefill_rows(self, calls: list[Call]) -> list[Row]:
        rows: list[Row] = []
        for c in calls:
            self.check_prompt(c)
            ids = self._prompt_ids(c)
            self._check_limit(c, len(ids))
            rows.append((c.request, self.label_of(c), ids, self.sampling_args("prefill", c), c.budget))
        return rows

    def _prefill_done(self, calls: list[Call], out: list[Any]) -> list[Any]:
        """A prompt written whole drops its cached ids (a chunked one keeps them for its next chunk)."""
        for c, token in zip(calls, out):
            if token is not PARTIAL:
                self._prompts.pop((c.request, self.label_of(c)), None)
        return out

    def _decode_rows(self, calls: list[Call]) -> list[Row]:
        """One token a row. The rows' limits are checked in one pass (one allocator query); a row over
        them gets the engine's message."""
        kv = self.kv
        keys = [(c.request, self.label_of(c)) for c in calls]
        limit, room = kv.geometry.max_positions, kv.pages.num_pages * kv.page_size
        rows: list[Row] = []
        for c, key, (length, _) in zip(calls, keys, kv.pages.tails(keys)):
            seq = kv.seqs.get(key)
            if seq is None:
                raise CallError(c.request, f"decode on label {key[1]!r} before its prefill")
            if seq.swapped is not None:
                length = seq.swapped.length
            if seq.position + 1 > limit or length + 1 > room:
                self._check_limit(c, 1)
            rows.append((c.request, key[1], [self.token_in(c.args[0])], self.sampling_args("decode", c), 0))
        return rows

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
        """The rows' results in their order, run in the order the CPU mirror asks for when it asks."""
        order = None if fresh else self._mirror_order(rows)
        if order is None:
            return self._forward_rows(rows, fresh)
        out = self._forward_rows([rows[i] for i in order], fresh)
        back: list[Any] = [None] * len(out)
        for position, i in enumerate(order):
            back[i] = out[position]
        return back

    def _mirror_order(self, rows: list[Row]) -> list[int] | None:
        """The order of a step's rows that keeps the CPU mirror's rows where they are (KVCacheEngine.
        mirror_order): its leading one-token rows reordered, the rest (prompt chunks) left after them."""
        head = 0
        while head < len(rows) and len(rows[head][2]) == 1:
            head += 1
        order = self.kv.mirror_order([(row[0], row[1]) for row in rows[:head]]) if head > 1 else None
        return None if order is None else [*order, *range(head, len(rows))]

    def _forward_rows(self, rows: list[Row], fresh: bool) -> list[Any]:
        """One forward over `rows` and a token sampled for each whose input is complete (PARTIAL for a
        prompt chunk that is not its last), in the rows' order."""
        writes = [Write(r, lab, toks, len(toks), budget) for r, lab, toks, _, budget in rows]
        logits = self.forward(writes, graphs=not fresh)  # decode: graphs
        out: list[Any] = [PARTIAL] * len(rows)
        # one pass over the rows whose input is complete (a prompt's last chunk, every decode row)
        kv_seqs = self.kv.seqs
        done: list[int] = []
        seqs: list[KVSeq] = []
        params: list[SamplingParams] = []
        histories: list[History] = []
        generated: list[int] = []
        for i, (request, label, _, args, _) in enumerate(rows):
            seq = kv_seqs.get((request, label))
            if seq is None or seq.progress:
                continue
            done.append(i)
            seqs.append(seq)
            p = self._params(request, label, *args)
            params.append(p)
            histories.append(self._history(request, label, seq.tokens, p))
            generated.append(int(seq.data.get("generated", 0)))
        if not done:
            return out
        drawn = sample(logits if len(done) == len(rows) else logits[done], params, histories, generated).tolist()
        for i, seq, token, count in zip(done, seqs, drawn, generated):
            out[i] = self.token_out(token, count)
            seq.data["generated"] = count + 1
        self.stats["tokens_out"] += len(done)
        return out

    def _history(self, request: int, label: str, tokens: list[int] | None, p: SamplingParams) -> History:
        """What `sample` penalises for the sequence: its `SeenTokens` synced to `tokens` (nothing
        without a penalty, or once the cache holds other content than tokens)."""
        if p.repetition_penalty == 1.0 or not tokens:
            return []
        seen = self._seen.get((request, label))
        if seen is None:
            seen = self._seen[(request, label)] = SeenTokens()
        return seen.sync(tokens)

    def _params(self, request: int, label: str, *args: Any) -> SamplingParams:
        """The sequence's SamplingParams for these sampling arguments: made again only when they changed
        (or are not plain numbers, which are the only ones compared)."""
        if not all(type(a) in (int, float, bool) for a in args):
            return self._new_params(request, label, *args)
        key = (request, label)
        hit = self._sampling.get(key)
        if hit is not None and hit[0] == args:
            return hit[1]
        params = self._new_params(request, label, *args)
        self._sampling[key] = (args, params)
        return params

    def _new_params(self, request: int, label: str, temperature: Any, top_p: Any, penalty: Any = 1.0) -> SamplingParams:
        return SamplingParams(temperature=max(0.0, float(temperature)), top_p=min(1.0, max(1e-6, float(top_p))),
                              repetition_penalty=max(1e-6, float(penalty)), seed=self.request_seed(request, label))

    def request_seed(self, request: int, label: str) -> int:
        """The sampling seed of (request, label): from the request id, mixed with the base seed if given."""
        base = 0 if self.seed is None else self.seed
        return (base * 0x9E3779B97F4A7C15 + request * 0x100000001B3 + zlib.crc32(label.encode())) % 2**63

    # ---- per-request state beyond the engine's -----------------------------------------------------

    def release(self, request: int) -> None:
        self.kv.release(request)
        for cache in (self._prompts, self._sampling, self._seen):
            for key in [k for k in cache if k[0] == request]:
                del cache[key]

    def counters(self) -> dict[str, int]:
        return {**self.kv.counters(), "requests": len({r for r, _ in self.kv.seqs}), **self.stats,
                **self.graphs.counters()}
