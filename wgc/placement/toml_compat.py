"""The TOML parser: the standard library's tomllib (Python 3.11+), else its backport `tomli`."""

from __future__ import annotations

try:
    from tomllib import TOMLDecodeError, loads
except ModuleNotFoundError:  # Python 3.10: needs `tomli; python_version < "3.11"`
    from tomli import TOMLDecodeError, loads  # type: ignore[no-redef]

__all__ = ["TOMLDecodeError", "loads"]
