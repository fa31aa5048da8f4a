"""Loop iterations in step: an instance starting an iteration waits for the others in the same loop.

A round moves every ready instance to its next RUN and batches the RUNs of the same entry. In a
loop whose body has several RUNs (BAGEL's flow step: two timesteps, the two guidance flags, the
fused velocity, the guidance step), two requests whose iterations are out of phase would never
meet at the same RUN:
each round advances both by one RUN, so a request that arrives while another is mid-iteration
would run every velocity forward of its own, next to the other's, forever.

So, before a round's batches run: an instance at the first RUN of a counted loop's body with
several RUNs is held back (deferred to a later round) while another instance of the same loop on
this rank is mid-iteration. Those never wait, so they come back to the first RUN (or leave the
loop) and all then start their next iteration together: a late request joins the running ones'
batches from its first step on, having waited less than one iteration. Loops with one RUN (a
decode loop) cannot drift apart and are left alone, and so are dynamic loops (their speculation
runs an iteration ahead on purpose).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from wgc.runtime.worker.instance import Instance

from wgc.plan import model as m
from wgc.semantics.loops import loop_tails

Key = tuple[int, int]  # (id of the walk's code, pc of its LOOP)


class Lockstep:
    """The per-rank rule; `held` counts the instances it has held back."""

    def __init__(self, codes: Iterable[list[Any]] = ()) -> None:
        self._first_runs: dict[Key, int | None] = {}  # the body's first RUN, None when not in step
        self.held = 0
        # whether any loop of this rank's schedules goes in step: when none does, `hold` costs nothing
        self.active = any(self.first_run(code, head, tail) is not None
                          for code in codes for head, tail in loop_tails(code).items())

    def first_run(self, code: list[Any], head: int, tail: int) -> int | None:
        """pc of the first RUN of the loop from `head` to `tail` (its ENDLOOP), when the loop is counted and
        its body, nested loops included, has several RUNs."""
        key = (id(code), head)
        if key not in self._first_runs:
            loop = code[head]
            runs = [pc for pc in range(head + 1, tail) if isinstance(code[pc], m.Run)]
            in_step = isinstance(loop, m.Loop) and not loop.dynamic and len(runs) >= 2
            first = runs[0] if runs else None
            self._first_runs[key] = first if in_step else None
        return self._first_runs[key]

    def _starting(self, inst: Instance) -> Key | None:
        """The loop whose iteration `inst` is about to start (at its body's first RUN), if in step."""
        loop = inst.loops[-1]
        first = loop.step_run
        if first == -1:  # not looked up yet for this loop entry: once, then cached on the loop state
            first = loop.step_run = self.first_run(inst.code, loop.head, loop.tail)
        return (id(inst.code), loop.head) if first == inst.pc else None

    def hold(self, groups: Iterable[list[Instance]], everyone: Callable[[], Iterable[Instance]]) -> list[Instance]:
        """Take the instances to hold back out of `groups` (a round's batches, changed in place) and
        return them; `everyone()` gives every instance on the rank (asked only when one is starting)."""
        if not self.active:
            return []
        starting = {id(i): k for group in groups for i in group if i.loops and (k := self._starting(i)) is not None}
        if not starting:
            return []
        keys = set(starting.values())
        busy = set()
        for inst in everyone():
            if not inst.alive or id(inst) in starting:
                continue
            for loop in inst.loops:
                key = (id(inst.code), loop.head)
                if key in keys and self.first_run(inst.code, loop.head, loop.tail) != inst.pc:
                    busy.add(key)
        if not busy:
            return []
        held = []
        for group in groups:
            kept = [i for i in group if starting.get(id(i)) not in busy]
            held += [i for i in group if starting.get(id(i)) in busy]
            group[:] = kept
        self.held += len(held)
        return held
