"""`wgc inspect`: a plan's per-rank schedules, memory, captures and settings, as text or JSON."""

from __future__ import annotations

import sys

import click

from wgc.cli.sources import EXIT_USAGE


@click.command()
@click.argument("plan_file", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", help="Output format.")
def inspect(plan_file: str, fmt: str) -> None:
    """Print what a compiled plan will do on every rank."""
    import msgspec

    from wgc.plan.file import PlanFileError, load_plan
    from wgc.plan.text import plan_text

    try:
        header, plan = load_plan(plan_file)
    except PlanFileError as err:
        click.echo(f"wgc: {err}", err=True)
        sys.exit(EXIT_USAGE if err.kind == "unreadable" else 1)
    if fmt == "json":
        click.echo(msgspec.json.format(msgspec.json.encode({"header": header, "plan": plan}).decode(), indent=2))
    else:
        click.echo(plan_text(plan), nl=False)
