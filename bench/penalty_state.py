"""The repetition penalty's cost per sampling step: full token histories against `SeenTokens`, interleaved.

What a penalised decode step of a kv component spends in `sampling.sample` (issue 18): every row
appends its token, then
- `full`: `sample` gets each row's whole history (a list), converted into an index every step;
- `state`: each row's `SeenTokens` is synced (the one appended token) and `sample` reads its
  distinct ids (what models/layers/paged_llama.py does now);
- `none`: the same step without a penalty (the floor: what the penalty adds is the difference).
Orpheus's settings (temperature 0.6, top_p 0.8, penalty 1.3) over Orpheus tiny's 4,365-token
vocabulary; 16 rows (and 1, the one-row path) at 1,250 history tokens (Orpheus's default length)
and 2,500; one torch thread. Each round times both in turn (the fastest round counts, these CPUs
are noisy); both must draw the same tokens (the table says so). Prints a markdown table; writes
bench/out/penalty_state.md and penalty_state.png.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wgc.runtime.engines.sampling import SamplingParams, sample  # noqa: E402
from wgc.runtime.engines.seen_tokens import SeenTokens  # noqa: E402

from bench.plotting import pyplot, write_report  # noqa: E402

VOCAB = 4365


def _histories(rows: int, length: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(VOCAB) for _ in range(length)] for _ in range(rows)]


def _run(rows: int, length: int, steps: int, stateful: bool, penalty: float = 1.3) -> tuple[float, list[list[int]]]:
    """Seconds per step over `steps` steps, and the tokens drawn."""
    params = [SamplingParams(temperature=0.6, top_p=0.8, repetition_penalty=penalty, seed=r) for r in range(rows)]
    histories = _histories(rows, length, seed=rows * 7919 + length)
    states = [SeenTokens() for _ in range(rows)]
    if stateful:
        for s, h in zip(states, histories):
            s.sync(h)  # the prefill's sync, not a decode step's
    gen = torch.Generator().manual_seed(1)
    logits = [torch.randn(rows, VOCAB, generator=gen) for _ in range(steps)]
    drawn: list[list[int]] = []
    start = time.perf_counter()
    for step, row_logits in enumerate(logits):
        given = [s.sync(h) for s, h in zip(states, histories)] if stateful else histories
        tokens = sample(row_logits, params, given, [step] * rows).tolist()
        for h, t in zip(histories, tokens):
            h.append(t)
        drawn.append(tokens)
    return (time.perf_counter() - start) / steps, drawn


def run(batches: list[int], lengths: list[int], steps: int, rounds: int) -> list[dict]:
    results = []
    for rows in batches:
        for length in lengths:
            full, state, none, same = float("inf"), float("inf"), float("inf"), True
            for _ in range(rounds):
                t_full, d_full = _run(rows, length, steps, stateful=False)
                t_state, d_state = _run(rows, length, steps, stateful=True)
                t_none, _ = _run(rows, length, steps, stateful=False, penalty=1.0)
                full, state, none = min(full, t_full), min(state, t_state), min(none, t_none)
                same = same and d_full == d_state
            results.append({"rows": rows, "length": length, "full": full * 1e3, "state": state * 1e3,
                            "none": none * 1e3, "same": same})
    return results


def table(results: list[dict], steps: int) -> str:
    lines = [f"Penalised `sample` step, V = {VOCAB}, {steps} steps a run, fastest round (ms a step)", "",
             "| rows | history tokens | full histories | SeenTokens | no penalty | full / state "
             "| penalty's cost, full / state | same tokens |",
             "|---:|---:|---:|---:|---:|---:|---:|:---:|"]
    for r in results:
        extra = (r["full"] - r["none"]) / max(r["state"] - r["none"], 1e-6)
        lines.append(f"| {r['rows']} | {r['length']:,} | {r['full']:.3f} | {r['state']:.3f} | {r['none']:.3f} | "
                     f"{r['full'] / r['state']:.2f}x | {extra:.2f}x | {'yes' if r['same'] else 'NO'} |")
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = range(len(results))
    ax.bar([x - 0.2 for x in xs], [r["full"] for r in results], width=0.4, label="full histories")
    ax.bar([x + 0.2 for x in xs], [r["state"] for r in results], width=0.4, label="SeenTokens")
    for x, r in zip(xs, results):
        ax.annotate(f"{r['full'] / r['state']:.2f}x", (x + 0.2, r["state"]), ha="center", va="bottom")
    ax.set_xticks(list(xs), [f"{r['rows']} x {r['length']:,}" for r in results])
    ax.set_xlabel("rows x history tokens")
    ax.set_ylabel("ms per penalised sample step (CPU, 1 thread)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="16,1")
    parser.add_argument("--lengths", default="1250,2500")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per cell; the fastest counts")
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = run([int(b) for b in args.batches.split(",")], [int(n) for n in args.lengths.split(",")],
                  args.steps, args.rounds)
    text = table(results, args.steps)
    write_report("penalty_state", text, lambda path: plot(results, path))
    return results


if __name__ == "__main__":
    main()
