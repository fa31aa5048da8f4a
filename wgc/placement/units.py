"""Byte sizes: parsing `"80GiB"`, printing `26.08 GiB`, and the size of each element dtype."""

from __future__ import annotations

import re
from fractions import Fraction

# Decimal (GB) and binary (GiB) units, as printed on data sheets and by nvidia-smi respectively.
SIZE_UNITS: dict[str, int] = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
                              "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
# Bytes per element of each dtype a `.walk` program may name (attributes and tensor types).
DTYPE_BYTES: dict[str, int] = {"bf16": 2, "f16": 2, "f32": 4, "f64": 8, "i64": 8, "i32": 4, "i8": 1, "u8": 1, "bool": 1,
                               "fp8": 1}
DEFAULT_DTYPE = "bf16"

_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*")


def parse_size(text: str) -> tuple[int | None, str]:
    """`"80GiB"` → (85899345920, ""); on failure (None, reason)."""
    m = _SIZE.fullmatch(text)
    if m is None:
        return None, "a size is a number and a unit, such as \"80GiB\" or \"512MiB\""
    number, unit = m.groups()
    if unit == "":
        return None, f"the size \"{text}\" has no unit; write \"{number}GiB\", \"{number}GB\" or \"{number}B\""
    factor = SIZE_UNITS.get(unit)
    if factor is None:
        known = ", ".join(SIZE_UNITS)
        return None, f"unknown size unit `{unit}` (known: {known})"
    return int(Fraction(number) * factor), ""  # exact: no float overflow for a number of any length


def fmt_bytes(n: float) -> str:
    """Binary units with two decimals: 28000000000 → `26.08 GiB`."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.0f} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return f"{value:.2f} TiB"


def fmt_count(n: int) -> str:
    """Parameter counts as `.walk` writes them: 14000000000 → `14B`, 400000000 → `400M`."""
    for suffix, factor in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= factor:
            return f"{n / factor:.4g}{suffix}"
    return str(n)
