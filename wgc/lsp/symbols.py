"""The document outline: params, components (their entries and consts as children), streams, walks, flows.

Given a SpanMap, the program is an older text's (the last that parsed) and every range is mapped
onto the current text: a symbol whose name an edit touched is left out, with its children.
"""

from __future__ import annotations

from collections.abc import Iterable

from lsprotocol import types

from wgc.fmt.lines import HEADER_TEXT, LINE_TEXT
from wgc.lang import ast
from wgc.lang.span import Span
from wgc.lsp.mapping import SpanMap
from wgc.lsp.positions import LineTable
from wgc.lsp.tokens import Tokens

K = types.SymbolKind


class _Outliner:
    def __init__(self, tokens: Tokens, lines: LineTable, spans: SpanMap | None = None) -> None:
        self.tokens = tokens
        self.lines = lines
        self.spans = spans

    def symbol(self, node: ast.Node, name: str, kind: types.SymbolKind, detail: str, skip: int,
               children: list[types.DocumentSymbol] | None = None,
               shown: str | None = None) -> types.DocumentSymbol | None:
        """`skip`: tokens before the name (1 for `walk NAME`); the name is what the editor selects."""
        at = self.tokens.name(node.span, name, skip=skip) if name else None
        span = node.span
        if self.spans is not None:  # an older text's symbol: only if its name (or keyword) is still there
            anchor = at if at is not None else self._first_word(node.span)
            placed = self.spans.name(anchor) if anchor is not None else None
            if placed is None:
                return None
            at = placed if at is not None else None
            span = self.spans.enclosing(span)
        whole = self.lines.to_range(span)
        return types.DocumentSymbol(name=shown or name or "?", kind=kind, range=whole, detail=detail,
                                    selection_range=self.lines.to_range(at) if at is not None else whole,
                                    children=children)

    def _first_word(self, span: Span) -> Span | None:
        first = next(iter(self.tokens.within(span)), None)
        return first.span(span.file) if first is not None and first.kind == "name" else None

    def decl(self, d: ast.Decl) -> types.DocumentSymbol | None:
        if isinstance(d, ast.Param):
            return self.symbol(d, d.name, K.Variable, _after_colon(LINE_TEXT[ast.Param](d)), 1)
        if isinstance(d, ast.Component):
            members = _present(self.member(m) for m in d.members if isinstance(m, ast.Entry | ast.Const))
            return self.symbol(d, d.name, K.Class, f"{'.'.join(d.cls)} engine {d.engine}", 1, members)
        if isinstance(d, ast.Stream):
            return self.symbol(d, d.name, K.Event, f"{d.producer} -> {d.consumer}", 1)
        if isinstance(d, ast.Walk):
            return self.symbol(d, d.name, K.Function, HEADER_TEXT[ast.Walk](d)[len(f"walk {d.name}"):], 1)
        if isinstance(d, ast.Flow):
            eaches = _present(self.symbol(e, e.name, K.Enum, HEADER_TEXT[ast.Each](e), 1)
                              for e in d.items if isinstance(e, ast.Each))
            shown = f"flow {d.name}" if d.name else "flow"
            return self.symbol(d, d.name or "", K.Namespace, HEADER_TEXT[ast.Flow](d), 1, eaches, shown)
        return None

    def member(self, m: ast.Entry | ast.Const) -> types.DocumentSymbol | None:
        if isinstance(m, ast.Entry):
            return self.symbol(m, m.name, K.Method, LINE_TEXT[ast.Entry](m)[len(m.name):], 0)
        return self.symbol(m, m.name, K.Constant, _after_colon(LINE_TEXT[ast.Const](m)), 1)


def _present(symbols: Iterable[types.DocumentSymbol | None]) -> list[types.DocumentSymbol]:
    return [s for s in symbols if s is not None]


def _after_colon(text: str) -> str:
    return text.split(":", 1)[1].strip()


def document_symbols(program: ast.Program, tokens: Tokens, lines: LineTable,
                     spans: SpanMap | None = None) -> list[types.DocumentSymbol]:
    """`tokens` are those of `program`'s text; `lines` the current text's; `spans` maps the first onto the second."""
    outliner = _Outliner(tokens, lines, spans)
    return _present(outliner.decl(d) for d in program.decls)
