"""matplotlib for the benches' PNG plots, written once: the non-interactive backend (benches run
without a display), or None with one line saying why when matplotlib is missing, so a bench still
prints its tables."""

from __future__ import annotations

from types import ModuleType


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
