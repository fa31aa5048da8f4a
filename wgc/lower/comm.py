"""Pass `comm`: insert SEND/RECV pairs wherever a value is used on a rank that does not hold it,
and decide which ranks take part in each loop.

Every rank's schedule is a projection of the same ordered tree, so transfers
between two ranks appear in the same order on both sides and match FIFO.
Sends never block, so this order cannot deadlock. Values used in a loop but
defined before it move once, before the loop; loop-carried values live on the
rank that updates them and move at the point of use in every iteration.

A SEND is hoisted to just after its value becomes available on the sending rank
(its definition in the block, or the block's start), its RECV staying at the use:
otherwise a rank runs its own branch of a parallel block before it sends the
other branches their inputs, and the branches never overlap (BAGEL's velocity
step: rank 0 computed v_main, then sent z and t to the cfg ranks). Still
deadlock-free: in the tree's one order every RECV comes after its SEND, and a
send never waits. Cache-label transfers (KVSEND) stay where they are: a label's
state is read at the point of the transfer.
"""

from __future__ import annotations

from dataclasses import replace

from wgc.lower.ir import LoopBlock, Node, Op, Transfer, WalkIR, expr_uses
from wgc.plan.model import Src


class CommPlanner:
    def __init__(self, walk: WalkIR, all_ranks: list[int]) -> None:
        self.walk = walk
        self.everywhere = set(all_ranks)
        self.avail: dict[str, set[int]] = {a: set(self.everywhere) for a in walk.args}
        self.count = 0

    def run(self) -> None:
        self.walk.body = self.block(self.walk.body)

    def transfer(self, name: str, target: int, src: Src) -> Transfer:
        holders = self.avail[name]
        self.count += 1
        t = Transfer(name, min(holders), target, f"{self.walk.name}:{name}#{self.count}", src)
        holders.add(target)
        return t

    def need(self, names: list[str], ranks: list[int], src: Src) -> list[Transfer]:
        out = []
        for name in names:
            if name not in self.avail:
                continue  # a param, const or literal: known everywhere
            for r in ranks:
                if r not in self.avail[name]:
                    out.append(self.transfer(name, r, src))
        return out

    def block(self, body: list[Node]) -> list[Node]:
        out: list[Node] = []
        for node in body:
            if isinstance(node, Op):
                out.extend(self.need(node.uses(), node.ranks, node.src))
                out.append(node)
                for name in node.defines():
                    self.avail[name] = set(node.ranks)
            elif isinstance(node, LoopBlock):
                out.extend(self.loop(node))
        return hoist_sends(out)

    def loop(self, loop: LoopBlock) -> list[Node]:
        inside = _body_defs(loop.body)
        homes = _def_homes(loop.body)
        before: list[Node] = []
        carried_home: dict[str, int] = {}
        for name, init in loop.carries:
            home = homes.get(name, min(self.avail.get(name, {0})))
            carried_home[name] = home
            if init is not None:
                before.extend(self.need(expr_uses(init), [home], loop.src))
            else:
                before.extend(self.need([name], [home], loop.src))
            self.avail[name] = {home}
        for name, ranks in _uses(loop.body):
            if name not in inside and name not in carried_home:
                before.extend(self.need([name], ranks, loop.src))
        if loop.index is not None:
            self.avail[loop.index] = set(self.everywhere)
        body = self.block(loop.body)
        ranks = _ranks(body)
        if loop.stop is not None:
            stop_home = homes.get(loop.stop, min(ranks) if ranks else 0)
            for r in sorted(ranks - {stop_home}):
                body.append(self.transfer(loop.stop, r, loop.src))
        loop.body = body
        loop.ranks = sorted(ranks | set(carried_home.values()))
        for y in loop.yields:
            holder = homes.get(y.name, carried_home.get(y.name))
            self.avail[y.exposed] = {holder} if holder is not None else set(loop.ranks[:1])
        for name in inside - {y.exposed for y in loop.yields}:
            self.avail.pop(name, None)
        return [*before, loop]


def hoist_sends(block: list[Node]) -> list[Node]:
    """Each value transfer's SEND moved up to just after the value is available on its source rank
    in this block (after the op or loop defining it, or the transfer bringing it there; the block's
    start if neither is in the block), its RECV left in place."""
    out = list(block)
    i = 0
    while i < len(out):
        node = out[i]
        if isinstance(node, Transfer) and node.kv is None and node.part == "both":
            at = _available_from(out, i, node.value, node.source)
            while at < i and isinstance(out[at], Transfer) and out[at].part == "send":
                at += 1  # behind the SENDs already hoisted here: they keep the tree's order
            if at < i and not _only_transfers_between(out, at, i):
                out[i] = replace(node, part="recv")
                out.insert(at, replace(node, part="send"))
                i += 1
        i += 1
    return out


def _available_from(block: list[Node], before: int, value: str, rank: int) -> int:
    """The earliest index in `block` at which `value` is on `rank`, looking back from `before`."""
    for j in range(before - 1, -1, -1):
        node = block[j]
        if isinstance(node, Op) and value in node.defines():
            return j + 1
        if isinstance(node, LoopBlock) and value in _loop_exposes(node):
            return j + 1
        if isinstance(node, Transfer) and node.value == value and node.target == rank and node.part != "send":
            return j + 1
    return 0


def _loop_exposes(loop: LoopBlock) -> set[str]:
    return {y.exposed for y in loop.yields} | {name for name, _ in loop.carries} | _body_defs(loop.body)


def _only_transfers_between(block: list[Node], start: int, end: int) -> bool:
    """Nothing but transfers between: moving the SEND changes no overlap, keep the schedule as it is."""
    return all(isinstance(n, Transfer) for n in block[start:end])


def _body_defs(body: list[Node]) -> set[str]:
    return set(_def_homes(body))


def _def_homes(body: list[Node]) -> dict[str, int]:
    """Value → rank of its last definition in the body (nested loops included)."""
    homes: dict[str, int] = {}
    for node in body:
        if isinstance(node, Op):
            for name in node.defines():
                homes[name] = node.home
        elif isinstance(node, LoopBlock):
            homes.update(_def_homes(node.body))
            for y in node.yields:
                inner = _def_homes(node.body)
                if y.name in inner:
                    homes[y.exposed] = inner[y.name]
    return homes


def _uses(body: list[Node]) -> list[tuple[str, list[int]]]:
    out: list[tuple[str, list[int]]] = []
    for node in body:
        if isinstance(node, Op):
            out.extend((n, node.ranks) for n in node.uses())
        elif isinstance(node, LoopBlock):
            out.extend(_uses(node.body))
            for _, init in node.carries:
                out.extend((n, []) for n in expr_uses(init))
    return out


def _ranks(body: list[Node]) -> set[int]:
    out: set[int] = set()
    for node in body:
        if isinstance(node, Op):
            out.update(node.ranks)
        elif isinstance(node, Transfer):
            out.update((node.source, node.target))
        elif isinstance(node, LoopBlock):
            out.update(node.ranks)
    return out


def plan_comm(walk: WalkIR, all_ranks: list[int]) -> None:
    CommPlanner(walk, all_ranks).run()
