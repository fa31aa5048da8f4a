"""The checker: a parsed program → diagnostics (and the symbol tables lowering builds on).

Passes run in order over one shared Context; each reports everything it finds
rather than stopping at the first problem. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from wgc.check.context import Context, Symbols
from wgc.check.declarations import check_declarations
from wgc.check.flows import check_flows
from wgc.check.streams import bind_consumers, check_endpoints
from wgc.check.usage import warn_unused
from wgc.check.walks import WalkChecker
from wgc.diag.diagnostic import Diagnostic, sort_key
from wgc.lang import ast
from wgc.lang.parser import parse


@dataclass(frozen=True)
class CheckResult:
    program: ast.Program | None
    symbols: Symbols | None
    diagnostics: tuple[Diagnostic, ...]

    @property
    def ok(self) -> bool:
        return not any(d.is_error for d in self.diagnostics)


def _check_walks(ctx: Context) -> None:
    for info in ctx.symbols.walks.values():
        WalkChecker(ctx, info).run()


PASSES = (check_declarations, bind_consumers, _check_walks, check_endpoints, check_flows, warn_unused)


def check_program(program: ast.Program) -> CheckResult:
    ctx = Context(program)
    try:
        for run_pass in PASSES:
            run_pass(ctx)
    except RecursionError:
        # Bracket depth is limited before parsing; this catches long operator chains.
        ctx.error("E002", "an expression is nested too deeply to check", program.span,
                  ("split it into named values",))
    diagnostics = tuple(sorted(_dedupe(ctx.diagnostics), key=sort_key))
    return CheckResult(program, ctx.symbols, diagnostics)


def check_source(source: str, file: str = "<input>") -> CheckResult:
    parsed = parse(source, file)
    if parsed.program is None:
        return CheckResult(None, None, parsed.diagnostics)
    return check_program(parsed.program)


def _dedupe(diags: list[Diagnostic]) -> list[Diagnostic]:
    seen: set[tuple] = set()
    out = []
    for d in diags:
        key = (d.code, d.message, d.span)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out
