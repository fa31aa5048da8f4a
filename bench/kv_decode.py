"""Decode throughput of the tiny Llama through the paged KV engine vs recomputing the full prefix.

Same model, same process, greedy decoding from a random prompt. Rows: batch 1, 8 and 32. The KV
path prefills once, then runs one token per sequence per step (page tables from the page
allocator, attention by the pure-torch paged path); the baseline runs the whole sequence densely
every step and keeps the last position's logits. Timed: the decode steps (the prefill, the same
work in both, is not). Also reported: whether both produced the same greedy tokens.
One torch thread by default: on a small shared CPU, OpenMP's barriers wait on descheduled threads
and swamp a tiny model's milliseconds (--threads to change it).
Prints a markdown table; writes bench/out/kv_decode.png.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wgc.models.layers import LlamaConfig, LlamaModel  # noqa: E402
from wgc.runtime.engines.attention import AttentionBatch, KVStep, KVStorage, TorchAttention  # noqa: E402
from wgc.runtime.engines.kv_pages import Appended, PageAllocator  # noqa: E402

from bench.plotting import pyplot  # noqa: E402

PAGE_SIZE = 16


def decode_paged(model: LlamaModel, prompts: torch.Tensor, steps: int) -> tuple[float, torch.Tensor]:
    """Prefill, then `steps` single-token steps over the pages; (seconds of the decode steps, tokens)."""
    c = model.config
    batch_size, prompt_len = prompts.shape
    pages_each = -(-(prompt_len + steps + 1) // PAGE_SIZE)
    allocator = PageAllocator(batch_size * pages_each, PAGE_SIZE)
    storage = KVStorage.allocate(c.layers, allocator.num_pages, PAGE_SIZE, c.kv_heads, c.head_dim)
    backend = TorchAttention()
    tokens, new = prompts.flatten(), prompt_len  # [B * P]
    out = []
    start = 0.0
    for step in range(steps + 1):
        if step == 1:
            start = time.perf_counter()
        cached = [allocator.length(r, "main") for r in range(batch_size)]
        for r in range(batch_size):
            if not isinstance(allocator.append(r, "main", new), Appended):
                raise RuntimeError("the bench's KV pool is too small")
        tables = [allocator.page_table(r, "main") for r in range(batch_size)]
        batch = AttentionBatch(tables, cached, [new] * batch_size, PAGE_SIZE)
        last = torch.arange(1, batch_size + 1) * new - 1  # [B]
        logits = model(tokens, batch.positions(), KVStep(storage, backend, backend.plan(batch)), logits_at=last)
        tokens, new = logits.argmax(-1), 1  # [B]
        out.append(tokens)
    return time.perf_counter() - start, torch.stack(out, 1)  # [B, steps + 1]


def decode_recompute(model: LlamaModel, prompts: torch.Tensor, steps: int) -> tuple[float, torch.Tensor]:
    """The baseline: every step runs the whole sequence again; (seconds of the decode steps, tokens)."""
    seq = prompts  # [B, T]
    start = 0.0
    for step in range(steps + 1):
        if step == 1:
            start = time.perf_counter()
        length = seq.shape[1]
        positions = torch.arange(length).expand(seq.shape[0], -1)  # [B, T]
        logits = model(seq, positions, logits_at=torch.tensor([length - 1]))  # [B, 1, vocab]
        seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], dim=1)  # [B, T + 1]
    return time.perf_counter() - start, seq[:, prompts.shape[1]:]


def run(batches: list[int], prompt_len: int, steps: int, repeats: int) -> list[dict[str, float]]:
    torch.manual_seed(0)
    model = LlamaModel(LlamaConfig.preset("tiny")).eval()
    rows = []
    with torch.no_grad():
        for batch in batches:
            prompts = torch.randint(0, model.config.vocab, (batch, prompt_len))
            paged = [decode_paged(model, prompts, steps) for _ in range(repeats)]
            full = [decode_recompute(model, prompts, steps) for _ in range(repeats)]
            same = (paged[0][1] == full[0][1]).float().mean().item()
            kv_s, re_s = min(t for t, _ in paged), min(t for t, _ in full)
            rows.append({"batch": batch, "kv": batch * steps / kv_s, "recompute": batch * steps / re_s, "same": same})
    return rows


def main() -> list[dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens per sequence")
    parser.add_argument("--steps", type=int, default=64, help="decode steps timed")
    parser.add_argument("--repeats", type=int, default=2, help="runs per cell; the fastest counts")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = run([1, 8, 32], args.prompt, args.steps, args.repeats)
    print(f"tiny Llama (preset `tiny`), prompt {args.prompt} tokens, {args.steps} decode steps, "
          f"{torch.get_num_threads()} torch threads, page size {PAGE_SIZE}\n")
    print("| batch | KV engine (tokens/s) | recompute (tokens/s) | ratio | same greedy tokens |")
    print("|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['batch']} | {r['kv']:.0f} | {r['recompute']:.0f} | {r['kv'] / r['recompute']:.2f}x "
              f"| {r['same']:.0%} |")
    _plot(rows, args.prompt, args.steps)
    return rows


def _plot(rows: list[dict[str, float]], prompt_len: int, steps: int) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r["kv"] for r in rows], width=0.4, label="paged KV engine")
    ax.bar([x + 0.2 for x in xs], [r["recompute"] for r in rows], width=0.4, label="recompute full prefix")
    for x, r in zip(xs, rows):
        ax.annotate(f"{r['kv'] / r['recompute']:.1f}x", (x - 0.2, r["kv"]), ha="center", va="bottom")
    ax.set_xticks(list(xs), [f"batch {r['batch']:.0f}" for r in rows])
    ax.set_ylabel("decode tokens/s (CPU)")
    ax.set_title(f"tiny Llama, prompt {prompt_len}, {steps} decode steps")
    ax.legend()
    fig.tight_layout()
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "kv_decode.png", dpi=120)
    print(f"plot: {out / 'kv_decode.png'}")


if __name__ == "__main__":
    main()
