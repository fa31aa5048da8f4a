"""`wgc fmt`: rewrite .walk files in canonical form; `--check` only reports (exit 1 if any would change)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from wgc.cli.sources import read_source


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--check", "check_only", is_flag=True, help="Exit 1 if any file is not formatted; change nothing.")
def fmt(files: tuple[str, ...], check_only: bool) -> None:
    """Format .walk programs (`-` reads stdin and writes stdout)."""
    from wgc import settings
    from wgc.diag.diagnostic import WgcError
    from wgc.diag.render import Renderer
    from wgc.fmt.printer import format_source

    unformatted = broken = 0
    for path in files:
        text = read_source(path)
        name = "<stdin>" if path == "-" else path
        try:
            pretty = format_source(text, name)
        except WgcError as err:
            renderer = Renderer({name: text}, settings.color_enabled(sys.stderr.isatty()))
            click.echo(renderer.render_all(err.diagnostics), err=True)
            broken += 1
            continue
        if path == "-":
            sys.stdout.write(pretty)
        elif pretty != text:
            unformatted += 1
            if check_only:
                click.echo(f"would reformat {path}", err=True)
            else:
                Path(path).write_text(pretty, encoding="utf-8")
                click.echo(f"reformatted {path}", err=True)
    if broken:
        sys.exit(1)
    sys.exit(1 if check_only and unformatted else 0)
