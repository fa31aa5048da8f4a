"""`wgc compile` as a library call: .walk + placement → verified plan bytes, or every diagnostic found."""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from wgc.check import check_source
from wgc.diag.diagnostic import Diagnostic
from wgc.lang.span import Span
from wgc.lower.pipeline import lower
from wgc.placement.load import load_placement
from wgc.plan.file import encode_plan
from wgc.plan.model import Plan


@dataclass
class Compiled:
    plan: Plan | None
    data: bytes | None
    diagnostics: list[Diagnostic]
    sources: dict[str, str] = field(default_factory=dict)  # every file read, for rendering diagnostics
    seconds: float = 0.0


def _read_all(paths: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for p in paths:
        try:
            out[p] = Path(p).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
    return out


def compile_program(source_path: str, source_text: str, placement_path: str,
                    skip_passes: Collection[str] = ()) -> Compiled:
    """Check, place, lower and verify. Never raises on bad input: problems come back as diagnostics.
    `skip_passes`: optional lowering passes to leave out (wgc/lower/pipeline.py)."""
    started = time.perf_counter()
    sources = {source_path: source_text}
    checked = check_source(source_text, source_path)
    errors = [d for d in checked.diagnostics if d.is_error]
    if errors or checked.program is None:
        return Compiled(None, None, list(checked.diagnostics), sources)
    placement, diags = load_placement(Path(placement_path), checked.program)
    files = placement.sources if placement is not None else tuple({d.span.file for d in diags})
    sources.update(_read_all(tuple(files) or (placement_path,)))
    if placement is None:
        return Compiled(None, None, list(checked.diagnostics) + diags, sources)
    plan = lower(checked, placement, source_path, placement_path, skip_passes)
    problems = verify_plan(plan)
    warnings = list(checked.diagnostics) + list(placement.warnings)  # the placement's warnings do not stop it
    if problems:
        return Compiled(plan, None, warnings + problems, sources)
    placement_text = "\0".join(sources.get(f, "") for f in placement.sources)
    data = encode_plan(plan, source_text, placement_text)
    return Compiled(plan, data, warnings, sources, time.perf_counter() - started)


def verify_plan(plan: Plan) -> list[Diagnostic]:
    """The verification pass: simulate every rank's schedule; each problem becomes a diagnostic."""
    from wgc.sim.simulator import verify

    out = []
    for problem in verify(plan):
        src = problem.src
        span = Span(plan.source_name, src.line, src.column, src.end_line, src.end_column) if src else Span(
            plan.source_name, 1, 1, 1, 2)
        out.append(Diagnostic("E042", problem.message, span))
    return out
