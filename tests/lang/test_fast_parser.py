"""The written-out parser loops (reduce_spans, fast_lexer, fast_lalr) against lark run its own way.

The reference (wgc/lang/reference_parser.py) uses lark's public API only: the same grammar, the
same lexer callbacks and error recovery, `propagate_positions=True`, a parse tree, then a
Transformer that hands the same AstBuilder methods lark's positions. For every input — the shipped models, every
test program, and a few hundred mutations of them — the two must give the same AST with the same
span on every node, the same comments, or a syntax error at the same place.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest

from wgc.lang import parser as fast
from wgc.lang.reference_parser import reference_parse

ROOT = Path(__file__).resolve().parents[2]
# Programs nested too deep are rejected before either parser runs: nothing to compare.
PROGRAMS = sorted(p for p in {*ROOT.glob("models/*.walk"), *ROOT.glob("tests/**/*.walk")}
                  if fast._too_deep(p.read_text(), "t.walk") is None)


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
    program, comments, error = reference_parse(text, "t.walk")
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
