"""Shared by the graph tests: the shipped models (with the placements drawn for them), drawn once."""

from __future__ import annotations

import functools
from pathlib import Path

from tests.graph.dot_reader import Dot, read_dot
from wgc.check import CheckResult, check_source
from wgc.graph import Graph, build_graph, render
from wgc.placement.load import load_placement

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"
PLACEMENTS = ROOT / "placements"

MODEL_NAMES = tuple(sorted(p.stem for p in MODELS.glob("*.walk")))
# (model, placement or None): every model alone, and the placements the issue names.
PLACED = (("bagel", "cpu3.toml"), ("qwen3_omni", "2xh200.toml"))
CASES = tuple((m, None) for m in MODEL_NAMES) + PLACED


def case_id(case: tuple[str, str | None]) -> str:
    return case[0] + (f"+{case[1]}" if case[1] else "")


@functools.cache
def checked(model: str) -> CheckResult:
    path = MODELS / f"{model}.walk"
    result = check_source(path.read_text(encoding="utf-8"), str(path))
    assert result.ok, [f"{d.span}: {d.message}" for d in result.diagnostics if d.is_error]
    return result


@functools.cache
def drawing(model: str, placement: str | None = None) -> Graph:
    result = checked(model)
    assert result.program is not None and result.symbols is not None
    loaded = None
    if placement is not None:
        loaded, diags = load_placement(PLACEMENTS / placement, result.program)
        assert loaded is not None, [f"{d.span}: {d.message}" for d in diags]
    return build_graph(result.program, result.symbols, loaded)


@functools.cache
def dot_text(model: str, placement: str | None = None) -> str:
    return render(drawing(model, placement), ".dot").decode("utf-8")


@functools.cache
def mermaid_text(model: str, placement: str | None = None) -> str:
    return render(drawing(model, placement), ".mmd").decode("utf-8")


@functools.cache
def dot(model: str, placement: str | None = None) -> Dot:
    return read_dot(dot_text(model, placement))


def clusters_labelled(d: Dot, prefix: str) -> list[str]:
    return [name for name, c in d.clusters.items() if c.attrs.get("label", "").startswith(prefix)]


def walk_cluster(d: Dot, walk: str) -> str:
    (name,) = clusters_labelled(d, f"walk {walk}(")
    return name
