"""Golden schedules: `wgc inspect` text for every (model, placement) pair that compiles.

A refactor that changes no schedule shows no golden diff. After an intended
change, regenerate with `WGC_UPDATE_GOLDEN=1 python -m pytest tests/lower/test_golden.py`
and review the diff.
"""

from __future__ import annotations

import os

import pytest

from tests.lower.golden_pairs import PAIRS, ROOT, golden_path, paths
from wgc.compile import compile_program
from wgc.plan.text import plan_text


@pytest.mark.parametrize(("model", "placement"), PAIRS, ids=[f"{m}-{p}" for m, p in PAIRS])
def test_schedule_matches_golden(model: str, placement: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    source, place = paths(model, placement)
    result = compile_program(source, (ROOT / source).read_text(), place)
    assert result.plan is not None and result.data is not None, [d.message for d in result.diagnostics]
    text = plan_text(result.plan)
    golden = golden_path(model, placement)
    if os.environ.get("WGC_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.exists(), f"no golden file {golden.name}: run with WGC_UPDATE_GOLDEN=1"
    assert text == golden.read_text(), f"schedule for {model} on {placement} differs from {golden.name}"


def test_every_golden_file_has_a_pair() -> None:
    """A golden file whose pair was removed would never be checked again."""
    expected = {golden_path(m, p).name for m, p in PAIRS}
    present = {p.name for p in (ROOT / "tests" / "golden").glob("*.txt")}
    assert present == expected
