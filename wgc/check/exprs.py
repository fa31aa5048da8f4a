"""Expression typing, shared by walk bodies and flow conditions.

Subclasses say what a bare name means where they are (walk values, or the
request and walk results in a flow); everything else is common.
"""

from __future__ import annotations

from wgc.check.context import Context
from wgc.check.types import (
    BOOL,
    DIMMED,
    FLOAT,
    INT,
    NONE,
    NUMERIC,
    STR,
    Subst,
    Ty,
    apply,
    is_dim_mismatch,
    rename,
    unify,
)
from wgc.diag.sink import did_you_mean
from wgc.lang import ast

REQUEST_FIELDS: dict[str, Ty] = {
    "task": STR,
    "parts": Ty("parts"),
    "inputs": Ty("modalities"),
    "outputs": Ty("modalities"),
    "think": BOOL,
}
UNKNOWN = Ty("unknown")
_COMPARE = {"==", "!=", "<", "<=", ">", ">="}
_ARITH = {"+", "-", "*", "/", "%"}


class ExprChecker:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.subst = Subst()
        self._calls = 0

    # ---- hooks ----------------------------------------------------------------

    def name(self, e: ast.Name) -> Ty:
        raise NotImplementedError

    def attribute_of_name(self, e: ast.Attribute, base: ast.Name) -> Ty | None:
        """A `base.attr` this context understands, or None to fall back to the common rules."""
        return None

    def recv(self, e: ast.Recv) -> Ty:
        self.ctx.error("E041", "`recv` is only allowed inside a walk's loop", e.span,
                       ("a stream is read one chunk per loop iteration: `loop N { x = recv s ... }`",))
        info = self.ctx.symbols.streams.get(e.stream)
        if info is not None:
            info.recvs.append(e.span)  # it is still this stream's reader: no second error for "nothing reads"
        return UNKNOWN

    # ---- common rules ---------------------------------------------------------

    def check(self, e: ast.Expr) -> Ty:
        method = getattr(self, "_" + type(e).__name__.lower())
        return method(e)

    def condition(self, e: ast.Expr, what: str) -> None:
        ty = self.check(e)
        if ty.kind not in ("bool", "unknown"):
            self.ctx.error("E037", f"{what} must be true or false, but this is {ty}", e.span,
                           ("compare it, e.g. `x == llm.eos`",))

    def expect(self, expected: Ty, e: ast.Expr, actual: Ty, where: str) -> None:
        problem = unify(expected, actual, self.subst, where)
        if problem is not None:
            code = "E012" if is_dim_mismatch(problem) else "E011"
            self.ctx.error(code, f"{where}: {problem}", e.span)

    def param(self, e: ast.Name) -> Ty | None:
        if e.id in self.ctx.symbols.params:
            self.ctx.usage.params.add(e.id)
            return self.ctx.symbols.param_types.get(e.id, UNKNOWN)
        return None

    def _name(self, e: ast.Name) -> Ty:
        return self.name(e)

    def _intlit(self, e: ast.IntLit) -> Ty:
        return INT

    def _sizelit(self, e: ast.SizeLit) -> Ty:
        return INT

    def _floatlit(self, e: ast.FloatLit) -> Ty:
        return FLOAT

    def _strlit(self, e: ast.StrLit) -> Ty:
        return STR

    def _boollit(self, e: ast.BoolLit) -> Ty:
        return BOOL

    def _recv(self, e: ast.Recv) -> Ty:
        return self.recv(e)

    def _attribute(self, e: ast.Attribute) -> Ty:
        if isinstance(e.base, ast.Name):
            known = self.attribute_of_name(e, e.base)
            if known is not None:
                return known
            if e.base.id == "request":
                if e.attr in REQUEST_FIELDS:
                    return REQUEST_FIELDS[e.attr]
                self.ctx.error("E004", f"request has no field `{e.attr}`", e.span,
                               did_you_mean(e.attr, REQUEST_FIELDS) or ("fields: " + ", ".join(REQUEST_FIELDS),))
                return UNKNOWN
            comp = self.ctx.symbols.components.get(e.base.id)
            if comp is not None:
                return self._member(e, comp)
        self.check(e.base)
        self.ctx.error("E011", f"values have no attribute `{e.attr}`", e.span)
        return UNKNOWN

    def _member(self, e: ast.Attribute, comp: ast.Component) -> Ty:
        const = self.ctx.symbols.consts.get((comp.name, e.attr))
        if const is not None:
            return const
        if (comp.name, e.attr) in self.ctx.symbols.entries:
            self.ctx.error("E011", f"`{comp.name}.{e.attr}` is an entry point: call it", e.span)
            return UNKNOWN
        members = [n for (c, n) in self.ctx.symbols.consts if c == comp.name]
        self.ctx.error("E006", f"component `{comp.name}` has no const `{e.attr}`", e.span, did_you_mean(e.attr, members))
        return UNKNOWN

    def _index(self, e: ast.Index) -> Ty:
        base = self.check(e.base)
        index = self.check(e.index)
        if index.kind not in NUMERIC and index.kind != "unknown":
            self.ctx.error("E011", f"an index must be a number, not {index}", e.index.span)
        if base.kind == "unknown":
            return UNKNOWN
        inner = base.drop_leading()
        if inner is None:
            self.ctx.error("E011", f"{base} cannot be indexed", e.span)
            return UNKNOWN
        return inner

    def _unary(self, e: ast.Unary) -> Ty:
        ty = self.check(e.operand)
        if e.op == "not":
            if ty.kind not in ("bool", "unknown"):
                self.ctx.error("E011", f"`not` needs true or false, found {ty}", e.operand.span)
            return BOOL
        if ty.kind not in NUMERIC | DIMMED and ty.kind != "unknown":
            self.ctx.error("E011", f"cannot negate {ty}", e.operand.span)
        return ty

    def _binary(self, e: ast.Binary) -> Ty:
        left, right = self.check(e.left), self.check(e.right)
        if "unknown" in (left.kind, right.kind):
            return BOOL if e.op in _COMPARE | {"and", "or", "in"} else UNKNOWN
        if e.op in ("and", "or"):
            for side, ty in ((e.left, left), (e.right, right)):
                if ty.kind != "bool":
                    self.ctx.error("E011", f"`{e.op}` needs true or false, found {ty}", side.span)
            return BOOL
        if e.op == "in":
            if right.kind not in ("modalities", "str"):
                self.ctx.error("E011", f"`in` needs a set of modalities or a string on the right, found {right}",
                               e.right.span)
            elif left.kind != "str":
                self.ctx.error("E011", f"`in` looks up a string, found {left}", e.left.span)
            return BOOL
        if e.op in _COMPARE:
            return self._comparison(e, left, right)
        return self._arithmetic(e, left, right)

    def _comparison(self, e: ast.Binary, left: Ty, right: Ty) -> Ty:
        ordered = e.op not in ("==", "!=")
        if _number_like(left) and _number_like(right):
            return BOOL
        if ordered or left.kind != right.kind:
            self.ctx.error("E011", f"cannot compare {left} with {right} using `{e.op}`", e.span)
        return BOOL

    def _arithmetic(self, e: ast.Binary, left: Ty, right: Ty) -> Ty:
        if left.kind in NUMERIC and right.kind in NUMERIC:
            if "scalar" in (left.kind, right.kind):
                return Ty("scalar")
            return INT if left.kind == right.kind == "int" and e.op != "/" else FLOAT
        if left.kind == "tensor" and right.kind in NUMERIC:
            return left
        if right.kind == "tensor" and left.kind in NUMERIC:
            return right
        if left.kind == right.kind == "tensor":
            self.expect(left, e.right, right, f"`{e.op}` between tensors")
            return apply(left, self.subst)
        self.ctx.error("E011", f"cannot apply `{e.op}` to {left} and {right}", e.span)
        return UNKNOWN

    def _call(self, e: ast.Call) -> Ty:
        func = e.func
        if not (isinstance(func, ast.Attribute) and isinstance(func.base, ast.Name)):
            self.ctx.error("E011", "only component entry points can be called: `component.entry(...)`", func.span)
            return UNKNOWN
        comp = self.ctx.symbols.components.get(func.base.id)
        if comp is None:
            self.ctx.error("E005", f"unknown component `{func.base.id}`", func.base.span,
                           did_you_mean(func.base.id, self.ctx.symbols.components))
            self._check_args(e)
            return UNKNOWN
        self.ctx.usage.components.add(comp.name)
        sig = self.ctx.symbols.entries.get((comp.name, func.attr))
        if sig is None:
            entries = [n for (c, n) in self.ctx.symbols.entries if c == comp.name]
            self.ctx.error("E006", f"component `{comp.name}` has no entry point `{func.attr}`", func.span,
                           did_you_mean(func.attr, entries) or ((f"entries: {', '.join(entries)}",) if entries else ()))
            self._check_args(e)
            return UNKNOWN
        return self._call_sig(e, comp, sig)

    def _check_args(self, e: ast.Call) -> None:
        for a in e.args:
            self.check(a)
        for k in e.kwargs:
            if k.name != "cache":
                self.check(k.value)

    def _call_sig(self, e: ast.Call, comp: ast.Component, sig) -> Ty:
        self._calls += 1
        fresh = str(self._calls)
        params = [a.name for a in sig.entry.args]
        bound: dict[str, ast.Expr] = dict(zip(params, e.args))
        if len(e.args) > len(params):
            self.ctx.error("E028", f"`{comp.name}.{sig.entry.name}` takes {len(params)} argument(s), "
                           f"{len(e.args)} given", e.span, (f"signature: {_signature(sig)}",))
        seen_cache = False
        for k in e.kwargs:
            if k.name == "cache" and seen_cache:
                self.ctx.error("E028", "`cache=` is given twice", k.span)
            elif k.name == "cache":
                seen_cache = True
                self._cache_label(comp, k)
            elif k.name not in params:
                self.ctx.error("E028", f"`{comp.name}.{sig.entry.name}` has no argument `{k.name}`", k.span,
                               did_you_mean(k.name, params) or (f"signature: {_signature(sig)}",))
            elif k.name in bound:
                self.ctx.error("E028", f"argument `{k.name}` is given twice", k.span)
            else:
                bound[k.name] = k.value
        missing = [p for p in params if p not in bound]
        if missing and len(e.args) <= len(params):
            self.ctx.error("E028", f"`{comp.name}.{sig.entry.name}` is missing " + ", ".join(f"`{m}`" for m in missing),
                           e.span, (f"signature: {_signature(sig)}",))
        for name, ty in zip(params, sig.args):
            if name in bound:
                arg = bound[name]
                self.expect(rename(ty, fresh), arg, self.check(arg), f"argument `{name}` of {comp.name}.{sig.entry.name}")
        for extra in e.args[len(params):]:
            self.check(extra)
        return apply(rename(sig.returns, fresh), self.subst)

    def _cache_label(self, comp: ast.Component, k: ast.KeywordArg) -> None:
        if comp.engine != "kv":
            self.ctx.error("E024", f"`{comp.name}` is {comp.engine}: it has no KV cache to label", k.span)
            return
        if not isinstance(k.value, ast.Name):
            self.ctx.error("E009", "`cache=` takes a label name", k.value.span)
            return
        labels = comp.labels()
        if k.value.id not in labels:
            self.ctx.error("E009", f"component `{comp.name}` has no cache label `{k.value.id}`", k.value.span,
                           did_you_mean(k.value.id, labels) or (f"declare it: labels {k.value.id}",))


def _number_like(ty: Ty) -> bool:
    """Numbers, and a single token (a token is an integer id: `tok == stop_at`)."""
    return ty.kind in NUMERIC or (ty.kind == "token" and not ty.dims)


def _signature(sig) -> str:
    args = ", ".join(f"{a.name}: {t}" for a, t in zip(sig.entry.args, sig.args))
    ret = f" -> {sig.returns}" if sig.returns != NONE else ""
    return f"{sig.entry.name}({args}){ret}"
