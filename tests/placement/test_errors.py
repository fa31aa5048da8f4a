"""Placement errors by example: errors/NAME.toml with NAME.expected beside it.

NAME.expected: a `program: NAME` line (a stand-in in programs/), then one line per diagnostic,
`CODE LINE:COL text` (in NAME.toml) or `CODE PATH:LINE:COL text` (PATH relative to errors/),
where `text` must occur in the message or its help lines. The example must give exactly these
diagnostics, no more.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.placement.helpers import HERE, rendered, stand_in
from wgc.placement import PLACEMENT_CODES, load_placement

ERRORS = HERE / "errors"
EXAMPLES = sorted(ERRORS.glob("*.toml"))


@dataclass(frozen=True)
class Expected:
    code: str
    file: Path
    line: int
    column: int
    text: str


def read_expected(example: Path) -> tuple[str, list[Expected]]:
    program, out = None, []
    for raw in example.with_suffix(".expected").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("program:"):
            program = line.split(":", 1)[1].strip()
            continue
        code, where, text = line.split(" ", 2)
        *path, row, col = where.split(":")
        file = (ERRORS / path[0]) if path else example
        out.append(Expected(code, file.resolve(), int(row), int(col), text))
    assert program, f"{example.name}: the .expected file names no program"
    return program, out


def _matches(e: Expected, d) -> bool:
    text = "\n".join((d.message, *d.help))
    same_place = Path(d.span.file).resolve() == e.file and (d.span.line, d.span.column) == (e.line, e.column)
    return d.code == e.code and same_place and e.text in text


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_error_example(example: Path) -> None:
    program, expected = read_expected(example)
    placement, diags = load_placement(example, stand_in(program))
    assert placement is None
    left = list(diags)
    for e in expected:
        hit = next((d for d in left if _matches(e, d)), None)
        assert hit is not None, f"expected {e} among:\n{rendered(diags)}"
        left.remove(hit)
    assert not left, f"unexpected diagnostics:\n{rendered(left)}"


def test_every_example_has_an_expected_file() -> None:
    assert EXAMPLES
    missing = [p.name for p in EXAMPLES if not p.with_suffix(".expected").exists()]
    assert not missing


def test_every_code_has_an_example() -> None:
    used = {e.code for p in EXAMPLES for e in read_expected(p)[1]}
    assert set(PLACEMENT_CODES) <= used, sorted(set(PLACEMENT_CODES) - used)


def test_every_code_is_documented() -> None:
    doc = (HERE.parents[1] / "docs" / "placement.md").read_text(encoding="utf-8")
    for code, info in PLACEMENT_CODES.items():
        assert code in doc and info.slug in doc, code
