"""What every checking pass shares: the program's symbol tables and the diagnostic sink."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field

from wgc.check.types import Ty
from wgc.diag.diagnostic import Diagnostic, Note
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


class Context:
    def __init__(self, program: ast.Program) -> None:
        self.program = program
        self.symbols = Symbols()
        self.usage = Usage()
        self.diagnostics: list[Diagnostic] = []

    def error(
        self,
        code: str,
        message: str,
        span: Span,
        help: Iterable[str] = (),
        notes: Iterable[Note] = (),
    ) -> None:
        self.diagnostics.append(Diagnostic(code, message, span, tuple(help), tuple(notes)))

    warn = error  # warnings are told apart by their W code


def did_you_mean(name: str, candidates: Iterable[str]) -> tuple[str, ...]:
    close = difflib.get_close_matches(name, sorted(set(candidates)), n=1, cutoff=0.6)
    return (f"did you mean `{close[0]}`?",) if close else ()
