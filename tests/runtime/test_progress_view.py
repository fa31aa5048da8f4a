"""`wgc run`'s start-up display (wgc/cli/progress.py): plain lines off a terminal, bars on one.

The end-to-end runs use the capture toy of test_startup.py (a CUDA placement whose toy components
"capture" on CPU), so loading, warm-up and CUDA-graph capture all report: once with stderr a pipe
(each line once, no escape codes), once with stderr a pseudo-terminal (bars, each phase complete).
"""

from __future__ import annotations

import io
import json
import os
import pty
import re
import subprocess
import sys
import threading
from pathlib import Path

from wgc.runtime.api import StartupLine

from tests.runtime.test_startup import toy_plan
from wgc.cli.progress import StartupView
from wgc.plan.file import encode_plan

ROOT = Path(__file__).resolve().parents[2]
LINES = [
    StartupLine(0, 0, "rank 0: loading llm (x.Llm) ...", "load", 0, 2),
    StartupLine(0, 0, "rank 0: llm loaded in 0.4 s", "load", 1, 2),
    StartupLine(0, 0, "rank 0: loading snac (x.Snac) ...", "load", 1, 2),
    StartupLine(0, 0, "rank 0: snac loaded in 0.1 s", "load", 2, 2),
    StartupLine(0, 0, "", "warm", 1, 2),
    StartupLine(0, 0, "rank 0: snac warmed up in 0.9 s", "warm", 2, 2),
    StartupLine(0, 0, "rank 0: llm.decode (walk decode): capturing buckets 4,2,1 ...", "capture", 0, 3),
    StartupLine(0, 0, "rank 0: llm.decode runs eagerly: capture raised ValueError: no", "", 0, 0),
    StartupLine(0, 0, "", "capture", 3, 3),
]
CONTROL = re.compile(r"(\x1b\[[0-9;?]*[A-Za-z]|\r|\n)")


def screen(raw: str) -> list[str]:
    """What a terminal shows after `raw`: the text, line feeds, carriage returns, cursor up, erase line."""
    rows, y, x = [""], 0, 0
    for token in CONTROL.split(raw):
        if token == "\n":
            y, x = y + 1, 0
            rows += [""] * (y + 1 - len(rows))
        elif token == "\r":
            x = 0
        elif token == "\x1b[1A":
            y = max(0, y - 1)
        elif token == "\x1b[2K":
            rows[y] = ""
        elif token and not token.startswith("\x1b"):
            rows[y] = rows[y][:x].ljust(x) + token + rows[y][x + len(token):]
            x += len(token)
    return [row.rstrip() for row in rows if row.strip()]


def test_off_a_terminal_each_line_is_written_once_as_it_came() -> None:
    out = io.StringIO()
    view = StartupView(out)  # a StringIO is no terminal
    assert not view.bars
    for line in LINES:
        view(line)
    view.close()
    assert out.getvalue().splitlines() == [e.line for e in LINES if e.line]


def test_on_a_terminal_each_rank_and_phase_has_a_bar_and_other_lines_stay_above() -> None:
    out = io.StringIO()
    view = StartupView(out, bars=True)
    for line in LINES:
        view(line)
    view.close()
    rows = screen(out.getvalue())
    assert len(rows) == 4, rows  # the line outside the count above, then one bar per phase
    assert rows[0] == "rank 0: llm.decode runs eagerly: capture raised ValueError: no"
    assert re.match(r"rank 0 loading weights +━{24} 2/2 .* snac loaded in 0\.1 s", rows[1])
    assert re.match(r"rank 0 warming up +━{24} 2/2 .* snac warmed up in", rows[2])
    assert re.match(r"rank 0 CUDA graphs +━{24} 3/3 .* llm\.decode \(walk de", rows[3])


def _captoy(tmp_path: Path) -> tuple[Path, list[str], dict[str, str]]:
    plan = tmp_path / "captoy.plan"
    plan.write_bytes(encode_plan(toy_plan(tmp_path), "", ""))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120", "TERM": "xterm"}  # workers import tests.runtime
    request = json.dumps({"params": {"max_tokens": 3}, "inputs": {"prompt": "abc"}})
    cmd = [sys.executable, "-c", "from wgc.cli.main import main; main()", "run", str(plan),
           "--allow-module-prefix", "tests", "--request", request, "-o", str(tmp_path / "out")]
    return plan, cmd, env


def test_wgc_run_writes_plain_start_up_lines_to_a_pipe(tmp_path: Path) -> None:
    _, cmd, env = _captoy(tmp_path)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stderr
    lines = done.stderr.splitlines()
    assert lines.count("rank 0: loading llm (tests.runtime.toys.Capturing) ...") == 1  # the CLI's, not the worker's too
    assert any(re.fullmatch(r"rank 0: llm\.decode captured buckets 4,2,1 \(0\.\d s\)", line) for line in lines)
    assert done.stdout.startswith(f"{tmp_path / 'out' / 'text.txt'}  text: ")


def test_wgc_run_draws_bars_on_a_terminal(tmp_path: Path) -> None:
    _, cmd, env = _captoy(tmp_path)
    leader, follower = pty.openpty()
    got = bytearray()

    def read() -> None:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: every process holding the terminal has closed it
                return
            if not chunk:
                return
            got.extend(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=follower, env=env)
        os.close(follower)
        stdout, _ = proc.communicate(timeout=60)
        reader.join(10)
    finally:
        proc.kill()
        os.close(leader)
    rows = screen(got.decode(errors="replace"))
    assert proc.returncode == 0, rows
    bars = [row for row in rows if "━" in row]
    for rank, phase, n in [(0, "loading weights", 1), (0, "warming up", 1), (0, "CUDA graphs", 6),
                           (1, "loading weights", 1), (1, "warming up", 1), (1, "CUDA graphs", 3)]:
        assert sum(bool(re.match(rf"rank {rank} {phase} +━+ {n}/{n} ", row)) for row in bars) == 1, (rank, phase, rows)
    assert len(bars) == 6, rows  # one bar per rank and phase, each drawn in place
    assert any(row.startswith("rank 1: mix.add runs eagerly: capture raised ValueError") for row in rows)
    assert stdout.decode().startswith(f"{tmp_path / 'out' / 'text.txt'}  text: ")
