"""Shared by the editor tests: where the editor files are, the grammar's keywords, and the rule for
tools that may be missing (skip with the command that installs them; fail instead under CI)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LARK = ROOT / "grammar" / "walk.lark"
VSCODE = ROOT / "grammar" / "editors" / "vscode"
TM_GRAMMAR = VSCODE / "syntaxes" / "walk.tmLanguage.json"
VIM = ROOT / "grammar" / "editors" / "vim"
VIM_SYNTAX = VIM / "syntax" / "walk.vim"
MODELS = tuple(sorted((ROOT / "models").glob("*.walk")))

_LARK_COMMENT = re.compile(r"//[^\n]*")
_WORD_LITERAL = re.compile(r'"([A-Za-z_][A-Za-z0-9_]*)"')


def lark_keywords(grammar_text: str) -> frozenset[str]:
    """Every keyword of the grammar: its quoted literals that are words (comments left out)."""
    return frozenset(_WORD_LITERAL.findall(_LARK_COMMENT.sub("", grammar_text)))


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def unavailable(reason: str) -> None:
    """Skip: the tool is not installed here. Under CI the same is a failure, so nothing skips silently."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set: .ci/run installs this, so a missing tool is a failure)", pytrace=False)
    pytest.skip(reason)


def need_node_modules() -> Path:
    """The extension folder, with node, npx and its node_modules present."""
    for tool in ("node", "npx"):
        if shutil.which(tool) is None:
            unavailable(f"`{tool}` is not installed: install Node.js >= 18, then run `npm ci` in grammar/editors/vscode")
    packages = ("vscode-tmgrammar-test", "vscode-textmate", "vscode-oniguruma", "@vscode/vsce", "vscode-languageclient")
    if not all((VSCODE / "node_modules" / name / "package.json").is_file() for name in packages):
        unavailable("grammar/editors/vscode/node_modules is missing: run `npm ci` in grammar/editors/vscode")
    return VSCODE


def need_vim() -> str:
    vim = shutil.which("vim")
    if vim is None:
        unavailable("`vim` is not installed (apt-get install vim)")
    return vim


def run(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run a tool, output captured; an exit status other than 0 is for the caller to judge."""
    env = {**os.environ, "NO_COLOR": "1", "FORCE_COLOR": "0", "NPM_CONFIG_UPDATE_NOTIFIER": "false"}
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def shown(result: subprocess.CompletedProcess[str]) -> str:
    """A failed run, for an assertion message: the command, its status and everything it printed."""
    command = " ".join(result.args)
    return f"$ {command}\nexit status {result.returncode}\n{result.stdout}{result.stderr}"
