"""bench/compile_speed.py stays runnable: it imports, and its program generator makes valid programs;
bench/scheduler.py and bench/bagel.py run at tiny sizes and print their tables. No timing is asserted
here; the numbers come from running the benches themselves."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

from tests.bench_scripts import loaded_bench
from wgc.check import check_source

BENCH = Path(__file__).resolve().parents[2] / "bench" / "compile_speed.py"


@pytest.fixture(scope="module")
def compile_speed() -> Iterator[ModuleType]:
    with loaded_bench(BENCH, "bench_compile_speed") as module:
        yield module


@pytest.mark.parametrize("lines", [1, 150, 400])
def test_generated_program_checks_clean(compile_speed: ModuleType, lines: int) -> None:
    text = compile_speed.generate_program(lines)
    assert compile_speed.line_count(text) >= lines
    result = check_source(text, "generated.walk")
    assert result.diagnostics == (), [f"{d.span} {d.code} {d.message}" for d in result.diagnostics]


def test_generated_program_grows_with_the_target(compile_speed: ModuleType) -> None:
    small = compile_speed.line_count(compile_speed.generate_program(200))
    large = compile_speed.line_count(compile_speed.generate_program(2000))
    assert 2000 <= large < 2000 + small


def test_markdown_report_names_the_goal_for_each_cold_row(compile_speed: ModuleType) -> None:
    timing = compile_speed.Timing("generated (10 lines)", 10, 0.001, 1)
    procs = [compile_speed.Process(f"p{i}", 100.0 + 100 * i, 1) for i in range(4)]
    report = compile_speed.markdown([timing], procs, timing, procs[2:])
    assert "lines/s" in report
    assert "| p2 < 300 ms | 300 ms (200 ms above `python -c pass`) | MISSED |" in report
    assert "| p3 < 300 ms | 400 ms (300 ms above `python -c pass`) | MISSED |" in report
    procs[2] = compile_speed.Process("p2", 120.0, 1)
    assert "| p2 < 300 ms | 120 ms (20 ms above `python -c pass`) | met |" in compile_speed.markdown(
        [timing], procs, timing, procs[2:])


def test_phase_split_runs(compile_speed: ModuleType) -> None:
    split = compile_speed.phases(compile_speed.generate_program(100), runs=1)
    assert split is not None and set(split) == {"parse (lex + LALR + tree + AST)", "checker"}
    assert all(seconds > 0 for seconds in split.values())


def test_cold_rows_time_the_check_with_and_without_wgc_bytecode(compile_speed: ModuleType) -> None:
    rows = compile_speed.cold_processes(compile_speed.ROOT / "models" / "orpheus.walk", runs=1)
    assert [r.name.split("`")[1] for r in rows] == [
        "python -c pass", "python -c 'import wgc.check'", "wgc check models/orpheus.walk",
        "wgc check models/orpheus.walk"]
    assert "bytecode cached" in rows[2].name and "from source" in rows[3].name
    assert all(r.median_ms > 0 for r in rows)


# ---- bench/scheduler.py ----------------------------------------------------------------------------

SCHEDULER = Path(__file__).resolve().parents[2] / "bench" / "scheduler.py"


@pytest.fixture(scope="module")
def scheduler_run() -> tuple[ModuleType, str, dict]:
    """bench/scheduler.py --quick (tiny sizes, one pair a table) on the real tiny Orpheus, once."""
    spec = importlib.util.spec_from_file_location("bench_scheduler", SCHEDULER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    out = io.StringIO()
    threads = torch.get_num_threads()
    try:
        spec.loader.exec_module(module)
        with contextlib.redirect_stdout(out):  # one torch thread: on a busy 2-core box their barriers stall
            results = module.main(["--quick", "--no-plot", "--threads", "1"])
        yield module, out.getvalue(), results
    finally:
        torch.set_num_threads(threads)
        sys.modules.pop(spec.name, None)


def test_scheduler_bench_prints_its_three_tables(scheduler_run: tuple[ModuleType, str, dict]) -> None:
    _, report, results = scheduler_run
    for row in ("| chunked (token_budget 32): wgc |", "| whole prompt (no budget) |", "| ~25% of the load: wgc |",
                "| all of it |", "| on: wgc |", "| off |"):
        assert row in report
    assert report.count("| baseline / wgc |") == 3 and report.count("### ") == 3
    assert "inter-token gap p50 (ms) | p99 (ms)" in report and "requests/s" in report and "TTFT p50" in report
    pressure = results["pressure"]
    assert pressure["wgc"]["finished"] == pressure["baseline"]["finished"] == 6
    assert pressure["wgc"]["preemptions"] > 0 and pressure["baseline"]["preemptions"] == 0  # the pressure was real
    assert results["caching"]["wgc"]["hit"] > 0 == results["caching"]["baseline"]["hit"]


def test_scheduler_bench_draws_three_panels(scheduler_run: tuple[ModuleType, str, dict], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    module, _, results = scheduler_run
    path = module.plot(results, module.QUICK, tmp_path)
    assert path == tmp_path / "scheduler.png" and path.stat().st_size > 0


# ---- bench/bagel.py --------------------------------------------------------------------------------

BAGEL = Path(__file__).resolve().parents[2] / "bench" / "bagel.py"


@pytest.fixture(scope="module")
def bagel_run() -> tuple[ModuleType, str, dict]:
    """bench/bagel.py --quick (tiny sizes, one pair) on the real tiny BAGEL, worker processes included, once."""
    spec = importlib.util.spec_from_file_location("bench_bagel", BAGEL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    out = io.StringIO()
    threads = torch.get_num_threads()
    try:
        spec.loader.exec_module(module)
        with contextlib.redirect_stdout(out):
            results = module.main(["--quick", "--no-plot", "--threads", "1"])
        yield module, out.getvalue(), results
    finally:
        torch.set_num_threads(threads)
        sys.modules.pop(spec.name, None)
        sys.modules.pop("bagel_layouts", None)


@pytest.mark.slow
def test_bagel_bench_prints_its_four_tables(bagel_run: tuple[ModuleType, str, dict]) -> None:
    module, report, results = bagel_run
    quick = module.QUICK
    assert "tiny preset" in report and report.count("### ") == 4
    for row in ("| 1 rank (cpu.toml, max_batch 32): the three branches in one forward",
                "| cpu3.toml: 3 ranks, one branch each: wgc |", "| eq. 5 serial: Σt_b + u |",
                "| eq. 5 floor: max t_b + u + c |", "| t2i, 64 px |", "| edit, 128 px image |", "Goal ("):
        assert row in report
    branches = results["branches"]
    assert set(branches["t_b"]) == {"main", "cfg_text", "cfg_img"} and all(t > 0 for t in branches["t_b"].values())
    assert branches["u"] > 0 and branches["c"] > 0 and results["eq5"]["bound"] > 1
    layouts = results["layouts"]
    assert [r["context"] for r in layouts] == ["t2i, 64 px", "edit, 128 px image"]
    for r in layouts:  # the dense baseline answers the same velocity and holds more: the fork's copy
        assert r["max_diff"] < 1e-9 and r["dense_bytes"] > r["paged_bytes"] > 0
    assert layouts[1]["lengths"]["cfg_text"] > 0 and layouts[0]["lengths"]["cfg_text"] == 0
    batching = results["batching"]
    assert [r["n"] for r in batching] == list(quick.batch_levels)
    assert [r["items"] for r in batching] == [3.0 * n for n in quick.batch_levels]  # all labels, one forward
    decoding = results["decoding"]
    assert [r["n"] for r in decoding] == list(quick.decode_levels)
    for r in decoding:  # the runtime's greedy tokens are transformers' on the same weights
        assert r["same"] == r["n"] and r["tokens"] > 0
        assert f"| {r['n']} | " in report


@pytest.mark.slow
def test_bagel_bench_draws_four_panels(bagel_run: tuple[ModuleType, str, dict], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    module, _, results = bagel_run
    path = module.plot(results, tmp_path)
    assert path == tmp_path / "bagel.png" and path.stat().st_size > 0


# ---- bench/omni_speech.py --------------------------------------------------------------------------

OMNI = Path(__file__).resolve().parents[2] / "bench" / "omni_speech.py"


@pytest.fixture(scope="module")
def omni_run() -> tuple[ModuleType, str, dict]:
    """bench/omni_speech.py --quick (2 concurrent, 30 frames, one run a side) on the real tiny Qwen3-Omni,
    worker processes on one and two ranks and transformers' generate, once."""
    spec = importlib.util.spec_from_file_location("bench_omni_speech", OMNI)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    out = io.StringIO()
    threads = torch.get_num_threads()
    try:
        spec.loader.exec_module(module)
        with contextlib.redirect_stdout(out):
            results = module.main(["--quick", "--no-plot", "--threads", "1"])
        yield module, out.getvalue(), results
    finally:
        torch.set_num_threads(threads)
        sys.modules.pop(spec.name, None)
        sys.modules.pop("omni_reference", None)


@pytest.mark.slow
def test_omni_speech_bench_prints_its_three_tables(omni_run: tuple[ModuleType, str, dict]) -> None:
    module, report, results = omni_run
    quick = module.QUICK
    assert "tiny preset" in report and report.count("### ") == 3 and report.count("Reading: ") == 3
    for c in quick.levels:
        for label in module.SIDES.values():
            assert f"| {c} | {label} |" in report
        assert set(results["floors"][c][0]) == {"prefill", "talker", "window", "floor"}
    for c in quick.rank_levels:
        assert f"| {c} | 1 rank (cpu.toml, max_batch 16) |" in report and f"| {c} | 2 ranks (" in report
    frames = 1920 * quick.frames - 555  # every request's audio, streamed by wgc, whole from transformers
    for (side, c), runs in results["runs"].items():
        assert runs[0]["audio_s"] > 0, (side, c)
        if side in ("one", "two"):
            assert runs[0]["audio_s"] == pytest.approx(c * frames / 24000)
    assert "Greedy check (" in report and {"reply_same", "same_frames", "rows_shared"} <= set(results["check"])


@pytest.mark.slow
def test_omni_speech_bench_draws_three_panels(omni_run: tuple[ModuleType, str, dict], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    module, _, results = omni_run
    path = module.plot(results, module.QUICK, tmp_path)
    assert path == tmp_path / "omni_speech.png" and path.stat().st_size > 0
