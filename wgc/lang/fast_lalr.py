"""lark's LALR parser loop with its tables flattened: the same actions, without a Rule lookup per step.

lark's loop feeds each token through `ParserState.feed_token`, which looks every reduction's
callback up by its Rule object (a hash and an equality test written in Python) and the rule's size
and name through attributes. Here the parse table is compiled once into plain tuples — per state,
per symbol: shift to a state, or reduce (size, name, callback) — and the loop runs inline. A unit
rule (`?expr: or_expr`, a dozen of them per expression) is only a goto: the value on the stack
stays where it is. It works
on lark's own ParserState (its stacks, its lexer), so whenever a token has no action the token is
handed to lark's `feed_token`, which raises lark's error with its expected set from that very
state, and error recovery (`on_error`, the interactive parser) proceeds exactly as in lark.
"""

from __future__ import annotations

from typing import Any

from lark import Lark, Token
from lark.exceptions import UnexpectedInput
from lark.parsers.lalr_analysis import Shift
from lark.parsers.lalr_interactive_parser import InteractiveParser
from lark.parsers.lalr_parser import _Parser
from lark.parsers.lalr_parser_state import ParserState

from wgc.lang.reduce_spans import only_child

# per state: symbol → (True, next state, terminal callback or None) | (False, size, rule name, callback)
_UNIT = -1  # the size of a unit rule whose value is its child's (reduce_spans.only_child): a goto only


class FlatLalrParser(_Parser):
    def __init__(self, inner: _Parser) -> None:
        super().__init__(inner.parse_table, inner.callbacks, inner.debug)
        self.actions = _FlatActions(inner.parse_table.states, inner.callbacks)

    def parse_from_state(self, state: ParserState, last_token: Token | None = None) -> Any:
        actions = self.actions
        states, values = state.state_stack, state.value_stack
        token = last_token
        try:
            for token in state.lexer.lex(state):
                kind = token.type
                while True:
                    step = actions[states[-1]].get(kind)
                    if step is None:
                        state.feed_token(token)  # no action: lark raises UnexpectedToken from this state
                        raise AssertionError(f"lark accepted {kind} where its table has no action")
                    if step[0]:  # shift
                        states.append(step[1])
                        values.append(token if step[2] is None else step[2](token))
                        break
                    _, size, name, callback = step  # reduce, then the goto on the rule's name
                    if size is _UNIT:  # `?expr: or_expr`: the value stays, only the state changes
                        states[-1] = actions[states[-2]][name][1]
                        continue
                    if size:
                        children = values[-size:]
                        del states[-size:]
                        del values[-size:]
                    else:
                        children = []
                    value = callback(children)
                    states.append(actions[states[-1]][name][1])
                    values.append(value)
            end = Token.new_borrow_pos("$END", "", token) if token else Token("$END", "", 0, 1, 1)
            return state.feed_token(end, True)
        except UnexpectedInput as err:
            err.interactive_parser = InteractiveParser(self, state, state.lexer)
            raise


class _FlatActions(dict):
    """state → its flattened row, built the first time the parser enters the state: a small
    program visits a fraction of the states, and a cold `wgc check` pays only for those."""

    def __init__(self, states: dict[int, dict[str, tuple[Any, Any]]], callbacks: dict[Any, Any]) -> None:
        super().__init__()
        self.states = states
        self.callbacks = callbacks

    def __missing__(self, state: int) -> dict[str, tuple[Any, ...]]:
        callbacks = self.callbacks
        flat: dict[str, tuple[Any, ...]] = {}
        for symbol, (action, arg) in self.states[state].items():
            if action is Shift:
                flat[symbol] = (True, arg, callbacks.get(symbol))
            elif callbacks[arg] is only_child:
                flat[symbol] = (False, _UNIT, arg.origin.name, None)
            else:
                flat[symbol] = (False, len(arg.expansion), arg.origin.name, callbacks[arg])
        self[state] = flat
        return flat


def install(parser: Lark) -> Lark:
    """Run `parser`'s LALR loop through the flattened tables (after its callbacks are final)."""
    lalr = parser.parser.parser  # ParsingFrontend → LALR_Parser
    lalr.parser = FlatLalrParser(lalr.parser)
    return parser
