"""`wgc fmt`: the canonical text of a program, comments and blank lines kept.

Declarations print in source order (never reordered, so comments stay with
their code), one statement, member or flow item per line, 4-space indents.
Between top-level declarations there is exactly one blank line, except inside
a run of one-line declarations of the same group (model and imports, params,
streams), where only a blank line the author wrote is kept. Inside blocks an
author's blank line between items is kept (a run of them becomes one), but
never right after `{` or right before `}`.
"""

from __future__ import annotations

from collections.abc import Callable

from wgc.diag.diagnostic import WgcError
from wgc.fmt.layout import Blank, Layout, SourceMap
from wgc.fmt.lines import HEADER_TEXT, LINE_TEXT, loop_tail
from wgc.lang import ast
from wgc.lang.parser import ParseResult, parse

# Top-level declarations that print on one line and sit together without a blank line.
_GROUP: dict[type, str] = {ast.Model: "header", ast.Import: "header", ast.Param: "param", ast.Stream: "stream"}

# The items inside each kind of block, in source order.
_CHILDREN: dict[type, Callable[..., tuple[ast.Node, ...]]] = {
    ast.Component: lambda n: n.members,
    ast.Walk: lambda n: n.body,
    ast.Flow: lambda n: n.items,
    ast.Each: lambda n: n.arms,
    ast.Loop: lambda n: n.body,
    ast.Parallel: lambda n: n.branches,
    ast.Branch: lambda n: n.body,
}


def format_program(result: ParseResult) -> str:
    """The canonical text of a successfully parsed program (its comments come from `result`)."""
    if result.program is None:
        raise WgcError(list(result.diagnostics))
    source = SourceMap(result.source)
    layout = Layout(source, result.comments)
    _Printer(source, layout).program(result.program)
    return layout.finish()


def format_source(text: str, file: str) -> str:
    """Parse and format `text`; raises WgcError with the parse diagnostics if it does not parse."""
    result = parse(text, file)
    if result.program is None or result.diagnostics:
        raise WgcError(list(result.diagnostics))
    return format_program(result)


class _Printer:
    def __init__(self, source: SourceMap, layout: Layout) -> None:
        self.source = source
        self.layout = layout

    def program(self, program: ast.Program) -> None:
        previous: str | None = None
        for i, decl in enumerate(program.decls):
            group = _GROUP.get(type(decl))
            blank: Blank = "none" if i == 0 else "user" if group is not None and group == previous else "force"
            self.node(decl, 0, blank)
            previous = group

    def node(self, node: ast.Node, indent: int, blank: Blank) -> None:
        if isinstance(node, ast.Branch) and not node.named:
            # A bare statement in `parallel { }` is its own branch; print the statement.
            self.node(node.body[0], indent, blank)
        elif type(node) in HEADER_TEXT:
            self.block(node, indent, blank)
        else:
            text = LINE_TEXT[type(node)](node)
            self.layout.unit(indent, text, self.source.start(node.span), self.source.end(node.span), blank)

    def block(self, node: ast.Node, indent: int, blank: Blank) -> None:
        head = HEADER_TEXT[type(node)](node)
        tail = loop_tail(node) if isinstance(node, ast.Loop) else ""
        children = _CHILDREN[type(node)](node)
        start, end = self.source.start(node.span), self.source.end(node.span)
        open_at, close_at = self.source.braces(start)
        if not children and not self.layout.has_comments_between(open_at, close_at):
            self.layout.unit(indent, f"{head} {{}}{tail}", start, end, blank)
            return
        self.layout.unit(indent, head + " {", start, open_at + 1, blank)
        for i, child in enumerate(children):
            self.node(child, indent + 1, "none" if i == 0 else "user")
        # Comments before the `}` stay inside the block; none gets a blank line after `{`.
        self.layout.comments_before(close_at, indent + 1, "user" if children else "none")
        self.layout.unit(indent, "}" + tail, close_at, end, "none", comment_indent=indent + 1)
