"""`wgc graph`: draw a program (and its placement) as DOT, Mermaid or SVG, chosen by the output suffix.

Exit 0 drawn, 1 when the program or the placement has errors, 2 on usage or I/O errors
(an unknown suffix, a missing file, SVG without Graphviz).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from wgc.cli.sources import fail, read_source

if TYPE_CHECKING:
    from wgc.diag.diagnostic import Diagnostic


@click.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--placement", "-p", "placement", type=click.Path(dir_okay=False),
              help="Placement TOML file: colour call sites by rank.")
@click.option("--output", "-o", "output", required=True, type=click.Path(dir_okay=False),
              help="File to write: .dot/.gv (Graphviz), .mmd (Mermaid) or .svg (needs Graphviz's `dot`).")
def graph(model: str, placement: str | None, output: str) -> None:
    """Draw a .walk program: walks, loops, parallel branches, streams, flows."""
    from wgc.check import check_source
    from wgc.graph import FORMATS, GraphvizError, build_graph, render
    from wgc.placement.load import load_placement

    suffix = Path(output).suffix.lower()
    if suffix not in FORMATS:
        fail(f"cannot write {output}: unknown format {suffix or '(no suffix)'!r}; use one of {', '.join(FORMATS)}")
    text = read_source(model)
    if placement is not None and not Path(placement).is_file():
        fail(f"cannot read {placement}: no such file")
    checked = check_source(text, model)
    sources = {model: text}
    diags = list(checked.diagnostics)
    loaded = None
    if checked.ok and checked.program is not None and placement is not None:
        loaded, placement_diags = load_placement(Path(placement), checked.program)
        placement_diags = [*placement_diags, *(loaded.warnings if loaded is not None else ())]  # W codes too
        diags.extend(placement_diags)
        sources.update(_read_all({d.span.file for d in placement_diags} - set(sources)))
    _report(diags, sources)
    if checked.program is None or checked.symbols is None or any(d.is_error for d in diags):
        sys.exit(1)
    drawing = build_graph(checked.program, checked.symbols, loaded)
    try:
        data = render(drawing, suffix)
    except GraphvizError as err:
        fail(str(err))
    try:
        Path(output).write_bytes(data)
    except OSError as err:
        fail(f"cannot write {output}: {err.strerror or err}")
    nodes, edges = sum(1 for _ in drawing.nodes()), len(drawing.edges)
    click.echo(f"drew {drawing.name}: {nodes} nodes, {edges} edges -> {output}", err=True)


def _report(diags: list[Diagnostic], sources: dict[str, str]) -> None:
    if not diags:
        return
    from wgc import settings
    from wgc.diag.render import Renderer, summary

    renderer = Renderer(sources, settings.color_enabled(sys.stderr.isatty()))
    click.echo(renderer.render_all(diags), err=True)
    click.echo(summary(diags), err=True)


def _read_all(paths: set[str]) -> dict[str, str]:
    out = {}
    for p in sorted(paths):
        try:
            out[p] = Path(p).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
    return out
