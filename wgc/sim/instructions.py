"""What each plan instruction does to one rank's thread (a table: instruction type → handler).

A handler returns True when the thread moved on (its pc changed), False when
it blocked; it raises SimulationError for a plan bug, RequestError when the
request itself cannot go on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from wgc.lower.liveness import writes
from wgc.plan import model as pm
from wgc.semantics.mock import Value
from wgc.semantics.stream_buffer import ENDED, WAITING
from wgc.sim.errors import RequestError, SimulationError

if TYPE_CHECKING:
    from wgc.sim.rank_thread import RankThread

MISSING = object()  # a yielded value this rank does not hold


class ReadError(Exception):
    """A read of a value the frame does not hold (reported with the instruction's position)."""


@dataclass
class LoopState:
    loop_id: int
    start: int  # index of the LOOP
    bound: int
    count: int = 0
    seen: dict[int, list[Value]] = field(default_factory=dict)  # yield position → its value per iteration


# ---- instructions -------------------------------------------------------------------------------


def _run(t: RankThread, i: pm.Run) -> bool:
    kv = t.driver.components[i.component].kv
    for lane, (out, args, label) in enumerate(zip(i.outputs, i.args, i.labels, strict=True)):
        values = [t.eval(a) for a in args]
        if kv:
            t.label_write((i.component, t.engine.label(i.component, label)), ("run", i.entry, lane))
        value = t.engine.call(i.component, i.entry, values, label)
        if out:
            t.write(out, value)
    return t.step()


def _eval(t: RankThread, i: pm.Eval) -> bool:
    t.write(i.output, t.eval(i.expr))
    return t.step()


def _send(t: RankThread, i: pm.Send) -> bool:
    t.send("value", i.peer, i.tag, t.value(i.value))
    return t.step()


def _recv(t: RankThread, i: pm.Recv) -> bool:
    msg = t.receive("value", i.peer, i.tag)
    if msg is None:
        return t.block(f"waits for `{i.tag}` from rank {i.peer}")
    t.write(i.value, msg.payload)
    return t.step()


def _kv_send(t: RankThread, i: pm.KvSend) -> bool:
    label = (i.component, t.engine.label(i.component, i.label))
    t.send("kv", i.peer, i.tag, (t.engine.snapshot(*label), t.driver.ledger.position(t.rank, label)))
    return t.step()


def _kv_recv(t: RankThread, i: pm.KvRecv) -> bool:
    msg = t.receive("kv", i.peer, i.tag)
    if msg is None:
        return t.block(f"waits for cache label `{i.component}.{i.label}` (`{i.tag}`) from rank {i.peer}")
    state, position = msg.payload
    t.engine.install(i.component, i.label, state)
    t.driver.ledger.install(t.rank, (i.component, t.engine.label(i.component, i.label)), position)
    return t.step()


def _loop(t: RankThread, i: pm.Loop) -> bool:
    bound = t.driver.loops.bound(int(t.eval(i.bound)), i.dynamic)
    for c in i.carries:
        if c.init is not None:
            t.write(c.name, t.eval(c.init))
        else:
            t.value(c.name)
    end = t.schedule.jumps[t.pc]
    state = LoopState(i.loop_id, t.pc, bound)
    if bound <= 0:  # the body's own values never come to be, yet the FREE after the loop names them
        t.never_written.update(n for ins in t.schedule.code[t.pc + 1:end] for n in writes(ins))
        _exit_loop(t, state, t.schedule.code[end])
        t.pc = end + 1
        return True
    t.loops.append(state)
    if i.index is not None:
        t.write(i.index, 0)
    return t.step()


def _end_loop(t: RankThread, i: pm.EndLoop) -> bool:
    state = t.loops[-1]
    for n, y in enumerate(i.yields):
        state.seen.setdefault(n, []).append(t.frame.get(y.name, MISSING))
    state.count += 1
    stop = False
    if i.stop is not None:
        stop = bool(t.value(i.stop)) and not t.driver.loops.ignore_stop
    if stop or state.count >= state.bound:
        t.loops.pop()
        _exit_loop(t, state, i)
        return t.step()
    loop = t.schedule.code[state.start]
    assert isinstance(loop, pm.Loop)
    if loop.index is not None:
        t.write(loop.index, state.count)
    t.pc = state.start + 1
    return True


def _exit_loop(t: RankThread, state: LoopState, end: pm.Instr) -> None:
    assert isinstance(end, pm.EndLoop)
    for n, y in enumerate(end.yields):
        seen = state.seen.get(n, [])
        if any(v is MISSING for v in seen):
            continue  # not held on this rank: reading the exposed name here is an undefined read
        if y.kind == "accumulated":
            t.write(y.exposed, list(seen))
        elif seen:
            t.write(y.exposed, seen[-1])


def _push(t: RankThread, i: pm.Push) -> bool:
    buf = t.driver.board.buffers[i.stream]
    if buf.full:
        return t.block(f"pushes to stream `{i.stream}`, which is full")
    buf.push(t.value(i.value))
    return t.step()


def _pop(t: RankThread, i: pm.Pop) -> bool:
    got = t.driver.board.buffers[i.stream].pop()
    if got is WAITING:
        return t.block(f"waits for a chunk of stream `{i.stream}`")
    if got is ENDED:
        raise RequestError(f"{t.here()}: recv from stream `{i.stream}` after it ended (after_end stop)")
    t.write(i.output, got.value)
    return t.step()


def _emit(t: RankThread, i: pm.Emit) -> bool:
    t.driver.outputs.setdefault(i.modality, []).append(t.value(i.value))
    return t.step()


def _fork(t: RankThread, i: pm.Fork) -> bool:
    source = (i.component, t.engine.label(i.component, i.source))
    problem = t.driver.ledger.fork(t.rank, (i.component, i.target), source, t.write_id("fork"), t.here())
    if problem is not None:
        raise SimulationError(problem, t.here())
    t.engine.fork(i.component, i.target, i.source)
    return t.step()


def _free(t: RankThread, i: pm.Free) -> bool:
    for name in i.values:
        if name not in t.frame and name in t.never_written:
            t.never_written.discard(name)
            t.freed.add(name)
            continue
        if name not in t.frame:
            raise ReadError(f"`{name}` is freed twice" if name in t.freed else f"frees `{name}`, which is not defined")
        del t.frame[name]
        t.freed.add(name)
    return t.step()


def _next(t: RankThread, i: pm.Next) -> bool:
    spec = t.driver.index.walks[t.schedule.walk]
    if t.rank != spec.end_rank:
        raise SimulationError(f"NEXT on rank {t.rank}, but walk `{spec.name}` ends on rank {spec.end_rank}", t.here())
    if t.instance.ended:
        raise SimulationError("a second NEXT for this walk instance", t.here())
    result = t.value(i.result) if i.result is not None else None
    t.step()
    t.driver.walk_ended(t.instance, result)
    return True


HANDLERS: dict[type, Callable[[RankThread, pm.Instr], bool]] = {
    pm.Run: _run, pm.Eval: _eval, pm.Send: _send, pm.Recv: _recv, pm.KvSend: _kv_send, pm.KvRecv: _kv_recv,
    pm.Loop: _loop, pm.EndLoop: _end_loop, pm.Push: _push, pm.Pop: _pop, pm.Emit: _emit, pm.Fork: _fork,
    pm.Free: _free, pm.Next: _next,
}
