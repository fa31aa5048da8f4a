"""Multi-host costs on one machine, each "host" on its own loopback address, baselines interleaved.

Rows (ratios are the result: these two shared cores are noisy):
1. per-message latency (one way, half a round trip, median) and throughput of wgc's wire (the codec's
   frames on ZeroMQ PUSH/PULL) over ipc:// (one host) and tcp:// between 127.0.0.2 and 127.0.0.3,
   for the sizes the models send: a token, a 2048-float hidden state, a 4096 x 64 latent;
2. Orpheus (tiny components) with its `codes` stream crossing two hosts against both ranks on one
   host: requests per second for 4 at once, and time to first audio;
3. Orpheus's tiny LM decode step at tp 2 (two hosts, Gloo) against tp 1: the component's own time per
   decode call, from the ranks' counters (for correctness, not speed, on CPU).
Prints markdown tables; writes bench/out/multinode.png.

    python bench/multinode.py [--quick]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import zmq  # noqa: E402
from wgc.runtime.process import wire  # noqa: E402
from wgc.runtime.protocol.codec import Codec  # noqa: E402
from wgc.runtime.protocol.messages import Data  # noqa: E402

from tests.runtime.hosts import Hosts, compiled  # noqa: E402

ECHO = """
import sys, zmq
ctx = zmq.Context(); pull = ctx.socket(zmq.PULL); pull.bind(sys.argv[1]); push = ctx.socket(zmq.PUSH)
push.connect(sys.argv[2])
while True:
    frames = pull.recv_multipart(copy=False)
    if len(frames) == 1 and frames[0].bytes == b"stop":
        break
    push.send_multipart(frames, copy=False)
"""


def _payloads() -> list[tuple[str, Any, int]]:
    import torch

    return [("token (int)", 1234, 8), ("hidden state 2048 f32", torch.randn(2048), 2048 * 4),
            ("latent 4096x64 f32", torch.randn(4096, 64), 4096 * 64 * 4)]


def wire_latency(kind: str, value: Any, n: int, tmp: Path, port: int) -> float:
    """Median one-way seconds (half a round trip) of one Data message through an echo process."""
    if kind == "ipc":
        there, back = f"ipc://{tmp}/there", f"ipc://{tmp}/back"
        there_c, back_b = there, back
    else:
        there, back = f"tcp://127.0.0.3:{port}", f"tcp://127.0.0.2:{port + 1}"
        there_c, back_b = f"tcp://127.0.0.2:0;127.0.0.3:{port}", back
    ctx = zmq.Context()
    inbox = wire.pull_socket(ctx, back_b)
    echo = subprocess.Popen([sys.executable, "-c", ECHO, there, back.replace("tcp://", "tcp://127.0.0.3:0;")
                             if kind == "tcp" else back])
    out = wire.push_socket(ctx, there_c)
    codec = Codec()
    times = []
    try:
        for i in range(n + 20):
            t0 = time.perf_counter()
            wire.send(out, codec, Data(1, "w#0", "t", value))
            wire.decode(codec, inbox.recv_multipart(copy=False))
            if i >= 20:  # after the connection and the first allocations
                times.append((time.perf_counter() - t0) / 2)
        out.send(b"stop")
    finally:
        echo.wait(timeout=10)
        ctx.destroy(linger=0)
    return statistics.median(times)


def wire_rows(rounds: int, n: int) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        for name, value, size in _payloads():
            got: dict[str, list[float]] = {"ipc": [], "tcp": []}
            for r in range(rounds):  # interleaved: ipc, tcp, ipc, tcp
                for kind in ("ipc", "tcp"):
                    got[kind].append(wire_latency(kind, value, n, Path(tmp), 23000 + 10 * r))
            ipc, tcp = statistics.median(got["ipc"]), statistics.median(got["tcp"])
            rows.append({"what": name, "bytes": size, "ipc_us": ipc * 1e6, "tcp_us": tcp * 1e6,
                         "ipc_MBps": size / ipc / 1e6, "tcp_MBps": size / tcp / 1e6, "ratio": tcp / ipc})
    return rows


ORPHEUS = [{"params": {"voice": v, "max_tokens": 120, "temperature": 0.0}, "inputs": {"prompt": "hello there"},
            "outputs": ["audio"]} for v in ("leah", "tara", "leo", "zoe")]


async def _serve(plan: Path, docs: list[dict[str, Any]], repeats: int) -> tuple[float, float, dict[str, int]]:
    """(requests/s, median time to first audio, rank counters) of `repeats` waves of `docs` at once."""
    from wgc.runtime.api import Runtime

    async with await Runtime.start(plan, ready_timeout=60) as runtime:
        walls, firsts = [], []
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            handles = [runtime.submit(**d) for d in docs]
            for h in handles:
                await h.collect()
                firsts.append(h.final.t_first)
            walls.append(time.perf_counter() - t0)
        report = await runtime.health()
        counters: dict[str, int] = {}
        for r in report.ranks:
            for k, v in r.counters.items():
                counters[f"{r.rank}:{k}"] = v
        return len(docs) / statistics.median(walls[1:]), statistics.median(firsts), counters


def serve_on_hosts(tmp: Path, placement: str, docs: list[dict[str, Any]], repeats: int,
                   nodes: int = 0, **extra: str) -> tuple[float, float, dict[str, int]]:
    plan = compiled(tmp, "orpheus", placement, **extra)
    with Hosts(tmp) as hosts:
        for k in range(1, nodes + 1):
            hosts.start(str(plan), "--headless", "--node-rank", str(k), "--master-addr", "127.0.0.2")
        return asyncio.run(_serve(plan, docs, repeats))


def decode_us(counters: dict[str, int], rank: int) -> float:
    calls = counters.get(f"{rank}:llm.decode.calls") or counters.get(f"{rank}:llm.decode.items") or 1
    return counters.get(f"{rank}:llm.decode.compute_us", 0) / calls


def serve_rows(tmp: Path, rounds: int, repeats: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    stream: dict[str, list[tuple[float, float]]] = {"one host": [], "two hosts": []}
    tp: dict[str, list[float]] = {"tp 1": [], "tp 2 (two hosts, gloo)": []}
    for r in range(rounds):
        sub = tmp / f"r{r}"
        sub.mkdir()
        rps, first, _ = serve_on_hosts(sub, "orpheus-cpu2.toml", ORPHEUS, repeats)
        stream["one host"].append((rps, first))
        rps, first, _ = serve_on_hosts(sub, "orpheus-cpu2-hosts.toml", ORPHEUS, repeats, nodes=1)
        stream["two hosts"].append((rps, first))
        _, _, c1 = serve_on_hosts(sub, "cpu.toml", ORPHEUS[:1], repeats, extra='model = "orpheus"')
        tp["tp 1"].append(decode_us(c1, 0))
        _, _, c2 = serve_on_hosts(sub, "orpheus-tp2-hosts.toml", ORPHEUS[:1], repeats, nodes=1)
        tp["tp 2 (two hosts, gloo)"].append(decode_us(c2, 0))
    base_rps = statistics.median(x[0] for x in stream["one host"])
    base_first = statistics.median(x[1] for x in stream["one host"])
    srows = [{"what": k, "rps": statistics.median(x[0] for x in v), "ttfa_ms": 1e3 * statistics.median(x[1] for x in v),
              "rps_ratio": statistics.median(x[0] for x in v) / base_rps,
              "ttfa_ratio": statistics.median(x[1] for x in v) / base_first} for k, v in stream.items()]
    base = statistics.median(tp["tp 1"])
    trows = [{"what": k, "decode_us": statistics.median(v), "ratio": statistics.median(v) / base} for k, v in tp.items()]
    return srows, trows


def _plot(wrows: list[dict[str, Any]], srows: list[dict[str, Any]], trows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    names = [r["what"] for r in wrows]
    x = range(len(names))
    axes[0].bar([i - 0.2 for i in x], [r["ipc_us"] for r in wrows], 0.4, label="ipc (one host)")
    axes[0].bar([i + 0.2 for i in x], [r["tcp_us"] for r in wrows], 0.4, label="tcp (two hosts)")
    axes[0].set_xticks(list(x), names, fontsize=7)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("one-way latency, us (median)")
    axes[0].legend()
    axes[1].bar([r["what"] for r in srows], [r["rps"] for r in srows])
    axes[1].set_ylabel("Orpheus requests/s (4 at once)")
    axes[2].bar([r["what"] for r in trows], [r["decode_us"] for r in trows])
    axes[2].set_ylabel("decode call, us (component time)")
    fig.suptitle("wgc across loopback hosts (one 2-core machine)")
    fig.tight_layout()
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    fig.savefig(out / "multinode.png", dpi=110)
    print(f"plot: {out / 'multinode.png'}")


def main() -> None:
    quick = "--quick" in sys.argv
    os.environ.setdefault("WGC_CPU_THREADS", "1")
    wrows = wire_rows(rounds=2, n=100 if quick else 400)
    print("| message | bytes | ipc one-way (us) | tcp one-way (us) | tcp / ipc | ipc MB/s | tcp MB/s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in wrows:
        print(f"| {r['what']} | {r['bytes']} | {r['ipc_us']:.0f} | {r['tcp_us']:.0f} | {r['ratio']:.2f} | "
              f"{r['ipc_MBps']:.2f} | {r['tcp_MBps']:.2f} |")
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        srows, trows = serve_rows(Path(tmp), rounds=1 if quick else 2, repeats=1 if quick else 2)
    print()
    print("| Orpheus (tiny), 4 requests at once | requests/s | TTFA (ms) | req/s ratio | TTFA ratio |")
    print("|---|---:|---:|---:|---:|")
    for r in srows:
        print(f"| {r['what']} | {r['rps']:.2f} | {r['ttfa_ms']:.0f} | {r['rps_ratio']:.2f} | {r['ttfa_ratio']:.2f} |")
    print()
    print("| Orpheus tiny LM decode call | component time (us) | ratio to tp 1 |")
    print("|---|---:|---:|")
    for r in trows:
        print(f"| {r['what']} | {r['decode_us']:.0f} | {r['ratio']:.2f} |")
    _plot(wrows, srows, trows)


if __name__ == "__main__":
    main()
