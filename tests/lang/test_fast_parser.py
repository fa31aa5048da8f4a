"""The written-out parser loops (reduce_spans, fast_lexer, fast_lalr) against lark run its own way.

The reference is built here with lark's public API only: the same grammar, the same lexer
callbacks and error recovery, `propagate_positions=True`, a parse tree, then a Transformer that
hands the same AstBuilder methods lark's positions. For every input — the shipped models, every
test program, and a few hundred mutations of them — the two must give the same AST with the same
span on every node, the same comments, or a syntax error at the same place.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from pathlib import Path
from typing import Any

import pytest
from lark import Lark, Transformer
from lark.exceptions import UnexpectedInput

from wgc.lang import parser as fast
from wgc.lang.builder import AstBuilder, current_file
from wgc.lang.grammar_cache import grammar_text

ROOT = Path(__file__).resolve().parents[2]
# Programs nested too deep are rejected before either parser runs: nothing to compare.
PROGRAMS = sorted(p for p in {*ROOT.glob("models/*.walk"), *ROOT.glob("tests/**/*.walk")}
                  if fast._too_deep(p.read_text(), "t.walk") is None)


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
def _reference() -> Lark:
    callbacks = {"COMMENT": fast._collect_comment, "NAME": fast._reserve_declaration_words}
    return Lark(grammar_text(), parser="lalr", lexer="contextual", propagate_positions=True,
                maybe_placeholders=True, lexer_callbacks=callbacks)


def _reference_parse(text: str) -> tuple[Any, list[Any], UnexpectedInput | None]:
    """(program, comments, None) or (None, comments, the syntax error)."""
    sink: list[Any] = []
    file_token = current_file.set("t.walk")
    comments_token = fast._comments.set(sink)
    try:
        tree = _reference().parse(text, on_error=fast._keyword_as_name)
        return _TreeBuilder().transform(tree), sink, None
    except UnexpectedInput as err:
        return None, sink, err
    finally:
        current_file.reset(file_token)
        fast._comments.reset(comments_token)


def _spans(node: Any, out: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Every node's type, span and plain fields, depth first (spans compare=False in the AST)."""
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        span = getattr(node, "span", None)
        out.append((type(node).__name__, tuple(span) if span is not None else None))
        for f in dataclasses.fields(node):
            if f.name != "span":
                _spans(getattr(node, f.name), out)
    elif isinstance(node, (list, tuple)):
        for item in node:
            _spans(item, out)
    else:
        out.append(node)
    return out


def _agree(text: str) -> None:
    ours = fast.parse(text, "t.walk")
    program, comments, error = _reference_parse(text)
    assert [(c.text, c.span) for c in ours.comments] == [(c.text, c.span) for c in comments]
    if error is None:
        assert ours.program is not None, ours.diagnostics
        assert ours.program == program  # the nodes' fields
        assert _spans(ours.program, []) == _spans(program, [])  # and every span
    else:
        assert ours.program is None
        assert list(ours.diagnostics) == [fast._syntax_diagnostic(error, text, "t.walk")]


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_program_parses_as_with_lark_trees(path: Path) -> None:
    _agree(path.read_text())


def test_mutated_programs_parse_as_with_lark_trees() -> None:
    """Words deleted, duplicated and swapped: valid and broken programs alike agree."""
    rng = random.Random(20261130)
    sources = [p.read_text() for p in ROOT.glob("models/*.walk")]
    broken = 0
    for _ in range(300):
        words = rng.choice(sources).split(" ")
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(words))
            roll = rng.random()
            if roll < 0.4:
                del words[i]
            elif roll < 0.7:
                words.insert(i, rng.choice(words))
            else:
                j = rng.randrange(len(words))
                words[i], words[j] = words[j], words[i]
        text = " ".join(words)
        _agree(text)
        broken += fast.parse(text, "t.walk").program is None
    assert 50 < broken < 300  # both kinds were exercised
