"""`[defaults]` and `[components.*]`: every program component onto ranks, with TP and engine settings."""

from __future__ import annotations

from wgc.diag.diagnostic import Note
from wgc.diag.sink import did_you_mean
from wgc.lang.span import Span
from wgc.placement.build_engine import build_engine, check_engine_table
from wgc.placement.facts import ComponentFacts, ProgramFacts
from wgc.placement.fields import Ctx
from wgc.placement.keys import Fields
from wgc.placement.schema import Cluster, ComponentPlacement


def build_components(top: Fields, facts: ProgramFacts, cluster: Cluster, ctx: Ctx) -> dict[str, ComponentPlacement]:
    defaults = top.table("defaults")
    default_engine = defaults.table("engine") if defaults else None
    if default_engine is not None:
        check_engine_table(default_engine, cluster, ctx)
    listed = top.names("components")
    for name, (_, node) in listed.items():
        if name not in facts.components:
            ctx.error("P008", f"unknown component `{name}`: the program declares no such component", node.key,
                      did_you_mean(name, facts.components) or (_declared(facts),))
    out: dict[str, ComponentPlacement] = {}
    for name, comp in facts.components.items():
        entry = listed.get(name)
        if entry is None:
            placed = _by_default(comp, top, defaults, default_engine, cluster, ctx)
        elif isinstance(entry[0], Fields):
            placed = _from_table(comp, entry[0], default_engine, cluster, ctx)
        elif isinstance(entry[0], tuple):
            placed = _from_ranks(comp, entry[0], entry[1].span, default_engine, cluster, ctx)
        else:
            placed = None
        if placed is not None:
            out[name] = placed
    return out


def _declared(facts: ProgramFacts) -> str:
    return "the program's components: " + (", ".join(facts.components) or "none")


def _by_default(
    comp: ComponentFacts, top: Fields, defaults: Fields | None, engine: Fields | None, cluster: Cluster, ctx: Ctx
) -> ComponentPlacement | None:
    ranks = defaults.ints("ranks") if defaults else None
    if ranks is None:
        if defaults is None or not defaults.has("ranks"):  # an invalid default was reported already
            where = top.key_span("components")
            ctx.error("P013", f"component `{comp.name}` has no placement", where,
                      (f"place it with `[components.{comp.name}] ranks = [0]`, or every unlisted component "
                       "with `[defaults] ranks = [0]`",), (Note(f"`{comp.name}` is declared here", comp.span),))
        return None
    at = defaults.at("ranks")
    return _from_ranks(comp, ranks, at.span if at else defaults.node.key, engine, cluster, ctx)


def _from_ranks(
    comp: ComponentFacts, ranks: tuple[int, ...], span: Span, engine: Fields | None, cluster: Cluster, ctx: Ctx
) -> ComponentPlacement:
    settings = build_engine(comp.engine, comp.name, None, engine, span, cluster.device, ctx)
    return ComponentPlacement(comp.name, comp.engine, ranks, 1, None, settings, span)


def _from_table(
    comp: ComponentFacts, f: Fields, default_engine: Fields | None, cluster: Cluster, ctx: Ctx
) -> ComponentPlacement | None:
    ranks = f.ints("ranks")
    own = f.table("engine")
    if own is not None:
        check_engine_table(own, cluster, ctx)
    settings = build_engine(comp.engine, comp.name, own, default_engine, f.node.key, cluster.device, ctx)
    if ranks is None:
        return None  # missing or invalid: reported by the reader
    tp = f.int("tp") or 1
    if len(ranks) % tp:
        at = f.at("tp")
        ctx.error("P014", f"tp = {tp} does not divide the {len(ranks)} rank(s) of {comp.name}",
                  at.span if at else f.node.key,
                  (f"{comp.name} holds one copy per {tp} ranks: give it a multiple of {tp} ranks",))
        return None
    return ComponentPlacement(comp.name, comp.engine, ranks, tp, f.str("routing"), settings, f.node.key)
