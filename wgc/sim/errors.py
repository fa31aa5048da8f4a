"""The two ways a simulated request fails, and where in a plan a failure happened."""

from __future__ import annotations

from dataclasses import dataclass

from wgc.plan.model import Src


@dataclass(frozen=True)
class Location:
    """An instruction of one rank's schedule for one walk (index None: the end of the schedule)."""

    source_name: str
    rank: int
    walk: str
    index: int | None = None
    kind: str = ""
    src: Src | None = None

    def short(self) -> str:
        if self.index is None:
            return f"rank {self.rank}, walk `{self.walk}`, end of schedule"
        return f"rank {self.rank}, walk `{self.walk}`, instruction {self.index} ({self.kind})"

    def __str__(self) -> str:
        if self.src is None:
            return self.short()
        return f"{self.short()} at {self.source_name}:{self.src.line}:{self.src.column}"


class RequestError(Exception):
    """The request cannot complete, whatever the plan: no flow transition holds, a stream read past its end."""


class SimulationError(Exception):
    """The plan is wrong: a deadlock, an unmatched or misordered transfer, a use after free, an undefined value.

    `at` is the instruction it names (rank, walk, index and kind, source position); None for a plan-wide problem.
    """

    def __init__(self, detail: str, at: Location | None = None) -> None:
        super().__init__(f"{at}: {detail}" if at is not None else detail)
        self.detail = detail
        self.at = at
