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

import functools
import re
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from lark import Lark, Token
from lark.lexer import CallChain, ContextualLexer, LexerState, UnlessCallback

_new_token = Token._future_new  # the constructor without the keyword-argument checks of Token.__new__


class _StateLexer(NamedTuple):
    patterns: tuple[Any, ...]  # compiled alternations, tried in order (lark splits long ones)
    skip: Any  # a compiled regex of the ignored terminals without callbacks (whitespace), or None
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
        callbacks = {kind: _faster(callback) for kind, callback in basic.callback.items()}
        # Ignored terminals nobody watches (whitespace) are skipped with one shared regex before
        # the state's own: no loop turn for the 40% of matches in a program that are whitespace.
        skipped = sorted(t.pattern.to_regexp() for t in basic.terminals
                         if t.name in basic.ignore_types and t.name not in callbacks)
        skip = _skip_pattern("|".join(f"(?:{r})" for r in skipped)) if skipped else None
        table = _StateLexer(tuple(scanner._mres), skip, basic.ignore_types, basic.newline_types, callbacks)
        self.states[state] = table
        return table

    def lex(self, lexer_state: LexerState, parser_state: Any) -> Iterator[Token]:
        text = lexer_state.text.text
        end = lexer_state.text.end
        counter = lexer_state.line_ctr
        states = self.states
        stack = parser_state.state_stack  # its top is the parser's state (ParserState.position)
        # The counter lives in locals between tokens and is written back before every yield, so it
        # is exact whenever the parser holds control (an error, a resumed parse read it).
        pos, line, line_start = counter.char_pos, counter.line, counter.line_start_pos
        while pos < end:
            table = states.get(stack[-1]) or self._state(stack[-1])
            if table.skip is not None:
                blank = table.skip.match(text, pos, end)
                if blank:
                    start = blank.end()
                    newlines = text.count("\n", pos, start)
                    if newlines:
                        line += newlines
                        line_start = text.rfind("\n", pos, start) + 1
                    pos = start
                    if pos >= end:
                        break
            for pattern in table.patterns:
                match = pattern.match(text, pos, end)
                if match:
                    break
            else:
                counter.char_pos, counter.line, counter.line_start_pos = pos, line, line_start
                counter.column = pos - line_start + 1
                yield from self.inner.lex(lexer_state, parser_state)  # lark raises its own error here
                return
            kind = match.lastgroup
            value = match.group(0)
            start, start_line, start_column = pos, line, pos - line_start + 1
            pos = match.end()
            if kind in table.newline:
                newlines = value.count("\n")
                if newlines:
                    line += newlines
                    line_start = start + value.rindex("\n") + 1
            callback = table.callbacks.get(kind)
            ignored = kind in table.ignore
            if ignored and callback is None:
                continue
            column = pos - line_start + 1
            token = _new_token(kind, value, start, start_line, start_column, line, column, pos)
            if callback is not None:
                token = callback(token)
            if not ignored:
                counter.char_pos, counter.line, counter.line_start_pos, counter.column = pos, line, line_start, column
                lexer_state.last_token = token
                yield token
        counter.char_pos, counter.line, counter.line_start_pos = pos, line, line_start
        counter.column = pos - line_start + 1


@functools.cache
def _skip_pattern(regex: str) -> re.Pattern[str]:
    return re.compile(f"(?:{regex})+")


def _faster(callback: Callable[[Token], Token]) -> Callable[[Token], Token]:
    """lark's keyword check on a NAME (`UnlessCallback`: a regex fullmatch over the keywords this
    state accepts, retyping a NAME that is one) as a dict lookup, when every keyword is a plain
    string; chained to the user's NAME callback as lark chains it (only a NAME that stayed a NAME
    goes on). Any other callback is returned as it is."""
    unless, then = callback, None
    if isinstance(callback, CallChain):
        unless, then = callback.callback1, callback.callback2
    if not isinstance(unless, UnlessCallback):
        return callback
    terms = unless.scanner.terminals
    if unless.scanner.g_regex_flags or any(t.pattern.type != "str" or t.pattern.flags for t in terms):
        return callback
    keywords = {t.pattern.value: t.name for t in terms}

    def retype(token: Token) -> Token:
        kind = keywords.get(token)
        if kind is not None:
            token.type = kind
            return token
        return then(token) if then is not None else token

    return retype


def install(parser: Lark) -> Lark:
    """Put the fast loop in front of `parser`'s contextual lexer."""
    frontend = parser.parser
    if not isinstance(frontend.lexer, ContextualLexer):
        raise TypeError(f"expected lark's contextual lexer, found {type(frontend.lexer).__name__}")
    frontend.lexer = FastContextualLexer(frontend.lexer)
    return parser
