"""Pass `assemble` helpers: the declarations a worker needs, copied into the plan as plain data."""

from __future__ import annotations

from wgc.check.context import Symbols
from wgc.check.policies import policy_values
from wgc.lang import ast
from wgc.lower.ir import WalkIR, all_ops
from wgc.placement.engines import default_prefill_token_budget, default_token_budget
from wgc.placement.memory import MemoryTable, capacity_of
from wgc.placement.schema import Engine, Placement
from wgc.plan.model import ComponentSpec, EntrySpec, MemoryRow, ParamSpec, Setting, StreamSpec, WalkSpec


def _literal(lit: ast.Node | None) -> int | float | str | bool | None:
    return getattr(lit, "value", None) if lit is not None else None


def _type_text(t: ast.TypeRef) -> str:
    if not t.bracketed:
        return t.name
    args = ", ".join(str(a.value) if isinstance(a, ast.DimInt) else _type_text(a) for a in t.args)
    return f"{t.name}[{args}; {t.dtype}]" if t.dtype else f"{t.name}[{args}]"


def param_specs(program: ast.Program) -> list[ParamSpec]:
    out = []
    for p in program.of(ast.Param):
        low, high = (_literal(p.bounds[0]), _literal(p.bounds[1])) if p.bounds else (None, None)
        choices = [_literal(c) for c in p.choices] if p.choices else None
        out.append(ParamSpec(p.name, p.type, _literal(p.default), low, high, choices))
    return out


def _engine_settings(engine: Engine) -> dict[str, int | float | str | bool | list[int]]:
    out: dict[str, int | float | str | bool | list[int]] = {
        "page_size": engine.page_size,
        "max_batch": engine.max_batch,
        "cuda_graph_buckets": list(engine.cuda_graph_buckets),
        "token_budget": engine.token_budget,
        "prefill_token_budget": engine.prefill_token_budget,
        "prefix_caching": engine.prefix_caching,
    }
    if engine.kv_memory_fraction is not None:
        out["kv_memory_fraction"] = engine.kv_memory_fraction
    if engine.kv_memory is not None:
        out["kv_memory"] = engine.kv_memory
    return out


def _default_engine(device: str, engine: Engine) -> Engine:
    """The settings a component gets from no table (the token budget follows its max_batch)."""
    budget = default_token_budget(device, engine.max_batch)
    return Engine(token_budget=budget, prefill_token_budget=default_prefill_token_budget(device, budget))


def component_specs(program: ast.Program, placement: Placement) -> list[ComponentSpec]:
    """Components with their class as an importable path (`wgc.models.orpheus.LanguageModel`)."""
    modules = {i.alias: ".".join(i.module) for i in program.of(ast.Import)}
    out = []
    for c in program.of(ast.Component):
        entries = [EntrySpec(e.name, [_type_text(a.type) for a in e.args], _type_text(e.returns) if e.returns else None)
                   for e in c.entries()]
        consts = {k.name: _literal(k.value) for k in c.consts()}
        attrs = {a.name: (a.value.id if isinstance(a.value, ast.Name) else a.value.value) for a in c.attrs()}
        where = placement.component(c.name)
        ranks = list(where.ranks) if where else [0]
        settings = _engine_settings(where.engine) if where else {}
        cls = ".".join((modules.get(c.cls[0], c.cls[0]), *c.cls[1:]))
        out.append(ComponentSpec(c.name, cls, c.engine, entries, consts, list(c.labels()), attrs, ranks,
                                 where.tp if where else 1, settings))
    return out


def stream_specs(program: ast.Program, symbols: Symbols, placement: Placement, walks: list[WalkIR]) -> list[StreamSpec]:
    pushes: dict[str, set[int]] = {}
    pops: dict[str, int] = {}
    arg_rank: dict[str, int] = {}
    for w in walks:
        ops = all_ops(w.body)
        for op in ops:
            if op.kind == "push":
                pushes.setdefault(op.stream, set()).add(op.home)
            elif op.kind == "pop":
                pops.setdefault(op.stream, op.home)
        if w.args:
            user = next((op for op in ops if w.args[0] in op.uses()), None)
            arg_rank[w.name] = user.home if user is not None else (w.ranks[0] if w.ranks else 0)
    out = []
    for s in program.of(ast.Stream):
        info = symbols.streams[s.name]
        consumer = info.consumer_walks[0].name if info.consumer_walks else None
        rank = arg_rank.get(consumer, 0) if consumer else pops.get(s.name, 0)
        capacity = capacity_of(placement, s)
        out.append(StreamSpec(s.name, str(info.item), str(info.chunk), s.policy.name, policy_values(s.policy) or {},
                              s.at_end or "flush", s.after_end or "stop", capacity, sorted(pushes.get(s.name, ())),
                              rank, consumer))
    return out


def walk_specs(symbols: Symbols, walks: list[WalkIR]) -> list[WalkSpec]:
    out = []
    for w in walks:
        info = symbols.walks[w.name]
        out.append(WalkSpec(w.name, [str(t) for t in info.args], str(info.returns) if info.returns else None,
                            info.decl.on, list(w.ranks), w.end_rank, list(w.args)))
    return out


def memory_rows(table: MemoryTable) -> list[MemoryRow]:
    rows = []
    for r in table.ranks:
        by_kind: dict[str, int] = {}
        for line in r.lines:
            by_kind[line.kind] = by_kind.get(line.kind, 0) + line.bytes
        rows.append(MemoryRow(r.rank, r.budget or 0, by_kind.get("weights", 0), by_kind.get("kv pool", 0),
                              by_kind.get("cuda graphs", 0), by_kind.get("stream", 0), by_kind.get("kv mirror", 0)))
    return rows


def setting_rows(program: ast.Program, placement: Placement) -> list[Setting]:
    """Every effective setting with where its value came from: default, model or placement."""
    rows: list[Setting] = []
    for p in program.of(ast.Param):
        if p.default is not None:
            rows.append(Setting(f"param.{p.name}", _literal(p.default), "model"))
    for c in placement.components:
        defaults = _engine_settings(_default_engine(placement.cluster.device, c.engine))
        for key, value in _engine_settings(c.engine).items():
            default = defaults.get(key)
            rows.append(Setting(f"{c.name}.{key}", value, "default" if value == default else "placement"))
    for s in program.of(ast.Stream):
        settings = placement.stream(s.name)
        source = "placement" if settings is not None and settings.capacity else "model" if s.capacity else "default"
        rows.append(Setting(f"stream.{s.name}.capacity", capacity_of(placement, s), source))
    rows.append(Setting("cluster.ranks", placement.cluster.ranks, "placement"))
    rows.append(Setting("cluster.device", placement.cluster.device, "placement"))
    if placement.serve.allow_modules:  # read by `wgc run` (runtime/process/modules.py)
        rows.append(Setting("serve.allow_modules", ",".join(placement.serve.allow_modules), "placement"))
    rows.extend(Setting(f"serve.{name}", value, "placement") for name, value in placement.serve.limits)  # limits.py
    return sorted(rows, key=lambda r: r.key)
