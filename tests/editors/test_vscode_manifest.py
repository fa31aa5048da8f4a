"""The VS Code extension's files, read without node: the manifest contributes what the extension
needs, the lock file matches it (so CI's `npm ci` works), the grammar's includes resolve, and every
snippet expands to text the wgc parser accepts."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterator

import pytest

from tests.editors.helpers import ROOT, TM_GRAMMAR, VSCODE
from wgc.lang.parser import parse

MANIFEST = json.loads((VSCODE / "package.json").read_text())
SNIPPETS = json.loads((VSCODE / "snippets" / "walk.json").read_text())


def test_manifest_contributes_the_walk_language() -> None:
    for field in ("name", "displayName", "description", "version", "publisher", "license", "main"):
        assert MANIFEST.get(field), f"package.json has no {field}"
    assert MANIFEST["engines"]["vscode"].startswith("^1.")
    assert (VSCODE / MANIFEST["main"]).is_file()
    [language] = MANIFEST["contributes"]["languages"]
    assert (language["id"], language["extensions"]) == ("walk", [".walk"])
    assert (VSCODE / language["configuration"]).is_file()
    [grammar] = MANIFEST["contributes"]["grammars"]
    assert (grammar["language"], grammar["scopeName"]) == ("walk", "source.walk")
    assert json.loads((VSCODE / grammar["path"]).read_text())["scopeName"] == "source.walk"
    [snippets] = MANIFEST["contributes"]["snippets"]
    assert (VSCODE / snippets["path"]).resolve() == (VSCODE / "snippets" / "walk.json").resolve()
    settings = MANIFEST["contributes"]["configuration"]["properties"]
    assert settings["wgc.lsp.path"]["default"] == "wgc"
    assert settings["wgc.lsp.args"]["default"] == ["lsp"]


def test_licence_is_the_projects() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]["text"]
    assert MANIFEST["license"] == project == "Apache-2.0"
    assert "Apache License\n" in (VSCODE / "LICENSE").read_text() and "Version 2.0" in (VSCODE / "LICENSE").read_text()


def test_lock_file_matches_the_manifest() -> None:
    lock = json.loads((VSCODE / "package-lock.json").read_text())
    assert lock["lockfileVersion"] >= 2
    root = lock["packages"][""]
    for field in ("dependencies", "devDependencies"):
        assert root.get(field) == MANIFEST.get(field), f"{field} differ: run `npm install` in grammar/editors/vscode"
    assert "vscode-languageclient" in MANIFEST["dependencies"]
    assert {"vscode-tmgrammar-test", "@vscode/vsce"} <= set(MANIFEST["devDependencies"])


def test_node_modules_and_packages_are_ignored() -> None:
    lines = (ROOT / ".gitignore").read_text().splitlines()
    assert "node_modules/" in lines and "*.vsix" in lines


def test_no_python_package_under_the_editor_files() -> None:
    found = [p for p in (ROOT / "grammar" / "editors").rglob("__init__.py") if "node_modules" not in p.parts]
    assert not found, found


def _nodes(node: object) -> Iterator[dict]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _nodes(value)
    elif isinstance(node, list):
        for item in node:
            yield from _nodes(item)


def test_grammar_includes_resolve_and_scopes_name_the_language() -> None:
    grammar = json.loads(TM_GRAMMAR.read_text())
    repository = grammar["repository"]
    for node in _nodes([grammar["patterns"], repository]):
        include = node.get("include")
        if include is not None:
            assert include == "$self" or include.startswith("#") and include[1:] in repository, include
        names = [node[k] for k in ("name", "contentName") if isinstance(node.get(k), str)]
        assert all(name.endswith(".walk") for name in names), names


def _expand(body: str) -> str:
    """A snippet with every tab stop at its default: the first choice, the placeholder text."""
    previous = None
    while previous != body:
        previous = body
        body = re.sub(r"\$\{\d+\|((?:[^,|\\]|\\.)*)[^}]*\|\}", lambda m: m.group(1).replace("\\,", ","), body)
        body = re.sub(r"\$\{\d+:([^${}]*)\}", r"\1", body)
    return re.sub(r"\$\{?\d+\}?", "", body)


CONTEXT = {
    "loop": "walk w() {{\n{}\n}}\n",
    "loopuntil": "walk w() {{\n{}\n}}\n",
    "parallel": "walk w() {{\n{}\n}}\n",
    "each": "flow {{\n{}\n}}\n",
}


@pytest.mark.parametrize("name", sorted(SNIPPETS))
def test_snippet_expands_to_a_program_that_parses(name: str) -> None:
    snippet = SNIPPETS[name]
    assert snippet["prefix"] and snippet["description"]
    text = _expand("\n".join(snippet["body"]))
    assert "$" not in text, text
    program = "model m\n" + CONTEXT.get(snippet["prefix"], "{}\n").format(text)
    result = parse(program, f"<snippet {name}>")
    assert not result.diagnostics, (program, [d.message for d in result.diagnostics])
