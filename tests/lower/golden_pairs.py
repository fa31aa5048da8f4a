"""The (model, placement) pairs that compile, shared by the golden and the differential tests."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PAIRS: list[tuple[str, str]] = [
    ("bagel", "cpu"),
    ("bagel", "cpu3"),
    ("bagel", "cpu3-hosts"),
    ("bagel", "1xh100"),
    ("bagel", "3xh100"),
    ("bagel", "bagel-1xh200"),
    ("llama", "cpu"),
    ("llama", "llama-cpu"),
    ("orpheus", "cpu"),
    ("orpheus", "1xh100"),
    ("orpheus", "1xh200"),
    ("orpheus", "orpheus-pd"),
    ("orpheus", "orpheus-cpu2"),
    ("orpheus", "orpheus-cpu2-hosts"),
    ("orpheus", "orpheus-tp2-hosts"),
    ("qwen3_omni", "qwen3-omni-tp2-2hosts"),
    ("bagel", "bagel-3hosts"),
    ("pi05", "cpu"),
    ("pi05", "1xh100"),
    ("qwen3_omni", "cpu"),
    ("qwen3_omni", "2xh200"),
    ("qwen3_omni", "qwen3-omni-cpu2"),
    ("vjepa2_ac", "cpu"),
    ("vjepa2_ac", "1xh100"),
]


def paths(model: str, placement: str) -> tuple[str, str]:
    """Paths relative to the repository root, as a user types them (they are recorded in the plan)."""
    return f"models/{model}.walk", f"placements/{placement}.toml"


def golden_path(model: str, placement: str) -> Path:
    return ROOT / "tests" / "golden" / f"{model}__{placement}.txt"
