"""The parser run lark's own way, as the yardstick for `parser.parse`: a parse tree with lark's
positions (`propagate_positions`), then a Transformer handing the same AstBuilder methods those
positions. Same grammar, lexer callbacks and error recovery; lark's public API only.

Not used to parse programs: tests/lang/test_fast_parser.py checks that `parse` gives the same AST,
spans, comments and errors, and bench/compile_speed.py times the two side by side.
"""

from __future__ import annotations

import functools
from typing import Any

from lark import Lark, Transformer
from lark.exceptions import UnexpectedInput

from wgc.lang import parser as fast
from wgc.lang.builder import AstBuilder, current_file
from wgc.lang.grammar_cache import grammar_text


class _TreeBuilder(Transformer):
    """The AstBuilder's methods over lark's tree, `meta` turned into the builder's position tuple."""

    def __init__(self) -> None:
        super().__init__()
        self.builder = AstBuilder()

    def __default__(self, data: Any, children: list[Any], meta: Any) -> Any:
        method = getattr(self.builder, str(data))
        position = None if meta.empty else (meta.line, meta.column, meta.end_line, meta.end_column)
        return method(position, children)


@functools.cache
def _lark() -> Lark:
    callbacks = {"COMMENT": fast._collect_comment, "NAME": fast._reserve_declaration_words}
    return Lark(grammar_text(), parser="lalr", lexer="contextual", propagate_positions=True,
                maybe_placeholders=True, lexer_callbacks=callbacks)


def reference_parse(text: str, file: str = "<input>") -> tuple[Any, list[Any], UnexpectedInput | None]:
    """(program, comments, None), or (None, comments, the syntax error lark raised)."""
    sink: list[Any] = []
    file_token = current_file.set(file)
    comments_token = fast._comments.set(sink)
    try:
        tree = _lark().parse(text, on_error=fast._keyword_as_name)
        return _TreeBuilder().transform(tree), sink, None
    except UnexpectedInput as err:
        return None, sink, err
    finally:
        current_file.reset(file_token)
        fast._comments.reset(comments_token)
