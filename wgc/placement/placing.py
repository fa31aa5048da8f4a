"""Components onto ranks (`[defaults]`, `[components.*]`), pins (`[walks.*]`) and stream settings
(`[streams.*]`), checked against the program's facts.

A pin names whole copies of what it places. Inside a pinned branch the branch pin wins over
the walk's component pin. A component with several copies and no routing policy must have
every call pinned to exactly one copy.
"""

from __future__ import annotations

from collections.abc import Iterable

from wgc.diag.diagnostic import Note
from wgc.diag.sink import did_you_mean
from wgc.lang.span import Span
from wgc.placement.document import Node
from wgc.placement.engines import build_engine, check_engine_table
from wgc.placement.facts import CallSite, ComponentFacts, ProgramFacts, symbolic_dims
from wgc.placement.fields import Ctx
from wgc.placement.schema import Cluster, ComponentPlacement, Pin, Ranks, StreamSettings, WalkPlacement
from wgc.placement.spec import ComponentTable, EngineTable, Entry, TopTable


def place_components(top: TopTable, facts: ProgramFacts, cluster: Cluster, ctx: Ctx) -> dict[str, ComponentPlacement]:
    """Every program component that can be placed, by its own entry or by `[defaults]`."""
    defaults = top.defaults
    engine = defaults.engine if defaults else None
    if engine is not None:
        check_engine_table(engine, cluster, ctx)
    listed = _known(top.components, "P008", "component", facts.components, ctx)
    out: dict[str, ComponentPlacement] = {}
    for name, comp in facts.components.items():
        entry, node = listed.get(name, (None, None))
        if isinstance(entry, ComponentTable):  # `[components.llm]`: ranks, tp, routing, engine
            placed = _place(comp, entry.ranks, entry.node.key, entry, cluster, engine, ctx)
        elif entry is not None and node is not None:  # `llm = [0, 1]`
            placed = _place(comp, entry, node.span, None, cluster, engine, ctx)
        elif defaults is not None and (at := defaults.at("ranks")) is not None:
            placed = _place(comp, defaults.ranks, at.span, None, cluster, engine, ctx)
        else:
            placed = None
            if defaults is None or not defaults.has("ranks"):  # an invalid default was reported already
                ctx.error("P013", f"component `{name}` has no placement", top.key_span("components"),
                          (f"place it with `[components.{name}] ranks = [0]`, or every unlisted component "
                           "with `[defaults] ranks = [0]`",), (Note(f"`{name}` is declared here", comp.span),))
        if placed is not None:
            out[name] = placed
    return out


def _known(listed: dict[str, Entry] | None, code: str, kind: str, declared: Iterable[str], ctx: Ctx
           ) -> dict[str, Entry]:
    """The entries of a table keyed by program names; each name the program does not declare is
    reported (a component, walk or stream)."""
    for name, (_, node) in (listed or {}).items():
        if name not in declared:
            ctx.error(code, f"unknown {kind} `{name}`: the program declares no such {kind}", node.key,
                      did_you_mean(name, declared) or (f"the program's {kind}s: " + (", ".join(declared) or "none"),))
    return {name: entry for name, entry in (listed or {}).items() if name in declared}


def _place(comp: ComponentFacts, ranks: Ranks | None, span: Span, t: ComponentTable | None, cluster: Cluster,
           default_engine: EngineTable | None, ctx: Ctx) -> ComponentPlacement | None:
    """`comp` on `ranks` (None: missing or invalid, reported by the reader), with its table's `tp`,
    `routing` and `engine` when it has one."""
    own = t.engine if t is not None else None
    if own is not None:
        check_engine_table(own, cluster, ctx)
    settings = build_engine(comp.engine, comp.name, own, default_engine, span, cluster.device, ctx)
    tp = t.get("tp") if t is not None else 1
    if ranks is None:
        return None
    if len(ranks) % tp:
        at = t.at("tp") if t is not None else None
        ctx.error("P014", f"tp = {tp} does not divide the {len(ranks)} rank(s) of {comp.name}", at.span if at else span,
                  (f"{comp.name} holds one copy per {tp} ranks: give it a multiple of {tp} ranks",))
        return None
    return ComponentPlacement(comp.name, comp.engine, ranks, tp, t.routing if t else None, settings, span)


def place_walks(top: TopTable, facts: ProgramFacts, comps: dict[str, ComponentPlacement], ctx: Ctx
                ) -> tuple[WalkPlacement, ...]:
    """`[walks.*]`: each walk's component pins and branch pins, whole copies of what they place."""
    out = []
    for name, (t, node) in _known(top.walks, "P009", "walk", facts.walks, ctx).items():
        walk, declared = facts.walks[name], facts.branches_declared.get(name, ())
        pins = []
        for cname, (ranks, at) in (t.components or {}).items():
            if cname not in facts.components:
                ctx.error("P008", f"unknown component `{cname}`", at.key, did_you_mean(cname, facts.components))
            elif cname not in walk.components:
                calls = ", ".join(sorted(walk.components)) or "no component"
                ctx.error("P016", f"walk `{name}` never calls component `{cname}`", at.key,
                          (f"walk `{name}` calls {calls}",), (Note(f"walk `{name}` is declared here", walk.span),))
            elif cname in comps and _whole_copies(comps[cname], ranks, at, ctx):
                pins.append(Pin(cname, ranks, at.span))
        branches = []
        for bname, (ranks, at) in (t.branches or {}).items():
            if bname not in declared:
                known = f"its branches: {', '.join(declared)}" if declared else f"walk `{name}` has no `parallel` block"
                ctx.error("P010", f"walk `{name}` has no branch `{bname}`", at.key,
                          (*did_you_mean(bname, declared), known))
            elif all(_whole_copies(comps[c], ranks, at, ctx) for c in sorted(walk.in_branch(bname)) if c in comps):
                branches.append(Pin(bname, ranks, at.span))
        out.append(WalkPlacement(name, tuple(pins), tuple(branches), node.key))
    return tuple(out)


def _whole_copies(comp: ComponentPlacement, ranks: Ranks, node: Node, ctx: Ctx) -> bool:
    outside = [r for r in ranks if r not in comp.ranks]
    if outside:
        ctx.error("P015", f"rank {outside[0]} does not hold component `{comp.name}`", node.span,
                  (f"`{comp.name}` is on ranks {', '.join(map(str, comp.ranks))}: pin it within those, or add the "
                   "rank to its `ranks`",))
        return False
    split = [c for c in comp.copies if 0 < len(set(c) & set(ranks)) < len(c)]
    if split:
        group = ", ".join(map(str, split[0]))
        ctx.error("P015", f"ranks {group} form one tensor-parallel copy of `{comp.name}`: pin all of them or none",
                  node.span, (f"`{comp.name}` has tp = {comp.tp}",))
        return False
    return True


def check_routing(facts: ProgramFacts, comps: dict[str, ComponentPlacement], walks: tuple[WalkPlacement, ...],
                  ctx: Ctx) -> None:
    """A component with several copies needs `routing`, unless every call is pinned to one copy."""
    pinned = {w.name: w for w in walks}
    for comp in comps.values():
        if len(comp.copies) < 2 or comp.routing is not None:
            continue
        loose = [w for w in facts.walks.values()
                 if any(c.component == comp.name and not _one_copy(c, comp, pinned.get(w.name)) for c in w.calls)]
        if loose:
            names = ", ".join(f"`{w.name}`" for w in loose)
            ctx.error("P017", f"`{comp.name}` has {len(comp.copies)} copies but no routing policy", comp.span,
                      (f"walks calling it on no single copy: {names}",
                       'set routing = "least_loaded" (data-parallel replicas) or "mirror" (every copy runs the '
                       "call), or pin those calls to one copy in [walks.NAME.components] / [walks.NAME.branches]"),
                      (Note(f"walk `{loose[0].name}` is declared here", loose[0].span),))


def _one_copy(call: CallSite, comp: ComponentPlacement, walk: WalkPlacement | None) -> bool:
    if walk is None:
        return False
    pin = next((walk.branch_pin(b) for b in reversed(call.branches) if walk.branch_pin(b)), None)
    pin = pin or walk.component_pin(comp.name)
    return pin is not None and sum(1 for c in comp.copies if set(c) <= set(pin.ranks)) == 1


def place_streams(top: TopTable, facts: ProgramFacts, ctx: Ctx) -> tuple[StreamSettings, ...]:
    """`[streams.*]`: buffer capacity and item size of the program's streams."""
    out = []
    for name, (t, node) in _known(top.streams, "P011", "stream", facts.streams, ctx).items():
        stream = facts.streams[name]
        symbolic = symbolic_dims(stream.item)
        for dim, (_, at) in (t.dims or {}).items():
            if dim not in symbolic:
                ctx.error("P021", f"the item type of stream `{name}` has no dim `{dim}`", at.key,
                          (*did_you_mean(dim, symbolic), f"its symbolic dims: {', '.join(symbolic) or 'none'}"))
        cap, cap_at = t.capacity, t.at("capacity")
        if cap is not None and cap_at is not None and stream.min_capacity and cap < stream.min_capacity:
            ctx.error("P021", f"capacity {cap} of stream `{name}` is below one chunk ({stream.min_capacity} items)",
                      cap_at.span, ("the consumer could never receive a chunk: the producer would block forever",))
        dims = tuple((dim, value) for dim, (value, _) in (t.dims or {}).items() if dim in symbolic)
        out.append(StreamSettings(name, cap, t.item_bytes, dims, node.key))
    return tuple(out)
