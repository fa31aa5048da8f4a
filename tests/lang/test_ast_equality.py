"""AST nodes compare and hash as dataclass-generated methods would: every field but the spans, in
order, and never equal to a node of another class (wgc/lang/ast.py writes __eq__ and __hash__ once
on Node instead of generating them per class). The oracle is independent of that code: two nodes
of one class are equal exactly when their reprs are (the repr shows the compared fields)."""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from pathlib import Path
from typing import Any

from wgc.lang import ast
from wgc.lang.parser import parse
from wgc.lang.span import Span

ROOT = Path(__file__).resolve().parents[2]


def _nodes(value: Any) -> list[ast.Node]:
    if isinstance(value, ast.Node):
        out = [value]
        for f in dataclasses.fields(value):
            out += _nodes(getattr(value, f.name))
        return out
    if isinstance(value, tuple):
        return [n for item in value for n in _nodes(item)]
    return []


def _programs() -> list[ast.Program]:
    out = []
    for path in sorted({*ROOT.glob("models/*.walk"), *ROOT.glob("tests/**/*.walk")}):
        program = parse(path.read_text(encoding="utf-8"), str(path)).program
        if program is not None:
            out.append(program)
    return out


def test_a_node_equals_its_twin_from_another_file_and_hashes_alike() -> None:
    text = (ROOT / "models" / "bagel.walk").read_text(encoding="utf-8")
    one, two = parse(text, "a.walk").program, parse("\n\n" + text, "b.walk").program
    assert one is not None and two is not None and one.span != two.span
    assert one == two and hash(one) == hash(two)
    for a, b in zip(_nodes(one), _nodes(two)):
        assert a == b and hash(a) == hash(b) and not (a != b)


def test_nodes_are_equal_exactly_when_their_compared_fields_are() -> None:
    by_class: dict[type, list[ast.Node]] = defaultdict(list)
    for program in _programs():
        for node in _nodes(program):
            by_class[type(node)].append(node)
    assert len(by_class) > 30
    equal_pairs = unequal_pairs = 0
    for nodes in by_class.values():
        sample = list({repr(n): n for n in nodes}.values())[:25] + nodes[:5]  # distinct values, some repeats
        for a, b in itertools.combinations(sample, 2):
            same = repr(a) == repr(b)
            assert (a == b) is same and (a != b) is not same, (a, b)
            if same:
                assert hash(a) == hash(b)
            equal_pairs += same
            unequal_pairs += not same
    assert equal_pairs > 20 and unequal_pairs > 1000


def test_nodes_of_different_classes_are_never_equal() -> None:
    span = Span("x.walk", 1, 1, 1, 2)
    assert ast.IntLit(span, 1) != ast.DimInt(span, 1)
    assert ast.Name(span, "a") != "a" and ast.Name(span, "a") == ast.Name(Span("y", 2, 2, 2, 3), "a")
    assert dataclasses.replace(ast.Name(span, "a"), id="b") != ast.Name(span, "a")
