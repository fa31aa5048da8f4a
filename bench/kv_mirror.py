"""The CPU decode step with the dense K/V mirror (runtime/engines/kv_mirror.py) against gathering the
keys from the pages every layer, as before.

Two tables. (1) Attention alone, one step of every layer of the 34M Llama shape's attention (8
layers, 8 heads over 4 kv heads of 64), with a 16 MiB product between layers as a forward's weights
would evict the cache: the layouts considered — gather from the pages then SDPA (before), one SDPA
call a row over a per-sequence mirror, a batched mirror token-major ([B, capacity, kv_heads, d])
and head-major ([B, kv_heads, capacity, d], the one kept). (2) The engine's decode step, a random
Llama of each shape, two KVCacheEngines (mirror on, off) stepped alternately step by step in one
process (so both see the same machine load), prompt 32, 64 greedy steps; per cell the median of
the paired per-step ratios and whether the logits were bitwise equal at every step.
Times are this process's CPU time (a shared host's other work then counts only through the cache and
memory it shares, not as time descheduled). One torch thread. Prints markdown; writes
bench/out/kv_mirror_p{prompt}.png.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wgc.models.layers import LlamaModel  # noqa: E402
from wgc.runtime.engines.cpu_linear import pack_linears  # noqa: E402
from wgc.runtime.engines.kv_engine import Geometry, KVCacheEngine, Write  # noqa: E402

from bench.peer.checkpoints import SHAPES  # noqa: E402
from bench.plotting import pyplot  # noqa: E402

LAYERS, HEADS, KV_HEADS, DIM, PAGE = 8, 8, 4, 64, 16


def layouts(batch: int, keys: int, repeats: int) -> dict[str, float]:
    """ms of one step's attention over every layer (writes included), min over `repeats`."""
    cap = keys + PAGE
    pages = [torch.randn(batch * cap // PAGE + 1, PAGE, KV_HEADS, DIM) for _ in range(2 * LAYERS)]
    slots = torch.randperm(batch * cap)[:batch * keys] + PAGE  # a batch's slots, scattered as pages are
    q = torch.randn(batch, KV_HEADS, HEADS // KV_HEADS, DIM)
    new = torch.randn(batch, KV_HEADS, DIM)
    token = [torch.randn(batch, cap, KV_HEADS, DIM) for _ in range(2 * LAYERS)]
    head = [torch.randn(batch, KV_HEADS, cap, DIM) for _ in range(2 * LAYERS)]
    pos = torch.arange(batch) * cap + keys - 1
    hpos = ((torch.arange(batch)[:, None] * KV_HEADS + torch.arange(KV_HEADS)) * cap + keys - 1).reshape(-1)
    weight, x = torch.randn(512, 8192), torch.randn(32, 512)
    strided = (cap * KV_HEADS * DIM, DIM, KV_HEADS * DIM, 1)

    def gather(i: int) -> None:
        kv = [p.view(-1, KV_HEADS, DIM).index_select(0, slots).as_strided(
            (batch, KV_HEADS, keys, DIM), (keys * KV_HEADS * DIM, DIM, KV_HEADS * DIM, 1)) for p in pages[2 * i:2 * i + 2]]
        F.scaled_dot_product_attention(q, *kv)

    def per_row(i: int) -> None:
        for b in range(batch):
            head[2 * i][b, :, keys - 1] = new[b]
            head[2 * i + 1][b, :, keys - 1] = new[b]
            F.scaled_dot_product_attention(q[b], head[2 * i][b, :, :keys], head[2 * i + 1][b, :, :keys])

    def token_major(i: int) -> None:
        for t in token[2 * i:2 * i + 2]:
            t.view(-1, KV_HEADS, DIM).index_copy_(0, pos, new)
        F.scaled_dot_product_attention(q, *(t.as_strided((batch, KV_HEADS, keys, DIM), strided)
                                            for t in token[2 * i:2 * i + 2]))

    def head_major(i: int) -> None:
        for t in head[2 * i:2 * i + 2]:
            t.view(-1, DIM).index_copy_(0, hpos, new.reshape(-1, DIM))
        F.scaled_dot_product_attention(q, head[2 * i][:, :, :keys], head[2 * i + 1][:, :, :keys])

    out: dict[str, list[float]] = {}
    for _ in range(repeats):
        for name, fn in (("gather + SDPA (before)", gather), ("per-row SDPA", per_row),
                         ("batched, token-major", token_major), ("batched, head-major (kept)", head_major)):
            total = 0.0
            for layer in range(LAYERS):
                x @ weight  # what a layer's products would do to the cache
                start = time.process_time()
                fn(layer)
                total += time.process_time() - start
            out.setdefault(name, []).append(total * 1e3)
    return {name: min(times) for name, times in out.items()}


def engine_cell(shape: str, batch: int, runs: int, prompt: int) -> dict[str, float]:
    """Paired per-step times of the decode step, gather vs mirror, engines stepped alternately."""
    config = SHAPES[shape]
    torch.manual_seed(0)
    model = LlamaModel(config).eval()
    pack_linears(model)
    geometry = Geometry(config.layers, config.heads, config.kv_heads, config.head_dim, config.max_positions)
    pages = batch * -(-(prompt + 65) // PAGE) + 1
    engines = [KVCacheEngine(geometry, pages, PAGE, torch.device("cpu"), prefix_caching=False, mirror=m)
               for m in (False, True)]
    prompts = torch.randint(0, config.vocab, (batch, prompt)).tolist()
    times: list[list[float]] = [[], []]
    same = True
    with torch.no_grad():
        for run in range(runs + 1):  # the first run sizes the mirror and is not counted
            ids = [run * batch + i for i in range(batch)]
            tokens = []
            for e in engines:
                with e.stepping([Write(r, "a", p, len(p)) for r, p in zip(ids, prompts)]) as prepared:
                    logits = model(torch.tensor(prepared.token_ids()), prepared.positions, e.step(prepared),
                                   logits_at=torch.arange(1, batch + 1) * prompt - 1)
                tokens.append(logits.argmax(-1).tolist())
            for _ in range(64):
                outs = []
                for j, e in enumerate(engines):
                    start = time.process_time()
                    with e.stepping([Write(r, "a", [t], 1) for r, t in zip(ids, tokens[j])]) as prepared:
                        logits = model(torch.tensor(prepared.token_ids()), prepared.positions, e.step(prepared))
                    if run:
                        times[j].append(time.process_time() - start)
                    outs.append(logits)
                    tokens[j] = logits.argmax(-1).tolist()
                same = same and torch.equal(outs[0], outs[1])
            for e in engines:
                for r in ids:
                    e.release(r)
    ratios = [a / b for a, b in zip(*times)]
    return {"gather": statistics.median(times[0]) * 1e3, "mirror": statistics.median(times[1]) * 1e3,
            "ratio": statistics.median(ratios), "same": float(same)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="64-step runs per engine cell")
    parser.add_argument("--repeats", type=int, default=7, help="repeats of the attention-alone cells")
    parser.add_argument("--shapes", default="0.7m,34m")
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens of the engine cells")
    parser.add_argument("--no-layouts", action="store_true", help="only the engine cells")
    args = parser.parse_args()
    torch.set_num_threads(1)
    batches = [int(b) for b in args.batches.split(",")]
    if not args.no_layouts:
        print_layouts(args.repeats)
    print(f"The engine's decode step, mirror vs gather (paired per-step, engines alternated; prompt {args.prompt}, "
          "64 steps):\n")
    print("| shape | batch | gather (ms a step) | mirror (ms a step) | gather / mirror | bitwise equal logits |")
    print("|---|---:|---:|---:|---:|---|")
    cells = []
    for shape in args.shapes.split(","):
        for batch in batches:
            c = engine_cell(shape, batch, args.runs, args.prompt)
            cells.append((shape, batch, c))
            print(f"| {shape} | {batch} | {c['gather']:.2f} | {c['mirror']:.2f} | {c['ratio']:.3f} | "
                  f"{'yes' if c['same'] else 'NO'} |")
    plot(cells, args.prompt)


def print_layouts(repeats: int) -> None:
    print("Attention alone, 34M shape, every layer of one step (ms, min of repeats):\n")
    names: list[str] = []
    rows = []
    for batch in (8, 32):
        for keys in (64, 256):
            cell = layouts(batch, keys, repeats)
            names = list(cell)
            rows.append((batch, keys, cell))
    print("| batch | keys | " + " | ".join(names) + " |")
    print("|---:|---:|" + "---:|" * len(names))
    for batch, keys, cell in rows:
        print(f"| {batch} | {keys} | " + " | ".join(f"{cell[n]:.2f}" for n in names) + " |")
    print()


def plot(cells: list[tuple[str, int, dict[str, float]]], prompt: int) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    labels = [f"{s} b{b}" for s, b, _ in cells]
    ax.bar(range(len(cells)), [c["ratio"] for _, _, c in cells])
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks(range(len(cells)), labels)
    ax.set_ylabel("step time: gather / mirror (paired median)")
    ax.set_title(f"CPU decode step with the K/V mirror (prompt {prompt}, 64 steps)")
    fig.tight_layout()
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / f"kv_mirror_p{prompt}.png", dpi=120)
    print(f"plot: {out / f'kv_mirror_p{prompt}.png'}")


if __name__ == "__main__":
    main()
