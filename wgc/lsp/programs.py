"""The `.walk` program a placement is checked against, found as a user of `wgc compile` would.

`wgc compile model.walk --placement p.toml` is told both files; an editor holds only the placement.
Its `model = "NAME"` key (its own or a base's) names the program: the first `.walk` file that
declares `model NAME` (compared as P007 compares them, without case or separators) in, in order,
the placement's directory, that directory's parent, and `models/` under the workspace root. Within
a directory a file named after the model comes first, then the others by name. A `.walk` open in
the editor is read as the editor holds it (its analysis already made), even before it is saved;
any other is read from disk, and checked once per change of its size or modification time.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from wgc.check import CheckResult, check_source
from wgc.lsp.document import Analysis
from wgc.placement.load import model_key as same_model_name  # P007's comparison, so the two never disagree

_MODEL_DECL = re.compile(r"^[ \t]*model[ \t]+([A-Za-z_][A-Za-z0-9_]*)", re.M)


def declared_model(text: str) -> str | None:
    """The NAME of the program's `model NAME` line, without parsing it (a program that does not
    parse still says which model it is)."""
    m = _MODEL_DECL.search(text)
    return m.group(1) if m else None


def search_dirs(placement: Path, root: Path | None) -> tuple[Path, ...]:
    """Where a placement's program is looked for, in order, each directory once."""
    out: list[Path] = []
    for d in (placement.parent, placement.parent.parent, *((root / "models",) if root is not None else ())):
        if d not in out:
            out.append(d)
    return tuple(out)


def _key(path: Path) -> str:
    return os.path.normcase(os.path.abspath(path))


@dataclass(frozen=True)
class Program:
    path: Path
    checked: CheckResult


@dataclass
class _OnDisk:
    stamp: tuple[int, int]  # modification time and size when it was read
    text: str
    checked: CheckResult | None = None  # checked when first chosen


class Programs:
    """Finds programs; remembers the `.walk` files read from disk until they change."""

    def __init__(self) -> None:
        self._disk: dict[str, _OnDisk] = {}

    def find(self, model: str, dirs: Iterable[Path], open_walks: Iterable[Analysis]) -> Program | None:
        by_dir: dict[str, dict[str, Analysis]] = {}
        for analysis in open_walks:
            by_dir.setdefault(_key(Path(analysis.file).parent), {})[_key(Path(analysis.file))] = analysis
        wanted = same_model_name(model)
        for d in dirs:
            opened = by_dir.get(_key(d), {})
            paths = {_key(p): p for p in _walk_files(d)}
            paths.update({k: Path(a.file) for k, a in opened.items()})
            for key in sorted(paths, key=lambda k: (same_model_name(paths[k].stem) != wanted, paths[k].name)):
                found = self._program(paths[key], opened.get(key), wanted)
                if found is not None:
                    return found
        return None

    def _program(self, path: Path, opened: Analysis | None, wanted: str) -> Program | None:
        if opened is not None:
            name = declared_model(opened.text)
            if name is None or same_model_name(name) != wanted:
                return None
            checked = opened.checked or CheckResult(None, None, opened.diagnostics)
            return Program(path, checked)
        disk = self._read(path)
        if disk is None:
            return None
        name = declared_model(disk.text)
        if name is None or same_model_name(name) != wanted:
            return None
        if disk.checked is None:
            disk.checked = check_source(disk.text, str(path))
        return Program(path, disk.checked)

    def _read(self, path: Path) -> _OnDisk | None:
        try:
            st = path.stat()
            stamp = (st.st_mtime_ns, st.st_size)
            known = self._disk.get(_key(path))
            if known is not None and known.stamp == stamp:
                return known
            read = _OnDisk(stamp, path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            return None
        self._disk[_key(path)] = read
        return read


def _walk_files(d: Path) -> list[Path]:
    try:
        return [p for p in d.glob("*.walk") if p.is_file()]
    except OSError:
        return []
