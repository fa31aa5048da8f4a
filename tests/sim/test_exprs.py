"""The mock's value rules: operators, indexing, consts, hashing that is stable across processes."""

from __future__ import annotations

import pytest

from wgc.plan.model import EBinary, EConst, EIndex, ELit, EParam, EPartKind, EReq, EResult, EUnary, EVal
from wgc.semantics.mock import MockComponent, MockEngine, const_value, digest, mock_input, small
from wgc.semantics.mock_exprs import WRAP, binary, evaluate, index, unary


class Env:
    def value(self, name: str) -> object:
        return {"x": 5, "xs": [4, 6, 8]}[name]

    def param(self, name: str) -> object:
        return {"steps": 3}[name]

    def const(self, component: str, name: str) -> object:
        return 7

    def request(self, field: str) -> object:
        return {"outputs": frozenset({"audio"}), "task": "go"}[field]

    def result(self, walk: str) -> object:
        return 11

    def part_kind(self) -> str:
        return "image"


@pytest.mark.parametrize(("expr", "want"), [
    (EBinary("+", EVal("x"), EParam("steps")), 8),
    (EBinary("-", ELit(1), ELit(3)), WRAP - 2),
    (EBinary("*", ELit(2**30), ELit(4)), 0),
    (EBinary("/", ELit(7), ELit(2)), 3),
    (EBinary("/", ELit(7.0), ELit(2)), 3.5),
    (EBinary("/", ELit(7), ELit(0)), 0),
    (EBinary("%", ELit(7), ELit(0)), 0),
    (EBinary("==", EConst("m", "eos"), ELit(7)), True),
    (EBinary("in", ELit("audio"), EReq("outputs")), True),
    (EBinary("and", EBinary("==", EReq("task"), ELit("go")), EUnary("not", ELit(False))), True),
    (EBinary("or", ELit(False), ELit(0)), False),
    (EIndex(EVal("xs"), ELit(4)), 6),
    (EBinary("==", EPartKind(), ELit("image")), True),
    (EResult("w"), 11),
    (EUnary("-", ELit(3)), WRAP - 3),
    (EUnary("-", ELit(2.5)), -2.5),
])
def test_evaluate(expr: object, want: object) -> None:
    assert evaluate(expr, Env()) == want


def test_values_the_mock_cannot_combine_hash_instead_of_failing() -> None:
    assert binary("+", [1, 2], 3) == small("+", [1, 2], 3)
    assert binary("<", None, 3) in (True, False)
    assert unary("-", None) == small("neg", None)
    assert index(5, 2) == small("index", 5, 2)
    assert index([], 0) is None
    assert binary("in", "a", 5) is False
    with pytest.raises(ValueError, match="unknown operator"):
        binary("**", 1, 2)


def test_hashes_are_stable() -> None:
    assert digest("llm", "decode", [1, 2]) == 6936037958878865482
    assert mock_input("prompt") == small("input", "prompt")
    assert 0 <= small("anything") < 13


def test_consts() -> None:
    assert const_value("eos", 128258) == 128258 % 13
    assert const_value("flag", True) is True
    assert const_value("name", "llm") == "llm"
    assert const_value("pad", None) == small("const", "pad")
    assert MockComponent("c", False).const("missing") == small("const", "c", "missing")


def test_kv_calls_fold_into_the_label_state() -> None:
    e = MockEngine({"llm": MockComponent("llm", True, ("main", "aux"))})
    first = e.call("llm", "d", [1])
    assert e.call("llm", "d", [1]) != first or e.snapshot("llm", "main") != 0
    before = e.snapshot("llm", "main")
    e.fork("llm", "aux", "main")
    assert e.snapshot("llm", "aux") == before
    assert e.call("llm", "d", [2], "aux") == e.call("llm", "d", [2], "main")
    stateless = MockEngine({"m": MockComponent("m", False)})
    assert stateless.call("m", "f", [1]) == stateless.call("m", "f", [1]) == small("m", "f", [1])
