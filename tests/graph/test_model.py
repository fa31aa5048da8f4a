"""The drawing model: a node per call site, stable ids, placeholders for empty clusters."""

from __future__ import annotations

import pytest

from tests.graph.helpers import MODEL_NAMES, checked, drawing
from wgc.check import check_source
from wgc.graph import build_graph
from wgc.graph import model as m
from wgc.lang import ast


def _calls(node: object) -> int:
    """Component calls in a walk body (every `comp.entry(...)`, nested ones included)."""
    if isinstance(node, ast.Call):
        return 1 + sum(_calls(a) for a in node.args) + sum(_calls(k.value) for k in node.kwargs)
    if isinstance(node, tuple):
        return sum(_calls(x) for x in node)
    if isinstance(node, ast.Node):
        return sum(_calls(getattr(node, f)) for f in node.__dataclass_fields__ if f != "span")
    return 0


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_one_node_per_call_site(model: str) -> None:
    program = checked(model).program
    assert program is not None
    expected = sum(_calls(w.body) for w in program.of(ast.Walk))
    assert sum(n.kind == m.CALL for n in drawing(model).nodes()) == expected


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_ids_are_unique(model: str) -> None:
    g = drawing(model)
    nodes = [n.id for n in g.nodes()]
    clusters = [c.id for c in g.all_clusters()]
    assert len(set(nodes)) == len(nodes) and len(set(clusters)) == len(clusters)
    assert {e.src for e in g.edges} | {e.dst for e in g.edges} <= set(nodes)


def test_fork_is_drawn_on_its_component() -> None:
    labels = [n.lines[0] for n in drawing("bagel").nodes() if n.kind == m.FORK]
    assert labels == ["llm.fork [cfg_text <- main]"] * 2


def test_a_cluster_without_calls_gets_a_placeholder() -> None:
    source = """
model tiny
import m.x as x
param n: int = 2 in 1..4
component c: x.C engine stateless {
    f(v: scalar) -> scalar
}
walk w() {
    a = c.f(1)
    loop n as i carry a {
        a = a + i
    } yield terminal a
    emit tensor c.f(a)
}
flow {
    start -> w -> done
}
"""
    result = check_source(source, "tiny.walk")
    assert result.ok, [d.message for d in result.diagnostics if d.is_error]
    assert result.program is not None and result.symbols is not None
    g = build_graph(result.program, result.symbols)
    (loop,) = [c for c in g.all_clusters() if c.kind == m.LOOP]
    assert [n.kind for n in loop.nodes] == [m.EMPTY]
    # the value still flows through the loop: from the first call to the last one
    first, last = [n.id for n in g.nodes() if n.kind == m.CALL]
    assert any(e.src == first and e.dst == last and e.label == "a" for e in g.edges)
