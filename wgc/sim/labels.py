"""Which write each rank's copy of a cache label has seen: verification catches a label never shipped.

Every write to a label (a kv call, or a fork into it) is one logical write,
identified by where it happens (walk instance, source position, lane, loop
iterations) so that the ranks of a tensor-parallel group, running the same
call, make the same write. Each label's writes form one chain; a rank's copy
points into it. A rank may make a new write only from the chain's tip, and
repeat a write its group already made only from the position before it;
anything else means it computes on a stale copy (its KV was never shipped).
KV_SEND ships a position with the state, KV_RECV installs it.
"""

from __future__ import annotations

from collections.abc import Hashable

from wgc.semantics.plan_index import Location

Label = tuple[str, str]  # (component, label)
WriteId = Hashable
EMPTY = -1  # the position of a label nobody wrote yet


class LabelLedger:
    def __init__(self) -> None:
        self.chains: dict[Label, list[WriteId]] = {}
        self.positions: dict[tuple[Label, WriteId], int] = {}
        self.where: dict[tuple[Label, int], tuple[int, Location]] = {}  # (label, position) → (rank, instruction)
        self.copied_from: dict[tuple[Label, WriteId], int] = {}  # a fork's write → its source's position
        self.have: dict[tuple[int, Label], int] = {}

    def position(self, rank: int, label: Label) -> int:
        return self.have.get((rank, label), EMPTY)

    def install(self, rank: int, label: Label, position: int) -> None:
        self.have[(rank, label)] = position

    def write(self, rank: int, label: Label, write: WriteId, at: Location) -> str | None:
        """A kv call on `label`; returns a problem when the rank's copy is stale."""
        problem = self._check(rank, label, write, self.position(rank, label))
        self._record(rank, label, write, at)
        return problem

    def fork(self, rank: int, target: Label, source: Label, write: WriteId, at: Location) -> str | None:
        pos = self.position(rank, source)
        known = self.copied_from.get((target, write))
        chain = self.chains.get(source, [])
        tip = len(chain) - 1
        problem = None
        if (known is None and pos != tip) or (known is not None and pos != known):
            problem = self._stale(rank, source, known if known is not None else tip)
        self.copied_from.setdefault((target, write), pos)
        self._record(rank, target, write, at)
        return problem

    def _check(self, rank: int, label: Label, write: WriteId, pos: int) -> str | None:
        chain = self.chains.get(label, [])
        known = self.positions.get((label, write))
        expected = len(chain) - 1 if known is None else known - 1
        return None if pos == expected else self._stale(rank, label, expected)

    def _record(self, rank: int, label: Label, write: WriteId, at: Location) -> None:
        known = self.positions.get((label, write))
        if known is None:
            chain = self.chains.setdefault(label, [])
            chain.append(write)
            known = len(chain) - 1
            self.positions[(label, write)] = known
            self.where[(label, known)] = (rank, at)
        self.have[(rank, label)] = known

    def _stale(self, rank: int, label: Label, expected: int) -> str:
        name = f"`{label[0]}.{label[1]}`"
        if expected == EMPTY:
            return f"cache label {name} on rank {rank} does not hold the state this write starts from"
        writer, at = self.where[(label, expected)]
        return (f"cache label {name} on rank {rank} is stale: its latest state was written on rank {writer} "
                f"({at}) and never shipped to rank {rank}")
