"""The .walk abstract syntax tree: frozen dataclasses, a source span on every node.

Spans never take part in equality (`compare=False`), so two programs that differ
only in layout compare equal: `parse(fmt(p)) == parse(p)` is a plain `==`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from wgc.lang.span import Span


@dataclass(frozen=True)
class Node:
    span: Span = field(compare=False, repr=False)

    # One repr, one == and one hash for every node (the subclasses are declared with repr=False,
    # eq=False): dataclasses compiles each generated method apart, and generating these three per
    # class was half of this module's import time, which every `wgc check` pays. They mean what
    # the generated ones mean: the fields in order, spans left out, and a node of another class is
    # never equal.
    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)
        return f"{type(self).__name__}({shown})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return _compared(self) == _compared(other)

    def __hash__(self) -> int:
        return hash(_compared(self))


_COMPARED: dict[type, tuple[str, ...]] = {}


def _compared(node: Node) -> tuple[object, ...]:
    """The values of `node`'s compared fields, as the tuple a generated __eq__/__hash__ builds."""
    names = _COMPARED.get(type(node))
    if names is None:
        names = _COMPARED[type(node)] = tuple(f.name for f in fields(node) if f.compare)
    return tuple([getattr(node, name) for name in names])


# ---- types ------------------------------------------------------------------


@dataclass(frozen=True, repr=False, eq=False)
class DimInt(Node):
    value: int


@dataclass(frozen=True, repr=False, eq=False)
class TypeRef(Node):
    """`token`, `tokens`, `tensor[N, 64; bf16]`, `seq[token[16]]`: a name with arguments.

    Arguments are dims (`DimInt`, or a bare `TypeRef` read as a symbolic dim
    `N` / wildcard `_`) or, for `seq`, one type. The checker interprets them.
    """

    name: str
    args: tuple[DimInt | TypeRef, ...] = ()
    dtype: str | None = None
    bracketed: bool = False


# ---- expressions ------------------------------------------------------------


@dataclass(frozen=True, repr=False, eq=False)
class Name(Node):
    id: str


@dataclass(frozen=True, repr=False, eq=False)
class IntLit(Node):
    value: int


@dataclass(frozen=True, repr=False, eq=False)
class FloatLit(Node):
    value: float
    text: str


@dataclass(frozen=True, repr=False, eq=False)
class SizeLit(Node):
    """A parameter count such as `7.2B` (suffixes K, M, B, T)."""

    value: int
    text: str


@dataclass(frozen=True, repr=False, eq=False)
class StrLit(Node):
    value: str


@dataclass(frozen=True, repr=False, eq=False)
class BoolLit(Node):
    value: bool


@dataclass(frozen=True, repr=False, eq=False)
class Attribute(Node):
    base: Expr
    attr: str


@dataclass(frozen=True, repr=False, eq=False)
class Index(Node):
    base: Expr
    index: Expr


@dataclass(frozen=True, repr=False, eq=False)
class KeywordArg(Node):
    name: str
    value: Expr


@dataclass(frozen=True, repr=False, eq=False)
class Call(Node):
    func: Expr
    args: tuple[Expr, ...]
    kwargs: tuple[KeywordArg, ...]

    def bind(self, params: list[str]) -> tuple[dict[str, Expr], str]:
        """The arguments by parameter name (positional, then keyword) and the `cache=` label ("" for
        the default one). For a checked call: the checker rejects unknown, missing or repeated ones."""
        given: dict[str, Expr] = dict(zip(params, self.args))
        label = ""
        for k in self.kwargs:
            if k.name == "cache" and isinstance(k.value, Name):
                label = k.value.id
            else:
                given[k.name] = k.value
        return given, label


@dataclass(frozen=True, repr=False, eq=False)
class Recv(Node):
    stream: str


@dataclass(frozen=True, repr=False, eq=False)
class Unary(Node):
    op: str  # "-" or "not"
    operand: Expr


@dataclass(frozen=True, repr=False, eq=False)
class Binary(Node):
    op: str  # + - * / % == != < <= > >= in and or
    left: Expr
    right: Expr


Literal = IntLit | FloatLit | SizeLit | StrLit | BoolLit
Expr = Name | IntLit | FloatLit | SizeLit | StrLit | BoolLit | Attribute | Index | Call | Recv | Unary | Binary


# ---- statements -------------------------------------------------------------


@dataclass(frozen=True, repr=False, eq=False)
class Assign(Node):
    target: str
    value: Expr


@dataclass(frozen=True, repr=False, eq=False)
class Send(Node):
    value: Expr
    stream: str


@dataclass(frozen=True, repr=False, eq=False)
class Emit(Node):
    modality: str
    value: Expr


@dataclass(frozen=True, repr=False, eq=False)
class Fork(Node):
    target: str
    source: str


@dataclass(frozen=True, repr=False, eq=False)
class Return(Node):
    value: Expr


@dataclass(frozen=True, repr=False, eq=False)
class ExprStmt(Node):
    call: Call


@dataclass(frozen=True, repr=False, eq=False)
class Carry(Node):
    name: str
    init: Expr | None


@dataclass(frozen=True, repr=False, eq=False)
class YieldItem(Node):
    kind: str  # "terminal" or "accumulated"
    name: str
    alias: str | None = None

    @property
    def exposed(self) -> str:
        """The name the value has after the loop."""
        return self.alias or self.name


@dataclass(frozen=True, repr=False, eq=False)
class Loop(Node):
    """`loop N {}` (until is None) or `loop until C max N {}` (a DynamicLoop).

    `bound` is None only for a DynamicLoop written without `max`, which the
    checker rejects with its own error.
    """

    bound: Expr | None
    until: Expr | None
    index: str | None
    carries: tuple[Carry, ...]
    nospec: bool
    body: tuple[Stmt, ...]
    yields: tuple[YieldItem, ...]

    @property
    def dynamic(self) -> bool:
        return self.until is not None


@dataclass(frozen=True, repr=False, eq=False)
class Branch(Node):
    """One branch of a `parallel` block; `named` is False for a bare statement
    whose branch takes the name of the value it assigns."""

    name: str
    body: tuple[Stmt, ...]
    named: bool


@dataclass(frozen=True, repr=False, eq=False)
class Parallel(Node):
    branches: tuple[Branch, ...]


Stmt = Assign | Send | Emit | Fork | Return | ExprStmt | Loop | Parallel


# ---- declarations -----------------------------------------------------------


@dataclass(frozen=True, repr=False, eq=False)
class Arg(Node):
    name: str
    type: TypeRef


@dataclass(frozen=True, repr=False, eq=False)
class Entry(Node):
    name: str
    args: tuple[Arg, ...]
    returns: TypeRef | None


@dataclass(frozen=True, repr=False, eq=False)
class Const(Node):
    name: str
    type: TypeRef
    value: Literal | None


@dataclass(frozen=True, repr=False, eq=False)
class Labels(Node):
    names: tuple[str, ...]


@dataclass(frozen=True, repr=False, eq=False)
class Attr(Node):
    """A component attribute (`weights = 7.2B`, `dtype = bf16`): data for placement."""

    name: str
    value: Literal | Name


@dataclass(frozen=True, repr=False, eq=False)
class Component(Node):
    name: str
    cls: tuple[str, ...]
    engine: str
    members: tuple[Entry | Const | Labels | Attr, ...]

    def entries(self) -> tuple[Entry, ...]:
        return tuple(m for m in self.members if isinstance(m, Entry))

    def consts(self) -> tuple[Const, ...]:
        return tuple(m for m in self.members if isinstance(m, Const))

    def labels(self) -> tuple[str, ...]:
        return tuple(n for m in self.members if isinstance(m, Labels) for n in m.names)

    def attrs(self) -> tuple[Attr, ...]:
        return tuple(m for m in self.members if isinstance(m, Attr))


@dataclass(frozen=True, repr=False, eq=False)
class Model(Node):
    name: str


@dataclass(frozen=True, repr=False, eq=False)
class Import(Node):
    module: tuple[str, ...]
    alias: str


@dataclass(frozen=True, repr=False, eq=False)
class Param(Node):
    name: str
    type: str
    default: Literal | None
    bounds: tuple[Literal, Literal] | None = None
    choices: tuple[Literal, ...] | None = None


@dataclass(frozen=True, repr=False, eq=False)
class PolicyArg(Node):
    name: str | None
    value: int


@dataclass(frozen=True, repr=False, eq=False)
class Policy(Node):
    name: str
    args: tuple[PolicyArg, ...]


@dataclass(frozen=True, repr=False, eq=False)
class Stream(Node):
    name: str
    type: TypeRef
    producer: str
    consumer: str
    policy: Policy
    at_end: str | None
    after_end: str | None
    capacity: int | None
    # Spans of the optional clauses, for diagnostics pointing at them.
    at_end_span: Span | None = field(default=None, compare=False, repr=False)
    after_end_span: Span | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, repr=False, eq=False)
class Walk(Node):
    name: str
    args: tuple[Arg, ...]
    returns: TypeRef | None
    on: str | None
    body: tuple[Stmt, ...]
    on_span: Span | None = field(default=None, compare=False, repr=False)


# ---- flows ------------------------------------------------------------------


@dataclass(frozen=True, repr=False, eq=False)
class FlowNode(Node):
    """`start`, `done`, or a walk / each-block name."""

    name: str


@dataclass(frozen=True, repr=False, eq=False)
class Chain(Node):
    """`a -> b -> c when COND`: the condition guards leaving `a` along this chain."""

    nodes: tuple[FlowNode, ...]
    when: Expr | None


@dataclass(frozen=True, repr=False, eq=False)
class EachArm(Node):
    """`KIND -> w1 -> w2 when COND` inside an each-block (`_` matches any kind)."""

    kind: str
    walks: tuple[FlowNode, ...]
    when: Expr | None


@dataclass(frozen=True, repr=False, eq=False)
class Each(Node):
    """`each NAME: VAR in EXPR { arms }`: runs, for every part in order, the first arm that matches."""

    name: str
    var: str
    source: Expr
    arms: tuple[EachArm, ...]


@dataclass(frozen=True, repr=False, eq=False)
class Flow(Node):
    name: str | None
    when: Expr | None
    items: tuple[Chain | Each, ...]


Decl = Model | Import | Param | Component | Stream | Walk | Flow


@dataclass(frozen=True, repr=False, eq=False)
class Program(Node):
    decls: tuple[Decl, ...]

    def of(self, kind: type) -> tuple:
        return tuple(d for d in self.decls if isinstance(d, kind))
