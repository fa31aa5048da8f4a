"""BAGEL (models/bagel.walk, tiny preset, random weights, CPU): each wgc setting beside its baseline in one run.

1. Guidance branches: one t2i image at a time through the runtime (Runtime.start: a coordinator and a
   worker process per rank) on placements/cpu3.toml (one branch per rank) and on one rank (cpu.toml's
   settings: the three branch calls of a step fused into one velocity forward), interleaved. Time per
   denoising step: the difference of two requests' times (steps_hi and steps_lo) over the difference
   of their loop iterations (prefills and the VAE cancel out). Beside them the seed's equation 5,
   (Σt_b + u) / (max t_b + u + c): t_b each branch's velocity time (its rank's llm.velocity
   compute_us / calls in the 3-rank run), u the combine work of a step (combine.step and the two
   combine.timestep calls, rank 0), c rank 0's communication in one step, measured on the runtime's
   wire (ZeroMQ over IPC, the wire codec) against two echo processes (bagel_layouts.wire_step).
2. KV layouts, in process on one rank: at a request's first velocity step, its three labels over one
   paged pool (as the walk builds them: forks share pages, prefix caching shares the text) vs three
   dense per-context caches (BAGEL's inferencer), bytes held and time per velocity step.
3. Step batching, in process (LocalCluster, rounds=1): images/s of n concurrent t2i requests vs the
   same n one at a time.
4. Understanding decode: tokens/s of n concurrent text questions through the runtime (one worker
   process) vs transformers' Qwen3ForCausalLM `generate`, configured as tests/models/bagel/test_mot.py
   does with the same tiny random weights copied in, one request at a time, greedy both; the tokens
   are compared.
The one-rank placement of tables 1, 3 and 4 is placements/cpu.toml with max_batch 32 (cpu.toml's 8
would slice a step of 8 requests' 24 velocity calls and 32 decodes; table 1's one request makes 3 calls
a step, which either fits), so that one runtime serves tables 1 and 4. One torch thread per process by default (--threads), so that
a rank is one core. Prints four markdown tables; writes bench/out/bagel.png.
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
import bagel_layouts as lay  # noqa: E402
from wgc.models.bagel import LanguageModel  # noqa: E402
from wgc.models.bagel.config import IM_END, IM_START  # noqa: E402
from wgc.models.bagel.vocab import encode_prompt  # noqa: E402
from wgc.runtime.api import DoneEvent, Runtime  # noqa: E402

from bench.plotting import pyplot  # noqa: E402
from wgc.compile import compile_program  # noqa: E402
from wgc.plan.model import Plan  # noqa: E402

ONE_RANK = """
[cluster]
device = "cpu"
ranks = 1

[defaults]
ranks = 0

[defaults.engine]
kv_memory = "256MiB"
page_size = 16
max_batch = 32
"""
Row = dict[str, Any]


@dataclass(frozen=True)
class Sizes:
    branch_px: int = 256  # table 1: image side (the tiny latent table's largest: 256 latent tokens)
    steps_lo: int = 4
    steps_hi: int = 24
    pairs: int = 7  # interleaved rounds of both placements
    wire_rounds: int = 300
    contexts: tuple[tuple[str, int], ...] = (("t2i", 128), ("edit", 128), ("edit", 192), ("edit", 256))
    layout_repeats: int = 9
    batch_levels: tuple[int, ...] = (1, 4, 8)
    batch_px: int = 64
    batch_steps: int = 8
    batch_repeats: int = 5
    decode_levels: tuple[int, ...] = (1, 8, 32)
    decode_tokens: int = 32
    decode_repeats: int = 3


QUICK = Sizes(branch_px=64, steps_lo=2, steps_hi=4, pairs=1, wire_rounds=20, contexts=(("t2i", 64), ("edit", 128)),
              layout_repeats=1, batch_levels=(1, 4), batch_px=32, batch_steps=3, batch_repeats=1,
              decode_levels=(1, 8), decode_tokens=4, decode_repeats=1)


def compile_plan(placement: Path) -> Plan:
    source = ROOT / "models" / "bagel.walk"
    compiled = compile_program(str(source), source.read_text(), str(placement))
    if compiled.plan is None:
        raise SystemExit("; ".join(d.message for d in compiled.diagnostics))
    return compiled.plan


def one_rank_plan() -> Plan:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cpu-max-batch-32.toml"
        path.write_text(ONE_RANK)
        return compile_plan(path)


# ---- 1. guidance branches on 3 ranks vs 1 ----------------------------------------------------------

async def image_seconds(rt: Runtime, px: int, steps: int, seed: int) -> float:
    handle = rt.submit(params={"steps": steps, "height": px, "width": px, "seed": seed, "cfg_img_scale": 2.0},
                       parts=[{"kind": "text", "payload": f"a lighthouse at dusk {seed}"}], outputs=["image"])
    async for event in handle.events():
        last = event
    if not isinstance(last, DoneEvent):
        raise RuntimeError(f"the image request ended with {last}")
    return last.t_since_submit


async def counters(rt: Runtime) -> dict[int, dict[str, int]]:
    report = await rt.health()
    return {r.rank: r.counters for r in report.ranks}


def delta(after: dict[int, dict[str, int]], before: dict[int, dict[str, int]], rank: int, key: str) -> int:
    return after[rank].get(key, 0) - before[rank].get(key, 0)


def per_call(after: dict, before: dict, rank: int, entry: str) -> float:
    """Seconds per call of one entry on one rank between two health snapshots."""
    return delta(after, before, rank, f"{entry}.compute_us") / 1e6 / max(1, delta(after, before, rank, f"{entry}.calls"))


async def branches(s: Sizes, runtimes: dict[str, Runtime]) -> Row:
    names = ("one", "three")
    for name in names:
        await image_seconds(runtimes[name], s.branch_px, s.steps_lo, seed=99)  # first-call costs out of the way
    before = {name: await counters(runtimes[name]) for name in names}
    steps: dict[str, list[float]] = {name: [] for name in names}
    for i in range(s.pairs):
        for name in names if i % 2 == 0 else names[::-1]:
            lo = await image_seconds(runtimes[name], s.branch_px, s.steps_lo, seed=i)
            hi = await image_seconds(runtimes[name], s.branch_px, s.steps_hi, seed=i)
            steps[name].append((hi - lo) / (s.steps_hi - s.steps_lo))
    after = {name: await counters(runtimes[name]) for name in names}
    one, three = (after["one"], before["one"]), (after["three"], before["three"])
    t_b = {label: per_call(*three, rank, "llm.velocity") for rank, label in enumerate(("main", "cfg_text", "cfg_img"))}
    combine_us = delta(*three, 0, "combine.step.compute_us") + delta(*three, 0, "combine.timestep.compute_us")
    return {"one": statistics.median(steps["one"]), "three": statistics.median(steps["three"]),
            "ratio": statistics.median(a / b for a, b in zip(steps["one"], steps["three"])),
            "fused": per_call(*one, 0, "llm.velocity"), "t_b": t_b,
            "u": combine_us / 1e6 / max(1, delta(*three, 0, "combine.step.calls")),
            "c": lay.wire_step((s.branch_px // 16) ** 2, s.wire_rounds),
            "local_first": local_branch_first(runtimes["three"].plan)}


def local_branch_first(plan: Plan) -> bool:
    """Whether rank 0's image_gen runs its own velocity before it sends z to the other branches' ranks."""
    from wgc.plan.model import Run, Send

    code = next(w.instructions for w in plan.ranks[0].schedules if w.walk == "image_gen")
    run = next(i for i, ins in enumerate(code) if isinstance(ins, Run) and ins.entry == "velocity")
    send = next((i for i, ins in enumerate(code) if isinstance(ins, Send) and ins.value == "z"), len(code))
    return run < send


def equation5(r: Row, cores: int) -> Row:
    t, u, c = r["t_b"], r["u"], r["c"]
    serial = sum(t.values()) + u
    floor = max(t.values()) + u + c
    lowered = t["main"] + max(t["cfg_text"], t["cfg_img"]) + u + c  # when rank 0 runs v_main before it sends z
    on_cores = max(max(t.values()), sum(t.values()) / cores) + u + c
    return {"serial": serial, "floor": floor, "bound": serial / floor, "lowered": lowered, "on_cores": on_cores,
            "achieved": serial / r["three"], "met": 0 < r["three"] <= 1.1 * floor}


# ---- 4. understanding decode through the runtime vs transformers generate ----------------------------

def qwen3_like(m: LanguageModel) -> Any:
    """transformers' Qwen3ForCausalLM with the und expert's weights, as tests/models/bagel/test_mot.py
    builds it (o_proj bias zero: BAGEL has none), in the component's dtype."""
    import transformers

    c = m.config
    config = transformers.Qwen3Config(
        vocab_size=c.vocab, hidden_size=c.hidden, intermediate_size=c.intermediate, num_hidden_layers=c.layers,
        num_attention_heads=c.heads, num_key_value_heads=c.kv_heads, head_dim=c.head_dim, rms_norm_eps=c.norm_eps,
        rope_theta=c.rope_theta, attention_bias=True, tie_word_embeddings=False, max_position_embeddings=c.max_positions)
    ref = transformers.Qwen3ForCausalLM(config).eval()
    ours = m.language_model.state_dict()
    ref.load_state_dict({name: torch.zeros_like(t) if name.endswith("o_proj.bias") else ours[name]
                         for name, t in ref.state_dict().items()}, strict=True)
    return ref.to(m.dtype)


def questions(n: int) -> list[str]:
    return [f"question {i}: what is in the picture?" for i in range(n)]


def generate_side(ref: Any, m: LanguageModel, prompts: list[str], max_tokens: int) -> tuple[list[list[int]], float]:
    """One request at a time: `<|im_start|> text <|im_end|>` then `<|im_start|>`, as the walk decodes."""
    eos = m.map.to_model(IM_END)
    out = []
    start = time.perf_counter()
    for prompt in prompts:
        ids = [m.map.to_model(t) for t in [*encode_prompt(m.tokenizer, prompt), IM_START]]
        x = torch.tensor([ids])
        with torch.no_grad():
            got = ref.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=max_tokens,
                               eos_token_id=eos, pad_token_id=eos, temperature=None, top_p=None, top_k=None)
        out.append([m.map.from_model(int(t)) for t in got[0, len(ids):]])
    return out, time.perf_counter() - start


async def runtime_side(rt: Runtime, prompts: list[str], max_tokens: int) -> tuple[list[list[int]], float]:
    start = time.perf_counter()
    handles = [rt.submit(params={"max_tokens": max_tokens, "temperature": 0.0},
                         parts=[{"kind": "text", "payload": p}], outputs=["text"]) for p in prompts]
    outs = await asyncio.gather(*(h.collect() for h in handles))
    wall = time.perf_counter() - start
    return [[int(t) for t in o.get("text", [])] for o in outs], wall


async def decoding(s: Sizes, rt: Runtime) -> list[Row]:
    spec = next(c for c in rt.plan.components if c.name == "llm")
    m = LanguageModel(spec, 0, "cpu", preset="tiny")  # the worker's weights: the same preset and seed
    ref = qwen3_like(m)
    generate_side(ref, m, questions(1), 2)
    rows = []
    await runtime_side(rt, questions(2), 2)
    for n in s.decode_levels:
        prompts = questions(n)
        ours, base = [], []
        for i in range(s.decode_repeats):
            for side in ("wgc", "base") if i % 2 == 0 else ("base", "wgc"):
                if side == "wgc":
                    ours.append(await runtime_side(rt, prompts, s.decode_tokens))
                else:
                    base.append(generate_side(ref, m, prompts, s.decode_tokens))
        rate = [sum(map(len, toks)) / wall for toks, wall in ours], [sum(map(len, toks)) / wall for toks, wall in base]
        rows.append({"n": n, "tokens": sum(map(len, ours[0][0])),
                     "same": sum(a == b for a, b in zip(ours[0][0], base[0][0])),
                     "wgc": statistics.median(rate[0]), "base": statistics.median(rate[1]),
                     "ratio": statistics.median(a / b for a, b in zip(*rate))})
    return rows


# ---- 2 and 3 in process ------------------------------------------------------------------------------

def layout_rows(s: Sizes) -> list[Row]:
    specs = []
    for i, (kind, px) in enumerate(s.contexts):
        if kind == "t2i":
            text = f"{i} " + "a lighthouse on a cliff at dusk, waves below, " * 3
            specs.append((f"t2i, {px} px", lay.t2i(text, px, 2, seed=i)))
        else:
            specs.append((f"edit, {px} px image", lay.edit(px, f"{i} make the sky purple", seed=i)))
    return lay.contexts(compile_plan(ROOT / "placements" / "cpu.toml"), specs, s.layout_repeats)


def batching_rows(s: Sizes, plan: Plan) -> list[Row]:
    rows = []
    for n in s.batch_levels:
        runs: dict[bool, list[Row]] = {True: [], False: []}
        for i in range(s.batch_repeats):
            for together in (True, False) if i % 2 == 0 else (False, True):
                runs[together].append(lay.batching(plan, n, s.batch_px, s.batch_steps, together))
        rows.append({"n": n, "together": statistics.median(r["images_per_s"] for r in runs[True]),
                     "alone": statistics.median(r["images_per_s"] for r in runs[False]),
                     "ratio": statistics.median(a["images_per_s"] / b["images_per_s"]
                                                for a, b in zip(runs[True], runs[False])),
                     "items": runs[True][0]["items_per_forward"]})
    return rows


# ---- tables, plot ------------------------------------------------------------------------------------

def ms(x: float) -> str:
    return f"{1000 * x:.2f}"


def table_branches(r: Row, e: Row, s: Sizes, cores: int) -> list[str]:
    t = r["t_b"]
    out = [f"### 1. Guidance branches: one {s.branch_px}x{s.branch_px} image ({(s.branch_px // 16) ** 2} latent tokens), "
           f"worker processes, time per denoising step\n",
           "| setting | ms / step | speedup |", "|---|---:|---:|",
           f"| 1 rank (cpu.toml, max_batch 32): the three branches in one forward (velocity {ms(r['fused'])} ms) | "
           f"{ms(r['one'])} | 1.00x |",
           f"| cpu3.toml: 3 ranks, one branch each: wgc | {ms(r['three'])} | {r['ratio']:.2f}x |",
           f"| eq. 5 serial: Σt_b + u | {ms(e['serial'])} | |",
           f"| eq. 5 floor: max t_b + u + c | {ms(e['floor'])} | bound {e['bound']:.2f}x |",
           f"| cpu3.toml against eq. 5's terms: (Σt_b + u) / its step | | {e['achieved']:.2f}x |",
           *([f"| the plan's order (rank 0's v_main before its sends): t_main + max(t_cfg_text, t_cfg_img) + u + c | "
              f"{ms(e['lowered'])} | {e['serial'] / e['lowered']:.2f}x |"] if r["local_first"] else []),
           f"| on {cores} cores: max(max t_b, Σt_b / {cores}) + u + c | {ms(e['on_cores'])} | "
           f"{e['serial'] / e['on_cores']:.2f}x |",
           "",
           f"t_b (ms): main {ms(t['main'])}, cfg_text {ms(t['cfg_text'])}, cfg_img {ms(t['cfg_img'])} (each rank's "
           f"llm.velocity compute_us / calls, 3-rank run); u {ms(r['u'])} ms (combine.step + 2 combine.timestep, rank 0); "
           f"c {ms(r['c'])} ms (rank 0's z, t to two echo processes and two velocities back, on the runtime's wire; "
           "scheduling not included).",
           f"\nGoal (cpu3's step within 10% of eq. 5's floor): **{'met' if e['met'] else 'missed'}**, "
           f"{r['three'] / e['floor']:.2f}x the floor; against one rank the three ranks run at {r['ratio']:.2f}x. "
           + ("Rank 0 runs v_main before it sends z (the plan's order, `wgc inspect`), so only two branches "
              "overlap" if r["local_first"] else "Rank 0 sends z before it runs v_main")
           + f", and the three ranks share {cores} cores."]
    return out


def kib(x: float) -> str:
    return f"{x / 1024:.0f}"


def table_layouts(rows: list[Row]) -> list[str]:
    out = ["### 2. KV layouts at a request's first velocity step, one rank (cpu.toml)\n",
           "| context | tokens main / cfg_text / cfg_img | latents | paged KiB held: wgc | dense KiB | dense / paged "
           "memory | paged, one forward (ms): wgc | paged, per label (ms) | dense, per label (ms) | dense / paged time |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        n = r["lengths"]
        out.append(f"| {r['context']} | {n['main']} / {n['cfg_text']} / {n['cfg_img']} | {r['latents']} | "
                   f"{kib(r['paged_bytes'])} | {kib(r['dense_bytes'])} | {r['dense_bytes'] / r['paged_bytes']:.2f}x | "
                   f"{ms(r['paged'])} | {ms(r['paged_serial'])} | {ms(r['dense'])} | {r['dense'] / r['paged']:.2f}x |")
    diff = max(r["max_diff"] for r in rows)
    out.append(f"\nPaged pages are shared by the fork (`cfg_text` = main's image part) and by prefix caching (the "
               f"text of `cfg_img`): {min(r['dense_bytes'] / r['paged_bytes'] for r in rows):.2f}-"
               f"{max(r['dense_bytes'] / r['paged_bytes'] for r in rows):.2f}x less memory than dense copies; "
               f"the step's time is {min(r['dense'] / r['paged'] for r in rows):.2f}-"
               f"{max(r['dense'] / r['paged'] for r in rows):.2f}x dense/paged (the CPU torch path pads the "
               f"three labels to the longest and masks). Velocities equal to {diff:.1e}.")
    return out


def table_batching(rows: list[Row], s: Sizes) -> list[str]:
    out = [f"### 3. Step batching: {s.batch_px}x{s.batch_px} t2i, {s.batch_steps} steps, in process\n",
           "| requests | together: images/s (wgc) | one at a time: images/s | together / one at a time | "
           "velocity items per forward |", "|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['n']} | {r['together']:.1f} | {r['alone']:.1f} | {r['ratio']:.2f}x | {r['items']:.1f} |")
    top = rows[-1]
    out.append(f"\n{top['n']} requests batched step by step make {top['ratio']:.2f}x the images/s of the same "
               f"requests one at a time ({top['items']:.0f} velocity items a forward).")
    return out


def table_decoding(rows: list[Row], s: Sizes) -> list[str]:
    out = [f"### 4. Understanding decode: text questions, up to {s.decode_tokens} tokens, greedy\n",
           "| concurrent | runtime tokens/s (1 worker): wgc | transformers generate tokens/s (one at a time) | "
           "wgc / transformers | tokens | same tokens |", "|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['n']} | {r['wgc']:.0f} | {r['base']:.0f} | {r['ratio']:.2f}x | {r['tokens']} | "
                   f"{r['same']}/{r['n']} |")
    top = rows[-1]
    out.append(f"\nAt {top['n']} concurrent requests the runtime decodes {top['ratio']:.2f}x transformers' tokens/s "
               f"(at 1: {rows[0]['ratio']:.2f}x, the worker's messaging against a bare in-process loop).")
    return out


def plot(results: Row, out: Path = ROOT / "bench" / "out") -> Path | None:
    plt = pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, 4, figsize=(18, 4))
    b, e = results["branches"], results["eq5"]
    axes[0].bar(["1 rank", "cpu3.toml\n3 ranks", "eq. 5\nserial", "eq. 5\nfloor", "plan's\norder"],
                [1000 * x for x in (b["one"], b["three"], e["serial"], e["floor"], e["lowered"])],
                color=["tab:orange", "tab:blue", "grey", "grey", "lightgrey"])
    axes[0].set_title("1. ms per denoising step", fontsize=10)
    panels = ((axes[1], results["layouts"], "context", ("paged_bytes", "dense_bytes"), 1 / 1024,
               "2. KiB of KV held", ("paged: wgc", "dense (BAGEL)")),
              (axes[2], results["batching"], "n", ("together", "alone"), 1.0, "3. images/s",
               ("together: wgc", "one at a time")),
              (axes[3], results["decoding"], "n", ("wgc", "base"), 1.0, "4. decode tokens/s",
               ("runtime: wgc", "transformers, one at a time")))
    for ax, rows, key, (ours, base), scale, title, labels in panels:
        xs = range(len(rows))
        ax.bar([x - 0.2 for x in xs], [r[ours] * scale for r in rows], width=0.4, label=labels[0])
        ax.bar([x + 0.2 for x in xs], [r[base] * scale for r in rows], width=0.4, label=labels[1])
        ax.set_xticks(list(xs), [str(r[key]).replace(", ", "\n") for r in rows], fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8, loc="upper left")
    fig.suptitle("BAGEL tiny preset on CPU (random weights)")
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "bagel.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


async def measure(s: Sizes) -> Row:
    one = one_rank_plan()
    runtimes: dict[str, Runtime] = {}
    try:  # one after the other (five worker processes starting at once on two cores take longer)
        runtimes["one"] = await Runtime.start(one)
        runtimes["three"] = await Runtime.start(compile_plan(ROOT / "placements" / "cpu3.toml"))
        # the idle workers wait on their sockets while the in-process tables run
        return {"branches": await branches(s, runtimes), "layouts": layout_rows(s), "batching": batching_rows(s, one),
                "decoding": await decoding(s, runtimes["one"])}
    finally:
        await asyncio.gather(*(rt.close() for rt in runtimes.values()))


def run(s: Sizes, threads: int) -> tuple[str, Row]:
    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = str(threads)  # the worker processes' torch threads
    try:
        results = asyncio.run(measure(s))
    finally:
        if saved is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = saved
    cores = os.cpu_count() or 1
    results["eq5"] = equation5(results["branches"], cores)
    lines = [f"BAGEL tiny preset (random weights) on CPU: {cores} cores, {threads} torch thread(s) per process\n",
             *table_branches(results["branches"], results["eq5"], s, cores), "", *table_layouts(results["layouts"]), "",
             *table_batching(results["batching"], s), "", *table_decoding(results["decoding"], s)]
    return "\n".join(lines), results


def main(argv: list[str] | None = None) -> Row:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads, here and in each worker")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one pair: a smoke run")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    sizes = QUICK if args.quick else Sizes()
    report, results = run(sizes, args.threads)
    print(report)
    if not args.no_plot:
        path = plot(results)
        if path is not None:
            print(f"\nplot: {path}")
    return results


if __name__ == "__main__":
    main()
