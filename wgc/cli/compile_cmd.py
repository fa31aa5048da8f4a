"""`wgc compile`: check a model and a placement, lower them and write a verified plan file."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from wgc.cli.sources import fail, read_source


@click.command()
@click.argument("source", type=click.Path(dir_okay=False))
@click.option("--placement", "-p", "placement", required=True, type=click.Path(dir_okay=False),
              help="Placement TOML file.")
@click.option("--output", "-o", "output", type=click.Path(dir_okay=False),
              help="Plan file to write (default: the model file with .plan).")
def compile(source: str, placement: str, output: str | None) -> None:
    """Compile a .walk program for a placement into a plan file."""
    from wgc import settings
    from wgc.compile import compile_program
    from wgc.diag.render import Renderer, summary

    text = read_source(source)
    if not Path(placement).is_file():
        fail(f"cannot read {placement}: no such file")
    result = compile_program(source, text, placement)
    if result.diagnostics:
        renderer = Renderer(result.sources, settings.color_enabled(sys.stderr.isatty()))
        click.echo(renderer.render_all(result.diagnostics), err=True)
        click.echo(summary(result.diagnostics), err=True)
    if result.data is None or result.plan is None:
        sys.exit(1)
    target = Path(output) if output else Path(source).with_suffix(".plan")
    try:
        target.write_bytes(result.data)
    except OSError as err:
        fail(f"cannot write {target}: {err.strerror or err}")
    instrs = sum(len(ws.instructions) for r in result.plan.ranks for ws in r.schedules)
    click.echo(f"compiled {result.plan.model} for {len(result.plan.ranks)} rank(s): {instrs} instructions, "
               f"{len(result.data):,} bytes -> {target} ({result.seconds * 1000:.0f} ms)", err=True)
