"""The TextMate grammar, run the way VS Code runs it (vscode-textmate + oniguruma, under node):
the annotated scope tests in grammar/editors/vscode/test/, a scan of the shipped models that no
keyword is left unscoped, and the extension's start-up with a stubbed `vscode`."""

from __future__ import annotations

import re
from pathlib import Path

from tests.editors.helpers import MODELS, TM_GRAMMAR, need_node_modules, run, shown

SCOPE_TESTS = sorted((TM_GRAMMAR.parent.parent / "test").glob("*.test.walk"))


def test_scope_assertions_hold() -> None:
    cwd = need_node_modules()
    assert SCOPE_TESTS, "no test/*.test.walk files"
    result = run(["npx", "--no", "--", "vscode-tmgrammar-test", "-g", "syntaxes/walk.tmLanguage.json", "test/*.test.walk"], cwd)
    assert result.returncode == 0, shown(result)
    for path in SCOPE_TESTS:
        assert f"test/{path.name} run successfuly" in result.stdout, shown(result)


def test_a_wrong_scope_assertion_fails(tmp_path: Path) -> None:
    cwd = need_node_modules()
    case = tmp_path / "wrong.test.walk"
    case.write_text('# SYNTAX TEST "source.walk" "a wrong assertion"\nloop 10 {\n# <---- storage.type.walk\n}\n')
    result = run(["npx", "--no", "--", "vscode-tmgrammar-test", "-g", str(TM_GRAMMAR), str(case)], cwd)
    assert result.returncode != 0, shown(result)
    assert "missing required scopes: storage.type.walk" in result.stdout, shown(result)


def test_no_keyword_in_the_models_is_left_unscoped() -> None:
    cwd = need_node_modules()
    result = run(["node", "test/scan-models.js"], cwd)
    assert result.returncode == 0, shown(result)
    for model in MODELS:
        assert re.search(rf"^ok +\S*models/{model.name}: [1-9]\d* keyword occurrences$", result.stdout, re.M), shown(result)


def test_the_scan_reports_an_unscoped_keyword_and_a_leaking_region(tmp_path: Path) -> None:
    cwd = need_node_modules()
    # `start` is a value name in a walk body, so the grammar rightly leaves it unscoped: the scan,
    # which holds the shipped models to stricter rules, must say so. The flow is never closed.
    program = tmp_path / "bad.walk"
    program.write_text("model m\nwalk w() {\n    x = start\n}\nflow {\n    start -> w -> done\n")
    result = run(["node", "test/scan-models.js", str(program)], cwd)
    assert result.returncode == 1, shown(result)
    assert "bad.walk:3:9: keyword 'start' is not scoped as one" in result.stdout, shown(result)
    assert "the file ends inside a region" in result.stdout, shown(result)


def test_extension_starts_the_configured_server() -> None:
    cwd = need_node_modules()
    result = run(["node", "test/extension.test.js"], cwd)
    assert result.returncode == 0, shown(result)
    assert "FAIL" not in result.stdout, shown(result)
