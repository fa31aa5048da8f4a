"""The drawing model as Mermaid text: `flowchart TD`, one subgraph per cluster.

Every label is a quoted string with Mermaid's entity codes (`#34;`) for the characters that
would otherwise end it or be read as markup; `<br>` breaks lines.
"""

from __future__ import annotations

from wgc.graph import model as m

# (before, after) the quoted label, by node kind.
SHAPES: dict[str, tuple[str, str]] = {
    m.CALL: ("[", "]"),
    m.FORK: ("[/", "/]"),
    m.INPUT: ("([", "])"),
    m.RECV: (">", "]"),
    m.SEND: (">", "]"),
    m.EMIT: ("[/", "\\]"),
    m.RETURN: ("[/", "\\]"),
    m.EMPTY: ("[", "]"),
    m.START: ("((", "))"),
    m.DONE: ("(((", ")))"),
    m.STATE: ("(", ")"),
    m.EACH: ("{{", "}}"),
    m.LEGEND: ("[", "]"),
}

ARROWS: dict[str, str] = {
    m.DATA: "-->",
    m.BACK: "==>",
    m.STREAM: "-.->",
    m.TRANSITION: "-->",
    m.NEXT_PART: "-.->",
}

# Subgraph styles, by cluster kind (a loop is drawn with a heavier box).
CLUSTER_STYLES: dict[str, str] = {m.LOOP: "stroke-width:3px", m.PARALLEL: "stroke-dasharray:5 5"}

# '#' first: every other escape introduces one.
_ESCAPES = {"#": "#35;", '"': "#34;", "\\": "#92;", "&": "#38;", "<": "#60;", ">": "#62;", "|": "#124;",
            "[": "#91;", "]": "#93;", "{": "#123;", "}": "#125;", "\n": "<br>", "\r": ""}


def quote(text: str) -> str:
    return '"' + "".join(_ESCAPES.get(ch, ch) for ch in text) + '"'


def label(lines: tuple[str, ...]) -> str:
    return quote("\n".join(lines))


def _cluster(c: m.GCluster, depth: int, out: list[str], styles: list[str]) -> None:
    pad = "  " * depth
    out.append(f"{pad}subgraph {c.id}[{label(c.lines)}]")
    if c.row():
        out.append(f"{pad}  direction LR")
    for n in c.nodes:
        before, after = SHAPES[n.kind]
        out.append(f"{pad}  {n.id}{before}{label(n.lines)}{after}")
        if n.fill is not None:
            styles.append(f"style {n.id} fill:{n.fill}")
    for child in c.children:
        _cluster(child, depth + 1, out, styles)
    out.append(f"{pad}end")
    if c.kind in CLUSTER_STYLES:
        styles.append(f"style {c.id} {CLUSTER_STYLES[c.kind]}")


def _edge(e: m.GEdge) -> str:
    text = f"|{quote(e.label)}|" if e.label else ""
    return f"{e.src} {ARROWS[e.kind]}{text} {e.dst}"


def write_mermaid(graph: m.Graph) -> str:
    out = [f"%% wgc graph of model {graph.name}", "flowchart TD"]
    styles: list[str] = []
    for c in graph.clusters:
        _cluster(c, 1, out, styles)
    out.extend(f"  {_edge(e)}" for e in graph.edges)
    out.extend(f"  {s}" for s in styles)
    return "\n".join(out) + "\n"
