"""The compiler's simulator and the runtime share plan semantics (wgc/semantics) and never import each other.

Read from the import statements themselves (ast), so an import inside a function counts too, and
checked once by importing: a worker's core modules load no compiler part, no parser and no torch.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# folder → module prefixes its files must not import
RULES: dict[str, tuple[str, ...]] = {
    "wgc/sim": ("wgc.runtime",),
    "runtime": ("wgc.sim", "wgc.lang", "wgc.check", "wgc.lower"),
    "wgc/semantics": ("wgc.runtime", "wgc.sim", "wgc.lang", "wgc.check", "wgc.lower", "wgc.placement", "torch"),
}


def imported(source: str) -> list[tuple[int, str]]:
    """(line, module) for every import statement in `source`, relative imports included as written."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((node.lineno, "." * node.level + (node.module or "")))
    return out


def breaches(folder: str, banned: tuple[str, ...]) -> list[str]:
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for line, module in imported(path.read_text()):
            if module.startswith(".") or any(module == b or module.startswith(b + ".") for b in banned):
                found.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    return found


@pytest.mark.parametrize("folder", RULES)
def test_no_import_across_the_boundary(folder: str) -> None:
    assert breaches(folder, RULES[folder]) == []


def test_the_check_sees_an_import_inside_a_function() -> None:
    source = "def f():\n    from wgc.sim.mock import small\n    import wgc.runtime.process.local\n"
    assert imported(source) == [(2, "wgc.sim.mock"), (3, "wgc.runtime.process.local")]


def test_the_check_would_catch_a_breach(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sim").mkdir()
    (tmp_path / "sim" / "x.py").write_text("from wgc.runtime.flows import FlowTable\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert breaches("sim", RULES["wgc/sim"]) == ["sim/x.py:1 imports wgc.runtime.flows"]


def test_the_runtime_core_loads_no_compiler_part() -> None:
    probe = ("import json, sys\n"
             "import wgc.runtime.worker.executor, wgc.runtime.coordinator.core, wgc.runtime.process.local\n"
             "print(json.dumps(sorted(sys.modules)))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    loaded = json.loads(done.stdout)
    heavy = ("wgc.sim", "wgc.lang", "wgc.check", "wgc.lower", "wgc.placement", "lark", "torch")
    assert [m for m in loaded if any(m == h or m.startswith(h + ".") for h in heavy)] == []
