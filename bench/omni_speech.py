"""Qwen3-Omni speech out (models/qwen3_omni.walk, tiny preset, random weights, CPU): wgc vs transformers generate.

A request is a short chat answered with speech: one user text part, outputs text and audio, greedy
thinker (`reply` tokens) and greedy talker (`frames` codec frames, speaker Chelsie), so that on one
model both sides produce the same reply and frames (the greedy check at the end says how many do;
each side's audio per request is in table 1: a talker that samples its EOS ends early). c requests arrive
together. wgc runs through the runtime (Runtime.start: a coordinator in this process and one worker
process per rank); the baseline is transformers 5.24's `Qwen3OmniMoeForConditionalGeneration.generate`
(return_audio=True) on the same tiny weights (bench/omni_reference.py), one request at a time, and
batched: 5.24's generate takes a left-padded batch (input_ids + attention_mask) and returns one
waveform per row, so both are shown. Its audio comes whole at the end of a generate; wgc's streams
a left_context(25, 25) window at a time.

1. Audio-seconds per wall-second (all audio over the wall time of the c requests) and real-time
   factor (p50 over requests: arrival to last audio, over its audio duration) at 1, 4, 16.
2. Time to first audio (TTFA, p50) against the floor: thinker prefill (the prompt part and
   begin_reply) + the talker's first 25 frames (prefill, last_prefill, 24 decodes) + one code2wav
   window, each timed on the components in this process at batch c, right after each wgc run;
   the ratio is the median over those pairs.
3. Talker and code2wav beside the thinker on one rank vs on their own rank (the two-rank placement
   placements/qwen3-omni-cpu2.toml: thinker on rank 0, talker + code2wav on rank 1), at 4 and 16.
Both placements take max_batch 16. One torch thread per process by default (--threads), so a rank
is one core; the coordinator shares the two cores with the workers. Runs interleave the sides
(order alternating per repeat); medians of `repeats` runs (`rank_repeats` for the two placements).
Prints three markdown tables and the greedy check (reply and codec frames of one request through
the walk vs transformers, and the worker run's audio against transformers'); writes
bench/out/omni_speech.png.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import omni_reference as ref  # noqa: E402
from wgc.models.qwen3_omni.code2wav_config import SAMPLE_RATE  # noqa: E402
from wgc.runtime.api import DoneEvent, OutputEvent, Runtime  # noqa: E402

from bench.plotting import pyplot  # noqa: E402
from wgc.compile import compile_program  # noqa: E402
from wgc.plan.model import Plan  # noqa: E402

ENGINE = """
[defaults.engine]
kv_memory = "256MiB"
page_size = 16
max_batch = 16
"""
ONE_RANK = '[cluster]\ndevice = "cpu"\nranks = 1\n\n[defaults]\nranks = 0\n' + ENGINE
SHIPPED_TWO = ROOT / "placements" / "qwen3-omni-cpu2.toml"
TWO_RANK = """[cluster]
device = "cpu"
ranks = 2

[defaults]
ranks = 0

[components]
audio_enc = 0
vision_enc = 0
thinker = 0
talker = 1
code2wav = 1
""" + ENGINE
PROMPTS = ["Hello, how are you today?", "Tell me a short story.", "What is the weather like?",
           "Say something nice about cats.", "Count to ten, please.", "What should I cook tonight?"]
Row = dict[str, Any]


@dataclass(frozen=True)
class Sizes:
    levels: tuple[int, ...] = (1, 4, 16)
    rank_levels: tuple[int, ...] = (4, 16)
    reply: int = 16  # thinker reply tokens
    frames: int = 75  # codec frames per request: 3 windows, 5.98 s of audio
    repeats: int = 2  # runs per side and level
    rank_repeats: int = 4  # runs of the two wgc placements at the rank levels (cheap; the noisiest ratio)


QUICK = Sizes(levels=(1, 2), rank_levels=(2,), reply=4, frames=30, repeats=1, rank_repeats=1)


def placement_text(ranks: int) -> tuple[str, str]:
    """(toml, what it is): the shipped two-rank placement with max_batch 16 when it is there."""
    if ranks == 1:
        return ONE_RANK, "1 rank (cpu.toml, max_batch 16)"
    if SHIPPED_TWO.is_file():
        return f'extends = "{SHIPPED_TWO}"\n' + ENGINE, "2 ranks (qwen3-omni-cpu2.toml, max_batch 16)"
    return TWO_RANK, "2 ranks (thinker | talker + code2wav, inline, max_batch 16)"


def compile_plan(ranks: int) -> Plan:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"omni-{ranks}.toml"
        path.write_text(placement_text(ranks)[0])
        source = ROOT / "models" / "qwen3_omni.walk"
        compiled = compile_program(str(source), source.read_text(), str(path))
    if compiled.plan is None:
        raise SystemExit("; ".join(d.message for d in compiled.diagnostics))
    return compiled.plan


# ---- one run of c requests ----------------------------------------------------------------------------

def summarize(lines: list[list[tuple[float, int]]], wall: float) -> Row:
    """lines: per request, (seconds since arrival, samples) of each audio chunk."""
    audio = [sum(n for _, n in line) / SAMPLE_RATE for line in lines]
    ttfa = sorted(line[0][0] for line in lines if line)
    rtf = [line[-1][0] / a for line, a in zip(lines, audio) if a]
    return {"ttfa": statistics.median(ttfa) if ttfa else None,
            "ttfa_p90": ttfa[min(len(ttfa) - 1, int(0.9 * len(ttfa)))] if ttfa else None,
            "rtf": statistics.median(rtf) if rtf else None, "audio_per_s": sum(audio) / wall,
            "audio_s": sum(audio), "per_request": sum(audio) / len(audio), "wall": wall, "chunks": sum(map(len, lines)) / len(lines)}


async def wgc_run(rt: Runtime, c: int, s: Sizes) -> tuple[Row, list[torch.Tensor]]:
    start = time.perf_counter()
    handles = [rt.submit(params=ref.params(s.reply, s.frames), parts=[{"kind": "text", "payload": PROMPTS[i % 6]}],
                         outputs=["text", "audio"]) for i in range(c)]

    async def follow(handle: Any) -> tuple[list[tuple[float, int]], list[torch.Tensor]]:
        line, wav = [], []
        async for event in handle.events():
            if isinstance(event, OutputEvent) and event.modality == "audio":
                line.append((event.t_since_submit, int(event.shape[-1])))
                wav.append(torch.as_tensor(event.payload).reshape(-1))
            elif not isinstance(event, (OutputEvent, DoneEvent)):
                raise RuntimeError(f"a speech request ended with {event}")
        return line, wav

    got = await asyncio.gather(*(follow(h) for h in handles))
    wall = time.perf_counter() - start
    return summarize([line for line, _ in got], wall), [torch.cat(w) if w else torch.empty(0) for _, w in got]


def hf_run(model: Any, thinker: Any, c: int, s: Sizes, batched: bool) -> tuple[Row, list[torch.Tensor]]:
    prompts = [PROMPTS[i % 6] for i in range(c)]
    start = time.perf_counter()
    lines, wavs = [], []
    for group in ([prompts] if batched else [[p] for p in prompts]):
        _, got = ref.hf_generate(model, thinker, group, s.reply, s.frames)
        now = time.perf_counter() - start
        lines += [[(now, int(w.numel()))] for w in got]
        wavs += got
    return summarize(lines, time.perf_counter() - start), wavs


# ---- the measurement --------------------------------------------------------------------------------

async def measure(s: Sizes) -> Row:
    plans = {1: compile_plan(1), 2: compile_plan(2)}
    comps = ref.components(plans[1])
    model = ref.twin(comps)
    th = comps["thinker"]
    ref.hf_generate(model, th, PROMPTS[:1], 2, 4)  # first-call costs out of the way
    check = greedy_check(plans[1], comps, model, s)
    runtimes: dict[int, Runtime] = {}
    try:  # one after the other: three worker processes starting at once on two cores take longer
        for ranks in (1, 2):
            runtimes[ranks] = await Runtime.start(plans[ranks], ready_timeout=120)
            await wgc_run(runtimes[ranks], 2, Sizes(reply=4, frames=30))
        runs: dict[tuple[str, int], list[Row]] = {}
        floors: dict[int, list[Row]] = {}
        first_wav: list[torch.Tensor] = []
        for c in s.levels:
            for rep in range(s.rank_repeats if c in s.rank_levels else s.repeats):
                sides = ["one", *(["two"] if c in s.rank_levels else []), *(["hf", "hf_batch"] if rep < s.repeats else [])]
                for side in sides if rep % 2 == 0 else sides[::-1]:
                    if side in ("one", "two"):
                        row, wavs = await wgc_run(runtimes[1 if side == "one" else 2], c, s)
                        first_wav = first_wav or (wavs[:1] if side == "one" else [])
                    else:
                        row, _ = hf_run(model, th, c, s, side == "hf_batch")
                    runs.setdefault((side, c), []).append(row)
                    if side == "one":
                        floors.setdefault(c, []).append(ref.floor_parts(comps, [PROMPTS[i % 6] for i in range(c)],
                                                                        s.reply, 10_000_000 + 1000 * rep))
        check["worker_diff"] = audio_diff(first_wav[0], check["hf_audio"]) if first_wav else None
        return {"runs": runs, "floors": floors, "check": check}
    finally:
        await asyncio.gather(*(rt.close() for rt in runtimes.values()))


def greedy_check(plan: Plan, comps: dict, model: Any, s: Sizes) -> Row:
    """One request (PROMPTS[0]) through the walk in process vs transformers' generate: the reply, the
    codec frames, the streamed audio."""
    th = comps["thinker"]
    reply, frames, audio = ref.wgc_greedy(plan, comps, PROMPTS[0], s.reply, s.frames)
    model.frames.clear()
    want_reply, wavs = ref.hf_generate(model, th, PROMPTS[:1], s.reply, s.frames)
    want = model.frames[0][0].T  # [F, 16]
    n = min(len(frames), len(want))
    equal = (frames[:n] == want[:n]).all(dim=1).tolist() + [False]
    same = equal.index(False)  # the frames equal from the first on
    return {"reply_same": reply == want_reply[0], "reply": len(reply), "frames": len(frames),
            "hf_frames": len(want), "same_frames": same, "audio_diff": audio_diff(audio, wavs[0]),
            "hf_audio": wavs[0], "rows_shared": ref.rows_shared(comps)}


def audio_diff(a: torch.Tensor, b: torch.Tensor) -> float | None:
    return float((a - b).abs().max()) if a.numel() == b.numel() and a.numel() else None


def median_row(rows: list[Row]) -> Row:
    return {k: statistics.median(r[k] for r in rows) if rows[0][k] is not None else None for k in rows[0]}


def paired(a: list[Row], b: list[Row], key: str) -> float:
    return statistics.median(x[key] / y[key] for x, y in zip(a, b))


# ---- tables, plot ------------------------------------------------------------------------------------

def ms(x: float | None) -> str:
    return "-" if x is None else f"{1000 * x:.0f}"


def num(x: float | None, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x, fmt)


SIDES = {"one": "wgc, 1 rank (worker process)", "hf": "transformers generate, one at a time",
         "hf_batch": "transformers generate, batched"}


def table_throughput(res: Row, s: Sizes) -> list[str]:
    runs = res["runs"]
    out = ["### 1. Speech throughput and RTF\n",
           "| concurrent | side | audio-s / wall-s | vs one at a time | RTF p50 | TTFA p50 (ms) | TTFA p90 (ms) | audio s / request |",
           "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for c in s.levels:
        for side, label in SIDES.items():
            r = median_row(runs[side, c])
            ratio = paired(runs[side, c], runs["hf", c], "audio_per_s")
            out.append(f"| {c} | {label} | {r['audio_per_s']:.2f} | {ratio:.2f}x | {num(r['rtf'])} | {ms(r['ttfa'])} | "
                       f"{ms(r['ttfa_p90'])} | {r['per_request']:.2f} |")
    top = s.levels[-1]
    out.append(f"\nReading: at {top} concurrent wgc makes {paired(runs['one', top], runs['hf', top], 'audio_per_s'):.2f}x "
               f"the audio-s/wall-s of generate one at a time and "
               f"{paired(runs['one', top], runs['hf_batch', top], 'audio_per_s'):.2f}x of batched generate, and "
               f"streams its first window while generate returns audio only at its end.")
    return out


def table_floor(res: Row, s: Sizes) -> list[str]:
    out = ["### 2. Time to first audio against the floor (wgc, 1 rank)\n",
           "| concurrent | thinker prefill (ms) | 25 talker frames (ms) | 1 code2wav window (ms) | floor (ms) | "
           "TTFA p50 (ms) | TTFA / floor |", "|---:|---:|---:|---:|---:|---:|---:|"]
    ratios = []
    for c in s.levels:
        f = ref.median_parts(res["floors"][c])
        runs = res["runs"]["one", c]
        ratio = statistics.median(r["ttfa"] / p["floor"] for r, p in zip(runs, res["floors"][c]))
        ratios.append(ratio)
        out.append(f"| {c} | {ms(f['prefill'])} | {ms(f['talker'])} | {ms(f['window'])} | {ms(f['floor'])} | "
                   f"{ms(median_row(runs)['ttfa'])} | {ratio:.2f}x |")
    out.append(f"\nReading: TTFA is {min(ratios):.2f}-{max(ratios):.2f}x the floor; the rest is the thinker's reply "
               f"decode steps the talker's first frames wait on (one a frame, {min(s.reply, 25)} of them, not in the "
               f"floor), and the runtime's messaging and scheduling.")
    return out


def table_ranks(res: Row, s: Sizes) -> list[str]:
    runs = res["runs"]
    out = ["### 3. Talker + code2wav beside the thinker (1 rank) or on their own rank (2 ranks), worker processes\n",
           "| concurrent | placement | audio-s / wall-s | RTF p50 | TTFA p50 (ms) | throughput 2 / 1 | TTFA 2 / 1 |",
           "|---:|---|---:|---:|---:|---:|---:|"]
    for c in s.rank_levels:
        for side, ranks in (("one", 1), ("two", 2)):
            r = median_row(runs[side, c])
            tp = paired(runs[side, c], runs["one", c], "audio_per_s")
            tt = paired(runs[side, c], runs["one", c], "ttfa")
            out.append(f"| {c} | {placement_text(ranks)[1]} | {r['audio_per_s']:.2f} | {num(r['rtf'])} | "
                       f"{ms(r['ttfa'])} | {tp:.2f}x | {tt:.2f}x |")
    top = s.rank_levels[-1]
    out.append(f"\nReading: at {top} concurrent the two-rank split makes "
               f"{paired(runs['two', top], runs['one', top], 'audio_per_s'):.2f}x the audio-s/wall-s of one rank "
               f"with {paired(runs['two', top], runs['one', top], 'ttfa'):.2f}x its TTFA (two processes on two cores "
               f"against one).")
    return out


def check_line(ch: Row) -> str:
    diff = "-" if ch["audio_diff"] is None else f"{ch['audio_diff']:.1e}"
    worker = "-" if ch.get("worker_diff") is None else f"{ch['worker_diff']:.1e}"
    return (f"Greedy check ({PROMPTS[0]!r}, {ref.SPEAKER}): reply {'equal' if ch['reply_same'] else 'DIFFERENT'} "
            f"({ch['reply']} tokens); the first {ch['same_frames']} codec frames equal (wgc {ch['frames']}, transformers {ch['hf_frames']}); "
            f"streamed audio vs transformers max |diff| {diff}, the worker run's {worker}; the talker's thinker "
            f"rows {'are' if ch['rows_shared'] else 'are NOT'} the thinker's embeddings.")


def plot(res: Row, s: Sizes, out: Path = ROOT / "bench" / "out") -> Path | None:
    plt = pyplot()
    if plt is None:
        return None
    runs = res["runs"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
    xs = range(len(s.levels))
    for i, (side, label) in enumerate(SIDES.items()):
        axes[0].bar([x + 0.27 * (i - 1) for x in xs], [median_row(runs[side, c])["audio_per_s"] for c in s.levels],
                    width=0.27, label=label)
    axes[0].set_xticks(list(xs), [f"c={c}" for c in s.levels])
    axes[0].set_title("1. audio-seconds per wall-second", fontsize=10)
    axes[0].legend(fontsize=7, loc="upper left")
    bottom = [0.0] * len(s.levels)
    for part, label in (("prefill", "thinker prefill"), ("talker", "25 talker frames"), ("window", "1 code2wav window")):
        vals = [1000 * ref.median_parts(res["floors"][c])[part] for c in s.levels]
        axes[1].bar([x - 0.2 for x in xs], vals, width=0.4, bottom=bottom, label=f"floor: {label}")
        bottom = [b + v for b, v in zip(bottom, vals)]
    axes[1].bar([x + 0.2 for x in xs], [1000 * median_row(runs["one", c])["ttfa"] for c in s.levels], width=0.4,
                color="black", label="TTFA p50: wgc")
    axes[1].set_xticks(list(xs), [f"c={c}" for c in s.levels])
    axes[1].set_title("2. time to first audio vs floor (ms)", fontsize=10)
    axes[1].legend(fontsize=7, loc="upper left")
    rx = range(len(s.rank_levels))
    for i, (side, label) in enumerate((("one", "1 rank"), ("two", "2 ranks"))):
        axes[2].bar([x + 0.4 * (i - 0.5) for x in rx], [median_row(runs[side, c])["audio_per_s"] for c in s.rank_levels],
                    width=0.4, label=f"{label} (TTFA ms above)")
        for x, c in zip(rx, s.rank_levels):
            r = median_row(runs[side, c])
            axes[2].annotate(ms(r["ttfa"]), (x + 0.4 * (i - 0.5), r["audio_per_s"]), ha="center", va="bottom", fontsize=8)
    axes[2].set_ylim(0, 1.25 * max(median_row(runs[side, c])["audio_per_s"] for side in ("one", "two")
                                   for c in s.rank_levels))
    axes[2].set_xticks(list(rx), [f"c={c}" for c in s.rank_levels])
    axes[2].set_title("3. audio-s per wall-s: talker + code2wav on rank 0 or rank 1", fontsize=10)
    axes[2].legend(fontsize=7, loc="upper right")
    fig.suptitle("Qwen3-Omni tiny preset (random weights) on CPU: speech out, greedy")
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "omni_speech.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run(s: Sizes, threads: int) -> tuple[str, Row]:
    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = str(threads)  # the worker processes' torch threads
    try:
        res = asyncio.run(measure(s))
    finally:
        if saved is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = saved
    audio = (1920 * s.frames - 555) / SAMPLE_RATE
    lines = [f"Qwen3-Omni tiny preset (random weights) on CPU: {os.cpu_count()} cores, {threads} torch thread(s) per "
             f"process; a request: one short user text, greedy, {s.reply} reply tokens, {s.frames} codec frames "
             f"({audio:.2f} s of audio); medians of {s.repeats} run(s) per side and level, {s.rank_repeats} of each wgc "
             f"placement at {', '.join(map(str, s.rank_levels))} concurrent\n",
             *table_throughput(res, s), "", *table_floor(res, s), "", *table_ranks(res, s), "", check_line(res["check"])]
    return "\n".join(lines), res


def main(argv: list[str] | None = None) -> Row:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads, here and in each worker")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one run a side: a smoke run")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    sizes = QUICK if args.quick else Sizes()
    report, res = run(sizes, args.threads)
    print(report)
    if not args.no_plot:
        path = plot(res, sizes)
        if path is not None:
            print(f"\nplot: {path}")
    return res


if __name__ == "__main__":
    main()
