"""Several "hosts" on one machine for the multi-host tests: each is its own process tree (its own
session), started with the real CLI, on its own loopback address (127.0.0.2, 127.0.0.3, ...).

Every helper is bounded in time, and `Hosts` kills every process tree it started on exit, so a
failing test leaves nothing behind.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from tests.processes import alive
from wgc.compile import compile_program

ROOT = Path(__file__).resolve().parents[2]
HEAD = "127.0.0.2"
TIMEOUT = "2"  # WGC_HOST_TIMEOUT where a test detects a failure: seconds of silence before "down"
RESULTS_TIMEOUT = "10"  # where a test checks results only: a loaded CI host must not be declared down


def free_base_port() -> int:
    """A base port below the ephemeral range (no client socket takes it), spread so that tests run one
    after another never meet a previous run's port."""
    return random.Random(os.getpid() ^ time.time_ns()).randrange(20000, 32000, 40)


def compiled(tmp_path: Path, model: str, placement: str, port: int | None = None, extra: str = "") -> Path:
    """The model compiled for a shipped placement with `[transport] port` moved to `port`."""
    port = port if port is not None else free_base_port()
    own = tmp_path / f"{placement.removesuffix('.toml')}-{port}.toml"
    own.write_text(f'extends = "{ROOT / "placements" / placement}"\n{extra}\n[transport]\nport = {port}\n')
    source = ROOT / "models" / f"{model}.walk"
    result = compile_program(str(source), source.read_text(), str(own))
    assert result.data is not None, [d.message for d in result.diagnostics]
    path = tmp_path / f"{model}-{own.stem}.plan"  # by placement too: two compiles in a test may draw one port
    path.write_bytes(result.data)
    return path


def cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "from wgc.cli.run_cmd import run; run()", *args]


def host_env(timeout: str = RESULTS_TIMEOUT, **more: str) -> dict[str, str]:
    return {**os.environ, "WGC_HOST_TIMEOUT": timeout, "WGC_CPU_THREADS": "1", **more}


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (its workers), read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def wait_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def wait_for(predicate: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


class Hosts:
    """Process trees started for one test; every one is SIGKILLed (its whole session) on exit.
    `timeout`: the hosts' WGC_HOST_TIMEOUT (TIMEOUT for the failure tests)."""

    def __init__(self, tmp_path: Path, timeout: str = RESULTS_TIMEOUT) -> None:
        self.tmp = tmp_path
        self.timeout = timeout
        self.procs: list[subprocess.Popen[str]] = []

    def __enter__(self) -> Hosts:
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            pids = [proc.pid, *descendants(proc.pid)]
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGCONT)
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            for stream in (proc.stdin, proc.stdout, proc.err_file):  # type: ignore[attr-defined]
                if stream is not None:
                    stream.close()
            wait_gone(pids, 5.0)

    def start(self, *args: str, stdin: int | None = subprocess.DEVNULL, **env: str) -> subprocess.Popen[str]:
        err = open(self.tmp / f"host{len(self.procs)}.err", "w+")
        proc = subprocess.Popen(cli(*args), stdin=stdin, stdout=subprocess.PIPE, stderr=err, text=True,
                                env=host_env(self.timeout, **env), start_new_session=True)
        proc.err_file = err  # type: ignore[attr-defined]
        proc.err_path = err.name  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def node(self, plan: Path, k: int, *more: str, **env: str) -> subprocess.Popen[str]:
        """Host `k` of the plan, headless, joining the head at HEAD."""
        return self.start(str(plan), "--fake", "--headless", "--node-rank", str(k), "--master-addr", HEAD, *more, **env)


def stderr(proc: subprocess.Popen[str]) -> str:
    err: IO[str] = proc.err_file  # type: ignore[attr-defined]
    if not err.closed:
        err.flush()
    return Path(proc.err_path).read_text()  # type: ignore[attr-defined]
