"""The public entry: read a placement file (and its bases), check it against a program."""

from __future__ import annotations

from pathlib import Path

from wgc.diag.diagnostic import Diagnostic, sort_key
from wgc.lang import ast
from wgc.placement.build import build_placement
from wgc.placement.extends import load_with_bases
from wgc.placement.facts import program_facts
from wgc.placement.fields import Ctx
from wgc.placement.fit import fit_diagnostics
from wgc.placement.memory import estimate
from wgc.placement.schema import Placement


def load_placement(path: Path, program: ast.Program) -> tuple[Placement | None, list[Diagnostic]]:
    """The placement in `path` checked against `program`, or None and every error found.

    Never raises on any input. The memory fit is checked once everything else is valid
    (a partial placement would give a misleading estimate).
    """
    tree, sources, diags = load_with_bases(Path(path))
    if tree is None or diags:  # a broken file or `extends` chain: anything further would be a cascade
        return None, sorted(diags, key=sort_key)
    facts = program_facts(program)
    ctx = Ctx(diags)
    placement = build_placement(tree, facts, str(path), sources, ctx)
    if placement is not None and not ctx.diagnostics:
        ctx.diagnostics.extend(fit_diagnostics(estimate(placement, facts), placement, facts))
    errors = sorted(ctx.diagnostics, key=sort_key)
    return (placement if not errors else None), errors
