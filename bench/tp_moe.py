"""The two ways to split a mixture of experts across a tensor-parallel group, measured on CPU over Gloo.

Two processes (ranks of one Gloo group on 127.0.0.1) run a SparseMoE three ways, interleaved round by
round: whole on rank 0 alone (tp 1, the baseline), split by experts as wgc does
(models/layers/tp_modules.ExpertParallelMoE: each expert whole on one rank, one all-reduce of the
grouped (token, expert) rows, top_k rows a token), and cut column/row inside every expert (each
expert's gate/up rows and down columns per rank, the partial sums of all experts added locally, one
all-reduce of [N, hidden]: the cheapest form of that split). Reported per token count: the median
time of a call and its ratio to tp 1, the elements all-reduced, and the largest difference from
tp 1's output: the expert split is exact (0), the column/row split reassociates every down
product's inner sum. For the choice, not for speed: two shared cores, Gloo over loopback.

    python bench/tp_moe.py [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HIDDEN, EXPERTS, TOP_K, INTER = 256, 16, 4, 128  # a thinker layer's proportions, scaled down


def cut_experts(moe: Any, rank: int, size: int) -> list[tuple[Any, Any, Any]]:
    """Each expert's (gate rows, up rows, down columns) of this rank, contiguous, cut once."""
    part = INTER // size
    cols = slice(rank * part, (rank + 1) * part)
    return [(e.gate_proj.weight[cols].contiguous(), e.up_proj.weight[cols].contiguous(),
             e.down_proj.weight[:, cols].contiguous()) for e in moe.experts]


def column_row_moe(moe: Any, cut: list[tuple[Any, Any, Any]], x: Any, reduce: Any) -> Any:
    """SparseMoE's output with every expert cut column/row: the same grouping of (token, expert) pairs
    as SparseMoE.routed, each expert's product over this rank's part of its width, the experts'
    partial sums added locally, then one all-reduce (the bench's stand-in, not wgc's)."""
    import torch
    import torch.nn.functional as F

    weights, chosen = moe.route(x)
    flat = chosen.flatten()
    order = flat.argsort(stable=True)
    tokens = order // moe.top_k
    counts = torch.bincount(flat, minlength=moe.num_experts).tolist()
    grouped = x.index_select(0, tokens)
    scale = weights.flatten().index_select(0, order)[:, None]
    outputs = torch.empty_like(grouped)
    start = 0
    for e, n in enumerate(counts):
        if n:
            rows, (gate, up, down) = slice(start, start + n), cut[e]
            h = grouped[rows]
            outputs[rows] = F.linear(F.silu(F.linear(h, gate)) * F.linear(h, up), down) * scale[rows]
            start += n
    return reduce(torch.zeros_like(x).index_add_(0, tokens, outputs))


def worker(rank: int, port: int, sizes: list[int], rounds: int, out: Path) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from wgc.models.layers import SparseMoE, init_random
    from wgc.models.layers.tp_shard import shard_in_place
    from wgc.runtime.worker.tp_group import Group

    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0, timedelta(seconds=60))
    opts = dist.ProcessGroupGloo._Options()
    opts._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
    group = Group(dist.ProcessGroupGloo(store, rank, 2, opts), rank, 2, [0, 1])
    whole = SparseMoE(HIDDEN, EXPERTS, TOP_K, INTER).eval()
    init_random(whole, seed=1, std=0.1)
    split = shard_in_place(nn.Sequential(copy.deepcopy(whole)), group)[0]
    cut = cut_experts(whole, rank, 2)
    barrier = torch.zeros(1)
    rows: list[dict[str, Any]] = []
    with torch.no_grad():
        for n in sizes:
            x = torch.randn(n, HIDDEN, generator=torch.Generator().manual_seed(n))
            expected = whole(x)
            times: dict[str, list[float]] = {"tp 1": [], "experts": [], "column/row": []}
            diffs = {"experts": float((split(x) - expected).abs().max()),
                     "column/row": float((column_row_moe(whole, cut, x, group.all_reduce) - expected).abs().max())}
            for _ in range(rounds):  # interleaved: a round of each, the baseline first
                group.all_reduce(barrier)
                if rank == 0:
                    t = time.perf_counter()
                    whole(x)
                    times["tp 1"].append(time.perf_counter() - t)
                group.all_reduce(barrier)
                t = time.perf_counter()
                split(x)
                times["experts"].append(time.perf_counter() - t)
                group.all_reduce(barrier)
                t = time.perf_counter()
                column_row_moe(whole, cut, x, group.all_reduce)
                times["column/row"].append(time.perf_counter() - t)
            if rank == 0:
                base = statistics.median(times["tp 1"])
                for what, ts in times.items():
                    reduced = {"tp 1": 0, "experts": n * TOP_K * HIDDEN, "column/row": n * HIDDEN}[what]
                    rows.append({"tokens": n, "split": what, "us": statistics.median(ts) * 1e6,
                                 "ratio": statistics.median(ts) / base, "reduced": reduced,
                                 "max_diff": diffs.get(what, 0.0)})
    if rank == 0:
        out.write_text(json.dumps(rows))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def table(rows: list[dict[str, Any]]) -> str:
    lines = [f"## A SparseMoE ({EXPERTS} experts, top {TOP_K}, hidden {HIDDEN}, expert width {INTER}) at tp 2 "
             "over Gloo against tp 1", "",
             "| tokens | split | median call (us) | ratio to tp 1 | elements all-reduced | max abs diff from tp 1 |",
             "|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['tokens']} | {r['split']} | {r['us']:.0f} | {r['ratio']:.2f} | {r['reduced']:,} | "
                     f"{r['max_diff']:.1e} |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for what in ("experts", "column/row"):
        mine = [r for r in rows if r["split"] == what]
        ax.plot([r["tokens"] for r in mine], [r["ratio"] for r in mine], marker="o", label=what)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("tokens in the call")
    ax.set_ylabel("time / tp 1")
    ax.set_title("MoE at tp 2 over Gloo (CPU)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="two token counts, a few rounds")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)  # a worker process
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    sizes, rounds = ([1, 16], 3) if args.quick else ([1, 16, 128], 15)
    if args.rank is not None:
        worker(args.rank, args.port, sizes, rounds, args.result)
        return []
    args.out.mkdir(parents=True, exist_ok=True)
    result, port = args.out / "tp_moe.json", free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    common = [sys.executable, __file__, "--port", str(port), "--result", str(result)] + (["--quick"] if args.quick else [])
    procs = [subprocess.Popen([*common, "--rank", str(r)], env=env) for r in (0, 1)]
    try:
        codes = [p.wait(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    if codes != [0, 0]:
        raise SystemExit(f"a rank failed: exit codes {codes}")
    rows = json.loads(result.read_text())
    report = table(rows)
    print(report)
    (args.out / "tp_moe.md").write_text(report + "\n")
    plot(rows, args.out / "tp_moe.png")
    print(f"\nwrote {args.out / 'tp_moe.md'} and {args.out / 'tp_moe.png'}")
    return rows


if __name__ == "__main__":
    main()
