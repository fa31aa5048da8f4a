"""Completion: the grammar's keywords and the names in scope at the cursor.

A document being typed rarely parses, so completion reads tokens, not the AST: an outline of the
names the text declares (components with their entries, consts and labels; walks, streams,
params, each-blocks) and the context just before the cursor (inside which declaration, after
which word). The word lists come from the checker's own tables, so they cannot drift from what
the checker accepts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from wgc.check.declarations import ATTRIBUTES, ENGINES, PARAM_TYPES
from wgc.check.exprs import REQUEST_FIELDS
from wgc.check.flows import PART_KINDS
from wgc.check.policies import AFTER_END, AT_END, POLICIES
from wgc.check.types import DIMMED, DTYPES, PLAIN
from wgc.check.walks import EMIT_KINDS
from wgc.lsp.tokens import Token, Tokens

DECLARATIONS = ("model", "import", "param", "component", "stream", "walk", "flow")
STATEMENTS = ("send", "emit", "fork", "return", "loop", "parallel", "branch", "until", "max", "as", "carry",
              "nospec", "yield", "terminal", "accumulated", "recv", "and", "or", "not", "in", "true", "false")
FLOW_WORDS = ("start", "done", "each", "when", "and", "or", "not", "in")
STREAM_CLAUSES = ("at_end", "after_end", "capacity")
TYPE_NAMES = tuple(sorted(DIMMED | PLAIN | {"tokens", "seq"}))
_CLOSED_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')


@dataclass(frozen=True)
class Candidate:
    label: str
    kind: str  # keyword, component, entry, const, label, walk, stream, param, value, type, field, each
    detail: str = ""


@dataclass
class Outline:
    """The names a text declares, read from its tokens (the text need not parse)."""

    components: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # name → entry/const/label → names
    walks: list[str] = field(default_factory=list)
    streams: list[str] = field(default_factory=list)
    params: list[str] = field(default_factory=list)
    eaches: list[str] = field(default_factory=list)
    imports: list[str] = field(default_factory=list)


@dataclass
class _Context:
    decl: str | None = None  # the top-level declaration the cursor is in (its keyword)
    depth: int = 0  # brace depth
    parens: int = 0
    start: int = 0  # token index where that declaration starts
    opened: bool = False  # its `{` has been seen


def _code(toks: list[Token]) -> list[Token]:
    return [t for t in toks if t.kind != "comment"]


def outline(toks: list[Token]) -> Outline:
    out = Outline()
    ctx = _Context()
    current: dict[str, list[str]] | None = None
    for i, t in enumerate(toks):
        nxt = toks[i + 1].text if i + 1 < len(toks) else ""
        prev = toks[i - 1].text if i > 0 else ""
        _step(ctx, toks, i)
        if t.kind != "name":
            continue
        if ctx.depth == 0 and prev in ("component", "walk", "stream", "param") and i - 1 == ctx.start:
            target = {"walk": out.walks, "stream": out.streams, "param": out.params}.get(prev)
            if target is not None:
                target.append(t.text)
            else:
                current = out.components.setdefault(t.text, {"entry": [], "const": [], "label": []})
        elif ctx.decl == "component" and ctx.depth == 1 and current is not None:
            if nxt == "(" and ctx.parens == 0:
                current["entry"].append(t.text)
            elif prev == "const":
                current["const"].append(t.text)
            elif prev in ("labels", ",") and _in_labels(toks, i):
                current["label"].append(t.text)
        elif ctx.decl == "flow" and prev == "each":
            out.eaches.append(t.text)
        elif ctx.decl == "import" and prev == "as":
            out.imports.append(t.text)
    return out


def _in_labels(toks: list[Token], i: int) -> bool:
    while i >= 2 and toks[i - 1].text == ",":
        i -= 2
    return i >= 1 and toks[i - 1].text == "labels"


def _step(ctx: _Context, toks: list[Token], i: int) -> None:
    """Advance the declaration/brace state over token `i`."""
    t = toks[i]
    if t.kind == "name" and t.text in DECLARATIONS and ctx.depth == 0:
        ctx.decl, ctx.start, ctx.opened, ctx.parens = t.text, i, False, 0
    elif t.text == "{":
        ctx.depth += 1
        ctx.opened = True
    elif t.text == "}":
        ctx.depth = max(ctx.depth - 1, 0)
        if ctx.depth == 0 and ctx.decl in ("component", "walk", "flow"):
            ctx.decl = None
    elif t.text == "(":
        ctx.parens += 1
    elif t.text == ")":
        ctx.parens = max(ctx.parens - 1, 0)


def complete(text: str, offset: int) -> list[Candidate]:
    """What may be written at `offset` (code points into `text`)."""
    tokens = Tokens(text)
    if _inside_text(tokens.at(offset), offset):
        return []
    before = _code(tokens.before(offset))
    if before and before[-1].kind == "name" and before[-1].end == offset:
        before = before[:-1]  # the word being typed is the prefix, not context
    ctx = _Context()
    for i in range(len(before)):
        _step(ctx, before, i)
    names = outline(_code(tokens.all))
    prev = before[-1].text if before else ""
    prev2 = before[-2].text if len(before) > 1 else ""
    found = _after_word(ctx, names, before, prev, prev2)
    return found if found is not None else _in_region(ctx, names, before)


def _inside_text(here: Token | None, offset: int) -> bool:
    """Inside a comment, or inside a string (not just after its closing quote)."""
    if here is None or offset <= here.start:
        return False
    if here.kind == "comment":
        return True
    return here.kind == "string" and (offset < here.end or not _CLOSED_STRING.fullmatch(here.text))


def _words(words: Iterable[str], kind: str, detail: str = "") -> list[Candidate]:
    return [Candidate(w, kind, detail) for w in words]


def _after_word(ctx: _Context, names: Outline, before: list[Token], prev: str, prev2: str) -> list[Candidate] | None:
    """Candidates fixed by the word just before the cursor, or None where the region decides."""
    if prev == ".":
        if prev2 in names.components:
            members = names.components[prev2]
            return _words(members["entry"], "entry", prev2) + _words(members["const"], "const", prev2)
        if prev2 == "request":
            return [Candidate(f, "field", str(ty)) for f, ty in REQUEST_FIELDS.items()]
        if prev2 in names.walks and ctx.decl == "flow":
            return [Candidate("result", "field", f"result of walk {prev2}")]
        return []
    in_body = ctx.depth > 0
    table: dict[str, list[Candidate]] = {
        "engine": _words(ENGINES, "keyword"),
        "emit": _words(EMIT_KINDS, "keyword", "output modality"),
        "at_end": _words(AT_END, "keyword"),
        "after_end": _words(AFTER_END, "keyword"),
        "recv": _words(names.streams, "stream"),
        "on": _words(names.streams, "stream"),
        "fork": _labels(names),
        ";": _words(sorted(DTYPES), "type", "dtype"),
    }
    if prev in table:
        return table[prev]
    if prev == "=" and prev2 == "cache":
        return _labels(names, _called_component(before))
    if prev == "=" and prev2 == "dtype" and ctx.decl == "component":
        return _words(sorted(DTYPES), "type", "dtype")
    if ctx.decl == "walk" and in_body and prev in ("->", "from"):
        return _words(names.streams, "stream") if prev == "->" else _labels(names)
    if ctx.decl == "flow" and prev == "->":
        return _words(names.walks, "walk") + _words(names.eaches, "each") + _words(("done",), "keyword")
    if ctx.decl == "stream" and prev in ("from", "to"):
        return _words(names.components, "component")
    if ctx.decl == "param" and prev == ":":
        return _words(PARAM_TYPES, "type")
    if ctx.decl == "component" and not ctx.opened and prev == ":":
        return _words(names.imports, "module", "import alias")
    if prev in (":", "->", "[", ",") and ctx.decl in ("component", "walk", "stream") and _in_type_position(ctx, before):
        return _words(TYPE_NAMES, "type")
    return None


def _in_type_position(ctx: _Context, before: list[Token]) -> bool:
    """After `:` or `->` in a signature, or `[`/`,` inside a type's brackets."""
    if ctx.decl == "walk" and ctx.opened:
        return False  # a walk body has no types: `[` there indexes a value
    prev = before[-1].text
    if prev in (":", "->"):
        return True
    depth = 0
    for t in reversed(before):
        if t.text == "]":
            depth += 1
        elif t.text == "[":
            if depth == 0:
                return True
            depth -= 1
        elif t.text in ("{", "}", "(", ")", "="):
            return False
    return False


def _labels(names: Outline, component: str | None = None) -> list[Candidate]:
    return [Candidate(label, "label", comp) for comp, members in names.components.items()
            if component in (None, comp) for label in members["label"]]


def _called_component(before: list[Token]) -> str | None:
    """`llm` in `llm.velocity(z, cache=|`: the component whose call the cursor is in."""
    depth = 0
    for i in range(len(before) - 1, -1, -1):
        t = before[i].text
        if t == ")":
            depth += 1
        elif t == "(":
            if depth == 0:
                ok = i >= 3 and before[i - 2].text == "."
                return before[i - 3].text if ok else None
            depth -= 1
    return None


def _in_region(ctx: _Context, names: Outline, before: list[Token]) -> list[Candidate]:
    if ctx.depth == 0:
        out = _words(DECLARATIONS, "keyword")
        if ctx.decl == "stream":
            out += _words(STREAM_CLAUSES, "keyword") + _words(POLICIES, "keyword", "chunk policy")
        return out
    if ctx.decl == "component":
        return _words(("const", "labels"), "keyword") + [Candidate(a, "field", m) for a, (_, m) in ATTRIBUTES.items()]
    if ctx.decl == "flow":
        return (_words(names.walks, "walk") + _words(names.eaches, "each") + _words(FLOW_WORDS, "keyword")
                + _words(PART_KINDS, "keyword", "part kind") + _words(names.params, "param")
                + [Candidate("request", "keyword")])
    if ctx.decl == "walk":
        return (_words(_locals_before(before, ctx.start), "value") + _words(names.params, "param")
                + _words(names.components, "component") + _words(STATEMENTS, "keyword")
                + [Candidate("request", "keyword")])
    return []


def _locals_before(before: list[Token], start: int) -> list[str]:
    """Values the walk starting at token `start` binds before the cursor: inputs, assignments, loop names."""
    found: dict[str, None] = {}
    parens, opened = 0, False
    toks = before[start:]
    for i, t in enumerate(toks):
        if t.text in ("(", "["):
            parens += 1
        elif t.text in (")", "]"):
            parens = max(parens - 1, 0)
        elif t.text == "{":
            opened = True
        if t.kind != "name" or i == 0:
            continue
        prev = toks[i - 1].text
        nxt = toks[i + 1].text if i + 1 < len(toks) else ""
        header_arg = not opened and parens == 1 and nxt == ":"
        assigned = opened and parens == 0 and nxt == "="
        if header_arg or assigned or prev in ("carry", "terminal", "accumulated", "as"):
            found.setdefault(t.text, None)
    return list(found)
