"""The Vim syntax, headless: Vim (and Neovim where installed) opens each model program with only
grammar/editors/vim on its runtimepath, and reports the filetype, any error, and the syntax group
at chosen positions, which must link to the standard groups."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.editors.helpers import LARK, MODELS, VIM, lark_keywords, need_vim, run, shown, unavailable

TYPES = r"token|tokens|tensor|image|audio|video|text|action|scalar|seq|int|float|bool|str"

# (pattern over a line's code, the syntax item at the first group, the group it links to, and
# the highlight group that chain ends in with Vim's default links).
PROBES: tuple[tuple[str, str, str, str], ...] = (
    (r"^(model)\b", "walkDeclaration", "Keyword", "Statement"),
    (r"^model (\w+)", "walkModelName", "Identifier", "Identifier"),
    (r"^(import)\b", "walkInclude", "Include", "PreProc"),
    (r"\b(as)\b", "walkKeyword", "Keyword", "Statement"),
    (r"^(param)\b", "walkDeclaration", "Keyword", "Statement"),
    (r"^param (\w+)", "walkParamName", "Identifier", "Identifier"),
    (r"^(component)\b", "walkStructure", "Structure", "Type"),
    (r"^component (\w+)", "walkComponentName", "Type", "Type"),
    (r"\b(engine)\b", "walkKeyword", "Keyword", "Statement"),
    (r"\bengine (\w+)", "walkEngineKind", "Constant", "Constant"),
    (r"^ +(\w+)\(", "walkFunctionName", "Function", "Identifier"),
    (r"\b(const)\b", "walkDeclaration", "Keyword", "Statement"),
    (r"\bconst (\w+)", "walkConstName", "Constant", "Constant"),
    (r"\b(labels)\b", "walkDeclaration", "Keyword", "Statement"),
    (r"\blabels (\w+)", "walkLabelName", "Identifier", "Identifier"),
    (r"^(stream)\b", "walkStructure", "Structure", "Type"),
    (r"^stream (\w+)", "walkStreamName", "Identifier", "Identifier"),
    (r"\b(from|to|capacity|at_end|after_end)\b", "walkKeyword", "Keyword", "Statement"),
    (r"\b(fixed|sliding|left_context)\(", "walkPolicy", "Function", "Identifier"),
    (r"\b(?:at_end|after_end) (\w+)", "walkEndRule", "Constant", "Constant"),
    (r"^(walk)\b", "walkDeclaration", "Keyword", "Statement"),
    (r"^walk (\w+)", "walkFunctionName", "Function", "Identifier"),
    (r"\b(on)\b", "walkKeyword", "Keyword", "Statement"),
    (r"\b(loop|until|max)\b", "walkRepeat", "Repeat", "Statement"),
    (r"\b(carry|nospec|terminal|accumulated)\b", "walkKeyword", "Keyword", "Statement"),
    (r"\b(send|emit|fork|recv|return|parallel|branch|yield|each)\b", "walkStatement", "Statement", "Statement"),
    (r"\b(when)\b", "walkConditional", "Conditional", "Statement"),
    (r"\b(and|or|not|in)\b", "walkOperatorWord", "Operator", "Statement"),
    (r"\.(\w+)\(", "walkCall", "Function", "Identifier"),
    (r"^(flow)\b", "walkDeclaration", "Keyword", "Statement"),
    (r"^flow (\w+)", "walkFlowName", "Function", "Identifier"),
    (r"\b(start|done)\s*->", "walkFlowState", "Constant", "Constant"),
    (r"->\s*(start|done)\b", "walkFlowState", "Constant", "Constant"),
    (r"(->)", "walkOperator", "Operator", "Statement"),
    (r"\w (==|>=|<=|!=|\.\.|=) ", "walkOperator", "Operator", "Statement"),
    (rf"\b({TYPES})\b", "walkType", "Type", "Type"),
    (r"; (\w+)\]", "walkDtype", "Type", "Type"),
    (r"\bdtype = (\w+)", "walkAttrDtype", "Type", "Type"),
    (r"\[([A-Z])\b", "walkDim", "Identifier", "Identifier"),
    (r"\[(_)\b", "walkWildcard", "Constant", "Constant"),
    (r"\b(true|false)\b", "walkBoolean", "Boolean", "Constant"),
    (r"(?<![\w.])(\d+(?:\.\d+)?[KMBT])\b", "walkSize", "Number", "Constant"),
    (r"= (\d+\.\d+)\b", "walkFloat", "Float", "Constant"),
    (r"= (\d+)$", "walkNumber", "Number", "Constant"),
    (r'("[^"]*")', "walkString", "String", "Constant"),
)
COMMENT = ("walkComment", "Comment", "Comment")

# The models leave a few constructs out; this program has them.
SAMPLE = """\
# SAMPLE: constructs the shipped models do not use
model sample
param fast: bool = true
component a: m.A engine kv {
    f(x: tokens) -> token
}
component b: m.B engine stateless {
    g(x: token[_]) -> text
}
stream s: token from a to b fixed(size=4) at_end pad after_end stop capacity 16
walk w(x: tokens) {
    loop 4 as i nospec {
        send a.f(x) -> s
    }
}
walk r(chunk: token[_]) on s {
    emit text b.g(chunk)
}
flow {
    start -> w -> done
}
"""


@dataclass(frozen=True)
class Probe:
    file: str
    line: int
    col: int  # 1-based byte column, as synID takes it
    word: str
    expected: tuple[str, str, str] | None  # None: any syntax group at all


def _line_probes(file: str, number: int, line: str, keywords: frozenset[str]) -> list[Probe]:
    hash_at = line.find("#")
    code = line if hash_at < 0 else line[:hash_at]
    # Strings blanked out (same length) for every probe but the string one.
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', lambda m: " " * len(m.group()), code)
    found: list[tuple[int, str, tuple[str, str, str] | None]] = []
    if hash_at >= 0:
        found.append((hash_at, "#", COMMENT))
    for pattern, *expected in PROBES:
        text = code if expected[0] == "walkString" else bare
        found += [(m.start(1), m.group(1), tuple(expected)) for m in re.finditer(pattern, text)]
    found += [(m.start(), m.group(), None) for m in re.finditer(r"\b\w+\b", bare) if m.group() in keywords]
    return [Probe(file, number, len(line[:index].encode()) + 1, word, expected) for index, word, expected in found]


def _probes(path: Path, keywords: frozenset[str]) -> list[Probe]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [p for number, line in enumerate(lines, 1) for p in _line_probes(str(path), number, line, keywords)]


SCRIPT = r"""
let s:out = []
let s:probes = json_decode(join(readfile(%(probes)s), "\n"))
filetype on
syntax on
for s:file in %(files)s
  let v:errmsg = ''
  redir => s:messages
  execute 'edit ' . fnameescape(s:file)
  redir END
  call add(s:out, {'file': s:file, 'filetype': &filetype, 'syntax': get(b:, 'current_syntax', ''),
        \ 'errmsg': v:errmsg, 'messages': s:messages})
  for s:p in filter(copy(s:probes), 'v:val.file ==# s:file')
    let s:id = synID(s:p.line, s:p.col, 1)
    let s:name = synIDattr(s:id, 'name')
    let s:link = s:name ==# '' ? '' : matchstr(execute('highlight ' . s:name), 'links to \zs\w\+')
    call add(s:out, {'file': s:file, 'line': s:p.line, 'col': s:p.col, 'word': s:p.word, 'item': s:name,
          \ 'link': s:link, 'final': synIDattr(synIDtrans(s:id), 'name')})
  endfor
  bwipeout!
endfor
call writefile([json_encode(s:out)], %(result)s)
qall!
"""


def _vimstr(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _run_editor(command: list[str], files: list[Path], tmp_path: Path) -> tuple[list[dict], list[Probe]]:
    keywords = lark_keywords(LARK.read_text())
    probes = [p for f in files for p in _probes(f, keywords)]
    (tmp_path / "probes.json").write_text(json.dumps([p.__dict__ for p in probes]))
    result_file = tmp_path / "result.json"
    script = tmp_path / "probe.vim"
    script.write_text(SCRIPT % {
        "probes": _vimstr(str(tmp_path / "probes.json")),
        "files": "[" + ", ".join(_vimstr(str(f)) for f in files) + "]",
        "result": _vimstr(str(result_file)),
    })
    proc = run([*command, "--cmd", f"set rtp^={VIM}", "-S", str(script)], VIM, timeout=60)
    assert result_file.is_file(), "the editor wrote no result\n" + shown(proc)
    return json.loads(result_file.read_text()), probes


@pytest.fixture(params=["vim", "nvim"])
def editor(request: pytest.FixtureRequest) -> list[str]:
    if request.param == "vim":
        return [need_vim(), "-es", "-N", "-u", "NONE", "-i", "NONE"]
    nvim = shutil.which("nvim")
    if nvim is None:
        unavailable("`nvim` is not installed (apt-get install neovim): the syntax is checked with Vim only")
    return [nvim, "--headless", "-es", "-u", "NONE", "-i", "NONE"]


def test_models_highlight_with_the_standard_groups(editor: list[str], tmp_path: Path) -> None:
    sample = tmp_path / "sample.walk"
    sample.write_text(SAMPLE)
    files = [*MODELS, sample]
    results, probes = _run_editor(editor, files, tmp_path)

    opened = {r["file"]: r for r in results if "filetype" in r}
    assert sorted(opened) == sorted(map(str, files))
    for result in opened.values():
        assert (result["filetype"], result["syntax"]) == ("walk", "walk"), result
        assert result["errmsg"] == "", result
        assert not re.search(r"\bE\d+:", result["messages"]), result

    seen = {(r["file"], r["line"], r["col"]): r for r in results if "item" in r}
    assert len(seen) == len({(p.file, p.line, p.col) for p in probes})
    wrong = []
    for probe in probes:
        got = seen[(probe.file, probe.line, probe.col)]
        actual = (got["item"], got["link"], got["final"])
        if probe.expected is None and not got["item"] or probe.expected is not None and actual != probe.expected:
            where = f"{Path(probe.file).name}:{probe.line}:{probe.col}"
            wrong.append(f"{where} {probe.word!r}: {actual}, expected {probe.expected or 'a syntax group'}")
    assert not wrong, "\n".join(wrong)

    # Every probe pattern met something, so none of them checks nothing.
    met = {p.expected for p in probes if p.expected is not None}
    assert {tuple(e) for _, *e in PROBES} | {COMMENT} <= met


def test_a_broken_syntax_file_is_noticed(editor: list[str], tmp_path: Path) -> None:
    """The harness sees errors: a syntax file with a bad command reports it through v:errmsg."""
    broken = tmp_path / "rtp"
    shutil.copytree(VIM, broken)
    syntax = broken / "syntax" / "walk.vim"
    syntax.write_text(syntax.read_text().replace("syntax case match", "syntax case match\nsyntax nosuchcommand"))
    program = tmp_path / "p.walk"
    program.write_text("model p\n")
    script = tmp_path / "probe.vim"
    result_file = tmp_path / "result.json"
    script.write_text(
        "filetype on\nsyntax on\nlet v:errmsg = ''\nredir => s:messages\n"
        f"execute 'edit ' . fnameescape({_vimstr(str(program))})\nredir END\n"
        f"call writefile([json_encode([&filetype, v:errmsg, s:messages])], {_vimstr(str(result_file))})\nqall!\n")
    proc = run([*editor, "--cmd", f"set rtp^={broken}", "-S", str(script)], tmp_path, timeout=60)
    assert result_file.is_file(), shown(proc)
    filetype, errmsg, messages = json.loads(result_file.read_text())
    assert filetype == "walk"
    assert re.match(r"E\d+:", errmsg), errmsg
    assert errmsg in messages, messages
