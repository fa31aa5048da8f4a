"""The public entry: read a placement file (and its bases), check it against a program, in the
one pass the package docstring follows."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path

from wgc.diag.diagnostic import Diagnostic, sort_key
from wgc.lang import ast
from wgc.placement.cluster import build_cluster, build_transport, warn_tp_across_hosts
from wgc.placement.document import Node, load_with_bases
from wgc.placement.facts import ProgramFacts, program_facts
from wgc.placement.fields import Ctx
from wgc.placement.memory import estimate, fit_diagnostics
from wgc.placement.placing import check_routing, place_components, place_streams, place_walks
from wgc.placement.schema import Placement, Serve
from wgc.placement.spec import LIMIT_KEYS, ClusterTable, TopTable, read


def load_placement(path: Path, program: ast.Program, text: str | None = None, held: Mapping[str, str] | None = None
                   ) -> tuple[Placement | None, list[Diagnostic]]:
    """The placement in `path` checked against `program` and no diagnostics, its warnings (W
    codes) in `placement.warnings`; or None and every error and warning found. `text`: the file's
    text when the caller holds it (`wgc lsp`: the editor's copy, saved or not); its bases are read
    from disk, relative to `path`, unless `held` has their text (by `document.identity`: an editor's
    open copies).

    Never raises on any input. The memory fit is checked once everything else is valid
    (a partial placement would give a misleading estimate).
    """
    tree, sources, diags = load_with_bases(Path(path), text, held)
    if tree is None or diags:  # a broken file or `extends` chain: anything further would be a cascade
        return None, sorted(diags, key=sort_key)
    facts = program_facts(program)
    ctx = Ctx(diags)
    placement = assemble(tree, facts, str(path), sources, ctx)
    if placement is not None and not any(d.is_error for d in ctx.diagnostics):
        ctx.diagnostics.extend(fit_diagnostics(estimate(placement, facts), placement, facts))
    found = sorted(ctx.diagnostics, key=sort_key)
    if placement is None or any(d.is_error for d in found):
        return None, found
    return dataclasses.replace(placement, warnings=tuple(found)), []


def assemble(root: Node, facts: ProgramFacts, file: str, sources: tuple[str, ...], ctx: Ctx) -> Placement | None:
    """The merged tree as a `Placement`. `[cluster]` is read first: every rank set elsewhere is
    checked against its `ranks`."""
    at = root.get("cluster")
    cluster = build_cluster(read(at, ClusterTable, ctx), ctx) if at is not None else None
    top = read(root, TopTable, ctx)
    if top is None or cluster is None:
        return None
    model, model_at = top.model, top.at("model")
    if (model is not None and model_at is not None and facts.model is not None
            and model_key(model) != model_key(facts.model)):
        ctx.error("P007", f"this placement is for model `{model}`, but the program is model `{facts.model}`",
                  model_at.span,
                  ("use a placement written for this model, or a generic one such as placements/cpu.toml",))
        return None
    comps = place_components(top, facts, cluster, ctx)
    warn_tp_across_hosts(cluster, comps.values(), ctx)
    before = len(ctx.diagnostics)
    walks = place_walks(top, facts, comps, ctx)
    if len(ctx.diagnostics) == before:  # a rejected pin would show up again as an unpinned call
        check_routing(facts, comps, walks, ctx)
    streams = place_streams(top, facts, ctx)
    transport = build_transport(top.transport, cluster, ctx)
    ordered = tuple(comps[name] for name in facts.components if name in comps)
    s = top.serve
    serve = Serve(s.get("allow_modules"), tuple((k, getattr(s, k)) for k in LIMIT_KEYS if getattr(s, k) is not None)) \
        if s is not None else Serve()
    return Placement(file, sources, model, cluster, ordered, walks, streams, transport, serve)


def model_key(name: str) -> str:
    """Model names compare without case or separators: `Qwen3-Omni` is `qwen3_omni`."""
    return re.sub(r"[^a-z0-9]", "", name.lower())
