"""The checker's type model: value types with dims, conversion from the AST, and dim unification.

A dim is an int, `_` (any size), or a symbolic name. Symbolic names are
unification variables: entry-signature dims are fresh per call, walk-argument
dims are shared across one walk, so `N` bound to 4096 in one place must be
4096 everywhere else in that walk.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wgc.lang import ast

Dim = int | str  # int size, "_" wildcard, or a symbol name

DTYPES = frozenset({"bf16", "f16", "f32", "f64", "i64", "i32", "i16", "i8", "u8", "bool", "fp8"})
# Value kinds that take dims (and, for tensor, a dtype).
DIMMED = frozenset({"token", "tensor", "action"})
PLAIN = frozenset({"image", "audio", "text", "video", "scalar", "int", "float", "bool", "str"})
NUMERIC = frozenset({"int", "float", "scalar"})
WILDCARD = "_"


@dataclass(frozen=True)
class Ty:
    kind: str
    dims: tuple[Dim, ...] = ()
    dtype: str | None = None
    elem: Ty | None = None

    def __str__(self) -> str:
        if self.kind == "seq" and self.elem is not None:
            return f"seq[{self.elem}]"
        if self.kind == "token" and self.dims == (WILDCARD,):
            return "tokens"
        if self.kind in DIMMED and (self.dims or self.dtype):
            inner = ", ".join(_show_dim(d) for d in self.dims)
            if self.dtype:
                inner = f"{inner}; {self.dtype}" if inner else self.dtype
            return f"{self.kind}[{inner}]"
        return {"none": "nothing", "parts": "request parts", "modalities": "a set of modalities"}.get(self.kind, self.kind)

    def drop_leading(self) -> Ty | None:
        """The type of `x[i]`: one dim fewer, or a seq's element."""
        if self.kind == "seq":
            return self.elem
        if self.kind in DIMMED and self.dims:
            return Ty(self.kind, self.dims[1:], self.dtype)
        return None

    def with_leading(self, dim: Dim) -> Ty:
        """This item type with a chunk dim in front (`token` → `token[28]`)."""
        return Ty(self.kind if self.kind in DIMMED else "tensor", (dim, *self.dims), self.dtype)


NONE = Ty("none")
INT = Ty("int")
FLOAT = Ty("float")
BOOL = Ty("bool")
STR = Ty("str")
SCALAR = Ty("scalar")
TOKEN = Ty("token")


def _show_dim(d: Dim) -> str:
    return str(d).split("'")[0] if isinstance(d, str) else str(d)


@dataclass
class TypeError_:
    """Why a type conversion failed: message and the offending AST node."""

    message: str
    node: ast.Node


def from_ref(ref: ast.TypeRef, errors: list[TypeError_]) -> Ty:
    """Convert a written type; problems are appended to `errors` and give a best-effort type."""
    name = ref.name
    if name == "tokens":
        if ref.bracketed:
            errors.append(TypeError_("`tokens` takes no dims: it is token[_]; write token[N] for a fixed length", ref))
        return Ty("token", (WILDCARD,))
    if name == "seq":
        if len(ref.args) != 1 or not isinstance(ref.args[0], ast.TypeRef) or ref.dtype:
            errors.append(TypeError_("`seq` takes exactly one element type: seq[T]", ref))
            return Ty("seq", elem=NONE)
        return Ty("seq", elem=from_ref(ref.args[0], errors))
    if name in DIMMED:
        dims = tuple(_dim(a, errors) for a in ref.args)
        if ref.dtype is not None and ref.dtype not in DTYPES:
            errors.append(TypeError_(f"unknown dtype `{ref.dtype}`", ref))
        if name == "tensor" and ref.dtype is None:
            errors.append(TypeError_("a tensor type needs a dtype: tensor[dims; bf16]", ref))
        if name != "tensor" and ref.dtype is not None:
            errors.append(TypeError_(f"`{name}` takes dims but no dtype", ref))
        return Ty(name, dims, ref.dtype)
    if name in PLAIN:
        if ref.bracketed:
            errors.append(TypeError_(f"`{name}` takes no dims", ref))
        return Ty(name)
    errors.append(TypeError_(f"unknown type `{name}`", ref))
    return Ty("unknown")


def _dim(arg: ast.DimInt | ast.TypeRef, errors: list[TypeError_]) -> Dim:
    if isinstance(arg, ast.DimInt):
        if arg.value <= 0:
            errors.append(TypeError_("a dimension must be positive", arg))
        return arg.value
    if arg.bracketed or arg.dtype:
        errors.append(TypeError_(f"`{arg.name}[...]` is not a dimension", arg))
    return arg.name


@dataclass
class Subst:
    """Bindings of symbolic dims, with where each was bound (for messages)."""

    bound: dict[str, tuple[Dim, str]] = field(default_factory=dict)

    def resolve(self, d: Dim) -> Dim:
        seen = 0
        while isinstance(d, str) and d != WILDCARD and d in self.bound and seen < 64:
            d = self.bound[d][0]
            seen += 1
        return d


def rename(ty: Ty, suffix: str) -> Ty:
    """Fresh copies of a signature's symbolic dims (`N` → `N'7`), so each call binds its own."""
    dims = tuple(f"{d}'{suffix}" if isinstance(d, str) and d != WILDCARD else d for d in ty.dims)
    elem = rename(ty.elem, suffix) if ty.elem is not None else None
    return Ty(ty.kind, dims, ty.dtype, elem)


def apply(ty: Ty, subst: Subst) -> Ty:
    dims = tuple(subst.resolve(d) for d in ty.dims)
    elem = apply(ty.elem, subst) if ty.elem is not None else None
    return Ty(ty.kind, dims, ty.dtype, elem)


def kinds_compatible(expected: str, actual: str) -> bool:
    if expected == actual or "unknown" in (expected, actual):
        return True
    if expected == "scalar":
        return actual in NUMERIC
    if expected == "token" and actual == "int":
        return True  # an integer is a token id (`carry tok = 0`); dims still have to agree
    return expected == "float" and actual == "int"


def unify(expected: Ty, actual: Ty, subst: Subst, where: str) -> str | None:
    """Make `actual` fit `expected`, binding symbolic dims; returns a message on mismatch."""
    if not kinds_compatible(expected.kind, actual.kind):
        return f"expected {expected}, found {actual}"
    if expected.kind == "seq" and actual.kind == "seq" and expected.elem and actual.elem:
        return unify(expected.elem, actual.elem, subst, where)
    if expected.kind not in DIMMED or actual.kind not in DIMMED:
        return None
    if expected.dtype and actual.dtype and expected.dtype != actual.dtype:
        return f"expected dtype {expected.dtype}, found {actual.dtype} ({expected} vs {actual})"
    if len(expected.dims) != len(actual.dims):
        return f"expected {len(expected.dims)} dims ({expected}), found {len(actual.dims)} ({actual})"
    for i, (e, a) in enumerate(zip(expected.dims, actual.dims)):
        problem = _unify_dim(subst.resolve(e), subst.resolve(a), subst, where)
        if problem:
            return f"dim {i + 1}: {problem} ({apply(expected, subst)} vs {apply(actual, subst)})"
    return None


def _unify_dim(e: Dim, a: Dim, subst: Subst, where: str) -> str | None:
    if e == WILDCARD or a == WILDCARD or e == a:
        return None
    if isinstance(e, str):
        subst.bound[e] = (a, where)
        return None
    if isinstance(a, str):
        subst.bound[a] = (e, where)
        return None
    return f"{e} != {a}"


def is_dim_mismatch(message: str) -> bool:
    return message.startswith("dim ") or message.startswith("expected dtype") or " dims (" in message
