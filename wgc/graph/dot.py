"""The drawing model as Graphviz DOT text. Styles are tables keyed by node, cluster and edge kind.

Every id and label is a quoted string; labels never use record shapes, so `|`, `{}` and `<>`
have no structure, and `<`, `>`, `&` are written as entities (Graphviz decodes them in any label).
"""

from __future__ import annotations

from wgc.graph import model as m

NODE_ATTRS: dict[str, dict[str, str]] = {
    m.CALL: {"shape": "box", "style": "filled", "fillcolor": "white"},
    m.FORK: {"shape": "box", "style": "filled,dashed", "fillcolor": "white"},
    m.INPUT: {"shape": "ellipse"},
    m.RECV: {"shape": "cds", "style": "dashed"},
    m.SEND: {"shape": "cds", "style": "dashed"},
    m.EMIT: {"shape": "invhouse", "style": "bold"},
    m.RETURN: {"shape": "invhouse"},
    m.EMPTY: {"shape": "plaintext"},
    m.START: {"shape": "circle"},
    m.DONE: {"shape": "doublecircle"},
    m.STATE: {"shape": "box", "style": "rounded"},
    m.EACH: {"shape": "hexagon"},
    m.LEGEND: {"shape": "box", "style": "filled"},
}

CLUSTER_ATTRS: dict[str, dict[str, str]] = {
    m.WALK: {"style": "rounded", "color": "gray40"},
    m.LOOP: {"style": "bold", "color": "black"},
    m.PARALLEL: {"style": "dashed", "color": "gray40"},
    m.BRANCH: {"style": "rounded,dotted"},
    m.FLOW: {"style": "rounded,filled", "fillcolor": "gray96", "color": "gray40"},
    m.EACH_BLOCK: {"style": "dashed"},
    m.PLACEMENT: {"style": "rounded", "color": "gray40"},
}

EDGE_ATTRS: dict[str, dict[str, str]] = {
    m.DATA: {},
    m.BACK: {"style": "bold", "color": "gray45", "constraint": "false"},
    m.STREAM: {"style": "dashed", "color": "blue3", "fontcolor": "blue3"},
    m.TRANSITION: {},
    m.NEXT_PART: {"style": "dotted", "color": "gray45", "constraint": "false"},
}

HEADER = (
    'graph [fontname="Helvetica", fontsize=11, newrank=true, compound=true, labelloc=t];',
    'node [fontname="Helvetica", fontsize=10];',
    'edge [fontname="Helvetica", fontsize=9];',
)

_ESCAPES = {"\\": "\\\\", '"': '\\"', "&": "&amp;", "<": "&lt;", ">": "&gt;", "\n": "\\n", "\r": ""}


def quote(text: str) -> str:
    """A DOT quoted string whose label shows exactly `text`."""
    return '"' + "".join(_ESCAPES.get(ch, ch) for ch in text) + '"'


def label(lines: tuple[str, ...]) -> str:
    return quote("\n".join(lines))


def _attrs(attrs: dict[str, str]) -> str:
    return ", ".join(f"{k}={v if k == 'label' else quote(v)}" for k, v in attrs.items())


def _node(n: m.GNode) -> str:
    attrs = {"label": label(n.lines), **NODE_ATTRS[n.kind]}
    if n.fill is not None:
        styles = [s for s in attrs.get("style", "").split(",") if s]
        attrs["style"] = ",".join(dict.fromkeys([*styles, "filled"]))
        attrs["fillcolor"] = n.fill
    return f"{quote(n.id)} [{_attrs(attrs)}];"


def _cluster(c: m.GCluster, depth: int, out: list[str]) -> None:
    pad = "  " * depth
    out.append(f"{pad}subgraph {quote('cluster_' + c.id)} {{")
    out.extend(f"{pad}  {k}={v if k == 'label' else quote(v)};"
               for k, v in {"label": label(c.lines), **CLUSTER_ATTRS[c.kind]}.items())
    out.extend(f"{pad}  {_node(n)}" for n in c.nodes)
    for child in c.children:
        _cluster(child, depth + 1, out)
    row = c.row()
    if row:  # one rank; invisible edges keep the source order left to right (not edges of the graph)
        chain = f" {' -> '.join(map(quote, row))} [style=invis];" if len(row) > 1 else f" {quote(row[0])};"
        out.append(f"{pad}  {{ rank=same;{chain} }}")
    out.append(f"{pad}}}")


def _edge(e: m.GEdge) -> str:
    attrs = {**({"label": quote(e.label)} if e.label else {}), **EDGE_ATTRS[e.kind]}
    tail = f" [{_attrs(attrs)}]" if attrs else ""
    return f"{quote(e.src)} -> {quote(e.dst)}{tail};"


def write_dot(graph: m.Graph) -> str:
    out = [f"digraph {quote(graph.name)} {{", *(f"  {h}" for h in HEADER), f"  label={quote('model ' + graph.name)};"]
    for c in graph.clusters:
        _cluster(c, 1, out)
    out.extend(f"  {_edge(e)}" for e in graph.edges)
    out.append("}")
    return "\n".join(out) + "\n"
