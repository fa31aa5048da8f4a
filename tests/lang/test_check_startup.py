"""A plain `wgc check` command line runs without click (wgc.cli.main → check_cmd.run), imports
nothing beyond the check (no click, certifi, torch, lark or pickle), ends with its objects frozen
out of the interpreter's last garbage collection, and behaves exactly as the click command does;
every other check command line (help, usage errors) still reaches click."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from wgc.cli import check_cmd

ROOT = Path(__file__).resolve().parents[2]
ERRORS = "tests/errors/unknown-name_1.walk"
WARNING = "tests/errors/unused-param_1.walk"

# The modules this process imports beyond what the interpreter had loaded at start (sitecustomize
# and .pth files of an environment may load some, certifi among them, before any wgc code runs).
_PROBE = """
import json, sys
before = set(sys.modules)
from wgc.cli.main import main
sys.argv = ["wgc", *sys.argv[1:]]
code = None
try:
    main()
except SystemExit as done:
    code = done.code
import gc
frozen = gc.get_freeze_count()
print(json.dumps({"code": code, "new": sorted(set(sys.modules) - before), "frozen": frozen}), file=sys.stderr)
"""
NEVER = {"click", "certifi", "torch", "numpy", "lark", "regex", "pickle"}


@pytest.mark.parametrize(("args", "status"), [
    (["check", "models/bagel.walk"], 0),
    (["check", "--format", "json", "--werror", WARNING], 1),
    (["check", ERRORS], 1),
])
def test_a_plain_check_imports_no_click_certifi_torch_lark_or_pickle(args: list[str], status: int) -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, timeout=60, cwd=ROOT)
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report["code"] == status, done.stderr
    new = set(report["new"])
    assert {"wgc.check", "wgc.lang.walk_parser", "wgc.cli.check_cmd"} <= new  # the check did run
    assert not {m.split(".")[0] for m in new} & NEVER, sorted(m for m in new if m.split(".")[0] in NEVER)
    assert report["frozen"] > 10_000  # the check's objects are left out of the interpreter's last collection


def _wgc(args: list[str], via_click: bool, stdin: str = "") -> tuple[int, str, str]:
    entry = "from wgc.cli.group import cli; cli()" if via_click else "from wgc.cli.main import main; main()"
    code = f"import sys; sys.argv[0] = 'wgc'; {entry}"
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60,
                          cwd=ROOT, input=stdin, env=_env())
    return done.returncode, done.stdout, done.stderr


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}


@pytest.mark.parametrize("args", [
    ["check", "models/bagel.walk"],
    ["check", ERRORS],
    ["check", "--format", "json", ERRORS],
    ["check", "--format=json", "--werror", WARNING],
    ["check", "--werror", WARNING],
    ["check", WARNING, "--format", "text"],
    ["check", "models/bagel.walk", ERRORS],
    ["check", "tests/errors/no-such-file.walk"],
    ["check", "-"],
])
def test_the_plain_path_answers_as_the_click_command_does(args: list[str]) -> None:
    assert check_cmd.plain_arguments(args[1:]) is not None  # this command line takes the plain path
    stdin = (ROOT / ERRORS).read_text(encoding="utf-8")
    plain = _wgc(args, via_click=False, stdin=stdin)
    assert plain == _wgc(args, via_click=True, stdin=stdin)
    assert plain[1] or plain[2] or plain[0] == 0


@pytest.mark.parametrize("args", [
    [], ["--help"], ["-h"], ["--format"], ["--format", "xml", "a.walk"], ["--formats=json", "a.walk"],
    ["--", "a.walk"], ["-x", "a.walk"], ["models"], ["--werror"],
])
def test_anything_but_files_and_the_two_options_goes_to_click(args: list[str]) -> None:
    assert check_cmd.plain_arguments(args) is None


def test_plain_arguments_read_files_format_and_werror_in_any_order() -> None:
    assert check_cmd.plain_arguments(["a.walk"]) == (("a.walk",), "text", False)
    assert check_cmd.plain_arguments(["--werror", "a.walk", "--format", "json", "-"]) == (("a.walk", "-"), "json", True)
    assert check_cmd.plain_arguments(["--format=json", "--format=text", "b.walk"]) == (("b.walk",), "text", False)


def test_help_and_usage_errors_still_come_from_click() -> None:
    status, out, _ = _wgc(["check", "--help"], via_click=False)
    assert status == 0 and "Type-check .walk programs" in out and "--werror" in out
    status, _, err = _wgc(["check", "models"], via_click=False)
    assert status == 2 and "is a directory" in err
    status, _, err = _wgc(["check", "--format", "xml", "models/bagel.walk"], via_click=False)
    assert status == 2 and "'xml' is not one of 'text', 'json'" in err
