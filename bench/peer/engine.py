"""Table (a): decode tok/s at batch 1, 8 and 32, wgc's runtime against vLLM's `LLM.generate`, on the
same checkpoint, interleaved (wgc then vLLM at each batch, `repeats` rounds; the best round of each
is kept, the least disturbed on a shared CPU), greedy tokens compared."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from bench.peer.vllm_client import VllmWorker
from bench.peer.wgc_engine import WgcEngine

PROMPT, NEW = 32, 64


def prompts(batch: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[256] + [rng.randrange(min(vocab, 256)) for _ in range(PROMPT - 1)] for _ in range(batch)]


def engine_rows(name: str, directory: Path, plan: Path, python: str, out: Path, batches: list[int],
                repeats: int, vocab: int) -> list[dict[str, Any]]:
    wgc = WgcEngine(plan, directory)
    vllm = VllmWorker(python, out / f"vllm-engine-{name}.log")
    rows = []
    try:
        vllm.ask(op="engine", model=str(directory))
        warm = prompts(2, vocab, 99)
        wgc.generate(warm, 8), vllm.ask(op="generate", prompts=warm, max_tokens=8)
        for batch in batches:
            best = {"wgc": 0.0, "vllm": 0.0}
            paired: list[float] = []  # each round's wgc / vLLM, the two run back to back
            same = True
            for round_ in range(repeats):
                # prompts new to both engines' prefix caches each round (a repeat would skip its prefill)
                batch_prompts = prompts(batch, vocab, 1000 * batch + round_)
                ours = wgc.generate(batch_prompts, NEW)
                theirs = vllm.ask(op="generate", prompts=batch_prompts, max_tokens=NEW)
                same = same and ours["tokens"] == theirs["tokens"]
                best["wgc"] = max(best["wgc"], batch * NEW / ours["seconds"])
                best["vllm"] = max(best["vllm"], batch * NEW / theirs["seconds"])
                paired.append(theirs["seconds"] / ours["seconds"])
            rows.append({"model": name, "batch": batch, "wgc": best["wgc"], "vllm": best["vllm"], "same": same,
                         "paired": paired})
            print(f"engine {name} batch {batch}: wgc {best['wgc']:,.0f} tok/s, vLLM {best['vllm']:,.0f} tok/s, "
                  f"same greedy tokens: {same}", flush=True)
    finally:
        wgc.close()
        vllm.close()
    return rows
