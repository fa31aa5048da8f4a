"""The wgc side of the engine table: models/llama.walk on placements/llama-cpu.toml through the runtime
(`Runtime.submit`, one worker process with one torch thread), greedy, every request submitted at once."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from wgc.runtime.api import Runtime
from wgc.runtime.process.events import ErrorEvent, OutputEvent

from wgc.compile import compile_program

ROOT = Path(__file__).resolve().parents[2]


def compile_plan(model: str, placement: Path, out: Path) -> Path:
    """models/MODEL.walk compiled for `placement`, written to `out`."""
    source = ROOT / "models" / f"{model}.walk"
    result = compile_program(str(source), source.read_text(encoding="utf-8"), str(placement))
    if result.data is None:
        raise RuntimeError(f"{source}: {[d.message for d in result.diagnostics]}")
    out.write_bytes(result.data)
    return out


def wgc_env(knob: str, directory: Path, threads: int = 1) -> dict[str, str]:
    """The environment a wgc worker reads: the weights directory and its torch threads."""
    return {knob: str(directory), "WGC_CPU_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}


class WgcEngine:
    """A started runtime of the llama plan on one checkpoint (its workers read WGC_LLAMA_DIR)."""

    def __init__(self, plan: Path, directory: Path) -> None:
        self.plan = plan
        self.env = wgc_env("WGC_LLAMA_DIR", directory)
        self.loop = asyncio.new_event_loop()
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)  # the supervisor starts the workers with this process's environment
        try:
            self.runtime: Runtime = self.loop.run_until_complete(Runtime.start(plan, ready_timeout=300))
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def generate(self, prompts: list[list[int]], max_tokens: int) -> dict[str, Any]:
        return self.loop.run_until_complete(self._generate(prompts, max_tokens))

    async def _generate(self, prompts: list[list[int]], max_tokens: int) -> dict[str, Any]:
        start = time.perf_counter()
        handles = [self.runtime.submit(params={"max_tokens": max_tokens, "temperature": 0.0}, inputs={"prompt": p})
                   for p in prompts]
        tokens = await asyncio.gather(*[_tokens(h) for h in handles])
        return {"tokens": tokens, "seconds": time.perf_counter() - start}

    def close(self) -> None:
        self.loop.run_until_complete(self.runtime.close())
        self.loop.close()


async def _tokens(handle: Any) -> list[int]:
    out = []
    async for event in handle.events():
        if isinstance(event, OutputEvent):
            out.append(int(event.payload))
        elif isinstance(event, ErrorEvent):
            raise RuntimeError(f"wgc request failed: {event.error}")
    return out
