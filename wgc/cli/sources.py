"""Reading input files for the CLI: a problem is one line on stderr and exit status 2."""

from __future__ import annotations

import sys
from pathlib import Path

EXIT_USAGE = 2


def read_source(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        fail(f"cannot read {path}: no such file")
    except IsADirectoryError:
        fail(f"cannot read {path}: it is a directory")
    except UnicodeDecodeError as err:
        fail(f"cannot read {path}: not UTF-8 text (byte {err.start})")
    except OSError as err:
        fail(f"cannot read {path}: {err.strerror or err}")
    raise AssertionError("unreachable")


def fail(message: str) -> None:
    sys.stderr.write(f"wgc: {message}\n")
    sys.stderr.flush()
    sys.exit(EXIT_USAGE)
