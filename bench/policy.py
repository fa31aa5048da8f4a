"""π0.5 (models/pi05.walk, tiny preset, random weights, CPU): the action chunk's latency and the policy
route's per-call overhead, each beside its baseline in one run, interleaved round by round.

1. Action chunk, in process: the walk run by the runtime's own executor (LocalCluster on
   placements/cpu.toml: vit.encode, the prefix written once, 10 velocity steps against the frozen
   prefix, to_actions) in π0.5 mode and in π0 mode, vs transformers 5.24's
   PI0ForConditionalGeneration.sample_actions at equal tiny dims (3 cameras of 56 px, the same
   prompt tokens; it writes the 51 suffix tokens into its cache and crops them after each step).
   The π0 walk carries the reference's very weights (tests/models/pi05's name map) and its chunk is
   compared. Also the components alone, without the runtime (prefill once + 10 velocity calls).
2. The route's overhead per call: `wgc run PLAN --serve 127.0.0.1:0` with the real tiny components
   (worker process and all) driven one call at a time by httpx over a keep-alive connection,
   POST /v1/policy/actions (two PNG cameras) and /v1/generate (the same inputs as raw tensors,
   stream false), vs the Python API (`Runtime.submit` + `events()` in this process, its own
   coordinator and worker process) with the same inputs. Overhead = median HTTP − median API.

    python bench/policy.py [--rounds 5] [--calls 20] [--quick]

Prints two markdown tables; writes bench/out/policy.md and bench/out/policy.png. One torch thread
per process (--threads) so that a measurement is one core; the machine's other load is noise that
the interleaving spreads over both sides.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wgc.models.pi05 import PaliGemmaWithExpert, SiglipEncoder, Stats  # noqa: E402
from wgc.models.pi05.config import Pi05Config  # noqa: E402
from wgc.runtime.api import OutputEvent, Runtime  # noqa: E402
from wgc.runtime.components.base import Call, Component, load_class  # noqa: E402
from wgc.runtime.coordinator.request import RequestSpec  # noqa: E402
from wgc.runtime.process.local import LocalCluster  # noqa: E402

from bench.plotting import pyplot  # noqa: E402
from tests.models.pi05.helpers import chunk, components, images, load_lerobot, pixels  # noqa: E402
from tests.models.pi05.reference import lerobot_state_dict, reference  # noqa: E402
from wgc.compile import compile_program  # noqa: E402
from wgc.plan.model import ComponentSpec, Plan  # noqa: E402

OUT = ROOT / "bench" / "out"
TASK = "pick up the red cube and put it in the box"
Row = dict[str, Any]


def compile_plan() -> tuple[Plan, bytes]:
    source = ROOT / "models" / "pi05.walk"
    compiled = compile_program(str(source), source.read_text(), str(ROOT / "placements" / "cpu.toml"))
    if compiled.plan is None or compiled.data is None:
        raise SystemExit("; ".join(d.message for d in compiled.diagnostics))
    return compiled.plan, compiled.data


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# ---- 1. the action chunk -------------------------------------------------------------------------

def cluster(plan: Plan, made: dict[str, Component]) -> LocalCluster:
    def factory(spec: ComponentSpec, rank: int) -> Component:
        return made.get(spec.name) or load_class(spec.cls).tiny(spec, rank, "cpu")

    return LocalCluster(plan, factory, fake_inputs=False)


def walk_request(imgs: torch.Tensor, state: torch.Tensor) -> RequestSpec:
    return RequestSpec(params={"seed": 3}, inputs={"images": imgs, "prompt": TASK, "state": state},
                       output_modalities=["action"])


def chunk_rows(plan: Plan, rounds: int) -> tuple[list[Row], float]:
    pi0 = Pi05Config.preset("tiny").as_pi0()
    ref = reference(pi0)
    vit0, llm0 = components(pi0, Stats.identity(32, 32))
    load_lerobot(vit0, llm0, lerobot_state_dict(ref))
    pi05 = {"vit": SiglipEncoder.tiny(next(c for c in plan.components if c.name == "vit"), 0, "cpu"),
            "llm": PaliGemmaWithExpert.tiny(next(c for c in plan.components if c.name == "llm"), 0, "cpu")}
    walks = {"pi05": cluster(plan, pi05), "pi0": cluster(plan, {"vit": vit0, "llm": llm0})}
    imgs = images(3, 56, seed=1)
    state32 = torch.linspace(-0.9, 0.9, 32)
    ids = [pi0.prefix.vocab - 1] * (3 * pi0.vision.tokens) + llm0.prompt_ids(Call(9, "", (None, TASK, state32)))
    llm0.release(9)
    noise = llm0.noise([Call(0, "", (3,))])[0]
    ref_inputs = dict(state=state32[None], input_ids=torch.tensor([ids]), pixel_values=pixels(imgs)[None],
                      noise=noise[None], attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                      pixel_attention_mask=torch.ones(1, 3, dtype=torch.bool))
    sides: dict[str, Callable[[], Any]] = {
        "wgc walk, pi0.5": lambda: walks["pi05"].run([walk_request(imgs, torch.zeros(8))]),
        "wgc walk, pi0 mode": lambda: walks["pi0"].run([walk_request(imgs, state32)]),
        "wgc components, pi0.5": lambda: one_chunk(pi05["vit"], pi05["llm"], imgs, torch.zeros(8), noise),  # type: ignore[arg-type]
        "transformers PI0 sample_actions": lambda: ref.sample_actions(**ref_inputs),
    }
    times: dict[str, list[float]] = {k: [] for k in sides}
    with torch.no_grad():
        for fn in sides.values():
            fn()  # warm: a CPU convolution builds its kernels per shape
        for _ in range(rounds):
            for name, fn in sides.items():
                times[name].append(timed(fn))
        ours = chunk(vit0, llm0, imgs, TASK, state32, noise, request=77)
        llm0.release(77)
        diff = float((ours - ref.sample_actions(**ref_inputs)[0]).abs().max())
    base = statistics.median(times["transformers PI0 sample_actions"])
    rows = [{"side": k, "median_s": statistics.median(v), "best_s": min(v),
             "speedup": base / statistics.median(v)} for k, v in times.items()]
    return rows, diff


def one_chunk(vit: SiglipEncoder, llm: PaliGemmaWithExpert, imgs: torch.Tensor, state: torch.Tensor,
              noise: torch.Tensor) -> torch.Tensor:
    out = chunk(vit, llm, imgs, TASK, state, noise, request=55)
    llm.release(55)
    return out


# ---- 2. the route's overhead ---------------------------------------------------------------------

def png(imgs: torch.Tensor) -> list[str]:
    from PIL import Image

    out = []
    for img in imgs:
        buf = io.BytesIO()
        Image.fromarray(img.numpy()).save(buf, "PNG")
        out.append("data:image/png;base64," + base64.b64encode(buf.getvalue()).decode())
    return out


def start_server(plan_path: Path, threads: int) -> tuple[subprocess.Popen[bytes], str]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.Popen([sys.executable, "-c", "from wgc.cli.main import main; main()", "run", str(plan_path),
                             "--serve", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 180)
    if not ready:
        proc.kill()
        raise SystemExit("the server did not start")
    return proc, json.loads(proc.stdout.readline())["url"]


async def api_call(rt: Runtime, imgs: torch.Tensor, state: torch.Tensor) -> None:
    handle = rt.submit(params={"seed": 3}, inputs={"images": imgs, "prompt": TASK, "state": state}, outputs=["action"])
    out = [e async for e in handle.events() if isinstance(e, OutputEvent)]
    if len(out) != 1:
        raise RuntimeError(f"the API call gave {len(out)} outputs")


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU of a process (this one for None), from /proc (0 where there is none)."""
    if pid is None:
        return time.process_time()
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def route_rows(plan_path: Path, rounds: int, calls: int, threads: int) -> list[Row]:
    proc, url = start_server(plan_path, threads)
    try:
        times, cpu = asyncio.run(route_times(plan_path, url, proc.pid, rounds, calls))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    api = statistics.median(times[API])
    return [{"side": k, "median_ms": 1000 * statistics.median(v), "p90_ms": 1000 * sorted(v)[int(0.9 * (len(v) - 1))],
             "overhead_ms": 1000 * (statistics.median(v) - api), "ratio": statistics.median(v) / api,
             "cpu_ms": 1000 * cpu[k] / len(v)} for k, v in times.items()]


API = "Python API (Runtime.submit)"


async def route_times(plan_path: Path, url: str, server: int, rounds: int,
                      calls: int) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Each side `calls` times a round, the sides in turn, one event loop throughout; per side its wall
    times and the CPU seconds of the process that serves it (this one for the API: its coordinator;
    the server's for HTTP: the route, its coordinator; the worker processes apart)."""
    import httpx

    imgs, state = images(2, 56, seed=2), torch.linspace(-1, 1, 8)
    policy = {"model": "pi05", "images": png(imgs), "state": state.tolist(), "task": TASK, "seed": 3}
    raw = {"model": "pi05", "params": {"seed": 3}, "outputs": ["action"], "stream": False, "inputs": {
        "images": {"dtype": "u8", "shape": list(imgs.shape), "b64": base64.b64encode(imgs.numpy().tobytes()).decode()},
        "prompt": TASK, "state": {"dtype": "f32", "values": state.tolist()}}}
    rt = await Runtime.start(plan_path, ready_timeout=180)
    times: dict[str, list[float]] = {API: [], "HTTP /v1/policy/actions": [], "HTTP /v1/generate": []}
    cpu = dict.fromkeys(times, 0.0)
    try:
        async with httpx.AsyncClient(timeout=60) as client:
            async def post(path: str, body: dict) -> None:
                r = await client.post(url + path, json=body)
                if r.status_code != 200:
                    raise RuntimeError(f"{path}: {r.status_code} {r.text[:200]}")

            sides = {API: lambda: api_call(rt, imgs, state), "HTTP /v1/policy/actions": lambda: post("/v1/policy/actions", policy),
                     "HTTP /v1/generate": lambda: post("/v1/generate", raw)}
            for fn in sides.values():
                await fn()
            for _ in range(rounds):
                for name, fn in sides.items():
                    pid = None if name == API else server
                    c0 = cpu_seconds(pid)
                    for _ in range(calls):
                        t0 = time.perf_counter()
                        await fn()
                        times[name].append(time.perf_counter() - t0)
                    cpu[name] += cpu_seconds(pid) - c0
    finally:
        await rt.close()
    return times, cpu


# ---- report --------------------------------------------------------------------------------------

def tables(chunks: list[Row], diff: float, routes: list[Row], rounds: int, calls: int) -> str:
    lines = [f"### 1. One action chunk [50, 32], tiny preset, 3 cameras (median of {rounds} interleaved rounds)", "",
             "| side | median | best | transformers / side |", "|---|---:|---:|---:|"]
    lines += [f"| {r['side']} | {1000 * r['median_s']:.1f} ms | {1000 * r['best_s']:.1f} ms | {r['speedup']:.2f}x |"
              for r in chunks]
    lines += ["", f"The pi0-mode walk's chunk vs sample_actions on the same weights and noise: max |diff| = {diff:.1e}.",
              "", f"### 2. The policy route's overhead per call (2 cameras; {rounds} rounds x {calls} calls a side)", "",
              "| side | median | p90 | over the API | ratio | CPU of the serving process |",
              "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['side']} | {r['median_ms']:.1f} ms | {r['p90_ms']:.1f} ms | {r['overhead_ms']:+.1f} ms | "
              f"{r['ratio']:.2f}x | {r['cpu_ms']:.1f} ms |" for r in routes]
    lines += ["", "CPU: this process for the API (its coordinator and the client), the server process for HTTP (the "
              "route and its coordinator); the worker processes' compute is apart in both."]
    return "\n".join(lines)


def plot(chunks: list[Row], routes: list[Row], out: Path = OUT) -> Path | None:
    plt = pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(13, 4))
    axes[0].barh([r["side"] for r in chunks], [1000 * r["median_s"] for r in chunks],
                 color=["tab:blue", "tab:cyan", "tab:green", "tab:orange"][: len(chunks)])
    axes[0].set_xlabel("ms per action chunk (median)")
    axes[0].set_title("1. pi0.5 tiny: one chunk, 10 flow steps", fontsize=10)
    axes[1].barh([r["side"] for r in routes], [r["median_ms"] for r in routes],
                 color=["grey", "tab:blue", "tab:cyan"][: len(routes)])
    axes[1].set_xlabel("ms per call (median)")
    axes[1].set_title("2. per-call latency: Python API vs HTTP", fontsize=10)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "policy.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="2 rounds, 3 calls (the smoke test)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    rounds, calls = (2, 3) if args.quick else (args.rounds, args.calls)
    torch.set_num_threads(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # the API's worker process too, as the server's
    plan, data = compile_plan()
    chunks, diff = chunk_rows(plan, rounds)
    with tempfile.TemporaryDirectory() as tmp:
        plan_path = Path(tmp) / "pi05-cpu.plan"
        plan_path.write_bytes(data)
        routes = route_rows(plan_path, rounds, calls, args.threads)
    report = tables(chunks, diff, routes, rounds, calls)
    print(report)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "policy.md").write_text(report + "\n")
    path = plot(chunks, routes, args.out)
    if path is not None:
        print(f"\nwrote {path}")
    return report


if __name__ == "__main__":
    main()
