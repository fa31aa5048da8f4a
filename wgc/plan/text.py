"""The stable text form of a plan (`wgc inspect`): per-rank schedules, memory, captures, settings.

Golden files under tests/golden/ hold this text; any change here shows up as a
golden diff, so the format changes only on purpose.
"""

from __future__ import annotations

from wgc.plan import model as m
from wgc.plan.ports import host_lines

_PRECEDENCE = {"or": 1, "and": 2, "==": 4, "!=": 4, "<": 4, "<=": 4, ">": 4, ">=": 4, "in": 4,
               "+": 5, "-": 5, "*": 6, "/": 6, "%": 6}


def expr_text(e: m.Expr, outer: int = 0) -> str:
    if isinstance(e, m.ELit):
        if isinstance(e.value, bool):
            return "true" if e.value else "false"
        return f'"{e.value}"' if isinstance(e.value, str) else str(e.value)
    if isinstance(e, m.EVal):
        return e.name
    if isinstance(e, m.EParam):
        return f"${e.name}"
    if isinstance(e, m.EConst):
        return f"{e.component}.{e.name}"
    if isinstance(e, m.EReq):
        return f"request.{e.field}"
    if isinstance(e, m.EResult):
        return f"{e.walk}.result"
    if isinstance(e, m.EPartKind):
        return "part.kind"
    if isinstance(e, m.EUnary):
        inner = expr_text(e.operand, 7)
        return f"not {inner}" if e.op == "not" else f"-{inner}"
    if isinstance(e, m.EIndex):
        return f"{expr_text(e.base, 8)}[{expr_text(e.index)}]"
    prec = _PRECEDENCE.get(e.op, 3)
    text = f"{expr_text(e.left, prec)} {e.op} {expr_text(e.right, prec + 1)}"
    return f"({text})" if prec < outer else text


def _args(args: list[m.Expr]) -> str:
    return ", ".join(expr_text(a) for a in args)


def instr_text(ins: m.Instr) -> str:
    if isinstance(ins, m.Run):
        lanes = []
        for out, args, label in zip(ins.outputs, ins.args, ins.labels):
            call = f"{ins.component}.{ins.entry}({_args(args)})" + (f" [{label}]" if label else "")
            lanes.append(f"{out} = {call}" if out else call)
        graph = f"  graph #{ins.graph_id} buckets {ins.buckets}" if ins.graph_id >= 0 else ""
        fused = f"  fused x{len(lanes)}" if len(lanes) > 1 else ""
        return "RUN      " + "; ".join(lanes) + fused + graph
    if isinstance(ins, m.Eval):
        return f"EVAL     {ins.output} = {expr_text(ins.expr)}"
    if isinstance(ins, m.Send):
        return f"SEND     {ins.value} -> rank {ins.peer}  tag {ins.tag}"
    if isinstance(ins, m.Recv):
        return f"RECV     {ins.value} <- rank {ins.peer}  tag {ins.tag}"
    if isinstance(ins, m.Loop):
        kind = "until/max" if ins.dynamic else "count"
        extra = "".join([f" as {ins.index}" if ins.index else "",
                         *(f" carry {c.name}" + (f" = {expr_text(c.init)}" if c.init else "") for c in ins.carries),
                         " nospec" if ins.nospec else ""])
        return f"LOOP     #{ins.loop_id} {kind} {expr_text(ins.bound)}{extra}"
    if isinstance(ins, m.EndLoop):
        stop = f" stop {ins.stop}" if ins.stop else ""
        ys = "".join(f" {y.kind} {y.name}" + (f" as {y.exposed}" if y.exposed != y.name else "") for y in ins.yields)
        return f"ENDLOOP  #{ins.loop_id}{stop}{ys}"
    if isinstance(ins, m.Push):
        return f"PUSH     {ins.value} -> stream {ins.stream}"
    if isinstance(ins, m.Pop):
        return f"POP      {ins.output} <- stream {ins.stream}"
    if isinstance(ins, m.Emit):
        return f"EMIT     {ins.modality} {ins.value}"
    if isinstance(ins, m.Fork):
        return f"FORK     {ins.component}.{ins.target} <- {ins.component}.{ins.source}"
    if isinstance(ins, m.KvSend):
        return f"KVSEND   {ins.component}.{ins.label} -> rank {ins.peer}  tag {ins.tag}"
    if isinstance(ins, m.KvRecv):
        return f"KVRECV   {ins.component}.{ins.label} <- rank {ins.peer}  tag {ins.tag}"
    if isinstance(ins, m.Free):
        return "FREE     " + ", ".join(ins.values)
    if isinstance(ins, m.Next):
        return "NEXT" + (f"     result {ins.result}" if ins.result else "")
    raise ValueError(f"unknown instruction {type(ins).__name__}")


def schedule_lines(rank: m.RankSpec) -> list[str]:
    out = [f"== rank {rank.rank} ({rank.device}, {rank.host}) =="]
    for ws in rank.schedules:
        inputs = f"  inputs: {', '.join(ws.inputs)}" if ws.inputs else ""
        out.append(f"walk {ws.walk}{inputs}")
        depth = 0
        for i, ins in enumerate(ws.instructions):
            if isinstance(ins, m.EndLoop):
                depth -= 1
            pos = f"@{ins.src.line}:{ins.src.column}"
            out.append(f"  {i:>3}  {'  ' * depth}{instr_text(ins):<72} {pos}")
            if isinstance(ins, m.Loop):
                depth += 1
    return out


def plan_text(plan: m.Plan) -> str:
    out = [f"plan {plan.model}  source {plan.source_name}  placement {plan.placement_name}", ""]
    out.append("walks:")
    for w in plan.walks:
        on = f" on {w.on}" if w.on else ""
        ret = f" -> {w.returns}" if w.returns else ""
        out.append(f"  {w.name}({', '.join(w.args)}){ret}{on}  ranks {w.ranks}  ends on rank {w.end_rank}")
    out.append("streams:")
    for s in plan.streams:
        args = ", ".join(f"{k}={v}" for k, v in s.policy_args.items())
        consumer = f"walk {s.consumer_walk}" if s.consumer_walk else "pop"
        out.append(f"  {s.name}: {s.item} -> {s.chunk} {s.policy}({args}) at_end {s.at_end} after_end {s.after_end} "
                   f"capacity {s.capacity}  ranks {s.producer_ranks} -> {s.consumer_rank} ({consumer})")
    out.append("flows:")
    for f in plan.flows:
        when = f" when {expr_text(f.when)}" if f.when else ""
        out.append(f"  flow {f.name}{when}")
        for node, outs in f.transitions.items():
            for t in outs:
                cond = f" when {expr_text(t.when)}" if t.when else ""
                out.append(f"    {node} -> {t.target}{cond}")
        for e in f.eaches:
            for arm in e.arms:
                cond = f" when {expr_text(arm.when)}" if arm.when else ""
                out.append(f"    each {e.name}: {arm.kind} -> {' -> '.join(arm.walks)}{cond}")
    out.append("")
    out.extend(host_lines(plan))
    for rank in plan.ranks:
        out.extend(schedule_lines(rank))
        out.append("")
    out.extend(_memory(plan))
    out.append("captures:")
    out.extend(f"  #{c.graph_id} rank {c.rank} {c.component}.{c.entry} in {c.walk} buckets {c.buckets}"
               for c in plan.captures)
    if not plan.captures:
        out.append("  none (eager execution)")
    out.append("settings:")
    out.extend(f"  {s.key} = {s.value}  ({s.source})" for s in plan.settings)
    return "\n".join(out) + "\n"


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def _memory(plan: m.Plan) -> list[str]:
    out = ["memory per rank:", f"  {'rank':<5} {'weights':>14} {'kv pool':>14} {'kv mirror':>14} {'cuda graphs':>14} "
           f"{'streams':>14} {'total':>14} {'capacity':>14}"]
    for r in plan.memory:
        total = r.weights_bytes + r.kv_bytes + r.mirror_bytes + r.graph_bytes + r.stream_bytes
        cap = _mib(r.capacity_bytes) if r.capacity_bytes else "unbounded"
        out.append(f"  {r.rank:<5} {_mib(r.weights_bytes):>14} {_mib(r.kv_bytes):>14} {_mib(r.mirror_bytes):>14} "
                   f"{_mib(r.graph_bytes):>14} {_mib(r.stream_bytes):>14} {_mib(total):>14} {cap:>14}")
    return out
