"""Pass `build`: checked walks → walk-graph IR, flattening nested calls into temporaries."""

from __future__ import annotations

from wgc.check.context import Symbols
from wgc.lang import ast
from wgc.lang.span import Span
from wgc.lower.exprs import Resolver, to_expr
from wgc.lower.ir import LoopBlock, LoopYield, Node, Op, ParallelBlock, WalkIR
from wgc.plan.model import EConst, ELit, EParam, EVal, Expr, Src

_ATOMS = (EVal, EParam, ELit, EConst)


def src(span: Span) -> Src:
    return Src(span.line, span.column, span.end_line, span.end_column)


class WalkBuilder:
    def __init__(self, symbols: Symbols, walk: ast.Walk, first_loop_id: int) -> None:
        self.symbols = symbols
        self.walk = walk
        self.resolve = Resolver(set(symbols.params), set(symbols.components), set(symbols.walks))
        self.temps = 0
        self.next_loop = first_loop_id
        self.result: str | None = None
        self.branch: str | None = None

    def build(self) -> WalkIR:
        body = self.block(self.walk.body)
        return WalkIR(self.walk.name, [a.name for a in self.walk.args], body, self.result, src(self.walk.span))

    def temp(self) -> str:
        self.temps += 1
        return f"%{self.temps}"

    # ---- expressions ------------------------------------------------------------

    def expr(self, e: ast.Expr, out: list[Node]) -> Expr:
        return to_expr(e, self.resolve, lambda call: self._nested(call, out))

    def atom(self, e: ast.Expr, out: list[Node]) -> Expr:
        """An operand for a call: a value, param, literal or const; anything else goes to a temporary."""
        lowered = self.expr(e, out)
        if isinstance(lowered, _ATOMS):
            return lowered
        name = self.temp()
        out.append(Op("eval", src(e.span), outputs=[name], args=[lowered], branch=self.branch))
        return EVal(name)

    def _nested(self, e: ast.Call | ast.Recv, out: list[Node]) -> Expr:
        name = self.temp()
        self.call(e, name, out)
        return EVal(name)

    def call(self, e: ast.Call | ast.Recv, output: str, out: list[Node]) -> None:
        if isinstance(e, ast.Recv):
            out.append(Op("pop", src(e.span), outputs=[output], stream=e.stream, branch=self.branch))
            return
        assert isinstance(e.func, ast.Attribute) and isinstance(e.func.base, ast.Name)  # checked
        comp, entry = e.func.base.id, e.func.attr
        sig = self.symbols.entries[(comp, entry)]
        params = [a.name for a in sig.entry.args]
        given, label = e.bind(params)
        args = [self.atom(given[p], out) for p in params]
        outputs = [output] if sig.returns.kind != "none" else [""]
        out.append(Op("run", src(e.span), outputs=outputs, args=args, component=comp, entry=entry, label=label,
                      branch=self.branch))

    # ---- statements ---------------------------------------------------------------

    def block(self, stmts: tuple[ast.Stmt, ...]) -> list[Node]:
        out: list[Node] = []
        for s in stmts:
            getattr(self, "_" + type(s).__name__.lower())(s, out)
        return out

    def _assign(self, s: ast.Assign, out: list[Node]) -> None:
        if isinstance(s.value, (ast.Call, ast.Recv)):
            self.call(s.value, s.target, out)
        else:
            out.append(Op("eval", src(s.span), outputs=[s.target], args=[self.expr(s.value, out)], branch=self.branch))

    def _exprstmt(self, s: ast.ExprStmt, out: list[Node]) -> None:
        self.call(s.call, self.temp(), out)

    def _value_name(self, e: ast.Expr, out: list[Node]) -> str:
        value = self.atom(e, out)
        if isinstance(value, EVal):
            return value.name
        name = self.temp()
        out.append(Op("eval", src(e.span), outputs=[name], args=[value], branch=self.branch))
        return name

    def _send(self, s: ast.Send, out: list[Node]) -> None:
        value = self._value_name(s.value, out)
        out.append(Op("push", src(s.span), args=[EVal(value)], stream=s.stream, branch=self.branch))

    def _emit(self, s: ast.Emit, out: list[Node]) -> None:
        value = self._value_name(s.value, out)
        out.append(Op("emit", src(s.span), args=[EVal(value)], modality=s.modality, branch=self.branch))

    def _fork(self, s: ast.Fork, out: list[Node]) -> None:
        comp = self.symbols.labels[s.target][0]
        out.append(Op("fork", src(s.span), component=comp, fork=(s.target, s.source), branch=self.branch))

    def _return(self, s: ast.Return, out: list[Node]) -> None:
        self.result = self._value_name(s.value, out)

    def _parallel(self, s: ast.Parallel, out: list[Node]) -> None:
        branches = []
        outer = self.branch
        for b in s.branches:
            self.branch = b.name
            branches.append((b.name, self.block(b.body)))
        self.branch = outer
        out.append(ParallelBlock(src(s.span), branches))

    def _loop(self, s: ast.Loop, out: list[Node]) -> None:
        loop_id = self.next_loop
        self.next_loop += 1
        bound = self.expr(s.bound, out) if s.bound is not None else ELit(0)
        carries = [(c.name, self.expr(c.init, out) if c.init is not None else None) for c in s.carries]
        body = self.block(s.body)
        stop = None
        if s.until is not None:
            stop = f"%stop{loop_id}"
            body.append(Op("eval", src(s.until.span), outputs=[stop], args=[self.expr(s.until, body)],
                           branch=self.branch))
        yields = [LoopYield(y.kind, y.name, y.exposed) for y in s.yields]
        out.append(LoopBlock(loop_id, src(s.span), bound, s.until is not None, None, s.index, carries, s.nospec,
                             body, yields, stop))


def build_walks(symbols: Symbols) -> list[WalkIR]:
    walks = []
    next_loop = 0
    for info in symbols.walks.values():
        builder = WalkBuilder(symbols, info.decl, next_loop)
        walks.append(builder.build())
        next_loop = builder.next_loop
    return walks
