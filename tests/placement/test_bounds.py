"""Hostile placement values: each is a located diagnostic within a second, never a crash or a hang.

The examples live in errors/ with their expected diagnostics (test_errors.py); here each is compiled
with the real Orpheus program through `compile_program`, as `wgc compile` does, and timed.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.placement.helpers import HERE
from wgc.compile import compile_program

ROOT = HERE.parents[1]
HOSTILE = [
    "ranks_too_many",  # MemoryError
    "ranks_overflow",  # OverflowError
    "ranks_ten_million",  # over a minute
    "rank_range_huge",  # memory without bound
    "kv_below_one_page",  # every request would fail
    "size_too_large",  # the rank dies at start
    "max_batch_too_large",
    "integer_overflow",  # OverflowError when the plan is written
    "unbounded_rank_overflow",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_value_is_a_located_diagnostic_not_a_hang(name: str) -> None:
    placement = HERE / "errors" / f"{name}.toml"
    source = ROOT / "models" / "orpheus.walk"
    # bounded by a hang guard, not timed: before the bounds these took minutes or grew without end
    pool = ThreadPoolExecutor(1)
    try:
        result = pool.submit(compile_program, str(source), source.read_text(), str(placement)).result(timeout=10)
    finally:
        pool.shutdown(wait=False)  # a hung compile must not hold the test at exit
    assert result.data is None and result.diagnostics
    for d in result.diagnostics:
        assert Path(d.span.file).resolve() == placement.resolve() and d.span.line > 0, d


def test_a_size_with_four_hundred_digits_is_refused_not_overflowed(tmp_path: Path) -> None:
    placement = tmp_path / "p.toml"
    placement.write_text('[cluster]\ndevice = "cpu"\nranks = 1\n[defaults]\nranks = 0\n'
                         f'engine = {{ kv_memory = "{"9" * 400}TiB" }}\n')
    source = ROOT / "models" / "orpheus.walk"
    (d,) = compile_program(str(source), source.read_text(), str(placement)).diagnostics
    assert d.code == "P003" and (d.span.line, d.span.column) == (6, 24)
    assert "is more than any rank can hold" in d.message and len(d.message) < 120
