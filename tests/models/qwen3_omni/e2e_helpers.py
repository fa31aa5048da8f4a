"""Shared by the end-to-end tests: models/qwen3_omni.walk compiled for a placement and run in process
(LocalCluster, every rank in one thread) on the tiny components; recording and scripted components;
requests; what a finished request must leave behind on every rank."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import torch
from torch import Tensor
from wgc.models.qwen3_omni.audio import AudioEncoder
from wgc.models.qwen3_omni.code2wav import Code2Wav
from wgc.models.qwen3_omni.config import VocabMap
from wgc.models.qwen3_omni.talker import Talker
from wgc.models.qwen3_omni.thinker import Thinker
from wgc.runtime.components.base import Call, Component, load_class
from wgc.runtime.coordinator.request import RequestSpec
from wgc.runtime.process.local import LocalCluster
from wgc.runtime.protocol.messages import Part

from tests.models.orpheus.helpers import ROOT
from tests.models.qwen3_omni import thinker_reference as tr
from tests.models.qwen3_omni.talker_helpers import lively
from wgc.compile import compile_program
from wgc.plan.model import ComponentSpec, Plan

PLACEMENTS = ("cpu.toml", "qwen3-omni-cpu2.toml")  # one rank; the paper's two (talker and code2wav on 1)
GREEDY = {"temperature": 0.0, "talker_temperature": 0.0}


@cache
def plan(placement: str) -> Plan:
    source = ROOT / "models" / "qwen3_omni.walk"
    compiled = compile_program(str(source), source.read_text(), str(ROOT / "placements" / placement))
    assert compiled.plan is not None, [d.message for d in compiled.diagnostics]
    return compiled.plan


class RecordingThinker(Thinker):
    """Keeps every token `talker_input` was asked for (what reached the talker)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fed: dict[int, list[int]] = {}

    def talker_input(self, calls: list[Call]) -> list[Any]:
        for c in calls:
            self.fed.setdefault(c.request, []).append(int(c.args[0]))
        return super().talker_input(calls)


class RecordingTalker(Talker):
    """`codec_eos` "never": codebook 0's EOS suppressed too (a talker that never stops by itself);
    "always": every code but EOS suppressed (the first frame is EOS)."""

    codec_eos = "sampled"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        eos = self.config.codec_eos
        if self.codec_eos == "never":
            self.suppress[eos] = True
        elif self.codec_eos == "always":
            self.suppress[:] = True
            self.suppress[eos] = False


class Endless(RecordingTalker):
    codec_eos = "never"


class Mute(RecordingTalker):
    codec_eos = "always"


class RecordingCode2Wav(Code2Wav):
    """Keeps each request's frames as they arrive (each chunk's new frames) and its audio chunks."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.frames: dict[int, list[Tensor]] = {}
        self.audio: dict[int, list[Tensor]] = {}

    def decode(self, calls: list[Call]) -> list[Tensor]:
        out = super().decode(calls)
        for call, audio in zip(calls, out):
            chunk = self.frames_of(call)
            self.frames.setdefault(call.request, []).extend(chunk[self.windows.context(len(chunk)):])
            self.audio.setdefault(call.request, []).append(audio)
        return out


@dataclass
class Omni:
    """A cluster and its components by name (one per rank that holds it)."""

    cluster: LocalCluster
    parts: dict[str, Component] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        return self.parts[name]

    def calls(self, component: str, entry: str) -> int:
        return sum(ex.counters().get(f"{component}.{entry}.calls", 0) for ex in self.cluster.executors)


def omni(placement: str, parity: bool = False, talker: type[RecordingTalker] = RecordingTalker,
         thinker_edit: Callable[[Thinker], None] | None = None, rounds: int | None = None) -> Omni:
    """The walk on the tiny components. `parity`: the weights talker_helpers' transformers twin takes
    (thinker seed 21, talker 22, livelier than the presets; the audio tower in float64); `thinker_edit`
    changes the thinker's weights (both the cluster's and `parity_thinker`'s); `rounds` LocalCluster's."""
    parts: dict[str, Component] = {}

    def factory(spec: ComponentSpec, rank: int) -> Component:
        m: Any
        if spec.name == "thinker":
            m = RecordingThinker(spec, rank, "cpu", preset="tiny", seed=21 if parity else None)
            if parity:
                tr.lively(m.model, 21)
            if thinker_edit is not None:
                thinker_edit(m)
        elif spec.name == "talker" and parity:
            m = talker(spec, rank, "cpu", preset="tiny", seed=22)
            lively(m.model, 22)
            m.model.load_thinker_rows(parity_thinker().model.model.embed_tokens.weight)
        elif spec.name == "talker":
            m = talker.tiny(spec, rank, "cpu")
        elif spec.name == "code2wav":
            m = RecordingCode2Wav.tiny(spec, rank, "cpu")
        elif spec.name == "audio_enc" and parity:
            m = parity_audio(spec, rank)
        else:
            m = load_class(spec.cls).tiny(spec, rank, "cpu")
        parts[spec.name] = m
        return m

    return Omni(LocalCluster(plan(placement), factory, fake_inputs=False, rounds=rounds), parts)


def parity_thinker(edit: Callable[[Thinker], None] | None = None) -> Thinker:
    """The parity thinker by itself (for transformers' twin, and the talker's thinker rows)."""
    m = tr.tiny_thinker(21)
    if edit is not None:
        edit(m)
    return m


def parity_audio(spec: ComponentSpec | None = None, rank: int = 0) -> AudioEncoder:
    spec = spec or ComponentSpec("audio_enc", "wgc.models.qwen3_omni.AudioEncoder", "stateless", [], {}, [],
                                 {"dtype": "bf16"}, [0], 1, {})
    enc = AudioEncoder(spec, rank, "cpu", preset="tiny", seed=3)
    enc.model.double()
    enc.dtype = torch.float64  # as the thinker and transformers' twin compute
    return enc


def run(o: Omni, spec: RequestSpec) -> tuple[int, dict[str, list[Any]], list[str]]:
    """One request to its end: (id, outputs by modality, the walks its end says were cut by `max`)."""
    request = o.cluster.submit(spec)
    o.cluster.pump()
    events = o.cluster.take_events()
    (end,) = [e for e in events if e.request == request and e.kind != "output"]
    assert end.kind == "done", end.error
    outputs: dict[str, list[Any]] = {}
    for e in events:
        if e.kind == "output" and e.output is not None:
            outputs.setdefault(e.output.modality, []).append(e.output.value)
    assert not leftovers(o)
    return request, outputs, end.cut


def frames_of(o: Omni, request: int) -> list[list[int]]:
    return [f.tolist() for f in o["code2wav"].frames.get(request, [])]


def ends_after(k: int, prompt: str) -> Callable[[Thinker], None]:
    """An edit of the parity thinker whose greedy reply to `prompt` is its first k tokens, then <|im_end|>:
    the end token's head row made the k-th token's, a little longer (so it wins where that one did; the
    k-th token must not come earlier, and the callers check the reply's length)."""
    m = parity_thinker()
    m.prefill_text([Call(0, "", (prompt,))])
    tokens = [m.begin_reply([Call(0, "", (0.0, 1.0))])[0]]
    while len(tokens) <= k:
        tokens.append(m.decode([Call(0, "", (tokens[-1], 0.0, 1.0))])[0])
    vmap = VocabMap(m.config)
    eos, kth = vmap.to_model(m.config.tokens.im_end), vmap.to_model(tokens[k])

    def edit(thinker: Thinker) -> None:
        with torch.no_grad():
            head = thinker.model.lm_head.weight
            head[eos] = 1.02 * head[kth]

    return edit


def clip(seconds: float, seed: int = 0) -> Tensor:
    """A tone with noise at 16 kHz [N] float32."""
    n = round(seconds * 16000)
    t = torch.arange(n) / 16000
    return (0.3 * torch.sin(2 * torch.pi * 220 * t) + 0.05 * torch.randn(n, generator=torch.Generator().manual_seed(seed)))


def chat(*parts: Part, speech: bool = True, **params: Any) -> RequestSpec:
    kinds = sorted({p.kind for p in parts})
    return RequestSpec(params=params, parts=list(parts), input_modalities=kinds,
                       output_modalities=["text", "audio"] if speech else ["text"])


def leftovers(o: Omni) -> dict[int, dict[str, int]]:
    """Per rank, every counter that must be zero once no request is in flight and is not: walk
    instances, request states, mail, stream ends (buffers), each component's requests and KV pages."""
    out = {}
    for ex in o.cluster.executors:
        counters = ex.counters()
        keys = ["instances", "requests", "mailbox", "stream_ends"]
        keys += [k for k in counters if k.endswith((".requests", ".kv_pages_used", ".kv_labels"))]
        bad = {k: counters[k] for k in keys if counters.get(k)}
        if bad:
            out[ex.rank] = bad
    return out
