"""bench/tp_moe.py --quick runs (two Gloo ranks on 127.0.0.1) and prints its table: for each token count
the baseline and both splits, the elements each all-reduces, the expert split exactly tp 1's output
and the column/row split not. No timing is asserted."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "tp_moe.py"


def test_the_tp_moe_bench_prints_its_table(tmp_path: Path, capsys) -> None:
    spec = importlib.util.spec_from_file_location("bench_tp_moe", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = module.main(["--quick", "--out", str(tmp_path)])
    report = capsys.readouterr().out
    assert [(r["tokens"], r["split"]) for r in rows] == [(n, s) for n in (1, 16) for s in ("tp 1", "experts", "column/row")]
    by = {(r["tokens"], r["split"]): r for r in rows}
    for n in (1, 16):
        assert by[(n, "experts")]["max_diff"] == 0.0  # each expert whole on one rank: tp 1's bits
        assert by[(n, "column/row")]["max_diff"] > 0.0  # every down product's sum split across ranks
        assert by[(n, "experts")]["reduced"] == 4 * by[(n, "column/row")]["reduced"] == n * 4 * 256  # top_k rows a token
    assert "| 16 | experts |" in report
    assert (tmp_path / "tp_moe.png").stat().st_size > 0
    assert (tmp_path / "tp_moe.md").read_text().strip() == report.split("\nwrote ")[0].strip()
