"""Expressions, literals and types as canonical text.

Parentheses are not kept in the AST, so they are recomputed: an operand is
wrapped only when its precedence is lower than its position in the grammar
allows, which gives the fewest parentheses that still parse back to the same
tree (associativity included: `a - (b - c)` keeps them, `(a - b) - c` loses them).
"""

from __future__ import annotations

from collections.abc import Callable

from wgc.lang import ast

# Binding strength, loosest first, mirroring the expression rules of walk.lark.
_OR, _AND, _NOT, _COMPARE, _SUM, _PRODUCT, _NEGATE, _POSTFIX, _ATOM = range(1, 10)

_BINARY_LEVEL: dict[str, int] = {
    "or": _OR,
    "and": _AND,
    **dict.fromkeys(("==", "!=", "<", "<=", ">", ">=", "in"), _COMPARE),
    "+": _SUM,
    "-": _SUM,
    **dict.fromkeys(("*", "/", "%"), _PRODUCT),
}
_UNARY_LEVEL: dict[str, int] = {"not": _NOT, "-": _NEGATE}
# `not` is followed by a space; a minus sticks to its operand (`-x`, `a - -b`).
_UNARY_SPELLING: dict[str, str] = {"not": "not ", "-": "-"}

_ESCAPES: dict[str, str] = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t"}


def level(e: ast.Expr) -> int:
    """How tightly `e` binds when printed without parentheses."""
    if isinstance(e, ast.Binary):
        return _BINARY_LEVEL[e.op]
    if isinstance(e, ast.Unary):
        return _UNARY_LEVEL[e.op]
    if isinstance(e, (ast.Attribute, ast.Index, ast.Call)):
        return _POSTFIX
    return _ATOM


def format_expr(e: ast.Expr, at_least: int = _OR) -> str:
    """`e` as text, parenthesised if it binds looser than its position requires."""
    text = _EXPR_TEXT[type(e)](e)
    return f"({text})" if level(e) < at_least else text


def _binary(e: ast.Binary) -> str:
    op_level = _BINARY_LEVEL[e.op]
    # Comparisons do not chain (`sum COMPARE sum`), so both sides must bind tighter;
    # every other binary rule is left-recursive: only the right side must.
    left_min = op_level + 1 if op_level == _COMPARE else op_level
    return f"{format_expr(e.left, left_min)} {e.op} {format_expr(e.right, op_level + 1)}"


def _unary(e: ast.Unary) -> str:
    return _UNARY_SPELLING[e.op] + format_expr(e.operand, _UNARY_LEVEL[e.op])


def _call(e: ast.Call) -> str:
    # The AST keeps positional and keyword arguments apart, so keywords come last.
    args = [format_expr(a) for a in e.args] + [f"{k.name}={format_expr(k.value)}" for k in e.kwargs]
    return f"{format_expr(e.func, _POSTFIX)}({', '.join(args)})"


def quote(value: str) -> str:
    return '"' + "".join(_ESCAPES.get(ch, ch) for ch in value) + '"'


def format_literal(lit: ast.Literal | ast.Name) -> str:
    """A literal (possibly negative, in declarations) or a bare name (`dtype = bf16`)."""
    return _EXPR_TEXT[type(lit)](lit)


_EXPR_TEXT: dict[type, Callable] = {
    ast.Name: lambda e: e.id,
    ast.IntLit: lambda e: str(e.value),
    ast.FloatLit: lambda e: e.text,
    ast.SizeLit: lambda e: e.text,
    ast.StrLit: lambda e: quote(e.value),
    ast.BoolLit: lambda e: "true" if e.value else "false",
    ast.Recv: lambda e: f"recv {e.stream}",
    ast.Attribute: lambda e: f"{format_expr(e.base, _POSTFIX)}.{e.attr}",
    ast.Index: lambda e: f"{format_expr(e.base, _POSTFIX)}[{format_expr(e.index)}]",
    ast.Call: _call,
    ast.Unary: _unary,
    ast.Binary: _binary,
}


def format_type(t: ast.TypeRef) -> str:
    """`token`, `token[_, 16]`, `tensor[N, 64; bf16]`, `seq[token[16]]`."""
    if not (t.bracketed or t.args or t.dtype):
        return t.name
    args = ", ".join(str(a.value) if isinstance(a, ast.DimInt) else format_type(a) for a in t.args)
    dtype = f"; {t.dtype}" if t.dtype is not None else ""
    return f"{t.name}[{args}{dtype}]"
