"""Mermaid output: a flowchart with a subgraph per walk and the same edges as the DOT output."""

from __future__ import annotations

import re

import pytest

from tests.graph.helpers import CASES, case_id, checked, dot, mermaid_text
from wgc.lang import ast

EDGE = re.compile(r"^\s*(n\d+) (-->|==>|-\.->)(?:\|\"[^\"]*\"\|)? (n\d+)$")
SUBGRAPH = re.compile(r'^\s*subgraph (c\d+)\["([^"]*)"\]$')


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_flowchart_with_a_subgraph_per_walk(case: tuple[str, str | None]) -> None:
    lines = mermaid_text(*case).splitlines()
    assert "flowchart TD" in lines
    titles = [m.group(2) for m in map(SUBGRAPH.match, lines) if m]
    program = checked(case[0]).program
    assert program is not None
    for w in program.of(ast.Walk):
        assert sum(t.startswith(f"walk {w.name}(") for t in titles) == 1
    opened = sum(1 for line in lines if line.lstrip().startswith("subgraph "))
    assert opened == sum(1 for line in lines if line.strip() == "end") == len(titles)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_same_edges_as_dot(case: tuple[str, str | None]) -> None:
    edges = [m.groups() for m in map(EDGE.match, mermaid_text(*case).splitlines()) if m]
    assert len(edges) == len(dot(*case).visible_edges())
    assert [(a, b) for a, _, b in edges] == [(a, b) for a, b, _ in dot(*case).visible_edges()]


def test_edge_styles() -> None:
    text = mermaid_text("orpheus")
    assert re.search(r'-\.->\|"codes: sliding\(window=28, stride=7\) at_end drop"\|', text)
    assert "==>" in text  # the decode loop's carried token


def test_branches_laid_out_left_to_right_and_placement_fills() -> None:
    text = mermaid_text("bagel", "cpu3.toml")
    parallel = text.index('["parallel"]')
    assert text[parallel:].splitlines()[1].strip() == "direction LR"
    fills = set(re.findall(r"^\s*style n\d+ fill:(#[0-9a-f]{6})$", text, re.M))
    assert len(fills) == 3
