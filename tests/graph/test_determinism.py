"""Same input, same bytes: across builds in one process, and across processes (another hash seed)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.graph.helpers import CASES, PLACEMENTS, ROOT, case_id, checked
from wgc.graph import build_graph, render
from wgc.placement.load import load_placement

SCRIPT = """
import sys
from pathlib import Path
from wgc.check import check_source
from wgc.graph import build_graph, render
from wgc.placement.load import load_placement
out = []
for model, placement, suffix in (("bagel", "cpu3.toml", ".dot"), ("qwen3_omni", "2xh200.toml", ".mmd")):
    path = Path("models") / (model + ".walk")
    r = check_source(path.read_text(), str(path))
    p, _ = load_placement(Path("placements") / placement, r.program)
    out.append(render(build_graph(r.program, r.symbols, p), suffix))
sys.stdout.buffer.write(b"\\0".join(out))
"""


def _fresh(model: str, placement: str | None, suffix: str) -> bytes:
    result = checked(model)
    assert result.program is not None and result.symbols is not None
    loaded = load_placement(PLACEMENTS / placement, result.program)[0] if placement else None
    return render(build_graph(result.program, result.symbols, loaded), suffix)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_two_builds_give_the_same_bytes(case: tuple[str, str | None]) -> None:
    suffixes = [".dot", ".mmd"] + ([".svg"] if shutil.which("dot") else [])
    for suffix in suffixes:
        assert _fresh(*case, suffix) == _fresh(*case, suffix), suffix


def test_same_bytes_under_different_hash_seeds() -> None:
    outputs = set()
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, timeout=120)
        assert proc.returncode == 0, proc.stderr.decode()
        outputs.add(proc.stdout)
    assert len(outputs) == 1
