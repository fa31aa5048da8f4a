"""LOOP/ENDLOOP matching, written once for lowering (liveness), the simulator and the runtime.

A schedule's loops nest: every ENDLOOP closes the innermost open LOOP, with the same loop id.
"""

from __future__ import annotations

from collections.abc import Sequence

from wgc.plan.model import EndLoop, Instr, Loop


class LoopMismatch(Exception):
    """The loops of a schedule do not nest; `index` is the instruction that shows it."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


def loop_spans(code: Sequence[Instr]) -> list[tuple[int, int]]:
    """(LOOP index, its ENDLOOP index) for every loop, inner loops before the loops around them."""
    spans: list[tuple[int, int]] = []
    open_loops: list[tuple[int, int]] = []  # (loop id, index)
    for i, ins in enumerate(code):
        if isinstance(ins, Loop):
            open_loops.append((ins.loop_id, i))
        elif isinstance(ins, EndLoop):
            if not open_loops or open_loops[-1][0] != ins.loop_id:
                raise LoopMismatch(f"ENDLOOP {ins.loop_id} does not close the innermost open LOOP", i)
            spans.append((open_loops.pop()[1], i))
    if open_loops:
        loop_id, start = open_loops[-1]
        raise LoopMismatch(f"LOOP {loop_id} has no ENDLOOP", start)
    return spans


def loop_tails(code: Sequence[Instr]) -> dict[int, int]:
    """Index of each LOOP → index of its ENDLOOP."""
    return dict(loop_spans(code))
