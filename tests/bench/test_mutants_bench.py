"""bench/mutants.py's machinery: the copy it mutates, one substitution at a time. It runs no mutant here
(each one runs test files: minutes), and asserts no result of the tree's tests."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.bench_scripts import loaded_bench

BENCH = Path(__file__).resolve().parents[2] / "bench" / "mutants.py"


@pytest.fixture(scope="module")
def mutants() -> Iterator[ModuleType]:
    with loaded_bench(BENCH, "bench_mutants") as module:
        yield module


def test_every_mutant_names_a_core_guard_and_its_tests(mutants: ModuleType) -> None:
    guards = {m.guard for m in mutants.MUTANTS}
    assert guards == {"cancellation", "disconnect", "rollback", "admission", "stream credits"}
    names = [m.name for m in mutants.MUTANTS]
    assert len(set(names)) == len(names)
    for m in mutants.MUTANTS:
        assert m.old != m.new and m.tests and all(t.startswith("tests/") for t in m.tests)


def _tiny_tree(root: Path) -> None:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "pyproject.toml").write_text('[tool.setuptools]\npackage-dir = { "wgc" = "src" }\n')
    (root / "src").mkdir()
    (root / "src" / "__init__.py").write_text("GUARD = True\nGUARD = True  # twice\n")
    (root / "src" / "guard.py").write_text("def allowed(n):\n    return n < 3\n")
    (root / ".gitignore").write_text("ignored.txt\n")
    (root / "ignored.txt").write_text("never copied\n")


def test_the_copy_holds_the_tree_and_points_python_at_itself(mutants: ModuleType, tmp_path: Path) -> None:
    tree, copy = tmp_path / "tree", tmp_path / "copy"
    _tiny_tree(tree)
    copy.mkdir()
    mutants.copy_tree(tree, copy)
    assert (copy / "src" / "guard.py").read_text() == (tree / "src" / "guard.py").read_text()
    assert not (copy / "ignored.txt").exists()
    site = (copy / "_mutants_site" / "sitecustomize.py").read_text()
    assert repr(str(copy / "src")) in site and "'wgc'" in site
    done = subprocess.run([sys.executable, "-c", "import wgc.guard as g; print(g.__file__)"],
                          env={"PYTHONPATH": str(copy / "_mutants_site"), "PATH": ""}, capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.strip() == str(copy / "src" / "guard.py"), done.stderr


def test_a_mutant_rewrites_the_copy_only_and_refuses_ambiguous_text(mutants: ModuleType, tmp_path: Path) -> None:
    tree, copy = tmp_path / "tree", tmp_path / "copy"
    _tiny_tree(tree)
    copy.mkdir()
    mutants.copy_tree(tree, copy)
    m = mutants.Mutant("always-allowed", "admission", "src/guard.py", "return n < 3", "return True", ("tests/x.py",))
    original = mutants.apply(copy, m)
    assert "return True" in (copy / "src" / "guard.py").read_text() and "return n < 3" in original
    assert "return n < 3" in (tree / "src" / "guard.py").read_text()  # the tree itself is untouched
    with pytest.raises(LookupError, match="occurs 2 times"):
        mutants.apply(copy, mutants.Mutant("x", "admission", "src/__init__.py", "GUARD = True", "", ("t",)))
    with pytest.raises(LookupError, match="occurs 0 times"):
        mutants.apply(copy, mutants.Mutant("y", "admission", "src/guard.py", "not there", "", ("t",)))
