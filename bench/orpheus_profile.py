"""Where a second of Orpheus's serving goes: the tiny preset's plan run in process (LocalCluster, the
placement of bench/peer_vllm.py's Orpheus table: one CPU rank, max_batch 64) with the bench's load
(N requests at once, 210 tokens each, Orpheus's sampling), timed per part:

    lm forward     the Llama model's forward (models/layers/: the engine's share)
    sampling       the sampler (runtime/engines/sampling.py: penalty, temperature, top-p, the draw)
    lm bookkeeping the rest of the kv component's call around them (prepare, plan, commit, rows)
    snac           the codec's decode of the windows (models/orpheus/codec.py)
    runtime        the rest of the wall: interpreter, batcher, stream buffers, message codec

with the codec decoding whole windows (WGC_SNAC_WHOLE_WINDOWS=1, as before) and only each window's
kept frame (now), interleaved, best of `--repeats` each. One torch thread. The HTTP front end is
not in this process (bench/peer_vllm.py measures the served path end to end); `--cprofile` prints
cProfile's top functions of one run instead, `--torch-profile` torch.profiler's top operators inside
the LM component's calls (self CPU time, split by forward and sampling).

    python bench/orpheus_profile.py [--concurrency 16] [--repeats 2] [--cprofile | --torch-profile]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from wgc.models.layers import paged_llama  # noqa: E402
from wgc.models.orpheus import LanguageModel, SnacDecoder  # noqa: E402
from wgc.runtime.coordinator.request import RequestSpec  # noqa: E402
from wgc.runtime.process.local import LocalCluster  # noqa: E402

from wgc.compile import compile_program  # noqa: E402
from wgc.plan.model import Plan  # noqa: E402

OUT = ROOT / "bench" / "out"
PLACEMENT = 'extends = "{cpu}"\nmodel = "orpheus"\n\n[defaults.engine]\nmax_batch = 64\n'
SAMPLING = {"temperature": 0.6, "top_p": 0.8, "repetition_penalty": 1.3}
PARTS = ("lm forward", "sampling", "lm bookkeeping", "snac", "runtime")


class Timer:
    """Seconds spent inside the wrapped callables, by part."""

    def __init__(self) -> None:
        self.spent = dict.fromkeys(PARTS, 0.0)

    def wrap(self, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[part] += time.perf_counter() - start

        return timed


def compile_plan(directory: Path) -> Plan:
    placement = directory / "orpheus-cpu64.toml"
    placement.write_text(PLACEMENT.format(cpu=ROOT / "placements" / "cpu.toml"), encoding="utf-8")
    source = ROOT / "models" / "orpheus.walk"
    compiled = compile_program(str(source), source.read_text(encoding="utf-8"), str(placement))
    if compiled.plan is None:
        raise SystemExit("; ".join(d.message for d in compiled.diagnostics))
    return compiled.plan


def components(plan: Plan, whole: bool) -> tuple[LanguageModel, SnacDecoder]:
    spec = {c.name: c for c in plan.components}
    os.environ["WGC_SNAC_WHOLE_WINDOWS"] = "1" if whole else ""
    try:
        snac = SnacDecoder.tiny(spec["snac"], 0, "cpu")
    finally:
        os.environ.pop("WGC_SNAC_WHOLE_WINDOWS", None)
    snac.warm_up(lambda _: None)
    return LanguageModel.tiny(spec["llm"], 0, "cpu"), snac


def run_once(plan: Plan, llm: LanguageModel, snac: SnacDecoder, concurrency: int, tokens: int) -> dict[str, float]:
    timer = Timer()
    call, forward, decode, sample = llm.call, llm.model.forward, snac.call, paged_llama.sample
    llm.call = timer.wrap("lm bookkeeping", call)  # type: ignore[method-assign]
    llm.model.forward = timer.wrap("lm forward", forward)  # type: ignore[method-assign]
    snac.call = timer.wrap("snac", decode)  # type: ignore[method-assign]
    paged_llama.sample = timer.wrap("sampling", sample)  # the component's own name for the sampler
    try:
        cluster = LocalCluster(plan, lambda spec, rank: llm if spec.name == "llm" else snac, fake_inputs=False)
        specs = [RequestSpec(params={"max_tokens": tokens, **SAMPLING}, inputs={"prompt": "Hello there, this is a test."},
                             output_modalities=["audio"]) for _ in range(concurrency)]
        start = time.perf_counter()
        out = cluster.run(specs)
        wall = time.perf_counter() - start
    finally:
        del llm.call, llm.model.forward, snac.call
        paged_llama.sample = sample
    spent = timer.spent
    spent["lm bookkeeping"] -= spent["lm forward"] + spent["sampling"]  # both run inside the component's call
    spent["runtime"] = wall - sum(spent[p] for p in PARTS[:4])
    audio = sum(float(a.shape[-1]) for o in out.values() for a in o.get("audio", [])) / snac.sample_rate
    return {"wall": wall, "audio_s": audio, **spent}


def torch_profile(plan: Plan, llm: LanguageModel, snac: SnacDecoder, concurrency: int, tokens: int) -> str:
    """torch.profiler over one run, the LM's calls, forwards and samplings marked as ranges: the top
    operators by self CPU time (the ranges' rows give each part's total)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    def marked(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def inside(*args: Any, **kwargs: Any) -> Any:
            with record_function(name):
                return fn(*args, **kwargs)

        return inside

    call, forward, sample = llm.call, llm.model.forward, paged_llama.sample
    llm.call = marked("lm call", call)  # type: ignore[method-assign]
    llm.model.forward = marked("lm forward", forward)  # type: ignore[method-assign]
    paged_llama.sample = marked("sampling", sample)
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            run_once(plan, llm, snac, concurrency, tokens)
    finally:  # run_once took the instance attributes off already
        llm.__dict__.pop("call", None)
        llm.model.__dict__.pop("forward", None)
        paged_llama.sample = sample
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30)


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| codec | concurrent | audio-s / wall-s | " + " | ".join(f"{p} (ms per wall-s)" for p in PARTS) + " |",
             "|---|---:|---:|" + "---:|" * len(PARTS)]
    for r in rows:
        shares = " | ".join(f"{1000 * r[p] / r['wall']:.0f}" for p in PARTS)
        lines.append(f"| {r['codec']} | {r['concurrency']} | {r['audio_s'] / r['wall']:.2f} | {shares} |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3))
    labels = [f"{r['codec']} c={r['concurrency']}" for r in rows]
    left = [0.0] * len(rows)
    for part in PARTS:
        widths = [1000 * r[part] / r["wall"] for r in rows]
        ax.barh(labels, widths, left=left, label=part)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_xlabel("ms of each wall-second (Orpheus tiny, in process, 1 thread)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", default="16")
    p.add_argument("--tokens", type=int, default=210)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--cprofile", action="store_true")
    p.add_argument("--torch-profile", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        plan = compile_plan(Path(tmp))
    pairs = {"whole windows": components(plan, True), "kept region": components(plan, False)}
    for llm, snac in pairs.values():
        run_once(plan, llm, snac, 2, 42)  # first-call costs out of the way
    if args.torch_profile:
        level = int(args.concurrency.split(",")[0])
        llm, snac = pairs["kept region"]
        print(f"## kept region, {level} concurrent\n" + torch_profile(plan, llm, snac, level, args.tokens))
        return 0
    if args.cprofile:
        import cProfile
        import pstats

        level = int(args.concurrency.split(",")[0])
        for name, (llm, snac) in pairs.items():
            profiler = cProfile.Profile()
            profiler.runcall(run_once, plan, llm, snac, level, args.tokens)
            print(f"## {name}, {level} concurrent")
            pstats.Stats(profiler).sort_stats("tottime").print_stats(18)
        return 0
    rows = []
    for level in (int(c) for c in args.concurrency.split(",")):
        best: dict[str, dict[str, float]] = {}
        for _ in range(args.repeats):
            for name, (llm, snac) in pairs.items():  # interleaved: the host's noise hits both
                r = run_once(plan, llm, snac, level, args.tokens)
                if name not in best or r["wall"] < best[name]["wall"]:
                    best[name] = r
        rows += [{"codec": name, "concurrency": level, **best[name]} for name in pairs]
    text = table(rows)
    print(text)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "orpheus_profile.md").write_text(text + "\n", encoding="utf-8")
    plot(rows, OUT / "orpheus_profile.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
