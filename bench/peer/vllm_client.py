"""The vLLM venv's interpreter as a subprocess running bench/peer/vllm_worker.py, driven from here."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

WORKER = Path(__file__).with_name("vllm_worker.py")
MARK = "@@peer "


def peer_env(threads: int = 1) -> dict[str, str]:
    """vLLM on CPU with `threads` torch threads, unbound, a 1 GiB KV cache, no telemetry."""
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1", "TOKENIZERS_PARALLELISM": "false"}


def vllm_version(python: str) -> str | None:
    """vLLM's version under `python`, or None when it cannot import vLLM."""
    try:
        done = subprocess.run([python, "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True,
                              timeout=120, env=peer_env())
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip().splitlines()[-1] if done.returncode == 0 and done.stdout.strip() else None


class VllmWorker:
    def __init__(self, python: str, log: Path) -> None:
        self.log = open(log, "ab")  # closed in close()
        self.proc = subprocess.Popen([python, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, env=peer_env(), text=True)

    def ask(self, **cmd: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith(MARK):
                return json.loads(line[len(MARK):])
        raise RuntimeError(f"the vLLM worker exited ({self.proc.wait()}); see {self.log.name}")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write('{"op": "quit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.log.close()
