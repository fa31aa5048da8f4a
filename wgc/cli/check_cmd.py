"""`wgc check`: diagnostics only. Exit 0 clean (warnings allowed), 1 on errors, 2 on usage or I/O errors.

The work is `run`, which needs no click. `wgc.cli.main` calls it straight for a plain command line
(`plain_arguments`); any other command line reaches the click command `check`, built from this
module only when the click group asks for it (the module's `__getattr__`), so that importing this
module for the plain path does not import click.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from wgc.cli.sources import read_source

FORMATS = ("text", "json")


def run(files: tuple[str, ...], fmt: str, werror: bool) -> int:
    """Check `files` ("-" is stdin), report on stdout (json) or stderr (text); the exit status."""
    from wgc import settings
    from wgc.check import check_source
    from wgc.diag.render import Renderer, summary, to_json

    sources = {path: read_source(path) for path in files}
    diags = []
    for path, text in sources.items():
        diags.extend(check_source(text, "<stdin>" if path == "-" else path).diagnostics)
    if fmt == "json":
        _echo(sys.stdout, to_json(diags))
    elif diags:
        named = {("<stdin>" if k == "-" else k): v for k, v in sources.items()}
        renderer = Renderer(named, settings.color_enabled(sys.stderr.isatty()))
        _echo(sys.stderr, renderer.render_all(diags))
        _echo(sys.stderr, summary(diags))
    return 1 if any(d.is_error or werror for d in diags) else 0


def plain_arguments(args: list[str]) -> tuple[tuple[str, ...], str, bool] | None:
    """(files, format, werror) when `args` (after `check`) are files and the two options only, with
    no directory among the files; None for anything click must parse or report (help, a misspelt
    option or format, `--`, no file, a directory: click names it as a usage error)."""
    files: list[str] = []
    fmt, werror = "text", False
    rest = iter(args)
    for arg in rest:
        if arg == "--werror":
            werror = True
        elif arg == "--format" or arg.startswith("--format="):
            value = next(rest, None) if arg == "--format" else arg.split("=", 1)[1]
            if value not in FORMATS:
                return None
            fmt = value
        elif arg == "-" or (arg and not arg.startswith("-") and not os.path.isdir(arg)):
            files.append(arg)
        else:
            return None
    return (tuple(files), fmt, werror) if files else None


def run_plain(files: tuple[str, ...], fmt: str, werror: bool) -> int:
    """`run` as the command line runs it without click, ending as click ends a command: Ctrl-C is
    "Aborted!" and status 1, a closed output pipe is status 1 without a traceback."""
    try:
        return run(files, fmt, werror)
    except KeyboardInterrupt:
        sys.stderr.write("\nAborted!\n")
        return 1
    except BrokenPipeError:
        # Python's documented way out: what is still buffered goes to devnull, not to the closed pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _echo(stream: Any, text: str) -> None:
    stream.write(text + "\n")
    stream.flush()


def _click_command() -> Any:
    import click

    @click.command()
    @click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, allow_dash=True))
    @click.option("--format", "fmt", type=click.Choice(list(FORMATS)), default="text", help="Output format.")
    @click.option("--werror", is_flag=True, help="Treat warnings as errors.")
    def check(files: tuple[str, ...], fmt: str, werror: bool) -> None:
        """Type-check .walk programs and report every problem found."""
        sys.exit(run(files, fmt, werror))

    return check


def __getattr__(name: str) -> Any:
    """`check`, the click command, made on first use (see the module docstring)."""
    if name == "check":
        command = _click_command()
        globals()["check"] = command
        return command
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
