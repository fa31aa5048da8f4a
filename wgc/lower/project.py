"""Pass `partition`: project each walk's placed tree onto every rank as a flat instruction list."""

from __future__ import annotations

from wgc.lower.ir import LoopBlock, Node, Op, Transfer, WalkIR, expr_uses
from wgc.plan.model import (
    Carry,
    Emit,
    EndLoop,
    Eval,
    Fork,
    Instr,
    KvRecv,
    KvSend,
    Loop,
    Next,
    Pop,
    Push,
    Recv,
    Run,
    Send,
    YieldOut,
)


def _op(op: Op, rank: int) -> Instr | None:
    if op.kind == "fork":
        return Fork(op.component, op.fork[0], op.fork[1], op.src) if rank in op.ranks else None
    if op.kind == "run":
        if rank not in op.ranks:
            return None
        lanes = op.lanes or [op]
        return Run(op.component, op.entry, [lane.outputs[0] for lane in lanes], [list(lane.args) for lane in lanes],
                   [lane.label for lane in lanes], [], -1, op.src)
    if rank != op.home:
        return None
    if op.kind == "eval":
        return Eval(op.outputs[0], op.args[0], op.src)
    if op.kind == "emit":
        return Emit(op.modality, op.args[0].name, op.src)
    if op.kind == "push":
        return Push(op.stream, op.args[0].name, op.src)
    if op.kind == "pop":
        return Pop(op.stream, op.outputs[0], op.src)
    raise ValueError(f"unknown op kind {op.kind}")


def _transfer(t: Transfer, rank: int) -> Instr | None:
    if t.kv is not None:
        if rank == t.source:
            return KvSend(t.kv[0], t.kv[1], t.target, t.tag, t.src)
        if rank == t.target:
            return KvRecv(t.kv[0], t.kv[1], t.source, t.tag, t.src)
        return None
    if rank == t.source and t.part != "recv":
        return Send(t.value, t.target, t.tag, t.src)
    if rank == t.target and t.part != "send":
        return Recv(t.value, t.source, t.tag, t.src)
    return None


def project(body: list[Node], rank: int, homes: dict[str, int]) -> list[Instr]:
    out: list[Instr] = []
    for node in body:
        if isinstance(node, Op):
            instr = _op(node, rank)
        elif isinstance(node, Transfer):
            instr = _transfer(node, rank)
        else:
            out.extend(_loop(node, rank, homes))
            continue
        if instr is not None:
            out.append(instr)
    return out


def _loop(loop: LoopBlock, rank: int, homes: dict[str, int]) -> list[Instr]:
    if rank not in loop.ranks:
        return []
    carries = [Carry(name, init) for name, init in loop.carries if homes.get(name, loop.ranks[0]) == rank]
    yields = [YieldOut(y.kind, y.name, y.exposed) for y in loop.yields if homes.get(y.name, loop.ranks[0]) == rank]
    head = Loop(loop.loop_id, loop.bound, loop.dynamic, loop.index, carries, loop.nospec, loop.src)
    tail = EndLoop(loop.loop_id, loop.stop, yields, loop.src)
    return [head, *project(loop.body, rank, homes), tail]


def value_homes(body: list[Node], homes: dict[str, int] | None = None) -> dict[str, int]:
    homes = {} if homes is None else homes
    for node in body:
        if isinstance(node, Op):
            for name in node.defines():
                homes[name] = node.home
        elif isinstance(node, LoopBlock):
            value_homes(node.body, homes)
    return homes


def rank_inputs(walk: WalkIR, instrs: list[Instr]) -> list[str]:
    """The walk inputs a rank reads (they are delivered to it when the walk starts)."""
    read: set[str] = set()
    for ins in instrs:
        for e in _exprs(ins):
            read.update(expr_uses(e))
        for attr in ("value",):
            v = getattr(ins, attr, None)
            if isinstance(v, str):
                read.add(v)
    return [a for a in walk.args if a in read]


def _exprs(ins: Instr) -> list:
    if isinstance(ins, Run):
        return [a for lane in ins.args for a in lane]
    if isinstance(ins, Eval):
        return [ins.expr]
    if isinstance(ins, Loop):
        return [ins.bound, *(c.init for c in ins.carries if c.init is not None)]
    return []


def with_next(walk: WalkIR, rank: int, instrs: list[Instr], in_flow: bool) -> list[Instr]:
    if in_flow and rank == walk.end_rank:
        return [*instrs, Next(walk.result, walk.src)]
    return instrs
