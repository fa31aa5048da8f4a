"""Decode tokens/s of the paged KV engine on CPU: the CPU fast paths against the plain ones, interleaved.

What a kv component does per decode step, without the runtime around it: `KVCacheEngine.stepping`
(pages, positions, plan), the Llama forward over the pages with logits at each row's last token
only, greedy `sampling.sample`, `commit`. The two shapes of the vLLM comparison (bench/peer/
checkpoints.py SHAPES, so the two benches' cells are the same models) — 0.7M parameters (the tiny
Llama preset, Orpheus tiny's decoder over a 512-id vocabulary) and 34M (hidden 512, 8 layers, 8
heads and 4 kv heads of 64, MLP 1536, an 8,192-id vocabulary) — at batch 1, 8 and 32; prompt 32
tokens, 64 greedy tokens, one torch thread. Two engines on the same weights, each timed in turn
within every round (the fastest round counts, these CPUs are noisy):
- `plain`: every product through F.linear (WGC_CPU_PACKED_LINEAR=0's path) and every step planned
  by the general plan (`TorchAttention(fast_decode=False)`);
- `fast`: the products through oneDNN over packed weights (runtime/engines/cpu_linear.py, what a
  kv component sets up on CPU) and decode steps by `plan_decode` (a smaller plan, grouped queries).
Both must give the same greedy tokens (the table says so per row). `--profile` prints torch.profiler's
top operators of one decode run per engine (the profile that explains the ratio).
Prints a markdown table; writes bench/out/engine_speed.md and engine_speed.png.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wgc.models.layers import LlamaConfig, LlamaModel  # noqa: E402
from wgc.runtime.engines.attention import TorchAttention  # noqa: E402
from wgc.runtime.engines.cpu_linear import pack_linears  # noqa: E402
from wgc.runtime.engines.kv_engine import Geometry, KVCacheEngine, Write  # noqa: E402
from wgc.runtime.engines.sampling import SamplingParams, sample  # noqa: E402

from bench.peer.checkpoints import SHAPES  # noqa: E402
from bench.plotting import pyplot, write_report  # noqa: E402

PAGE_SIZE = 16
GREEDY = SamplingParams(temperature=0.0)


def shapes() -> dict[str, LlamaConfig]:
    return {"0.7M": SHAPES["0.7m"], "34M": SHAPES["34m"]}


@dataclass
class Engine:
    """One way of running the step: its model (a copy of the same weights) and its KV engine."""

    name: str
    model: LlamaModel
    kv: KVCacheEngine


def engines(config: LlamaConfig, seed: int = 0) -> list[Engine]:
    torch.manual_seed(seed)
    model = LlamaModel(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.fill_(1.0) if name.endswith("norm.weight") else param.normal_(0.0, 0.02)
    out = []
    for name in ("plain", "fast"):
        m = copy.deepcopy(model)
        geometry = Geometry(config.layers, config.heads, config.kv_heads, config.head_dim, config.max_positions)
        kv = KVCacheEngine(geometry, 64 * 8 + 8, PAGE_SIZE, torch.device("cpu"), prefix_caching=False)
        if name == "fast":
            pack_linears(m)
        else:
            kv.planner.use(TorchAttention(fast_decode=False))
        out.append(Engine(name, m, kv))
    return out


def step(engine: Engine, writes: list[Write]) -> list[int]:
    """One step as a kv component runs it: greedy next token of every write."""
    with engine.kv.stepping(writes) as prepared, torch.no_grad():
        ids = [t for i in range(len(writes)) for t in prepared.chunk(i)]
        last = torch.cumsum(torch.tensor(prepared.lengths), 0) - 1  # [B]
        logits = engine.model(torch.tensor(ids), prepared.positions, engine.kv.step(prepared), logits_at=last)
    n = len(writes)
    return sample(logits.float(), [GREEDY] * n, [[]] * n, [0] * n).tolist()


def decode(engine: Engine, prompts: list[list[int]], steps: int) -> tuple[float, list[list[int]]]:
    """Prefill then `steps` decode steps; (seconds of the decode steps, every row's tokens)."""
    rows = range(len(prompts))
    tokens = step(engine, [Write(r, "main", p, len(p)) for r, p in zip(rows, prompts)])
    out = [[t] for t in tokens]
    start = time.perf_counter()
    for _ in range(steps):
        tokens = step(engine, [Write(r, "main", [t], 1) for r, t in zip(rows, tokens)])
        for row, t in zip(out, tokens):
            row.append(t)
    seconds = time.perf_counter() - start
    for r in rows:
        engine.kv.release(r)
    return seconds, out


def run(names: list[str], batches: list[int], prompt: int, steps: int, rounds: int) -> list[dict]:
    results = []
    for shape in names:
        config = shapes()[shape]
        pair = engines(config)
        params = sum(p.numel() for p in pair[0].model.parameters())
        for batch in batches:
            gen = torch.Generator().manual_seed(batch)
            prompts = torch.randint(0, config.vocab, (batch, prompt), generator=gen).tolist()
            best = {e.name: float("inf") for e in pair}
            tokens = {}
            for e in pair:
                decode(e, prompts, 4)  # warm-up (oneDNN packs on first use)
            for _ in range(rounds):
                for e in pair:
                    seconds, tokens[e.name] = decode(e, prompts, steps)
                    best[e.name] = min(best[e.name], seconds)
            results.append({"shape": shape, "params": params, "batch": batch,
                            "plain": batch * steps / best["plain"], "fast": batch * steps / best["fast"],
                            "same": tokens["plain"] == tokens["fast"]})
    return results


def profile(shape: str, batch: int, prompt: int, steps: int, rows: int = 12) -> None:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    config = shapes()[shape]
    prompts = torch.randint(0, config.vocab, (batch, prompt), generator=torch.Generator().manual_seed(0)).tolist()
    for e in engines(config):
        decode(e, prompts, 4)
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            seconds, _ = decode(e, prompts, steps)
        print(f"\n{e.name}, {shape} at batch {batch}: {seconds / steps * 1e3:.2f} ms a step (under the profiler)\n")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows))


def table(results: list[dict], prompt: int, steps: int) -> str:
    lines = [f"paged KV engine decode on CPU, prompt {prompt}, {steps} greedy tokens, "
             f"{torch.get_num_threads()} torch thread(s), page size {PAGE_SIZE}", "",
             "| shape | batch | plain (tok/s) | fast (tok/s) | fast / plain | same greedy tokens |",
             "|---|---:|---:|---:|---:|---|"]
    for r in results:
        lines.append(f"| {r['shape']} ({r['params'] / 1e6:.1f}M) | {r['batch']} | {r['plain']:.0f} | {r['fast']:.0f} "
                     f"| {r['fast'] / r['plain']:.2f}x | {'yes' if r['same'] else 'NO'} |")
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, shape in zip(axes, sorted({r["shape"] for r in results}, key=lambda s: float(s[:-1]))):
        rows = [r for r in results if r["shape"] == shape]
        xs = range(len(rows))
        ax.bar([x - 0.2 for x in xs], [r["plain"] for r in rows], width=0.4, label="plain")
        ax.bar([x + 0.2 for x in xs], [r["fast"] for r in rows], width=0.4, label="fast")
        for x, r in zip(xs, rows):
            ax.annotate(f"{r['fast'] / r['plain']:.2f}x", (x + 0.2, r["fast"]), ha="center", va="bottom")
        ax.set_xticks(list(xs), [f"batch {r['batch']}" for r in rows])
        ax.set_title(f"{shape} parameters")
        ax.set_ylabel("decode tokens/s (CPU, 1 thread)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="0.7M,34M", help="comma-separated: 0.7M, 34M")
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per cell; the fastest counts")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="torch.profiler's top operators per engine instead")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    names, batches = args.shapes.split(","), [int(b) for b in args.batches.split(",")]
    if args.profile:
        for shape in names:
            for batch in batches:
                profile(shape, batch, args.prompt, args.steps)
        return []
    results = run(names, batches, args.prompt, args.steps, args.rounds)
    text = table(results, args.prompt, args.steps)
    write_report("engine_speed", text, lambda path: plot(results, path))
    return results


if __name__ == "__main__":
    main()
