"""Compile time and plan size for every (model, placement) pair that compiles.

Runs in one process: the front end alone (parse + check) as the baseline, then
the whole compile (check, placement, lowering passes, simulation, encoding).
Prints a markdown table and writes bench/out/compile_plans.png.
Goal: every compile under 200 ms in-process.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.plotting import pyplot  # noqa: E402
from tests.lower.golden_pairs import PAIRS, paths  # noqa: E402
from wgc.check import check_source  # noqa: E402
from wgc.compile import compile_program  # noqa: E402


def median_ms(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main(runs: int = 15) -> list[tuple[str, str, float, float, int, int]]:
    import os

    os.chdir(ROOT)
    rows = []
    for model, placement in PAIRS:
        source, place = paths(model, placement)
        text = (ROOT / source).read_text()
        front = median_ms(lambda t=text, s=source: check_source(t, s), runs)
        result = compile_program(source, text, place)
        assert result.data is not None, [d.message for d in result.diagnostics]
        full = median_ms(lambda s=source, t=text, p=place: compile_program(s, t, p), runs)
        instrs = sum(len(ws.instructions) for r in result.plan.ranks for ws in r.schedules)
        rows.append((model, placement, front, full, len(result.data), instrs))
    print("| model | placement | parse+check ms | full compile ms | ratio | plan bytes | instructions |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for model, placement, front, full, size, instrs in rows:
        print(f"| {model} | {placement} | {front:.1f} | {full:.1f} | {full / front:.1f}x | {size:,} | {instrs} |")
    worst = max(r[3] for r in rows)
    print(f"\nslowest compile: {worst:.1f} ms (goal < 200 ms)")
    _plot(rows)
    return rows


def _plot(rows: list[tuple[str, str, float, float, int, int]]) -> None:
    plt = pyplot()
    if plt is None:
        return
    labels = [f"{m}\n{p}" for m, p, *_ in rows]
    fig, ax = plt.subplots(figsize=(12, 4))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r[2] for r in rows], width=0.4, label="parse + check (baseline)")
    ax.bar([x + 0.2 for x in xs], [r[3] for r in rows], width=0.4, label="full compile")
    ax.axhline(200, color="red", linestyle="--", label="goal 200 ms")
    ax.set_xticks(list(xs), labels, fontsize=7)
    ax.set_ylabel("ms (median)")
    ax.legend()
    fig.tight_layout()
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "compile_plans.png", dpi=120)
    print(f"plot: {out / 'compile_plans.png'}")


if __name__ == "__main__":
    main()
