"""Every Python package in the tree is installed: pyproject's explicit list cannot silently fall behind."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _declared() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return set(config["tool"]["setuptools"]["packages"])


def _present() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    mapping = config["tool"]["setuptools"]["package-dir"]
    found = set()
    for package, folder in mapping.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            if any(part.startswith(".") or part == "node_modules" for part in rel.parts):
                continue
            name = ".".join([package, *rel.parts])
            if not any(name.startswith(other + ".") for other in mapping if other != package and other.startswith(package)):
                found.add(name)
    return found


def test_every_package_is_listed_in_pyproject() -> None:
    missing = _present() - _declared()
    assert not missing, f"add to [tool.setuptools] packages: {sorted(missing)}"


def test_no_listed_package_is_missing_from_the_tree() -> None:
    assert not (_declared() - _present()), sorted(_declared() - _present())
