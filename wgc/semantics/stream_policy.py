"""Chunk policies as data: where each chunk of a stream starts and ends.

Every policy is three numbers. Chunk j ends at item `first + j * step` (exclusive)
and starts `reach` items before its end, never before item 0:

    fixed(k)                  first = k, step = k, reach = k        chunk j = items[j*k : (j+1)*k]
    sliding(window=W, stride=S)  first = W, step = S, reach = W     window i = items[i*S : i*S+W]
    left_context(left=L, chunk=C) first = C, step = C, reach = C+L  chunk j = items[max(0, j*C-L) : (j+1)*C]

so the number of complete chunks after n items is 0 for n < first, else
1 + (n - first) // step (fixed: n // k; sliding: the seed's formula (6)).
The new items of chunk j are those after chunk j-1's end; a consumer that has
taken chunk j has consumed every item before that chunk's end.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ChunkPolicy:
    name: str
    first: int  # items needed for chunk 0
    step: int  # new items in every later chunk
    reach: int  # length of a full chunk counted back from its end
    unwrap: bool = False  # fixed(1): a chunk is the item itself, not a one-item list

    def end(self, j: int) -> int:
        """One past the last item of chunk j."""
        return self.first + j * self.step

    def start(self, j: int) -> int:
        return max(0, self.end(j) - self.reach)

    def complete(self, n: int) -> int:
        """How many complete chunks n items make."""
        return 0 if n < self.first else 1 + (n - self.first) // self.step

    def ends_chunk(self, n: int) -> bool:
        """Whether item n (counted from 1) completes a chunk: complete(n) > complete(n - 1)."""
        return n >= self.first and (n - self.first) % self.step == 0


_SHAPES: dict[str, Callable[[Mapping[str, int]], tuple[int, int, int]]] = {
    "fixed": lambda a: (a["size"], a["size"], a["size"]),
    "sliding": lambda a: (a["window"], a["stride"], a["window"]),
    "left_context": lambda a: (a["chunk"], a["chunk"], a["chunk"] + a["left"]),
}
POLICY_NAMES = tuple(_SHAPES)


def make_policy(name: str, args: Mapping[str, int]) -> ChunkPolicy:
    """The policy `name(args)`, with arguments by name: size; window, stride; left, chunk."""
    shape = _SHAPES.get(name)
    if shape is None:
        raise ValueError(f"unknown chunk policy `{name}` (known: {', '.join(POLICY_NAMES)})")
    try:
        first, step, reach = shape(args)
    except KeyError as e:
        raise ValueError(f"chunk policy `{name}` needs `{e.args[0]}`") from None
    if first < 1 or step < 1 or reach < first:
        raise ValueError(f"chunk policy `{name}{dict(args)}` does not describe a valid chunking")
    return ChunkPolicy(name, first, step, reach, unwrap=(name == "fixed" and first == 1))
