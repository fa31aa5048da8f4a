"""Source text → AST (or a syntax diagnostic). The only entry point is `parse`.

lark's own way: the LALR parser of grammar/walk.lark (tables generated once into walk_parser.py
by `python -m wgc.lang.regenerate`) builds a tree with lark's positions, and the AstBuilder
Transformer turns it into AST nodes.
"""

from __future__ import annotations

import functools
import gc
import itertools
import operator
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from wgc import settings
from wgc.diag.diagnostic import Diagnostic
from wgc.lang import ast
from wgc.lang.builder import AstBuilder, current_file
from wgc.lang.span import Span, point
from wgc.lang.walk_parser import (
    Lark,
    Lark_StandAlone,
    Token,
    UnexpectedCharacters,
    UnexpectedEOF,
    UnexpectedInput,
    UnexpectedToken,
)


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
def grammar_parser() -> Lark:
    """lark's parser of grammar/walk.lark: `parse` gives its tree, `lex` its tokens, `terminals`
    and `rules` the grammar's. Comments go to the sink of the `parse` call that is running."""
    return Lark_StandAlone(lexer_callbacks={"COMMENT": _collect_comment, "NAME": _reserve_declaration_words})


def parse(source: str, file: str = "<input>") -> ParseResult:
    """Parse one program. Never raises on any input: problems come back as diagnostics."""
    deep = _too_deep(source, file)
    if deep is not None:
        return ParseResult(None, (), (deep,), source)
    file_token = current_file.set(file)
    sink: list[Comment] = []
    comments_token = _comments.set(sink)
    try:
        with _no_cycle_collection():
            tree = grammar_parser().parse(source, on_error=_keyword_as_name)
            program = AstBuilder().transform(tree)
    except UnexpectedInput as err:
        return ParseResult(None, tuple(sink), (_syntax_diagnostic(err, source, file),), source)
    except RecursionError:
        # Brackets are limited above; a chain of thousands of operators still nests the tree deeply.
        return ParseResult(None, tuple(sink), (Diagnostic(
            "E002", "an expression is nested too deeply to parse", point(file, 1, 1),
            ("split it into named values",)),), source)
    finally:
        current_file.reset(file_token)
        _comments.reset(comments_token)
    return ParseResult(program, tuple(sink), (), source)


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Pause Python's cycle collector for one parse. A parse allocates a few objects per character
    (tokens, nodes, spans), which sets off hundreds of collections that find nothing: the AST is a
    tree and reference counting frees what a parse drops. That is 15% of a large parse."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# Declaration keywords stay reserved everywhere, so a block left open before the next declaration is
# reported as such rather than read as a value name.
_DECLARATION_WORDS = frozenset({"model", "import", "param", "component", "stream", "walk", "flow"})


def _keyword_as_name(err: UnexpectedInput) -> bool:
    """A keyword where only a name fits is a name: `start = 3` in a walk body.

    LALR merges the lookaheads of states with the same core, so after an expression the contextual
    lexer also offers words that can follow an expression elsewhere (`max`, `carry`, `start` in a
    flow). Feeding the word back as a NAME keeps those words usable as value names.
    """
    if not isinstance(err, UnexpectedToken):
        return False
    tok = err.token
    word = str(tok)
    if tok.type == "NAME" or "NAME" not in err.expected or not word.isidentifier() or word in _DECLARATION_WORDS:
        return False
    err.interactive_parser.feed_token(Token.new_borrow_pos("NAME", word, tok))
    return True


def _too_deep(source: str, file: str) -> Diagnostic | None:
    """Reject absurd nesting before parsing: every later pass walks the tree recursively."""
    limit = settings.max_nesting()
    if _deepest(source) <= limit:
        return None
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


def _deepest(source: str) -> int:
    """The deepest bracket nesting outside strings and comments, a stray closer counting as none,
    in C-level passes (a large program has tens of thousands of brackets): with depth d the running
    sum of +1/-1 and m its running minimum (from 0), the depth at each bracket is d - m."""
    deltas = list(map(_DELTAS.get, _BRACKETS.findall(source), itertools.repeat(0)))
    if not deltas:
        return 0
    sums = list(itertools.accumulate(deltas))
    lows = itertools.accumulate(sums, min, initial=0)
    next(lows)  # the initial 0 pairs with nothing; min(0, ...) is already in every later value
    return max(map(operator.sub, sums, lows))


_DELTAS = {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}


@functools.cache
def terminal_descriptions() -> dict[str, str]:
    """Terminal name → how a syntax error shows it (`}` rather than RBRACE)."""
    out = {
        "NAME": "a name",
        "INT": "an integer",
        "FLOAT": "a number",
        "SIZE": "a size such as 7B",
        "STRING": "a string",
        "COMPARE": "a comparison",
        "MUL_OP": "`*`, `/` or `%`",
        "$END": "end of file",
    }
    for term in grammar_parser().terminals:
        if term.name not in out and term.pattern.type == "str":
            out[term.name] = f"`{term.pattern.value}`"
    return out


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
        before = source[:tok.start_pos].rstrip() if tok.start_pos is not None else ""
        after = source[tok.end_pos:].lstrip() if tok.end_pos is not None else ""
        return Diagnostic("E001", message, span, _syntax_help(str(tok), err.expected, before, after))
    if isinstance(err, UnexpectedCharacters):
        ch = source[err.pos_in_stream] if 0 <= err.pos_in_stream < len(source) else "?"
        if ch == '"':
            end = source.find("\n", err.pos_in_stream)
            width = (end if end >= 0 else len(source)) - err.pos_in_stream
            return Diagnostic("E001", "unterminated string: it needs a closing `\"` on the same line",
                              point(file, err.line, err.column, width))
        shown = repr(ch)[1:-1] if not ch.isprintable() else ch
        return Diagnostic("E001", f"unexpected character `{shown}`", point(file, err.line, err.column))
    expected = getattr(err, "expected", None) or set()
    line, col = _end_of_text(source)
    if isinstance(err, (UnexpectedEOF, UnexpectedToken)):
        message = "unexpected end of file" + _describe_expected(set(expected))
        return Diagnostic("E001", message, point(file, line, col), ("a block or bracket may be left open",))
    return Diagnostic("E001", "syntax error", point(file, line, col))


def _end_of_text(source: str) -> tuple[int, int]:
    """Line and column just after the last non-blank character (the last line may be empty)."""
    stripped = source.rstrip()
    line = stripped.count("\n") + 1
    col = len(stripped) - (stripped.rfind("\n") + 1) + 1
    return line, col


def _syntax_help(found: str, expected: set[str], before: str, after: str) -> tuple[str, ...]:
    used_as_name = after.startswith(("=", "(", ".", ")", ",", "]")) and not after.startswith("==")
    if found in _DECLARATION_WORDS and (used_as_name or before.endswith(("=", "(", ","))):
        return (f"`{found}` is a reserved word and cannot name a value",)
    if found in _DECLARATION_WORDS and before and not before.endswith("}"):
        return ("the block before this line may be missing its closing `}`",)
    if found == "=" and "COMPARE" in expected:
        return ("to compare values use `==`",)
    if found == "{" and before.endswith("loop"):
        return ("a loop needs a bound: `loop N { ... }` or `loop until COND max N { ... }`",)
    return ()


def _reserve_declaration_words(tok: Token) -> Token:
    """A declaration keyword is never a name, even where a name could stand (see _DECLARATION_WORDS)."""
    word = str(tok)
    if word in _DECLARATION_WORDS:
        return Token.new_borrow_pos(word.upper(), word, tok)
    return tok
