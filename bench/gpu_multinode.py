"""Two "hosts" on one machine: a TP 2 all-reduce, tensors sent as a header on ZeroMQ with the payload
on the process group (NCCL on CUDA; Gloo with --backend gloo, the CPU stand-in CI can run), and the
runtime's own edges (runtime/process/tensor_edges.py: what a worker does for `inter_host = "nccl"`
or `"gloo"`) against the same messages as ZeroMQ frames through host memory, interleaved.

Each rank is its own process with its own loopback address (127.0.0.2, 127.0.0.3). On one GPU the
two NCCL ranks get distinct NCCL_HOSTID values and NCCL_SOCKET_IFNAME=lo with P2P and SHM off, so
their traffic goes over NCCL's socket transport as between hosts. The header/payload path posts a
receive only when the header says the bytes are coming (a Gloo or NCCL op whose peer never posts its
half waits the group timeout and closes the pair), so the receiver may be slower than the timeout.

The runtime rows (bench/gpu_edge_rows.py) time a round trip per message (the receiver decodes it,
checks every value and device, and answers with one byte on ZeroMQ): a Data message holding a
latent on the rank's device and a CPU step counter (which stays a ZeroMQ frame on an NCCL edge);
then both ranks send each other large messages at once, which one NCCL group for both directions
could deadlock on.

    python bench/gpu_multinode.py [--backend nccl|gloo] [--n 200] [--port 29800] [--timeout 60]

Prints a markdown table and writes bench/out/gpu_multinode-BACKEND.png (when matplotlib is there).
The CUDA path is unverified until a GPU session runs it (bench/gpu_check.sh).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wgc.runtime.process.store import bound_master  # noqa: E402

from bench.gpu_edge_rows import BIG, BOTH_WAYS, runtime_rows  # noqa: E402

ADDRESSES = ("127.0.0.2", "127.0.0.3")
BASE_PORT = 29800  # --port: the raw rows' store at BASE, their header socket at BASE + 11, the runtime rows at BASE + 20
SIZES = [(2048,), (4096, 64)]  # a hidden state, a latent


def _group(backend: str, rank: int, port: int) -> tuple[object, object]:
    import torch.distributed as dist

    timeout = timedelta(seconds=60)  # the master on the first host's address only, as the runtime's
    store = bound_master(ADDRESSES[0], port, timeout) if rank == 0 else dist.TCPStore(ADDRESSES[0], port, None, False, timeout)
    prefix = dist.PrefixStore("bench/", store)
    if backend == "nccl":
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timedelta(seconds=60)
        return dist.ProcessGroupNCCL(prefix, rank, 2, opts), store
    opts = dist.ProcessGroupGloo._Options()
    opts._devices = [dist.ProcessGroupGloo.create_device(hostname=ADDRESSES[rank])]
    opts._timeout = timedelta(seconds=60)
    return dist.ProcessGroupGloo(prefix, rank, 2, opts), store


def _sync(backend: str) -> None:
    if backend == "nccl":
        import torch

        torch.cuda.synchronize()


def rank_main(backend: str, rank: int, n: int, port: int) -> None:
    import msgspec
    import torch
    import zmq

    device = "cuda:0" if backend == "nccl" else "cpu"
    pg, _store = _group(backend, rank, port)
    x = torch.ones(1, 4096, device=device)
    times = []
    bad = 0
    for i in range(n + 10):  # TP 2 all-reduce of one decode step's activation
        x.fill_(1.0 + rank)
        t0 = time.perf_counter()
        pg.allreduce([x]).wait()
        _sync(backend)
        if i >= 10:
            times.append(time.perf_counter() - t0)
    bad += int(not bool((x == 3.0).all()))  # 1 + 2
    ctx = zmq.Context()
    sizes = SIZES
    sent = []
    if rank == 0:  # the sender: a header, then the payload on the group
        push = ctx.socket(zmq.PUSH)
        push.connect(f"tcp://{ADDRESSES[0]}:0;{ADDRESSES[1]}:{port + 11}")
        for shape in sizes:
            for i in range(n + 10):
                t = torch.full(shape, float(i), device=device)
                t0 = time.perf_counter()
                push.send(msgspec.msgpack.encode({"seq": i, "shape": list(shape), "dtype": "float32"}))
                pg.send([t], 1, 0).wait()
                _sync(backend)
                if i >= 10:
                    sent.append((shape, time.perf_counter() - t0))
    else:  # the receiver: posts each recv when its header arrives, into a fresh buffer
        pull = ctx.socket(zmq.PULL)
        pull.bind(f"tcp://{ADDRESSES[1]}:{port + 11}")
        for _ in range(len(sizes) * (n + 10)):
            head = msgspec.msgpack.decode(pull.recv())
            buf = torch.empty(head["shape"], device=device)
            pg.recv([buf], 0, 0).wait()
            bad += int(not bool((buf == head["seq"]).all()))  # this header's own payload, in order
    ctx.destroy(linger=0)
    runtime, both_us, wrong = runtime_rows(backend, rank, n, SIZES, port + 20)
    bad += wrong
    if rank == 0:
        _report(backend, times, sent, runtime, both_us)
    if bad:
        print(f"rank {rank}: {bad} tensors arrived wrong", file=sys.stderr)
    sys.stdout.flush()
    os._exit(2 if bad else 0)  # after the sockets: a Gloo pair torn down at interpreter exit may abort


def _report(backend: str, times: list[float], sent: list[tuple[tuple[int, ...], float]],
            runtime: list[tuple[tuple[int, ...], float, float]], both_us: float) -> None:
    print(f"| all_reduce [1, 4096] f32 ({backend}) | {1e6 * statistics.median(times):.0f} | |")
    for shape in SIZES:
        got = [s for sh, s in sent if sh == shape]
        print(f"| header on ZeroMQ + {backend} send {list(shape)} f32 | {1e6 * statistics.median(got):.0f} | |")
    for shape, edge_us, zmq_us in runtime:
        print(f"| runtime edge: header on ZeroMQ + {backend} payload {list(shape)} f32, round trip | "
              f"{edge_us:.0f} | {edge_us / zmq_us:.2f} |")
        print(f"| runtime ZeroMQ frames via host memory {list(shape)} f32, round trip | {zmq_us:.0f} | 1.00 |")
    print(f"| runtime edge both ways at once: {BOTH_WAYS} x {list(BIG)} f32 each way, all in | {both_us:.0f} | |")
    _plot(backend, runtime)


def _plot(backend: str, rows: list[tuple[tuple[int, ...], float, float]]) -> None:
    try:
        import matplotlib
    except ImportError:
        print("(no matplotlib: plot skipped)", file=sys.stderr)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r[1] for r in rows], 0.4, label=f"edge: header + {backend} payload")
    ax.bar([i + 0.2 for i in x], [r[2] for r in rows], 0.4, label="ZeroMQ frames (host memory)")
    ax.set_xticks(list(x), [str(list(r[0])) for r in rows])
    ax.set_ylabel("round trip per message, us (median)")
    ax.legend()
    fig.suptitle(f"runtime tensor edge between two loopback hosts ({backend})")
    fig.tight_layout()
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    fig.savefig(out / f"gpu_multinode-{backend}.png", dpi=110)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--rank", type=int, default=-1)
    p.add_argument("--port", type=int, default=BASE_PORT)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds each rank may take")
    args = p.parse_args()
    if args.rank >= 0:
        rank_main(args.backend, args.rank, args.n, args.port)
        return 0
    env = {**os.environ, "NCCL_SOCKET_IFNAME": "lo", "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1",
           "NCCL_IB_DISABLE": "1"}
    print("| two ranks on loopback hosts | median (us) | runtime edge / ZeroMQ frames |")
    print("|---|---:|---:|")
    sys.stdout.flush()
    procs = [subprocess.Popen([sys.executable, __file__, "--backend", args.backend, "--n", str(args.n), "--port", str(args.port),
                               "--rank", str(r)], env={**env, "NCCL_HOSTID": f"node{r}"}) for r in (0, 1)]
    try:
        codes = [proc.wait(timeout=args.timeout) for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
    return 0 if codes == [0, 0] else 1


if __name__ == "__main__":
    sys.exit(main())
