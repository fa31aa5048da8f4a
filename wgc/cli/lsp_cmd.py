"""`wgc lsp`: the .walk language server over stdio, for editors (docs/lsp.md)."""

from __future__ import annotations

import click


@click.command()
@click.option("--stdio", is_flag=True, help="Talk over stdin/stdout (the default and only transport).")
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
              default="WARNING", show_default=True, help="What the server logs to stderr.")
def lsp(stdio: bool, log_level: str) -> None:
    """Run the .walk language server (diagnostics, hover, navigation, completion, formatting)."""
    # pygls is imported here, not at the top: every other command starts without it.
    from wgc.lsp.server import serve

    serve(log_level.upper())
