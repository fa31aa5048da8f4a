"""`vsce package` builds the extension's .vsix, with the grammar, the language client it needs at
run time and nothing of the tests; unpacked, the extension loads and starts the server as configured."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from tests.editors.helpers import VSCODE, need_node_modules, run, shown


def test_vsce_packages_the_extension(tmp_path: Path) -> None:
    cwd = need_node_modules()
    vsix = tmp_path / "walk.vsix"
    result = run(["npx", "--no", "--", "vsce", "package", "--allow-missing-repository", "--out", str(vsix)], cwd, timeout=120)
    assert result.returncode == 0, shown(result)
    assert vsix.is_file() and zipfile.is_zipfile(vsix), shown(result)

    with zipfile.ZipFile(vsix) as archive:
        names = set(archive.namelist())
        manifest = json.loads(archive.read("extension/package.json"))
        grammar = json.loads(archive.read("extension/syntaxes/walk.tmLanguage.json"))
        archive.extractall(tmp_path / "unpacked")
    for name in ("extension/package.json", "extension/syntaxes/walk.tmLanguage.json", "extension/extension.js",
                 "extension/language-configuration.json", "extension/snippets/walk.json", "extension/README.md",
                 "extension/LICENSE.txt", "extension/node_modules/vscode-languageclient/package.json"):
        assert name in names, f"{name} is not in the .vsix"
    assert manifest["name"] == json.loads((VSCODE / "package.json").read_text())["name"]
    assert grammar["scopeName"] == "source.walk"
    left_out = ("extension/test/", "extension/node_modules/vscode-tmgrammar-test/", "extension/node_modules/@vscode/vsce/",
                "extension/package-lock.json")
    assert not [n for n in names if n.startswith(left_out)], sorted(n for n in names if n.startswith(left_out))

    # The unpacked extension resolves vscode-languageclient from what it ships, and starts `wgc lsp`.
    loaded = run(["node", str(VSCODE / "test" / "extension.test.js"), str(tmp_path / "unpacked" / "extension")], cwd)
    assert loaded.returncode == 0 and "FAIL" not in loaded.stdout, shown(loaded)
