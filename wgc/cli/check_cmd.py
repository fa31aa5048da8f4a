"""`wgc check`: diagnostics only. Exit 0 clean (warnings allowed), 1 on errors, 2 on usage or I/O errors."""

from __future__ import annotations

import sys

import click

from wgc.cli.sources import read_source


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", help="Output format.")
@click.option("--werror", is_flag=True, help="Treat warnings as errors.")
def check(files: tuple[str, ...], fmt: str, werror: bool) -> None:
    """Type-check .walk programs and report every problem found."""
    from wgc import settings
    from wgc.check import check_source
    from wgc.diag.render import Renderer, summary, to_json

    sources = {path: read_source(path) for path in files}
    diags = []
    for path, text in sources.items():
        diags.extend(check_source(text, "<stdin>" if path == "-" else path).diagnostics)
    if fmt == "json":
        click.echo(to_json(diags))
    elif diags:
        named = {("<stdin>" if k == "-" else k): v for k, v in sources.items()}
        renderer = Renderer(named, settings.color_enabled(sys.stderr.isatty()))
        click.echo(renderer.render_all(diags), err=True)
        click.echo(summary(diags), err=True)
    failed = any(d.is_error or werror for d in diags)
    sys.exit(1 if failed else 0)
