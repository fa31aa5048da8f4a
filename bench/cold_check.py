"""Cold `wgc check` processes before and after a change: interleaved, quiet and under a CPU load.

The cold check is a goal (under 300 ms, start to exit) that the machine's load moves by more than
most changes do, so the two sides are timed in the same run, alternating process by process: the
"before" side is `wgc/` from a git revision (`git archive REV wgc`, unpacked in a temporary folder
and put first on `sys.path`), the "after" side is the working tree. Each side runs twice over:
with Python's bytecode cache filled (every run after the first, as after an install) and with
wgc's own modules compiled from source (how a run goes after an edit, or where
PYTHONDONTWRITEBYTECODE is set): each mode has a private PYTHONPYCACHEPREFIX, and the from-source
one holds only the interpreter's and the installed libraries' bytecode. Then all of it again while
`load_workers` busy-looping processes, started here and killed here, keep the CPUs occupied.
"""

from __future__ import annotations

import contextlib
import io
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL_MS = 300.0
# One launcher for both sides, so that neither pays a different start: the tree goes first on sys.path.
LAUNCH = ("import sys; tree = sys.argv.pop(1); sys.path.insert(0, tree); sys.argv[0] = 'wgc'; "
          "from wgc.cli.main import main; main()")
_WHERE = "import sys; sys.path.insert(0, sys.argv[1]); import wgc.lang.parser as p; print(p.__file__)"
MODES = ("bytecode cached", "from source")
LOADS = ("quiet", "loaded")


@dataclass
class ColdRow:
    load: str
    mode: str
    samples: dict[str, list[float]] = field(default_factory=dict)  # side -> wall ms
    cpu: dict[str, list[float]] = field(default_factory=dict)  # side -> user + system CPU ms

    def median(self, side: str) -> float:
        return statistics.median(self.samples[side])

    def cpu_median(self, side: str) -> float:
        return statistics.median(self.cpu[side])

    def ratio(self) -> float:
        return self.median("after") / self.median("before")


def unpack_revision(rev: str, into: Path) -> Path:
    """`wgc/` as it is at `rev`, unpacked under `into`; the folder to put on sys.path."""
    archive = subprocess.run(["git", "archive", rev, "wgc"], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


@contextlib.contextmanager
def cpu_load(workers: int) -> Iterator[None]:
    """`workers` processes spinning in a loop while the block runs; each killed (by its own handle) after."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(workers)]
    try:
        time.sleep(0.5)  # let the scheduler spread them before the first timed process
        yield
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait(timeout=10)


def _library_pycs(prefix: str) -> set[Path]:
    return {Path(prefix + str(Path(p).resolve())) for p in {sys.prefix, sys.base_prefix}}


def _forget_wgc(prefix: str) -> None:
    """Delete every cached module under `prefix` but the interpreter's and the installed libraries'."""
    libraries = _library_pycs(prefix)
    for pyc in Path(prefix).rglob("*.pyc"):
        if not any(pyc.is_relative_to(lib) for lib in libraries):
            pyc.unlink()


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall ms, CPU ms) of one process. The CPU time (user + system, from the children's rusage:
    the load's processes are reaped only after their block) says how much work the process did
    whatever the load; the wall time is what a user waits."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)
    elapsed = (time.perf_counter() - start) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr.decode(errors='replace')}")
    return elapsed, (after.ru_utime - used.ru_utime + after.ru_stime - used.ru_stime) * 1000


def measure(model: str, baseline: str, runs: int,
            load_workers: int) -> tuple[list[ColdRow], dict[str, tuple[float, float]]]:
    """The before/after rows for `wgc check MODEL`, and per load the `python -c pass` floor:
    (median wall ms, median CPU ms)."""
    base = os.environ.copy()
    base.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory(prefix="wgc-cold-") as tmp:
        trees = {"before": str(unpack_revision(baseline, Path(tmp) / "before")), "after": str(ROOT)}
        envs = {"bytecode cached": {**base, "PYTHONPYCACHEPREFIX": f"{tmp}/pyc-cached"},
                "from source": {**base, "PYTHONPYCACHEPREFIX": f"{tmp}/pyc-source"}}
        for side, tree in trees.items():  # each side imports its own wgc, not the installed one
            where = subprocess.run([sys.executable, "-c", _WHERE, tree], capture_output=True, text=True,
                                   env=envs["bytecode cached"], check=True).stdout.strip()
            assert where.startswith(tree), f"the {side} side imported {where}, not {tree}"
        for env in envs.values():  # fill each cache once (the from-source one keeps only the libraries')
            for tree in trees.values():
                _run([sys.executable, "-c", LAUNCH, tree, "check", model], env)
        _forget_wgc(envs["from source"]["PYTHONPYCACHEPREFIX"])
        envs["from source"]["PYTHONDONTWRITEBYTECODE"] = "1"
        rows, floors = [], {}
        for load in LOADS:
            with cpu_load(load_workers) if load == "loaded" else contextlib.nullcontext():
                load_rows, floors[load] = _rounds(model, trees, envs, runs, load)
            rows += load_rows
        return rows, floors


def _rounds(model: str, trees: dict[str, str], envs: dict[str, dict[str, str]], runs: int,
            load: str) -> tuple[list[ColdRow], tuple[float, float]]:
    rows = {mode: ColdRow(load, mode, {side: [] for side in trees}, {side: [] for side in trees}) for mode in MODES}
    cells = [(mode, side) for mode in MODES for side in trees]
    floor: list[tuple[float, float]] = []
    for i in range(runs + 1):  # round 0 only settles the file cache (and the load)
        order = cells[i % len(cells):] + cells[:i % len(cells)]
        if i % 2:
            order.reverse()
        floor_ms = _run([sys.executable, "-c", "pass"], envs["bytecode cached"])
        for mode, side in order:
            if mode == "from source":
                _forget_wgc(envs[mode]["PYTHONPYCACHEPREFIX"])
            ms, cpu_ms = _run([sys.executable, "-c", LAUNCH, trees[side], "check", model], envs[mode])
            if i:
                rows[mode].samples[side].append(ms)
                rows[mode].cpu[side].append(cpu_ms)
        if i:
            floor.append(floor_ms)
    return list(rows.values()), (statistics.median(f[0] for f in floor), statistics.median(f[1] for f in floor))


def markdown(rows: list[ColdRow], floors: dict[str, tuple[float, float]], baseline: str, model: str,
             workers: int) -> str:
    out = [f"## Cold `wgc check {model}`: before ({baseline}) and after, interleaved", "",
           f"Loaded: {workers} busy-looping processes beside the timed ones. Median ms of fresh processes: "
           "wall time, and CPU time (user + system) of the same processes.", "",
           "| load | wgc bytecode | `python -c pass` | before | after | after / before | CPU: `pass` | before "
           "| after | after < 300 ms |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for row in rows:
        met = "met" if row.median("after") < GOAL_MS else "MISSED"
        wall, cpu = floors[row.load]
        out.append(f"| {row.load} | {row.mode} | {wall:.0f} | {row.median('before'):.0f} "
                   f"| {row.median('after'):.0f} | {row.ratio():.2f} | {cpu:.0f} | {row.cpu_median('before'):.0f} "
                   f"| {row.cpu_median('after'):.0f} | {met} |")
    return "\n".join(out)


def plot(rows: list[ColdRow], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.2))
    labels = [f"{r.load}\n{r.mode}" for r in rows]
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r.median("before") for r in rows], 0.4, label="before", color="#8c8c8c")
    ax.bar([x + 0.2 for x in xs], [r.median("after") for r in rows], 0.4, label="after", color="#4c72b0")
    ax.axhline(GOAL_MS, color="#c44e52", linestyle="--", label=f"goal {GOAL_MS:.0f} ms")
    ax.set_xticks(list(xs), labels)
    ax.set_ylabel("ms (median wall time of a fresh process)")
    ax.set_title("Cold `wgc check`")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
