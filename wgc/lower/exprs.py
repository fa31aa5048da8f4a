"""Checked AST expressions → plan expressions (no spans, names resolved to what they denote)."""

from __future__ import annotations

from collections.abc import Callable

from wgc.lang import ast
from wgc.plan.model import EBinary, EConst, EIndex, ELit, EParam, EPartKind, EReq, EResult, EUnary, EVal, Expr


class Resolver:
    """What a bare name or `a.b` means where the expression sits; lowering and the reference interpreter share it."""

    def __init__(self, params: set[str], components: set[str], walks: set[str], part: str | None = None) -> None:
        self.params = params
        self.components = components
        self.walks = walks
        self.part = part

    def name(self, name: str) -> Expr:
        if name in self.params:
            return EParam(name)
        return EVal(name)

    def attribute(self, e: ast.Attribute) -> Expr:
        base = e.base
        if isinstance(base, ast.Name):
            if base.id == "request":
                return EReq(e.attr)
            if base.id == self.part and e.attr == "kind":
                return EPartKind()
            if base.id in self.components:
                return EConst(base.id, e.attr)
            if base.id in self.walks and e.attr == "result":
                return EResult(base.id)
        raise ValueError(f"attribute `{e.attr}` cannot be lowered here")  # the checker rejected it


def to_expr(e: ast.Expr, resolve: Resolver, call: Callable[[ast.Call], Expr] | None = None) -> Expr:
    """Convert one expression. `call` lowers a nested call (to a temporary value) where calls are allowed."""
    if isinstance(e, ast.Name):
        return resolve.name(e.id)
    if isinstance(e, (ast.IntLit, ast.SizeLit, ast.FloatLit, ast.StrLit, ast.BoolLit)):
        return ELit(e.value)
    if isinstance(e, ast.Attribute):
        return resolve.attribute(e)
    if isinstance(e, ast.Unary):
        return EUnary(e.op, to_expr(e.operand, resolve, call))
    if isinstance(e, ast.Binary):
        return EBinary(e.op, to_expr(e.left, resolve, call), to_expr(e.right, resolve, call))
    if isinstance(e, ast.Index):
        return EIndex(to_expr(e.base, resolve, call), to_expr(e.index, resolve, call))
    if isinstance(e, (ast.Call, ast.Recv)) and call is not None:
        return call(e)
    raise ValueError(f"{type(e).__name__} cannot appear here")  # the checker rejected it
