"""The click group behind `wgc`: each subcommand's module is imported only when that subcommand runs
(or help lists them all), and each imports its machinery lazily too."""

from __future__ import annotations

import importlib

import click

from wgc import __version__

# name → module defining the click command of that name, in the order `wgc --help` lists them
_COMMANDS = {
    "check": "wgc.cli.check_cmd",
    "fmt": "wgc.cli.fmt_cmd",
    "compile": "wgc.cli.compile_cmd",
    "inspect": "wgc.cli.inspect_cmd",
    "run": "wgc.cli.run_cmd",
    "graph": "wgc.cli.graph_cmd",
    "lsp": "wgc.cli.lsp_cmd",
    "convert": "wgc.cli.convert_cmd",
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(_COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        module = _COMMANDS.get(name)
        if module is None:
            return None
        command = getattr(importlib.import_module(module), name)
        assert isinstance(command, click.Command), f"{module}.{name} is not a click command"
        return command


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="wgc")
def cli() -> None:
    """wgc, the Walk Graph Compiler: check, compile and serve composite multimodal models."""
