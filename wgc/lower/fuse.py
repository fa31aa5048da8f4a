"""Pass `fuse`: branches of a `parallel` block that call the same entry on the same ranks become one
batched call over their cache labels (BAGEL's three guidance branches on one GPU: one forward, three labels)."""

from __future__ import annotations

from wgc.lower.ir import LoopBlock, Node, Op, ParallelBlock, WalkIR


def _single_run(branch: list[Node]) -> Op | None:
    if len(branch) == 1 and isinstance(branch[0], Op) and branch[0].kind == "run":
        return branch[0]
    return None


def _fuse_block(block: ParallelBlock) -> list[Node]:
    """The block's nodes after fusion, in branch order; fused lanes sit where their first branch was."""
    groups: dict[tuple, Op] = {}
    out: list[Node] = []
    for name, branch in block.branches:
        run = _single_run(branch)
        if run is None:
            out.extend(_fuse_body(branch))
            continue
        key = (run.component, run.entry, tuple(run.ranks))
        fused = groups.get(key)
        if fused is None:
            fused = Op("run", run.src, component=run.component, entry=run.entry, ranks=run.ranks,
                       branch=name, lanes=[run])
            groups[key] = fused
            out.append(fused)
        else:
            fused.lanes.append(run)
    # A "fused" call with one lane is just the call.
    return [n.lanes[0] if isinstance(n, Op) and len(n.lanes) == 1 else n for n in out]


def _fuse_body(body: list[Node]) -> list[Node]:
    out: list[Node] = []
    for node in body:
        if isinstance(node, ParallelBlock):
            out.extend(_fuse_block(node))
        elif isinstance(node, LoopBlock):
            node.body = _fuse_body(node.body)
            out.append(node)
        else:
            out.append(node)
    return out


def fuse_walk(walk: WalkIR) -> None:
    walk.body = _fuse_body(walk.body)
