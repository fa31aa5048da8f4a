"""Top-level declarations: the model header, names, imports, params, components, streams, walk signatures."""

from __future__ import annotations

from wgc.check.context import Context, EntrySig, StreamInfo, WalkInfo
from wgc.check.policies import check_policy, chunk_type
from wgc.check.types import BOOL, FLOAT, INT, STR, Ty, TypeError_, from_ref
from wgc.diag.diagnostic import Note
from wgc.diag.sink import did_you_mean
from wgc.lang import ast
from wgc.lang.span import Span

PARAM_TYPES: dict[str, Ty] = {"int": INT, "float": FLOAT, "bool": BOOL, "str": STR}
ENGINES = ("kv", "stateless")
# Component attributes: name → (accepted literal kinds, meaning). Placement reads them.
ATTRIBUTES: dict[str, tuple[tuple[type, ...], str]] = {
    "weights": ((ast.SizeLit, ast.IntLit), "a parameter count such as 7.2B"),
    "dtype": ((ast.Name,), "a weight dtype such as bf16"),
    "kv_layers": ((ast.IntLit,), "an integer (layers that keep a KV cache)"),
    "kv_heads": ((ast.IntLit,), "an integer (key/value heads per layer)"),
    "head_dim": ((ast.IntLit,), "an integer (size of one attention head)"),
    "max_seq_len": ((ast.IntLit,), "an integer (longest sequence the KV cache holds)"),
    "hidden": ((ast.IntLit,), "an integer (hidden size)"),
}
_LITERAL_KIND = {ast.IntLit: "int", ast.FloatLit: "float", ast.StrLit: "str", ast.BoolLit: "bool", ast.SizeLit: "int"}


def check_declarations(ctx: Context) -> None:
    _check_header(ctx)
    _check_unique_names(ctx)
    for decl in ctx.program.decls:
        if isinstance(decl, ast.Import):
            ctx.symbols.imports.setdefault(decl.alias, decl)
    for decl in ctx.program.decls:
        if isinstance(decl, ast.Param):
            _check_param(ctx, decl)
        elif isinstance(decl, ast.Component):
            _check_component(ctx, decl)
    for decl in ctx.program.decls:
        if isinstance(decl, ast.Stream):
            _check_stream(ctx, decl)
        elif isinstance(decl, ast.Walk):
            _walk_signature(ctx, decl)


def convert(ctx: Context, ref: ast.TypeRef) -> Ty:
    errors: list[TypeError_] = []
    ty = from_ref(ref, errors)
    for e in errors:
        ctx.error("E010", e.message, e.node.span, _type_help(e.message))
    return ty


def _type_help(message: str) -> tuple[str, ...]:
    if message.startswith("unknown type"):
        name = message.split("`")[1]
        known = ("tokens", "token", "tensor", "image", "audio", "text", "video", "action", "scalar", "seq")
        return did_you_mean(name, known) or ("types: " + ", ".join(known),)
    if message.startswith("unknown dtype"):
        return ("dtypes: bf16, f16, f32, f64, i64, i32, i16, i8, u8, bool, fp8",)
    return ()


def _check_header(ctx: Context) -> None:
    models = ctx.program.of(ast.Model)
    if not models:
        ctx.error("E035", "the program has no `model` declaration", Span(ctx.program.span.file, 1, 1, 1, 2),
                  ("start the file with `model NAME`",))
    for extra in models[1:]:
        ctx.error("E035", f"a second `model` declaration (`{extra.name}`)", extra.span,
                  notes=(Note(f"the model is already `{models[0].name}`", models[0].span),))


def _decl_name(decl: ast.Decl) -> tuple[str, str] | None:
    """(namespace, name): walks and flows have their own namespaces; the rest share one."""
    if isinstance(decl, ast.Import):
        return ("value", decl.alias)
    if isinstance(decl, (ast.Param, ast.Component, ast.Stream)):
        return ("value", decl.name)
    if isinstance(decl, ast.Walk):
        return ("walk", decl.name)
    if isinstance(decl, ast.Flow) and decl.name is not None:
        return ("flow", decl.name)
    return None


def _check_unique_names(ctx: Context) -> None:
    seen: dict[tuple[str, str], Span] = {}
    for decl in ctx.program.decls:
        key = _decl_name(decl)
        if key is None:
            continue
        if key in seen:
            ctx.error("E003", f"`{key[1]}` is declared twice", decl.span,
                      notes=(Note("first declared here", seen[key]),))
        else:
            seen[key] = decl.span


def _literal_kind(lit: ast.Node) -> str:
    return _LITERAL_KIND.get(type(lit), "unknown")


def _check_param(ctx: Context, p: ast.Param) -> None:
    if p.name in ctx.symbols.params:
        return
    ctx.symbols.params[p.name] = p
    ty = PARAM_TYPES.get(p.type)
    if ty is None:
        ctx.error("E027", f"param `{p.name}` has unknown type `{p.type}`", p.span,
                  did_you_mean(p.type, PARAM_TYPES) or ("param types: int, float, bool, str",))
        ctx.symbols.param_types[p.name] = Ty("unknown")
        return
    ctx.symbols.param_types[p.name] = ty
    values = [v for v in (p.default, *(p.bounds or ()), *(p.choices or ())) if v is not None]
    for v in values:
        kind = _literal_kind(v)
        if kind != p.type and not (p.type == "float" and kind == "int"):
            ctx.error("E027", f"param `{p.name}` is {p.type}, but `{_show(v)}` is {kind}", v.span)
            return
    if p.bounds is not None:
        lo, hi = (b.value for b in p.bounds)
        if p.type not in ("int", "float"):
            ctx.error("E027", f"a range bound needs a numeric param; `{p.name}` is {p.type}", p.span,
                      ("use a choice list: in [\"a\", \"b\"]",))
        elif lo > hi:
            ctx.error("E027", f"param `{p.name}` has an empty range {lo}..{hi}", p.bounds[0].span)
        elif p.default is not None and not lo <= p.default.value <= hi:
            ctx.error("E027", f"default {_show(p.default)} of `{p.name}` is outside {lo}..{hi}", p.default.span)
    if p.choices is not None and p.default is not None and p.default.value not in [c.value for c in p.choices]:
        ctx.error("E027", f"default {_show(p.default)} of `{p.name}` is not one of its choices", p.default.span)


def _show(lit: ast.Node) -> str:
    if isinstance(lit, ast.StrLit):
        return f'"{lit.value}"'
    if isinstance(lit, (ast.FloatLit, ast.SizeLit)):
        return lit.text
    if isinstance(lit, ast.BoolLit):
        return "true" if lit.value else "false"
    return str(getattr(lit, "value", "?"))


def _check_component(ctx: Context, c: ast.Component) -> None:
    if c.name in ctx.symbols.components:
        return
    ctx.symbols.components[c.name] = c
    if c.engine not in ENGINES:
        ctx.error("E030", f"unknown engine `{c.engine}` for component `{c.name}`", c.span,
                  did_you_mean(c.engine, ENGINES) or ("engines: kv (paged KV cache), stateless",))
    if len(c.cls) < 2:
        ctx.error("E029", f"component class `{c.cls[0]}` needs a module alias: `ALIAS.{c.cls[0]}`", c.span,
                  ("import the module first: `import wgc.models.MODULE as ALIAS`",))
    elif c.cls[0] not in ctx.symbols.imports:
        alias = c.cls[0]
        ctx.error("E029", f"`{'.'.join(c.cls)}`: no import is named `{alias}` (the module alias)", c.span,
                  did_you_mean(alias, ctx.symbols.imports) or (f"add `import wgc.models.MODULE as {alias}`",))
    member_names: dict[str, Span] = {}
    for m in c.members:
        names = m.names if isinstance(m, ast.Labels) else (m.name,)
        for name in names:
            if name in member_names:
                ctx.error("E003", f"`{name}` is declared twice in component `{c.name}`", m.span,
                          notes=(Note("first declared here", member_names[name]),))
            member_names[name] = m.span
        _check_member(ctx, c, m)


def _check_member(ctx: Context, c: ast.Component, m: ast.Node) -> None:
    if isinstance(m, ast.Entry):
        seen: set[str] = set()
        for a in m.args:
            if a.name in seen:
                ctx.error("E003", f"entry `{c.name}.{m.name}` has two arguments named `{a.name}`", a.span)
            seen.add(a.name)
        args = tuple(convert(ctx, a.type) for a in m.args)
        returns = convert(ctx, m.returns) if m.returns is not None else Ty("none")
        ctx.symbols.entries[(c.name, m.name)] = EntrySig(c.name, m, args, returns)
    elif isinstance(m, ast.Const):
        ty = convert(ctx, m.type)
        ctx.symbols.consts[(c.name, m.name)] = ty
        _check_const_value(ctx, c, m, ty)
    elif isinstance(m, ast.Labels):
        if c.engine != "kv":
            ctx.error("E024", f"component `{c.name}` is {c.engine}: only kv components have cache labels", m.span)
        for name in m.names:
            if name in ctx.symbols.labels and ctx.symbols.labels[name][0] != c.name:
                other = ctx.symbols.labels[name]
                ctx.error("E003", f"label `{name}` is already declared by component `{other[0]}`", m.span,
                          notes=(Note("declared here", other[1]),))
            else:
                ctx.symbols.labels[name] = (c.name, m.span)
    elif isinstance(m, ast.Attr):
        _check_attribute(ctx, c, m)


# Const type kind → literal kinds that can stand for it.
_CONST_LITERALS: dict[str, tuple[type, ...]] = {
    "token": (ast.IntLit,), "int": (ast.IntLit,), "scalar": (ast.IntLit, ast.FloatLit), "float": (ast.IntLit, ast.FloatLit),
    "bool": (ast.BoolLit,), "str": (ast.StrLit,), "text": (ast.StrLit,),
}


def _check_const_value(ctx: Context, c: ast.Component, k: ast.Const, ty: Ty) -> None:
    if k.value is None or ty.kind == "unknown":
        return
    allowed = _CONST_LITERALS.get(ty.kind) if not ty.dims else None
    if allowed is None:
        ctx.error("E011", f"const `{c.name}.{k.name}` of type {ty} cannot take a literal value", k.value.span,
                  ("leave the value out: the component provides it",))
    elif not isinstance(k.value, allowed):
        ctx.error("E011", f"const `{c.name}.{k.name}` is {ty}, but `{_show(k.value)}` is {_literal_kind(k.value)}",
                  k.value.span)


def _check_attribute(ctx: Context, c: ast.Component, a: ast.Attr) -> None:
    rule = ATTRIBUTES.get(a.name)
    if rule is None:
        ctx.error("E036", f"component `{c.name}` has no attribute `{a.name}`", a.span,
                  did_you_mean(a.name, ATTRIBUTES) or ("attributes: " + ", ".join(ATTRIBUTES),))
        return
    kinds, meaning = rule
    if not isinstance(a.value, kinds):
        ctx.error("E036", f"attribute `{a.name}` takes {meaning}", a.value.span)
    elif a.name == "dtype" and a.value.id not in {"bf16", "f16", "f32", "f64", "fp8", "i8"}:
        ctx.error("E036", f"unknown weight dtype `{a.value.id}`", a.value.span, ("dtypes: bf16, f16, f32, f64, fp8, i8",))
    elif isinstance(a.value, (ast.IntLit, ast.SizeLit)) and a.value.value < (0 if a.name == "weights" else 1):
        need = "zero or more" if a.name == "weights" else "positive"
        ctx.error("E036", f"attribute `{a.name}` must be {need}", a.value.span)


def _check_stream(ctx: Context, s: ast.Stream) -> None:
    item = convert(ctx, s.type)
    for role, comp in (("producer", s.producer), ("consumer", s.consumer)):
        if comp not in ctx.symbols.components:
            ctx.error("E005", f"stream `{s.name}`: unknown {role} component `{comp}`", s.span,
                      did_you_mean(comp, ctx.symbols.components))
    check_policy(ctx, s)
    if s.name not in ctx.symbols.streams:
        ctx.symbols.streams[s.name] = StreamInfo(s, item, chunk_type(s, item))


def _walk_signature(ctx: Context, w: ast.Walk) -> None:
    if w.name in ctx.symbols.walks:
        return
    seen: dict[str, Span] = {}
    for a in w.args:
        if a.name in seen:
            ctx.error("E003", f"walk `{w.name}` has two inputs named `{a.name}`", a.span)
        seen[a.name] = a.span
    args = tuple(convert(ctx, a.type) for a in w.args)
    returns = convert(ctx, w.returns) if w.returns is not None else None
    ctx.symbols.walks[w.name] = WalkInfo(w, args, returns)
