"""BAGEL's skipped guidance branches (tiny preset, random weights, CPU, one rank): image generation
with the walk as shipped (the cfg branches' velocities computed only where combine.step reads them)
against the walk before the skip (every branch computed every step), interleaved in one process.

The old walk is the shipped one with the two flag RUNs taken out and every velocity passed 1, so
the two differ in the skip alone. Both run in process (LocalCluster) on placements/cpu.toml's plan,
at the t2i defaults (steps 50, interval 0.4..1.0, cfg_img_scale 1, shift 3), 1 and n concurrent
requests; best of `--repeats` wall times each. Prints a markdown table: wall, the old / new ratio,
the LLM's forwards and velocity calls computed and skipped per run, and whether the images match.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import bagel_layouts as lay  # noqa: E402
from wgc.models.bagel import LanguageModel  # noqa: E402
from wgc.runtime.components.base import Component  # noqa: E402
from wgc.runtime.process.local import LocalCluster  # noqa: E402

from wgc.compile import compile_program  # noqa: E402
from wgc.plan.model import Plan  # noqa: E402

WALK = ROOT / "models" / "bagel.walk"
PLACEMENT = ROOT / "placements" / "cpu.toml"
FLAGS = """        text_read = combine.reads_text(t, cfg_text_scale, cfg_interval_low, cfg_interval_high)
        image_read = combine.reads_image(t, cfg_text_scale, cfg_img_scale, cfg_interval_low, cfg_interval_high)
"""
Row = dict[str, Any]


def every_branch(source: str) -> str:
    """The walk before the skip: no flags, every velocity needed."""
    for old in (FLAGS, "velocity(z, t, text_read,", "velocity(z, t, image_read,"):
        if old not in source:
            raise SystemExit(f"models/bagel.walk no longer holds {old.strip()!r}: update bench/bagel_skip.py")
    return (source.replace(FLAGS, "").replace("velocity(z, t, text_read,", "velocity(z, t, 1,")
            .replace("velocity(z, t, image_read,", "velocity(z, t, 1,"))


def compiled(source: str) -> Plan:
    out = compile_program(str(WALK), source, str(PLACEMENT))
    if out.plan is None:
        raise SystemExit("; ".join(d.message for d in out.diagnostics))
    return out.plan


class Side:
    """One walk's cluster, built once (weights made before any timing)."""

    def __init__(self, plan: Plan) -> None:
        self.made: list[Component] = []
        self.cluster = LocalCluster(plan, lay.tiny_factory(self.made), fake_inputs=False)
        self.llm = next(m for m in self.made if isinstance(m, LanguageModel))

    def run(self, n: int, px: int, steps: int) -> tuple[float, dict[str, int], list[torch.Tensor]]:
        specs = [lay.t2i(f"request {i}: a lighthouse on a cliff at dusk", px, steps, seed=i) for i in range(n)]
        before = dict(self.llm.stats)
        start = time.perf_counter()
        out = self.cluster.run(specs)
        wall = time.perf_counter() - start
        counts = {k: self.llm.stats[k] - before[k] for k in ("forwards", "velocities", "velocities_skipped")}
        return wall, counts, [out[i]["image"][0] for i in sorted(out)]


def measure(levels: tuple[int, ...], px: int, steps: int, repeats: int) -> list[Row]:
    source = WALK.read_text()
    sides = {"old": Side(compiled(every_branch(source))), "new": Side(compiled(source))}
    for side in sides.values():
        side.run(1, px, 3)  # first-call costs out of the way
    rows = []
    for n in levels:
        walls: dict[str, list[float]] = {name: [] for name in sides}
        counts: dict[str, dict[str, int]] = {}
        images: dict[str, list[torch.Tensor]] = {}
        for i in range(repeats):
            for name in ("old", "new") if i % 2 == 0 else ("new", "old"):
                wall, counts[name], images[name] = sides[name].run(n, px, steps)
                walls[name].append(wall)
        same = all(torch.equal(a, b) for a, b in zip(images["old"], images["new"]))
        rows.append({"n": n, "old": min(walls["old"]), "new": min(walls["new"]), "counts": counts, "same": same})
    return rows


def table(rows: list[Row], px: int, steps: int, repeats: int) -> str:
    out = [f"### Skipped guidance branches: {px}x{px} t2i, {steps} steps at the defaults, cpu.toml, in process, "
           f"best of {repeats}\n",
           "| requests | every branch (old): s | skip (new): s | old / new | LLM forwards old / new | "
           "velocity calls computed old / new (skipped new) | same images |",
           "|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        o, n = r["counts"]["old"], r["counts"]["new"]
        out.append(f"| {r['n']} | {r['old']:.3f} | {r['new']:.3f} | {r['old'] / r['new']:.2f}x | "
                   f"{o['forwards']} / {n['forwards']} | {o['velocities']} / {n['velocities']} "
                   f"({n['velocities_skipped']}) | {'yes' if r['same'] else 'NO'} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--px", type=int, default=128, help="image side (the tiny latent table holds 256 at most)")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4], help="concurrent requests")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 64 px, 6 steps, once")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    px, steps, repeats = (64, 6, 1) if args.quick else (args.px, args.steps, args.repeats)
    rows = measure(tuple(args.levels), px, steps, repeats)
    print(table(rows, px, steps, repeats))
    return rows


if __name__ == "__main__":
    main()
