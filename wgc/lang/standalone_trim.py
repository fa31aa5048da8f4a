"""What `python -m wgc.lang.regenerate` changes in lark's standalone output, and nothing else.

lark's generator (`lark.tools.standalone.gen_standalone`) prints its whole runtime and then the
tables as Python literals. Two changes are made to what it prints, both by rule, so every run on
one lark version writes the same module:

- `split_tables`: the tables go to walk_parser.json (wgc.lang.tables) and the module reads them
  there; the generator's own `Lark_StandAlone` and everything else it prints stay as printed.
- `trim`: whole definitions the walk parser never runs are dropped, found by name with `ast` (a
  lark release without one of them stops regenerate): the grammar compiler (`Lark.__init__`; the
  module builds its parser from the tables with `Lark._load_from_dict`), the file and pickle
  paths (`Lark.save`, `load`, `open`, `open_from_package`, whose cache is pickled), the Python
  indenter; the optional `import regex` (only `Lark(regex=True)` uses it; it cost ~7 ms a start);
  and in `Lark._load`, the branch that unpickles a file where the tables are a dict.
Each change leaves a `# regenerate:` comment where it was made. A file that still says `pickle`
after the trim is refused.
"""

from __future__ import annotations

import ast
from typing import Any

LOADER = (
    "# regenerate: the tables printed here as literals are in walk_parser.json (wgc.lang.tables)\n"
    "from wgc.lang.tables import read_tables\n"
    "DATA, MEMO = read_tables()"
)

# The modules of the line lark prints before its tables, to decode them; the loader replaces it.
DECODER_MODULES = ("pickle", "zlib", "base64")
# Definitions dropped, as (class, name) or (None, name) for a module-level one.
DROPPED = (
    ("Lark", "__init__"), ("Lark", "save"), ("Lark", "load"), ("Lark", "open"), ("Lark", "open_from_package"),
    (None, "DedentError"), (None, "Indenter"), (None, "PythonIndenter"),
)
_FROM_FILE = "raise TypeError('the walk parser is built from a dict of tables, never from a file')"


def split_tables(printed: list[Any]) -> tuple[str, dict[str, Any], dict[int, Any]]:
    """(module code reading the JSON tables, DATA, MEMO) from the generator's prints, in order."""
    tables = [i for i, item in enumerate(printed) if not isinstance(item, str)]
    if len(tables) != 2:
        raise ValueError(f"lark's generator printed {len(tables)} table objects, not DATA and MEMO")
    i_data, i_memo = tables
    expected = {i_data - 1: "DATA = (", i_data + 1: ")", i_memo - 1: "MEMO = (", i_memo + 1: ")"}
    if i_memo != i_data + 3 or i_data < 2 or _imported(printed[i_data - 2]) != DECODER_MODULES \
            or any(printed[i] != text for i, text in expected.items()):
        raise ValueError("lark's generator no longer prints its tables as `DATA = (...)`, `MEMO = (...)`")
    code = [*printed[:i_data - 2], LOADER, *printed[i_memo + 2:]]
    return "\n".join(code) + "\n", printed[i_data], printed[i_memo]


def _imported(line: object) -> tuple[str, ...] | None:
    """The modules a plain `import a, b, c` line names; None for any other line."""
    if not isinstance(line, str) or not line.startswith("import "):
        return None
    return tuple(name.strip() for name in line.removeprefix("import ").split(","))


def trim(code: str) -> str:
    """`code` less what the walk parser never runs (see the module docstring)."""
    tree = ast.parse(code)
    lines = code.split("\n")
    edits: list[tuple[int, int, str]] = []  # (first line, last line, replacement), 1-based, inclusive
    for owner, name in DROPPED:
        node = _definition(tree, owner, name)
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        where = f"{owner}.{name}" if owner else name
        edits.append((first, node.end_lineno or node.lineno, _indent(node, f"# regenerate: {where} dropped")))
    edits.append(_optional_regex(tree))
    edits += [(stmt.lineno, stmt.end_lineno or stmt.lineno, _indent(stmt, _FROM_FILE)) for stmt in _unpickling(tree)]
    for first, last, replacement in sorted(edits, reverse=True):
        lines[first - 1:last] = replacement.split("\n")
    out = "\n".join(lines)
    compile(out, "walk_parser.py", "exec")
    if "pickle" in out:
        raise ValueError("the trimmed lark runtime still mentions pickle: add the new path to standalone_trim")
    return out


def _definition(tree: ast.Module, owner: str | None, name: str) -> ast.stmt:
    scope: list[ast.stmt] = tree.body
    if owner is not None:
        scope = next((n.body for n in tree.body if isinstance(n, ast.ClassDef) and n.name == owner), [])
    for node in scope:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return node
    raise ValueError(f"lark's standalone code has no {owner + '.' if owner else ''}{name} to drop")


def _optional_regex(tree: ast.Module) -> tuple[int, int, str]:
    """The module-level `try: import regex ... except ImportError: ...`, as never importing it."""
    for node in tree.body:
        if isinstance(node, ast.Try) and any(
                isinstance(s, ast.Import) and [a.name for a in s.names] == ["regex"] for s in node.body):
            text = "# regenerate: the optional regex module dropped (only Lark(regex=True) uses it)\nregex = None\n_has_regex = False"
            return node.lineno, node.end_lineno or node.lineno, text
    raise ValueError("lark's standalone code has no optional `import regex` to drop")


def _unpickling(tree: ast.Module) -> list[ast.stmt]:
    """The innermost statements that name `pickle` (after the drops, only `Lark._load`'s file branch)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and not any(isinstance(c, ast.stmt) for c in ast.iter_child_nodes(node)) \
                and any(isinstance(n, ast.Name) and n.id == "pickle" for n in ast.walk(node)):
            found.append(node)
    dropped = [_definition(tree, owner, name) for owner, name in DROPPED]
    return [s for s in found if not any(_inside(s, d) for d in dropped)]


def _inside(node: ast.stmt, outer: ast.stmt) -> bool:
    return outer.lineno <= node.lineno and (node.end_lineno or 0) <= (outer.end_lineno or 0)


def _indent(node: ast.stmt, text: str) -> str:
    return "\n".join(" " * node.col_offset + line for line in text.split("\n"))
