"""A small reader for the DOT subset `wgc graph` writes, strict enough to catch malformed output.

It tokenises quoted strings (with `\\"` escapes), bare ids, `->`, `=`, and punctuation; checks
braces and brackets balance; and reads graph, subgraph, node, edge and attribute statements.
An edge endpoint must be a node declared by a node statement (wgc declares every node).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

_TOKEN = re.compile(r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<arrow>->)|(?P<id>[A-Za-z0-9_.#]+)|(?P<punct>[{}\[\];,=]))',
                    re.S)


class DotSyntaxError(Exception):
    pass


@dataclass
class Cluster:
    name: str
    parent: str | None
    attrs: dict[str, str] = field(default_factory=dict)
    nodes: list[str] = field(default_factory=list)  # declared directly inside
    same_rank: list[list[str]] = field(default_factory=list)


@dataclass
class Dot:
    name: str
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    edges: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    clusters: dict[str, Cluster] = field(default_factory=dict)

    def visible_edges(self) -> list[tuple[str, str, dict[str, str]]]:
        return [e for e in self.edges if e[2].get("style") != "invis"]

    def label(self, node: str) -> str:
        return self.nodes[node].get("label", node)

    def cluster_nodes(self, name: str) -> list[str]:
        """Every node inside a cluster, nested clusters included."""
        out = list(self.clusters[name].nodes)
        for c in self.clusters.values():
            if c.parent == name:
                out.extend(self.cluster_nodes(c.name))
        return out

    def children(self, name: str) -> list[Cluster]:
        return [c for c in self.clusters.values() if c.parent == name]


def unquote(token: str) -> str:
    """The text a quoted DOT string shows: escapes undone, then entities (`&lt;`) decoded."""
    if not token.startswith('"'):
        return token
    text = re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), token[1:-1])
    return html.unescape(text)


def tokenize(text: str) -> list[str]:
    tokens, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None:
            raise DotSyntaxError(f"unexpected text at {pos}: {text[pos:pos + 20]!r}")
        tokens.append(m.group(m.lastgroup))
        pos = m.end()
    depth = {"{": 0, "[": 0}
    closer = {"}": "{", "]": "["}
    for t in tokens:
        if t in depth:
            depth[t] += 1
        elif t in closer:
            depth[closer[t]] -= 1
            if depth[closer[t]] < 0:
                raise DotSyntaxError(f"unbalanced {t}")
    if any(depth.values()):
        raise DotSyntaxError(f"unbalanced brackets: {depth}")
    return tokens


class _Parser:
    def __init__(self, tokens: list[str]) -> None:
        self.t = tokens
        self.i = 0

    def peek(self, k: int = 0) -> str | None:
        return self.t[self.i + k] if self.i + k < len(self.t) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise DotSyntaxError(f"expected {expected!r}, got {tok!r} at token {self.i}")
        self.i += 1
        return tok

    def ident(self) -> str:
        tok = self.take()
        if tok in "{}[];,=" or tok == "->":
            raise DotSyntaxError(f"expected an id, got {tok!r}")
        return unquote(tok)

    def attrs(self) -> dict[str, str]:
        out: dict[str, str] = {}
        self.take("[")
        while self.peek() != "]":
            key = self.ident()
            self.take("=")
            out[key] = self.ident()
            if self.peek() in (",", ";"):
                self.take()
        self.take("]")
        return out


def read_dot(text: str) -> Dot:
    p = _Parser(tokenize(text))
    p.take("digraph")
    dot = Dot(p.ident())
    p.take("{")
    _body(p, dot, None)
    if p.peek() is not None:
        raise DotSyntaxError("text after the graph")
    for src, dst, _ in dot.edges:
        for end in (src, dst):
            if end not in dot.nodes:
                raise DotSyntaxError(f"edge endpoint {end!r} is not a declared node")
    return dot


def _body(p: _Parser, dot: Dot, cluster: str | None) -> None:
    while p.peek() != "}":
        tok = p.peek()
        if tok == "subgraph":
            p.take()
            name = p.ident()
            if name in dot.clusters:
                raise DotSyntaxError(f"cluster {name} declared twice")
            dot.clusters[name] = Cluster(name, cluster)
            p.take("{")
            _body(p, dot, name)
        elif tok == "{":  # an anonymous subgraph: `{ rank=same; a -> b [style=invis]; }`
            p.take()
            group = _anonymous(p, dot)
            if cluster is not None:
                dot.clusters[cluster].same_rank.append(group)
        elif tok in ("graph", "node", "edge"):
            p.take()
            p.attrs()
        elif p.peek(1) == "=":
            key = p.ident()
            p.take("=")
            value = p.ident()
            if cluster is not None:
                dot.clusters[cluster].attrs[key] = value
        else:
            _node_or_edge(p, dot, cluster)
        if p.peek() == ";":
            p.take()
    p.take("}")


def _anonymous(p: _Parser, dot: Dot) -> list[str]:
    ids: list[str] = []
    while p.peek() != "}":
        if p.peek(1) == "=":
            p.ident()
            p.take("=")
            p.ident()
        else:
            chain = [p.ident()]
            while p.peek() == "->":
                p.take()
                chain.append(p.ident())
            attrs = p.attrs() if p.peek() == "[" else {}
            dot.edges.extend((a, b, attrs) for a, b in zip(chain, chain[1:]))
            ids.extend(chain)
        if p.peek() == ";":
            p.take()
    p.take("}")
    return ids


def _node_or_edge(p: _Parser, dot: Dot, cluster: str | None) -> None:
    chain = [p.ident()]
    while p.peek() == "->":
        p.take()
        chain.append(p.ident())
    attrs = p.attrs() if p.peek() == "[" else {}
    if len(chain) == 1:
        if chain[0] in dot.nodes:
            raise DotSyntaxError(f"node {chain[0]} declared twice")
        dot.nodes[chain[0]] = attrs
        if cluster is not None:
            dot.clusters[cluster].nodes.append(chain[0])
    else:
        dot.edges.extend((a, b, attrs) for a, b in zip(chain, chain[1:]))
