"""A rank's start-up, the same in a worker process and in the in-process cluster: load, capture, then ready.

    rank 0: loading llm (wgc.models.orpheus.LanguageModel) ...
    rank 0: llm loaded in 0.4 s (tiny preset, random weights)
    rank 0: capturing llm.decode (walk decode) buckets 32,16,8,4,2,1 ...
    rank 0: llm.decode captured bucket 32
    ...
    rank 0: llm.decode captured buckets 32,16,8,4,2,1 (1.2 s)

Components are built in plan order and warmed up (Component.warm_up: the shapes they will see run
once, so no request pays a first-call cost); then every CaptureSpec of the rank runs in graph order, its
buckets largest first (smaller graphs reuse the largest one's memory pool). A capture that raises
is reported like a failed one (every bucket failed, the entry runs eagerly): start-up goes on, and
the requests it serves run eagerly. Only a component that cannot be constructed stops the rank.
The caller reports ready after `start_rank` returns, never before.

Each line may come with a Step, where the rank stands in its phase: `load` (components built, their
weights loaded), `warm` (warm-ups run), `capture` (CUDA graph buckets done, captured or failed), so
a terminal can draw a bar per phase (wgc/cli/progress.py). A line without a Step is one to keep in
view (a failed warm-up, an entry that runs eagerly); a Step with an empty line only moves the bar.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from wgc.runtime.components.base import Component
from wgc.runtime.engines.capture_report import CaptureReport, EntryCapture, one_line

from wgc.plan.model import CaptureSpec, ComponentSpec, Plan

Make = Callable[[ComponentSpec], Component]  # constructs one component of this rank (loads its weights)
PHASES = ("load", "warm", "capture")
_BUCKET = re.compile(r"\bbucket (\d+)\b")  # an engine's line about one bucket ("captured bucket 32")


@dataclass(frozen=True)
class Step:
    """`done` of `total` in `phase` (one of PHASES) on the rank that sent it."""

    phase: str
    done: int
    total: int


class Progress(Protocol):
    def __call__(self, line: str, step: Step | None = None) -> None: ...


@dataclass
class RankStart:
    components: dict[str, Component]
    captures: list[EntryCapture]
    load_seconds: float
    capture_seconds: float


def load_components(plan: Plan, rank: int, make: Make, progress: Progress) -> dict[str, Component]:
    out: dict[str, Component] = {}
    specs = [spec for spec in plan.components if rank in spec.ranks]
    for i, spec in enumerate(specs):
        progress(f"rank {rank}: loading {spec.name} ({spec.cls}) ...", Step("load", i, len(specs)))
        t0 = time.perf_counter()
        comp = out[spec.name] = make(spec)
        what = comp.describe()
        progress(f"rank {rank}: {spec.name} loaded in {time.perf_counter() - t0:.1f} s" + (f" ({what})" if what else ""),
                 Step("load", i + 1, len(specs)))
    return out


class _Buckets:
    """The capture phase's count: every bucket of every CaptureSpec of the rank, as each is done."""

    def __init__(self, total: int) -> None:
        self.done = 0
        self.total = total

    def step(self, more: int = 0) -> Step:
        self.done = min(self.total, self.done + more)
        return Step("capture", self.done, self.total)


def capture_one(comp: Component, spec: CaptureSpec, progress: Progress, count: _Buckets | None = None) -> EntryCapture:
    """Run one CaptureSpec's capture on its component: timed, never raising, one summary line."""
    name = f"{spec.component}.{spec.entry}"
    buckets = sorted(set(spec.buckets), reverse=True)
    count = count or _Buckets(len(buckets))
    start, seen = count.done, set[int]()
    prefix = f"rank {spec.rank}: {name}"
    progress(f"{prefix} (walk {spec.walk}): capturing buckets {','.join(str(b) for b in buckets)} ...", count.step())

    def say(line: str) -> None:
        m, more = _BUCKET.search(line), 0
        if m and int(m.group(1)) in buckets and int(m.group(1)) not in seen:
            seen.add(int(m.group(1)))
            more = 1
        progress(f"{prefix} {line}", count.step(more))

    t0 = time.perf_counter()
    try:
        report = comp.capture(spec.entry, spec.walk, buckets, say)
    except Exception as err:  # noqa: BLE001 - a capture that raises leaves the entry eager, reported
        why = one_line(err)
        report = CaptureReport(failed={b: why for b in buckets}, eager=f"capture raised {why}")
    report = report.timed(time.perf_counter() - t0)
    done = count.step(start + len(buckets) - count.done)  # every bucket of the entry is done now
    if report.state == "captured":
        progress(f"{prefix} {report.summary()}", done)
    else:  # kept in view: some of this entry's batches run eagerly or padded
        progress(f"{prefix} {report.summary()}")
        progress("", done)
    return EntryCapture(spec.graph_id, spec.component, spec.entry, spec.walk, list(spec.buckets), report)


def capture_graphs(plan: Plan, rank: int, components: dict[str, Component], progress: Progress) -> list[EntryCapture]:
    out = []
    specs = sorted((c for c in plan.captures if c.rank == rank), key=lambda c: c.graph_id)
    count = _Buckets(sum(len(set(c.buckets)) for c in specs if c.component in components))
    for spec in specs:
        comp = components.get(spec.component)
        if comp is None:  # a plan always places a captured component on its rank; say so rather than fail
            report = CaptureReport.eager_only(f"{spec.component} is not on rank {rank}")
            out.append(EntryCapture(spec.graph_id, spec.component, spec.entry, spec.walk, list(spec.buckets), report))
            continue
        out.append(capture_one(comp, spec, progress, count))
    return out


def warm_up(rank: int, components: dict[str, Component], progress: Progress) -> None:
    """Each component's warm-up (Component.warm_up), timed; a failure is reported, never fatal
    (the component still works, its first calls are only slower)."""
    total = len(components)
    for i, (name, comp) in enumerate(components.items()):
        t0 = time.perf_counter()
        lines: list[str] = []

        def say(line: str, name: str = name, lines: list[str] = lines, i: int = i) -> None:
            lines.append(line)
            progress(f"rank {rank}: {name} {line}", Step("warm", i, total))

        try:
            comp.warm_up(say)
        except Exception as err:  # noqa: BLE001 - a warm-up that fails costs speed, not correctness
            progress(f"rank {rank}: {name} warm-up failed ({one_line(err)}); its first calls run cold")
            progress("", Step("warm", i + 1, total))
            continue
        line = f"rank {rank}: {name} warmed up in {time.perf_counter() - t0:.1f} s" if lines else ""
        progress(line, Step("warm", i + 1, total))


def start_rank(plan: Plan, rank: int, make: Make, progress: Progress) -> RankStart:
    """Load every component of `rank`, warm each up, then capture every CUDA graph the plan lists for it."""
    t0 = time.perf_counter()
    components = load_components(plan, rank, make, progress)
    warm_up(rank, components, progress)
    t1 = time.perf_counter()
    captures = capture_graphs(plan, rank, components, progress)
    t2 = time.perf_counter()
    if captures:
        graphs = sum(len(c.report.captured) for c in captures)
        states = [c.report.state for c in captures]
        counts = ", ".join(f"{states.count(s)} {s}" for s in ("captured", "partial", "eager") if s in states)
        progress(f"rank {rank}: {graphs} CUDA graphs in {t2 - t1:.1f} s (entries: {counts}); ready")
    return RankStart(components, captures, t1 - t0, t2 - t1)
