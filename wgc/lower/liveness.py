"""Pass `liveness`: FREE every value on a rank right after its last use there.

A value read inside a loop but defined outside it stays alive until the loop
ends (later iterations read it again); loop-carried and yielded values stay
alive through their loop. A loop index dies at its last read in the body:
every iteration defines it afresh, and a zero-trip loop never does. Values
still needed at the end of the walk (its result) are never freed by the walk.
"""

from __future__ import annotations

from wgc.lower.ir import expr_uses
from wgc.plan.model import Emit, EndLoop, Eval, Free, Instr, KvSend, Loop, Next, Pop, Push, Recv, Run, Send
from wgc.semantics.loops import loop_spans


def reads(ins: Instr) -> list[str]:
    """The values an instruction reads."""
    if isinstance(ins, Run):
        return [n for lane in ins.args for a in lane for n in expr_uses(a)]
    if isinstance(ins, Eval):
        return expr_uses(ins.expr)
    if isinstance(ins, (Send, Push, Emit)):
        return [ins.value]
    if isinstance(ins, Loop):
        return [n for c in ins.carries if c.init is not None for n in expr_uses(c.init)] + expr_uses(ins.bound)
    if isinstance(ins, EndLoop):
        return ([ins.stop] if ins.stop else []) + [y.name for y in ins.yields]
    if isinstance(ins, Next) and ins.result:
        return [ins.result]
    return []


def writes(ins: Instr) -> list[str]:
    """The values an instruction defines."""
    if isinstance(ins, Run):
        return [o for o in ins.outputs if o]
    if isinstance(ins, (Eval, Pop)):
        return [ins.output]
    if isinstance(ins, Recv):
        return [ins.value]
    if isinstance(ins, Loop):
        return [c.name for c in ins.carries] + ([ins.index] if ins.index else [])
    if isinstance(ins, EndLoop):
        return [y.exposed for y in ins.yields]
    return []


def insert_frees(instrs: list[Instr], keep: set[str], inputs: list[str]) -> list[Instr]:
    """Return `instrs` with FREE instructions after each value's last use."""
    defined_at: dict[str, int] = {name: -1 for name in inputs}
    last_use: dict[str, int] = {}
    for i, ins in enumerate(instrs):
        for name in writes(ins):
            defined_at.setdefault(name, i)
        for name in reads(ins):
            last_use[name] = i
    loops = loop_spans(instrs)
    # Carries live across iterations. A loop index does not: every iteration's head writes it afresh,
    # and a loop that runs zero times never writes it, so it dies at its last read inside the body.
    carried = {c.name for ins in instrs if isinstance(ins, Loop) for c in ins.carries}
    for name in list(last_use):
        for start, end in loops:
            d = defined_at.get(name, -1)
            used_inside = start < last_use[name] <= end
            if used_inside and (d < start or name in carried):
                last_use[name] = max(last_use[name], end)
    ends = {start: end for start, end in loops}
    for name, at in last_use.items():
        if at in ends:  # read by a LOOP head (a carry's initial value): free once the loop is over
            last_use[name] = ends[at]
    frees: dict[int, list[str]] = {}
    for name, at in last_use.items():
        if name in keep or name not in defined_at or name.startswith("kv:"):
            continue
        frees.setdefault(at, []).append(name)
    out: list[Instr] = []
    for i, ins in enumerate(instrs):
        out.append(ins)
        if i in frees and not isinstance(ins, KvSend):
            out.append(Free(sorted(frees[i]), ins.src))
    return out
