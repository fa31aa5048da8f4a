"""The types of walk values, for hover: the walk checker run once more, recording what it infers.

The checker keeps a value's type only while it checks that walk's body. Rather than make it
remember types for an editor, this subclass notes them as it goes, keyed by the span of the
node that names the value (an expression `Name`, an assignment, a carry, a yield, an argument,
a loop). Symbolic dims are resolved with the walk's final bindings, so `z` reads
`tensor[4096, 64; bf16]` when a call fixed `N`.
"""

from __future__ import annotations

from wgc.check.context import Context, WalkInfo
from wgc.check.declarations import check_declarations
from wgc.check.streams import bind_consumers
from wgc.check.types import INT, Ty, apply
from wgc.check.walks import WalkChecker
from wgc.lang import ast
from wgc.lang.span import Span


class _Recorder(WalkChecker):
    def __init__(self, ctx: Context, info: WalkInfo, out: dict[Span, Ty]) -> None:
        super().__init__(ctx, info)
        self.out = out
        self.seen: dict[Span, Ty] = {}

    def run(self) -> None:
        for arg, ty in zip(self.walk.args, self.info.args):
            self.seen[arg.span] = ty
        super().run()
        for span, ty in self.seen.items():
            self.out[span] = apply(ty, self.subst)

    def check(self, e: ast.Expr) -> Ty:
        ty = super().check(e)
        if isinstance(e, ast.Name):
            self.seen[e.span] = ty
        return ty

    def _stmt_assign(self, s: ast.Assign) -> None:
        super()._stmt_assign(s)
        found = self.scope.lookup(s.target)
        if found is not None:
            self.seen[s.span] = found[0].ty

    def _carry(self, c: ast.Carry, body) -> None:
        super()._carry(c, body)
        self.seen[c.span] = body.names[c.name].ty

    def _stmt_loop(self, s: ast.Loop) -> None:
        if s.index is not None:
            self.seen[s.span] = INT
        super()._stmt_loop(s)

    def _yields(self, s: ast.Loop, body) -> None:
        super()._yields(s, body)
        for y in s.yields:
            found = self.scope.lookup(y.exposed)
            if found is not None:
                self.seen[y.span] = found[0].ty


def value_types(program: ast.Program) -> dict[Span, Ty]:
    """Node span → type of the value it names, for every walk of `program` (diagnostics discarded)."""
    ctx = Context(program)
    check_declarations(ctx)
    bind_consumers(ctx)
    out: dict[Span, Ty] = {}
    for info in ctx.symbols.walks.values():
        try:
            _Recorder(ctx, info, out).run()
        except RecursionError:
            continue  # check_program reports the nesting; a hover just has no type here
    return out
