"""Memory-aware scheduling (tiny Orpheus, CPU, in process): each wgc setting against a baseline setting.

The walk as compiled for placements/cpu.toml (max_batch 8: a larger batch runs in slices of 8) on
LocalCluster(rounds=1), which runs like a worker process (messages delivered between batched
rounds), with the real tiny components; the language model records the time each of its tokens
came out (tests/models/orpheus/scheduling.py). One torch thread by default. Each table
runs the wgc setting and the baseline setting --repeats times, interleaved (A B, B A, ...), after one
untimed warm-up of each; it shows the medians and the median of the per-pair ratios, so that the
slow and fast spells of a shared machine fall on both sides of a ratio rather than between them.

1. Mixed load: short requests decoding while long prompts arrive among them (one every `every`
   decode steps, submitted from the LM's decode hook). Inter-token gap of the short requests: the
   wall time between two consecutive decode calls that include the request. Chunked prefill (a
   token budget per round; decodes go first) vs no budget (the whole prompt in one forward).
2. Throughput under KV pressure: many requests on a pool that fits about a quarter of them at once
   (preempted requests swap out, deferred calls wait) vs a pool that fits them all, prefix caching
   off on both (the pool size alone; --pressure-caching turns it on). Every request must finish,
   and every page come back, or the bench stops.
3. Prefix caching: time to first token (from submit to the request's first token, i.e. its prefill
   done) of requests sharing a long prefix, with one warm-up request having published it; cache on
   vs off.
Prints three markdown tables; writes bench/out/scheduler.png.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wgc.models.orpheus.vocab import encode_prompt, tiny_tokenizer  # noqa: E402
from wgc.runtime.coordinator.request import RequestSpec  # noqa: E402
from wgc.runtime.process.local import LocalCluster  # noqa: E402

from bench.plotting import pyplot  # noqa: E402
from tests.models.orpheus.scheduling import PAGE, cluster, lm_of, speech  # noqa: E402

VOICES = ["tara", "leo", "zoe", "mia"]
Row = dict[str, float]


@dataclass(frozen=True)
class Sizes:
    shorts: int = 8  # table 1: short requests decoding ...
    short_tokens: int = 80
    longs: int = 6  # ... and long prompts of `long_words` words ("word ", 5 tokens each) among them
    long_words: int = 140
    every: int = 10  # decode steps of the short requests between two long prompts
    budget: int = 64  # tokens a round, chunked
    load: int = 32  # table 2: requests ...
    load_tokens: int = 40
    share: float = 0.25  # ... on a pool for this share of them
    shared: int = 512  # table 3: tokens of the shared prefix ...
    sharers: int = 8  # ... of this many requests
    sharer_tokens: int = 8


QUICK = Sizes(shorts=3, short_tokens=12, longs=1, long_words=30, every=3, budget=32, load=6, load_tokens=8,
              shared=64, sharers=2, sharer_tokens=2)


def prompt_tokens(spec: RequestSpec) -> int:
    return len(encode_prompt(tiny_tokenizer(), spec.params["voice"], spec.inputs["prompt"]))


def pages_for(specs: list[RequestSpec]) -> int:
    """Pages the requests hold at their longest, all at once."""
    return sum(math.ceil((prompt_tokens(s) + s.params["max_tokens"]) / PAGE) for s in specs)


def finish(c: LocalCluster, ids: list[int]) -> None:
    """Every request done, none failed, no page held: or the bench stops."""
    events = c.take_events()
    errors = [e.error for e in events if e.kind == "error"]
    done = {e.request for e in events if e.kind == "done"}
    if errors or not set(ids) <= done:
        raise RuntimeError(f"{len(set(ids) - done)} of {len(ids)} requests did not finish: {errors[:3]} {c.stuck()}")
    lm = c.executors[0].components["llm"]
    if lm.counters()["kv_pages_used"]:
        raise RuntimeError("the bench leaked KV pages")


def percentile(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


# ---- 1. mixed load ------------------------------------------------------------------------------

def long_prompt(s: Sizes, i: int) -> RequestSpec:
    """Each different from its first page on: no prefix cache hit between them."""
    return speech(f"{i}: " + "word " * s.long_words, 8)


def mixed(s: Sizes, budget: int | None) -> Row:
    shorts = [speech(f"short request {i}", s.short_tokens, VOICES[i % 4]) for i in range(s.shorts)]
    longs_specs = [long_prompt(s, i) for i in range(s.longs)]
    c, made = cluster(pages=pages_for([*shorts, *longs_specs]) + 16, budget=budget)
    lm = lm_of(made)
    ids = [c.submit(x) for x in shorts]
    longs: dict[int, float] = {}  # request → when it was submitted
    steps = [0]

    def arrive(_batch: int) -> None:  # counts the steps of the first short request
        if any(r == ids[0] for r, _ in lm.log[-1][1]):
            steps[0] += 1
            if steps[0] % s.every == 0 and len(longs) < s.longs:
                longs[c.submit(longs_specs[len(longs)])] = time.perf_counter()

    lm.on_decode = arrive
    c.pump()
    finish(c, [*ids, *longs])
    if len(longs) < s.longs:
        raise RuntimeError(f"only {len(longs)} of {s.longs} long prompts arrived: the short requests ended first")
    gaps = [b - a for r in ids for a, b in pairwise(lm.stamps[r][1:])]  # [1:]: decode tokens only
    return {"gap_p50": percentile(gaps, 0.5), "gap_p99": percentile(gaps, 0.99), "gap_max": max(gaps),
            "chunk_max": max(n for entry, calls in lm.log if entry == "prefill" for r, n in calls if r in longs),
            "long_ttft": statistics.median(lm.stamps[r][0] - at for r, at in longs.items())}


# ---- 2. KV pressure -----------------------------------------------------------------------------

def load(s: Sizes) -> list[RequestSpec]:
    return [speech(f"request number {i} says hello" + " again" * (i % 3), s.load_tokens, VOICES[i % 4])
            for i in range(s.load)]


def pressure(s: Sizes, pages: int, caching: bool) -> Row:
    specs = load(s)
    c, made = cluster(pages=pages, caching=caching)
    start = time.perf_counter()
    ids = [c.submit(x) for x in specs]
    c.pump()
    wall = time.perf_counter() - start
    finish(c, ids)
    stats = c.executors[0].counters()
    return {"rps": len(ids) / wall, "wall": wall, "preemptions": stats["preemptions"],
            "deferred": stats["deferred_calls"], "swapped_in": lm_of(made).counters()["kv_swapped_in"],
            "finished": len(ids)}


# ---- 3. prefix caching --------------------------------------------------------------------------

def shared_prefix(s: Sizes) -> str:
    """Text whose prompt's first `s.shared` tokens are the same whatever follows it."""
    a, b = (encode_prompt(tiny_tokenizer(), "tara", t) for t in ("a", "b"))
    head = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)  # control tokens and "tara: "
    text = "a shared system prompt for every request, long enough to fill many pages; " * (s.shared // 32 + 1)
    return text[:s.shared - head]  # byte-level tokenizer: one token a byte


def caching(s: Sizes, on: bool) -> Row:
    prefix = shared_prefix(s)
    specs = [speech(prefix + f" then part {i}", s.sharer_tokens) for i in range(s.sharers)]
    c, made = cluster(pages=pages_for(specs) * 2 + 64, caching=on)
    lm = lm_of(made)
    c.run([speech(prefix + " warm-up", s.sharer_tokens)])  # publishes the prefix's pages
    hits = lm.counters()["prefix_hit_tokens"]
    submitted = {c.submit(x): time.perf_counter() for x in specs}
    c.pump()
    finish(c, list(submitted))
    ttft = [lm.stamps[r][0] - at for r, at in submitted.items()]
    hits = lm.counters()["prefix_hit_tokens"] - hits
    written = sum(n for entry, calls in lm.log if entry == "prefill" for r, n in calls if r in submitted)
    return {"ttft_p50": statistics.median(ttft), "ttft_max": max(ttft), "hit": hits, "computed": written - hits,
            "prompts": sum(prompt_tokens(x) for x in specs)}


# ---- pairing, tables, plot ----------------------------------------------------------------------

def paired(repeats: int, ours: Callable[[], Row], base: Callable[[], Row]) -> dict[str, Any]:
    """Both sides `repeats` times, interleaved (the order alternating), after one warm-up each."""
    ours(), base()
    runs: dict[str, list[Row]] = {"wgc": [], "baseline": []}
    for i in range(repeats):
        for side in (("wgc", "baseline") if i % 2 == 0 else ("baseline", "wgc")):
            runs[side].append((ours if side == "wgc" else base)())
    return {side: {k: statistics.median(r[k] for r in rows) for k in rows[0]} for side, rows in runs.items()} | {
        "pairs": list(zip(runs["wgc"], runs["baseline"]))}


def ratio(result: dict[str, Any], key: str) -> float:
    """Baseline over wgc, the median of the pairs."""
    return statistics.median(b[key] / a[key] if a[key] else math.inf for a, b in result["pairs"])


def ms(x: float) -> str:
    return f"{1000 * x:.1f}"


def table_mixed(r: dict[str, Any], s: Sizes) -> list[str]:
    out = [f"### 1. Mixed load: {s.shorts} short requests ({s.short_tokens} tokens) decoding, {s.longs} prompts of "
           f"{prompt_tokens(long_prompt(s, 0))} tokens arriving one every {s.every} steps\n",
           "| prefill | inter-token gap p50 (ms) | p99 (ms) | max (ms) | long prompt's largest chunk (tokens) | "
           "long prompt TTFT p50 (ms) |", "|---|---:|---:|---:|---:|---:|"]
    for side, name in (("wgc", f"chunked (token_budget {s.budget}): wgc"), ("baseline", "whole prompt (no budget)")):
        x = r[side]
        out.append(f"| {name} | {ms(x['gap_p50'])} | {ms(x['gap_p99'])} | {ms(x['gap_max'])} | "
                   f"{x['chunk_max']:.0f} | {ms(x['long_ttft'])} |")
    out.append(f"| baseline / wgc | {ratio(r, 'gap_p50'):.2f}x | {ratio(r, 'gap_p99'):.2f}x | "
               f"{ratio(r, 'gap_max'):.2f}x | {ratio(r, 'chunk_max'):.1f}x | {ratio(r, 'long_ttft'):.2f}x |")
    out.append(f"\nChunking cuts the short requests' p99 inter-token gap {ratio(r, 'gap_p99'):.2f}x "
               f"(p50 {ratio(r, 'gap_p50'):.2f}x); the price is the long prompts' own first token, "
               f"{1 / ratio(r, 'long_ttft'):.2f}x later.")
    return out


def table_pressure(r: dict[str, Any], s: Sizes, pages: tuple[int, int]) -> list[str]:
    out = [f"### 2. KV pressure: {s.load} requests ({s.load_tokens} tokens each), {pages[1]} pages "
           f"hold them all\n",
           "| pool | pages | requests/s | wall (s) | preemptions | deferred calls | swapped in | finished |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for side, name, n in (("wgc", f"~{s.share:.0%} of the load: wgc", pages[0]), ("baseline", "all of it", pages[1])):
        x = r[side]
        out.append(f"| {name} | {n} | {x['rps']:.1f} | {x['wall']:.2f} | {x['preemptions']:.0f} | "
                   f"{x['deferred']:.0f} | {x['swapped_in']:.0f} | {x['finished']:.0f}/{s.load} |")
    out.append(f"| baseline / wgc | | {ratio(r, 'rps'):.2f}x | | | | | |")
    out.append(f"\nOn {pages[0] / pages[1]:.0%} of the memory every request finishes at {1 / ratio(r, 'rps'):.0%} "
               f"of the roomy pool's throughput, paying {r['wgc']['preemptions']:.0f} preemptions and "
               f"{r['wgc']['deferred']:.0f} deferred calls (medians).")
    return out


def table_caching(r: dict[str, Any], s: Sizes) -> list[str]:
    out = [f"### 3. Prefix caching: {s.sharers} requests sharing a {s.shared}-token prefix, after one warm-up "
           f"request\n",
           "| prefix cache | TTFT p50 (ms) | TTFT max (ms) | prefix hit tokens | prompt tokens computed |",
           "|---|---:|---:|---:|---:|"]
    for side, name in (("wgc", "on: wgc"), ("baseline", "off")):
        x = r[side]
        out.append(f"| {name} | {ms(x['ttft_p50'])} | {ms(x['ttft_max'])} | {x['hit']:.0f} | "
                   f"{x['computed']:.0f} of {x['prompts']:.0f} |")
    out.append(f"| baseline / wgc | {ratio(r, 'ttft_p50'):.2f}x | {ratio(r, 'ttft_max'):.2f}x | | |")
    out.append(f"\nWith the prefix cached the first token comes {ratio(r, 'ttft_p50'):.2f}x sooner (p50): the "
               f"requests compute {r['wgc']['computed']:.0f} prompt tokens instead of {r['baseline']['computed']:.0f}.")
    return out


def plot(results: dict[str, dict[str, Any]], s: Sizes, out: Path = ROOT / "bench" / "out") -> Path | None:
    plt = pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    panels = (("mixed", [("gap_p50", "gap p50"), ("gap_p99", "gap p99")], 1000.0,
               "1. short requests' inter-token gap (ms)", (f"chunked ({s.budget})", "whole prompt")),
              ("pressure", [("rps", "requests/s")], 1.0, "2. throughput under KV pressure",
               (f"pool ~{s.share:.0%}", "pool 100%")),
              ("caching", [("ttft_p50", "TTFT p50"), ("ttft_max", "TTFT max")], 1000.0,
               f"3. time to first token, {s.shared}-token prefix (ms)", ("cache on", "cache off")))
    for ax, (name, keys, scale, title, labels) in zip(axes, panels):
        r = results[name]
        xs = range(len(keys))
        ax.bar([x - 0.2 for x in xs], [r["wgc"][k] * scale for k, _ in keys], width=0.4, label=f"{labels[0]}: wgc")
        ax.bar([x + 0.2 for x in xs], [r["baseline"][k] * scale for k, _ in keys], width=0.4, label=labels[1])
        ax.set_xticks(list(xs), [label for _, label in keys])
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8, loc="upper left")
    fig.suptitle("Orpheus tiny preset on CPU: memory-aware scheduling (medians of interleaved pairs)")
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "scheduler.png"
    fig.savefig(path, dpi=120)
    return path


def run(s: Sizes, repeats: int, pressure_caching: bool = False) -> tuple[str, dict[str, dict[str, Any]]]:
    roomy = pages_for(load(s)) + s.load
    tight = max(math.ceil(roomy * s.share), max(pages_for([x]) for x in load(s)))
    results = {"mixed": paired(repeats, lambda: mixed(s, s.budget), lambda: mixed(s, None)),
               "pressure": paired(repeats, lambda: pressure(s, tight, pressure_caching),
                                       lambda: pressure(s, roomy, pressure_caching)),
               "caching": paired(repeats, lambda: caching(s, True), lambda: caching(s, False))}
    lines = [f"Orpheus tiny preset on CPU, {torch.get_num_threads()} torch thread(s), {repeats} interleaved pairs "
             f"per table (medians; ratios: median of the pairs)\n",
             *table_mixed(results["mixed"], s), "", *table_pressure(results["pressure"], s, (tight, roomy)), "",
             *table_caching(results["caching"], s)]
    return "\n".join(lines), results


def main(argv: list[str] | None = None) -> dict[str, dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="interleaved pairs per table")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one pair: a smoke run of a few seconds")
    parser.add_argument("--pressure-caching", action="store_true",
                        help="table 2 with prefix caching on (off by default: the table measures the pool alone)")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    sizes = QUICK if args.quick else Sizes()
    report, results = run(sizes, 1 if args.quick else args.repeats, args.pressure_caching)
    print(report)
    if not args.no_plot:
        path = plot(results, sizes)
        if path is not None:
            print(f"\nplot: {path}")
    return results


if __name__ == "__main__":
    main()
