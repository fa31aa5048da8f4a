"""A real `wgc run PLAN --serve 127.0.0.1:0` in a subprocess, for the HTTP tests.

The server picks a free port and says which on its ready line; `stop()` sends SIGTERM (as an
operator would), waits, and checks that no worker process outlived it.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.processes import alive
from wgc.compile import compile_program

ROOT = Path(__file__).resolve().parents[2]
TOY = ROOT / "tests" / "http" / "toy.walk"
API_KEY = "test-key"
# The test plans' components live in tests.http and tests.runtime, beside the shipped models.
ALLOW_MODULES = ("--allow-module-prefix", "wgc.models", "--allow-module-prefix", "tests")


def compile_plan(directory: Path, source: Path, placement: str = "cpu.toml") -> Path:
    result = compile_program(str(source), source.read_text(), str(ROOT / "placements" / placement))
    assert result.data is not None, [d.message for d in result.diagnostics]
    path = directory / f"{source.stem}.plan"
    path.write_bytes(result.data)
    return path


class Server:
    def __init__(self, plan: Path, *args: str, ready_timeout: float = 60.0) -> None:
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "PYTHONPATH": path}  # the workers import tests.http.toys
        self.stderr = tempfile.TemporaryFile()  # a file, not a pipe: a chatty server never blocks on it
        allow = () if "--allow-module-prefix" in args else ALLOW_MODULES
        self.proc = subprocess.Popen([sys.executable, "-c", "from wgc.cli.main import main; main()", "run", str(plan), "--serve",
                                      "127.0.0.1:0", *allow, *args], stdout=subprocess.PIPE, stderr=self.stderr, env=env)
        self.ready = self._ready_line(ready_timeout)
        self.url: str = self.ready["url"]
        self.worker_pids = [r["pid"] for r in self.ready["ranks"]]

    def _ready_line(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if ready:
                line = self.proc.stdout.readline()
                if line:
                    return json.loads(line)
            if self.proc.poll() is not None:
                break
        self.stop()
        raise RuntimeError(f"the server did not report ready: {self.errors()[-2000:]}")

    def errors(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        deadline = time.monotonic() + 10
        pids = getattr(self, "worker_pids", [])
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(alive(p) for p in pids), "a worker process outlived its server"
        return self.proc.returncode
