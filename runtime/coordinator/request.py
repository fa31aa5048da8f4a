"""A request as the API submits it, and the checks it must pass before it is admitted."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wgc.runtime.protocol.messages import Part

from wgc.plan.model import Emit, ParamSpec, Plan
from wgc.semantics.flows import ANY_KIND, PART_KINDS, FlowTable

_PY_TYPES = {"int": (int,), "float": (int, float), "bool": (bool,), "str": (str,)}


@dataclass
class RequestSpec:
    params: dict[str, Any] = field(default_factory=dict)
    task: str = ""
    parts: list[Part] = field(default_factory=list)
    inputs: dict[str, Any] = field(default_factory=dict)
    input_modalities: list[str] = field(default_factory=list)
    output_modalities: list[str] = field(default_factory=list)  # none: the plan's default (Accepts.outputs)
    think: bool = False


class RequestError(ValueError):
    """A request the plan cannot serve: the message names the field and the problem."""


def resolve_params(specs: list[ParamSpec], given: dict[str, Any]) -> dict[str, Any]:
    """Defaults filled in (for a param absent or given as None), every value type- and bound-checked;
    unknown names rejected."""
    known = {p.name: p for p in specs}
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise RequestError(f"unknown param `{unknown[0]}` (known: {', '.join(sorted(known)) or 'none'})")
    out: dict[str, Any] = {}
    for p in specs:
        value = given.get(p.name)
        if value is None:  # absent or null (JSON's way of saying "not set"): the default, if there is one
            value = p.default
        if value is None:
            null = " (null is not a value)" if p.name in given else ""
            raise RequestError(f"param `{p.name}` is required{null}")
        ok_types = _PY_TYPES.get(p.type, (object,))
        if not isinstance(value, ok_types) or (p.type != "bool" and isinstance(value, bool)):
            raise RequestError(f"param `{p.name}` must be {p.type}, got {type(value).__name__}")
        if p.low is not None and p.high is not None and not p.low <= value <= p.high:
            raise RequestError(f"param `{p.name}` = {value} is outside {p.low}..{p.high}")
        if p.choices is not None and value not in p.choices:
            raise RequestError(f"param `{p.name}` = {value!r} is not one of {p.choices}")
        out[p.name] = float(value) if p.type == "float" else value
    return out


@dataclass(frozen=True)
class Accepts:
    """What a plan can do with a request's outputs, named inputs and parts, read once from the plan.

    `emits`: the modalities of its EMIT instructions. `inputs`: the inputs of every walk a flow can
    start with the request's named inputs (not the first walk of an each-arm, which takes the part,
    nor a one-input walk after one that returns a value, which takes that). `part_kinds`: the kinds
    its each-arms name, every kind of the language for `_`.
    """

    emits: tuple[str, ...]
    inputs: tuple[str, ...]
    part_kinds: tuple[str, ...]

    @staticmethod
    def of(plan: Plan) -> Accepts:
        emits = {i.modality for r in plan.ranks for s in r.schedules for i in s.instructions if isinstance(i, Emit)}
        walks = {w.name: w for w in plan.walks}
        inputs: set[str] = set()
        kinds: set[str] = set()
        for flow in plan.flows:
            table = FlowTable(flow, walks)
            steps = [(node, t.target) for node, ts in flow.transitions.items() for t in ts]
            steps += [(a, b) for e in flow.eaches for arm in e.arms for a, b in zip(arm.walks, arm.walks[1:])]
            inputs |= {n for prev, w in steps if w in walks and table.feed_after(prev, w) == "named"
                       for n in walks[w].inputs}
            arms = {arm.kind for e in flow.eaches for arm in e.arms if arm.walks}
            kinds |= set(PART_KINDS) if ANY_KIND in arms else arms
        return Accepts(tuple(sorted(emits)), tuple(sorted(inputs)), tuple(sorted(kinds)))

    def outputs(self, spec: RequestSpec) -> list[str]:
        """The request's output modalities, checked; none asked for: text if the plan emits it, else all it emits."""
        asked = spec.output_modalities or (["text"] if "text" in self.emits else list(self.emits))
        for modality in asked:
            if modality not in self.emits:
                raise RequestError(f"outputs: unknown modality `{modality}` (this model emits: "
                                   f"{', '.join(self.emits) or 'nothing'})")
        return list(asked)

    def check(self, spec: RequestSpec) -> None:
        """Every named input and part kind is one the plan can take (RequestError naming the field otherwise)."""
        for name in spec.inputs:
            if name not in self.inputs:
                takes = f"takes named inputs: {', '.join(self.inputs)}" if self.inputs else "takes no named inputs"
                raise RequestError(f"inputs: unknown input `{name}` (this model {takes})")
        for i, part in enumerate(spec.parts):
            if part.kind not in self.part_kinds:
                takes = f"takes parts of kind: {', '.join(self.part_kinds)}" if self.part_kinds else "takes no parts"
                raise RequestError(f"parts[{i}]: unknown part kind `{part.kind}` (this model {takes})")
