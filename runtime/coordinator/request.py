"""A request as the API submits it, and the checks it must pass before it is admitted."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wgc.runtime.messages import Part

from wgc.plan.model import ParamSpec

_PY_TYPES = {"int": (int,), "float": (int, float), "bool": (bool,), "str": (str,)}


@dataclass
class RequestSpec:
    params: dict[str, Any] = field(default_factory=dict)
    task: str = ""
    parts: list[Part] = field(default_factory=list)
    inputs: dict[str, Any] = field(default_factory=dict)
    input_modalities: list[str] = field(default_factory=list)
    output_modalities: list[str] = field(default_factory=lambda: ["text"])
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
