"""V-JEPA 2-AC rollout (models/vjepa2_ac, random weights, CPU): the KV-cached rollout beside the reference's
way, recomputing the whole growing prefix at every step, in one process, interleaved.

1. Rollout at horizons 4, 15 and 30 from one context frame: the AC component's `step` (one frame
   block written per step, attending to the cached ones) vs the same predictor's dense forward over
   frames 0..t at step t (what upstream's notebook and `cem` do), each prediction layer-normed and fed
   back. Two shapes at the tiny preset's width (embed 96 -> 64, 2 layers, 2 heads): `tiny` (its 4 x 4
   patch grid: 18-token frame blocks) and `frame` (the real 16 x 16 grid: 258-token blocks). Beside
   the ratio: the work ratio H(H+1)/2 / H = (H+1)/2 in frame blocks, and the paper's (1 x H100, the
   full ViT-g model, p50 192/400, 425/1596, 499/6254 ms).
2. MPC: K candidates of H steps from one context: `candidates` (K labels forked from the context,
   one forward a step over all K) vs the reference recomputing a batch of K sequences at every step.
3. The world-model route's overhead per call: a 4-step tiny rollout through `wgc run PLAN --serve`
   (POST /v1/world_model/rollout with PNG frames, and /v1/generate with tensors) vs the Python API
   (`Runtime.submit` in this process, the same worker process), requests alternated one at a time.

    python bench/rollout.py [--quick] [--threads 1]

Prints three markdown tables and writes them to bench/out/rollout.md; draws bench/out/rollout.png.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from http_overhead import Connection, encode_request  # noqa: E402
from wgc.models.vjepa2_ac import ActionConditionedPredictor  # noqa: E402
from wgc.models.vjepa2_ac.blocks import normalize_reps  # noqa: E402
from wgc.models.vjepa2_ac.config import ACConfig  # noqa: E402
from wgc.runtime.components.base import Call  # noqa: E402

from bench.plotting import pyplot  # noqa: E402
from wgc.compile import compile_program  # noqa: E402
from wgc.plan.model import ComponentSpec  # noqa: E402

PAPER = {4: (192, 400), 15: (425, 1596), 30: (499, 6254)}  # ms, cached vs recomputing (the paper's p50)
SHAPES = {"tiny": 4, "frame": 16}  # patches per side
Row = dict[str, Any]


def predictor(grid: int) -> ActionConditionedPredictor:
    spec = ComponentSpec("ac_predictor", "wgc.models.vjepa2_ac.ActionConditionedPredictor", "kv", [], {}, [], {},
                         [0], 1, {"page_size": 16, "kv_memory": 256 << 20})
    return ActionConditionedPredictor(spec, 0, "cpu", config=replace(ACConfig.preset("tiny"), grid=grid))


def inputs(ac: ActionConditionedPredictor, k: int, h: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    c = ac.config
    z = normalize_reps(torch.randn(c.tokens_per_frame, c.embed, generator=g))
    return z, torch.randn(k, h, 7, generator=g) * 0.05, torch.randn(k, h, 7, generator=g)


def cached(ac: ActionConditionedPredictor, z: torch.Tensor, a: torch.Tensor, s: torch.Tensor, request: int) -> float:
    began = time.perf_counter()
    if a.shape[0] == 1:
        for t in range(a.shape[1]):
            (z,) = ac.step([Call(request, "", (z, a[0, t], s[0, t]))])
    else:
        ac.candidates([Call(request, "", (z, a, s))])
    ac.release(request)
    return time.perf_counter() - began


def recomputed(ac: ActionConditionedPredictor, z: torch.Tensor, a: torch.Tensor, s: torch.Tensor) -> float:
    """The reference: step t runs frames 0..t of every candidate through the dense forward."""
    began = time.perf_counter()
    frames = z[None, None].expand(a.shape[0], 1, -1, -1)  # [K, 1, HW, D]
    with torch.no_grad():
        for t in range(a.shape[1]):
            nxt = normalize_reps(ac.net.forward_dense(frames, a[:, :t + 1], s[:, :t + 1])[:, -1:])  # [K, 1, HW, D]
            frames = torch.cat([frames, nxt], dim=1)
    return time.perf_counter() - began


def compare(grid: int, k: int, horizons: list[int], reps: int) -> list[Row]:
    ac = predictor(grid)
    rows = []
    for h in horizons:
        z, a, s = inputs(ac, k, h, seed=h)
        cached(ac, z, a, s, 0)  # warm: a CPU kernel is built per shape
        recomputed(ac, z, a, s)
        ours, theirs = [], []
        for rep in range(reps):  # interleaved, the order alternating
            if rep % 2:
                theirs.append(recomputed(ac, z, a, s))
                ours.append(cached(ac, z, a, s, rep + 1))
            else:
                ours.append(cached(ac, z, a, s, rep + 1))
                theirs.append(recomputed(ac, z, a, s))
        c, r = statistics.median(ours), statistics.median(theirs)
        rows.append({"grid": grid, "K": k, "H": h, "cached_ms": c * 1e3, "recompute_ms": r * 1e3, "ratio": r / c,
                     "work_ratio": (h + 1) / 2, "blocks": ac.stats["frame_blocks"]})
    return rows


# ---- 3. the route's overhead --------------------------------------------------------------------

def png(seed: int) -> str:
    from PIL import Image

    g = torch.Generator().manual_seed(seed)
    pixels = torch.randint(0, 256, (64, 64, 3), generator=g, dtype=torch.uint8).numpy()
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def route_bodies(horizon: int) -> dict[str, tuple[str, dict[str, Any]]]:
    g = torch.Generator().manual_seed(0)
    acts = (torch.randn(horizon, 7, generator=g) * 0.05).tolist()
    sts = torch.randn(horizon, 7, generator=g).tolist()
    clip = torch.randint(0, 256, (1, 64, 64, 3), generator=g, dtype=torch.uint8)
    tensor = {"dtype": "u8", "shape": [1, 64, 64, 3], "b64": base64.b64encode(clip.numpy().tobytes()).decode()}
    empty = {"dtype": "f32", "shape": [0, 7], "b64": ""}
    return {
        "HTTP /v1/world_model/rollout": ("/v1/world_model/rollout", {
            "model": "vjepa2_ac", "frames": [png(1)], "actions": acts, "states": sts, "encoding": "base64"}),
        "HTTP /v1/generate": ("/v1/generate", {
            "task": "rollout", "params": {"horizon": horizon}, "outputs": ["tensor"], "stream": False,
            "tensor_encoding": "base64", "inputs": {"clip": tensor, "history_actions": empty, "history_states": empty,
                                                     "actions": {"dtype": "f32", "values": acts},
                                                     "states": {"dtype": "f32", "values": sts}}}),
    }


def start_server(plan: Path) -> tuple[subprocess.Popen[bytes], str]:
    proc = subprocess.Popen([sys.executable, "-c", "from wgc.cli.main import main; main()", "run", str(plan),
                             "--serve", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=os.environ.copy())
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 180)
    if not ready:
        proc.kill()
        raise SystemExit("the server did not start")
    return proc, json.loads(proc.stdout.readline())["url"]


async def overhead(plan: Path, horizon: int, calls: int) -> list[Row]:
    from wgc.runtime.api import Runtime

    g = torch.Generator().manual_seed(0)
    api_inputs = {"clip": torch.randint(0, 256, (1, 64, 64, 3), generator=g, dtype=torch.uint8),
                  "history_actions": torch.zeros(0, 7), "history_states": torch.zeros(0, 7),
                  "actions": torch.randn(horizon, 7, generator=g) * 0.05, "states": torch.randn(horizon, 7, generator=g)}
    proc, url = start_server(plan)
    host, port = url.removeprefix("http://").rsplit(":", 1)
    requests = {name: encode_request(host, path, body) for name, (path, body) in route_bodies(horizon).items()}
    times: dict[str, list[float]] = {"python API": [], **{name: [] for name in requests}}
    try:
        async with await Runtime.start(plan) as rt:
            conns = {name: await Connection.open(host, int(port)) for name in requests}

            async def api() -> None:
                async for _ in rt.submit(params={"horizon": horizon}, task="rollout", inputs=api_inputs,
                                         outputs=["tensor"]).events():
                    pass

            for i in range(calls + 3):  # the first three warm both sides
                for name in times:
                    began = time.perf_counter()
                    await (api() if name == "python API" else conns[name].post(requests[name]))
                    if i >= 3:
                        times[name].append(time.perf_counter() - began)
            for c in conns.values():
                c.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    base = statistics.median(times["python API"])
    return [{"path": name, "p50_ms": statistics.median(t) * 1e3, "p90_ms": sorted(t)[int(0.9 * (len(t) - 1))] * 1e3,
             "overhead_ms": (statistics.median(t) - base) * 1e3} for name, t in times.items()]


def compile_plan(directory: Path) -> Path:
    source = ROOT / "models" / "vjepa2_ac.walk"
    compiled = compile_program(str(source), source.read_text(), str(ROOT / "placements" / "cpu.toml"))
    assert compiled.data is not None, [d.message for d in compiled.diagnostics]
    path = directory / "vjepa2_ac.plan"
    path.write_bytes(compiled.data)
    return path


# ---- report -------------------------------------------------------------------------------------

def table_rollout(rows: list[Row]) -> list[str]:
    out = ["| shape | H | cached (ms) | recompute (ms) | ratio | work ratio (H+1)/2 | paper ratio |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        paper = PAPER.get(r["H"])
        shown = f"{paper[1] / paper[0]:.2f}" if paper else ""
        name = next(n for n, g in SHAPES.items() if g == r["grid"])
        out.append(f"| {name} ({2 + r['grid'] ** 2}-token blocks) | {r['H']} | {r['cached_ms']:.1f} | "
                   f"{r['recompute_ms']:.1f} | {r['ratio']:.2f} | {r['work_ratio']:.1f} | {shown} |")
    return out


def table_mpc(rows: list[Row]) -> list[str]:
    out = ["| shape | K | H | candidates (ms) | recompute (ms) | ratio | work ratio |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        name = next(n for n, g in SHAPES.items() if g == r["grid"])
        out.append(f"| {name} | {r['K']} | {r['H']} | {r['cached_ms']:.1f} | {r['recompute_ms']:.1f} | "
                   f"{r['ratio']:.2f} | {r['work_ratio']:.1f} |")
    return out


def table_overhead(rows: list[Row], horizon: int) -> list[str]:
    out = [f"| path ({horizon}-step tiny rollout, one at a time) | p50 (ms) | p90 (ms) | over the Python API (ms) |",
           "|---|---:|---:|---:|"]
    out += [f"| {r['path']} | {r['p50_ms']:.1f} | {r['p90_ms']:.1f} | {r['overhead_ms']:+.1f} |" for r in rows]
    return out


def plot(rollout: list[Row], mpc: list[Row], out: Path = ROOT / "bench" / "out") -> Path | None:
    plt = pyplot()
    if plt is None:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for name, grid in SHAPES.items():
        rs = [r for r in rollout if r["grid"] == grid]
        if rs:
            left.plot([r["H"] for r in rs], [r["ratio"] for r in rs], "o-", label=f"measured, {name}")
    hs = sorted({r["H"] for r in rollout})
    left.plot(hs, [(h + 1) / 2 for h in hs], "k--", label="work ratio (H+1)/2")
    left.plot([h for h in PAPER], [b / a for a, b in PAPER.values()], "s:", label="paper (H100, ViT-g)")
    left.set(xlabel="horizon H", ylabel="recompute / cached", title="rollout speed-up")
    left.legend()
    labels = [f"{next(n for n, g in SHAPES.items() if g == r['grid'])} K={r['K']} H={r['H']}" for r in mpc]
    right.bar(labels, [r["ratio"] for r in mpc])
    right.set(ylabel="recompute / candidates", title="MPC: K candidates")
    right.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "rollout.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> dict[str, list[Row]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny shape only, H 4 and 15, one rep, a few HTTP calls")
    ap.add_argument("--threads", type=int, default=1, help="torch threads in this process")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    shapes = {"tiny": SHAPES["tiny"]} if args.quick else SHAPES
    horizons = [4, 15] if args.quick else [4, 15, 30]
    reps = 1 if args.quick else 3
    rollout = [r for g in shapes.values() for r in compare(g, 1, horizons, reps)]
    mpc = [r for g in shapes.values() for k in ((16,) if args.quick else (16, 64)) for r in compare(g, k, [4], reps)]
    with tempfile.TemporaryDirectory() as tmp:
        route = asyncio.run(overhead(compile_plan(Path(tmp)), 4, 3 if args.quick else 30))
    report = "\n".join(["## Rollout: cached vs recomputing the prefix", "", *table_rollout(rollout), "",
                         "## MPC: K candidates of 4 steps", "", *table_mpc(mpc), "",
                         "## The world-model route's overhead per call", "", *table_overhead(route, 4)])
    print(report)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rollout.md").write_text(report + "\n")
    path = plot(rollout, mpc, args.out)
    if path is not None:
        print(f"\nwrote {path}")
    return {"rollout": rollout, "mpc": mpc, "route": route}


if __name__ == "__main__":
    main()
