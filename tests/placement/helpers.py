"""Shared by the placement tests: the stand-in programs, the real models, writing placements."""

from __future__ import annotations

import functools
from pathlib import Path

from wgc.lang import ast
from wgc.lang.parser import parse

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PROGRAMS = HERE / "programs"
PLACEMENTS = ROOT / "placements"
MODELS = ROOT / "models"

# Stand-ins mirror the five models' component, walk, branch and stream names.
STAND_INS = ("bagel", "orpheus", "qwen3_omni", "vjepa2_ac", "pi05")


def parse_file(path: Path) -> ast.Program:
    result = parse(path.read_text(encoding="utf-8"), str(path))
    assert result.program is not None, [str(d.span) + " " + d.message for d in result.diagnostics]
    return result.program


@functools.cache
def stand_in(name: str) -> ast.Program:
    return parse_file(PROGRAMS / f"{name}.walk")


def real_model(name: str) -> ast.Program | None:
    """models/NAME.walk, or None while it is not written yet."""
    path = MODELS / f"{name}.walk"
    return parse_file(path) if path.exists() else None


def write(dir: Path, name: str, text: str) -> Path:
    path = dir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def rendered(diags: list) -> str:
    return "\n".join(f"{d.code} {d.span} {d.message} | {' / '.join(d.help)}" for d in diags)
