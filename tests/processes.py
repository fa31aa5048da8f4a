"""Shared by the tests that start real processes (worker ranks, HTTP servers)."""

from __future__ import annotations

from pathlib import Path


def alive(pid: int) -> bool:
    """Running, or stopped: not gone and not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")
