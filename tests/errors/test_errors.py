"""Checker errors by example: every tests/errors/<slug>_<n>.walk is a small bad program.

The program's first lines are comments holding what `wgc check` must report:

    # expect: E012 7:31 dim 2: 4096 != 1152
    # help: did you mean `first`?
    # a one-line description of the mistake

`# expect: CODE LINE:COL TEXT` is one diagnostic: its code, the line and column where its primary
span starts, and a substring of its message. An optional `# help: TEXT` right after it must be a
substring of one of that diagnostic's help lines. A file may hold several `# expect:` lines: each
must match its own diagnostic, and no other error may appear (warnings not listed are ignored).
The slug in the file name is the slug of the code the example is about.

Besides the examples, the CLI is checked end to end through `wgc check` in a subprocess: the text
rendering, JSON output, colour only on a terminal, and exit statuses.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from wgc.check import check_source
from wgc.diag.codes import CODES
from wgc.diag.diagnostic import Diagnostic
from wgc.diag.render import Renderer

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
EXAMPLES = sorted(HERE.glob("*.walk"))
SLUGS = {code.slug: name for name, code in CODES.items()}

# Codes no `.walk` program can make `wgc check` report, with the reason. A new code must get an
# example here or a line in this table, so the table is part of what review looks at.
NOT_FROM_CHECK = {
    "E042": "emitted by `wgc compile` when the lowered schedules fail simulation, never by the checker",
}

_EXPECT = re.compile(r"#\s*expect:\s*(?P<code>[EW]\d{3})\s+(?P<line>\d+):(?P<col>\d+)\s+(?P<text>\S.*?)\s*$")
_HELP = re.compile(r"#\s*help:\s*(?P<text>\S.*?)\s*$")
_NAME = re.compile(r"(?P<slug>[a-z-]+)_(?P<n>\d+)")


@dataclass(frozen=True)
class Expected:
    code: str
    line: int
    column: int
    text: str
    help: str | None = None

    def __str__(self) -> str:
        extra = f" (help: {self.help})" if self.help else ""
        return f"{self.code} {self.line}:{self.column} {self.text}{extra}"

    def matches(self, d: Diagnostic) -> bool:
        return (
            d.code == self.code
            and (d.span.line, d.span.column) == (self.line, self.column)
            and self.text in d.message
            and (self.help is None or any(self.help in h for h in d.help))
        )


def read_expected(path: Path) -> list[Expected]:
    """The `# expect:` / `# help:` lines of the comment block that starts the file."""
    out: list[Expected] = []
    for raw in path.read_text(encoding="utf-8").split("\n"):
        if not raw.startswith("#"):
            break
        if m := _EXPECT.match(raw):
            out.append(Expected(m["code"], int(m["line"]), int(m["col"]), m["text"]))
        elif m := _HELP.match(raw):
            assert out, f"{path.name}: `# help:` before any `# expect:`"
            last = out.pop()
            out.append(Expected(last.code, last.line, last.column, last.text, m["text"]))
        else:
            keyword = raw.lstrip("# ").split(":", 1)[0]
            assert keyword not in ("expect", "help"), f"{path.name}: malformed header line {raw!r}"
    return out


def _render(path: Path, diags: list[Diagnostic] | tuple[Diagnostic, ...]) -> str:
    text = path.read_text(encoding="utf-8")
    return Renderer({str(path): text}, color=False).render_all(diags) or "(no diagnostics)"


def _listing(items) -> str:
    lines = [f"  {item}" for item in items]
    return "\n".join(lines or ["  (none)"]) + "\n"


# ---- the examples -------------------------------------------------------------------------------


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_error_example(example: Path) -> None:
    expected = read_expected(example)
    assert expected, f"{example.name} has no `# expect:` line"
    diags = list(check_source(example.read_text(encoding="utf-8"), str(example)).diagnostics)
    left = list(diags)
    missing = []
    for e in expected:
        hit = next((d for d in left if e.matches(d)), None)
        if hit is None:
            missing.append(e)
        else:
            left.remove(hit)
    extra = [d for d in left if d.is_error]
    assert not missing and not extra, (
        "expected, not reported:\n" + _listing(map(str, missing))
        + "reported, not expected:\n" + _listing(f"{d.code} {d.span.line}:{d.span.column} {d.message}" for d in extra)
        + "\nwgc check says:\n" + _render(example, diags)
    )


def test_there_are_enough_examples() -> None:
    assert len(EXAMPLES) >= 45


def test_every_code_has_an_example() -> None:
    covered = {e.code for p in EXAMPLES for e in read_expected(p)}
    missing = sorted(set(CODES) - covered - set(NOT_FROM_CHECK))
    assert not missing, f"codes without an example in tests/errors/: {missing}"


def test_exemptions_are_real_codes_without_examples() -> None:
    covered = {e.code for p in EXAMPLES for e in read_expected(p)}
    assert set(NOT_FROM_CHECK) <= set(CODES), "an exemption names a code that does not exist"
    assert not set(NOT_FROM_CHECK) & covered, "an exempted code has an example: drop the exemption"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_file_name_names_the_code(example: Path) -> None:
    m = _NAME.fullmatch(example.stem)
    assert m, f"{example.name}: name it <slug>_<n>.walk"
    assert m["slug"] in SLUGS, f"{example.name}: `{m['slug']}` is not the slug of any code"
    codes = {e.code for e in read_expected(example)}
    assert SLUGS[m["slug"]] in codes, f"{example.name} does not expect {SLUGS[m['slug']]} ({m['slug']})"


# ---- warnings that must not appear -------------------------------------------------------------

CARRIED_LOOP = """model chat
import wgc.models.llama as llama
component llm: llama.Llama engine kv {
    decode(tok: token) -> token
}
walk gen(first: token) {
    loop 8 carry first {
        first = llm.decode(first)
    }
    emit text first
}
flow { start -> gen -> done }
"""


def test_a_carried_value_updated_in_its_loop_is_not_unused() -> None:
    # The new value of a carried name is read by the next iteration (and after the loop).
    diags = check_source(CARRIED_LOOP, "carried.walk").diagnostics
    assert [d for d in diags if d.code == "W003"] == [], [d.message for d in diags]


# ---- the CLI, end to end ------------------------------------------------------------------------


def wgc_command() -> list[str]:
    """`wgc` as installed next to this interpreter, or the same entry point through `-c`."""
    script = Path(sys.executable).with_name("wgc")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from wgc.cli.main import main; sys.argv[0] = 'wgc'; main()"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "CLICOLOR_FORCE")}
    env.update(extra)
    return env


def run_wgc(*args: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*wgc_command(), *args], capture_output=True, text=True, env=env or _env(), cwd=cwd, timeout=60
    )


def run_wgc_on_tty(*args: str, env: dict[str, str]) -> tuple[int, str]:
    """Run `wgc` with stderr on a pseudo-terminal; returns (exit status, what reached the terminal)."""
    pty = pytest.importorskip("pty")
    try:
        master, slave = pty.openpty()
    except OSError as err:
        pytest.skip(f"no pseudo-terminal: {err}")
    proc = subprocess.Popen([*wgc_command(), *args], stdout=subprocess.DEVNULL, stderr=slave, env=env, cwd=ROOT)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: every writer has closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        status = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return status, b"".join(chunks).decode("utf-8", "replace")


RENDERED = ["syntax-error_1", "unknown-name_1", "loop-reassign-without-carry_1", "dim-mismatch_1", "invalid-param_2"]


@pytest.mark.parametrize("name", RENDERED)
def test_cli_renders_each_error_like_a_compiler(name: str) -> None:
    path = HERE / f"{name}.walk"
    rel = str(path.relative_to(ROOT))
    source_lines = path.read_text(encoding="utf-8").split("\n")
    result = run_wgc("check", rel)
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    assert "\x1b[" not in result.stderr, "colour on a pipe"
    blocks = result.stderr.rstrip("\n").split("\n\n")
    errors = [d for d in check_source(path.read_text(encoding="utf-8"), rel).diagnostics if d.is_error]
    assert errors
    for d in errors:
        header = f"{rel}:{d.span.line}:{d.span.column}: error[{d.code}]: {d.message}"
        block = next((b.split("\n") for b in blocks if b.split("\n")[0] == header), None)
        assert block is not None, f"no `{header}` in:\n{result.stderr}"
        gutter = f"{d.span.line:>4} | "
        assert block[1] == gutter + source_lines[d.span.line - 1], block
        caret = block[2]
        assert caret.startswith(" " * (len(gutter) - 2) + "| ")
        marks = caret[len(gutter):]
        assert marks.index("^") == d.span.column - 1, f"caret not under column {d.span.column}: {caret!r}"
        if d.span.end_line == d.span.line:
            assert marks.strip() == "^" * max(1, d.span.end_column - d.span.column)
        for h in d.help:
            assert f"  help: {h}" in block, block
        for n in d.notes:
            assert any(line.startswith(f"  note: {n.message} (") for line in block), block
    assert result.stderr.rstrip("\n").split("\n")[-1].startswith(f"{len(errors)} error")


def test_cli_json_output() -> None:
    path = HERE / "dim-mismatch_1.walk"
    rel = str(path.relative_to(ROOT))
    result = run_wgc("check", "--format", "json", rel)
    assert result.returncode == 1
    assert "\x1b[" not in result.stdout
    payload = json.loads(result.stdout)
    want = [d.to_json() for d in check_source(path.read_text(encoding="utf-8"), rel).diagnostics]
    assert payload == {"diagnostics": want}
    first = next(d for d in payload["diagnostics"] if d["code"] == "E012")
    assert first["slug"] == "dim-mismatch" and first["severity"] == "error"
    assert {"file", "line", "column", "end_line", "end_column", "help", "notes"} <= set(first)


def test_cli_json_of_a_clean_program_exits_0(tmp_path: Path) -> None:
    clean = tmp_path / "clean.walk"
    clean.write_text(CARRIED_LOOP, encoding="utf-8")
    result = run_wgc("check", "--format", "json", str(clean))
    assert result.returncode == 0, result.stdout + result.stderr
    errors = [d for d in json.loads(result.stdout)["diagnostics"] if d["severity"] == "error"]
    assert errors == []


def test_cli_warnings_only_exit_0_unless_werror() -> None:
    path = HERE / "unused-param_1.walk"
    rel = str(path.relative_to(ROOT))
    assert run_wgc("check", rel).returncode == 0
    werror = run_wgc("check", "--werror", rel)
    assert werror.returncode == 1
    assert "warning[W002]" in werror.stderr


def test_cli_no_colour_on_a_pipe() -> None:
    result = run_wgc("check", str((HERE / "unknown-name_1.walk").relative_to(ROOT)))
    assert result.returncode == 1
    assert "error[E004]" in result.stderr
    assert "\x1b[" not in result.stderr + result.stdout


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_cli_colour_on_a_terminal_unless_no_color() -> None:
    rel = str((HERE / "unknown-name_1.walk").relative_to(ROOT))
    status, coloured = run_wgc_on_tty("check", rel, env=_env())
    assert status == 1
    assert "\x1b[" in coloured, coloured
    status, plain = run_wgc_on_tty("check", rel, env=_env(NO_COLOR="1"))
    assert status == 1
    assert "error[E004]" in plain
    assert "\x1b[" not in plain, plain


def test_cli_missing_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "nope.walk"
    result = run_wgc("check", str(missing))
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip("\n").split("\n")
    assert len(lines) == 1, result.stderr
    assert str(missing) in lines[0]
    assert "Traceback" not in result.stderr


def test_cli_binary_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.walk"
    garbage.write_bytes(b"\xff\xfe\x00model")
    result = run_wgc("check", str(garbage))
    assert result.returncode == 2
    assert len(result.stderr.strip("\n").split("\n")) == 1, result.stderr
    assert "Traceback" not in result.stderr


def test_cli_shows_the_right_source_line_after_a_form_feed(tmp_path: Path) -> None:
    # The parser counts lines by "\n" only; the excerpt must too (str.splitlines also splits on
    # \f, \v, \x1c-\x1e, \x85, \u2028 and \u2029, which may appear in comments and strings).
    path = tmp_path / "ff.walk"
    path.write_text("model m # page one\fpage two\nimport wgc.models.llama as llama\nparam n: integer = 1\n",
                    encoding="utf-8")
    result = run_wgc("check", str(path))
    assert result.returncode == 1
    assert f"{path}:3:1: error[E027]" in result.stderr
    assert "   3 | param n: integer = 1" in result.stderr, result.stderr
