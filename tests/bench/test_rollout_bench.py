"""bench/rollout.py --quick runs at tiny sizes (the cached rollout and recomputing the prefix, MPC, the
world-model route over HTTP beside the Python API) and prints its three tables. No timing is asserted:
the rows, their work counts and the plot are."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROLLOUT = Path(__file__).resolve().parents[2] / "bench" / "rollout.py"


def test_the_rollout_bench_prints_its_three_tables(tmp_path: Path, capsys) -> None:
    spec = importlib.util.spec_from_file_location("bench_rollout", ROLLOUT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        results = module.main(["--quick", "--out", str(tmp_path)])
    finally:
        sys.modules.pop("http_overhead", None)
    report = capsys.readouterr().out
    assert [r["H"] for r in results["rollout"]] == [4, 15]
    assert [r["work_ratio"] for r in results["rollout"]] == [2.5, 8.0]
    # the component wrote one frame block per step, counted across horizons (warm-up and one rep: 2 x 4, then 2 x 15 more)
    assert [r["blocks"] for r in results["rollout"]] == [8, 8 + 30]
    assert [r["K"] for r in results["mpc"]] == [16]
    assert [r["path"] for r in results["route"]] == ["python API", "HTTP /v1/world_model/rollout", "HTTP /v1/generate"]
    for title in ("## Rollout: cached vs recomputing the prefix", "## MPC: K candidates of 4 steps",
                  "## The world-model route's overhead per call"):
        assert title in report
    assert "| tiny (18-token blocks) | 15 |" in report and "| 3.76 |" in report
    assert (tmp_path / "rollout.png").stat().st_size > 0
    assert (tmp_path / "rollout.md").read_text().strip() == report.split("\nwrote ")[0].strip()
