"""The `wgc` command. Subcommands import their machinery lazily so `wgc check` stays fast."""

from __future__ import annotations

import click

from wgc import __version__
from wgc.cli.check_cmd import check
from wgc.cli.compile_cmd import compile
from wgc.cli.fmt_cmd import fmt
from wgc.cli.graph_cmd import graph
from wgc.cli.inspect_cmd import inspect
from wgc.cli.lsp_cmd import lsp
from wgc.cli.run_cmd import run


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="wgc")
def cli() -> None:
    """wgc, the Walk Graph Compiler: check, compile and serve composite multimodal models."""


cli.add_command(check)
cli.add_command(fmt)
cli.add_command(compile)
cli.add_command(inspect)
cli.add_command(run)
cli.add_command(graph)
cli.add_command(lsp)


def main() -> None:
    cli()
