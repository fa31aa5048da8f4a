"""Hover text (markdown) for a symbol under the cursor: what it is, in the words of the language docs.

Declarations are shown in their canonical one-line form, the text `wgc fmt` would print, so a
hover never disagrees with the formatter about how something is written.
"""

from __future__ import annotations

from collections.abc import Callable

from wgc.check.context import Symbols
from wgc.check.policies import policy_values
from wgc.fmt.expr import format_literal
from wgc.fmt.lines import HEADER_TEXT, LINE_TEXT
from wgc.lang import ast
from wgc.lsp.index import Index, Occurrence

AT_END_MEANING = {
    "flush": "the final fragment is delivered as it is",
    "pad": "the final fragment is padded to a full chunk",
    "drop": "the final fragment is discarded",
}
AFTER_END_MEANING = {
    "stop": "the stream ends with its last chunk",
    "continue": "`recv` keeps returning empty items",
}


def _code(*lines: str) -> str:
    return "```walk\n" + "\n".join(lines) + "\n```"


def hover_text(index: Index, symbols: Symbols | None, occ: Occurrence) -> str | None:
    show = _SHOW.get(occ.key[0])
    return show(index, symbols, occ) if show is not None else None


def _param(index: Index, symbols: Symbols | None, occ: Occurrence) -> str | None:
    p = index.decls.get(occ.key)
    if not isinstance(p, ast.Param):
        return None
    facts = [f"default: `{format_literal(p.default)}`" if p.default is not None else "no default"]
    if p.bounds is not None:
        facts.append(f"bounds: `{format_literal(p.bounds[0])}..{format_literal(p.bounds[1])}`")
    elif p.choices is not None:
        facts.append("one of: " + ", ".join(f"`{format_literal(c)}`" for c in p.choices))
    else:
        facts.append("no bounds")
    return _code(LINE_TEXT[ast.Param](p)) + "\n\nrequest param · " + " · ".join(facts)


def _component(index: Index, symbols: Symbols | None, occ: Occurrence) -> str | None:
    c = index.decls.get(occ.key)
    if not isinstance(c, ast.Component):
        return None
    body = [f"    {LINE_TEXT[type(m)](m)}" for m in c.members if isinstance(m, ast.Entry | ast.Const | ast.Labels)]
    return _code(HEADER_TEXT[ast.Component](c) + " {", *body, "}")


def _entry(index: Index, symbols: Symbols | None, occ: Occurrence) -> str | None:
    e = index.decls.get(occ.key)
    if not isinstance(e, ast.Entry):
        return None
    comp = occ.key[1]
    kind = index.decls.get(("component", comp))
    engine = f" ({kind.engine})" if isinstance(kind, ast.Component) else ""
    result = "" if e.returns is not None else " · returns nothing: called for its effect"
    return _code(f"{comp}.{LINE_TEXT[ast.Entry](e)}") + f"\n\nentry point of component `{comp}`{engine}{result}"


def _const(index: Index, symbols: Symbols | None, occ: Occurrence) -> str | None:
    k = index.decls.get(occ.key)
    if not isinstance(k, ast.Const):
        return None
    return _code(LINE_TEXT[ast.Const](k)) + f"\n\nconst of component `{occ.key[1]}`, read as `{occ.key[1]}.{k.name}`"


def _label(index: Index, symbols: Symbols | None, occ: Occurrence) -> str | None:
    label = occ.key[1]
    owner = symbols.labels.get(label) if symbols is not None else None
    if owner is None:
        return f"cache label `{label}` (not declared by any kv component)"
    decl = index.decls.get(occ.key)
    others = f"\n\n{LINE_TEXT[ast.Labels](decl)}" if isinstance(decl, ast.Labels) else ""
    return f"cache label `{label}` of component `{owner[0]}`: one context in its KV pool{others}"


def _walk(index: Index, symbols: Symbols | None, occ: Occurrence) -> str | None:
    w = index.decls.get(occ.key)
    if not isinstance(w, ast.Walk):
        return None
    how = f"fired once per chunk of stream `{w.on}`" if w.on is not None else "a phase of a request, run by a flow"
    return _code(HEADER_TEXT[ast.Walk](w)) + f"\n\nwalk · {how}"


def _policy_text(p: ast.Policy) -> str:
    return f"{p.name}(" + ", ".join(str(a.value) if a.name is None else f"{a.name}={a.value}" for a in p.args) + ")"


def _policy(s: ast.Stream) -> str:
    values = policy_values(s.policy) or {}
    if s.policy.name == "fixed":
        size = values.get("size", "?")
        return "one item at a time" if size == 1 else f"chunks of {size} consecutive items"
    if s.policy.name == "sliding":
        return f"windows of {values.get('window', '?')} items, one every {values.get('stride', '?')} items"
    if s.policy.name == "left_context":
        return f"{values.get('chunk', '?')} new items after up to {values.get('left', '?')} already delivered"
    return "unknown policy"


def _stream(index: Index, symbols: Symbols | None, occ: Occurrence) -> str | None:
    s = index.decls.get(occ.key)
    if not isinstance(s, ast.Stream):
        return None
    info = symbols.streams.get(s.name) if symbols is not None else None
    at_end, after_end = s.at_end or "flush", s.after_end or "stop"
    lines = [
        f"stream from `{s.producer}` to `{s.consumer}`",
        f"- item: `{info.item}` · chunk: `{info.chunk}`" if info is not None else f"- item: `{s.type.name}`",
        f"- chunk policy `{_policy_text(s.policy)}`: {_policy(s)}",
        f"- at_end `{at_end}`{'' if s.at_end else ' (default)'}: {AT_END_MEANING.get(at_end, 'unknown rule')}",
        f"- after_end `{after_end}`{'' if s.after_end else ' (default)'}: "
        + AFTER_END_MEANING.get(after_end, "unknown rule"),
    ]
    if s.capacity is not None:
        lines.append(f"- capacity: {s.capacity} items")
    return _code(LINE_TEXT[ast.Stream](s)) + "\n\n" + "\n".join(lines)


def _value(index: Index, symbols: Symbols | None, occ: Occurrence) -> str:
    _, walk, name = occ.key
    ty = occ.ty
    if ty is None:
        ty = next((o.ty for o in index.references(occ.key) if o.ty is not None), None)
    shown = f"{name}: {ty}" if ty is not None else name
    return _code(shown) + f"\n\nvalue in walk `{walk}`"


def _import(index: Index, symbols: Symbols | None, occ: Occurrence) -> str | None:
    i = index.decls.get(occ.key)
    return _code(LINE_TEXT[ast.Import](i)) + "\n\nmodule alias" if isinstance(i, ast.Import) else None


def _each(index: Index, symbols: Symbols | None, occ: Occurrence) -> str | None:
    e = index.decls.get(occ.key)
    if not isinstance(e, ast.Each):
        return None
    return _code(HEADER_TEXT[ast.Each](e)) + "\n\neach-block: runs one arm per input part, in order"


_SHOW: dict[str, Callable[[Index, Symbols | None, Occurrence], str | None]] = {
    "param": _param,
    "component": _component,
    "entry": _entry,
    "const": _const,
    "label": _label,
    "walk": _walk,
    "stream": _stream,
    "value": _value,
    "import": _import,
    "each": _each,
}
