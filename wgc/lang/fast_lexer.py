"""lark's contextual lexer, with its per-token loop written out: the same tokens, a third of the cost.

lark's contextual lexer keeps one basic lexer per parser state and, per token, goes through four
method calls (pick the state's lexer, next_token, match, the scanner's match) plus the line counter
and a token constructor that checks for deprecated keywords. On a large program that is a third of
the parse. This loop does the same work inline, with each state's regexes and terminal sets looked
up once: the same regexes, tried in the same order, the same line counting, the same lexer
callbacks, tokens with the same positions. Where no terminal matches, it hands over to lark's own
lexer at that position, so the error raised (and its conversion into "unexpected token" where the
text is a terminal of another context) is lark's, unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from lark import Lark, Token
from lark.lexer import ContextualLexer, LexerState

_new_token = Token._future_new  # the constructor without the keyword-argument checks of Token.__new__


class _StateLexer(NamedTuple):
    patterns: tuple[Any, ...]  # compiled alternations, tried in order (lark splits long ones)
    ignore: frozenset[str]
    newline: frozenset[str]  # terminals whose text may contain a newline
    callbacks: dict[str, Callable[[Token], Token]]


class FastContextualLexer:
    def __init__(self, inner: ContextualLexer) -> None:
        self.inner = inner
        self.states: dict[int, _StateLexer] = {}

    def _state(self, state: int) -> _StateLexer:
        basic = self.inner.lexers[state]
        scanner = basic.scanner  # built on first use, with the callback table
        table = _StateLexer(tuple(scanner._mres), basic.ignore_types, basic.newline_types, dict(basic.callback))
        self.states[state] = table
        return table

    def lex(self, lexer_state: LexerState, parser_state: Any) -> Iterator[Token]:
        text = lexer_state.text.text
        end = lexer_state.text.end
        counter = lexer_state.line_ctr
        states = self.states
        while counter.char_pos < end:
            state = parser_state.position
            table = states.get(state) or self._state(state)
            pos = counter.char_pos
            for pattern in table.patterns:
                match = pattern.match(text, pos, end)
                if match:
                    break
            else:
                yield from self.inner.lex(lexer_state, parser_state)  # lark raises its own error here
                return
            value = match.group(0)
            kind = match.lastgroup
            line, column = counter.line, counter.column
            if kind in table.newline:
                newlines = value.count("\n")
                if newlines:
                    counter.line += newlines
                    counter.line_start_pos = pos + value.rindex("\n") + 1
            counter.char_pos = pos + len(value)
            counter.column = counter.char_pos - counter.line_start_pos + 1
            callback = table.callbacks.get(kind)
            ignored = kind in table.ignore
            if ignored and callback is None:
                continue
            token = _new_token(kind, value, pos, line, column, counter.line, counter.column, counter.char_pos)
            if callback is not None:
                token = callback(token)
            if not ignored:
                lexer_state.last_token = token
                yield token


def install(parser: Lark) -> Lark:
    """Put the fast loop in front of `parser`'s contextual lexer."""
    frontend = parser.parser
    if not isinstance(frontend.lexer, ContextualLexer):
        raise TypeError(f"expected lark's contextual lexer, found {type(frontend.lexer).__name__}")
    frontend.lexer = FastContextualLexer(frontend.lexer)
    return parser
