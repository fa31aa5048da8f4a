"""Robustness: whatever text it is given, `check_source` returns diagnostics (or none) in bounded
time. Never a Python exception, never a hang, and every span inside the source.

Inputs are the shipped models (models/*.walk, those that parse) and a program embedded here that
uses every construct, mutated: tokens and lines deleted, swapped and duplicated, random text and
bytes inserted, the file cut short, and deeply nested expressions and blocks spliced in.
"""

from __future__ import annotations

import re
import signal
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wgc.check import CheckResult, check_source
from wgc.diag.codes import CODES
from wgc.diag.diagnostic import Diagnostic
from wgc.lang.parser import parse

ROOT = Path(__file__).resolve().parents[2]

# Every construct of the language once; it must check clean (a test below says so).
EMBEDDED = """\
# A talking, seeing assistant.
model omni

import wgc.models.llama as llama
import wgc.models.vision as vision
import wgc.models.codec as codec

param max_new: int = 256 in 1..4096
param steps: int = 8 in 1..64
param guidance: float = 3.0 in 0.0..10.0
param voice: str = "alloy" in ["alloy", "echo"]

component llm: llama.Llama engine kv {
    prefill(ids: tokens)
    prefill_image(h: tensor[_, 3072; bf16])
    decode(tok: token) -> token
    talk(tok: token) -> token[16]
    denoise(x: tensor[N, 64; f32], t: scalar, w: float) -> tensor[N, 64; f32]
    const eos: token = 128258
    labels main, uncond
    weights = 7.2B
    dtype = bf16
    kv_layers = 28
    kv_heads = 8
    head_dim = 128
    max_seq_len = 8192
    hidden = 3072
}

component vit: vision.Siglip engine stateless {
    encode(img: image) -> tensor[_, 1152; bf16]
    project(h: tensor[P, 1152; bf16]) -> tensor[P, 3072; bf16]
    weights = 400M
}

component voc: codec.Vocoder engine stateless {
    decode(frames: token[_, 16]) -> audio
    noise(n: int) -> tensor[4, 64; f32]
    render(x: tensor[_, 64; f32]) -> image
}

stream speech: token[16] from llm to voc fixed(size=4) at_end flush after_end stop capacity 8
stream frames: token[16] from llm to voc sliding(window=8, stride=4) at_end pad

walk read_text(ids: tokens) {
    llm.prefill(ids, cache=main)
}

walk see(img: image) {
    h = vit.encode(img)
    p = vit.project(h)
    llm.prefill_image(p, cache=main)
}

walk answer(first: token) -> token {
    loop until tok == llm.eos max max_new as i carry tok = first nospec {
        tok = llm.decode(tok)
        emit text tok
        f = llm.talk(tok)
        send f -> speech
        send f -> frames
    } yield terminal tok, accumulated tok as toks
    emit tensor toks
    return tok
}

walk draw(seed: token) {
    fork uncond from main
    x0 = voc.noise(4)
    loop steps - 1 as t carry x = x0 {
        parallel {
            branch cond {
                c = llm.denoise(x, t, guidance)
            }
            u = llm.denoise(x, t, 0.0)
        }
        x = c + (c - u) * guidance
    } yield terminal x
    emit image voc.render(x)
}

walk speak(chunk: token[_, 16]) on speech {
    wav = voc.decode(chunk)
    emit audio wav
}

walk listen(seed: token) {
    loop 16 {
        w = recv frames
        emit audio voc.decode(w)
    }
}

flow chat {
    start -> parts
    each parts: part in request.parts {
        text -> read_text
        image -> see when part.kind == "image" and "image" in request.inputs
    }
    parts -> answer -> draw -> done when "image" in request.outputs and not request.think
    answer -> listen -> done when voice == "echo"
    answer -> done
    draw -> done
}
"""


def _seeds() -> list[str]:
    models = []
    for path in sorted((ROOT / "models").glob("*.walk")):
        text = path.read_text(encoding="utf-8")
        if parse(text, path.name).program is not None:
            models.append(text)
    return [*models, EMBEDDED]


SEEDS = _seeds()
TOKEN = re.compile(
    r'"(?:[^"\\\n]|\\.)*"|#[^\n]*|\s+|[A-Za-z_][A-Za-z0-9_]*|[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?[KMBT]?'
    r"|->|==|!=|<=|>=|\.\.|.",
    re.S,
)
WORDS = sorted({t for s in SEEDS for t in TOKEN.findall(s) if t.strip() and not t.startswith("#")})

# ---- running with a time limit ------------------------------------------------------------------


class Hang(BaseException):  # BaseException: no `except Exception` in wgc may swallow it
    pass


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Fail with Hang if the body runs longer than `seconds` (POSIX; no limit elsewhere)."""
    if not hasattr(signal, "setitimer"):
        yield
        return

    def on_alarm(signum, frame) -> None:
        raise Hang(f"no result after {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _where(err: BaseException) -> str:
    """The innermost wgc frames and the frame that raised: enough to find the bug, unlike a
    thousand frames of a RecursionError."""
    frames = traceback.extract_tb(err.__traceback__)
    ours = [f for f in frames if "/wgc/" in f.filename.replace("\\", "/")][-4:]
    shown = ours + [f for f in frames[-2:] if f not in ours]
    return "".join(traceback.format_list(shown))


def check_within(source: str, seconds: float) -> CheckResult:
    failure = None
    try:
        with time_limit(seconds):
            result = check_source(source, "fuzz.walk")
    except (Exception, Hang) as err:  # noqa: BLE001 - any exception is the finding; report it briefly
        failure = f"check_source raised {type(err).__name__}: {err}\n{_where(err)}"
    if failure is not None:
        pytest.fail(failure, pytrace=False)
    assert isinstance(result, CheckResult)
    for d in result.diagnostics:
        assert isinstance(d, Diagnostic)
        assert d.code in CODES, d.code
        assert d.message and isinstance(d.message, str)
        assert d.span.line >= 1 and d.span.column >= 1, d
    if result.program is None:
        assert any(d.is_error for d in result.diagnostics), "no program and no error"
    return result


# ---- deep nesting -------------------------------------------------------------------------------

def nested(kind: str, n: int) -> str:
    """A statement (or a block) nested `n` deep, for a walk body where `a` is a float."""
    if kind == "parens":
        return "x = " + "(" * n + "a" + ")" * n
    if kind == "not":
        return "x = " + "not " * n + "true"
    if kind == "sum":
        return "x = " + " + ".join(["a"] * n)
    if kind == "and":
        return "x = " + " and ".join(["true"] * n)
    if kind == "negate":
        return "x = " + "- " * n + "a"
    if kind == "index":
        return "x = a" + "[0]" * n
    if kind == "attribute":
        return "x = a" + ".b" * n
    if kind == "loops":
        return "loop 2 { " * n + "x = a" + " }" * n
    if kind == "branches":
        return "parallel { branch b { " * n + "x = a" + " } }" * n
    raise ValueError(kind)


NESTINGS = ("parens", "not", "sum", "and", "negate", "index", "attribute", "loops", "branches")


def deep_program(statement: str) -> str:
    return (
        "model deep\nparam a: float = 1.0 in 0.0..2.0\n"
        f"walk w() {{\n{statement}\n}}\n"
        "flow { start -> w -> done }\n"
    )


# ---- mutations ----------------------------------------------------------------------------------

Draw = Callable


def _tokens(source: str) -> list[str]:
    return TOKEN.findall(source) or [""]


def _lines(source: str) -> list[str]:
    return source.split("\n")


def delete_token(draw: Draw, s: str) -> str:
    t = _tokens(s)
    i = draw(st.integers(0, len(t) - 1))
    return "".join(t[:i] + t[i + 1:])


def swap_tokens(draw: Draw, s: str) -> str:
    t = _tokens(s)
    i, j = draw(st.integers(0, len(t) - 1)), draw(st.integers(0, len(t) - 1))
    t[i], t[j] = t[j], t[i]
    return "".join(t)


def duplicate_token(draw: Draw, s: str) -> str:
    t = _tokens(s)
    i = draw(st.integers(0, len(t) - 1))
    return "".join(t[: i + 1] + t[i:])


def replace_token(draw: Draw, s: str) -> str:
    t = _tokens(s)
    i = draw(st.integers(0, len(t) - 1))
    t[i] = draw(st.sampled_from(WORDS))
    return "".join(t)


def delete_line(draw: Draw, s: str) -> str:
    lines = _lines(s)
    i = draw(st.integers(0, len(lines) - 1))
    return "\n".join(lines[:i] + lines[i + 1:])


def swap_lines(draw: Draw, s: str) -> str:
    lines = _lines(s)
    i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
    lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def duplicate_line(draw: Draw, s: str) -> str:
    lines = _lines(s)
    i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines)))
    return "\n".join(lines[:j] + [lines[i]] + lines[j:])


def insert_text(draw: Draw, s: str) -> str:
    junk = draw(st.one_of(
        st.text(max_size=12),  # any unicode, control characters included
        st.binary(max_size=12).map(lambda b: b.decode("latin-1")),
        st.binary(max_size=12).map(lambda b: b.decode("utf-8", "replace")),
        st.sampled_from(["\x00", "\r", "\r\n", "\t", "\f", "\v", "\x85", "\u2028", "\ufeff", "\"", "#", "{", "}",
                         "(", ")", "[", "]", "->", "..", "é", "→", "𝓍", "1e", "7.2", "7B", "-", "=="]),
    ))
    i = draw(st.integers(0, len(s)))
    return s[:i] + junk + s[i:]


def truncate(draw: Draw, s: str) -> str:
    return s[: draw(st.integers(0, len(s)))]


_WALK_HEAD = re.compile(r"\s*walk\b.*\{\s*$")


def splice_deep(draw: Draw, s: str) -> str:
    """A deeply nested statement as the first statement of a walk (so that the program still
    parses), or now and then on any line."""
    kind = draw(st.sampled_from(NESTINGS))
    n = draw(st.sampled_from([1, 2, 10, 63, 64, 65, 200, 500, 1000, 3000]))
    lines = _lines(s)
    bodies = [i + 1 for i, line in enumerate(lines) if _WALK_HEAD.match(line)]
    if bodies and draw(st.sampled_from([True, True, True, False])):
        i = draw(st.sampled_from(bodies))
    else:
        i = draw(st.integers(0, len(lines)))
    return "\n".join(lines[:i] + [nested(kind, n)] + lines[i:])


SMALL_MUTATIONS = (delete_token, swap_tokens, duplicate_token, replace_token, delete_line, swap_lines,
                   duplicate_line, insert_text, truncate)


@st.composite
def mutated_programs(draw: Draw) -> str:
    """Mostly 1-5 small mutations; one program in four gets a deeply nested statement instead,
    with at most two small mutations."""
    source = draw(st.sampled_from(SEEDS))
    deep = draw(st.sampled_from([True, False, False, False]))
    if deep:
        source = splice_deep(draw, source)
    for _ in range(draw(st.integers(0 if deep else 1, 2 if deep else 5))):
        mutate = draw(st.sampled_from(SMALL_MUTATIONS))
        source = mutate(draw, source)
    return source


# ---- the properties ---------------------------------------------------------------------------


def test_the_embedded_program_checks_clean() -> None:
    result = check_source(EMBEDDED, "embedded.walk")
    assert result.diagnostics == (), [f"{d.span} {d.code} {d.message}" for d in result.diagnostics]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                   HealthCheck.large_base_example])
@given(mutated_programs())
def test_mutated_programs_give_diagnostics_not_exceptions(source: str) -> None:
    check_within(source, seconds=10)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300))
def test_random_text_gives_diagnostics_not_exceptions(source: str) -> None:
    check_within(source, seconds=10)


@pytest.mark.parametrize(
    ("kind", "n"),
    [("parens", 5000), ("loops", 5000), ("branches", 5000)] + [(k, 20_000) for k in NESTINGS[1:7]],
)
def test_deep_nesting_gives_a_result(kind: str, n: int) -> None:
    # A clean check or diagnostics (E002 for nesting beyond the limit): anything but a crash.
    result = check_within(deep_program(nested(kind, n)), seconds=60)
    assert all(d.code != "E001" for d in result.diagnostics), [d.message for d in result.diagnostics]


def test_long_flow_condition_gives_a_result() -> None:
    when = " or ".join(["request.think"] * 20_000)
    flow = f"flow {{ start -> w -> done when {when}\n    w -> done }}"
    check_within(deep_program("x = a").replace("flow { start -> w -> done }", flow), seconds=60)


def test_many_statements_and_a_long_chain_check_quickly() -> None:
    walks = "\n".join(f"walk w{i}() {{ x{i} = a }}" for i in range(2000))
    chain = " -> ".join(["start", *(f"w{i}" for i in range(2000)), "done"])
    source = f"model wide\nparam a: float = 1.0 in 0.0..2.0\n{walks}\nflow {{ {chain} }}\n"
    result = check_within(source, seconds=30)
    assert not [d for d in result.diagnostics if d.is_error]


# ---- spans lie inside the source ------------------------------------------------------------------


def _span_cases() -> Iterator[tuple[str, str]]:
    for path in sorted((ROOT / "tests" / "errors").glob("*.walk")):
        yield f"errors/{path.stem}", path.read_text(encoding="utf-8")
    lines = EMBEDDED.split("\n")
    for i in range(0, len(lines), 3):
        yield f"embedded-without-line-{i + 1}", "\n".join(lines[:i] + lines[i + 1:])
    for cut in (0, 1, 40, 400, len(EMBEDDED) // 2, len(EMBEDDED) - 3, len(EMBEDDED) - 1):
        yield f"embedded-cut-at-{cut}", EMBEDDED[:cut]
    yield "open-walk-with-newline", "model m\nwalk w() {\n"
    yield "open-walk-without-newline", "model m\nwalk w() {"
    yield "open-string", 'model m\nparam s: str = "abc\n'
    yield "only-whitespace", "\n\n   \n"
    yield "crlf", "model m\r\nwalk w() {\r\n  x = \r\n}\r\n"


SPAN_CASES = list(_span_cases())


@pytest.mark.parametrize("source", [c[1] for c in SPAN_CASES], ids=[c[0] for c in SPAN_CASES])
def test_every_span_lies_inside_the_source(source: str) -> None:
    # Lines are counted as the parser counts them, by "\n"; a final "\n" ends the last line
    # rather than starting an empty one. A span may end one column past its line (end of line).
    lines = source.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    result = check_within(source, seconds=10)
    for d in result.diagnostics:
        for where, span in [("primary", d.span)] + [(f"note {n.message!r}", n.span) for n in d.notes]:
            assert 1 <= span.line <= len(lines), f"{d.code} {d.message}: {where} line {span.line} of {len(lines)}"
            assert 1 <= span.column <= len(lines[span.line - 1]) + 1, f"{d.code} {d.message}: {where} {span}"
            assert (span.end_line, span.end_column) >= (span.line, span.column), f"{d.code}: {where} {span}"
            assert span.end_line <= len(lines), f"{d.code} {d.message}: {where} ends past the last line: {span}"
