"""How a plan's emitted values read for a person: the text emitter's tokenizer and end tokens, the
audio emitter's sample rate. Shared by the HTTP routes and `wgc run -o DIR` (wgc/cli/run_files.py).

    formats = OutputFormats.of(Capabilities.of(plan), fake)
    formats.tokenizer.decode(ids)   # text tokens -> bytes (the module's tokenizer hook, else one byte a token)
    formats.end_ids                 # tokens that end the text and are never shown
    formats.sample_rate             # the audio emitter's `sample_rate(spec)` hook, its `const sample_rate`, else 24 kHz
    formats.voices                  # the voices a request may name (None: any string)
"""

from __future__ import annotations

from dataclasses import dataclass

from wgc.runtime.http.serving.capabilities import Capabilities
from wgc.runtime.http.serving.hooks import component_hook
from wgc.runtime.http.serving.plan_schemas import VOICE_PARAMS
from wgc.runtime.http.text.tokenizer import Tokenizer, load_tokenizer, stop_ids

from wgc.plan.model import ComponentSpec
from wgc.semantics.mock import MockComponent

DEFAULT_SAMPLE_RATE = 24000


@dataclass(frozen=True)
class OutputFormats:
    tokenizer: Tokenizer
    end_ids: frozenset[int]
    sample_rate: int
    voices: tuple[str, ...] | None = None

    @staticmethod
    def of(caps: Capabilities, fake: bool) -> OutputFormats:
        text = caps.emitters.get("text", ())
        tokenizer = load_tokenizer(text[0] if text else None, fake)
        audio = caps.emitters.get("audio", ())
        return OutputFormats(tokenizer, stop_ids(tokenizer) | eos_consts(text, fake), sample_rate(audio, fake),
                             voices(caps, audio, fake))


def eos_consts(specs: tuple[ComponentSpec, ...], fake: bool) -> frozenset[int]:
    """End tokens a text emitter declares (`const eos`, `*_eos`), as its outputs carry them (mock values when fake)."""
    out = set()
    for spec in specs:
        for name, value in spec.consts.items():
            if name == "eos" or name.endswith("_eos"):
                v = MockComponent.from_spec(spec).const(name) if fake else value
                if isinstance(v, int) and not isinstance(v, bool):
                    out.add(v)
    return frozenset(out)


def sample_rate(specs: tuple[ComponentSpec, ...], fake: bool) -> int:
    """The audio emitter's module hook `sample_rate(spec)`, else its `const sample_rate`, else 24 kHz."""
    for spec in specs:
        hook = component_hook(spec, "sample_rate", fake)
        value = hook(spec) if hook is not None else spec.consts.get("sample_rate")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return DEFAULT_SAMPLE_RATE


def voices(caps: Capabilities, specs: tuple[ComponentSpec, ...], fake: bool) -> tuple[str, ...] | None:
    """The voices a request may name: the plan's `voice` (or `speaker`) param's choices, narrowed to those
    the audio emitter's module hook `voices(spec)` names (a checkpoint's speakers, matched without case);
    the hook's names where the param lists none. None: the plan has no voice param, or takes any string."""
    param = caps.param(*VOICE_PARAMS)
    if param is None:
        return None
    offered = None
    for spec in specs:
        hook = component_hook(spec, "voices", fake)
        if hook is not None:
            offered = tuple(str(v) for v in hook(spec))
            break
    if param.choices is None:
        return offered
    if offered is None:
        return tuple(str(c) for c in param.choices)
    names = {v.lower() for v in offered}
    return tuple(str(c) for c in param.choices if str(c).lower() in names)
