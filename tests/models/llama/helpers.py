"""Shared by the llama family's tests: the component spec and the compiled models/llama.walk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wgc.compile import compile_program
from wgc.plan.model import ComponentSpec

ROOT = Path(__file__).resolve().parents[3]
EOS = -1  # models/llama.walk's `const eos`


def lm_spec(page_size: int = 16, kv_memory: int = 16 << 20, **settings: Any) -> ComponentSpec:
    return ComponentSpec("lm", "wgc.models.llama.ChatModel", "kv", [], {"eos": EOS}, [], {"dtype": "bf16"}, [0], 1,
                         {"page_size": page_size, "max_batch": 16, "kv_memory": kv_memory, **settings})


def llama_plan(directory: Path, placement: str = "cpu.toml") -> Path:
    """models/llama.walk compiled for `placement`, written to `directory`."""
    source = ROOT / "models" / "llama.walk"
    compiled = compile_program(str(source), source.read_text(encoding="utf-8"), str(ROOT / "placements" / placement))
    assert compiled.data is not None, [d.message for d in compiled.diagnostics]
    path = directory / "llama.plan"
    path.write_bytes(compiled.data)
    return path
