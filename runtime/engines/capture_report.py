"""What capturing CUDA graphs for one component entry gave: captured buckets, failed ones, or why eager.

Torch-free, and msgspec structs: a worker sends its reports to the coordinator in its Ready message,
and `/health` shows them per rank. A component's `capture` hook returns a CaptureReport; the start-up
code (runtime/worker/startup.py) times it and wraps it, with the CaptureSpec it answers, in an
EntryCapture.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import Struct

State = Literal["captured", "partial", "eager"]


def one_line(err: BaseException) -> str:
    """`Type: first line of the message`, for a report that must fit on one line."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


class CaptureReport(Struct, frozen=True):
    captured: list[int] = []  # buckets whose graph replays, largest first
    failed: dict[int, str] = {}  # bucket → one-line reason its capture failed (those batches never replay it)
    eager: str = ""  # why the entry runs eagerly; "" while at least one bucket is captured
    seconds: float = 0.0  # wall time the capture took

    @staticmethod
    def eager_only(reason: str) -> CaptureReport:
        return CaptureReport(eager=reason)

    @property
    def state(self) -> State:
        if not self.captured:
            return "eager"
        return "partial" if self.failed else "captured"

    def timed(self, seconds: float) -> CaptureReport:
        return msgspec.structs.replace(self, seconds=seconds)

    def summary(self) -> str:
        """One line: `captured buckets 32,16,8 (1.2 s)`, `...; bucket 4 failed: why`, or `runs eagerly: why`."""
        failed = "; ".join(f"bucket {b} failed: {why}" for b, why in sorted(self.failed.items(), reverse=True))
        if not self.captured:
            why = self.eager or "nothing captured"
            said = all(reason in why for reason in self.failed.values())  # one reason for all, said once
            return f"runs eagerly: {why}" + (f" ({failed})" if failed and not said else "")
        text = f"captured buckets {','.join(str(b) for b in self.captured)} ({self.seconds:.1f} s)"
        return text + (f"; {failed}, padded to a larger bucket or eager" if failed else "")


class EntryCapture(Struct, frozen=True):
    """One CaptureSpec of the plan, on its rank: which graph, and what its capture gave."""

    graph_id: int
    component: str
    entry: str
    walk: str
    buckets: list[int]  # the plan's buckets for it
    report: CaptureReport

    @property
    def name(self) -> str:
        return f"{self.component}.{self.entry}"

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON values, as `/health` shows them (failed buckets keyed by their number as a string)."""
        r = self.report
        return {"component": self.component, "entry": self.entry, "walk": self.walk, "state": r.state,
                "buckets": list(self.buckets), "captured": list(r.captured),
                "failed": {str(b): why for b, why in sorted(r.failed.items())}, "eager": r.eager,
                "seconds": round(r.seconds, 3)}
