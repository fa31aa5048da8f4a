"""Pass `flatten`: every `parallel` block becomes its branches' nodes, one branch after another.

What runs concurrently is decided later, per rank: branches placed on different ranks overlap
because each rank runs only its own part (comm and project), and branches on one rank that call
the same entry are one batched call if `fuse` ran first. From here on a walk body holds only
operations and loops, which is what comm, kv and project read.
"""

from __future__ import annotations

from wgc.lower.ir import LoopBlock, Node, ParallelBlock, WalkIR


def _flatten_body(body: list[Node]) -> list[Node]:
    out: list[Node] = []
    for node in body:
        if isinstance(node, ParallelBlock):
            for _, branch in node.branches:
                out.extend(_flatten_body(branch))
        else:
            if isinstance(node, LoopBlock):
                node.body = _flatten_body(node.body)
            out.append(node)
    return out


def flatten_walk(walk: WalkIR) -> None:
    walk.body = _flatten_body(walk.body)
