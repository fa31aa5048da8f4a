"""A request for the interpreters: params, task, parts, modalities, named inputs; and their errors."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from wgc.semantics.mock import Value, mock_part
from wgc.sim.errors import RequestError

Outputs = dict[str, list[Value]]  # modality → emitted values in order


@dataclass(frozen=True)
class MockRequest:
    params: Mapping[str, Value] = field(default_factory=dict)  # missing ones take their declared default
    task: str = ""
    parts: tuple[tuple[str, Value], ...] = ()  # (kind, payload); kinds text, image, audio, video
    inputs: frozenset[str] = frozenset()
    outputs: frozenset[str] = frozenset({"text"})
    think: bool = False
    named: Mapping[str, Value] = field(default_factory=dict)  # walk inputs by name, for walks started from `start`

    def field_value(self, name: str) -> Value:
        """`request.NAME` in an expression."""
        fields: dict[str, Value] = {
            "task": self.task,
            "parts": [payload for _, payload in self.parts],
            "inputs": self.inputs,
            "outputs": self.outputs,
            "think": self.think,
        }
        if name not in fields:
            raise RequestError(f"a request has no field `{name}`")
        return fields[name]

    @property
    def part_kinds(self) -> list[str]:
        return [kind for kind, _ in self.parts]


def make_request(parts: Iterable[str | tuple[str, Value]] = (), outputs: Iterable[str] = ("text",),
                 task: str = "", think: bool = False, params: Mapping[str, Value] | None = None,
                 named: Mapping[str, Value] | None = None) -> MockRequest:
    """A request whose parts may be bare kinds (given mock payloads) and whose inputs are its parts' kinds."""
    full = tuple(p if isinstance(p, tuple) else (p, mock_part(p, i)) for i, p in enumerate(parts))
    return MockRequest(dict(params or {}), task, full, frozenset(k for k, _ in full), frozenset(outputs), think,
                       dict(named or {}))


def with_defaults(request: MockRequest, defaults: Mapping[str, Value]) -> dict[str, Value]:
    """The request's params with every declared default filled in."""
    params = dict(defaults)
    params.update(request.params)
    return params
