"""matplotlib for the benches' PNG plots, written once: the non-interactive backend (benches run
without a display), or None with one line saying why when matplotlib is missing, so a bench still
prints its tables; and a bench's report written out (its table printed and kept as bench/out/STEM.md,
its plot as STEM.png)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

OUT = Path(__file__).resolve().parent / "out"


def pyplot() -> ModuleType | None:
    """matplotlib.pyplot on the Agg backend, or None (after saying so) when it is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot (pip install -e '.[bench]')")
        return None
    return plt


def write_report(stem: str, text: str, plot: Callable[[Path], None]) -> None:
    """Print `text`, keep it as bench/out/STEM.md, draw STEM.png with `plot(path)`, and say where both are."""
    print(text)
    OUT.mkdir(parents=True, exist_ok=True)
    table, png = OUT / f"{stem}.md", OUT / f"{stem}.png"  # not with_suffix: a stem may hold a dot ("0.7m")
    table.write_text(text + "\n", encoding="utf-8")
    plot(png)
    print(f"\ntable: {table}; plot: {png}")
