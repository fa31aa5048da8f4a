"""The `wgc` command.

`wgc check` is what an editor or a pre-commit hook runs on every save, so a plain check command line
(files, `--format text|json`, `--werror`) runs without loading click at all (about 12 ms of a cold
start) and without the cycle collector: `check_cmd.plain_arguments` recognises it and
`check_cmd.run` does the work. Every other
command line, help and usage errors included, goes to the click group in `wgc.cli.group`, which
imports each subcommand's module only when that subcommand runs.
"""

from __future__ import annotations

import gc
import sys
from typing import Any


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["check"]:
        from wgc.cli import check_cmd

        plain = check_cmd.plain_arguments(args[1:])
        if plain is not None:
            # The process ends right after the check, so Python's cycle collector only costs time
            # here: off while the check runs (its collections during the imports find nothing), and
            # everything frozen before exit, which the interpreter's last collection then skips
            # (about 20 ms of CPU of a ~130 ms check, measured). The OS frees the memory at exit.
            gc.disable()
            status = check_cmd.run_plain(*plain)
            gc.freeze()
            sys.exit(status)
    from wgc.cli.group import cli

    cli()


def __getattr__(name: str) -> Any:
    """`wgc.cli.main.cli`, the click group, imported (with click) only when asked for."""
    if name == "cli":
        from wgc.cli.group import cli

        return cli
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
