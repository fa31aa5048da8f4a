"""`thinker` of models/qwen3_omni.walk: Qwen3-Omni's MoE thinker (thinker_model.py) over the paged KV engine.

Entries, each batched over its calls (one decoder forward per entry call; a (request, label) twice
in one call list runs in a second wave):
    prefill_text(prompt) -> [U, hidden] (or a dict)  a text part, causal, written; chunkable
    prefill_embeds(x) -> {"rows", "multimodal", "positions", "open_user"}  an audio clip, image or video
                                                 (thinker_media.py says what `x` is), one block
    begin_reply(temperature, top_p) -> token     closes the user turn, writes the assistant header,
                                                 samples the first reply token
    decode(prev, temperature, top_p) -> token    one token, written; greedy at temperature 0
    talker_input(tok) -> [1, hidden]             the token's input embedding; reads nothing, writes nothing
Tokens in and out are Qwen ids (config.VocabMap maps the tiny preset's compact ids at this boundary).
Parts are framed as the chat template does (chat.py): the first part opens `<|im_start|>user\\n`.

What the prefill entries return is the talker's view of the part (models/qwen3_omni/talker.py's
`h`; transformers `generate`, §2.2): only the rows inside a user turn (a system prompt gives none),
each the thinker's input embedding (text, markers) or, at the multimodal placeholder rows, the
hidden state of layer `accept_layer` (24 in the checkpoint) — captured in the forward that writes
the part, not by a second one. A text part returns the rows as a tensor [U, hidden] while a user
turn is open after it, else {"rows", "open_user": False} (a client-templated prompt that closed its
turn itself: the talker then writes no close rows of its own); a media part a dict: "rows" [U,
hidden], "multimodal" [U] bool, "positions" [3, U] float32, the rows' M-RoPE positions relative to
its first row (the talker's own rope for an image is the same grid), and "open_user".
`begin_reply`'s header is sent by nobody: the talker writes those rows itself.

Positions come from the engine, never from the KV length: text advances (t, h, w) together by one
per token; a media block takes the grid positions of positions.py, and the engine's position for
the label is set one past its end marker (`KVSeq.position`, undone with the step if it fails).
Deepstack features are added after layers 0..D-1 at the block's placeholder rows.

Weights: `self.model` has the checkpoint's `thinker.*` names with the prefix dropped (`model.*`,
`lm_head.weight`; per-expert MoE names as stored): a Qwen3-Omni directory (`weights=` or
WGC_QWEN3_OMNI_DIR) gives them, the config and tokenizer.json (weights.py); the presets get random
ones. The tiny preset computes in float64 on CPU, so that a batch's shape never changes a
sampled token (each request's reply alone and batched).

Tensor parallelism (the plan's tp > 1): each rank holds its shard of the decoder (layers/tp_shard.py:
attention heads, each MoE's experts partitioned whole, the embedding and head by vocabulary rows)
and a KV cache of its own heads; a checkpoint is read per shard (another rank's experts never
read), random weights are made whole from the seed and cut. The embeddings, hidden states and
gathered logits are whole on every rank, so every rank returns the same values.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from wgc.models.layers import init_random
from wgc.models.layers.dtypes import declared_dtype
from wgc.models.layers.presets import TinyPreset
from wgc.models.layers.tensor_parallel import component_group, shard_label
from wgc.models.layers.tp_cuts import check_degree, local_heads
from wgc.models.layers.tp_shard import shard_in_place
from wgc.models.qwen3_omni import chat, positions
from wgc.models.qwen3_omni.config import ThinkerConfig, VocabMap
from wgc.models.qwen3_omni.thinker_media import Media, parse
from wgc.models.qwen3_omni.thinker_model import Deepstack, ThinkerLM
from wgc.models.qwen3_omni.weights import KNOB, Checkpoint
from wgc.models.weights_io import announce, choose
from wgc.runtime.components.base import PARTIAL, Call, CallError
from wgc.runtime.engines.kv_component import KVComponent
from wgc.runtime.engines.kv_engine import Geometry, KVCacheEngine, KVSeq, Prepared, Write
from wgc.runtime.engines.sampling import SamplingParams, sample
from wgc.runtime.worker.scheduler import Demand

from wgc.plan.model import ComponentSpec

DEFAULT_PAGE_SIZE = 16
Built = tuple[Tensor, Tensor, Deepstack | None]  # a step's input rows [N, hidden], positions [3, N], deepstack
Build = Callable[[Prepared], Built]


@dataclass(frozen=True)
class Part:
    """One prefill call's input, framed once (a chunked call is asked every round)."""

    source: Any  # the call's argument (a new call on the label is framed afresh)
    ids: list[int]  # Qwen ids of every row (placeholders at the media rows)
    user: list[bool]  # per row: inside a user turn
    after: chat.Turn  # the label's chat state after the part
    media: Media | None = None
    media_at: int = 0  # the first media row (after the framing and the start marker)


class Thinker(TinyPreset, KVComponent):
    """Qwen3-Omni's thinker as a kv component (see the module docstring)."""

    chunked_entries = frozenset({"prefill_text"})
    read_only_entries = frozenset({"talker_input"})

    def __init__(self, spec: ComponentSpec, rank: int, device: str, *, weights: str | Path | None = None,
                 preset: str | None = None, config: ThinkerConfig | None = None, seed: int | None = None,
                 plan_ahead: bool | None = None) -> None:
        """Weights from `weights` (a Qwen3-Omni directory: weights.py), else random ones for `config` or
        `preset`, else from WGC_QWEN3_OMNI_DIR, else the tiny preset's; `seed` the base of every
        request's seeds (and of the random weights)."""
        super().__init__(spec, rank, device)
        self.group = component_group(spec)  # tp > 1: this rank holds a shard of the decoder (layers/tp_shard.py)
        self.torch_device = torch.device(device)
        directory, fallback = choose(weights, preset is not None or config is not None, KNOB)
        checkpoint = None if directory is None else Checkpoint(directory)
        if checkpoint is not None:
            self.config = c = checkpoint.thinker_config
        else:
            self.config = c = config if config is not None else ThinkerConfig.preset(preset or "tiny")
        check_degree(f"qwen3_omni {spec.name}", spec.tp, c.heads, c.kv_heads, experts=c.experts)
        self.dtype = self._dtype()
        if checkpoint is not None:
            self.model = checkpoint.load("thinker", lambda: ThinkerLM(c), self.torch_device, self.dtype,
                                         group=self.group)
            self.tokenizer = checkpoint.tokenizer
            self.source = f"{directory} (thinker.model.*, thinker.lm_head.*)"
        else:
            self.model = ThinkerLM(c)
            init_random(self.model, seed or 0)
            if self.group is not None:  # the whole model from the seed on every rank, then this rank's cut
                shard_in_place(self.model, self.group)
            self.model.to(self.torch_device, self.dtype).eval().requires_grad_(False)
            self.tokenizer = chat.tiny_tokenizer(c.tokens)
            self.source = f"{c.name} {'config' if config is not None else 'preset'}, random weights"
        self.map = VocabMap(c)
        self.seed = seed
        heads, kv_heads = local_heads(c.heads, c.kv_heads, spec.tp)  # this rank's share of the KV cache
        geometry = Geometry(c.layers, heads, kv_heads, c.head_dim, c.max_positions, self.dtype)
        self.kv = KVCacheEngine.for_spec(spec.settings, geometry, self.torch_device, DEFAULT_PAGE_SIZE, plan_ahead)
        self._parts: dict[tuple[int, str], Part] = {}
        self.stats = {"forwards": 0, "tokens_in": 0, "tokens_out": 0}
        announce("qwen3_omni", spec.name, KNOB if fallback else None, "the tiny thinker", self.source, self._where())

    def describe(self) -> str:
        return f"{self.source}; {self._where()}"

    def _where(self) -> str:
        pages = f"{self.kv.pages.num_pages} KV pages of {self.kv.page_size} tokens on {self.device}"
        return shard_label(self.group) + pages

    def _dtype(self) -> torch.dtype:
        if self.torch_device.type == "cuda":
            return declared_dtype(self.spec)
        return torch.float64 if self.config.name == "tiny" else torch.float32

    # ---- what the scheduler asks -------------------------------------------------------------

    def input_tokens(self, entry: str, call: Call) -> int:
        if entry == "prefill_text":
            return len(self._text_part(call).ids)
        if entry == "prefill_embeds":
            try:
                return len(self._media_part(call).ids)
            except CallError:
                return 1  # the entry itself fails the call, naming the field
        if entry == "begin_reply":
            return len(chat.reply_header(self._turn(call), self.config.tokens))
        return 1

    def demands(self, entry: str, calls: list[Call]) -> list[Demand] | None:
        return None if entry == "talker_input" else super().demands(entry, calls)  # takes no pool memory

    # ---- one step ----------------------------------------------------------------------------

    def _step(self, writes: list[Write], build: Build) -> tuple[Prepared, Tensor, Tensor, Tensor]:
        """Reserve, run the decoder over what `build` makes of the reserved step, commit (or undo
        everything and re-raise): (the step, its input rows, final hidden, accept-layer hidden), each [N, hidden]."""
        with self.kv.stepping(writes) as prepared, torch.no_grad():
            x, pos, deepstack = build(prepared)  # [N, hidden], [3, N]
            hidden, accept = self.model(x, pos.to(self.torch_device), self.kv.step(prepared), deepstack)
            self.kv.issued(prepared)
        self.stats["forwards"] += 1
        self.stats["tokens_in"] += sum(prepared.lengths)
        return prepared, x, hidden, accept

    def _embed(self, ids: list[int]) -> Tensor:
        """Qwen ids -> input embeddings [n, hidden]."""
        tokens = torch.tensor([self.map.to_model(t) for t in ids], dtype=torch.int64, device=self.torch_device)
        return self.model.embed(tokens)  # [n, hidden]

    def _text_step(self, writes: list[Write], chunks: list[list[int]]) -> tuple[Prepared, Tensor]:
        """Write token chunks (Qwen ids) at the engine's positions: the logits at each item's last row [B, vocab]."""
        def build(p: Prepared) -> Built:
            return self._embed([t for chunk in chunks for t in chunk]), p.positions.float().expand(3, -1), None

        prepared, _, hidden, _ = self._step(writes, build)
        last = torch.tensor(prepared.lengths, device=hidden.device).cumsum(0) - 1  # [B]
        return prepared, self.model.logits(hidden.index_select(0, last)).float()  # [B, vocab]

    # ---- prompt parts --------------------------------------------------------------------------

    def prefill_text(self, calls: list[Call]) -> list[Any]:
        def run(wave: list[Call]) -> list[Any]:
            parts = [self._text_part(c, fresh=True) for c in wave]
            writes = []
            for c, part in zip(wave, parts):
                left = len(part.ids) - self._progress(c)
                self._check(c, left)
                writes.append(Write(c.request, self.label_of(c), [self.map.to_model(t) for t in part.ids],
                                    len(part.ids), c.budget))
            prepared = self._text_chunks(writes, parts, wave)
            out: list[Any] = []
            for c, part, done in zip(wave, parts, prepared.final):
                if not done:
                    out.append(PARTIAL)
                    continue
                self._parts.pop((c.request, self.label_of(c)), None)
                kept = [t for t, u in zip(part.ids, part.user) if u]
                rows = self._embed(kept) if kept else self._empty()  # [U, hidden]
                out.append(rows if self._open_user(part) else {"rows": rows, "open_user": False})
            return out

        return self.waves(calls, run)

    def _text_chunks(self, writes: list[Write], parts: list[Part], wave: list[Call]) -> Prepared:
        def build(p: Prepared) -> Built:
            for c, part, done in zip(wave, parts, p.final):
                if done:
                    self._seq(c).data["turn"] = part.after.plain()
            ids = [t for i, part in enumerate(parts) for t in part.ids[p.starts[i]:p.starts[i] + p.lengths[i]]]
            return self._embed(ids), p.positions.float().expand(3, -1), None

        prepared, _, _, _ = self._step(writes, build)
        return prepared

    def prefill_embeds(self, calls: list[Call]) -> list[Any]:
        def run(wave: list[Call]) -> list[Any]:
            parts = [self._media_part(c, fresh=True) for c in wave]
            for c, part in zip(wave, parts):
                self._check(c, len(part.ids))
            writes = [Write(c.request, self.label_of(c), None, len(part.ids)) for c, part in zip(wave, parts)]
            placed: list[Tensor] = []
            prepared, x, _, accept = self._step(writes, lambda p: self._media_rows(p, wave, parts, placed))
            out: list[Any] = []
            for i, (c, part) in enumerate(zip(wave, parts)):
                self._parts.pop((c.request, self.label_of(c)), None)
                start = sum(prepared.lengths[:i])
                rows = slice(start, start + len(part.ids))
                out.append(self._talker_view(part, x[rows], accept[rows], placed[i]))
            return out

        return self.waves(calls, run)

    def _media_rows(self, p: Prepared, wave: list[Call], parts: list[Part], placed: list[Tensor]) -> Built:
        """Each item's framing, start marker, media rows and end marker at M-RoPE positions; the labels'
        positions set past the blocks; the deepstack rows of the packed step."""
        xs, pos, ds_rows, ds_feats = [], [], [], []
        offset = 0
        for i, (c, part) in enumerate(zip(wave, parts)):
            media = part.media
            assert media is not None
            base = int(p.positions[offset])  # the label's next position
            head = part.media_at - 1  # framing rows before the start marker
            start, end = part.ids[:head + 1], part.ids[-1]  # the framing and start marker; the end marker
            body = (positions.audio(base + head, media.embeds.shape[0]) if media.grid is None else
                    positions.vision(base + head, media.grid, self._t_step(media)))
            rows = torch.cat([positions.text(base, head).positions, body.positions], dim=1)  # [3, n]
            placed.append(rows - base)
            pos.append(rows)
            self._seq(c).position = body.next
            self._seq(c).data["turn"] = part.after.plain()
            xs.append(torch.cat([self._embed(start), media.embeds.to(self.torch_device, self.dtype),
                                 self._embed([end])]))  # [n, hidden]
            if media.deepstack is not None:
                ds_rows.append(torch.arange(media.embeds.shape[0]) + offset + part.media_at)
                ds_feats.append(media.deepstack)
            offset += p.lengths[i]
        return torch.cat(xs), torch.cat(pos, dim=1), self._deepstack(ds_rows, ds_feats)

    def _deepstack(self, rows: list[Tensor], feats: list[Tensor]) -> Deepstack | None:
        """The items' deepstack features as one packed set (levels missing from an item add zeros)."""
        if not rows:
            return None
        levels = max(f.shape[0] for f in feats)
        padded = [torch.cat([f, f.new_zeros(levels - f.shape[0], *f.shape[1:])]) for f in feats]  # [D, V_i, hidden]
        features = torch.cat(padded, dim=1).to(self.torch_device, self.dtype)  # [D, V, hidden]
        return Deepstack(torch.cat(rows).to(self.torch_device), features)

    def _t_step(self, media: Media) -> float:
        per_grid = 1.0 if media.kind == "image" else media.second_per_grid
        return per_grid * self.config.position_per_second

    def _talker_view(self, part: Part, x: Tensor, accept: Tensor, placed: Tensor) -> dict[str, Tensor]:
        """The user rows of a media part: input embeddings, the accept layer's state at the media rows."""
        media = part.media
        assert media is not None
        mm = torch.zeros(len(part.ids), dtype=torch.bool)  # [n]
        mm[part.media_at:part.media_at + media.embeds.shape[0]] = True
        rows = torch.where(mm.to(x.device)[:, None], accept, x)  # [n, hidden]
        keep = torch.tensor(part.user, dtype=torch.bool)  # [n]
        kept_pos = placed[:, keep]  # [3, U]
        if kept_pos.shape[1]:
            kept_pos = kept_pos - kept_pos[:, :1]
        return {"rows": rows[keep.to(x.device)], "multimodal": mm[keep], "positions": kept_pos,
                "open_user": self._open_user(part)}

    def _open_user(self, part: Part) -> bool:
        """A user turn is open after the part: `begin_reply` closes it, the talker writes its close rows."""
        return part.after.open and part.after.role == self.config.tokens.user

    # ---- the reply -----------------------------------------------------------------------------

    def begin_reply(self, calls: list[Call]) -> list[Any]:
        def run(wave: list[Call]) -> list[Any]:
            tokens = self.config.tokens
            headers = []
            for c in wave:
                turn = self._turn(c)
                headers.append((chat.reply_header(turn, tokens), turn))
                self._check(c, len(headers[-1][0]))
            writes = [Write(c.request, self.label_of(c), [self.map.to_model(t) for t in ids], len(ids))
                      for c, (ids, _) in zip(wave, headers)]
            _, logits = self._text_step(writes, [ids for ids, _ in headers])
            for c, (ids, turn) in zip(wave, headers):
                self._seq(c).data["turn"] = chat.roles(turn, ids, tokens)[1].plain()
            return self._sample(wave, logits, 0)

        return self.waves(calls, run)

    def decode(self, calls: list[Call]) -> list[Any]:
        def run(wave: list[Call]) -> list[Any]:
            for c in wave:
                self._check(c, 1)
            ids = [[int(c.args[0])] for c in wave]
            writes = [Write(c.request, self.label_of(c), [self.map.to_model(i[0])], 1) for c, i in zip(wave, ids)]
            _, logits = self._text_step(writes, ids)
            return self._sample(wave, logits, 1)

        return self.waves(calls, run)

    def talker_input(self, calls: list[Call]) -> list[Any]:
        with torch.no_grad():
            rows = self._embed([int(c.args[0]) for c in calls])  # [B, hidden]
        return list(rows.split(1))  # each [1, hidden]

    def _sample(self, wave: list[Call], logits: Tensor, first_arg: int) -> list[int]:
        """One token per call from its logits [B, vocab]: the call's (temperature, top_p) args from
        `first_arg`, its own seed and step, so a request draws the same whatever it is batched with."""
        seqs = [self._seq(c) for c in wave]
        steps = [int(s.data.get("generated", 0)) for s in seqs]
        params = []
        for c in wave:
            temperature = max(0.0, float(c.args[first_arg]))
            top_p = float(c.args[first_arg + 1]) if len(c.args) > first_arg + 1 else 1.0
            params.append(SamplingParams(temperature=temperature if top_p > 0 else 0.0, top_p=min(1.0, max(top_p, 1e-6)),
                                         seed=self.request_seed(c.request, self.label_of(c))))
        drawn = sample(logits, params, [[] for _ in wave], steps).tolist()
        for seq, step in zip(seqs, steps):
            seq.data["generated"] = step + 1
        self.stats["tokens_out"] += len(wave)
        return [self.map.from_model(t) for t in drawn]

    def request_seed(self, request: int, label: str = "") -> int:
        """A request's seed from its id (and label), mixed with the component's base seed if given."""
        base = 0 if self.seed is None else self.seed
        return (base * 0x9E3779B97F4A7C15 + request * 0x100000001B3 + zlib.crc32(label.encode())) % 2**63

    # ---- framing, checks, per-request state ----------------------------------------------------

    def _text_part(self, call: Call, fresh: bool = False) -> Part:
        """The call's framed ids; framed afresh at a call's start (`fresh`: the turn may have moved)."""
        key = (call.request, self.label_of(call))
        prompt = call.args[0] if call.args else ""
        cached = self._parts.get(key)
        if cached is not None and cached.source is prompt and (not fresh or self._progress(call)):
            return cached
        text = prompt.decode() if isinstance(prompt, bytes) else str(prompt)
        turn, tokens = self._turn(call), self.config.tokens
        ids = chat.frame(turn, chat.encode(self.tokenizer, text), tokens)
        user, after = chat.user_rows(turn, ids, tokens)
        part = self._parts[key] = Part(prompt, ids, user, after)
        return part

    def _media_part(self, call: Call, fresh: bool = False) -> Part:
        key = (call.request, self.label_of(call))
        x = call.args[0] if call.args else None
        cached = self._parts.get(key)
        if cached is not None and cached.source is x and not fresh:
            return cached
        try:
            media = parse(x, self.config)
        except ValueError as err:
            raise CallError(call.request, f"{self.spec.name}: {err}") from None
        begin, placeholder, end = media.markers(self.config)
        turn, tokens = self._turn(call), self.config.tokens
        framed = chat.frame(turn, [begin], tokens)
        ids = [*framed, *[placeholder] * media.embeds.shape[0], end]
        user, after = chat.user_rows(turn, ids, tokens)
        part = self._parts[key] = Part(x, ids, user, after, media, len(framed))
        return part

    def _turn(self, call: Call) -> chat.Turn:
        seq = self.kv.seq(call.request, self.label_of(call))
        return chat.Turn.of(None if seq is None else seq.data.get("turn"))

    def _progress(self, call: Call) -> int:
        seq = self.kv.seq(call.request, self.label_of(call))
        return 0 if seq is None else seq.progress

    def _seq(self, call: Call) -> KVSeq:
        seq = self.kv.seq(call.request, self.label_of(call))
        assert seq is not None, "a written label has a sequence"
        return seq

    def _check(self, call: Call, left: int) -> None:
        label = self.label_of(call)
        error = self.limit_error(call.request, label, left + self._progress(call), left)
        if error:
            raise CallError(call.request, error)

    def _empty(self) -> Tensor:
        return torch.empty(0, self.config.hidden, dtype=self.dtype, device=self.torch_device)  # [0, hidden]

    def release(self, request: int) -> None:
        self.kv.release(request)
        for key in [k for k in self._parts if k[0] == request]:
            del self._parts[key]

    def counters(self) -> dict[str, int]:
        return {**self.kv.counters(), "requests": len({r for r, _ in self.kv.seqs}), **self.stats}
