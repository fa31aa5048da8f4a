"""Streaming TTS (models/orpheus.walk, tiny preset, CPU): wgc vs transformers one request at a time.

wgc: the compiled program on LocalCluster (every rank in this process, every message through the
wire codec) with the real tiny components: the language model batches every in-flight request
into one forward per step over the paged KV cache, and the SNAC decoder turns each sliding(28, 7)
window into 85 ms of audio as soon as it is complete. Baseline, in the same run and with the same
weights (saved as a Hugging Face directory; both sides load it): transformers' LlamaForCausalLM
`generate` with the same sampling settings, one request at a time, then one-shot SNAC decoding of
the request's codes. At concurrency c, c requests arrive together.

Per concurrency, for each side:
- time to first audio (TTFA): from arrival to the first audio of the request (p50, p90);
- real-time factor (RTF): from arrival to the request's last audio, over its audio duration (p50);
- audio-seconds per wall-second: all audio produced over the wall time of the whole run;
- streaming viability: the fraction of gaps between a request's consecutive chunks shorter than
  the previous chunk's duration (the baseline sends one chunk per request: no gaps, shown as -).
Goals (issue): >= 3x the baseline's audio-seconds per wall-second at concurrency 16; TTFA <= 1.5x
the time of 28 decode steps plus one codec window, both measured here on the components directly
at the same batch size. Each side runs --repeats times per concurrency; the run with the most
audio-seconds per wall-second is the one shown. The TTFA goal pairs each wgc run with a timing of
the 28 steps and window taken right after it, and takes the median of the per-pair ratios: on
these shared machines slow and fast spells then fall on both sides of a ratio, not between them.

Audio timing is the tiny preset's: its SNAC frame is 512 samples at a nominal 6000 Hz, the real
frame's 85.3 ms, so audio-seconds per token are those of real Orpheus. One torch thread by default
(see bench/kv_decode.py); the bench placement is placements/cpu.toml's with max_batch 16.
Prints a markdown table; writes bench/out/tts_stream.png.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wgc.models.layers import LlamaModel  # noqa: E402
from wgc.models.orpheus import (  # noqa: E402
    LanguageModel,
    OrpheusConfig,
    SnacDecoder,
    TokenMap,
    encode_prompt,
    save_llama,
)
from wgc.models.orpheus.config import END_OF_SPEECH, FRAME, REPETITION_PENALTY, TEMPERATURE, TOP_P  # noqa: E402
from wgc.models.orpheus.llm import tiny_init  # noqa: E402
from wgc.runtime.components.base import Call  # noqa: E402
from wgc.runtime.coordinator.request import RequestSpec  # noqa: E402
from wgc.runtime.process.local import COORDINATOR, LocalCluster  # noqa: E402
from wgc.runtime.protocol.messages import Message, Output  # noqa: E402

from bench.plotting import pyplot  # noqa: E402
from wgc.compile import compile_program  # noqa: E402
from wgc.plan.model import Plan  # noqa: E402

PLACEMENT = """
[cluster]
device = "cpu"
ranks = 1

[defaults]
ranks = 0

[defaults.engine]
kv_memory = "256MiB"
page_size = 16
max_batch = 16
"""
TEXTS = ["Hello there, how are you today?", "The quick brown fox jumps over the lazy dog.",
         "Streaming speech, one frame at a time.", "Orpheus speaks in SNAC codes."]
VOICES = ["tara", "leah", "jess", "leo", "dan", "mia", "zac", "zoe"]


@dataclass
class Timeline:
    """One request: when it arrived, and the arrival time and duration (seconds) of each audio chunk."""

    start: float
    chunks: list[tuple[float, float]] = field(default_factory=list)

    @property
    def audio(self) -> float:
        return sum(d for _, d in self.chunks)


class TimedCluster(LocalCluster):
    """LocalCluster that stamps every audio output when its rank sends it."""

    def __init__(self, *args, **kwargs) -> None:
        self.stamps: list[tuple[int, float, int]] = []  # (request, time, samples)
        super().__init__(*args, **kwargs)

    def _send(self, destination: int, msg: Message) -> None:
        if destination == COORDINATOR and isinstance(msg, Output) and msg.modality == "audio":
            self.stamps.append((msg.request, time.perf_counter(), int(msg.value.shape[-1])))
        super()._send(destination, msg)


def compile_plan(directory: Path) -> Plan:
    placement = directory / "bench.toml"
    placement.write_text(PLACEMENT)
    source = ROOT / "models" / "orpheus.walk"
    compiled = compile_program(str(source), source.read_text(), str(placement))
    if compiled.plan is None:
        raise SystemExit("; ".join(d.message for d in compiled.diagnostics))
    return compiled.plan


def run_wgc(plan: Plan, llm: LanguageModel, snac: SnacDecoder, concurrency: int, max_tokens: int) -> tuple[
        list[Timeline], float]:
    cluster = TimedCluster(plan, lambda spec, rank: llm if spec.name == "llm" else snac, fake_inputs=False)
    specs = [RequestSpec(params={"max_tokens": max_tokens, "voice": VOICES[i % len(VOICES)]},
                         inputs={"prompt": TEXTS[i % len(TEXTS)]}, output_modalities=["audio"])
             for i in range(concurrency)]
    start = time.perf_counter()
    ids = [cluster.submit(s) for s in specs]
    cluster.pump()
    end = time.perf_counter()
    for e in cluster.take_events():
        if e.kind == "error":
            raise RuntimeError(e.error)
    lines = {i: Timeline(start) for i in ids}
    for request, at, samples in cluster.stamps:
        lines[request].chunks.append((at, samples / snac.sample_rate))
    if llm.pages.used_pages:
        raise RuntimeError("the bench leaked KV pages")
    return [lines[i] for i in ids], end - start


def run_baseline(hf_model, llm: LanguageModel, snac: SnacDecoder, concurrency: int, max_tokens: int) -> tuple[
        list[Timeline], float]:
    """transformers generate, one request at a time, then one-shot SNAC decoding of its whole frames."""
    token_map = TokenMap(llm.config.vocab)
    eos = token_map.to_model(END_OF_SPEECH)
    start = time.perf_counter()
    lines = []
    for i in range(concurrency):
        prompt = encode_prompt(llm.tokenizer, VOICES[i % len(VOICES)], TEXTS[i % len(TEXTS)])
        ids = torch.tensor([[token_map.to_model(t) for t in prompt]])
        with torch.no_grad():
            out = hf_model.generate(ids, do_sample=True, temperature=TEMPERATURE, top_p=TOP_P, top_k=0,
                                    repetition_penalty=REPETITION_PENALTY, max_new_tokens=max_tokens,
                                    eos_token_id=eos, pad_token_id=eos)
        generated = out[0, ids.shape[1]:].tolist()
        tokens = [token_map.from_model(t, step) for step, t in enumerate(generated)]
        frames = len(tokens) // FRAME
        codes = torch.tensor([tokens[:frames * FRAME]]) - _positions(frames)
        line = Timeline(start)
        if frames and bool(((codes >= 0) & (codes < 4096)).all()):
            audio = snac.decode_codes(codes)  # [1, frames * frame]
            line.chunks.append((time.perf_counter(), audio.shape[-1] / snac.sample_rate))
        lines.append(line)
    return lines, time.perf_counter() - start


def _positions(frames: int) -> torch.Tensor:
    from wgc.models.orpheus.config import AUDIO_BASE, CODEBOOK

    return AUDIO_BASE + CODEBOOK * (torch.arange(frames * FRAME) % FRAME)


def reference_seconds(llm: LanguageModel, snac: SnacDecoder, batch: int, repeats: int = 3) -> float:
    """The TTFA yardstick at this batch size: 28 decode steps plus one codec call on `batch` windows,
    run on the components directly (the median of `repeats`)."""
    args = (TEMPERATURE, TOP_P, REPETITION_PENALTY)
    times: list[float] = []
    for rep in range(repeats):
        requests = [10_000_000 + 100 * rep + i for i in range(batch)]
        tokens = llm.prefill([Call(r, "", (TEXTS[0], "tara", *args)) for r in requests])
        windows: list[list[int]] = [[] for _ in requests]
        start = time.perf_counter()
        for _ in range(28):
            tokens = llm.decode([Call(r, "", (t, *args)) for r, t in zip(requests, tokens)])
            for w, t in zip(windows, tokens):
                w.append(t)
        snac.decode([Call(r, "", (w,)) for r, w in zip(requests, windows)])
        times.append(time.perf_counter() - start)
        for r in requests:
            llm.release(r)
    return statistics.median(times)


def summarize(lines: list[Timeline], wall: float) -> dict[str, float | None]:
    ttfa = sorted(line.chunks[0][0] - line.start for line in lines if line.chunks)
    rtf = [(line.chunks[-1][0] - line.start) / line.audio for line in lines if line.audio]
    gaps = ok = 0
    for line in lines:
        for (prev_at, prev_len), (at, _) in zip(line.chunks, line.chunks[1:]):
            gaps += 1
            ok += (at - prev_at) < prev_len
    return {
        "ttfa_p50": statistics.median(ttfa) if ttfa else None,
        "ttfa_p90": ttfa[min(len(ttfa) - 1, int(0.9 * len(ttfa)))] if ttfa else None,
        "rtf_p50": statistics.median(rtf) if rtf else None,
        "audio_per_s": sum(line.audio for line in lines) / wall,
        "audio_s": sum(line.audio for line in lines),
        "wall_s": wall,
        "viability": ok / gaps if gaps else None,
    }


def best_of(repeats: int, once) -> dict[str, float | None]:
    """Run a side `repeats` times; the run with the most audio-seconds per wall-second counts."""
    return best([summarize(*once()) for _ in range(repeats)])


def best(runs: list[dict[str, float | None]]) -> dict[str, float | None]:
    return max(runs, key=lambda r: r["audio_per_s"] or 0.0)


def ttfa_ratio(runs: list[dict[str, float | None]], references: list[float]) -> float | None:
    """The TTFA goal's measure: each run's TTFA p50 over the yardstick timed right after it, the
    median of those ratios (pairs taken close in time, so that the machine's slow and fast spells
    fall on both sides of a ratio rather than between them)."""
    ratios = [r["ttfa_p50"] / ref for r, ref in zip(runs, references) if r["ttfa_p50"] is not None]
    return statistics.median(ratios) if ratios else None


def run(levels: list[int], max_tokens: int, repeats: int = 2) -> list[dict]:
    import transformers

    config = OrpheusConfig.preset("tiny")
    model = LlamaModel(config.llama)
    tiny_init(model, config, seed=0)  # the tiny preset's weights, saved for both sides to load
    with tempfile.TemporaryDirectory() as tmp:
        weights = save_llama(model, config.hf_config(), Path(tmp) / "orpheus-tiny")
        plan = compile_plan(Path(tmp))
        spec = {c.name: c for c in plan.components}
        llm = LanguageModel(spec["llm"], 0, "cpu", weights=weights)
        snac = SnacDecoder.tiny(spec["snac"], 0, "cpu")
        hf_model = transformers.LlamaForCausalLM.from_pretrained(str(weights), dtype=torch.float32).eval()
    run_wgc(plan, llm, snac, 2, 42)  # warm-up: first-call costs out of the way
    run_baseline(hf_model, llm, snac, 1, 14)
    rows = []
    for c in levels:
        runs, references = [], []
        for _ in range(repeats):
            runs.append(summarize(*run_wgc(plan, llm, snac, c, max_tokens)))
            references.append(reference_seconds(llm, snac, c, repeats=1))
        base = best_of(repeats, lambda c=c: run_baseline(hf_model, llm, snac, c, max_tokens))
        rows.append({"concurrency": c, "wgc": best(runs), "baseline": base,
                     "reference": statistics.median(references), "ttfa_ratio": ttfa_ratio(runs, references),
                     "ttfa_median": statistics.median(r["ttfa_p50"] for r in runs if r["ttfa_p50"] is not None)})
    return rows


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{1000 * x:.0f}"


def _num(x: float | None, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x, fmt)


def markdown(rows: list[dict], max_tokens: int) -> str:
    out = [f"Orpheus tiny preset on CPU, {torch.get_num_threads()} torch thread(s), {max_tokens} tokens per "
           f"request ({(max_tokens - 28) // 7 + 1} windows streamed), sampling {TEMPERATURE}/{TOP_P}/"
           f"{REPETITION_PENALTY}\n",
           "| concurrency | side | TTFA p50 (ms) | TTFA p90 (ms) | RTF p50 | audio-s / wall-s | viability |",
           "|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        for side in ("wgc", "baseline"):
            s = r[side]
            out.append(f"| {r['concurrency']} | {side} | {_ms(s['ttfa_p50'])} | {_ms(s['ttfa_p90'])} | "
                       f"{_num(s['rtf_p50'])} | {_num(s['audio_per_s'])} | "
                       f"{'-' if s['viability'] is None else format(s['viability'], '.0%')} |")
    out += ["", "| concurrency | throughput vs baseline | goal | TTFA p50 / (28 steps + 1 window), median of paired runs "
            "(medians ms) | goal |",
            "|---:|---:|---|---:|---|"]
    for r in rows:
        ratio = r["wgc"]["audio_per_s"] / r["baseline"]["audio_per_s"]
        ttfa, ratio_ttfa = r["ttfa_median"], r["ttfa_ratio"]
        goal_tp = ("met" if ratio >= 3 else "missed") + " (>= 3x)" if r["concurrency"] == 16 else ""
        goal_ttfa = "-" if ratio_ttfa is None else ("met" if ratio_ttfa <= 1.5 else "missed") + " (<= 1.5x)"
        out.append(f"| {r['concurrency']} | {ratio:.2f}x | {goal_tp} | "
                   f"{_num(ratio_ttfa)}x ({_ms(ttfa)} / {_ms(r['reference'])} ms) | {goal_ttfa} |")
    return "\n".join(out)


def plot(rows: list[dict]) -> Path | None:
    plt = pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    xs = range(len(rows))
    labels = [f"c={r['concurrency']}" for r in rows]
    for ax, key, title, scale in ((axes[0], "audio_per_s", "audio-seconds per wall-second", 1.0),
                                  (axes[1], "ttfa_p50", "time to first audio, p50 (ms)", 1000.0),
                                  (axes[2], "rtf_p50", "real-time factor, p50 (lower is better)", 1.0)):
        ours = [(r["wgc"][key] or 0) * scale for r in rows]
        base = [(r["baseline"][key] or 0) * scale for r in rows]
        ax.bar([x - 0.2 for x in xs], ours, width=0.4, label="wgc (batched, streaming)")
        ax.bar([x + 0.2 for x in xs], base, width=0.4, label="transformers, one at a time + one-shot SNAC")
        if key == "ttfa_p50":
            ax.scatter(list(xs), [1500 * r["reference"] for r in rows], marker="_", s=900, color="black",
                       label="goal: 1.5 x (28 decode steps + 1 window)")
        if key == "rtf_p50":
            ax.axhline(1.0, color="grey", linestyle=":")
        ax.set_xticks(list(xs), labels)
        ax.set_title(title, fontsize=10)
    axes[0].legend(fontsize=8, loc="upper left")
    axes[1].legend(fontsize=8, loc="upper left")
    fig.suptitle("Orpheus tiny preset on CPU: streaming TTS")
    fig.tight_layout()
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    path = out / "tts_stream.png"
    fig.savefig(path, dpi=120)
    return path


def main() -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=196, help="tokens per request (28 + 7k: whole windows)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--repeats", type=int, default=2, help="runs per side and concurrency; the best counts")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = run(args.concurrency, args.max_tokens, args.repeats)
    print(markdown(rows, args.max_tokens))
    path = plot(rows)
    if path is not None:
        print(f"\nplot: {path}")
    return rows


if __name__ == "__main__":
    main()
