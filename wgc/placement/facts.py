"""What placement needs to know about a parsed program: components and their memory attributes,
which components each walk calls (and inside which `parallel` branches), the streams, and the
bytes of one stream item (from its `.walk` type: the size behind a stream's buffer).

Works on any parsed program, checked or not: a malformed attribute simply reads as absent. The
chunk policies' parameters and first-chunk rule are the checker's (wgc/check/policies.py).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, fields
from typing import TypeVar

from wgc.check.policies import POLICIES, first_chunk_items, policy_values
from wgc.lang import ast
from wgc.lang.span import Span
from wgc.placement.tables import TOKEN_BYTES
from wgc.placement.units import DEFAULT_DTYPE, DTYPE_BYTES

V = TypeVar("V")
# Element bytes of each sizable item type; a tensor's come from its dtype.
ELEMENT_BYTES: dict[str, int] = {"token": TOKEN_BYTES, "scalar": 8, "action": 4}
# Chunk policy → the smallest capacity: items unconsumed when the first chunk forms.
FIRST_CHUNK_ITEMS = {name: functools.partial(first_chunk_items, name) for name in POLICIES}


@dataclass(frozen=True)
class ComponentFacts:
    name: str
    engine: str
    span: Span
    params: int | None  # `weights = 7.2B`
    dtype: str  # `dtype = bf16`, else bf16
    ints: dict[str, int]  # kv_layers, kv_heads, head_dim, max_seq_len, hidden — where declared
    labels: tuple[str, ...]
    attr_spans: dict[str, Span]

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES.get(self.dtype, DTYPE_BYTES[DEFAULT_DTYPE])


@dataclass(frozen=True)
class CallSite:
    component: str
    branches: tuple[str, ...]  # enclosing `parallel` branch names, outermost first


@dataclass(frozen=True)
class WalkFacts:
    name: str
    span: Span
    calls: tuple[CallSite, ...]

    @property
    def components(self) -> frozenset[str]:
        return frozenset(c.component for c in self.calls)

    def in_branch(self, branch: str) -> frozenset[str]:
        return frozenset(c.component for c in self.calls if branch in c.branches)


@dataclass(frozen=True)
class StreamFacts:
    name: str
    producer: str
    consumer: str
    item: ast.TypeRef
    chunk_items: int | None  # items one chunk holds (None: a policy the checker rejects)
    capacity: int | None  # `capacity N` in the program
    span: Span
    min_capacity: int | None = None  # the smallest capacity that lets a chunk form (FIRST_CHUNK_ITEMS)


@dataclass(frozen=True)
class ProgramFacts:
    model: str | None
    components: dict[str, ComponentFacts]
    walks: dict[str, WalkFacts]
    streams: dict[str, StreamFacts]
    branches_declared: dict[str, tuple[str, ...]]  # walk → every branch name in it, even empty ones


def program_facts(program: ast.Program) -> ProgramFacts:
    """The facts of `program`; of two declarations with one name, the first wins."""
    components = _first({c.name: _component(c) for c in reversed(program.of(ast.Component))})
    labels = {lab: name for name, c in components.items() for lab in c.labels}
    walks: dict[str, WalkFacts] = {}
    branches: dict[str, tuple[str, ...]] = {}
    for w in program.of(ast.Walk):
        if w.name not in walks:
            nodes = _nodes(w.body, (), [])
            calls = (_call(n, inside, set(components), labels) for n, inside in nodes)
            walks[w.name] = WalkFacts(w.name, w.span, tuple(c for c in calls if c is not None))
            branches[w.name] = tuple(dict.fromkeys(n.name for n, _ in nodes if isinstance(n, ast.Branch)))
    streams = _first({s.name: stream_facts(s) for s in reversed(program.of(ast.Stream))})
    models = program.of(ast.Model)
    return ProgramFacts(models[0].name if models else None, components, walks, streams, branches)


def _first(by_name: dict[str, V]) -> dict[str, V]:
    """A dict built from the declarations in reverse (so the first wins), back in program order."""
    return dict(reversed(by_name.items()))


def _component(c: ast.Component) -> ComponentFacts:
    ints: dict[str, int] = {}
    params, dtype, spans = None, DEFAULT_DTYPE, {}
    for a in c.attrs():
        spans[a.name] = a.span
        v = a.value
        if a.name == "weights" and isinstance(v, (ast.SizeLit, ast.IntLit)):
            params = v.value
        elif a.name == "dtype" and isinstance(v, (ast.Name, ast.StrLit)):
            dtype = v.id if isinstance(v, ast.Name) else v.value
        elif isinstance(v, ast.IntLit):
            ints[a.name] = v.value
    return ComponentFacts(c.name, c.engine, c.span, params, dtype, ints, c.labels(), spans)


def _nodes(value: object, inside: tuple[str, ...], out: list[tuple[ast.Node, tuple[str, ...]]]) -> list:
    """Every syntax node in `value` (a node or a tuple of them), parents first, with the names of
    the `parallel` branches it is inside, outermost first; appended to `out`."""
    if isinstance(value, tuple):
        for v in value:
            _nodes(v, inside, out)
    elif isinstance(value, ast.Node):
        inside = (*inside, value.name) if isinstance(value, ast.Branch) else inside
        out.append((value, inside))
        for name in _fields(type(value)):
            _nodes(getattr(value, name), inside, out)
    return out


@functools.cache
def _fields(node: type) -> tuple[str, ...]:
    """A node class's fields but its span (asked once per class: `dataclasses.fields` is slow)."""
    return tuple(f.name for f in fields(node) if f.name != "span")


def _call(node: ast.Node, inside: tuple[str, ...], comps: set[str], labels: dict[str, str]) -> CallSite | None:
    """A call of a component (`llm.decode(...)`), or a `fork` of labels a component owns."""
    if isinstance(node, ast.Fork):
        owner = labels.get(node.source) or labels.get(node.target)
        return CallSite(owner, inside) if owner else None
    f = node.func if isinstance(node, ast.Call) else None
    if isinstance(f, ast.Attribute) and isinstance(f.base, ast.Name) and f.base.id in comps:
        return CallSite(f.base.id, inside)
    return None


def stream_facts(s: ast.Stream) -> StreamFacts:
    """A stream's sizes; its chunk sizes only when the policy names each parameter once."""
    values, rule = policy_values(s.policy), POLICIES.get(s.policy.name)
    chunk = least = None
    if values is not None and rule is not None and len(s.policy.args) == len(rule.params) \
            and set(values) == set(rule.params):
        least = first_chunk_items(s.policy.name, values)
        chunk = least + values.get("left", 0)  # a left_context chunk also holds the context it re-reads
    return StreamFacts(s.name, s.producer, s.consumer, s.type, chunk, s.capacity, s.span, least)


def symbolic_dims(t: ast.TypeRef) -> tuple[str, ...]:
    """Dims a placement can size in `dims`: named ones (`D`) and the wildcard `_` (all of them)."""
    return tuple(dict.fromkeys(a.name for a in t.args if isinstance(a, ast.TypeRef) and not a.args))


def item_bytes(stream: StreamFacts, dims: dict[str, int], producer: ComponentFacts | None) -> tuple[int | None, str]:
    """(bytes, how) — or (None, why not) for a type whose size the placement must give."""
    t = stream.item
    element = DTYPE_BYTES.get(t.dtype or "") if t.name == "tensor" else ELEMENT_BYTES.get(t.name)
    if element is None:
        return None, f"items of type `{t.name}` have no fixed size"
    sizes: list[int] = []
    hidden = producer.ints.get("hidden") if producer else None
    for i, arg in enumerate(t.args):
        if isinstance(arg, ast.DimInt):
            sizes.append(arg.value)
        elif isinstance(arg, ast.TypeRef) and arg.name in dims:
            sizes.append(dims[arg.name])
        elif isinstance(arg, ast.TypeRef) and t.name == "tensor" and i == len(t.args) - 1 and hidden:
            sizes.append(hidden)  # a hidden-state stream: the feature dim is the producer's `hidden`
        else:
            name = arg.name if isinstance(arg, ast.TypeRef) else "?"
            return None, f"dim `{name}` of the item type has no size"
    shape = " × ".join(map(str, sizes))
    return math.prod(sizes) * element, f"{shape} × {element} B" if sizes else f"{element} B"
