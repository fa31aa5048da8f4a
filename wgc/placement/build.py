"""The merged TOML tree → a `Placement`, checked against the program's facts."""

from __future__ import annotations

import re

from wgc.placement.build_cluster import build_cluster, build_transport
from wgc.placement.build_components import build_components
from wgc.placement.build_streams import build_streams
from wgc.placement.build_walks import build_walks, check_routing
from wgc.placement.document import Node
from wgc.placement.facts import ProgramFacts
from wgc.placement.fields import Ctx
from wgc.placement.keys import TOP, read_table
from wgc.placement.schema import Placement, Serve
from wgc.placement.serve_limits import limits_of


def build_placement(root: Node, facts: ProgramFacts, file: str, sources: tuple[str, ...], ctx: Ctx) -> Placement | None:
    cluster = build_cluster(root.get("cluster"), ctx)
    top = read_table(root, TOP, ctx)
    if top is None or cluster is None:
        return None
    model, at = top.str("model"), top.at("model")
    if model is not None and at is not None and facts.model is not None and _norm(model) != _norm(facts.model):
        ctx.error("P007", f"this placement is for model `{model}`, but the program is model `{facts.model}`", at.span,
                  ("use a placement written for this model, or a generic one such as placements/cpu.toml",))
        return None
    comps = build_components(top, facts, cluster, ctx)
    before = len(ctx.diagnostics)
    walks = build_walks(top, facts, comps, ctx)
    if len(ctx.diagnostics) == before:  # a rejected pin would show up again as an unpinned call
        check_routing(facts, comps, walks, ctx)
    streams = build_streams(top, facts, ctx)
    transport = build_transport(top.table("transport"), cluster, ctx)
    ordered = tuple(comps[name] for name in facts.components if name in comps)
    serve = top.table("serve")
    modules = serve.get("allow_modules", ()) if serve is not None else ()
    return Placement(file, sources, model, cluster, ordered, walks, streams, transport,
                     Serve(tuple(modules), limits_of(serve)))


def _norm(name: str) -> str:
    """Model names compare without case or separators: `Qwen3-Omni` is `qwen3_omni`."""
    return re.sub(r"[^a-z0-9]", "", name.lower())
