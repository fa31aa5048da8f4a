"""A round's decode rows and a new prompt in one forward (PagedLlama.call_mixed) against the two
forwards the batcher ran before (decode, then prefill), on the same component, interleaved.

The llama family's `lm` on bench/peer's random-weight checkpoints (0.7M and 34M parameters), one
torch thread: B running sequences of 40 tokens decode one token each while P prompts of L tokens
are written; each cell times both ways in turn `--repeats` times (the fastest counts: these CPUs
are shared) and checks that both give the same tokens. The mixed forward's attention is planned
in two parts (kv_decode.SplitStep), so the decode rows keep their decode plan.
Prints a markdown table; writes bench/out/mixed_step.md and mixed_step.png.

    python bench/mixed_step.py [--cells 0.7m:16:1:32,34m:64:1:32] [--repeats 8]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wgc.models.llama import ChatModel  # noqa: E402
from wgc.runtime.components.base import Call  # noqa: E402

from bench.peer.checkpoints import write_llama  # noqa: E402
from bench.plotting import pyplot  # noqa: E402
from wgc.plan.model import ComponentSpec  # noqa: E402

OUT = ROOT / "bench" / "out"
CELLS = "0.7m:16:1:32,0.7m:64:1:32,34m:16:1:32,34m:32:2:32,34m:64:1:32"
GREEDY = (0.0, 1.0)


def component(directory: Path) -> ChatModel:
    os.environ["WGC_LLAMA_DIR"] = str(directory)
    spec = ComponentSpec("lm", "wgc.models.llama.ChatModel", "kv", [], {"eos": -1}, [], {}, [0], 1,
                         {"page_size": 16, "max_batch": 256, "kv_memory": 256 << 20})
    return ChatModel(spec, 0, "cpu")


def cell(lm: ChatModel, rows: int, prompts: int, length: int, repeats: int, base: int) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(base)

    def prompt(n: int) -> list[int]:
        return [256, *torch.randint(0, 256, (n - 1,), generator=gen).tolist()]

    lm.prefill([Call(base + r, "", (prompt(40), *GREEDY)) for r in range(rows)])
    times: dict[str, list[float]] = {"mixed": [], "apart": []}
    same = True
    fresh = base + rows
    for i in range(repeats):
        new = [prompt(length) for _ in range(prompts)]
        outs = {}
        for way in ("mixed", "apart") if i % 2 else ("apart", "mixed"):
            decodes = [Call(base + r, "", (5, *GREEDY)) for r in range(rows)]
            fills = [Call(fresh + p, "", (new[p], *GREEDY)) for p in range(prompts)]
            began = time.perf_counter()
            if way == "mixed":
                got = lm.call_mixed([("decode", decodes), ("prefill", fills)])
            else:
                got = [lm.call("decode", decodes), lm.call("prefill", fills)]
            times[way].append(time.perf_counter() - began)
            outs[way] = got[1]  # the prompts' first tokens (the decode rows' histories differ by one step)
            for p in range(prompts):
                lm.release(fresh + p)
        same = same and outs["mixed"] == outs["apart"]
    for r in range(rows):
        lm.release(base + r)
    mixed, apart = min(times["mixed"]), min(times["apart"])
    return {"rows": rows, "prompts": prompts, "length": length, "mixed": mixed, "apart": apart, "same": same}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", default=CELLS, help="model:decode rows:prompts:prompt length, comma-separated")
    p.add_argument("--repeats", type=int, default=8)
    args = p.parse_args()
    torch.set_num_threads(1)
    results: list[tuple[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="mixed-step-") as tmp:
        models: dict[str, ChatModel] = {}
        for n, text in enumerate(args.cells.split(",")):
            name, rows, prompts, length = text.split(":")
            if name not in models:
                models[name] = component(write_llama(Path(tmp) / name, name))
            results.append((name, cell(models[name], int(rows), int(prompts), int(length), args.repeats, 1000 * n)))
            print(f"{text}: {results[-1][1]}", flush=True)
    lines = ["| model | decode rows | prompts × tokens | two forwards (ms) | one mixed (ms) | speed-up | same tokens |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for name, r in results:
        lines.append(f"| {name} | {r['rows']} | {r['prompts']} × {r['length']} | {r['apart'] * 1e3:.2f} | "
                     f"{r['mixed'] * 1e3:.2f} | {r['apart'] / r['mixed']:.2f}× | {'yes' if r['same'] else 'NO'} |")
    text = "\n".join(lines)
    print(text)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "mixed_step.md").write_text(text + "\n", encoding="utf-8")
    _plot(results)


def _plot(results: list[tuple[str, dict[str, Any]]]) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(9, 4))
    xs = range(len(results))
    ax.bar([x - 0.2 for x in xs], [r["apart"] * 1e3 for _, r in results], width=0.4, label="decode, then prefill")
    ax.bar([x + 0.2 for x in xs], [r["mixed"] * 1e3 for _, r in results], width=0.4, label="one mixed forward")
    ax.set_xticks(list(xs), [f"{n}\n{r['rows']} + {r['prompts']}×{r['length']}" for n, r in results])
    ax.set_ylabel("ms per round")
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "mixed_step.png", dpi=120)
    print(f"plot: {OUT / 'mixed_step.png'}")


if __name__ == "__main__":
    main()
