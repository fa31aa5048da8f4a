"""Warnings for declarations nothing uses."""

from __future__ import annotations

from wgc.check.context import Context
from wgc.lang import ast


def warn_unused(ctx: Context) -> None:
    for c in ctx.program.of(ast.Component):
        if c.name not in ctx.usage.components:
            ctx.warn("W001", f"component `{c.name}` is never called", c.span, ("remove it, or call it from a walk",))
    for p in ctx.program.of(ast.Param):
        if p.name not in ctx.usage.params:
            ctx.warn("W002", f"param `{p.name}` is never read", p.span)
