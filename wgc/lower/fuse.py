"""Pass `fuse` (optional): branches of a `parallel` block that call the same entry on the same ranks
become one batched call over their cache labels (BAGEL's three guidance branches on one GPU: one
forward, three labels).

The block stays a block: the fused call takes the place of its first branch's call and the
branches it absorbed are left empty, so `flatten`, which runs next, puts it where that branch
was. Without this pass every branch keeps its own call, in branch order: the same values, one
call each.
"""

from __future__ import annotations

from wgc.lower.ir import LoopBlock, Node, Op, ParallelBlock, WalkIR


def _single_run(branch: list[Node]) -> Op | None:
    if len(branch) == 1 and isinstance(branch[0], Op) and branch[0].kind == "run":
        return branch[0]
    return None


def _fuse_block(block: ParallelBlock) -> None:
    """Merge the block's single-call branches by (component, entry, ranks), in branch order."""
    groups: dict[tuple, Op] = {}
    branches: list[tuple[str, list[Node]]] = []
    for name, branch in block.branches:
        run = _single_run(branch)
        if run is None:
            branches.append((name, _fuse_body(branch)))
            continue
        key = (run.component, run.entry, tuple(run.ranks))
        fused = groups.get(key)
        if fused is None:
            fused = Op("run", run.src, component=run.component, entry=run.entry, ranks=run.ranks,
                       branch=name, lanes=[run])
            groups[key] = fused
            branches.append((name, [fused]))
        else:
            fused.lanes.append(run)
            branches.append((name, []))  # its call is a lane of the fused one
    # A "fused" call with one lane is just the call.
    block.branches = [(name, [n.lanes[0] if isinstance(n, Op) and len(n.lanes) == 1 else n for n in nodes])
                      for name, nodes in branches]


def _fuse_body(body: list[Node]) -> list[Node]:
    for node in body:
        if isinstance(node, ParallelBlock):
            _fuse_block(node)
        elif isinstance(node, LoopBlock):
            node.body = _fuse_body(node.body)
    return body


def fuse_walk(walk: WalkIR) -> None:
    walk.body = _fuse_body(walk.body)
