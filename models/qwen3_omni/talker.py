"""`talker` of models/qwen3_omni.walk: the MoE codec decoder over the paged KV engine, and its code
predictor run once per step for the whole batch (models-wave2.md §2.2).

Entries, each batched over its calls (one decoder forward per entry call; a (request, label) twice
in one call list runs in a second wave):
    prefill(h)            a user-turn part's rows, projected and written; chunkable
    last_prefill(h, speaker, temperature, top_k, repetition_penalty) -> token[16]
                          the turn's close and the 9-position assistant prefix; samples frame 0
    decode(prev, h, temperature, top_k, repetition_penalty) -> token[16]
                          one position: the previous frame plus the step's text part; the next frame

What `h` is (one item of the walk's `hidden` stream; talker_inputs.py checks it): the thinker's rows
for the positions the talker sees, [N, thinker_hidden]. A tensor is N text rows (thinker input
embeddings, through `text_projection`) at text positions; a dict {"rows": [N, D], "multimodal": [N]
bool, "positions": [3, N], "open_user": bool} (all but "rows" optional) marks the rows that are the
thinker's accept-layer hidden states (audio, image and video placeholders, through
`hidden_projection`), gives the rows' M-RoPE positions relative to the part's first row (the next
part starts one past the largest), and says whether a user turn is still open after the part
(default true; false when the part closed its turn itself). Only user turns reach the talker (the
thinker leaves the system prompt and earlier assistant turns out: transformers' user mask); N may
be 0. `last_prefill` takes the first reply token's row [1, D], `decode` the next reply token's, or
None once the thinker has ended (the stream's empty item): the first None is `tts_eos`, every
later one `tts_pad`.

The rows the talker writes itself come from the thinker's input embeddings of seven ids it holds
(`TalkerModel.thinker_rows`): `begin_reply` closes the open turn and opens the assistant turn on
the thinker's side and sends nothing, so `last_prefill` writes `<|im_end|>`, `\\n` (the user turn's
last two positions, text only; when a user turn is open), then the prefix: `<|im_start|>`,
`assistant`, `\\n` (text only); `tts_pad` x 4 plus codec nothink, think_bos, think_eos, speaker;
`tts_bos` plus codec pad; the first reply token plus codec bos. Frame 0 is sampled at its last
position.

Each step: codebook 0 from `codec_head` over the final-normed hidden state, with every id of the
vocabulary's top 1024 but codec EOS suppressed, the repetition penalty over the codebook-0 codes the
request has sampled so far, temperature and top-k (top-p 1); then the code predictor's 15 steps for
all rows that did not end (greedy when the talker is, else top-k 50, top-p 0.8). A row's draws use
its own seed and the step `16·frame + codebook`, so a request samples the same frames whatever it
is batched with. At the boundary the model's codec EOS is the walk's `const codec_eos`.

Tensor parallelism (the plan's tp > 1): each rank holds its shard of the decoder (layers/tp_shard.py:
attention heads, each MoE's experts partitioned whole, the shared expert cut column/row) and a KV
cache of its own heads; what `replicated` names, the projections and the codec head stay whole, so
every rank samples the same frames. A checkpoint is read per shard, random weights are cut from
the whole model made from the seed.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from wgc.models.layers import init_random
from wgc.models.layers.dtypes import declared_dtype
from wgc.models.layers.tensor_parallel import component_group, shard_label
from wgc.models.layers.tp_cuts import check_degree, local_heads
from wgc.models.layers.tp_shard import shard_in_place
from wgc.models.qwen3_omni import talker_inputs as ti
from wgc.models.qwen3_omni import talker_model as tm
from wgc.models.qwen3_omni.config import ThinkerConfig
from wgc.models.qwen3_omni.talker_config import PREDICTOR_TEMPERATURE, PREDICTOR_TOP_K, PREDICTOR_TOP_P, TalkerConfig
from wgc.models.qwen3_omni.thinker_model import ThinkerLM
from wgc.models.qwen3_omni.weights import KNOB, Checkpoint
from wgc.models.weights_io import announce, choose
from wgc.runtime.components.base import PARTIAL, Call, CallError
from wgc.runtime.engines.kv_component import KVComponent
from wgc.runtime.engines.kv_engine import Geometry, KVCacheEngine, Prepared, Write
from wgc.runtime.engines.sampling import SamplingParams, sample

from wgc.plan.model import ComponentSpec

DEFAULT_PAGE_SIZE = 16
CLOSE_ROWS = (tm.ROW_IM_END, tm.ROW_NEWLINE)  # the user turn's close, written by last_prefill
PREFIX = 9  # positions of the assistant prefix
Build = Callable[[Prepared], tuple[Tensor, Tensor]]  # a step's input rows [N, hidden], M-RoPE positions [3, N]



def replicated(name: str) -> bool:
    """The talker's parts every TP rank keeps whole: the code predictor (a small dense transformer run per
    frame, outside the KV engine) and codebook 0's embedding (read once a frame: a whole table costs no
    all-reduce); the decoder's layers are cut, the projections and the codec head are whole anyway."""
    return name in ("code_predictor", "model.codec_embedding")

class Talker(KVComponent):
    """Qwen3-Omni's talker as a kv component (see the module docstring)."""

    chunked_entries = frozenset({"prefill"})

    def __init__(self, spec: ComponentSpec, rank: int, device: str, *, weights: str | Path | None = None,
                 preset: str | None = None, config: TalkerConfig | None = None, seed: int | None = None,
                 plan_ahead: bool | None = None) -> None:
        """Weights from `weights` (a Qwen3-Omni directory: `talker.*` and the seven thinker rows,
        weights.py), else random ones for `config` or `preset`, else from WGC_QWEN3_OMNI_DIR, else the
        tiny preset's; `seed` the base of every request's seeds (and of the random weights)."""
        super().__init__(spec, rank, device)
        self.group = component_group(spec)  # tp > 1: this rank holds a shard of the decoder (see `replicated`)
        self.torch_device = torch.device(device)
        directory, fallback = choose(weights, preset is not None or config is not None, KNOB)
        checkpoint = None if directory is None else Checkpoint(directory)
        if checkpoint is not None:
            self.config = c = checkpoint.talker_config
        else:
            self.config = c = config if config is not None else TalkerConfig.preset(preset or "tiny")
        check_degree(f"qwen3_omni {spec.name}", spec.tp, c.heads, c.kv_heads, c.shared_intermediate, c.experts)
        self.dtype = self._dtype()
        if checkpoint is not None:
            self.model = checkpoint.load_talker(lambda: tm.TalkerModel(c), self.torch_device, self.dtype,
                                                self.group, replicated)
            self.source = f"{directory} (talker.*)"
        else:
            self.model = tm.TalkerModel(c)
            tm.init_random(self.model, seed or 0)
            if config is None and c.name == "tiny":
                self.model.load_thinker_rows(_tiny_thinker_embeddings())
            if self.group is not None:  # the whole model from the seed on every rank, then this rank's cut
                shard_in_place(self.model, self.group, replicated)
            self.model.to(self.torch_device, self.dtype).eval().requires_grad_(False)
            self.source = f"{c.name} {'config' if config is not None else 'preset'}, random weights"
        self.seed = seed
        self.eos_out = int(spec.consts.get("codec_eos", c.codec_eos))  # the walk's codec EOS
        suppress = torch.zeros(c.vocab, dtype=torch.bool)
        suppress[list(c.suppressed())] = True
        suppress[c.codec_eos] = False
        self.suppress = suppress.to(self.torch_device)  # [vocab]
        heads, kv_heads = local_heads(c.heads, c.kv_heads, spec.tp)  # this rank's share of the KV cache
        geometry = Geometry(c.layers, heads, kv_heads, c.head_dim, c.max_positions, self.dtype)
        self.kv = KVCacheEngine.for_spec(spec.settings, geometry, self.torch_device, DEFAULT_PAGE_SIZE, plan_ahead)
        self._open_user: dict[tuple[int, str], bool] = {}  # a user turn is open after the label's last part
        self.stats = {"forwards": 0, "tokens_in": 0, "frames_out": 0}
        announce("qwen3_omni", spec.name, KNOB if fallback else None, "the tiny talker", self.source, self._where())

    @classmethod
    def tiny(cls, spec: ComponentSpec, rank: int, device: str) -> Talker:
        """The tiny preset (its thinker rows from the tiny thinker's random embeddings, see
        `_tiny_thinker_embeddings`), so the tiny components are one model."""
        return cls(spec, rank, device, preset="tiny")

    def describe(self) -> str:
        return f"{self.source}; {self._where()}"

    def _where(self) -> str:
        pages = f"{self.kv.pages.num_pages} KV pages of {self.kv.page_size} tokens on {self.device}"
        return shard_label(self.group) + pages

    def _dtype(self) -> torch.dtype:
        """The walk's dtype (bf16) on CUDA, float32 on CPU; the tiny preset computes in float64 on CPU,
        so that a batch's shape never changes a sampled code (each request's frames alone and batched),
        and in float32 on CUDA (the torch attention path: FlashInfer takes no 16-wide heads)."""
        tiny = self.config.name == "tiny"
        if self.torch_device.type == "cuda" and not tiny:
            return declared_dtype(self.spec)
        return torch.float64 if tiny and self.torch_device.type == "cpu" else torch.float32

    # ---- what the scheduler asks -------------------------------------------------------------

    def input_tokens(self, entry: str, call: Call) -> int:
        if entry == "prefill":
            try:
                return ti.part(call.args[0] if call.args else None, self.config.thinker_hidden).length
            except ValueError:
                return 0  # the entry itself fails the call
        if entry == "last_prefill":
            return self._prefix_length(call)
        return 1

    def _prefix_length(self, call: Call) -> int:
        """The turn's close (when a user turn is open) and the 9-position prefix."""
        return (len(CLOSE_ROWS) if self._open_user.get((call.request, self.label_of(call)), True) else 0) + PREFIX

    # ---- entries -------------------------------------------------------------------------------

    def prefill(self, calls: list[Call]) -> list[Any]:
        def run(wave: list[Call]) -> list[Any]:
            parts = [self._arg(c, ti.part, 0, self.config.thinker_hidden) for c in wave]
            for c, part in zip(wave, parts):
                self._open_user[(c.request, self.label_of(c))] = part.open_user
            todo = [i for i, part in enumerate(parts) if part.length]
            out: list[Any] = [None] * len(wave)
            if not todo:
                return out
            writes = [Write(wave[i].request, self.label_of(wave[i]), None, parts[i].length, wave[i].budget)
                      for i in todo]
            starts: list[int] = []  # each item's part start position

            def build(p: Prepared) -> tuple[Tensor, Tensor]:
                rows, places, at = [], [], 0
                for k, i in enumerate(todo):
                    part, cut = parts[i], slice(p.starts[k], p.starts[k] + p.lengths[k])
                    engine = p.positions[at:at + p.lengths[k]].to(torch.float32)  # [n]
                    starts.append(int(engine[0]) - p.starts[k])
                    rel = part.positions
                    places.append(engine.expand(3, -1) if rel is None else rel[:, cut].float() + starts[-1])  # [3, n]
                    mm = None if part.multimodal is None else part.multimodal[cut].to(self.torch_device)
                    rows.append(self.model.project(part.rows[cut].to(self.torch_device, self.dtype), mm))
                    at += p.lengths[k]
                return torch.cat(rows), torch.cat(places, dim=1)  # [N, hidden], [3, N]

            def placed(p: Prepared) -> None:  # a media part ends one past its largest position
                for k, i in enumerate(todo):
                    if p.final[k] and parts[i].positions is not None:
                        self.kv.seqs[(writes[k].request, writes[k].label)].position = starts[k] + parts[i].extent()

            prepared, _ = self._step(writes, build, placed)
            for k, i in enumerate(todo):
                out[i] = None if prepared.final[k] else PARTIAL
            return out

        return self.waves(calls, run)

    def last_prefill(self, calls: list[Call]) -> list[Any]:
        def run(wave: list[Call]) -> list[Any]:
            speakers = [self._speaker(c) for c in wave]
            params = [self._talker_params(c) for c in wave]
            firsts = [self._arg(c, ti.reply_row, 0, self.config.thinker_hidden) for c in wave]
            closes = [self._prefix_length(c) > PREFIX for c in wave]
            writes = [Write(c.request, self.label_of(c), None, self._prefix_length(c)) for c in wave]

            def build(p: Prepared) -> tuple[Tensor, Tensor]:
                markers = self.model.marker_rows()  # [7, hidden]
                rows = [self.prefix_rows(markers, f, s, close) for f, s, close in zip(firsts, speakers, closes)]
                return torch.cat(rows), p.positions.to(torch.float32).expand(3, -1)

            prepared, hidden = self._step(writes, build)
            for c, f in zip(wave, firsts):
                self._seq(c).data.update(codes=[], frames=0, text_ended=f is None)
                self._open_user.pop((c.request, self.label_of(c)), None)
            return self._frames(wave, prepared, hidden, params)

        return self.waves(calls, run)

    def decode(self, calls: list[Call]) -> list[Any]:
        def run(wave: list[Call]) -> list[Any]:
            for c in wave:
                if self.kv.seq(c.request, self.label_of(c)) is None:
                    raise CallError(c.request, f"{self.spec.name}.decode before last_prefill")
            params = [self._talker_params(c) for c in wave]
            c = self.config
            prev = torch.stack([self._arg(call, ti.frame, 0, c.predictor.groups, c.vocab, c.predictor.vocab,
                                          self.eos_out, c.codec_eos) for call in wave])  # [B, 16]
            prev = prev.to(self.torch_device)
            rows = [self._arg(call, ti.reply_row, 1, c.thinker_hidden) for call in wave]
            writes = [Write(call.request, self.label_of(call), None, 1) for call in wave]

            def build(p: Prepared) -> tuple[Tensor, Tensor]:
                x = self.model.frame_embedding(prev[:, 0], prev[:, 1:]) + self._text_parts(wave, rows)  # [B, hidden]
                return x, p.positions.to(torch.float32).expand(3, -1)  # [B, hidden], [3, B]

            prepared, hidden = self._step(writes, build)
            for call, r in zip(wave, rows):
                if r is None:
                    self._seq(call).data["text_ended"] = True
            return self._frames(wave, prepared, hidden, params)

        return self.waves(calls, run)

    # ---- rows ----------------------------------------------------------------------------------

    def prefix_rows(self, markers: Tensor, first: Tensor | None, speaker: int, close: bool = True) -> Tensor:
        """The user turn's close (when `close`) and the assistant prefix [2 + 9, hidden]; `first` the
        first reply token's thinker row [thinker_hidden] (None: the reply is empty, `tts_eos` instead)."""
        c = self.config
        first_text = markers[tm.ROW_TTS_EOS] if first is None else self.model.text_projection(first.to(markers))
        pad = markers[tm.ROW_TTS_PAD]
        text = torch.stack([markers[tm.ROW_IM_START], markers[tm.ROW_ASSISTANT], markers[tm.ROW_NEWLINE],
                            pad, pad, pad, pad, markers[tm.ROW_TTS_BOS], first_text])  # [9, hidden]
        ids = torch.tensor([c.codec_nothink, c.codec_think_bos, c.codec_think_eos, speaker, c.codec_pad, c.codec_bos],
                           device=markers.device)
        codec = torch.cat([markers.new_zeros(3, c.hidden), self.model.model.codec_embedding(ids)])  # [9, hidden]
        return torch.cat([markers[list(CLOSE_ROWS if close else ())], text + codec])  # [11 or 9, hidden]

    def _text_parts(self, wave: list[Call], rows: list[Tensor | None]) -> Tensor:
        """Each decode step's text part [B, hidden]: the reply token's projection; once the reply has
        ended, tts_eos the first time and tts_pad ever after."""
        markers = self.model.marker_rows()  # [7, hidden]
        ended = [bool(self._seq(c).data.get("text_ended")) for c in wave]
        marker = [tm.ROW_TTS_PAD if e else tm.ROW_TTS_EOS for e in ended]
        out = markers[marker]  # [B, hidden]
        given = [i for i, r in enumerate(rows) if r is not None]
        if given:
            given_rows = torch.stack([rows[i] for i in given]).to(out)  # type: ignore[misc]  # [G, thinker_hidden]
            out[given] = self.model.text_projection(given_rows)
        return out

    # ---- sampling ------------------------------------------------------------------------------

    def _frames(self, wave: list[Call], prepared: Prepared, hidden: Tensor,
                params: list[SamplingParams]) -> list[Tensor]:
        """Sample each call's frame at its last row: codebook 0 from the codec head, then the code
        predictor over the rows that did not end."""
        c = self.config
        last = torch.tensor(prepared.lengths, device=hidden.device).cumsum(0) - 1  # [B]
        h = hidden.index_select(0, last)  # [B, hidden]
        logits = self.model.codec_head(h).float().masked_fill(self.suppress, float("-inf"))  # [B, vocab]
        seqs = [self._seq(call) for call in wave]
        frames = [int(s.data.get("frames", 0)) for s in seqs]
        seeds = [p.seed or 0 for p in params]
        c0 = sample(logits, params, [s.data["codes"] for s in seqs], [16 * f for f in frames])  # [B]
        residual = torch.zeros(len(wave), c.predictor.groups - 1, dtype=torch.int64, device=h.device)  # [B, 15]
        going = (c0 != c.codec_eos).nonzero()[:, 0]  # [B'] rows that go on speaking
        if going.numel():
            rows = going.tolist()
            greedy = [params[i].greedy for i in rows]
            picks = [SamplingParams(temperature=0.0 if g else PREDICTOR_TEMPERATURE, top_k=PREDICTOR_TOP_K,
                                    top_p=PREDICTOR_TOP_P, seed=seeds[i]) for g, i in zip(greedy, rows)]

            def pick(j: int, step_logits: Tensor) -> Tensor:
                return sample(step_logits.float(), picks, [[] for _ in rows], [16 * frames[i] + 1 + j for i in rows])

            with torch.no_grad():
                residual[going] = self.model.code_predictor.generate(h[going], self.model.model.codec_embedding(c0[going]),
                                                                     pick)
        heads = torch.where(c0 == c.codec_eos, self.eos_out, c0)  # [B]: the walk's codec EOS
        out = torch.cat([heads[:, None], residual], dim=1).cpu()  # [B, 16] int64
        for k, (seq, code) in enumerate(zip(seqs, c0.tolist())):
            seq.data["codes"] = [*seq.data["codes"], code]  # a new list: a checkpoint may hold the old one
            seq.data["frames"] = frames[k] + 1
        self.stats["frames_out"] += len(wave)
        return list(out.unbind(0))  # each [16]

    def _talker_params(self, call: Call) -> SamplingParams:
        """Codebook 0's sampling from the call's (temperature, top_k, repetition_penalty), its args 2..4."""
        try:
            temperature, top_k, penalty = (float(call.args[2 + i]) for i in range(3))
            return SamplingParams(temperature=max(0.0, temperature), top_k=max(0, int(top_k)),
                                  repetition_penalty=penalty, seed=self.request_seed(call.request, self.label_of(call)))
        except (IndexError, TypeError, ValueError) as err:
            raise CallError(call.request, f"{self.spec.name}: bad sampling arguments ({err})") from None

    def request_seed(self, request: int, label: str = "") -> int:
        """A request's seed from its id (and label), mixed with the component's base seed if given."""
        base = 0 if self.seed is None else self.seed
        return (base * 0x9E3779B97F4A7C15 + request * 0x100000001B3 + zlib.crc32(label.encode())) % 2**63

    # ---- one step, arguments -------------------------------------------------------------------

    def _step(self, writes: list[Write], build: Build,
              placed: Callable[[Prepared], None] | None = None) -> tuple[Prepared, Tensor]:
        """Reserve, run the decoder over the rows and M-RoPE positions `build` makes, let `placed` set
        positions past a media part, commit (or undo everything and re-raise)."""
        for w in writes:
            self._check(w)
        with self.kv.stepping(writes, "causal", True) as prepared, torch.no_grad():
            x, positions = build(prepared)  # [N, hidden], [3, N]
            hidden = self.model.model(x.to(self.dtype), positions.to(self.torch_device), self.kv.step(prepared))
            self.kv.issued(prepared)
            if placed is not None:
                placed(prepared)
        self.stats["forwards"] += 1
        self.stats["tokens_in"] += sum(prepared.lengths)
        return prepared, hidden  # hidden [N, hidden]

    def _check(self, w: Write) -> None:
        seq = self.kv.seq(w.request, w.label)
        left = w.count - (seq.progress if seq is not None else 0)
        error = self.limit_error(w.request, w.label, w.count, left if w.budget <= 0 else min(w.budget, left))
        if error:
            raise CallError(w.request, error)

    def _seq(self, call: Call) -> Any:
        seq = self.kv.seq(call.request, self.label_of(call))
        assert seq is not None, "a written label has a sequence"
        return seq

    def _arg(self, call: Call, parse: Callable[..., Any], index: int, *how: Any) -> Any:
        """The call's argument `index` through a talker_inputs parser; its ValueError fails the call."""
        try:
            return parse(call.args[index] if len(call.args) > index else None, *how)
        except ValueError as err:
            raise CallError(call.request, f"{self.spec.name}: {err}") from None

    def _speaker(self, call: Call) -> int:
        name = str(call.args[1]) if len(call.args) > 1 else ""
        speaker = self.config.speaker_id(name)
        if speaker is None:
            known = ", ".join(n for n, _ in self.config.speakers)
            raise CallError(call.request, f"unknown speaker {name!r} (this talker has {known})")
        return speaker

    # ---- batching, per-request state -----------------------------------------------------------

    def release(self, request: int) -> None:
        self.kv.release(request)
        for key in [k for k in self._open_user if k[0] == request]:
            del self._open_user[key]

    def counters(self) -> dict[str, int]:
        return {**self.kv.counters(), "requests": len({r for r, _ in self.kv.seqs}), **self.stats}


def _tiny_thinker_embeddings() -> torch.Tensor:
    """The tiny thinker's random token embeddings (`Thinker.tiny`'s weights, rebuilt here: the thinker
    may be on another rank). Whichever way the tiny talker is built — `tiny`, or the constructor a
    worker process calls with no weights — its seven thinker rows are these, not random ones."""
    thinker = ThinkerLM(ThinkerConfig.preset("tiny"))
    init_random(thinker, 0)
    return thinker.model.embed_tokens.weight.detach()
