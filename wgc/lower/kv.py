"""Pass `kv`: a cache label written on one rank and read later on another moves with the request.

At the end of a walk, every label it wrote is shipped to the ranks where a walk
that can follow it (in some flow) uses the same label: an Orpheus prefill on
rank 0 hands its KV to decode on rank 1; a BAGEL fork of `main` into
`cfg_text` reaches the rank that runs the `cfg_text` guidance branch.
"""

from __future__ import annotations

from wgc.check.context import Symbols
from wgc.lower.ir import LoopBlock, Node, Op, Transfer, WalkIR

Label = tuple[str, str]  # (component, label)


def _label(symbols: Symbols, op: Op) -> Label:
    labels = symbols.components[op.component].labels()
    return (op.component, op.label or (labels[0] if labels else "default"))


def _touches(symbols: Symbols, body: list[Node], writes_only: bool = False) -> dict[Label, set[int]]:
    out: dict[Label, set[int]] = {}
    for node in body:
        if isinstance(node, LoopBlock):
            for key, ranks in _touches(symbols, node.body, writes_only).items():
                out.setdefault(key, set()).update(ranks)
        elif isinstance(node, Op) and node.kind == "run" and symbols.components[node.component].engine == "kv":
            for lane in node.lanes or [node]:
                out.setdefault(_label(symbols, lane), set()).update(node.ranks)
        elif isinstance(node, Op) and node.kind == "fork":
            out.setdefault((node.component, node.fork[0]), set()).update(node.ranks)
            if not writes_only:
                out.setdefault((node.component, node.fork[1]), set()).update(node.ranks)
    return out


def ship_labels(walks: list[WalkIR], symbols: Symbols, follows: dict[str, set[str]]) -> None:
    uses = {w.name: _touches(symbols, w.body) for w in walks}
    for walk in walks:
        later = follows.get(walk.name, set())
        shipped = 0
        for (comp, label), ranks in sorted(_touches(symbols, walk.body, writes_only=True).items()):
            wanted: set[int] = set()
            for other in later:
                wanted |= uses.get(other, {}).get((comp, label), set())
            for target in sorted(wanted - ranks):
                shipped += 1
                walk.body.append(Transfer(f"kv:{comp}.{label}", min(ranks), target,
                                          f"{walk.name}:kv:{comp}.{label}#{shipped}", walk.src, (comp, label)))
                walk.ranks = sorted(set(walk.ranks) | {target})
