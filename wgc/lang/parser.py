"""Source text → AST (or a syntax diagnostic). The only entry point is `parse`."""

from __future__ import annotations

import functools
import re
from contextvars import ContextVar
from dataclasses import dataclass

from lark import Lark, Token
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from wgc import settings
from wgc.diag.diagnostic import Diagnostic
from wgc.lang import ast
from wgc.lang.builder import AstBuilder, current_file
from wgc.lang.grammar_cache import build_parser, terminal_descriptions
from wgc.lang.span import Span, point


@dataclass(frozen=True)
class Comment:
    text: str
    span: Span


@dataclass(frozen=True)
class ParseResult:
    program: ast.Program | None
    comments: tuple[Comment, ...]
    diagnostics: tuple[Diagnostic, ...]
    source: str


_comments: ContextVar[list[Comment] | None] = ContextVar("wgc_comments", default=None)
_BRACKETS = re.compile(r'"(?:[^"\\\n]|\\.)*"|#[^\n]*|[\[\](){}]')
_OPENERS = {"(": ")", "[": "]", "{": "}"}


def _collect_comment(tok: Token) -> Token:
    sink = _comments.get()
    if sink is not None:
        sink.append(Comment(str(tok), Span(current_file.get(), tok.line, tok.column, tok.end_line, tok.end_column)))
    return tok


@functools.cache
def _parser() -> Lark:
    # lark cannot hand positions (meta) to a transformer run inside the parser,
    # so the parser builds a tree and AstBuilder turns it into the AST after.
    return build_parser(None, {"COMMENT": _collect_comment})


@functools.cache
def _builder() -> AstBuilder:
    return AstBuilder()


def parse(source: str, file: str = "<input>") -> ParseResult:
    """Parse one program. Never raises on any input: problems come back as diagnostics."""
    deep = _too_deep(source, file)
    if deep is not None:
        return ParseResult(None, (), (deep,), source)
    file_token = current_file.set(file)
    sink: list[Comment] = []
    comments_token = _comments.set(sink)
    try:
        program = _builder().transform(_parser().parse(source))
    except UnexpectedInput as err:
        return ParseResult(None, tuple(sink), (_syntax_diagnostic(err, source, file),), source)
    finally:
        current_file.reset(file_token)
        _comments.reset(comments_token)
    return ParseResult(program, tuple(sink), (), source)


def _too_deep(source: str, file: str) -> Diagnostic | None:
    """Reject absurd nesting before parsing: every later pass walks the tree recursively."""
    limit = settings.max_nesting()
    depth = 0
    for m in _BRACKETS.finditer(source):
        ch = m.group()
        if ch in _OPENERS:
            depth += 1
            if depth > limit:
                line = source.count("\n", 0, m.start()) + 1
                col = m.start() - (source.rfind("\n", 0, m.start()) + 1) + 1
                return Diagnostic(
                    "E002",
                    f"brackets nested more than {limit} deep",
                    point(file, line, col),
                    ("split the expression or block into named values or walks",),
                )
        elif ch in ")]}":
            depth = max(0, depth - 1)
    return None


def _describe_expected(expected: set[str]) -> str:
    names = terminal_descriptions()
    shown = sorted({names.get(e, e) for e in expected if not e.startswith("_")})
    if not shown:
        return ""
    if len(shown) > 8:
        return "; expected one of " + ", ".join(shown[:8]) + ", …"
    return "; expected " + (shown[0] if len(shown) == 1 else "one of " + ", ".join(shown))


def _syntax_diagnostic(err: UnexpectedInput, source: str, file: str) -> Diagnostic:
    if isinstance(err, UnexpectedToken) and err.token.type != "$END":
        tok = err.token
        span = Span(file, tok.line, tok.column, tok.end_line or tok.line, tok.end_column or tok.column + 1)
        message = f"unexpected `{tok}`" + _describe_expected(err.expected)
        return Diagnostic("E001", message, span, _syntax_help(str(tok), err.expected))
    if isinstance(err, UnexpectedCharacters):
        ch = source[err.pos_in_stream] if 0 <= err.pos_in_stream < len(source) else "?"
        shown = repr(ch)[1:-1] if not ch.isprintable() else ch
        return Diagnostic("E001", f"unexpected character `{shown}`", point(file, err.line, err.column))
    expected = getattr(err, "expected", None) or set()
    line = source.count("\n") + 1
    col = len(source) - (source.rfind("\n") + 1) + 1
    if isinstance(err, (UnexpectedEOF, UnexpectedToken)):
        message = "unexpected end of file" + _describe_expected(set(expected))
        return Diagnostic("E001", message, point(file, line, col), ("a block or bracket may be left open",))
    return Diagnostic("E001", "syntax error", point(file, line, col))


def _syntax_help(found: str, expected: set[str]) -> tuple[str, ...]:
    if "RBRACE" in expected and found in {"walk", "component", "flow", "stream", "param"}:
        return ("the block before this line may be missing its closing `}`",)
    if found == "=" and "COMPARE" in expected:
        return ("to compare values use `==`",)
    if found == "loop" and "LBRACE" in expected:
        return ("a loop needs a bound: `loop N { ... }` or `loop until COND max N { ... }`",)
    return ()
