"""bench/policy.py --quick on the real tiny π0.5, worker processes and server included: its two tables
have every row, the π0-mode walk's chunk matches transformers' sample_actions, and the files are
written. No timing is asserted (speed is the bench's to report)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

POLICY = Path(__file__).resolve().parents[2] / "bench" / "policy.py"


def test_the_policy_bench_prints_both_tables_and_writes_its_files(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_policy", POLICY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_policy"] = module
    try:
        spec.loader.exec_module(module)
        report = module.main(["--quick", "--out", str(tmp_path)])
    finally:
        sys.modules.pop("bench_policy", None)
    for side in ("wgc walk, pi0.5", "wgc walk, pi0 mode", "wgc components, pi0.5", "transformers PI0 sample_actions",
                 "Python API (Runtime.submit)", "HTTP /v1/policy/actions", "HTTP /v1/generate"):
        assert f"| {side} |" in report, side
    diff = float(report.split("max |diff| = ")[1].split(".\n")[0].rstrip("."))
    assert diff < 1e-4
    assert (tmp_path / "policy.md").read_text().strip() == report.strip()
    assert (tmp_path / "policy.png").stat().st_size > 0
