"""bench/lsp_mapping.py stays runnable and compares like with like. No timing is asserted here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from wgc.lsp.mapping import TextMap

BENCH = Path(__file__).resolve().parents[2] / "bench" / "lsp_mapping.py"


def test_the_cases_and_the_baseline_blocks_read_the_same_text() -> None:
    spec = importlib.util.spec_from_file_location("bench_lsp_mapping", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    cases = bench.cases()
    assert set(cases) == {"one brace deleted", "10 lines + brace", "200 scattered edits", "adversarial (600 lines)"}
    old, new = cases["200 scattered edits"]
    assert old.count("\n") >= 2000
    baseline = bench.line_blocks(old, new)
    assert all(old[a:a + n] == new[b:b + n] for a, b, n in baseline)
    # the point of the bench: line-level matching loses most of a text edited in many places
    assert bench.matched_share(old, TextMap(old, new).blocks) > 0.9 > bench.matched_share(old, baseline)
