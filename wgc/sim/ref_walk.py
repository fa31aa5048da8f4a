"""The reference interpreter's walk: one generator over the checked AST of one walk instance.

It yields BLOCKED whenever a `recv` has no chunk yet or a `send` meets a full
stream, and returns the walk's result. Nested calls in an expression run
first, left to right, innermost first (the order lowering flattens them in);
the rest of the expression is converted with wgc/lower/exprs.py and evaluated
like a plan expression. Parallel branches run one after another.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from wgc.lang import ast
from wgc.lower.exprs import Resolver, to_expr
from wgc.semantics.mock import Value
from wgc.semantics.mock_exprs import evaluate
from wgc.semantics.stream_buffer import ENDED, WAITING
from wgc.sim.driver import DriverNames
from wgc.sim.errors import RequestError

if TYPE_CHECKING:
    from wgc.sim.reference import ReferenceDriver


class _Blocked:
    def __repr__(self) -> str:
        return "BLOCKED"


BLOCKED = _Blocked()
Gen = Generator[_Blocked, None, Value]


@dataclass
class FrameEnv(DriverNames):
    driver: ReferenceDriver
    frame: dict[str, Value]

    def value(self, name: str) -> Value:
        if name not in self.frame:
            raise RequestError(f"the value `{name}` is not defined")
        return self.frame[name]

    def part_kind(self) -> str:
        raise RequestError("`part.kind` outside an each-block")


def _effects(e: ast.Expr) -> Iterator[ast.Call | ast.Recv]:
    """Calls and receives in an expression, in the order to_expr visits them (not looking inside them)."""
    if isinstance(e, (ast.Call, ast.Recv)):
        yield e
    elif isinstance(e, ast.Unary):
        yield from _effects(e.operand)
    elif isinstance(e, ast.Binary):
        yield from _effects(e.left)
        yield from _effects(e.right)
    elif isinstance(e, ast.Index):
        yield from _effects(e.base)
        yield from _effects(e.index)


class RefWalk:
    def __init__(self, driver: ReferenceDriver, decl: ast.Walk, inputs: dict[str, Value]) -> None:
        self.driver = driver
        self.decl = decl
        self.env = FrameEnv(driver, dict(inputs))
        self.resolve = Resolver(set(driver.facts.symbols.params), set(driver.components), set(driver.walks))
        self.result: Value = None
        self.waiting = ""  # what the walk is blocked on
        self.steps = 0  # statements and stream operations completed: progress for the deadlock check
        self._temps = 0

    @property
    def frame(self) -> dict[str, Value]:
        return self.env.frame

    def run(self) -> Gen:
        yield from self.block(self.decl.body)
        return self.result

    def block(self, stmts: tuple[ast.Stmt, ...]) -> Gen:
        for s in stmts:
            yield from getattr(self, "_" + type(s).__name__.lower())(s)
            self.steps += 1

    # ---- expressions -----------------------------------------------------------------

    def expr(self, e: ast.Expr) -> Gen:
        if isinstance(e, ast.Call):
            return (yield from self.call(e))
        if isinstance(e, ast.Recv):
            return (yield from self.recv(e.stream))
        hoisted: dict[int, str] = {}
        for node in _effects(e):
            self._temps += 1
            name = f"%ref{self._temps}"
            self.frame[name] = yield from self.expr(node)
            hoisted[id(node)] = name
        lowered = to_expr(e, self.resolve, lambda node: self.resolve.name(hoisted[id(node)]))
        return evaluate(lowered, self.env)

    def call(self, e: ast.Call) -> Gen:
        assert isinstance(e.func, ast.Attribute) and isinstance(e.func.base, ast.Name)  # checked
        comp, entry = e.func.base.id, e.func.attr
        params = [a.name for a in self.driver.facts.symbols.entries[(comp, entry)].entry.args]
        given, label = e.bind(params)
        args = []
        for p in params:
            args.append((yield from self.expr(given[p])))
        return self.driver.engine.call(comp, entry, args, label)

    def recv(self, stream: str) -> Gen:
        buf = self.driver.board.buffers[stream]
        while True:
            got = buf.pop()
            if got is WAITING:
                self.waiting = f"recv from stream `{stream}`"
                yield BLOCKED
                continue
            if got is ENDED:
                raise RequestError(f"walk `{self.decl.name}`: recv from stream `{stream}` after it ended")
            self.steps += 1
            return got.value

    # ---- statements ---------------------------------------------------------------------

    def _assign(self, s: ast.Assign) -> Gen:
        self.frame[s.target] = yield from self.expr(s.value)

    def _exprstmt(self, s: ast.ExprStmt) -> Gen:
        yield from self.call(s.call)

    def _send(self, s: ast.Send) -> Gen:
        value = yield from self.expr(s.value)
        buf = self.driver.board.buffers[s.stream]
        while buf.full:
            self.waiting = f"send to full stream `{s.stream}`"
            yield BLOCKED
        buf.push(value)

    def _emit(self, s: ast.Emit) -> Gen:
        value = yield from self.expr(s.value)
        self.driver.outputs.setdefault(s.modality, []).append(value)

    def _fork(self, s: ast.Fork) -> Gen:
        component = self.driver.facts.symbols.labels[s.target][0]
        self.driver.engine.fork(component, s.target, s.source)
        return
        yield

    def _return(self, s: ast.Return) -> Gen:
        self.result = yield from self.expr(s.value)

    def _parallel(self, s: ast.Parallel) -> Gen:
        for branch in s.branches:
            yield from self.block(branch.body)

    def _loop(self, s: ast.Loop) -> Gen:
        bound = (yield from self.expr(s.bound)) if s.bound is not None else 0
        bound = self.driver.loops.bound(int(bound), s.dynamic)
        for c in s.carries:
            if c.init is not None:
                self.frame[c.name] = yield from self.expr(c.init)
        seen: list[list[Value]] = [[] for _ in s.yields]
        for i in range(bound):
            if s.index is not None:
                self.frame[s.index] = i
            yield from self.block(s.body)
            for n, y in enumerate(s.yields):
                seen[n].append(self.frame.get(y.name))
            if s.until is not None:
                stop = yield from self.expr(s.until)
                if stop and not self.driver.loops.ignore_stop:
                    break
        for n, y in enumerate(s.yields):
            if y.kind == "accumulated":
                self.frame[y.exposed] = seen[n]
            elif seen[n]:
                self.frame[y.exposed] = seen[n][-1]
