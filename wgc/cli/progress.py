"""`wgc run`'s start-up on stderr: every rank's progress (runtime/worker/startup.py) as bars on a
terminal, as plain lines otherwise.

On a terminal (stderr a TTY, TERM not `dumb`), one bar per rank and phase, drawn with rich:

    rank 0  loading weights  ━━━━━━━━━━━━━━━━━━━━━━━━  2/2  0:00:03  snac loaded in 0.1 s (tiny preset, ...)
    rank 0  warming up       ━━━━━━━━━━━━━━━━━━━━━━━━  2/2  0:00:01  snac warmed up in 0.9 s
    rank 0  CUDA graphs      ━━━━━━━━━━━━━━━━━━━━━━━━ 12/12 0:00:05  llm.decode captured buckets 32,16,8,4,2,1 (1.2 s)

A line outside the count (a failed warm-up, an entry that runs eagerly, the rank's summary) is
printed above the bars. Anywhere else (a pipe, a file, CI) each line is written as it comes.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from wgc.runtime.api import StartupLine

TITLES = {"load": "loading weights", "warm": "warming up", "capture": "CUDA graphs"}


def on_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty() and os.environ.get("TERM", "") != "dumb"
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class StartupView:
    """Called with each StartupLine as it comes; `close()` once the ranks are ready (or failed)."""

    def __init__(self, stream: TextIO | None = None, bars: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.bars = on_terminal(self.stream) if bars is None else bars
        self._progress: Any = None  # rich.progress.Progress, started at the first line
        self._tasks: dict[tuple[int, str], Any] = {}  # (rank, phase) -> its bar

    def __call__(self, line: StartupLine) -> None:
        if not self.bars:
            if line.line:
                self._plain(line.line)
            return
        progress = self._live()
        if not line.phase:
            if line.line:
                progress.console.print(line.line, markup=False, highlight=False, soft_wrap=True)
            return
        key = (line.rank, line.phase)
        item = line.line.removeprefix(f"rank {line.rank}: ")
        if key not in self._tasks:
            self._tasks[key] = progress.add_task(TITLES.get(line.phase, line.phase), total=line.total or None,
                                                 rank=line.rank, item=item)
        fields = {"item": item} if item else {}
        progress.update(self._tasks[key], completed=line.done, total=line.total or None, **fields)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def _plain(self, text: str) -> None:
        try:
            self.stream.write(text + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # stderr gone: start-up goes on without it
            pass

    def _live(self) -> Any:
        if self._progress is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            from rich.table import Column

            console = Console(file=self.stream, force_terminal=True, highlight=False)
            fixed = {"no_wrap": True, "overflow": "crop"}
            self._progress = Progress(
                TextColumn("rank {task.fields[rank]}", table_column=Column(**fixed)),
                TextColumn("{task.description}", table_column=Column(width=15, **fixed)),
                BarColumn(bar_width=24, table_column=Column(**fixed)),
                MofNCompleteColumn(table_column=Column(**fixed)), TimeElapsedColumn(table_column=Column(**fixed)),
                TextColumn("{task.fields[item]}", table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis")),
                console=console, transient=False, expand=True)
            self._progress.start()
        return self._progress
