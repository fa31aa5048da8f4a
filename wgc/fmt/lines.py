"""The canonical one-line text of each node that prints on one line, and of block headers.

Optional clauses print in one fixed order (`as`, `carry`, `nospec`;
`at_end`, `after_end`, `capacity`): the AST keeps them as fields, not as a
sequence, and the grammar accepts any order.
"""

from __future__ import annotations

from collections.abc import Callable

from wgc.fmt.expr import format_expr, format_literal, format_type
from wgc.lang import ast


def _opt(prefix: str, text: str | None) -> str:
    return f"{prefix}{text}" if text is not None else ""


def _maybe_expr(e: ast.Expr | None) -> str | None:
    return format_expr(e) if e is not None else None


def _when(cond: ast.Expr | None) -> str:
    return _opt(" when ", _maybe_expr(cond))


def _args(args: tuple[ast.Arg, ...]) -> str:
    return ", ".join(f"{a.name}: {format_type(a.type)}" for a in args)


def _returns(t: ast.TypeRef | None) -> str:
    return _opt(" -> ", format_type(t) if t is not None else None)


# ---- one-line declarations ----------------------------------------------------


def _param(p: ast.Param) -> str:
    text = f"param {p.name}: {p.type}"
    if p.default is not None:
        text += f" = {format_literal(p.default)}"
    if p.bounds is not None:
        text += f" in {format_literal(p.bounds[0])}..{format_literal(p.bounds[1])}"
    if p.choices is not None:
        text += f" in [{', '.join(format_literal(c) for c in p.choices)}]"
    return text


def _policy(p: ast.Policy) -> str:
    args = ", ".join(str(a.value) if a.name is None else f"{a.name}={a.value}" for a in p.args)
    return f"{p.name}({args})"


def _stream(s: ast.Stream) -> str:
    return (
        f"stream {s.name}: {format_type(s.type)} from {s.producer} to {s.consumer} {_policy(s.policy)}"
        + _opt(" at_end ", s.at_end)
        + _opt(" after_end ", s.after_end)
        + _opt(" capacity ", None if s.capacity is None else str(s.capacity))
    )


def _const(c: ast.Const) -> str:
    value = _opt(" = ", format_literal(c.value) if c.value is not None else None)
    return f"const {c.name}: {format_type(c.type)}{value}"


# ---- flows ----------------------------------------------------------------------


def _chain(c: ast.Chain) -> str:
    return " -> ".join(n.name for n in c.nodes) + _when(c.when)


def _arm(a: ast.EachArm) -> str:
    return " -> ".join([a.kind, *(w.name for w in a.walks)]) + _when(a.when)


LINE_TEXT: dict[type, Callable] = {
    ast.Model: lambda m: f"model {m.name}",
    ast.Import: lambda i: f"import {'.'.join(i.module)} as {i.alias}",
    ast.Param: _param,
    ast.Stream: _stream,
    ast.Entry: lambda e: f"{e.name}({_args(e.args)}){_returns(e.returns)}",
    ast.Const: _const,
    ast.Labels: lambda lb: "labels " + ", ".join(lb.names),
    ast.Attr: lambda a: f"{a.name} = {format_literal(a.value)}",
    ast.Assign: lambda s: f"{s.target} = {format_expr(s.value)}",
    ast.Send: lambda s: f"send {format_expr(s.value)} -> {s.stream}",
    ast.Emit: lambda s: f"emit {s.modality} {format_expr(s.value)}",
    ast.Fork: lambda s: f"fork {s.target} from {s.source}",
    ast.Return: lambda s: f"return {format_expr(s.value)}",
    ast.ExprStmt: lambda s: format_expr(s.call),
    ast.Chain: _chain,
    ast.EachArm: _arm,
}


# ---- block headers (everything before the `{`) and loop tails ----------------------


def _loop_header(lp: ast.Loop) -> str:
    if lp.until is not None:
        text = "loop until " + format_expr(lp.until) + _opt(" max ", _maybe_expr(lp.bound))
    else:
        text = "loop " + format_expr(lp.bound) if lp.bound is not None else "loop"
    text += _opt(" as ", lp.index)
    for c in lp.carries:
        text += f" carry {c.name}" + _opt(" = ", _maybe_expr(c.init))
    return text + (" nospec" if lp.nospec else "")


def _flow_header(f: ast.Flow) -> str:
    return "flow" + _opt(" ", f.name) + _when(f.when)


HEADER_TEXT: dict[type, Callable] = {
    ast.Component: lambda c: f"component {c.name}: {'.'.join(c.cls)} engine {c.engine}",
    ast.Walk: lambda w: f"walk {w.name}({_args(w.args)}){_returns(w.returns)}" + _opt(" on ", w.on),
    ast.Flow: _flow_header,
    ast.Each: lambda e: f"each {e.name}: {e.var} in {format_expr(e.source)}",
    ast.Loop: _loop_header,
    ast.Parallel: lambda p: "parallel",
    ast.Branch: lambda b: f"branch {b.name}",
}


def loop_tail(lp: ast.Loop) -> str:
    """` yield terminal x, accumulated h as hs` after a loop's `}` (empty without yields)."""
    if not lp.yields:
        return ""
    items = [f"{y.kind} {y.name}" + _opt(" as ", y.alias) for y in lp.yields]
    return " yield " + ", ".join(items)
