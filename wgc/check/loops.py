"""Loop rules: bounds known when the loop starts, and the terminal/accumulated channels it yields."""

from __future__ import annotations

from typing import TYPE_CHECKING

from wgc.check.scope import Binding, Scope
from wgc.check.types import Ty
from wgc.diag.diagnostic import Note
from wgc.lang import ast

if TYPE_CHECKING:
    from wgc.check.walks import WalkChecker


def check_bound(w: WalkChecker, s: ast.Loop) -> None:
    if s.bound is None:
        w.ctx.error("E017", "a `loop until` needs a bound: no hidden global cap", s.span,
                    ("add `max N` (a number, or an int param with a declared range)",))
        return
    before = len(w.ctx.diagnostics)
    _static_bound(w, s.bound)
    ty = w.check(s.bound)
    if ty.kind not in ("int", "unknown") and len(w.ctx.diagnostics) == before:
        w.ctx.error("E018", f"a loop bound must be an integer, found {ty}", s.bound.span)


def _static_bound(w: WalkChecker, e: ast.Expr) -> None:
    """A bound may use literals and bounded int params only: it must be known when the loop starts."""
    if isinstance(e, ast.Name):
        param = w.ctx.symbols.params.get(e.id)
        if param is None:
            if w.scope.lookup(e.id) is not None:
                w.ctx.error("E018", f"loop bound `{e.id}` is a value of the walk, but a bound must be known "
                            "when the loop starts", e.span, ("use a number or a request param",))
            return
        if param.type == "int" and param.bounds is None:
            w.ctx.error("E018", f"param `{e.id}` bounds a loop but has no upper bound", e.span,
                        (f"declare its range: `param {e.id}: int = ... in 1..N`",), (Note("declared here", param.span),))
    elif isinstance(e, ast.Binary):
        _static_bound(w, e.left)
        _static_bound(w, e.right)
    elif isinstance(e, ast.Unary):
        _static_bound(w, e.operand)
    elif not isinstance(e, (ast.IntLit, ast.SizeLit)):
        w.ctx.error("E018", "a loop bound may only use numbers and params", e.span)


def check_yields(w: WalkChecker, s: ast.Loop, body: Scope) -> None:
    exposed: dict[str, ast.YieldItem] = {}
    for y in s.yields:
        if y.exposed in exposed:
            first = exposed[y.exposed]
            w.ctx.error("E016", f"`{y.exposed}` is yielded as both {first.kind} and {y.kind}"
                        if first.kind != y.kind else f"`{y.exposed}` is yielded twice", y.span,
                        ("terminal and accumulated channels need distinct names: `accumulated h as hs`",),
                        (Note("first yielded here", first.span),))
            continue
        exposed[y.exposed] = y
        inner = body.names.get(y.name)
        if inner is None:
            w.ctx.error("E004", f"`{y.name}` is not assigned in the loop, so it cannot be yielded", y.span)
            continue
        inner.read = True
        ty = inner.ty if y.kind == "terminal" else Ty("seq", elem=inner.ty)
        _expose(w, y, ty)


def _expose(w: WalkChecker, y: ast.YieldItem, ty: Ty) -> None:
    outer = w.scope.lookup(y.exposed)
    if outer is not None and y.kind == "accumulated":
        w.ctx.error("E016", f"accumulated channel `{y.exposed}` hides a value of the same name", y.span,
                    notes=(Note("defined here", outer[0].span),))
        return
    w.scope.names[y.exposed] = Binding(ty, y.span, "value")
