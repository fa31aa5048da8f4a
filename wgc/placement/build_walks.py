"""`[walks.*]`: a component on other ranks in one walk, and `parallel` branches pinned to ranks.

A pin names whole copies of what it places. Inside a pinned branch the branch pin wins over
the walk's component pin. A component with several copies and no routing policy must have
every call pinned to exactly one copy.
"""

from __future__ import annotations

from wgc.diag.diagnostic import Note
from wgc.diag.sink import did_you_mean
from wgc.placement.document import Node
from wgc.placement.facts import CallSite, ProgramFacts, WalkFacts
from wgc.placement.fields import Ctx
from wgc.placement.keys import Fields
from wgc.placement.schema import ComponentPlacement, Pin, Ranks, WalkPlacement


def build_walks(top: Fields, facts: ProgramFacts, comps: dict[str, ComponentPlacement], ctx: Ctx) -> tuple[WalkPlacement, ...]:
    out = []
    for name, (f, node) in top.names("walks").items():
        walk = facts.walks.get(name)
        if walk is None:
            ctx.error("P009", f"unknown walk `{name}`: the program declares no such walk", node.key,
                      did_you_mean(name, facts.walks) or ("the program's walks: " + (", ".join(facts.walks) or "none"),))
            continue
        if not isinstance(f, Fields):
            continue
        pins = _component_pins(walk, f, facts, comps, ctx)
        branches = _branch_pins(walk, f, facts.branches_declared.get(name, ()), comps, ctx)
        out.append(WalkPlacement(name, pins, branches, node.key))
    return tuple(out)


def _component_pins(
    walk: WalkFacts, f: Fields, facts: ProgramFacts, comps: dict[str, ComponentPlacement], ctx: Ctx
) -> tuple[Pin, ...]:
    pins = []
    for cname, (ranks, node) in f.rank_map("components").items():
        if cname not in facts.components:
            ctx.error("P008", f"unknown component `{cname}`", node.key, did_you_mean(cname, facts.components))
        elif cname not in walk.components:
            calls = ", ".join(sorted(walk.components)) or "no component"
            ctx.error("P016", f"walk `{walk.name}` never calls component `{cname}`", node.key,
                      (f"walk `{walk.name}` calls {calls}",), (Note(f"walk `{walk.name}` is declared here", walk.span),))
        elif cname in comps and _whole_copies(comps[cname], ranks, node, ctx):
            pins.append(Pin(cname, ranks, node.span))
    return tuple(pins)


def _branch_pins(
    walk: WalkFacts, f: Fields, declared: tuple[str, ...], comps: dict[str, ComponentPlacement], ctx: Ctx
) -> tuple[Pin, ...]:
    pins = []
    for bname, (ranks, node) in f.rank_map("branches").items():
        if bname not in declared:
            shown = ", ".join(declared)
            known = f"its branches: {shown}" if declared else f"walk `{walk.name}` has no `parallel` block"
            ctx.error("P010", f"walk `{walk.name}` has no branch `{bname}`", node.key, (*did_you_mean(bname, declared), known))
            continue
        callees = [comps[c] for c in sorted(walk.in_branch(bname)) if c in comps]
        if all(_whole_copies(c, ranks, node, ctx) for c in callees):
            pins.append(Pin(bname, ranks, node.span))
    return tuple(pins)


def _whole_copies(comp: ComponentPlacement, ranks: Ranks, node: Node, ctx: Ctx) -> bool:
    holds = ", ".join(map(str, comp.ranks))
    outside = [r for r in ranks if r not in comp.ranks]
    if outside:
        ctx.error("P015", f"rank {outside[0]} does not hold component `{comp.name}`", node.span,
                  (f"`{comp.name}` is on ranks {holds}: pin it within those, or add the rank to its `ranks`",))
        return False
    split = [c for c in comp.copies if 0 < len(set(c) & set(ranks)) < len(c)]
    if split:
        group = ", ".join(map(str, split[0]))
        ctx.error("P015", f"ranks {group} form one tensor-parallel copy of `{comp.name}`: pin all of them or none",
                  node.span, (f"`{comp.name}` has tp = {comp.tp}",))
        return False
    return True


def check_routing(facts: ProgramFacts, comps: dict[str, ComponentPlacement], walks: tuple[WalkPlacement, ...], ctx: Ctx) -> None:
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
