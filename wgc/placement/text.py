"""A placement checked from text in memory (the copy an editor holds), not from the file on disk.

`wgc lsp` checks the document as it is being typed, which is not yet saved. The file's path
still matters: spans carry it and `extends` bases are resolved relative to it and read from disk,
as `load_placement` does. These two functions follow `load_placement` step for step with the
top file's text given rather than read; tests/lsp/test_placement_text.py holds them to the same
diagnostics as `load_placement` on every shipped placement and every error example.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from tomllib import TOMLDecodeError, loads

from wgc.diag.diagnostic import Diagnostic, sort_key
from wgc.lang import ast
from wgc.lang.span import point
from wgc.placement.document import Node, _check_extends, _load, _syntax_error, _wrap, merge
from wgc.placement.facts import program_facts
from wgc.placement.fields import Ctx
from wgc.placement.load import assemble
from wgc.placement.locate import Located, locate
from wgc.placement.memory import estimate, fit_diagnostics
from wgc.placement.schema import Placement


def read_placement_text(path: Path, text: str) -> tuple[Node | None, tuple[str, ...], list[Diagnostic]]:
    """`load_with_bases` for a top file whose text is `text`: the merged tree, the files read (the
    base first, the top file last) and the errors. Never raises on any text."""
    file = str(path)
    start = point(file, 1, 1)
    try:
        data = loads(text)
    except TOMLDecodeError as err:
        return None, (), [_syntax_error(str(err), text, file)]
    except RecursionError:
        return None, (), [Diagnostic("P001", "the TOML is nested too deeply", start)]
    doc = _wrap(data, (), locate(text, file), Located(start, start))
    diags: list[Diagnostic] = []
    sources: list[str] = []
    ext = doc.get("extends")
    own = Node({k: v for k, v in doc.children().items() if k != "extends"}, doc.key, doc.span)
    problem = _check_extends(ext, path, ()) if ext is not None else None
    diags.extend([problem] if problem else [])
    base = None
    if ext is not None and problem is None:
        base_file = os.path.normpath(str(Path(file).parent / str(ext.value)))
        base = _load(path.parent / str(ext.value), base_file, ext, ((path, ext),), diags, sources)
    sources.append(file)
    return (merge(base, own) if base is not None else own), tuple(sources), diags


def load_placement_text(path: Path, text: str, program: ast.Program) -> tuple[Placement | None, list[Diagnostic]]:
    """`load_placement(path, program)` with the top file's text `text`: the same placement, or None
    and the same diagnostics. Never raises on any text."""
    tree, sources, diags = read_placement_text(path, text)
    if tree is None or diags:
        return None, sorted(diags, key=sort_key)
    facts = program_facts(program)
    ctx = Ctx(diags)
    placement = assemble(tree, facts, str(path), sources, ctx)
    if placement is not None and not any(d.is_error for d in ctx.diagnostics):
        ctx.diagnostics.extend(fit_diagnostics(estimate(placement, facts), placement, facts))
    found = sorted(ctx.diagnostics, key=sort_key)
    if placement is None or any(d.is_error for d in found):
        return None, found
    return dataclasses.replace(placement, warnings=tuple(found)), []
