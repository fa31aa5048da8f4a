"""What every checking pass shares: the program's symbol tables and uses; diagnostics go to a Sink (wgc/diag/sink.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from wgc.check.types import Ty
from wgc.diag.sink import Sink
from wgc.lang import ast
from wgc.lang.span import Span


@dataclass
class EntrySig:
    component: str
    entry: ast.Entry
    args: tuple[Ty, ...]
    returns: Ty


@dataclass
class StreamInfo:
    decl: ast.Stream
    item: Ty
    chunk: Ty
    producers: list[Span] = field(default_factory=list)
    consumer_walks: list[ast.Walk] = field(default_factory=list)
    recvs: list[Span] = field(default_factory=list)


@dataclass
class WalkInfo:
    decl: ast.Walk
    args: tuple[Ty, ...]
    returns: Ty | None


@dataclass
class Symbols:
    imports: dict[str, ast.Import] = field(default_factory=dict)
    params: dict[str, ast.Param] = field(default_factory=dict)
    param_types: dict[str, Ty] = field(default_factory=dict)
    components: dict[str, ast.Component] = field(default_factory=dict)
    entries: dict[tuple[str, str], EntrySig] = field(default_factory=dict)
    consts: dict[tuple[str, str], Ty] = field(default_factory=dict)
    labels: dict[str, tuple[str, Span]] = field(default_factory=dict)  # label → (component, where declared)
    streams: dict[str, StreamInfo] = field(default_factory=dict)
    walks: dict[str, WalkInfo] = field(default_factory=dict)


@dataclass
class Usage:
    components: set[str] = field(default_factory=set)
    params: set[str] = field(default_factory=set)


class Context(Sink):
    """The checker's state: the program, its symbols and their uses, and the diagnostics so far (Sink)."""

    def __init__(self, program: ast.Program) -> None:
        super().__init__()
        self.program = program
        self.symbols = Symbols()
        self.usage = Usage()
