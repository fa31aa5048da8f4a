"""The meaning of each instruction for one walk instance (docs/plan.md), as a table of handlers.

`advance` runs an instance until it reaches a RUN (returned, for the executor
to batch), blocks on a message (Blocked), or ends (None).

Speculation: in a DynamicLoop whose stop is computed on this rank (and not
marked `nospec`), iteration N+1 starts before the stop of iteration N is
applied: its RUN joins the same scheduling round as everything else. The stop
is applied before the iteration's first visible effect (EMIT, PUSH, SEND,
KVSEND, a FORK), its first RECV, KVRECV or POP, or at its ENDLOOP, whichever comes
first; when it says stop, the wasted iteration is rolled back — frame values
restored, cache labels restored through the component's checkpoint — so its
outputs never reach anyone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from wgc.runtime.components.base import Component
from wgc.runtime.protocol.messages import (
    COORDINATOR,
    ConsumersEnded,
    Data,
    KvData,
    Message,
    Output,
    StartWalk,
    StreamCredit,
    StreamDone,
    StreamItems,
)
from wgc.runtime.worker.compiled import compile_expr, tupler
from wgc.runtime.worker.context import RankPlan
from wgc.runtime.worker.flowstep import cut_after, next_step, on_ranks
from wgc.runtime.worker.instance import FREED, Instance, LoopState
from wgc.runtime.worker.request_env import RequestEnv, const_table
from wgc.runtime.worker.request_state import RequestState
from wgc.runtime.worker.streams import ConsumerEnd

from wgc.plan import model as m
from wgc.semantics.flows import FlowError
from wgc.semantics.mock import mock_input
from wgc.semantics.python_exprs import evaluator_for
from wgc.semantics.stream_buffer import ENDED, WAITING

VISIBLE = (m.Emit, m.Push, m.Send, m.KvSend, m.Fork, m.Next)
# A wasted iteration is never sent anything: the loop's other ranks RECV the stop before their ENDLOOP
# (or, speculating too, roll back before their SEND). Its RECV would wait forever, or take a later value;
# its POP (`recv` on a stream) would take an item a rollback cannot give back, or read past the end.
_FROM_PEERS = (m.Recv, m.KvRecv, m.Pop)
_APPLY_STOP_BEFORE = frozenset({*VISIBLE, *_FROM_PEERS, m.EndLoop})


@dataclass(frozen=True)
class Blocked:
    reason: tuple[str, ...]


class StepError(Exception):
    """An instruction that cannot execute: names the rank, walk, instruction and source position."""


class Host(Protocol):
    """What the interpreter uses of its rank's executor (runtime/worker/executor.py), and nothing else."""

    rp: RankPlan
    rank: int
    states: dict[int, RequestState]
    components: dict[str, Component]
    options: Any  # executor.Options: fake_inputs

    def send(self, destination: int, msg: Message) -> None: ...  # to another rank or COORDINATOR

    def post(self, destination: int, msg: Message) -> None: ...  # to a rank, this one included

    def state(self, request: int) -> RequestState: ...

    def start(self, request: int, key: str, walk: str, inputs: dict[str, Any], flow: Any, prior: int = 0) -> None: ...

    def make_ready(self, inst: Instance) -> None: ...

    def flow_done(self, request: int, flow: str, on_rank: dict[int, int], cut: list[str] | None = None) -> None: ...


class Interpreter:
    def __init__(self, ex: Host) -> None:
        self.ex = ex
        self.evaluate = evaluator_for(ex.options.fake_inputs)
        self.consts = const_table(ex.rp.plan, ex.options.fake_inputs)
        self.handlers = {
            m.Eval: self._eval, m.Send: self._send, m.Recv: self._recv, m.Loop: self._loop,
            m.EndLoop: self._endloop, m.Push: self._push, m.Pop: self._pop, m.Emit: self._emit,
            m.Fork: self._fork, m.KvSend: self._kvsend, m.KvRecv: self._kvrecv, m.Free: self._free,
            m.Next: self._next,
        }
        self._getters: dict[int, list[list[Callable[[Instance], Any]]]] = {}  # keyed by id(): plan lives as long
        self._tuples: dict[int, list[Callable[[Instance], tuple[Any, ...]]]] = {}  # the same, as one tuple a lane
        self._evals: dict[int, tuple[m.Eval, Callable[[Instance], Any] | None]] = {}  # an EVAL's compiled expression

    def eval(self, e: m.Expr, inst: Instance) -> Any:
        try:
            return self.evaluate(e, RequestEnv(self.consts, self.ex.states[inst.request].init, inst.frame))
        except KeyError as err:
            raise self._error(inst, f"value `{err.args[0]}` is not available (freed or never set)") from None
        except (TypeError, ValueError, ArithmeticError, IndexError, RuntimeError) as err:
            raise self._error(inst, f"{type(err).__name__}: {err}") from None

    def missing_value(self, inst: Instance, name: str) -> StepError:
        return self._error(inst, f"value `{name}` is not available (freed or never set)")

    def _error(self, inst: Instance, message: str) -> StepError:
        ins = inst.code[min(inst.pc, len(inst.code) - 1)]
        src = ins.src
        where = f"{self.ex.rp.plan.source_name}:{src.line}:{src.column}"
        return StepError(f"rank {self.ex.rank}, walk {inst.walk}, instruction {inst.pc} "
                         f"({type(ins).__name__.upper()}) at {where}: {message}")

    # ---- the loop --------------------------------------------------------------------------

    def advance(self, inst: Instance) -> m.Run | Blocked | None:
        code, handlers = inst.code, self.handlers
        while inst.pc < len(code):
            ins = code[inst.pc]
            kind = type(ins)
            if inst.pending and kind in _APPLY_STOP_BEFORE and self._apply_pending_stop(inst, ins):
                continue
            if kind is m.Run:
                return ins
            outcome = handlers[kind](inst, ins)
            if outcome is not None:
                return outcome
            inst.pc += 1
        return None

    def arg_getters(self, ins: m.Run) -> list[list[Callable[[Instance], Any]]]:
        """Per lane, one function per argument: frame lookups and literals skip the evaluator."""
        cached = self._getters.get(id(ins))
        if cached is None:
            cached = self._getters[id(ins)] = [[self._getter(a) for a in lane] for lane in ins.args]
        return cached

    def arg_tuples(self, ins: m.Run) -> list[Callable[[Instance], tuple[Any, ...]]]:
        """Per lane, one function giving the call's argument tuple (what `arg_getters` give, in order),
        so a batch builds each call's arguments with one call instead of a list, a loop and a tuple."""
        cached = self._tuples.get(id(ins))
        if cached is None:
            cached = self._tuples[id(ins)] = [tupler(lane) for lane in self.arg_getters(ins)]
        return cached

    def _getter(self, e: m.Expr) -> Callable[[Instance], Any]:
        # an operator's errors become the evaluator's StepError: only lookups are compiled here
        compiled = None if isinstance(e, m.EBinary) else self._compile(e)
        return compiled if compiled is not None else lambda inst: self.eval(e, inst)

    def _compile(self, e: m.Expr) -> Callable[[Instance], Any] | None:
        """`e` as one closure over the instance, or None (compiled.py says for which kinds)."""
        return compile_expr(e, self.ex.options.fake_inputs, self.ex.states, self.consts)

    def before_call(self, inst: Instance, comp: Component, label: str) -> None:
        """A speculative RUN on a kv component: remember the label's extent so it can be rolled back."""
        loop = inst.speculating()
        if loop is None or comp.spec.engine != "kv":
            return
        key = (comp.spec.name, label or comp.default_label())
        if key not in loop.checkpoints:
            loop.checkpoints[key] = comp.checkpoint(inst.request, key[1])

    # ---- simple instructions ----------------------------------------------------------------

    def _eval(self, inst: Instance, ins: m.Eval) -> None:
        seen = self._evals.get(id(ins))
        if seen is None or seen[0] is not ins:  # the instruction itself checked: an id may be reused
            seen = self._evals[id(ins)] = (ins, self._compile(ins.expr))
        compiled = seen[1]
        if compiled is None:
            inst.frame[ins.output] = self.eval(ins.expr, inst)
            return
        try:
            inst.frame[ins.output] = compiled(inst)
        except KeyError as err:
            raise self.missing_value(inst, err.args[0]) from None
        except (TypeError, ValueError, ArithmeticError, IndexError, RuntimeError) as err:
            raise self._error(inst, f"{type(err).__name__}: {err}") from None

    def _send(self, inst: Instance, ins: m.Send) -> None:
        self.ex.post(ins.peer, Data(inst.request, inst.key, ins.tag, self._value(inst, ins.value)))

    def _recv(self, inst: Instance, ins: m.Recv) -> Blocked | None:
        state = self.ex.states[inst.request]
        key = (inst.key, ins.tag)
        if key not in state.mailbox:
            return Blocked(("recv", ins.tag))
        inst.frame[ins.value] = state.take(key)
        return None

    def _kvsend(self, inst: Instance, ins: m.KvSend) -> None:
        state = self.ex.components[ins.component].export_label(inst.request, ins.label)
        self.ex.post(ins.peer, KvData(inst.request, inst.key, ins.tag, ins.component, ins.label, state))

    def _kvrecv(self, inst: Instance, ins: m.KvRecv) -> Blocked | None:
        state = self.ex.states[inst.request]
        key = (inst.key, ins.tag)
        if key not in state.mailbox:
            return Blocked(("recv", ins.tag))
        self.ex.components[ins.component].import_label(inst.request, ins.label, state.take(key))
        return None

    def _emit(self, inst: Instance, ins: m.Emit) -> None:
        try:
            value = inst.frame[ins.value]  # every row every step: one lookup (`_value` checks, then reads)
        except KeyError:
            raise self._error(inst, f"value `{ins.value}` is not available (freed or never set)") from None
        seq = self.ex.states[inst.request].next_output_seq()
        self.ex.send(COORDINATOR, Output(inst.request, ins.modality, value, inst.walk, self.ex.rank, seq))

    def _fork(self, inst: Instance, ins: m.Fork) -> None:
        self.ex.components[ins.component].fork(inst.request, ins.target, ins.source)

    def _free(self, inst: Instance, ins: m.Free) -> None:
        for name in ins.values:
            inst.frame.pop(name, None)

    def _value(self, inst: Instance, name: str) -> Any:
        if name not in inst.frame:
            raise self._error(inst, f"value `{name}` is not available (freed or never set)")
        return inst.frame[name]

    # ---- loops ------------------------------------------------------------------------------

    def _loop(self, inst: Instance, ins: m.Loop) -> None:
        bound = int(self.eval(ins.bound, inst))
        tail = self.ex.rp.tails[inst.walk][inst.pc]
        for c in ins.carries:
            if c.init is not None:
                inst.frame[c.name] = self.eval(c.init, inst)
        end = inst.code[tail]
        assert isinstance(end, m.EndLoop)
        local_stop = end.stop is not None and any(
            isinstance(i, m.Eval) and i.output == end.stop for i in inst.code[inst.pc:tail])
        state = LoopState(ins.loop_id, inst.pc, tail, bound, ins.dynamic,
                          ins.dynamic and not ins.nospec and local_stop
                          and not self.ex.tp.no_speculation(inst.code, inst.pc, tail), ins.index,
                          accumulated={y.name: [] for y in end.yields if y.kind == "accumulated"})
        if bound <= 0:
            self._exit_loop(inst, state, end)
            return
        if ins.index:
            inst.frame[ins.index] = 0
        inst.loops.append(state)

    def _endloop(self, inst: Instance, ins: m.EndLoop) -> Blocked | None:
        loop = inst.loops[-1]
        if ins.stop is None and not loop.accumulated and loop.count + 1 < loop.bound:  # the common case, fast
            loop.count += 1
            if loop.index:
                inst.frame[loop.index] = loop.count
            inst.pc = loop.head
            return None
        for y in ins.yields:
            if y.kind == "accumulated":
                loop.accumulated[y.name].append(self._value(inst, y.name))
        loop.count += 1
        stop = bool(self._value(inst, ins.stop)) if ins.stop else False
        if loop.count >= loop.bound or (stop and not loop.speculative):
            inst.cut |= loop.dynamic and not stop  # stopped by its `max` bound: the request's end reports it
            inst.loops.pop()
            self._exit_loop(inst, loop, ins)
            return None  # the caller's pc += 1 leaves the loop
        if stop:  # speculative: the next iteration starts before this stop is applied
            loop.pending_stop = True
            inst.pending += 1
            loop.saved = {name: inst.frame.get(name, FREED) for name in self._loop_values(inst, loop, ins)}
            loop.checkpoints = {}
        if loop.index:
            inst.frame[loop.index] = loop.count
        inst.pc = loop.head  # the caller's pc += 1 enters the body
        return None

    def _loop_values(self, inst: Instance, loop: LoopState, end: m.EndLoop) -> set[str]:
        head = inst.code[loop.head]
        assert isinstance(head, m.Loop)
        return {c.name for c in head.carries} | {y.name for y in end.yields}

    def _exit_loop(self, inst: Instance, loop: LoopState, end: m.EndLoop) -> None:
        for y in end.yields:
            if y.kind == "accumulated":
                inst.frame[y.exposed] = list(loop.accumulated.get(y.name, []))
            elif y.name in inst.frame:
                inst.frame[y.exposed] = inst.frame[y.name]
        inst.pc = loop.tail

    def _apply_pending_stop(self, inst: Instance, ins: m.Instr) -> bool:
        """In a speculative iteration, before a visible effect, a RECV or its ENDLOOP: apply the previous
        iteration's stop. Returns True when the iteration was rolled back and the loop left."""
        loop = inst.speculating()
        if loop is None or (loop is not inst.loops[-1] and isinstance(ins, m.EndLoop)):
            return False
        loop.pending_stop = None
        inst.pending -= 1
        for (component, label), cp in loop.checkpoints.items():
            self.ex.components[component].restore(inst.request, label, cp)
        for name, value in loop.saved.items():
            if value is FREED:
                inst.frame.pop(name, None)
            else:
                inst.frame[name] = value
        while inst.loops[-1] is not loop:
            inst.loops.pop()
        inst.loops.pop()
        end = inst.code[loop.tail]
        assert isinstance(end, m.EndLoop)
        self._exit_loop(inst, loop, end)
        inst.pc = loop.tail + 1
        return True

    # ---- streams ------------------------------------------------------------------------------

    def _push(self, inst: Instance, ins: m.Push) -> Blocked | None:
        spec = self.ex.rp.streams[ins.stream]
        state = self.ex.states[inst.request]
        if not self._stream_alive(state, ins.stream):
            return None
        end = state.producer(ins.stream)
        if spec.capacity > 0 and end.in_flight >= spec.capacity:
            return Blocked(("credit", ins.stream))  # never for items held here (held_items.py says why)
        end.in_flight += 1
        item = self._value(inst, ins.value)
        policy = self.ex.rp.held_streams.get(ins.stream)
        if policy is None:
            self.ex.post(spec.consumer_rank, StreamItems(inst.request, ins.stream, self.ex.rank, [item]))
            return None
        end.pushed += 1  # the consumer will hold as many: it can form a chunk when the count completes one
        self.ex.held.push(spec.consumer_rank, inst.request, ins.stream, item, policy.ends_chunk(end.pushed))
        return None

    def _pop(self, inst: Instance, ins: m.Pop) -> Blocked | None:
        spec = self.ex.rp.streams[ins.stream]
        end = self.ex.states[inst.request].consumer(spec)
        before = end.buffer.consumed
        got = end.buffer.pop()
        if got is WAITING:
            return Blocked(("pop", ins.stream))
        if got is ENDED:
            raise self._error(inst, f"stream `{ins.stream}` ended and has nothing more to read")
        inst.frame[ins.output] = got.value
        self._credit(inst.request, spec.name, end, before)
        return None

    def _stream_alive(self, state: RequestState, stream: str) -> bool:
        """A stream read by `recv` in a flow this request does not run has no reader: its items are dropped.

        Decided once per (request, stream): every push asks, and the answer cannot change."""
        alive = state.has_reader.get(stream)
        if alive is None:
            alive = state.has_reader[stream] = self._has_reader(state, stream)
        return alive

    def _has_reader(self, state: RequestState, stream: str) -> bool:
        spec = self.ex.rp.streams[stream]
        if spec.consumer_walk is not None:
            return True
        init = state.init
        if init is None:
            return False
        readers = [f for f, streams in self.ex.rp.read_by_flow.items() if stream in streams]
        return any(self.ex.rp.flows[f].starts(lambda e, _k: self.evaluate(e, RequestEnv(self.consts, init)))
                   for f in readers)

    def stream_items(self, msg: StreamItems) -> None:
        spec = self.ex.rp.streams[msg.stream]
        state = self.ex.state(msg.request)
        end = state.consumer(spec)
        end.receive(msg.source, msg.items)
        if msg.closed:
            end.closed_by.add(msg.source)
            if end.closed_by >= set(spec.producer_ranks):
                end.buffer.close()
        self._serve(state, spec)

    def _serve(self, state: RequestState, spec: m.StreamSpec) -> None:
        """Fire consumer walks for ready chunks, or wake a waiting `recv`."""
        request = state.request
        end = state.consumer(spec)
        if spec.consumer_walk is None:
            for inst in state.instances.values():
                if inst.waiting == ("pop", spec.name):
                    self.ex.make_ready(inst)
            return
        while True:
            before = end.buffer.consumed
            chunk = end.buffer.poll()
            if chunk is None:
                break
            self._credit(request, spec.name, end, before)
            walk = self.ex.rp.walks[spec.consumer_walk]
            chunk_no = end.fired
            key = f"{spec.name}/{walk.name}#{chunk_no}"
            end.fired += 1
            end.live.add(key)
            arg = self.ex.rp.inputs.get((self.ex.rank, walk.name), [])
            for r in walk.ranks:
                needed = self.ex.rp.inputs.get((r, walk.name), [])
                inputs = {a: chunk.value for a in needed} if needed else {}
                if r == self.ex.rank:
                    self.ex.start(request, key, walk.name, {a: chunk.value for a in arg} or inputs, None)
                else:
                    # The walk's other ranks run its instances in chunk order (`prior`), one at a time.
                    self.ex.post(r, StartWalk(request, key, walk.name, inputs, None, chunk_no))
        self._report_stream_done(request, spec, end)

    def _credit(self, request: int, stream: str, end: ConsumerEnd, before: int) -> None:
        for source, n in end.credits(before).items():
            self.ex.post(source, StreamCredit(request, stream, n))

    def consumer_finished(self, state: RequestState, inst: Instance) -> None:
        stream = inst.key.split("/", 1)[0]
        spec = self.ex.rp.streams.get(stream)
        end = state.consumers.get(stream)
        if spec is None or end is None:
            return
        end.live.discard(inst.key)
        self._report_stream_done(inst.request, spec, end)

    def _report_stream_done(self, request: int, spec: m.StreamSpec, end: ConsumerEnd) -> None:
        if end.buffer.drained and not end.live and not end.done_reported:
            end.done_reported = True
            # The consumer walk's other ranks that emit may still be running its instances: the
            # coordinator waits for a Drained from each (see Executor.flow_done for why).
            drains = self.ex.rp.consumer_emitters.get(spec.name, []) if end.fired else []
            self.ex.send(COORDINATOR, StreamDone(request, spec.name, drains))
            for r in drains:
                self.ex.post(r, ConsumersEnded(request, spec.name, end.fired))

    def close_streams(self, request: int, flow: str) -> None:
        """After its flow ended and its instances here finished, a producer rank closes the flow's
        streams behind its last items."""
        for stream in self.ex.rp.fed_by_flow.get(flow, []):
            spec = self.ex.rp.streams[stream]
            if self.ex.rank in spec.producer_ranks:
                self.ex.post(spec.consumer_rank, StreamItems(request, stream, self.ex.rank, [], closed=True))

    # ---- flows --------------------------------------------------------------------------------

    def _next(self, inst: Instance, ins: m.Next) -> None:
        if inst.flow is None:
            return
        result = self._value(inst, ins.result) if ins.result else None
        walk = self.ex.rp.walks[inst.walk]
        table = self.ex.rp.flows[inst.flow.flow]
        init = self.ex.states[inst.request].init

        def cond(e: m.Expr, kind: str | None) -> Any:
            results = dict(inst.flow.results) | ({inst.walk: result} if ins.result else {})
            return self.evaluate(e, RequestEnv(self.consts, init, results=results, part=kind))

        try:
            step = next_step(table, inst.flow, inst.walk, result, walk.returns is not None, init, cond,
                             lambda w: self._walk_args(w), self._missing_input, inst.cut)
        except FlowError as err:
            raise self._error(inst, str(err)) from None
        if step is None:
            self.ex.flow_done(inst.request, inst.flow.flow, inst.flow.on_rank, cut_after(inst.flow, inst.walk, inst.cut))
            return
        spec = self.ex.rp.walks[step.walk]
        state, prior = on_ranks(step, spec.ranks)
        for r in spec.ranks:
            needed = self.ex.rp.inputs.get((r, step.walk), [])
            inputs = {a: v for a, v in step.inputs.items() if a in needed}
            self.ex.post(r, StartWalk(inst.request, step.key, step.walk, inputs, state, prior[r]))

    def _walk_args(self, walk: str) -> list[str]:
        return list(self.ex.rp.walks[walk].inputs)

    def _missing_input(self, name: str) -> Any:
        if self.ex.options.fake_inputs:
            return mock_input(name)
        raise FlowError("?", name, f"the request has no input `{name}`")

