"""`extends = "base.toml"`: a placement built on another file instead of copying it.

The base is resolved relative to the file that names it, recursively. Tables merge key by
key (the extending file wins); any other value, arrays and arrays of tables included, is
replaced whole. Every merged value keeps the span of the file it came from. A cycle, or a
chain deeper than `MAX_EXTENDS_DEPTH`, is an error at the `extends` that closes it.
"""

from __future__ import annotations

import os
from pathlib import Path

from wgc.diag.diagnostic import Diagnostic, Note
from wgc.placement.document import Node, read_document
from wgc.placement.tables import MAX_EXTENDS_DEPTH


def load_with_bases(path: Path) -> tuple[Node | None, tuple[str, ...], list[Diagnostic]]:
    """The merged tree of `path` and its bases, the files read (the base first), and errors."""
    diags: list[Diagnostic] = []
    sources: list[str] = []
    node = _load(path, str(path), None, (), diags, sources)
    return node, tuple(sources), diags


def _load(
    path: Path,
    file: str,
    asked: Node | None,
    chain: tuple[tuple[Path, Node], ...],
    diags: list[Diagnostic],
    sources: list[str],
) -> Node | None:
    doc, errors = read_document(path, file, asked.span if asked else None)
    diags.extend(errors)
    if doc is None:
        return None
    ext = doc.get("extends")
    own = Node({k: v for k, v in doc.items() if k != "extends"}, doc.key, doc.span)
    base = None
    if ext is not None:
        problem = _check_extends(ext, path, chain)
        if problem is not None:
            diags.append(problem)
        else:
            base_file = os.path.normpath(str(Path(file).parent / str(ext.value)))
            base = _load(path.parent / str(ext.value), base_file, ext, (*chain, (path, ext)), diags, sources)
    sources.append(file)
    return merge(base, own) if base is not None else own


def _check_extends(ext: Node, path: Path, chain: tuple[tuple[Path, Node], ...]) -> Diagnostic | None:
    if not isinstance(ext.value, str) or not ext.value:
        return Diagnostic("P003", "`extends` takes the path of a base file, as a string", ext.span)
    seen = [_identity(p) for p, _ in chain] + [_identity(path)]
    if _identity(path.parent / ext.value) in seen:
        return _cycle(ext, chain)
    if len(chain) >= MAX_EXTENDS_DEPTH:
        return Diagnostic("P006", f"`extends` chain deeper than {MAX_EXTENDS_DEPTH} files", ext.span)
    return None


def _identity(path: Path) -> str:
    try:
        return str(path.resolve())
    except OSError:
        return os.path.abspath(path)


def _cycle(ext: Node, chain: tuple[tuple[Path, Node], ...]) -> Diagnostic:
    notes = tuple(Note(f"`{p.name}` extends `{n.value}` here", n.span) for p, n in chain)
    return Diagnostic(
        "P006",
        f"`extends` cycle: `{ext.value}` already extends this file",
        ext.span,
        ("a base file must not extend, directly or through others, a file built on it",),
        notes,
    )


def merge(base: Node, over: Node) -> Node:
    """`over` on top of `base`: tables merge key by key, anything else is replaced."""
    if not (base.is_table and over.is_table):
        return over
    merged = dict(base.children())
    for key, value in over.items():
        old = merged.get(key)
        merged[key] = merge(old, value) if old is not None else value
    return Node(merged, over.key, over.span, over.path)
