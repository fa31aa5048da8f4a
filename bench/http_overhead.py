"""HTTP overhead: requests/s and p50/p99 latency of a trivial walk through HTTP, side by side with the
in-process Python API, at concurrency 1, 16 and 64.

The walk is one RUN of a fake component and one text output, so what is measured is the serving
path, not a model. Baseline: `Runtime.submit` + `events()` in this process (coordinator and
worker process as in production). HTTP: `wgc run PLAN --serve 127.0.0.1:0 --fake` in a
subprocess, driven from this process by a minimal keep-alive HTTP/1.1 client (one connection per
concurrent request, pre-encoded requests: a general client such as httpx costs more CPU per
request than the server does, and would be what is measured), on two routes: the native
`/v1/generate` (stream false) and `/v1/chat/completions` (non-streaming). Two servers run side by
side and are driven in turn, round after round (the best round counts): `HTTP` as served, and
`HTTP plain` with WGC_HTTP_PLAIN=1 (h11, asyncio's loop, every request prepared on a worker thread:
runtime/http/serving/server.py, runtime/http/admission/offload.py). Besides requests/s, the server process's own CPU time per
request (user + system from /proc, the worker processes apart), which the machine's other load
disturbs less than wall time. The overhead ratio is API requests/s over HTTP requests/s. Client,
server and worker share the machine's cores: on a 2-core box the client's own cost is part of the
HTTP numbers.

    python bench/http_overhead.py [--requests 400] [--rounds 2]

Prints a markdown table; writes bench/out/http_overhead.md and http_overhead.png.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wgc.compile import compile_program  # noqa: E402

TRIVIAL = """
model trivial
import wgc.models.none as none
component c: none.Echo engine stateless {
    f(prompt: text) -> token
}
walk w(prompt: text) {
    emit text c.f(prompt)
}
flow { start -> w -> done }
"""
CONCURRENCY = (1, 16, 64)


@dataclass(frozen=True)
class Result:
    path: str
    concurrency: int
    rps: float
    p50_ms: float
    p99_ms: float
    server_us: float | None = None  # the server process's CPU per request (HTTP rows)


def compile_trivial(directory: Path) -> Path:
    placement = directory / "cpu.toml"
    placement.write_text('[cluster]\ndevice = "cpu"\nranks = 1\n[defaults]\nranks = 0\n'
                         '[defaults.engine]\nmax_batch = 64\n')
    result = compile_program("trivial.walk", TRIVIAL, str(placement))
    if result.data is None:
        raise SystemExit("\n".join(d.message for d in result.diagnostics))
    path = directory / "trivial.plan"
    path.write_bytes(result.data)
    return path


async def drive(one: Callable[[], Awaitable[None]], concurrency: int, total: int) -> tuple[float, list[float]]:
    """`total` calls of `one`, `concurrency` at a time; (seconds, per-call latencies)."""
    latencies: list[float] = []
    left = [total]

    async def worker() -> None:
        while left[0] > 0:
            left[0] -= 1
            t0 = time.perf_counter()
            await one()
            latencies.append(time.perf_counter() - t0)

    start = time.perf_counter()
    await asyncio.gather(*[worker() for _ in range(concurrency)])
    return time.perf_counter() - start, latencies


def result(path: str, concurrency: int, seconds: float, latencies: list[float]) -> Result:
    q = statistics.quantiles(latencies, n=100, method="inclusive")
    return Result(path, concurrency, len(latencies) / seconds, q[49] * 1e3, q[98] * 1e3)


async def api_rows(plan: Path, total: int) -> list[Result]:
    from wgc.runtime.api import Runtime

    rows = []
    async with await Runtime.start(plan, fake=True) as runtime:
        async def one() -> None:
            async for _ in runtime.submit(inputs={"prompt": "hi"}, outputs=["text"]).events():
                pass

        await drive(one, 4, 50)  # warm up
        for c in CONCURRENCY:
            rows.append(result("python API", c, *await drive(one, c, total)))
    return rows


SERVERS = {"HTTP": {}, "HTTP plain": {"WGC_HTTP_PLAIN": "1"}}  # name: environment on top of this one's


def start_server(plan: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    proc = subprocess.Popen([sys.executable, "-c", "from wgc.cli.main import main; main()", "run", str(plan),
                             "--fake", "--serve", "127.0.0.1:0", "--max-running", "64", "--max-queued", "256"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={**os.environ, **env})
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 120)
    if not ready:
        proc.kill()
        raise SystemExit("the server did not start")
    return proc, json.loads(proc.stdout.readline())["url"]


class Connection:
    """One keep-alive HTTP/1.1 connection that sends a fixed request and reads a Content-Length answer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @staticmethod
    async def open(host: str, port: int) -> Connection:
        return Connection(*await asyncio.open_connection(host, port))

    async def post(self, request: bytes) -> None:
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        await self.reader.readexactly(length)
        if status != 200:
            raise RuntimeError(f"HTTP {status}")

    def close(self) -> None:
        self.writer.close()


def encode_request(host: str, path: str, body: dict) -> bytes:
    data = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of one process so far (Linux /proc), None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def http_rows(urls: dict[str, tuple[str, int]], total: int, rounds: int) -> list[Result]:
    """Every route and concurrency on every server, the servers driven in turn each round; the best round."""
    routes = {
        "/v1/generate": ("/v1/generate", {"inputs": {"prompt": "hi"}, "stream": False}),
        "/v1/chat/completions": ("/v1/chat/completions",
                                 {"model": "trivial", "messages": [{"role": "user", "content": "hi"}]}),
    }
    conns: dict[str, list[Connection]] = {}
    for name, (url, _) in urls.items():
        host, port = url.removeprefix("http://").rsplit(":", 1)
        conns[name] = [await Connection.open(host, int(port)) for _ in range(max(CONCURRENCY))]
    best: dict[tuple[str, int], Result] = {}
    try:
        for route, (path, body) in routes.items():
            for c in CONCURRENCY:
                for _ in range(rounds):
                    for name, (url, pid) in urls.items():
                        host = url.removeprefix("http://").rsplit(":", 1)[0]
                        row = await _drive_server(f"{name} {route}", conns[name][:c], encode_request(host, path, body),
                                                  c, total, pid)
                        if (row.path, c) not in best or row.rps > best[(row.path, c)].rps:
                            best[(row.path, c)] = row
    finally:
        for pool in conns.values():
            for conn in pool:
                conn.close()
    return list(best.values())


async def _drive_server(name: str, conns: list[Connection], request: bytes, c: int, total: int, pid: int) -> Result:
    idle = list(conns)

    async def one() -> None:
        conn = idle.pop()
        try:
            await conn.post(request)
        finally:
            idle.append(conn)

    await drive(one, c, 50)  # warm up
    before = cpu_seconds(pid)
    seconds, latencies = await drive(one, c, total)
    after = cpu_seconds(pid)
    row = result(name, c, seconds, latencies)
    used = None if before is None or after is None else (after - before) / total * 1e6
    return Result(row.path, c, row.rps, row.p50_ms, row.p99_ms, used)


def markdown(rows: list[Result]) -> str:
    api = {r.concurrency: r for r in rows if r.path == "python API"}
    plain = {(r.path.replace("HTTP plain", "HTTP"), r.concurrency): r for r in rows if r.path.startswith("HTTP plain")}
    lines = ["| path | concurrency | requests/s | p50 ms | p99 ms | API/HTTP throughput | server CPU us/request "
             "| vs plain (req/s, CPU) |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: (r.path != "python API", r.path.split()[-1], r.path, r.concurrency)):
        ratio = "" if r.path == "python API" else f"{api[r.concurrency].rps / r.rps:.2f}x"
        cpu = "" if r.server_us is None else f"{r.server_us:,.0f}"
        base = plain.get((r.path, r.concurrency))
        versus = ""
        if base is not None:
            versus = f"{r.rps / base.rps:.2f}x"
            if r.server_us and base.server_us:
                versus += f", {base.server_us / r.server_us:.2f}x less"
        lines.append(f"| {r.path} | {r.concurrency} | {r.rps:,.0f} | {r.p50_ms:.2f} | {r.p99_ms:.2f} | {ratio} "
                     f"| {cpu} | {versus} |")
    return "\n".join(lines)


def plot(rows: list[Result], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = list(dict.fromkeys(r.path for r in rows))
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(paths)
    for i, path in enumerate(paths):
        ys = [next(r.rps for r in rows if r.path == path and r.concurrency == c) for c in CONCURRENCY]
        ax.bar([x + i * width for x in range(len(CONCURRENCY))], ys, width, label=path)
    ax.set_xticks([x + width * (len(paths) - 1) / 2 for x in range(len(CONCURRENCY))], [str(c) for c in CONCURRENCY])
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel("requests/s")
    ax.set_title("trivial walk: in-process API vs HTTP")
    ax.legend()
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "http_overhead.png", dpi=120)
    print(f"plot: {out / 'http_overhead.png'}")


def main() -> list[Result]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400, help="requests per concurrency level and path")
    parser.add_argument("--rounds", type=int, default=2, help="turns per server and cell; the best counts")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plan = compile_trivial(Path(tmp))
        rows = asyncio.run(api_rows(plan, args.requests))
        servers = {name: start_server(plan, env) for name, env in SERVERS.items()}
        try:
            urls = {name: (url, proc.pid) for name, (proc, url) in servers.items()}
            rows += asyncio.run(http_rows(urls, args.requests, args.rounds))
        finally:
            for proc, _ in servers.values():
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
    text = markdown(rows)
    print(text)
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "http_overhead.md").write_text(text + "\n", encoding="utf-8")
    plot(rows, out)
    return rows


if __name__ == "__main__":
    main()
