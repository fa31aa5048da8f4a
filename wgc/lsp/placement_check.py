"""One placement document checked as `wgc compile` checks its placement, from the editor's text.

The same steps and diagnostics as `wgc compile PROGRAM --placement FILE` (wgc/compile.py): the file
and its `extends` bases are read (TOML syntax, a missing or cyclic base: these need no program),
then the placement is checked against the program (`load_placement` given the editor's text).
The program is found from the placement's `model` (wgc/lsp/programs.py). Where it cannot
be checked against one, the server says so once, as an information-level `Notice`: the placement
names no model, no program declares it, or the program has errors (`wgc compile` would report
those and check nothing of the placement).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from wgc.diag.diagnostic import Diagnostic, sort_key
from wgc.lang.span import Span, point
from wgc.lsp.document import Analysis
from wgc.lsp.programs import Programs, search_dirs
from wgc.placement.document import Node, identity, load_with_bases
from wgc.placement.load import load_placement

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Notice:
    """Why the placement was not checked against a program, and how to make it so."""

    message: str
    span: Span


@dataclass(frozen=True)
class PlacementCheck:
    file: str  # the name the placement's own spans carry
    diagnostics: tuple[Diagnostic, ...] = ()  # as `wgc compile` reports them; bases' spans in their files
    notice: Notice | None = None
    searched: tuple[Path, ...] = ()  # where its program was looked for: a .walk changing there re-checks it
    program: Path | None = None
    error: str | None = None  # the check itself failed (a wgc bug)
    bases: frozenset[str] = frozenset()  # the `extends` files it read, by `identity`: one changing re-checks it


def check_placement(path: Path, text: str, root: Path | None, programs: Programs,
                    open_walks: Iterable[Analysis], open_tomls: Mapping[str, str] | None = None) -> PlacementCheck:
    """`open_tomls`: the editor's other TOML documents by `identity`; a base open there is read from
    its text, saved or not, as the placement's own text is."""
    file = str(path)
    dirs = search_dirs(path, root)
    try:
        return _check(path, text, dirs, root, programs, open_walks, open_tomls or {})
    except Exception as err:  # a bug on odd input must not take the server down
        log.exception("checking placement %s failed", file)
        last = str(err).strip().splitlines()[-1:] or [""]
        return PlacementCheck(file, searched=dirs,
                              error=f"wgc could not check this placement: {type(err).__name__}: {last[0]}")


def _check(path: Path, text: str, dirs: tuple[Path, ...], root: Path | None, programs: Programs,
           open_walks: Iterable[Analysis], open_tomls: Mapping[str, str]) -> PlacementCheck:
    file = str(path)
    tree, sources, diags = load_with_bases(path, text, open_tomls)
    bases = frozenset(identity(Path(s)) for s in sources[:-1])
    outcome = functools.partial(PlacementCheck, file, searched=dirs, bases=bases)  # what every outcome carries
    if tree is None or diags:
        return outcome(tuple(sorted(diags, key=sort_key)))
    model = tree.get("model")
    at = model.span if model is not None and model.span.file == file else point(file, 1, 1)
    if model is None or not isinstance(model.value, str):
        return outcome(notice=Notice(_no_model(model), at))
    found = programs.find(model.value, dirs, open_walks)
    if found is None:
        where = ", ".join(f"`{_shown(d, root)}/`" for d in dirs)
        return outcome(notice=Notice(
            f"not checked against a program: no .walk file declaring `model {model.value}` in {where}\n"
            f"help: put the program in one of these, or open it in the editor there", at))
    program = found.checked.program
    if program is None or not found.checked.ok:
        return outcome(notice=Notice(
            f"not checked against `{_shown(found.path, root)}`: the program has errors "
            "(`wgc compile` reports those and checks no placement)\n"
            "help: fix the program's errors; this placement is checked again as it changes", at),
            program=found.path)
    placement, problems = load_placement(path, program, text, open_tomls)
    reported = placement.warnings if placement is not None else tuple(problems)
    return outcome(tuple(reported), program=found.path)


def _no_model(model: Node | None) -> str:
    said = "its `model` is not a string" if model is not None else "it names no model"
    return (f"not checked against a program: {said}\n"
            'help: add `model = "NAME"`, NAME as the program\'s `model NAME` line; the program is looked '
            "for beside this file, in its parent directory and in the workspace's `models/`")


def _shown(path: Path, root: Path | None) -> str:
    if root is not None:
        try:
            return path.relative_to(root).as_posix() or "."
        except ValueError:
            pass
    return path.as_posix()
