"""Walk bodies: scopes, statements, loops and their channels, parallel branches, streams."""

from __future__ import annotations

from dataclasses import dataclass, field

from wgc.check.context import Context, WalkInfo
from wgc.check.exprs import UNKNOWN, ExprChecker
from wgc.check.scope import Binding, Scope
from wgc.check.types import INT, NUMERIC, Ty, apply, kinds_compatible
from wgc.diag.diagnostic import Note
from wgc.diag.sink import did_you_mean
from wgc.lang import ast
from wgc.lang.span import Span

# Output modality → value kinds it can carry.
EMIT_KINDS: dict[str, frozenset[str]] = {
    "text": frozenset({"token", "text"}),
    "audio": frozenset({"audio"}),
    "image": frozenset({"image"}),
    "video": frozenset({"video", "tensor"}),
    "action": frozenset({"action"}),
    "tensor": frozenset({"tensor", "seq", "scalar", "int", "float"}),
}


@dataclass
class Assignment:
    span: Span
    loop: Span | None  # the innermost loop it happens in


@dataclass
class LoopFrame:
    decl: ast.Loop
    accumulated: set[str] = field(default_factory=set)


def _assignments(body: tuple[ast.Stmt, ...], loop: Span | None, out: dict[str, list[Assignment]]) -> None:
    for s in body:
        if isinstance(s, ast.Assign):
            out.setdefault(s.target, []).append(Assignment(s.span, loop))
        elif isinstance(s, ast.Loop):
            for c in s.carries:
                out.setdefault(c.name, []).append(Assignment(c.span, None))
            for y in s.yields:
                out.setdefault(y.exposed, []).append(Assignment(y.span, loop))
            _assignments(s.body, s.span, out)
        elif isinstance(s, ast.Parallel):
            for b in s.branches:
                _assignments(b.body, loop, out)


class WalkChecker(ExprChecker):
    def __init__(self, ctx: Context, info: WalkInfo) -> None:
        super().__init__(ctx)
        self.walk = info.decl
        self.info = info
        self.scope = Scope("walk")
        self.loops: list[LoopFrame] = []
        self.sibling_values: list[dict[str, str]] = []  # per open parallel branch: other branches' names
        self.assigned: dict[str, list[Assignment]] = {}
        _assignments(self.walk.body, None, self.assigned)

    def run(self) -> None:
        for arg, ty in zip(self.walk.args, self.info.args):
            self.scope.names[arg.name] = Binding(ty, arg.span, "input")
        self._block(self.walk.body)
        self._check_result()
        self._warn_unused(self.scope)

    # ---- names ----------------------------------------------------------------

    def name(self, e: ast.Name) -> Ty:
        found = self.scope.lookup(e.id)
        if found is not None:
            found[0].read = True
            return found[0].ty
        as_param = self.param(e)
        if as_param is not None:
            return as_param
        if e.id in self.ctx.symbols.components:
            self.ctx.error("E011", f"`{e.id}` is a component, not a value", e.span, ("call an entry: `" + e.id + ".ENTRY(...)`",))
            return UNKNOWN
        self._unknown_name(e)
        return UNKNOWN

    def _unknown_name(self, e: ast.Name) -> None:
        if any(e.id in frame.accumulated for frame in self.loops):
            self.ctx.error("E015", f"`{e.id}` is an accumulated channel of the loop it is read in; "
                           "it only exists once the loop has finished", e.span,
                           ("read the per-iteration value instead, or move this after the loop",))
            return
        for siblings in self.sibling_values:
            if e.id in siblings:
                self.ctx.error("E038", f"`{e.id}` is computed by parallel branch `{siblings[e.id]}`; "
                               "branches run concurrently and cannot read each other's values", e.span,
                               ("compute it before the parallel block, or combine the branches after it",))
                return
        places = self.assigned.get(e.id, [])
        later = [a for a in places if (a.span.line, a.span.column) > (e.span.line, e.span.column)]
        if later:
            self.ctx.error("E013", f"`{e.id}` is used before it is assigned", e.span,
                           notes=(Note("assigned here", later[0].span),))
        elif any(a.loop is not None for a in places):
            self.ctx.error("E004", f"`{e.id}` only exists inside its loop", e.span,
                           (f"yield it from the loop: `yield terminal {e.id}`",))
        else:
            known = self.scope.visible() | set(self.ctx.symbols.params)
            self.ctx.error("E004", f"unknown name `{e.id}`", e.span, did_you_mean(e.id, known))

    def recv(self, e: ast.Recv) -> Ty:
        if not self.loops:
            return super().recv(e)
        info = self.ctx.symbols.streams.get(e.stream)
        if info is None:
            self.ctx.error("E008", f"unknown stream `{e.stream}`", e.span, did_you_mean(e.stream, self.ctx.symbols.streams))
            return UNKNOWN
        info.recvs.append(e.span)
        return info.chunk

    # ---- statements -----------------------------------------------------------

    def _block(self, body: tuple[ast.Stmt, ...]) -> None:
        for i, stmt in enumerate(body):
            if isinstance(stmt, ast.Return) and i != len(body) - 1 and self.scope.kind == "walk":
                self.ctx.error("E032", "statements after `return` never run", body[i + 1].span)
            getattr(self, "_stmt_" + type(stmt).__name__.lower())(stmt)

    def _stmt_assign(self, s: ast.Assign) -> None:
        ty = self.check(s.value)
        if ty.kind == "none":
            self.ctx.error("E011", f"this call returns nothing, so `{s.target}` would have no value", s.value.span)
        self._define(s.target, apply(ty, self.subst), s.span)

    def _define(self, name: str, ty: Ty, span: Span) -> None:
        found = self.scope.lookup(name)
        if found is not None and found[1] is self.scope and found[0].kind == "carry":
            # The loop-carried value's next version: same type, and the next iteration reads it.
            carried = found[0]
            if carried.ty.kind != ty.kind and carried.ty.kind in NUMERIC and kinds_compatible(ty.kind, carried.ty.kind):
                carried.ty = ty  # `carry tok = 0` updated by a token entry: the carry takes the update's type
                return
            self.expect(carried.ty, _Spanned(span), ty, f"new value of carried `{name}`")
            return
        if found is not None and found[1] is not self.scope:
            binding, owner = found
            crossing = self._crossed(owner, name)
            if crossing == "branch":
                self.ctx.error("E038", f"a parallel branch cannot reassign `{name}`, which is defined outside it", span,
                               notes=(Note("defined here", binding.span),))
                return
            if crossing == "loop":
                self.ctx.error("E025", f"`{name}` is defined before the loop and reassigned inside it", span,
                               (f"declare it loop-carried: `carry {name}`",), (Note("defined here", binding.span),))
                return
            self.expect(binding.ty, _Spanned(span), ty, f"new value of carried `{name}`")
            binding.read = True  # the next iteration reads it
            return
        self.scope.names[name] = Binding(ty, span, "value")

    def _crossed(self, owner: Scope, name: str) -> str | None:
        """The kind of boundary between here and `owner` that forbids reassigning `name`, if any."""
        scope: Scope | None = self.scope
        while scope is not None and scope is not owner:
            if scope.kind == "branch":
                return "branch"
            if scope.kind == "loop" and name not in scope.carried:
                return "loop"
            if scope.kind == "loop":
                return None
            scope = scope.parent
        return None

    def _stmt_exprstmt(self, s: ast.ExprStmt) -> None:
        self.check(s.call)

    def _stmt_send(self, s: ast.Send) -> None:
        ty = self.check(s.value)
        info = self.ctx.symbols.streams.get(s.stream)
        if info is None:
            self.ctx.error("E008", f"unknown stream `{s.stream}`", s.span, did_you_mean(s.stream, self.ctx.symbols.streams))
            return
        info.producers.append(s.span)
        self.expect(info.item, s.value, ty, f"item sent to stream `{s.stream}`")

    def _stmt_emit(self, s: ast.Emit) -> None:
        ty = self.check(s.value)
        kinds = EMIT_KINDS.get(s.modality)
        if kinds is None:
            self.ctx.error("E026", f"unknown output modality `{s.modality}`", s.span,
                           did_you_mean(s.modality, EMIT_KINDS) or ("modalities: " + ", ".join(EMIT_KINDS),))
        elif ty.kind not in kinds and ty.kind != "unknown":
            self.ctx.error("E026", f"`emit {s.modality}` needs " + " or ".join(sorted(kinds)) + f", found {ty}", s.value.span)

    def _stmt_fork(self, s: ast.Fork) -> None:
        labels = self.ctx.symbols.labels
        for name in (s.target, s.source):
            if name not in labels:
                self.ctx.error("E009", f"unknown cache label `{name}`", s.span, did_you_mean(name, labels))
        if s.target in labels and s.source in labels:
            if s.target == s.source:
                self.ctx.error("E033", f"`fork {s.target} from {s.source}` forks a label into itself", s.span)
            elif labels[s.target][0] != labels[s.source][0]:
                self.ctx.error("E033", f"labels `{s.target}` and `{s.source}` belong to different components "
                               f"(`{labels[s.target][0]}`, `{labels[s.source][0]}`)", s.span)
            else:
                self.ctx.usage.components.add(labels[s.target][0])

    def _stmt_return(self, s: ast.Return) -> None:
        ty = self.check(s.value)
        if self.scope.kind != "walk":
            self.ctx.error("E032", "`return` is only allowed at the top level of a walk", s.span)
        elif self.info.returns is None:
            self.ctx.error("E032", f"walk `{self.walk.name}` returns a value but declares no result type", s.span,
                           (f"declare it: `walk {self.walk.name}(...) -> {ty}`",))
        else:
            self.expect(self.info.returns, s.value, ty, f"result of walk `{self.walk.name}`")

    def _check_result(self) -> None:
        if self.info.returns is None:
            return
        if not any(isinstance(s, ast.Return) for s in self.walk.body):
            self.ctx.error("E032", f"walk `{self.walk.name}` declares a result ({self.info.returns}) but does not "
                           "end with `return`", self.walk.span)

    # ---- parallel -------------------------------------------------------------

    def _stmt_parallel(self, s: ast.Parallel) -> None:
        names: dict[str, Span] = {}
        produced: list[dict[str, str]] = []
        for b in s.branches:
            if not b.named and not b.name:
                self.ctx.error("E038", "a parallel branch that is a bare statement must assign a value", b.span,
                               ("name it: `branch NAME { ... }`",))
            elif b.name in names:
                self.ctx.error("E003", f"two branches are named `{b.name}`", b.span,
                               notes=(Note("first branch", names[b.name]),))
            names.setdefault(b.name, b.span)
            produced.append({t: b.name for t in _top_assigned(b.body)})
        merged: dict[str, Binding] = {}
        for i, b in enumerate(s.branches):
            others = {n: owner for j, p in enumerate(produced) if j != i for n, owner in p.items()}
            self.sibling_values.append(others)
            inner = Scope("branch", self.scope)
            self.scope = inner
            self._block(b.body)
            self.scope = inner.parent or self.scope
            self.sibling_values.pop()
            for name, binding in inner.names.items():
                if name in merged:
                    self.ctx.error("E038", f"two parallel branches assign `{name}`", binding.span,
                                   notes=(Note("also assigned here", merged[name].span),))
                merged[name] = binding
        self.scope.names.update(merged)

    # ---- loops ----------------------------------------------------------------

    def _stmt_loop(self, s: ast.Loop) -> None:
        from wgc.check.loops import check_bound

        check_bound(self, s)
        body = Scope("loop", self.scope)
        for c in s.carries:
            self._carry(c, body)
        if s.index is not None:
            body.names[s.index] = Binding(INT, s.span, "index", read=True)
        frame = LoopFrame(s, {y.exposed for y in s.yields if y.kind == "accumulated" and y.alias})
        self.loops.append(frame)
        self.scope = body
        self._block(s.body)
        if s.until is not None:
            self.condition(s.until, "a loop's `until` condition")
        self.scope = body.parent or self.scope
        self.loops.pop()
        self._yields(s, body)
        self._warn_unused(body)

    def _carry(self, c: ast.Carry, body: Scope) -> None:
        if c.init is not None:
            ty = self.check(c.init)
        else:
            found = self.scope.lookup(c.name)
            if found is None:
                self.ctx.error("E014", f"loop-carried `{c.name}` has no value before the loop", c.span,
                               (f"give it one before the loop, or write `carry {c.name} = INITIAL`",))
                ty = UNKNOWN
            else:
                found[0].read = True
                ty = found[0].ty
        body.names[c.name] = Binding(ty, c.span, "carry", read=True)
        body.carried.add(c.name)

    def _yields(self, s: ast.Loop, body: Scope) -> None:
        from wgc.check.loops import check_yields

        check_yields(self, s, body)

    def _warn_unused(self, scope: Scope) -> None:
        for name, b in scope.all_bindings():
            if b.kind == "value" and not b.read and not name.startswith("_"):
                self.ctx.warn("W003", f"`{name}` is assigned but never read", b.span,
                              (f"drop the assignment, or name it `_{name}`",))


@dataclass(frozen=True)
class _Spanned:
    """Something with a span, for reporting on a statement rather than an expression."""

    span: Span


def _top_assigned(body: tuple[ast.Stmt, ...]) -> list[str]:
    return [s.target for s in body if isinstance(s, ast.Assign)]
