"""Source spans for AST nodes built inside lark's LALR parser, without a parse tree.

lark can run a transformer inside the parser (each rule's method called as the rule is reduced),
but it then cannot hand the method positions (meta), and its own position tracking builds a Meta
object per reduction — together with the tree the builder walked afterwards, two thirds of the
parse time. Here every reduction callback of the parser is wrapped instead: the wrapper sees the
rule's children before lark filters out keywords and punctuation, so the span runs from the first
to the last token of the rule, keywords included, and leaves it where the builder's method reads it
(`parse_state().position`).

A child's position comes from a token, an AST node's `span`, an inlined rule's tree (from its own
children, when asked), or a table kept for the duration of one parse: for values that carry no
span (a tuple of names) and for a node passed up through brackets, whose parent spans from the
opening bracket (lark's "container" position). Rules marked `?` that reduce to their only child are passed straight through: the child
is positioned already. Positions are plain tuples (line, column, end_line, end_column); the builder turns the
few it keeps into `Span`s.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from lark import Lark, Token, Tree

Position = tuple[int, int, int, int]


class _ParseState(threading.local):
    def __init__(self) -> None:
        self.position: Position | None = None  # the span of the rule being reduced
        self.unmarked: dict[int, tuple[Any, Position]] | None = None  # id → (value, its position)


_state = _ParseState()


def parse_state() -> _ParseState:
    """This thread's state: `.position` is the span of the rule whose builder method is running
    (None for a rule that matched nothing)."""
    return _state


@contextmanager
def positions() -> Iterator[None]:
    """One parse: the table of positions for values without a span lives as long as it does."""
    outer = _state.unmarked
    _state.unmarked = {}
    try:
        yield
    finally:
        _state.unmarked = outer


def install(parser: Lark) -> Lark:
    """Wrap every reduction callback of an LALR `parser` (built without propagate_positions)."""
    lalr = parser.parser.parser.parser  # ParsingFrontend → LALR_Parser → _Parser
    for rule, callback in list(lalr.callbacks.items()):
        passes_child = bool(rule.options.expand1) and not rule.alias
        if passes_child and _is_unit(rule):
            lalr.callbacks[rule] = only_child  # `?expr: or_expr`: nothing to build, nothing to position
        elif _inlined_without_filtering(rule):
            pass  # its tree (spliced into the parent) is positioned from its children when asked
        else:
            lalr.callbacks[rule] = _wrap(callback, passes_child)
    return parser


only_child = operator.itemgetter(0)  # the value of a unit rule (fast_lalr skips calling it at all)


def _inlined_without_filtering(rule: Any) -> bool:
    """An inlined rule (`_stmt`, a repetition lark generates) that keeps all its symbols: its tree's
    children are all it matched, so their first and last positions are its span."""
    return rule.origin.name.startswith("_") and not any(s.is_term and s.filter_out for s in rule.expansion)


def _is_unit(rule: Any) -> bool:
    """A rule of exactly one nonterminal that lark keeps (not an inlined `_rule`): its value is its child's."""
    if len(rule.expansion) != 1:
        return False
    symbol = rule.expansion[0]
    return not symbol.is_term and not symbol.name.startswith("_")


def _wrap(callback: Callable[[list[Any]], Any], passes_child: bool) -> Callable[[list[Any]], Any]:
    state = _state

    def reduce(children: list[Any]) -> Any:
        if passes_child and len(children) == 1:
            return callback(children)  # `?rule` with one child: the child itself, positioned already
        position = _span_of(children, state.unmarked)
        state.position = position
        value = callback(children)
        if position is not None and value is not None and type(value) is not Token:
            # A value without a span, or a child passed up through brackets (`(a + b)`): its parent
            # spans from where this rule starts, brackets included, as lark's own positions do.
            if passes_child or not hasattr(value, "span"):
                unmarked = state.unmarked
                if unmarked is not None:
                    unmarked[id(value)] = (value, position)  # kept alive, so its id stays unique
        return value

    return reduce


def _span_of(children: list[Any], unmarked: dict[int, tuple[Any, Position]] | None) -> Position | None:
    first = last = None
    for child in children:
        first = _position(child, unmarked)
        if first is not None:
            break
    if first is None:
        return None
    for child in reversed(children):
        last = _position(child, unmarked)
        if last is not None:
            break
    assert last is not None  # a positioned child exists: the first one
    return (first[0], first[1], last[2], last[3])


def _position(value: Any, unmarked: dict[int, tuple[Any, Position]] | None) -> Position | None:
    if type(value) is Token:
        return (value.line, value.column, value.end_line, value.end_column)  # type: ignore[return-value]
    if value is None:
        return None
    if unmarked is not None:
        entry = unmarked.get(id(value))
        if entry is not None:
            return entry[1]
    span = getattr(value, "span", None)
    if span is not None:
        return (span.line, span.column, span.end_line, span.end_column)
    if type(value) is Tree:  # an inlined rule's, left unpositioned at its reduction
        return _span_of(value.children, unmarked)
    return None
