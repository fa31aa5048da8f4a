"""bench/peer_vllm.py without vLLM (as in CI): it skips with a clear message and exits 0; its
checkpoints load in wgc's llama family with the shapes the issue names; and its tables mark each
goal from the ratios (met only at >= the goal and, where a latency goal applies, no worse a p99).
No timing is asserted: the numbers come from running the bench with --vllm-python."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from wgc.models.llama.config import LlamaChatConfig

from bench.peer import report
from bench.peer.checkpoints import SHAPES, parameters, write_llama

ROOT = Path(__file__).resolve().parents[2]


def test_without_vllm_it_skips_with_a_clear_message(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-python"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "peer_vllm.py"), "--vllm-python", str(missing)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0
    assert "skipped: vLLM is not installed" in done.stdout and "bench/README.md" in done.stdout


def test_the_checkpoints_have_the_issue_shapes_and_load(tmp_path: Path) -> None:
    assert round(parameters(SHAPES["0.7m"]) / 1e6, 1) == 0.7 and round(parameters(SHAPES["34m"]) / 1e6) == 34
    directory = write_llama(tmp_path / "tiny", "0.7m")
    config = LlamaChatConfig.from_directory(directory)
    assert config.llama == SHAPES["0.7m"] and config.stop_ids == ()  # greedy replies run to max_tokens


def _serving(wgc_req: float, wgc_p99: float) -> dict:
    side = {"req_s": 0.0, "tok_s": 0.0, "ttft_p50": 0.01, "ttft_p99": 0.0, "itl_p50": 0.001, "itl_p99": 0.002}
    return {"model": "0.7m", "concurrency": 16, "same": True, "wgc": {**side, "req_s": wgc_req, "ttft_p99": wgc_p99},
            "vllm": {**side, "req_s": 10.0, "ttft_p99": 0.05}}


def test_the_tables_mark_each_goal_from_the_ratios() -> None:
    engine = report.engine_table([{"model": "34m", "batch": 8, "wgc": 130.0, "vllm": 100.0, "same": True,
                                   "paired": [1.25, 1.3]},
                                  {"model": "34m", "batch": 32, "wgc": 110.0, "vllm": 100.0, "same": False}])
    lines = engine.splitlines()[2:]
    assert "| 1.30 | 1.25, 1.30 | yes | met |" in lines[0] and "| 1.10 |  | NO | not met |" in lines[1]
    served = report.serving_table([{**_serving(12.5, 0.04), "paired": [1.31, 1.19]}])
    assert "| 1.25 | 1.31, 1.19 | met |" in served  # the best rounds' ratio, and each round's beside it
    assert "not met" in report.serving_table([_serving(12.5, 0.06)])  # faster, but a worse TTFT p99
    assert "not met" in report.serving_table([_serving(11.0, 0.04)])
    row = {"concurrency": 4, "wgc": {"audio_per_wall": 16.0, "ttft_p50": 0.1, "ttft_p99": 0.1},
           "peer": {"audio_per_wall": 10.0, "ttft_p50": 0.1, "ttft_p99": 0.12}}
    assert "| 1.60 |" in report.orpheus_table([row]) and "| met |" in report.orpheus_table([row])
    assert "| 1.60 | 1.48, 1.61 | 100 / 100 |" in report.orpheus_table([{**row, "paired": [1.48, 1.61]}])


def test_a_run_of_one_table_keeps_the_others_last_results(tmp_path: Path) -> None:
    engine = [{"model": "34m", "batch": 8, "wgc": 130.0, "vllm": 100.0, "same": True, "paired": [1.3]}]
    orpheus = [{"concurrency": 4, "wgc": {"audio_per_wall": 16.0, "ttft_p50": 0.1, "ttft_p99": 0.1},
                "peer": {"audio_per_wall": 10.0, "ttft_p50": 0.1, "ttft_p99": 0.12}, "paired": [1.6]}]
    report.write({"engine": engine}, "wgc aaa vs vLLM 0.32.0", tmp_path)
    report.write({"orpheus": orpheus}, "wgc bbb vs vLLM 0.32.0", tmp_path)
    gathered = (tmp_path / "peer_vllm.md").read_text(encoding="utf-8")
    assert gathered.index("### engine") < gathered.index("wgc aaa") < gathered.index("### orpheus") \
        < gathered.index("wgc bbb")
    assert "| 34m | 8 |" in gathered and "| 4 | 16.00 | 10.00 | 1.60 |" in gathered
    assert not (tmp_path / "peer_vllm-serving.md").exists()
