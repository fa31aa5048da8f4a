"""`wgc fmt`: same tree, stable output, every comment kept, canonical layout.

Every valid program (the shipped models and the cases here, which between them
use every grammar rule and terminal) must reparse to the same AST, format to a
fixed point, and keep its multiset of comments. Exact-output tests pin the style.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wgc.diag.diagnostic import WgcError
from wgc.fmt.expr import format_expr
from wgc.fmt.printer import format_program, format_source
from wgc.lang import ast
from wgc.lang.parser import grammar_parser, parse
from wgc.lang.span import Span

ROOT = Path(__file__).resolve().parents[2]
CASE_DIR = Path(__file__).parent / "cases"
CASES = sorted(CASE_DIR.glob("*.walk"))
PROGRAMS = sorted(ROOT.glob("models/*.walk")) + CASES


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(ROOT)) for p in paths]


def _parsed(text: str, file: str = "t.walk"):
    result = parse(text, file)
    assert result.program is not None, result.diagnostics
    return result


def _comments(text: str) -> Counter[str]:
    # The formatter drops trailing whitespace (a `\r` too) from comments, nothing else.
    return Counter(c.text.rstrip() for c in _parsed(text).comments)


# ---- properties of every valid program --------------------------------------------


@pytest.fixture(params=PROGRAMS, ids=_ids(PROGRAMS))
def program(request: pytest.FixtureRequest) -> str:
    return request.param.read_text(encoding="utf-8")


def test_same_ast_after_formatting(program: str) -> None:
    assert _parsed(format_source(program, "t.walk")).program == _parsed(program).program


def test_formatting_is_idempotent(program: str) -> None:
    once = format_source(program, "t.walk")
    assert format_source(once, "t.walk") == once


def test_every_comment_kept_once(program: str) -> None:
    assert _comments(format_source(program, "t.walk")) == _comments(program)


def test_layout_is_canonical(program: str) -> None:
    out = format_source(program, "t.walk")
    assert out.endswith("\n") and not out.endswith("\n\n")
    assert "\n\n\n" not in out and not out.startswith("\n")
    lines = out.split("\n")[:-1]
    for i, line in enumerate(lines):
        assert line == line.rstrip(), f"trailing space on line {i + 1}"
        indent = len(line) - len(line.lstrip(" "))
        assert indent % 4 == 0 and not line[indent:].startswith("\t"), f"bad indent on line {i + 1}"
        if not line:
            code_before = lines[i - 1].split("  #")[0]
            assert not code_before.endswith("{"), f"blank line after `{{` at line {i + 1}"
            assert not lines[i + 1].lstrip().startswith("}"), f"blank line before `}}` at line {i + 1}"


def test_crlf_source_formats_like_lf(program: str) -> None:
    crlf = program.replace("\n", "\r\n")
    assert format_source(crlf, "t.walk") == format_source(program, "t.walk")


# ---- the cases really cover the language ----------------------------------------------


def test_cases_use_every_grammar_rule_and_terminal() -> None:
    parser = grammar_parser()
    rules = {
        str(r.alias or r.origin.name)
        for r in parser.rules
        if not str(r.origin.name).startswith("_") and (r.alias or not r.options.expand1)
    }
    used_rules: set[str] = set()
    used_terminals: set[str] = set()
    for path in CASES:
        text = path.read_text(encoding="utf-8")
        used_rules |= {str(t.data) for t in parser.parse(text).iter_subtrees()}
        used_terminals |= {tok.type for tok in parser.lex(text, dont_ignore=True)}
    assert rules - used_rules == set()
    assert {t.name for t in parser.terminals} - used_terminals == set()


def _nodes(node: object):
    if isinstance(node, tuple):
        for item in node:
            yield from _nodes(item)
    elif isinstance(node, ast.Node):
        yield node
        for value in vars(node).values():
            yield from _nodes(value)


def test_cases_use_every_node_type_and_operator() -> None:
    nodes = [n for path in CASES for n in _nodes(_parsed(path.read_text(encoding="utf-8")).program)]
    node_types = {v for v in vars(ast).values() if isinstance(v, type) and issubclass(v, ast.Node)} - {ast.Node}
    assert node_types - {type(n) for n in nodes} == set()
    binary = {n.op for n in nodes if isinstance(n, ast.Binary)}
    assert binary == {"or", "and", "==", "!=", "<", "<=", ">", ">=", "in", "+", "-", "*", "/", "%"}
    assert {n.op for n in nodes if isinstance(n, ast.Unary)} == {"-", "not"}


# ---- exact output ---------------------------------------------------------------------

EXACT = {
    "parentheses": (
        "model m walk w() { x = ((a + b)) * (c) y = -(a.b) z = (-a).b v = (f)(x)[(0)] u = not (a == b) }",
        "model m\n\nwalk w() {\n    x = (a + b) * c\n    y = -a.b\n    z = (-a).b\n    v = f(x)[0]\n"
        "    u = not a == b\n}\n",
    ),
    "associativity": (
        "model m walk w() { a1 = a - (b - c) a2 = (a - b) - c a3 = a / (b * c) a4 = (a * b) / c"
        " a5 = (a == b) == c a6 = a and (b and c) a7 = (a or b) and c a8 = a or (b and c) }",
        "model m\n\nwalk w() {\n    a1 = a - (b - c)\n    a2 = a - b - c\n    a3 = a / (b * c)\n    a4 = a * b / c\n"
        "    a5 = (a == b) == c\n    a6 = a and (b and c)\n    a7 = (a or b) and c\n    a8 = a or b and c\n}\n",
    ),
    "comments": (
        "# head\nmodel m # on model\nwalk w() { # on header\n  x = f(a, # inside\n  b) # after\n"
        "  # before close\n} # after close\n# tail\n",
        "# head\nmodel m  # on model\n\nwalk w() {  # on header\n    # inside\n    x = f(a, b)  # after\n"
        "    # before close\n}  # after close\n# tail\n",
    ),
    "blank lines": (
        "\n\nmodel m\nimport a as b\nparam p: int\n\n\n\nparam q: int\nparam r: int\n"
        "walk w() {\n\n  x = 1\n\n\n  y = 2\n  z = 3\n\n}\nflow { start -> w -> done }\n\n\n",
        "model m\nimport a as b\n\nparam p: int\n\nparam q: int\nparam r: int\n\n"
        "walk w() {\n    x = 1\n\n    y = 2\n    z = 3\n}\n\nflow {\n    start -> w -> done\n}\n",
    ),
    "clauses in canonical order, policy arguments as written": (
        "model m stream s: token from a to b fixed(4) capacity 2 at_end pad "
        "stream t: token from a to b fixed(size=4) "
        "walk w() { loop 3 nospec carry x = 0 as i carry y {} yield accumulated x as xs, terminal y }",
        "model m\n\nstream s: token from a to b fixed(4) at_end pad capacity 2\n"
        "stream t: token from a to b fixed(size=4)\n\n"
        "walk w() {\n    loop 3 as i carry x = 0 carry y nospec {} yield accumulated x as xs, terminal y\n}\n",
    ),
    "literals": (
        'model m param f: float = -1.50 walk w() { s = "a\\"b\\\\c\\nd\\te" x = f(cache = main, 2.0e-3, 007) }',
        'model m\n\nparam f: float = -1.50\n\nwalk w() {\n    s = "a\\"b\\\\c\\nd\\te"\n'
        "    x = f(2.0e-3, 7, cache=main)\n}\n",
    ),
    "empty blocks": (
        "model m component c: a.B engine kv {} component d: a.B engine kv { # note\n}"
        " walk w() { parallel { } loop 2 { # inside\n } }",
        "model m\n\ncomponent c: a.B engine kv {}\n\ncomponent d: a.B engine kv {  # note\n}\n\n"
        "walk w() {\n    parallel {}\n    loop 2 {  # inside\n    }\n}\n",
    ),
    "flows": (
        'model m flow thinker when "audio" in request.outputs { start -> a -> done when x > 1 '
        "each e: p in request.parts { text -> a when p.kind == \"text\" _ -> a -> b } }",
        'model m\n\nflow thinker when "audio" in request.outputs {\n    start -> a -> done when x > 1\n'
        '    each e: p in request.parts {\n        text -> a when p.kind == "text"\n        _ -> a -> b\n'
        "    }\n}\n",
    ),
    "comments only": ("\n# one\n\n\n# two   \n", "# one\n\n# two\n"),
    "nothing": ("  \n\n", ""),
}


@pytest.mark.parametrize(("source", "expected"), EXACT.values(), ids=EXACT.keys())
def test_exact_output(source: str, expected: str) -> None:
    assert format_source(source, "t.walk") == expected


def test_syntax_error_raises_with_diagnostics() -> None:
    with pytest.raises(WgcError) as err:
        format_source("model m\nwalk w( {", "bad.walk")
    assert err.value.diagnostics and err.value.diagnostics[0].code == "E001"
    with pytest.raises(WgcError):
        format_program(parse("walk", "bad.walk"))


# ---- comments anywhere ------------------------------------------------------------------

_GAP_SOURCE = (CASE_DIR / "spacing.walk").read_text(encoding="utf-8")


@pytest.mark.slow
@pytest.mark.parametrize("comment", ["  # gap\n", "\n# gap\n"], ids=["trailing", "own-line"])
def test_a_comment_between_any_two_tokens_is_kept(comment: str) -> None:
    canonical = format_source(_GAP_SOURCE, "t.walk")
    tree = _parsed(canonical).program
    tokens = list(grammar_parser().lex(canonical))
    for tok in tokens[:-1]:
        text = canonical[: tok.end_pos] + comment + canonical[tok.end_pos :]
        out = format_source(text, "t.walk")
        assert _parsed(out).program == tree, f"after {tok!r}"
        assert _comments(out) == Counter({"# gap": 1}), f"after {tok!r}:\n{out}"
        assert format_source(out, "t.walk") == out, f"after {tok!r}:\n{out}"


# ---- expressions: fewest parentheses that still parse back --------------------------------

_AT = Span("t.walk", 1, 1, 1, 1)
_NAMES = st.sampled_from(["a", "b", "llm", "request"]).map(lambda n: ast.Name(_AT, n))
_LEAVES = st.one_of(
    _NAMES,
    st.integers(0, 10**12).map(lambda v: ast.IntLit(_AT, v)),
    st.sampled_from(["1.5", "0.25e-3", "2E5"]).map(lambda t: ast.FloatLit(_AT, float(t), t)),
    st.text(alphabet='ab "\\\n\t#{}é', max_size=6).map(lambda s: ast.StrLit(_AT, s)),
    st.sampled_from([("7.2B", 7_200_000_000), ("3K", 3000)]).map(lambda s: ast.SizeLit(_AT, s[1], s[0])),
    st.booleans().map(lambda b: ast.BoolLit(_AT, b)),
    st.sampled_from(["codes", "frames"]).map(lambda s: ast.Recv(_AT, s)),
)
_BINARY_OPS = ["or", "and", "==", "!=", "<", "<=", ">", ">=", "in", "+", "-", "*", "/", "%"]


def _compound(sub: st.SearchStrategy) -> st.SearchStrategy:
    kwargs = st.lists(st.builds(lambda v: ast.KeywordArg(_AT, "cache", v), sub), max_size=1)
    return st.one_of(
        st.builds(lambda op, x, y: ast.Binary(_AT, op, x, y), st.sampled_from(_BINARY_OPS), sub, sub),
        st.builds(lambda op, x: ast.Unary(_AT, op, x), st.sampled_from(["-", "not"]), sub),
        st.builds(lambda x: ast.Attribute(_AT, x, "eos"), sub),
        st.builds(lambda x, i: ast.Index(_AT, x, i), sub, sub),
        st.builds(lambda f, a, k: ast.Call(_AT, f, tuple(a), tuple(k)), sub, st.lists(sub, max_size=2), kwargs),
    )


_EXPRS = st.recursive(_LEAVES, _compound, max_leaves=12)


def _parse_expr(text: str) -> ast.Expr | None:
    result = parse(f"model m walk w() {{ x = {text} }}", "t.walk")
    return result.program.decls[1].body[0].value if result.program is not None else None


def _grouping_parens(text: str) -> list[tuple[int, int]]:
    """Pairs of `(`/`)` that group (not call parentheses), outside strings."""
    pairs, stack = [], []
    for m in re.finditer(r'"(?:[^"\\\n]|\\.)*"|[()]', text):
        if m.group() == "(":
            call = m.start() > 0 and re.match(r'[\w)\]"]', text[m.start() - 1])
            stack.append((m.start(), bool(call)))
        elif m.group() == ")":
            start, call = stack.pop()
            if not call:
                pairs.append((start, m.start()))
    return pairs


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_EXPRS)
def test_expressions_reparse_with_fewest_parentheses(expr: ast.Expr) -> None:
    text = format_expr(expr)
    assert _parse_expr(text) == expr, text
    for start, end in _grouping_parens(text):
        stripped = text[:start] + " " + text[start + 1 : end] + " " + text[end + 1 :]
        assert _parse_expr(stripped) != expr, f"redundant parentheses in {text}"
